//! A reference model of the lock service built from std collections: the semantics of
//! docs/SPEC.md written the plain way (vectors and maps, scans everywhere, no heaps, no
//! free lists, no hashing), so that the core's fast structures can be compared against it.
//!
//! It mirrors the documented contract of every input (docs/SPEC.md §2–§6): the advance to
//! the input's `now` first (its events stand even when the input is then refused), which
//! error wins when several apply, the caller's [`Reply`] apart from the events for others,
//! the order of events inside a close or an advance, idempotent-retry replies, and the
//! capacity accounting (a lock entry exists while held, awaited, watched or in lock-delay).
//!
//! Semaphores, labels and watches, stated the plain way:
//! * a name is a semaphore while a `Permits` claim holds or waits on it; its limit is that
//!   claim's; a different limit, a plain mode on a semaphore or permits on a plain lock is
//!   `LimitMismatch`; grants are strict FIFO: the head is granted while its count fits
//!   beside the permits in use, and the first that does not fit stops the scan;
//! * a session's label is copied into every holder, waiter and watcher event about it;
//! * a watch is a claim row; on `Watch` the watcher is told `Holding` for each current
//!   holder, then every holder change of the lock (right after the event or reply that
//!   tells the holder), watchers in the order they began; a watch ends with unwatch or
//!   with its session, before anything else that session's end does.

use std::collections::{BTreeMap, VecDeque};

use fencelock::{
    Capacity, Change, Config, Error, Holder, Input, Label, LockName, Mode, Output, Permits,
    ReleaseReason, Reply, SessionId, SessionInfo, Table, Tick, Token, Usage, Wait, Waiter,
};

/// What one input did, as the model predicts it: the caller's answer and, apart from it,
/// the events for others (the advance's first). A refused input's `events` are its
/// advance's, which stand (docs/SPEC.md §5).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    /// The caller's reply, or the refusal.
    pub result: Result<Reply, Error>,
    /// The events, in order.
    pub events: Vec<Output>,
}

/// What a numbered request answered, and for which arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Recorded {
    None,
    KeptAlive(u64),
    Granted(Mode, u64),
    Queued(Mode, u32),
    Busy,
    Released(u64),
    Cancelled,
    Watching(u32),
    Unwatched,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    KeepAlive,
    Acquire,
    Release,
    Cancel,
    Close,
    Watch,
    Unwatch,
}

/// The arguments a request number was used for (the lock and, for acquire, the mode; for
/// a release of a named hold, its token).
type Target = Option<(String, Option<Mode>, Option<u64>)>;

#[derive(Clone, Debug)]
struct Session {
    label: Label,
    ttl: u64,
    expires_at: u64,
    last_request: u64,
    last_reply: Recorded,
    last_target: Target,
}

#[derive(Clone, Debug)]
struct Claim {
    session: u64,
    lock: String,
    mode: Mode,
    holding: bool,
    /// A watch (neither holding nor waiting; `mode` and `value` unused).
    watch: bool,
    /// The token when holding; the deadline (u64::MAX = forever) when waiting.
    value: u64,
}

#[derive(Clone, Debug)]
struct Lock {
    id: u64,
    holders: Vec<u64>, // claim seqs, ascending
    waiters: VecDeque<u64>,
    watchers: Vec<u64>, // claim seqs in the order the watches began
    delay_until: u64,   // 0 = none
}

/// The reference model.
#[derive(Clone, Debug)]
pub struct Model {
    cap: Capacity,
    lock_delay: u64,
    max_name_len: u32,
    max_watchers: u32,
    now: u64,
    next_session: u64,
    revision: u64,
    next_seq: u64,
    next_lock: u64,
    sessions: BTreeMap<u64, Session>,
    locks: BTreeMap<String, Lock>,
    claims: BTreeMap<u64, Claim>,
}

impl Model {
    /// An empty model with these capacities and settings (and the default
    /// `max_watchers`).
    pub fn new(cap: Capacity, lock_delay: u64, max_name_len: u32) -> Model {
        Model::from_config(
            cap,
            Config {
                lock_delay,
                max_name_len,
                ..Config::default()
            },
        )
    }

    /// An empty model of a service with these capacities and this configuration.
    pub fn from_config(cap: Capacity, config: Config) -> Model {
        Model {
            cap,
            lock_delay: config.lock_delay,
            max_name_len: config.max_name_len,
            max_watchers: config.max_watchers,
            now: 0,
            next_session: 1,
            revision: 0,
            next_seq: 1,
            next_lock: 1,
            sessions: BTreeMap::new(),
            locks: BTreeMap::new(),
            claims: BTreeMap::new(),
        }
    }

