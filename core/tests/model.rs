//! Differential test: a deliberately naive reference model of DESIGN.md's semantics
//! (vectors and linear scans, no heaps, no hash index, no intrusive lists) fed the same
//! seeded random inputs as the real service. Every answer — outputs in order, or the
//! exact error — must agree, and so must the queries after every input.
//! Replay one seed with `FENCELOCK_SEED=<n> cargo test -p fencelock --test model`.

mod common;
use common::*;

use fencelock::{
    Config, Error, Input, LockName, Mode, Output, ReleaseReason, SessionId, Table, Tick, Token,
    Wait, MAX_NAME_LEN,
};

#[derive(Clone, Copy, PartialEq, Debug)]
enum Kind {
    KeepAlive,
    Acquire,
    Release,
    Cancel,
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Reply {
    Renewed(u64),
    Granted(Mode, u64),
    Queued(Mode, u32),
    Busy,
    Released(u64),
    Cancelled,
}

struct Session {
    id: u64,
    ttl: u64,
    expires_at: u64,
    last_request: u64,
    /// (kind, lock name, mode) of the latest numbered request, and its reply.
    last: Option<(Kind, String, Option<Mode>, Reply)>,
}

struct Claim {
    seq: u64,
    session: u64,
    lock: String,
    mode: Mode,
    holding: bool,
    /// token when holding, deadline (u64::MAX = forever) when waiting
    value: u64,
}

struct LockEntry {
    id: u64,
    name: String,
    delay_until: u64, // 0 = none
}

struct Model {
    cap: (usize, usize, usize),
    lock_delay: u64,
    now: u64,
    next_session: u64,
    revision: u64,
    next_seq: u64,
    next_lock: u64,
    sessions: Vec<Session>, // in id order
    locks: Vec<LockEntry>,  // in creation order
    claims: Vec<Claim>,     // in arrival order
    dirty: Vec<String>,
}

impl Model {
    fn new(cap: (usize, usize, usize), lock_delay: u64) -> Model {
        Model {
            cap,
            lock_delay,
            now: 0,
            next_session: 1,
            revision: 0,
            next_seq: 1,
            next_lock: 1,
            sessions: vec![],
            locks: vec![],
            claims: vec![],
            dirty: vec![],
        }
    }

    fn session(&mut self, id: SessionId) -> Result<&mut Session, Error> {
        self.sessions
            .iter_mut()
            .find(|s| s.id == id.0)
            .ok_or(Error::UnknownSession(id))
    }

    fn claim(&self, session: u64, lock: &str) -> Option<usize> {
        self.claims
            .iter()
            .position(|c| c.session == session && c.lock == lock)
    }

    fn lock(&self, name: &str) -> Option<&LockEntry> {
        self.locks.iter().find(|l| l.name == name)
    }

    fn holders<'a>(&'a self, lock: &'a str) -> impl Iterator<Item = &'a Claim> + 'a {
        self.claims
            .iter()
            .filter(move |c| c.lock == lock && c.holding)
    }

