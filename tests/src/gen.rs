//! The one random client-like input generator, used by the simulation's chaos source
//! ([`crate::sim`]), the model-based tests (`tests/mbt.rs`) and the determinism tests
//! (`tests/determinism.rs`).
//!
//! A [`ClientLike`] produces inputs the way a population of clients and a host would send
//! them: mostly to the sessions opened last (likely alive), sometimes to any id up to one
//! not opened yet; request numbers per session that advance, repeat the latest (a retry)
//! or go one back (stale); every input stamped with the host's clock, which mostly stays
//! or moves forward by 1–2, sometimes jumps 5–16 ticks (sessions expire and waits time
//! out inside the next message's advance, with no tick before it), and rarely is one
//! behind (a refused `TimeWentBackwards`); explicit ticks only now and then. A `hostile`
//! share of the inputs are deliberate faults ([`ClientLike::hostile`]).
//!
//! Semaphores, labels and watches: one name of the profile (the third) is used mostly as
//! a semaphore (`Permits` of 1–3 out of 3, now and then another limit: `LimitMismatch`),
//! the others now and then with permits too (`LimitMismatch` against a plain lock); some
//! sessions are opened with a label; clients watch and unwatch the names; some releases
//! name the hold by a token (`ReleaseHold`), most of them one the session does not hold.
//!
//! The randomness comes from a [`Source`]: a seeded [`Rng`] (determinism, simulation) or
//! a fixed list of draws ([`Draws`], which proptest generates and shrinks).

use std::collections::BTreeMap;

use fencelock::{Input, Label, LockName, Mode, SessionId, Tick, Token, Wait};

use crate::rng::Rng;

/// Where the generator's choices come from.
pub trait Source {
    /// A number in `0..n` (`n > 0`). Cost: O(1).
    fn below(&mut self, n: u64) -> u64;
}

impl Source for Rng {
    fn below(&mut self, n: u64) -> u64 {
        Rng::below(self, n)
    }
}

/// A fixed list of draws, taken in order (0 once exhausted): proptest generates the list
/// and shrinks it, and each step of a run reads its own list, so removing a step leaves
/// the others' choices unchanged.
#[derive(Clone, Debug)]
pub struct Draws<'a> {
    values: &'a [u32],
    at: usize,
}

impl<'a> Draws<'a> {
    /// Draws from `values`. Cost: O(1).
    pub fn new(values: &'a [u32]) -> Self {
        Draws { values, at: 0 }
    }
}

impl Source for Draws<'_> {
    fn below(&mut self, n: u64) -> u64 {
        let v = self.values.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        u64::from(v) % n
    }
}

/// The most draws one [`ClientLike::next`] takes: a step's list of this length gives it
/// all its choices.
pub const DRAWS_PER_INPUT: usize = 16;

/// About how many of the generated acquires are granted (measured over the determinism
/// seeds), for [`ClientLike::token`]'s guess.
const GRANTS_PER_100_ACQUIRES: u64 = 50;

/// The labels labelled sessions get (the empty one is "no label").
const LABELS: [&str; 4] = ["worker-1", "worker-2", "", "host-a/pid-4242"];

/// What a run looks like.
#[derive(Clone, Debug)]
pub struct Profile {
    /// Valid lock names to use (each within the service's `max_name_len`).
    pub locks: &'static [&'static str],
    /// A name longer than the service's `max_name_len` (`None`: no such faults).
    pub too_long: Option<&'static str>,
    /// Ttls of opened sessions are `1..=max_ttl`.
    pub max_ttl: u64,
    /// Percent of inputs that are deliberate faults ([`ClientLike::hostile`]).
    pub hostile: u64,
}

impl Default for Profile {
    /// Four locks (one a 12-byte name with a separator), ttls up to 60, 3 % hostile.
    fn default() -> Self {
        Profile {
            locks: &["a", "b", "c", "jobs/reindex"],
            too_long: None,
            max_ttl: 60,
            hostile: 3,
        }
    }
}

/// The generator's state: the host's clock, how many sessions were opened, the latest
/// request number per session.
#[derive(Clone, Debug)]
pub struct ClientLike {
    profile: Profile,
    now: u64,
    opened: u64,
    /// Acquires generated so far (a release naming a hold guesses its token from it).
    acquires: u64,
    last_request: BTreeMap<u64, u64>,
}

impl ClientLike {
    /// A generator starting at tick 0 with no session opened. Cost: O(1).
    pub fn new(profile: Profile) -> Self {
        ClientLike {
            profile,
            now: 0,
            opened: 0,
            acquires: 0,
            last_request: BTreeMap::new(),
        }
    }