    /// Applies one input with an unbounded sink: `TimeWentBackwards` changes nothing;
    /// otherwise the advance to the input's `now` happens and stands, then the input
    /// itself is applied, or refused with nothing changed beyond the advance.
    pub fn apply(&mut self, input: &Input) -> Step {
        self.apply_with_room(input, usize::MAX)
    }

    /// [`apply`](Self::apply) with a sink that has `room` free places: less than
    /// [`max_events`](Self::max_events) is `BufferTooSmall`, checked after the time and
    /// before anything changes.
    pub fn apply_with_room(&mut self, input: &Input, room: usize) -> Step {
        let now = input.now().0;
        if now < self.now {
            return Step {
                result: Err(Error::TimeWentBackwards {
                    now: Tick(self.now),
                    requested: Tick(now),
                }),
                events: Vec::new(),
            };
        }
        let need = self.max_events();
        if room < need {
            return Step {
                result: Err(Error::BufferTooSmall { need: need as u32 }),
                events: Vec::new(),
            };
        }
        let mut events = Vec::new();
        self.advance(now, &mut events);
        let advanced = events.len();
        let mut next = self.clone();
        let result = next.step(input, &mut events);
        match result {
            Ok(_) => *self = next,
            // Nothing beyond the advance (every step checks before it emits anything).
            Err(_) => events.truncate(advanced),
        }
        Step { result, events }
    }

    /// The most events one input can emit now, as the core documents it:
    /// `S + 2·H + (2·H + 1) · min(max_watchers, W)` with `S` sessions, `H` holds and waits,
    /// `W` watches (a session expires once; a hold or wait changes holder at most twice in
    /// one input, an acquire's new claim once; each change reaches every watcher of its
    /// lock).
    pub fn max_events(&self) -> usize {
        let watches = self.claims.values().filter(|c| c.watch).count();
        let h = self.claims.len() - watches;
        let w = watches.min(self.max_watchers as usize);
        self.sessions.len() + 2 * h + (2 * h + 1) * w
    }

    fn step(&mut self, input: &Input, out: &mut Vec<Output>) -> Result<Reply, Error> {
        match input {
            Input::OpenSession { ttl, .. } => self.open(*ttl, Label::default()),
            Input::OpenLabeled { ttl, label, .. } => self.open(*ttl, *label),
            Input::KeepAlive {
                session, request, ..
            } => self.keep_alive(*session, *request),
            Input::CloseSession {
                session, request, ..
            } => self.close(*session, *request, out),
            Input::Acquire {
                session,
                lock,
                mode,
                wait,
                request,
                ..
            } => self.acquire(*session, lock, *mode, *wait, *request, out),
            Input::Release {
                session,
                lock,
                request,
                ..
            } => self.release(*session, lock, None, *request, out),
            Input::ReleaseHold {
                session,
                lock,
                token,
                request,
                ..
            } => self.release(*session, lock, Some(token.0), *request, out),
            Input::Cancel {
                session,
                lock,
                request,
                ..
            } => self.cancel(*session, lock, *request, out),
            Input::Watch {
                session,
                lock,
                request,
                ..
            } => self.watch(*session, lock, *request, out),
            Input::Unwatch {
                session,
                lock,
                request,
                ..
            } => self.unwatch(*session, lock, *request, out),
            Input::Tick { now } => Ok(Reply::Ticked { now: *now }),
            _ => Err(Error::BadFrame),
        }
    }

    fn session(&self, s: SessionId) -> Result<&Session, Error> {
        self.sessions.get(&s.0).ok_or(Error::UnknownSession(s))
    }

    fn name(&self, lock: &LockName) -> Result<String, Error> {
        if lock.is_empty() {
            return Err(Error::EmptyName);
        }
        if lock.len() > self.max_name_len as usize {
            return Err(Error::NameTooLong {
                len: lock.len() as u32,
                max: self.max_name_len,
            });
        }
        Ok(lock.as_str().to_string())
    }