    fn waiters<'a>(&'a self, lock: &'a str) -> impl Iterator<Item = &'a Claim> + 'a {
        self.claims
            .iter()
            .filter(move |c| c.lock == lock && !c.holding)
    }

    fn check_name(name: &LockName) -> Result<String, Error> {
        let n = name.as_str();
        if n.is_empty() {
            return Err(Error::EmptyName);
        }
        if n.len() > MAX_NAME_LEN {
            return Err(Error::NameTooLong {
                len: n.len() as u32,
                max: MAX_NAME_LEN as u32,
            });
        }
        Ok(n.to_owned())
    }

    /// Some(reply) = replay it; None = apply.
    fn check_request(
        &mut self,
        id: SessionId,
        request: Option<u64>,
        kind: Option<Kind>, // None = close, which never matches a recorded reply
        lock: &str,
        mode: Option<Mode>,
    ) -> Result<Option<Reply>, Error> {
        let s = self.session(id)?;
        let Some(n) = request else { return Ok(None) };
        if n < s.last_request {
            return Err(Error::StaleRequest {
                request: n,
                latest: s.last_request,
            });
        }
        if n > s.last_request {
            return Ok(None);
        }
        match &s.last {
            None => Ok(None),
            Some((k, l, m, reply)) if Some(*k) == kind && l == lock && *m == mode => {
                Ok(Some(*reply))
            }
            Some(_) => Err(Error::RequestReused { request: n }),
        }
    }

    fn record(
        &mut self,
        id: SessionId,
        request: Option<u64>,
        kind: Kind,
        lock: &str,
        mode: Option<Mode>,
        reply: Reply,
    ) {
        if let Some(n) = request {
            let s = self.session(id).unwrap();
            s.last_request = n;
            s.last = Some((kind, lock.to_owned(), mode, reply));
        }
    }

    fn mark(&mut self, lock: &str) {
        if !self.dirty.iter().any(|d| d == lock) {
            self.dirty.push(lock.to_owned());
        }
    }

    fn delayed(&self, lock: &str) -> bool {
        self.lock(lock).is_some_and(|l| l.delay_until > self.now)
    }

    fn grant(&mut self, i: usize) -> u64 {
        self.revision += 1;
        self.claims[i].holding = true;
        self.claims[i].value = self.revision;
        self.revision
    }

    fn grant_dirty(&mut self, out: &mut Vec<Output>) {
        for lock in std::mem::take(&mut self.dirty) {
            if !self.delayed(&lock) {
                // the queue's head, first in arrival order
                while let Some(head) = self
                    .claims
                    .iter()
                    .position(|c| c.lock == lock && !c.holding)
                {
                    let mode = self.claims[head].mode;
                    let holders: Vec<Mode> = self.holders(&lock).map(|c| c.mode).collect();
                    let fits = holders.is_empty()
                        || (mode == Mode::Shared && holders.iter().all(|m| *m == Mode::Shared));
                    if !fits {
                        break;
                    }
                    let token = self.grant(head);
                    out.push(Output::Granted {
                        session: SessionId(self.claims[head].session),
                        lock: LockName::new(&lock).unwrap(),
                        mode,
                        token: Token(token),
                    });
                    if mode == Mode::Exclusive {
                        break;
                    }
                }
            }
            let idle = !self.claims.iter().any(|c| c.lock == lock) && !self.delayed(&lock);
            if idle {
                self.locks.retain(|l| l.name != lock);
            }
        }
    }

    fn end_session(&mut self, id: u64, reason: ReleaseReason, out: &mut Vec<Output>) {
        let mine: Vec<usize> = (0..self.claims.len())
            .filter(|i| self.claims[*i].session == id)
            .collect();
        for i in &mine {
            let c = &self.claims[*i];
            let lock = c.lock.clone();
            if c.holding {
                out.push(Output::Released {
                    session: SessionId(id),
                    lock: LockName::new(&lock).unwrap(),
                    token: Token(c.value),
                    reason,
                });
                if reason == ReleaseReason::Expired && self.lock_delay > 0 {
                    let until = self.now.saturating_add(self.lock_delay);
                    let entry = self.locks.iter_mut().find(|l| l.name == lock).unwrap();
                    entry.delay_until = entry.delay_until.max(until);
                }
            }
            self.mark(&lock);
        }
        let mut k = 0;
        self.claims.retain(|_| {
            k += 1;
            !mine.contains(&(k - 1))
        });
        self.sessions.retain(|s| s.id != id);
    }

    fn apply(&mut self, input: &Input) -> Result<Vec<Output>, Error> {
        let mut out = Vec::new();
        match input.clone() {
            Input::OpenSession { ttl } => {
                if ttl == 0 {
                    return Err(Error::BadTtl);
                }
                let expires_at = self.now.checked_add(ttl).ok_or(Error::DeadlineOverflow)?;
                if self.sessions.len() == self.cap.0 {
                    return Err(Error::CapacityExceeded(Table::Sessions));
                }
                let id = self.next_session;
                self.next_session += 1;
                self.sessions.push(Session {
                    id,
                    ttl,
                    expires_at,
                    last_request: 0,
                    last: None,
                });
                out.push(Output::SessionOpened {
                    session: SessionId(id),
                    expires_at: Tick(expires_at),
                });
            }
            Input::KeepAlive { session, request } => {
                if let Some(r) =
                    self.check_request(session, request, Some(Kind::KeepAlive), "", None)?
                {
                    let Reply::Renewed(at) = r else {
                        unreachable!()
                    };
                    out.push(Output::SessionRenewed {
                        session,
                        expires_at: Tick(at),
                    });
                    return Ok(out);
                }
                let now = self.now;
                let s = self.session(session)?;
                let at = now.checked_add(s.ttl).ok_or(Error::DeadlineOverflow)?;
                s.expires_at = at;
                self.record(
                    session,
                    request,
                    Kind::KeepAlive,
                    "",
                    None,
                    Reply::Renewed(at),
                );
                out.push(Output::SessionRenewed {
                    session,
                    expires_at: Tick(at),
                });
            }
            Input::CloseSession { session, request } => {
                self.check_request(session, request, None, "", None)?;
                out.push(Output::SessionClosed { session });
                self.end_session(session.0, ReleaseReason::Closed, &mut out);
                self.grant_dirty(&mut out);
            }
            Input::Acquire {
                session,
                lock,
                mode,
                wait,
                request,
            } => {
                self.session(session)?;
                let name = Model::check_name(&lock)?;
                if let Some(r) =
                    self.check_request(session, request, Some(Kind::Acquire), &name, Some(mode))?
                {
                    // answered from the claim now, not from the recorded reply
                    let claim = self.claim(session.0, &name);
                    out.push(match (claim, r) {
                        (Some(i), _) if self.claims[i].holding => Output::Granted {
                            session,
                            lock,
                            mode: self.claims[i].mode,
                            token: Token(self.claims[i].value),
                        },
                        (Some(i), _) => Output::Queued {
                            session,
                            lock,
                            mode: self.claims[i].mode,
                            position: 1 + self.claims[..i]
                                .iter()
                                .filter(|c| c.lock == name && !c.holding)
                                .count() as u32,
                        },
                        (None, Reply::Granted(_, t)) => Output::Released {
                            session,
                            lock,
                            token: Token(t),
                            reason: ReleaseReason::Released,
                        },
                        (None, Reply::Queued(..)) => Output::WaitTimedOut { session, lock },
                        (None, _) => Output::Busy { session, lock },
                    });
                    return Ok(out);
                }
                if let Some(i) = self.claim(session.0, &name) {
                    let c = &self.claims[i];
                    if !c.holding {
                        return Err(Error::AlreadyQueued(session));
                    }
                    if c.mode != mode {
                        return Err(Error::ModeMismatch { held: c.mode });
                    }
                    let token = c.value;
                    self.record(
                        session,
                        request,
                        Kind::Acquire,
                        &name,
                        Some(mode),
                        Reply::Granted(mode, token),
                    );
                    out.push(Output::Granted {
                        session,
                        lock,
                        mode,
                        token: Token(token),
                    });
                    return Ok(out);
                }
                let holders: Vec<Mode> = self.holders(&name).map(|c| c.mode).collect();
                let grantable = !self.delayed(&name)
                    && self.waiters(&name).next().is_none()
                    && (holders.is_empty()
                        || (mode == Mode::Shared && holders.iter().all(|m| *m == Mode::Shared)));
                let deadline = match wait {
                    Wait::None => None,
                    Wait::Until(t) if t.0 <= self.now => None,
                    Wait::Until(t) => Some(t.0),
                    Wait::Forever => Some(u64::MAX),
                };
                if !grantable && deadline.is_none() {
                    self.record(
                        session,
                        request,
                        Kind::Acquire,
                        &name,
                        Some(mode),
                        Reply::Busy,
                    );
                    out.push(Output::Busy { session, lock });
                    return Ok(out);
                }
                if self.claims.len() == self.cap.2 {
                    return Err(Error::CapacityExceeded(Table::Claims));
                }
                if self.lock(&name).is_none() {
                    if self.locks.len() == self.cap.1 {
                        return Err(Error::CapacityExceeded(Table::Locks));
                    }
                    self.locks.push(LockEntry {
                        id: self.next_lock,
                        name: name.clone(),
                        delay_until: 0,
                    });
                    self.next_lock += 1;
                }
                let seq = self.next_seq;
                self.next_seq += 1;
                self.claims.push(Claim {
                    seq,
                    session: session.0,
                    lock: name.clone(),
                    mode,
                    holding: false,
                    value: 0,
                });
                let i = self.claims.len() - 1;
                if grantable {
                    let token = self.grant(i);
                    self.record(
                        session,
                        request,
                        Kind::Acquire,
                        &name,
                        Some(mode),
                        Reply::Granted(mode, token),
                    );
                    out.push(Output::Granted {
                        session,
                        lock,
                        mode,
                        token: Token(token),
                    });
                } else {
                    self.claims[i].value = deadline.unwrap();
                    let position = self.waiters(&name).count() as u32;
                    self.record(
                        session,
                        request,
                        Kind::Acquire,
                        &name,
                        Some(mode),
                        Reply::Queued(mode, position),
                    );
                    out.push(Output::Queued {
                        session,
                        lock,
                        mode,
                        position,
                    });
                }
            }
            Input::Release {
                session,
                lock,
                request,
            } => {
                self.session(session)?;
                let name = Model::check_name(&lock)?;
                if let Some(r) =
                    self.check_request(session, request, Some(Kind::Release), &name, None)?
                {
                    let Reply::Released(t) = r else {
                        unreachable!()
                    };
                    out.push(Output::Released {
                        session,
                        lock,
                        token: Token(t),
                        reason: ReleaseReason::Released,
                    });
                    return Ok(out);
                }
                let i = self
                    .claim(session.0, &name)
                    .filter(|i| self.claims[*i].holding)
                    .ok_or(Error::NotHolder(session))?;
                let token = self.claims.remove(i).value;
                self.record(
                    session,
                    request,
                    Kind::Release,
                    &name,
                    None,
                    Reply::Released(token),
                );
                out.push(Output::Released {
                    session,
                    lock,
                    token: Token(token),
                    reason: ReleaseReason::Released,
                });
                self.mark(&name);
                self.grant_dirty(&mut out);
            }
            Input::Cancel {
                session,
                lock,
                request,
            } => {
                self.session(session)?;
                let name = Model::check_name(&lock)?;
                if self
                    .check_request(session, request, Some(Kind::Cancel), &name, None)?
                    .is_some()
                {
                    out.push(Output::WaitCancelled { session, lock });
                    return Ok(out);
                }
                let i = self
                    .claim(session.0, &name)
                    .filter(|i| !self.claims[*i].holding)
                    .ok_or(Error::NotQueued(session))?;
                self.claims.remove(i);
                self.record(
                    session,
                    request,
                    Kind::Cancel,
                    &name,
                    None,
                    Reply::Cancelled,
                );
                out.push(Output::WaitCancelled { session, lock });
                self.mark(&name);
                self.grant_dirty(&mut out);
            }
            Input::Tick { now } => {
                if now.0 < self.now {
                    return Err(Error::TimeWentBackwards {
                        now: Tick(self.now),
                        requested: now,
                    });
                }
                self.now = now.0;
                // 1. expiries, by (deadline, id)
                let mut due: Vec<(u64, u64)> = self
                    .sessions
                    .iter()
                    .filter(|s| s.expires_at <= self.now)
                    .map(|s| (s.expires_at, s.id))
                    .collect();
                due.sort();
                for (_, id) in due {
                    out.push(Output::SessionExpired {
                        session: SessionId(id),
                    });
                    self.end_session(id, ReleaseReason::Expired, &mut out);
                }
                // 2. wait timeouts, by (deadline, seq)
                let mut due: Vec<(u64, u64)> = self
                    .claims
                    .iter()
                    .filter(|c| !c.holding && c.value != u64::MAX && c.value <= self.now)
                    .map(|c| (c.value, c.seq))
                    .collect();
                due.sort();
                for (_, seq) in due {
                    let i = self.claims.iter().position(|c| c.seq == seq).unwrap();
                    let c = self.claims.remove(i);
                    out.push(Output::WaitTimedOut {
                        session: SessionId(c.session),
                        lock: LockName::new(&c.lock).unwrap(),
                    });
                    self.mark(&c.lock);
                }
                // 3. lock-delays that are over, by (end, lock id)
                let mut due: Vec<(u64, u64, String)> = self
                    .locks
                    .iter()
                    .filter(|l| l.delay_until != 0 && l.delay_until <= self.now)
                    .map(|l| (l.delay_until, l.id, l.name.clone()))
                    .collect();
                due.sort();
                for (_, _, name) in due {
                    self.locks
                        .iter_mut()
                        .find(|l| l.name == name)
                        .unwrap()
                        .delay_until = 0;
                    self.mark(&name);
                }
                // 4. grants
                self.grant_dirty(&mut out);
            }
            other => panic!("the generator made an input the model does not know: {other:?}"),
        }
        Ok(out)
    }
}