    /// The host's clock so far. Cost: O(1).
    pub fn now(&self) -> u64 {
        self.now
    }

    /// `len` inputs from a seed. Cost: O(len log sessions).
    pub fn seeded(profile: Profile, seed: u64, len: usize) -> Vec<Input> {
        let mut rng = Rng::new(seed);
        let mut g = ClientLike::new(profile);
        (0..len).map(|_| g.next(&mut rng)).collect()
    }

    /// One input per list of draws (see [`Draws`]). Cost: O(steps log sessions).
    pub fn from_draws(profile: Profile, steps: &[[u32; DRAWS_PER_INPUT]]) -> Vec<Input> {
        let mut g = ClientLike::new(profile);
        steps.iter().map(|d| g.next(&mut Draws::new(d))).collect()
    }

    fn session(&mut self, src: &mut impl Source) -> SessionId {
        if src.below(10) == 0 || self.opened == 0 {
            SessionId(1 + src.below(self.opened + 1))
        } else {
            SessionId(self.opened - src.below(self.opened.min(5)))
        }
    }

    fn request(&mut self, src: &mut impl Source, session: SessionId) -> Option<u64> {
        let last = self.last_request.entry(session.0).or_default();
        match src.below(6) {
            0 => None,
            1 | 2 => Some(*last), // a retry (or the first number, 0)
            3 => Some(last.saturating_sub(1)),
            _ => {
                *last += 1;
                Some(*last)
            }
        }
    }

    /// A token for a release that names a hold: near the latest grant, which it guesses
    /// as a share of the acquires so far (it sees no reply, so many name no hold).
    fn token(&self, src: &mut impl Source) -> u64 {
        let latest = self.acquires * GRANTS_PER_100_ACQUIRES / 100;
        latest.saturating_sub(src.below(8)).max(1)
    }

    fn lock(&self, src: &mut impl Source) -> LockName {
        let names = self.profile.locks;
        LockName::new(names[src.below(names.len() as u64) as usize]).expect("a valid name")
    }

    /// The mode of an acquire of `lock`: the profile's third name is mostly a semaphore
    /// of 3 permits (sometimes asked with another limit), the others plain locks
    /// (sometimes asked with permits).
    fn mode(&self, src: &mut impl Source, lock: &LockName) -> Mode {
        let semaphore = self.profile.locks.get(2) == Some(&lock.as_str());
        let permits = |src: &mut dyn FnMut(u64) -> u64| {
            let limit: u32 = if src(10) == 0 { 2 } else { 3 };
            Mode::Permits {
                count: 1 + src(u64::from(limit)) as u32,
                limit,
            }
        };
        let mut draw = |n| src.below(n);
        match (semaphore, draw(20)) {
            (true, 0..=1) | (false, 0) => permits(&mut draw),
            (true, 2) | (false, 1..=13) => Mode::Exclusive,
            (false, _) => Mode::Shared,
            (true, _) => permits(&mut draw),
        }
    }

    /// The next input. Cost: O(log sessions).
    pub fn next(&mut self, src: &mut impl Source) -> Input {
        self.now += match src.below(20) {
            0..=14 => 0,
            15..=18 => 1 + src.below(2),
            _ if src.below(3) == 0 => 5 + src.below(12),
            _ => 1,
        };
        let stamp = if src.below(40) == 0 {
            Tick(self.now.saturating_sub(1))
        } else {
            Tick(self.now)
        };
        if src.below(100) < self.profile.hostile {
            let session = self.session(src);
            let last = self.last_request.get(&session.0).copied().unwrap_or(0);
            return self.hostile(src, stamp, Some((session, last)));
        }
        let session = self.session(src);
        let now = stamp;
        match src.below(24) {
            0..=1 => {
                self.opened += 1;
                let ttl = 1 + src.below(self.profile.max_ttl);
                match src.below(3) {
                    0 => Input::OpenLabeled {
                        now,
                        ttl,
                        label: Label::new(LABELS[src.below(LABELS.len() as u64) as usize])
                            .expect("a short label"),
                    },
                    _ => Input::OpenSession { now, ttl },
                }
            }
            2..=4 => Input::KeepAlive {
                now,
                session,
                request: self.request(src, session),
            },
            5 => Input::CloseSession {
                now,
                session,
                request: self.request(src, session),
            },
            6..=12 => {
                self.acquires += 1;
                let lock = self.lock(src);
                let request = self.request(src, session);
                let mode = self.mode(src, &lock);
                let wait = match src.below(5) {
                    0 => Wait::None,
                    1 | 2 => Wait::Until(Tick(now.0 + src.below(15))),
                    _ => Wait::Forever,
                };
                Input::Acquire {
                    now,
                    session,
                    lock,
                    mode,
                    wait,
                    request,
                }
            }
            13..=14 => Input::Release {
                now,
                lock: self.lock(src),
                request: self.request(src, session),
                session,
            },
            15 => Input::ReleaseHold {
                now,
                lock: self.lock(src),
                request: self.request(src, session),
                token: Token(self.token(src)),
                session,
            },
            16 => Input::Cancel {
                now,
                lock: self.lock(src),
                request: self.request(src, session),
                session,
            },
            17..=18 => Input::Watch {
                now,
                lock: self.lock(src),
                request: self.request(src, session),
                session,
            },
            19 => Input::Unwatch {
                now,
                lock: self.lock(src),
                request: self.request(src, session),
                session,
            },
            _ => Input::Tick { now },
        }
    }