    /// `Some(recorded)` to replay, `None` to apply.
    fn check_request(
        &self,
        s: SessionId,
        request: Option<u64>,
        kind: Kind,
        target: &Target,
    ) -> Result<Option<Recorded>, Error> {
        let Some(n) = request else { return Ok(None) };
        let row = self.session(s)?;
        if n < row.last_request {
            return Err(Error::StaleRequest {
                request: n,
                latest: row.last_request,
            });
        }
        if n > row.last_request || row.last_reply == Recorded::None {
            return Ok(None);
        }
        let recorded = match row.last_reply {
            Recorded::None => unreachable!("handled above"),
            Recorded::KeptAlive(_) => Kind::KeepAlive,
            Recorded::Granted(..) | Recorded::Queued(..) | Recorded::Busy => Kind::Acquire,
            Recorded::Released(_) => Kind::Release,
            Recorded::Cancelled => Kind::Cancel,
            Recorded::Watching(_) => Kind::Watch,
            Recorded::Unwatched => Kind::Unwatch,
        };
        if recorded != kind || row.last_target != *target {
            return Err(Error::RequestReused { request: n });
        }
        Ok(Some(row.last_reply.clone()))
    }

    fn record(&mut self, s: SessionId, request: Option<u64>, target: Target, reply: Recorded) {
        if let Some(n) = request {
            let row = self.sessions.get_mut(&s.0).expect("live session");
            row.last_request = n;
            row.last_reply = reply;
            row.last_target = target;
        }
    }

    fn open(&mut self, ttl: u64, label: Label) -> Result<Reply, Error> {
        if ttl == 0 {
            return Err(Error::BadTtl);
        }
        let expires_at = self.now.checked_add(ttl).ok_or(Error::DeadlineOverflow)?;
        if self.sessions.len() >= self.cap.sessions as usize {
            return Err(Error::CapacityExceeded(Table::Sessions));
        }
        let id = self.next_session;
        self.next_session += 1;
        self.sessions.insert(
            id,
            Session {
                label,
                ttl,
                expires_at,
                last_request: 0,
                last_reply: Recorded::None,
                last_target: None,
            },
        );
        Ok(Reply::Opened {
            session: SessionId(id),
            expires_at: Tick(expires_at),
        })
    }

    fn keep_alive(&mut self, s: SessionId, request: Option<u64>) -> Result<Reply, Error> {
        let ttl = self.session(s)?.ttl;
        if let Some(recorded) = self.check_request(s, request, Kind::KeepAlive, &None)? {
            let Recorded::KeptAlive(e) = recorded else {
                unreachable!("the kind matched")
            };
            return Ok(Reply::KeptAlive {
                expires_at: Tick(e),
            });
        }
        let e = self.now.checked_add(ttl).ok_or(Error::DeadlineOverflow)?;
        self.sessions.get_mut(&s.0).expect("live").expires_at = e;
        self.record(s, request, None, Recorded::KeptAlive(e));
        Ok(Reply::KeptAlive {
            expires_at: Tick(e),
        })
    }

    fn close(
        &mut self,
        s: SessionId,
        request: Option<u64>,
        out: &mut Vec<Output>,
    ) -> Result<Reply, Error> {
        self.session(s)?;
        self.check_request(s, request, Kind::Close, &None)?;
        let mut dirty = Vec::new();
        self.end_session(s.0, ReleaseReason::Closed, &mut dirty, out);
        self.grant_dirty(&dirty, out);
        Ok(Reply::Closed)
    }

    fn lock_name(lock: &str) -> LockName {
        LockName::new(lock).expect("validated name")
    }