#[test]
fn the_service_agrees_with_a_naive_model() {
    let seeds: Vec<u64> = match std::env::var("FENCELOCK_SEED") {
        Ok(s) => vec![s.parse().expect("FENCELOCK_SEED is a number")],
        Err(_) => (1..=80).collect(),
    };
    let mut compared = 0;
    for seed in seeds {
        let lock_delay = seed % 3 * 2; // 0, 2 or 4
        let config = Config {
            lock_delay,
            max_name_len: MAX_NAME_LEN as u32,
        };
        let cap = (12, 4, 16);
        let mut svc = svc_with(cap.0, cap.1, cap.2, config);
        let mut model = Model::new(cap, lock_delay);
        for (i, input) in inputs(seed, 400).iter().enumerate() {
            let mut got = Vec::new();
            let real = svc
                .handle(input.clone(), &mut |o| got.push(o))
                .map(|()| got);
            let expected = model.apply(input);
            assert_eq!(real, expected, "seed {seed} step {i}: {input:?}");
            // the queries agree too
            assert_eq!(svc.now().0, model.now);
            assert_eq!(svc.revision(), model.revision, "seed {seed} step {i}");
            let sessions: Vec<u64> = svc.sessions().map(|s| s.0).collect();
            assert_eq!(
                sessions,
                model.sessions.iter().map(|s| s.id).collect::<Vec<_>>(),
                "seed {seed} step {i}"
            );
            for s in &model.sessions {
                assert_eq!(
                    svc.session(SessionId(s.id)).unwrap().expires_at,
                    Tick(s.expires_at)
                );
            }
            let locks: Vec<String> = svc.locks().map(|l| l.as_str().to_owned()).collect();
            assert_eq!(
                locks,
                model
                    .locks
                    .iter()
                    .map(|l| l.name.clone())
                    .collect::<Vec<_>>(),
                "seed {seed} step {i}"
            );
            for l in &locks {
                let h: Vec<(u64, u64)> = svc.holders(l).map(|h| (h.session.0, h.token.0)).collect();
                let mh: Vec<(u64, u64)> = model.holders(l).map(|c| (c.session, c.value)).collect();
                assert_eq!(h, mh, "seed {seed} step {i}: holders of {l}");
                let w: Vec<u64> = svc.waiters(l).map(|w| w.session.0).collect();
                let mw: Vec<u64> = model.waiters(l).map(|c| c.session).collect();
                assert_eq!(w, mw, "seed {seed} step {i}: waiters of {l}");
                let delay = model
                    .lock(l)
                    .map(|e| e.delay_until)
                    .filter(|d| *d > model.now)
                    .map(Tick);
                assert_eq!(
                    svc.lock_delay_until(l),
                    delay,
                    "seed {seed} step {i}: delay of {l}"
                );
            }
            compared += 1;
        }
    }
    assert!(compared > 0);
}