    /// A deliberate fault stamped `now`: an unknown session, an empty or too long name, a
    /// zero or overflowing ttl, a time one tick back, or — for `target`, a session with its
    /// latest request number — a stale number or the latest one reused for another input.
    /// Most are refused; which error wins is the service's (and the reference model's)
    /// business. Cost: O(1).
    pub fn hostile(
        &mut self,
        src: &mut impl Source,
        now: Tick,
        target: Option<(SessionId, u64)>,
    ) -> Input {
        let any = SessionId(1 + src.below(self.opened + 20));
        let lock = self.lock(src);
        match (src.below(10), target) {
            (0, Some((session, last))) if last >= 1 => Input::KeepAlive {
                now,
                session,
                request: Some(last - 1),
            },
            (1, Some((session, last))) if last >= 1 => Input::Release {
                now,
                session,
                lock: LockName::new("zz").expect("name"),
                request: Some(last),
            },
            (2, _) => Input::KeepAlive {
                now,
                session: SessionId(1_000 + src.below(1_000)),
                request: None,
            },
            (3, _) => Input::Acquire {
                now,
                session: any,
                lock: match self.profile.too_long {
                    Some(long) => LockName::new(long).expect("within 64 bytes"),
                    None => LockName::default(),
                },
                mode: Mode::Exclusive,
                wait: Wait::None,
                request: None,
            },
            (4, _) => Input::Release {
                now,
                session: any,
                lock: LockName::default(),
                request: None,
            },
            (5, _) => Input::OpenSession { now, ttl: 0 },
            (8, _) => Input::Acquire {
                now,
                session: any,
                lock,
                // count 0, or more than the limit
                mode: match src.below(2) {
                    0 => Mode::Permits { count: 0, limit: 3 },
                    _ => Mode::Permits { count: 4, limit: 3 },
                },
                wait: Wait::Forever,
                request: None,
            },
            (9, Some((session, last))) if last >= 1 => Input::Watch {
                now,
                session,
                lock: LockName::new("zz").expect("name"),
                request: Some(last),
            },
            (6, _) => Input::OpenSession {
                now,
                // now + ttl overflows (at tick 0: a zero ttl)
                ttl: (u64::MAX - now.0).saturating_add(1 + src.below(3)) % u64::MAX,
            },
            _ => Input::Cancel {
                now: Tick(now.0.saturating_sub(1)),
                session: any,
                lock,
                request: None,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_gives_the_same_inputs_and_time_never_runs_backwards_by_more_than_one() {
        let a = ClientLike::seeded(Profile::default(), 7, 500);
        assert_eq!(a, ClientLike::seeded(Profile::default(), 7, 500));
        assert_ne!(a, ClientLike::seeded(Profile::default(), 8, 500));
        let mut high = 0;
        for i in &a {
            assert!(i.now().0 + 1 >= high, "{i:?} after {high}");
            high = high.max(i.now().0);
        }
        // Messages at later nows with no tick between them happen.
        assert!(a
            .windows(2)
            .any(|w| !matches!(w[1], Input::Tick { .. }) && w[1].now().0 >= w[0].now().0 + 5));
    }

    #[test]
    fn draws_run_out_as_zeros() {
        let mut d = Draws::new(&[7, 9]);
        assert_eq!((d.below(5), d.below(5), d.below(5)), (2, 4, 0));
    }
}