    fn acquire(
        &mut self,
        s: SessionId,
        lock: &LockName,
        mode: Mode,
        wait: Wait,
        request: Option<u64>,
        out: &mut Vec<Output>,
    ) -> Result<Reply, Error> {
        self.session(s)?;
        let name = self.name(lock)?;
        // A malformed mode is refused with the name, before the request number.
        if let Mode::Permits { count, limit } = mode {
            if count == 0 || count > limit {
                return Err(Error::BadPermits { count, limit });
            }
        }
        let target: Target = Some((name.clone(), Some(mode), None));
        if let Some(recorded) = self.check_request(s, request, Kind::Acquire, &target)? {
            // A retry answers from the claim now (docs/SPEC.md §6): holding → Granted
            // (current token), queued → Queued (current position), neither → Busy stays
            // Busy, Queued → WaitEnded, Granted → HoldEnded (recorded token).
            return Ok(match (self.claim_of(s.0, &name), recorded) {
                (Some(seq), _) => {
                    let c = &self.claims[&seq];
                    if c.holding {
                        Reply::Granted {
                            mode: c.mode,
                            token: Token(c.value),
                        }
                    } else {
                        let queue = &self.locks[&name].waiters;
                        let at = queue.iter().position(|x| *x == seq).expect("queued");
                        Reply::Queued {
                            mode: c.mode,
                            position: at as u32 + 1,
                        }
                    }
                }
                (None, Recorded::Granted(_, token)) => Reply::HoldEnded {
                    token: Token(token),
                },
                (None, Recorded::Queued(..)) => Reply::WaitEnded,
                (None, _) => Reply::Busy,
            });
        }
        // A semaphore's limit travels with every acquire; a name is one while a
        // permits claim holds or waits on it.
        match (self.live_mode(&name), mode) {
            (Some(Mode::Permits { limit: live, .. }), Mode::Permits { limit, .. })
                if live != limit =>
            {
                return Err(Error::LimitMismatch { limit: live });
            }
            (Some(Mode::Permits { limit: live, .. }), Mode::Exclusive | Mode::Shared) => {
                return Err(Error::LimitMismatch { limit: live });
            }
            (Some(Mode::Exclusive | Mode::Shared), Mode::Permits { .. }) => {
                return Err(Error::LimitMismatch { limit: 0 });
            }
            _ => {}
        }
        if let Some(c) = self.claim_of(s.0, &name) {
            let claim = &self.claims[&c];
            if !claim.holding {
                return Err(Error::AlreadyQueued(s));
            }
            if claim.mode != mode {
                return Err(Error::ModeMismatch { held: claim.mode });
            }
            let token = claim.value;
            self.record(s, request, target, Recorded::Granted(mode, token));
            return Ok(Reply::Granted {
                mode,
                token: Token(token),
            });
        }
        let grantable = match self.locks.get(&name) {
            None => true,
            Some(l) => l.delay_until <= self.now && l.waiters.is_empty() && self.fits(l, mode),
        };
        let deadline = match wait {
            Wait::None => None,
            Wait::Until(t) if t.0 <= self.now => None,
            Wait::Until(t) => Some(t.0),
            Wait::Forever => Some(u64::MAX),
        };
        if !grantable && deadline.is_none() {
            self.record(s, request, target, Recorded::Busy);
            return Ok(Reply::Busy);
        }
        if self.claims.len() >= self.cap.claims as usize {
            return Err(Error::CapacityExceeded(Table::Claims));
        }
        self.entry(&name)?;
        let seq = self.next_seq;
        self.next_seq += 1;
        self.claims.insert(
            seq,
            Claim {
                session: s.0,
                lock: name.clone(),
                mode,
                holding: false,
                watch: false,
                value: 0,
            },
        );
        if grantable {
            let token = self.grant(seq);
            self.tell_watchers(seq, Change::Granted, out);
            self.record(s, request, target, Recorded::Granted(mode, token));
            Ok(Reply::Granted {
                mode,
                token: Token(token),
            })
        } else {
            let d = deadline.expect("checked");
            self.claims.get_mut(&seq).expect("new").value = d;
            let l = self.locks.get_mut(&name).expect("exists");
            l.waiters.push_back(seq);
            let position = l.waiters.len() as u32;
            self.record(s, request, target, Recorded::Queued(mode, position));
            Ok(Reply::Queued { mode, position })
        }
    }

    /// A release; of the hold granted with token `hold` only, if given (`ReleaseHold`).
    fn release(
        &mut self,
        s: SessionId,
        lock: &LockName,
        hold: Option<u64>,
        request: Option<u64>,
        out: &mut Vec<Output>,
    ) -> Result<Reply, Error> {
        self.session(s)?;
        let name = self.name(lock)?;
        let target: Target = Some((name.clone(), None, hold));
        if let Some(recorded) = self.check_request(s, request, Kind::Release, &target)? {
            let Recorded::Released(token) = recorded else {
                unreachable!("the kind matched")
            };
            return Ok(Reply::Released {
                token: Token(token),
            });
        }
        let c = self
            .claim_of(s.0, &name)
            .filter(|c| self.claims[c].holding)
            .filter(|c| hold.is_none_or(|t| self.claims[c].value == t))
            .ok_or(Error::NotHolder(s))?;
        let token = self.claims[&c].value;
        self.tell_watchers(c, Change::Released, out);
        self.remove_claim(c);
        self.record(s, request, target, Recorded::Released(token));
        self.grant_dirty(&[name], out);
        Ok(Reply::Released {
            token: Token(token),
        })
    }

    fn cancel(
        &mut self,
        s: SessionId,
        lock: &LockName,
        request: Option<u64>,
        out: &mut Vec<Output>,
    ) -> Result<Reply, Error> {
        self.session(s)?;
        let name = self.name(lock)?;
        let target: Target = Some((name.clone(), None, None));
        if self
            .check_request(s, request, Kind::Cancel, &target)?
            .is_some()
        {
            return Ok(Reply::Cancelled);
        }
        let c = self
            .claim_of(s.0, &name)
            .filter(|c| !self.claims[c].holding)
            .ok_or(Error::NotQueued(s))?;
        self.remove_claim(c);
        self.record(s, request, target, Recorded::Cancelled);
        self.grant_dirty(&[name], out);
        Ok(Reply::Cancelled)
    }

    fn watch(
        &mut self,
        s: SessionId,
        lock: &LockName,
        request: Option<u64>,
        out: &mut Vec<Output>,
    ) -> Result<Reply, Error> {
        self.session(s)?;
        let name = self.name(lock)?;
        let target: Target = Some((name.clone(), None, None));
        if let Some(recorded) = self.check_request(s, request, Kind::Watch, &target)? {
            let Recorded::Watching(holders) = recorded else {
                unreachable!("the kind matched")
            };
            return Ok(Reply::Watching { holders });
        }
        if self.watch_of(s.0, &name).is_some() {
            return Err(Error::AlreadyWatching(s));
        }
        let watching = self.locks.get(&name).map_or(0, |l| l.watchers.len());
        if watching >= self.max_watchers as usize {
            return Err(Error::CapacityExceeded(Table::Watchers));
        }
        if self.claims.len() >= self.cap.claims as usize {
            return Err(Error::CapacityExceeded(Table::Claims));
        }
        self.entry(&name)?;
        let seq = self.next_seq;
        self.next_seq += 1;
        self.claims.insert(
            seq,
            Claim {
                session: s.0,
                lock: name.clone(),
                mode: Mode::Exclusive,
                holding: false,
                watch: true,
                value: 0,
            },
        );
        let l = self.locks.get_mut(&name).expect("exists");
        l.watchers.push(seq);
        let holders = l.holders.clone();
        for h in &holders {
            out.push(self.change(seq, *h, Change::Holding));
        }
        let n = holders.len() as u32;
        self.record(s, request, target, Recorded::Watching(n));
        Ok(Reply::Watching { holders: n })
    }

    fn unwatch(
        &mut self,
        s: SessionId,
        lock: &LockName,
        request: Option<u64>,
        out: &mut Vec<Output>,
    ) -> Result<Reply, Error> {
        self.session(s)?;
        let name = self.name(lock)?;
        let target: Target = Some((name.clone(), None, None));
        if self
            .check_request(s, request, Kind::Unwatch, &target)?
            .is_some()
        {
            return Ok(Reply::Unwatched);
        }
        let c = self.watch_of(s.0, &name).ok_or(Error::NotWatching(s))?;
        self.remove_claim(c);
        self.record(s, request, target, Recorded::Unwatched);
        self.grant_dirty(&[name], out);
        Ok(Reply::Unwatched)
    }

    /// Creates the lock entry for `name` if it has none.
    fn entry(&mut self, name: &str) -> Result<(), Error> {
        if !self.locks.contains_key(name) {
            if self.locks.len() >= self.cap.locks as usize {
                return Err(Error::CapacityExceeded(Table::Locks));
            }
            let id = self.next_lock;
            self.next_lock += 1;
            self.locks.insert(
                name.to_string(),
                Lock {
                    id,
                    holders: Vec::new(),
                    waiters: VecDeque::new(),
                    watchers: Vec::new(),
                    delay_until: 0,
                },
            );
        }
        Ok(())
    }

    /// The event telling `watcher`'s session about `holder`'s claim.
    fn change(&self, watcher: u64, holder: u64, change: Change) -> Output {
        let w = &self.claims[&watcher];
        let h = &self.claims[&holder];
        Output::HolderChanged {
            session: SessionId(w.session),
            lock: Self::lock_name(&h.lock),
            holder: SessionId(h.session),
            mode: h.mode,
            token: Token(h.value),
            change,
            label: self.sessions[&h.session].label,
        }
    }

    /// One event per watcher of `holder`'s lock, in the order the watches began.
    fn tell_watchers(&self, holder: u64, change: Change, out: &mut Vec<Output>) {
        let lock = &self.locks[&self.claims[&holder].lock];
        for w in &lock.watchers {
            out.push(self.change(*w, holder, change));
        }
    }

    /// The advance to `now` (docs/SPEC.md §2): expire, time out, end lock-delays, grant.
    fn advance(&mut self, now: u64, out: &mut Vec<Output>) {
        if now == self.now {
            return;
        }
        self.now = now;
        let mut dirty = Vec::new();
        // 1. Expire sessions, earliest deadline first, ties by id.
        let mut due: Vec<(u64, u64)> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.expires_at <= now)
            .map(|(id, s)| (s.expires_at, *id))
            .collect();
        due.sort();
        for (_, id) in due {
            out.push(Output::SessionExpired {
                session: SessionId(id),
            });
            self.end_session(id, ReleaseReason::Expired, &mut dirty, out);
        }
        // 2. Time out waits, earliest deadline first, ties by arrival.
        let mut due: Vec<(u64, u64)> = self
            .claims
            .iter()
            .filter(|(_, c)| !c.holding && !c.watch && c.value != u64::MAX && c.value <= now)
            .map(|(seq, c)| (c.value, *seq))
            .collect();
        due.sort();
        for (_, seq) in due {
            let c = self.claims[&seq].clone();
            self.remove_claim(seq);
            out.push(Output::WaitTimedOut {
                session: SessionId(c.session),
                lock: Self::lock_name(&c.lock),
            });
            mark(&mut dirty, &c.lock);
        }
        // 3. End lock-delays that are over, earliest first, ties by lock id.
        let mut due: Vec<(u64, u64, String)> = self
            .locks
            .iter()
            .filter(|(_, l)| l.delay_until != 0 && l.delay_until <= now)
            .map(|(n, l)| (l.delay_until, l.id, n.clone()))
            .collect();
        due.sort();
        for (_, _, name) in due {
            self.locks.get_mut(&name).expect("lock").delay_until = 0;
            mark(&mut dirty, &name);
        }
        // 4. Grant what was freed.
        self.grant_dirty(&dirty, out);
    }

    fn end_session(
        &mut self,
        id: u64,
        reason: ReleaseReason,
        dirty: &mut Vec<String>,
        out: &mut Vec<Output>,
    ) {
        // Its watches end first: nothing reaches the session once it is gone.
        let watches: Vec<u64> = self
            .claims
            .iter()
            .filter(|(_, c)| c.session == id && c.watch)
            .map(|(seq, _)| *seq)
            .collect();
        for seq in watches {
            let lock = self.claims[&seq].lock.clone();
            self.remove_claim(seq);
            mark(dirty, &lock);
        }
        let mine: Vec<u64> = self
            .claims
            .iter()
            .filter(|(_, c)| c.session == id)
            .map(|(seq, _)| *seq)
            .collect();
        for seq in mine {
            let c = self.claims[&seq].clone();
            if c.holding {
                out.push(Output::Released {
                    session: SessionId(id),
                    lock: Self::lock_name(&c.lock),
                    token: Token(c.value),
                    reason,
                });
                let change = match reason {
                    ReleaseReason::Expired => Change::Expired,
                    ReleaseReason::Closed => Change::Closed,
                    ReleaseReason::Released => Change::Released,
                };
                self.tell_watchers(seq, change, out);
            }
            self.remove_claim(seq);
            if c.holding && reason == ReleaseReason::Expired && self.lock_delay > 0 {
                let until = self.now.saturating_add(self.lock_delay);
                let l = self.locks.get_mut(&c.lock).expect("lock");
                l.delay_until = l.delay_until.max(until);
            }
            mark(dirty, &c.lock);
        }
        self.sessions.remove(&id);
    }

    fn holder_mode(&self, l: &Lock) -> Mode {
        l.holders
            .first()
            .map_or(Mode::Exclusive, |c| self.claims[c].mode)
    }

    /// The mode of the claims holding or waiting on `name` (`None`: nobody does).
    fn live_mode(&self, name: &str) -> Option<Mode> {
        let l = self.locks.get(name)?;
        l.holders
            .iter()
            .chain(l.waiters.iter())
            .next()
            .map(|c| self.claims[c].mode)
    }

    /// Permits held on `l` (0 unless it is a semaphore).
    fn in_use(&self, l: &Lock) -> u64 {
        l.holders
            .iter()
            .map(|c| match self.claims[c].mode {
                Mode::Permits { count, .. } => u64::from(count),
                _ => 0,
            })
            .sum()
    }

    /// Whether a `mode` grant fits beside `l`'s holders (queue and lock-delay aside).
    fn fits(&self, l: &Lock, mode: Mode) -> bool {
        match mode {
            Mode::Permits { count, limit } => self.in_use(l) + u64::from(count) <= u64::from(limit),
            Mode::Shared => l.holders.is_empty() || self.holder_mode(l) == Mode::Shared,
            _ => l.holders.is_empty(),
        }
    }

    fn grant(&mut self, seq: u64) -> u64 {
        self.revision += 1;
        let token = self.revision;
        let c = self.claims.get_mut(&seq).expect("claim");
        c.holding = true;
        c.value = token;
        let l = self.locks.get_mut(&c.lock).expect("lock");
        l.holders.push(seq);
        l.holders.sort();
        token
    }

    fn grant_dirty(&mut self, dirty: &[String], out: &mut Vec<Output>) {
        for name in dirty {
            let Some(l) = self.locks.get(name) else {
                continue;
            };
            if l.delay_until <= self.now {
                loop {
                    let l = &self.locks[name];
                    let Some(&head) = l.waiters.front() else {
                        break;
                    };
                    let mode = self.claims[&head].mode;
                    // Strict FIFO: the first that does not fit stops the scan.
                    if !self.fits(l, mode) {
                        break;
                    }
                    self.locks.get_mut(name).expect("lock").waiters.pop_front();
                    let token = self.grant(head);
                    out.push(Output::Granted {
                        session: SessionId(self.claims[&head].session),
                        lock: Self::lock_name(name),
                        mode,
                        token: Token(token),
                    });
                    self.tell_watchers(head, Change::Granted, out);
                    if mode == Mode::Exclusive {
                        break;
                    }
                }
            }
            let l = &self.locks[name];
            if l.holders.is_empty()
                && l.waiters.is_empty()
                && l.watchers.is_empty()
                && l.delay_until == 0
            {
                self.locks.remove(name);
            }
        }
    }

    /// The session's hold or wait on `lock`.
    fn claim_of(&self, session: u64, lock: &str) -> Option<u64> {
        self.claims
            .iter()
            .find(|(_, c)| c.session == session && c.lock == lock && !c.watch)
            .map(|(seq, _)| *seq)
    }

    /// The session's watch of `lock`.
    fn watch_of(&self, session: u64, lock: &str) -> Option<u64> {
        self.claims
            .iter()
            .find(|(_, c)| c.session == session && c.lock == lock && c.watch)
            .map(|(seq, _)| *seq)
    }

    fn remove_claim(&mut self, seq: u64) {
        let c = self.claims.remove(&seq).expect("claim");
        let l = self.locks.get_mut(&c.lock).expect("lock");
        l.holders.retain(|x| *x != seq);
        l.waiters.retain(|x| *x != seq);
        l.watchers.retain(|x| *x != seq);
    }

    // ------------------------------------------------------------------ queries

    /// The current tick.
    pub fn now(&self) -> Tick {
        Tick(self.now)
    }

    /// The highest token granted.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// Raises the revision to at least `floor` (recovery after lost replicas: the next
    /// grant's token is above it); a lower floor changes nothing. Returns the revision.
    ///
    /// Errors: `BadConfig` for a floor above 2^62 (room left for grants); nothing changes.
    pub fn raise_revision(&mut self, floor: u64) -> Result<u64, Error> {
        if floor > 1 << 62 {
            return Err(Error::BadConfig("revision floor above 2^62"));
        }
        if floor > self.revision {
            self.revision = floor;
        }
        Ok(self.revision)
    }

    /// Open sessions in id order.
    pub fn sessions(&self) -> Vec<SessionId> {
        self.sessions.keys().map(|id| SessionId(*id)).collect()
    }

    /// A session's state.
    pub fn session_info(&self, id: SessionId) -> Option<SessionInfo> {
        let s = self.sessions.get(&id.0)?;
        let theirs = self.claims.values().filter(|c| c.session == id.0);
        let watches = theirs.clone().filter(|c| c.watch).count() as u32;
        let mine = theirs.filter(|c| !c.watch);
        let holds = mine.clone().filter(|c| c.holding).count() as u32;
        let waits = mine.filter(|c| !c.holding).count() as u32;
        Some(SessionInfo {
            id,
            label: s.label,
            ttl: s.ttl,
            expires_at: Tick(s.expires_at),
            holds,
            waits,
            watches,
            last_request: s.last_request,
        })
    }

    /// Lock entries in creation order.
    pub fn locks(&self) -> Vec<String> {
        let mut v: Vec<(u64, &String)> = self.locks.iter().map(|(n, l)| (l.id, n)).collect();
        v.sort();
        v.into_iter().map(|(_, n)| n.clone()).collect()
    }

    /// Holders in grant order (claim sequence).
    pub fn holders(&self, lock: &str) -> Vec<Holder> {
        self.locks.get(lock).map_or_else(Vec::new, |l| {
            l.holders
                .iter()
                .map(|c| {
                    let c = &self.claims[c];
                    Holder {
                        session: SessionId(c.session),
                        mode: c.mode,
                        token: Token(c.value),
                        label: self.sessions[&c.session].label,
                    }
                })
                .collect()
        })
    }

    /// The queue, head first.
    pub fn waiters(&self, lock: &str) -> Vec<Waiter> {
        self.locks.get(lock).map_or_else(Vec::new, |l| {
            l.waiters
                .iter()
                .map(|c| {
                    let c = &self.claims[c];
                    Waiter {
                        session: SessionId(c.session),
                        mode: c.mode,
                        deadline: (c.value != u64::MAX).then_some(Tick(c.value)),
                        label: self.sessions[&c.session].label,
                    }
                })
                .collect()
        })
    }

    /// A live semaphore's permits in use and limit.
    pub fn permits(&self, lock: &str) -> Option<Permits> {
        let Some(Mode::Permits { limit, .. }) = self.live_mode(lock) else {
            return None;
        };
        let in_use = self.in_use(&self.locks[lock]) as u32;
        Some(Permits { in_use, limit })
    }

    /// The sessions watching `lock`, in the order they began.
    pub fn watchers(&self, lock: &str) -> Vec<SessionId> {
        self.locks.get(lock).map_or_else(Vec::new, |l| {
            l.watchers
                .iter()
                .map(|c| SessionId(self.claims[c].session))
                .collect()
        })
    }

    /// Lock-delay end if in the future.
    pub fn lock_delay_until(&self, lock: &str) -> Option<Tick> {
        let l = self.locks.get(lock)?;
        (l.delay_until > self.now).then_some(Tick(l.delay_until))
    }

    /// The next due tick.
    pub fn poll_timeout(&self) -> Option<Tick> {
        let a = self.sessions.values().map(|s| s.expires_at);
        let b = self
            .claims
            .values()
            .filter(|c| !c.holding && !c.watch && c.value != u64::MAX)
            .map(|c| c.value);
        let c = self
            .locks
            .values()
            .filter(|l| l.delay_until != 0)
            .map(|l| l.delay_until);
        a.chain(b).chain(c).min().map(Tick)
    }

    /// Rows in use.
    pub fn usage(&self) -> Usage {
        Usage {
            sessions: self.sessions.len() as u32,
            locks: self.locks.len() as u32,
            claims: self.claims.len() as u32,
        }
    }

    /// True when no session is open.
    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    /// Compares every query of `svc` with the model's.
    ///
    /// Errors: the first difference.
    pub fn agrees_with<S: fencelock::Storage>(
        &self,
        svc: &fencelock::LockService<S>,
    ) -> Result<(), String> {
        macro_rules! same {
            ($what:expr, $a:expr, $b:expr) => {
                let (a, b) = ($a, $b);
                if a != b {
                    return Err(format!("{}: service {:?}, model {:?}", $what, a, b));
                }
            };
        }
        same!("now", svc.now(), self.now());
        same!("revision", svc.revision(), self.revision());
        same!("usage", svc.usage(), self.usage());
        same!("poll_timeout", svc.poll_timeout(), self.poll_timeout());
        same!("max_events", svc.max_events(), self.max_events());
        let at_capacity = svc.capacity().max_events(svc.config().max_watchers);
        if svc.max_events() > at_capacity {
            return Err(format!(
                "max_events {} above the bound at capacity {at_capacity}",
                svc.max_events()
            ));
        }
        let sessions: Vec<SessionId> = svc.sessions().collect();
        same!("sessions", &sessions, &self.sessions());
        for s in &sessions {
            same!(format!("{s}"), svc.session(*s), self.session_info(*s));
        }
        let locks: Vec<String> = svc.locks().map(|l| l.as_str().to_string()).collect();
        same!("locks", &locks, &self.locks());
        for l in &locks {
            same!(
                format!("holders of {l}"),
                svc.holders(l).collect::<Vec<_>>(),
                self.holders(l)
            );
            same!(
                format!("waiters of {l}"),
                svc.waiters(l).collect::<Vec<_>>(),
                self.waiters(l)
            );
            same!(format!("permits of {l}"), svc.permits(l), self.permits(l));
            same!(
                format!("lock_delay_until {l}"),
                svc.lock_delay_until(l),
                self.lock_delay_until(l)
            );
        }
        Ok(())
    }
}

fn mark(dirty: &mut Vec<String>, lock: &str) {
    if !dirty.iter().any(|d| d == lock) {
        dirty.push(lock.to_string());
    }
}
