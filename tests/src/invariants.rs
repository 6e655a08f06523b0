//! DESIGN.md's invariants as executable checks, shared by the simulation, the model-based
//! tests, the conformance generator and the fuzz targets.
//!
//! * [`check_service`]: the state invariants, from the service's public queries alone
//!   (mutual exclusion, tokens in `1..=revision`, no dead or duplicate claims, no waiter
//!   left behind on a lock that could grant it, counts, deadlines, `poll_timeout`).
//! * [`check_round_trip`]: snapshot → restore → snapshot gives the same bytes.
//! * [`Shadow`]: the history invariants, from the output stream: strictly growing tokens,
//!   FIFO, no barging, no grant to a dead session, lock-delay, and every waiter accounted
//!   for.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use fencelock::{
    Input, LockService, Mode, Output, ReleaseReason, SessionId, Storage, Tick, VecStorage,
};

/// Checks every state invariant of `svc` through its queries.
///
/// Errors: a description of the first violation.
pub fn check_service<S: Storage>(svc: &LockService<S>) -> Result<(), String> {
    let now = svc.now().0;
    let revision = svc.revision();
    let cap = svc.capacity();
    let len = svc.len();
    let sessions: Vec<SessionId> = svc.sessions().collect();
    if sessions.windows(2).any(|w| w[0] >= w[1]) {
        return Err(format!(
            "sessions not in strictly increasing id order: {sessions:?}"
        ));
    }
    if sessions.len() != len.sessions as usize || len.sessions > cap.sessions {
        return Err(format!(
            "session count {} / len {} / capacity {}",
            sessions.len(),
            len.sessions,
            cap.sessions
        ));
    }
    let mut deadlines = Vec::new();
    let mut holds: BTreeMap<SessionId, u32> = BTreeMap::new();
    let mut waits: BTreeMap<SessionId, u32> = BTreeMap::new();
    for &s in &sessions {
        let info = svc.session(s).ok_or(format!("{s} listed but not found"))?;
        if info.id != s {
            return Err(format!("{s} info names {}", info.id));
        }
        // No grant to the dead: every listed session is live at `now`.
        if info.expires_at.0 <= now {
            return Err(format!(
                "{s} is listed but expired at {} <= now {now}",
                info.expires_at
            ));
        }
        if info.ttl == 0 || info.expires_at.0 > now.saturating_add(info.ttl) {
            return Err(format!(
                "{s}: expires_at {} beyond now + ttl {}",
                info.expires_at, info.ttl
            ));
        }
        deadlines.push(info.expires_at.0);
    }
    let live: BTreeSet<SessionId> = sessions.iter().copied().collect();
    let locks: Vec<String> = svc.locks().map(|l| l.as_str().to_string()).collect();
    let unique: BTreeSet<&String> = locks.iter().collect();
    if unique.len() != locks.len() {
        return Err(format!("a lock is listed twice: {locks:?}"));
    }
    if locks.len() != len.locks as usize || len.locks > cap.locks {
        return Err(format!(
            "lock count {} / len {} / cap {}",
            locks.len(),
            len.locks,
            cap.locks
        ));
    }
    let mut tokens = BTreeSet::new();
    let mut claims = 0u32;
    for lock in &locks {
        let holders: Vec<_> = svc.holders(lock).collect();
        let waiters: Vec<_> = svc.waiters(lock).collect();
        let delay = svc.lock_delay_until(lock);
        if holders.is_empty() && waiters.is_empty() && delay.is_none() {
            return Err(format!("lock {lock:?} is idle but listed"));
        }
        if let Some(d) = delay {
            if d.0 <= now {
                return Err(format!(
                    "lock {lock:?}: delay {d} reported though not after now"
                ));
            }
            deadlines.push(d.0);
        }
        // 1. Mutual exclusion.
        let exclusive = holders.iter().filter(|h| h.mode == Mode::Exclusive).count();
        if exclusive > 1 || (exclusive == 1 && holders.len() > 1) {
            return Err(format!(
                "lock {lock:?}: mutual exclusion violated: {holders:?}"
            ));
        }
        let mut seen = BTreeSet::new();
        for h in &holders {
            // 2. Tokens: 1..=revision, every grant its own.
            if h.token.0 == 0 || h.token.0 > revision {
                return Err(format!(
                    "lock {lock:?}: token {} outside 1..={revision}",
                    h.token.0
                ));
            }
            if !tokens.insert(h.token.0) {
                return Err(format!("token {} held twice", h.token.0));
            }
            if !live.contains(&h.session) {
                return Err(format!("lock {lock:?} held by dead {}", h.session));
            }
            if !seen.insert(h.session) {
                return Err(format!("lock {lock:?}: {} holds twice", h.session));
            }
            *holds.entry(h.session).or_default() += 1;
        }
        for w in &waiters {
            if !live.contains(&w.session) {
                return Err(format!("lock {lock:?}: dead {} waits", w.session));
            }
            if !seen.insert(w.session) {
                return Err(format!("lock {lock:?}: {} holds/waits twice", w.session));
            }
            if let Some(d) = w.deadline {
                if d.0 <= now {
                    return Err(format!(
                        "lock {lock:?}: wait of {} past its deadline",
                        w.session
                    ));
                }
                deadlines.push(d.0);
            }
            *waits.entry(w.session).or_default() += 1;
        }
        // 3. No lost wake-up: the head of a queue waits only for a reason.
        if let Some(head) = waiters.first() {
            let blocked = delay.is_some()
                || (!holders.is_empty()
                    && (head.mode == Mode::Exclusive || holders[0].mode == Mode::Exclusive));
            if !blocked {
                return Err(format!(
                    "lock {lock:?}: head {} could be granted but waits",
                    head.session
                ));
            }
        }
        claims += (holders.len() + waiters.len()) as u32;
    }
    if claims != len.claims || len.claims > cap.claims {
        return Err(format!(
            "claims {claims} / len {} / cap {}",
            len.claims, cap.claims
        ));
    }
    for &s in &sessions {
        let info = svc.session(s).ok_or("vanished")?;
        let (h, w) = (
            holds.get(&s).copied().unwrap_or(0),
            waits.get(&s).copied().unwrap_or(0),
        );
        if info.holds != h || info.waits != w {
            return Err(format!(
                "{s}: info says {}/{} holds/waits, locks say {h}/{w}",
                info.holds, info.waits
            ));
        }
    }
    let due = deadlines.iter().min().copied();
    if svc.poll_timeout().map(|t| t.0) != due {
        return Err(format!(
            "poll_timeout {:?} but the earliest deadline is {due:?}",
            svc.poll_timeout()
        ));
    }
    Ok(())
}

/// Snapshot, restore into fresh storage of the same capacity, snapshot again: the bytes
/// must be equal and the restored service must pass [`check_service`].
///
/// Errors: a description of the difference.
pub fn check_round_trip<S: Storage>(svc: &LockService<S>) -> Result<(), String> {
    let bytes = svc.snapshot_vec();
    let cap = svc.capacity();
    let storage = VecStorage::new(
        cap.sessions as usize,
        cap.locks as usize,
        cap.claims as usize,
    );
    let restored = LockService::restore(storage, &bytes)
        .map_err(|(_, e)| format!("own snapshot refused by restore: {e}"))?;
    if restored.snapshot_vec() != bytes {
        return Err("restored snapshot differs from the original".into());
    }
    check_service(&restored).map_err(|e| format!("restored service: {e}"))
}

#[derive(Clone, Debug)]
struct Hold {
    session: SessionId,
    mode: Mode,
    token: u64,
}

#[derive(Clone, Debug)]
struct Wait {
    session: SessionId,
    deadline: Option<u64>,
}

/// Bookkeeping of the output stream that checks the history invariants.
///
/// Feed it every input with [`Shadow::before`] and the outputs (or the error) it produced
/// with [`Shadow::after`]. It follows only what the outputs say plus the inputs' own
/// fields, never the service's internals.
#[derive(Clone, Debug, Default)]
pub struct Shadow {
    lock_delay: u64,
    now: u64,
    real_now: u64,
    max_token: u64,
    /// Live sessions and their deadline as the outputs announced it.
    sessions: BTreeMap<SessionId, u64>,
    holds: BTreeMap<String, Vec<Hold>>,
    queues: BTreeMap<String, VecDeque<Wait>>,
    delay_until: BTreeMap<String, u64>,
    input: Option<Input>,
    /// Per session: its latest numbered request, what it was for, and the reply output.
    numbered: BTreeMap<SessionId, (u64, Input, Output)>,
    /// Replayed answers seen (idempotent retries).
    pub replays: u64,
    /// Grants counted (new tokens).
    pub grants: u64,
    /// Waits that ended: granted, timed out, cancelled or dropped with their session.
    pub waits_ended: u64,
    /// Waits queued.
    pub waits_queued: u64,
}

impl Shadow {
    /// A shadow for a fresh service with this lock-delay.
    pub fn new(lock_delay: u64) -> Shadow {
        Shadow {
            lock_delay,
            ..Shadow::default()
        }
    }

    /// Tells the shadow the host's real time (in ticks). A host must tick the service up
    /// to it before any other input; if it does not, a session past its deadline can be
    /// granted (etcd #9921), which [`after`](Self::after) then reports.
    pub fn set_real_now(&mut self, now: u64) {
        self.real_now = now;
    }

    /// What a retried acquire must answer now (see rule 9), given its recorded reply. A
    /// queued session's mode is not tracked here, so it is taken from `outputs`.
    fn acquire_replay(
        &self,
        session: SessionId,
        lock: &fencelock::LockName,
        reply: &Output,
        outputs: &[Output],
    ) -> Output {
        let held = self
            .holds
            .get(lock.as_str())
            .and_then(|h| h.iter().find(|h| h.session == session));
        if let Some(h) = held {
            return Output::Granted {
                session,
                lock: lock.clone(),
                mode: h.mode,
                token: fencelock::Token(h.token),
            };
        }
        let queued = self
            .queues
            .get(lock.as_str())
            .and_then(|q| q.iter().position(|w| w.session == session));
        if let Some(at) = queued {
            let mode = match outputs {
                [Output::Queued { mode, .. }] => *mode,
                _ => Mode::Exclusive,
            };
            return Output::Queued {
                session,
                lock: lock.clone(),
                mode,
                position: at as u32 + 1,
            };
        }
        match reply {
            Output::Granted { token, .. } => Output::Released {
                session,
                lock: lock.clone(),
                token: *token,
                reason: ReleaseReason::Released,
            },
            Output::Queued { .. } => Output::WaitTimedOut {
                session,
                lock: lock.clone(),
            },
            _ => reply.clone(),
        }
    }

    /// Records the input about to be applied.
    pub fn before(&mut self, input: &Input) {
        self.input = Some(input.clone());
    }

    /// Checks the outputs of the input given to [`before`](Self::before).
    ///
    /// Errors: a description of the first violation.
    pub fn after(&mut self, result: Result<(), u32>, outputs: &[Output]) -> Result<(), String> {
        let input = self.input.take().ok_or("after() without before()")?;
        if let Err(code) = result {
            // 5. Atomic errors: nothing emitted (the caller compares snapshots).
            if !outputs.is_empty() {
                return Err(format!("refused input (err {code}) emitted {outputs:?}"));
            }
            return Ok(());
        }
        if let Some((session, n)) = numbered(&input) {
            if let Some((m, first, reply)) = self.numbered.get(&session) {
                if *m == n && same_request(first, &input) {
                    // 9. A repeat of the latest request applies nothing. It replays the
                    // recorded answer, except an acquire's, which answers from the
                    // session's claim now: holding → Granted (current token), queued →
                    // Queued (current position), neither → Busy stays Busy, Queued →
                    // WaitTimedOut, Granted → Released with the recorded token.
                    let expected = match reply {
                        Output::Granted { lock, .. }
                        | Output::Queued { lock, .. }
                        | Output::Busy { lock, .. } => {
                            self.acquire_replay(session, lock, reply, outputs)
                        }
                        _ => reply.clone(),
                    };
                    if outputs != std::slice::from_ref(&expected) {
                        return Err(format!(
                            "retry of request {n} answered {outputs:?}, expected {expected:?} \
                             (first answer was {reply:?})"
                        ));
                    }
                    self.replays += 1;
                    return Ok(());
                }
            }
            if let Some(reply) = outputs.first() {
                self.numbered
                    .insert(session, (n, input.clone(), reply.clone()));
            }
        }
        if let Input::Tick { now } = input {
            if now.0 < self.now {
                return Err("time went backwards but the tick was accepted".into());
            }
            self.now = now.0;
        }
        let mut tick_granted = false;
        for o in outputs {
            self.output(&input, o, &mut tick_granted)?;
        }
        if let Input::Tick { .. } = input {
            // Anything the tick made due is gone.
            if let Some((s, d)) = self.sessions.iter().find(|(_, d)| **d <= self.now) {
                return Err(format!(
                    "{s} (deadline {d}) not expired at tick {}",
                    self.now
                ));
            }
            for (lock, q) in &self.queues {
                if let Some(w) = q.iter().find(|w| w.deadline.is_some_and(|d| d <= self.now)) {
                    return Err(format!("wait of {} on {lock:?} not timed out", w.session));
                }
            }
        }
        Ok(())
    }

    fn end_waits_of(&mut self, session: SessionId) {
        for q in self.queues.values_mut() {
            let before = q.len();
            q.retain(|w| w.session != session);
            self.waits_ended += (before - q.len()) as u64;
        }
    }

    fn output(&mut self, input: &Input, o: &Output, tick_granted: &mut bool) -> Result<(), String> {
        let is_tick = matches!(input, Input::Tick { .. });
        match o {
            Output::SessionOpened {
                session,
                expires_at,
            } => {
                if self.sessions.contains_key(session) {
                    return Err(format!("{session} opened twice"));
                }
                if expires_at.0 <= self.now {
                    return Err(format!("{session} opened already expired"));
                }
                self.sessions.insert(*session, expires_at.0);
            }
            Output::SessionRenewed {
                session,
                expires_at,
            } => {
                let d = self
                    .sessions
                    .get_mut(session)
                    .ok_or(format!("renewed unknown {session}"))?;
                *d = expires_at.0;
            }
            Output::SessionClosed { session } | Output::SessionExpired { session } => {
                let d = self
                    .sessions
                    .remove(session)
                    .ok_or(format!("ended unknown {session}"))?;
                if matches!(o, Output::SessionExpired { .. }) {
                    if !is_tick || d > self.now {
                        return Err(format!(
                            "{session} expired before its deadline {d} (now {})",
                            self.now
                        ));
                    }
                    // 4. Expiry precedes every grant in the tick.
                    if *tick_granted {
                        return Err(format!("{session} expired after a grant in the same tick"));
                    }
                }
                self.end_waits_of(*session);
                self.numbered.remove(session);
            }
            Output::Released {
                session,
                lock,
                token,
                reason,
            } => {
                let holds = self.holds.entry(lock.as_str().to_string()).or_default();
                let i = holds
                    .iter()
                    .position(|h| h.session == *session && h.token == token.0)
                    .ok_or(format!(
                        "{session} released {lock} ({token}) it did not hold"
                    ))?;
                holds.remove(i);
                if *reason == ReleaseReason::Expired && self.lock_delay > 0 {
                    let until = self.now.saturating_add(self.lock_delay);
                    let d = self
                        .delay_until
                        .entry(lock.as_str().to_string())
                        .or_default();
                    *d = (*d).max(until);
                }
                if self.sessions.contains_key(session) && *reason != ReleaseReason::Released {
                    return Err(format!("{session} released ({reason:?}) while still open"));
                }
            }
            Output::Granted {
                session,
                lock,
                mode,
                token,
            } => {
                let name = lock.as_str().to_string();
                let holds = self.holds.entry(name.clone()).or_default();
                if let Some(h) = holds.iter().find(|h| h.session == *session) {
                    // 10. Re-acquire (or a replayed answer): the same grant.
                    if h.token != token.0 || h.mode != *mode || is_tick {
                        return Err(format!(
                            "{session} granted {lock} twice: {} then {token}",
                            h.token
                        ));
                    }
                    return Ok(());
                }
                // 2. Strictly growing tokens.
                if token.0 <= self.max_token {
                    return Err(format!("{token} not above the previous {}", self.max_token));
                }
                self.max_token = token.0;
                self.grants += 1;
                // 4. No grant to the dead.
                // 4. No grant to the dead (by the service's clock and by the host's).
                let now = self.now.max(self.real_now);
                match self.sessions.get(session) {
                    Some(d) if *d > now => {}
                    _ => return Err(format!("{token} granted to dead {session} at {now}")),
                }
                // 1. Mutual exclusion.
                if holds
                    .iter()
                    .any(|h| *mode == Mode::Exclusive || h.mode == Mode::Exclusive)
                {
                    return Err(format!(
                        "{session} granted {lock} {mode} while held: {holds:?}"
                    ));
                }
                // 8. Lock-delay.
                if let Some(d) = self.delay_until.get(&name) {
                    if self.now < *d {
                        return Err(format!(
                            "{lock} granted at {} inside lock-delay until {d}",
                            self.now
                        ));
                    }
                }
                holds.push(Hold {
                    session: *session,
                    mode: *mode,
                    token: token.0,
                });
                // 3. FIFO, no barging: a grant goes to the queue head, or to a new
                // acquirer only when nobody waits.
                let q = self.queues.entry(name).or_default();
                match q.front() {
                    Some(w) if w.session == *session => {
                        q.pop_front();
                        self.waits_ended += 1;
                    }
                    Some(w) => {
                        return Err(format!(
                            "{session} granted {lock} ahead of waiter {}",
                            w.session
                        ));
                    }
                    None => {
                        let direct = matches!(input, Input::Acquire { session: s, lock: l, .. } if s == session && l == lock);
                        if !direct {
                            return Err(format!(
                                "{session} granted {lock} without asking or waiting"
                            ));
                        }
                    }
                }
                if is_tick {
                    *tick_granted = true;
                }
            }
            Output::Queued {
                session,
                lock,
                mode: _,
                position,
            } => {
                let q = self.queues.entry(lock.as_str().to_string()).or_default();
                if q.iter().any(|w| w.session == *session) {
                    // A replayed answer (idempotent retry): nothing new.
                    return Ok(());
                }
                let deadline = match input {
                    Input::Acquire {
                        wait: fencelock::Wait::Until(t),
                        ..
                    } => Some(t.0),
                    _ => None,
                };
                q.push_back(Wait {
                    session: *session,
                    deadline,
                });
                if *position as usize != q.len() {
                    return Err(format!(
                        "{session} queued at {position}, shadow says {}",
                        q.len()
                    ));
                }
                self.waits_queued += 1;
            }
            Output::Busy { .. } => {}
            Output::WaitTimedOut { session, lock } | Output::WaitCancelled { session, lock } => {
                let q = self.queues.entry(lock.as_str().to_string()).or_default();
                let i = q
                    .iter()
                    .position(|w| w.session == *session)
                    .ok_or(format!("{session} left {lock}'s queue it was not in"))?;
                let w = q.remove(i).expect("index found");
                self.waits_ended += 1;
                if let Output::WaitTimedOut { .. } = o {
                    if !is_tick || w.deadline.is_none_or(|d| d > self.now) {
                        return Err(format!("{session} timed out on {lock} before its deadline"));
                    }
                }
            }
            _ => return Err(format!("unknown output {o:?}")),
        }
        Ok(())
    }

    /// Waits the outputs announced that have not ended yet.
    pub fn open_waits(&self) -> usize {
        self.queues.values().map(|q| q.len()).sum()
    }

    /// Live sessions per the outputs.
    pub fn live_sessions(&self) -> usize {
        self.sessions.len()
    }

    /// Checks the service's queries against what the outputs said (holders and queues
    /// in order, live sessions).
    ///
    /// Errors: the first difference.
    pub fn agrees_with<S: Storage>(&self, svc: &LockService<S>) -> Result<(), String> {
        let live: Vec<SessionId> = svc.sessions().collect();
        let mine: Vec<SessionId> = self.sessions.keys().copied().collect();
        if live != mine {
            return Err(format!("sessions: service {live:?}, outputs {mine:?}"));
        }
        for (lock, holds) in &self.holds {
            let mut got: Vec<(SessionId, u64)> =
                svc.holders(lock).map(|h| (h.session, h.token.0)).collect();
            let mut want: Vec<(SessionId, u64)> =
                holds.iter().map(|h| (h.session, h.token)).collect();
            got.sort();
            want.sort();
            if got != want {
                return Err(format!(
                    "holders of {lock:?}: service {got:?}, outputs {want:?}"
                ));
            }
        }
        for (lock, q) in &self.queues {
            let got: Vec<SessionId> = svc.waiters(lock).map(|w| w.session).collect();
            let want: Vec<SessionId> = q.iter().map(|w| w.session).collect();
            if got != want {
                return Err(format!(
                    "queue of {lock:?}: service {got:?}, outputs {want:?}"
                ));
            }
        }
        if svc.revision() != self.max_token {
            return Err(format!(
                "revision {} but the highest token granted is {}",
                svc.revision(),
                self.max_token
            ));
        }
        let _ = Tick(0);
        Ok(())
    }
}

/// The session and number of a numbered request (close never replays).
fn numbered(input: &Input) -> Option<(SessionId, u64)> {
    match input {
        Input::KeepAlive {
            session,
            request: Some(n),
        }
        | Input::Acquire {
            session,
            request: Some(n),
            ..
        }
        | Input::Release {
            session,
            request: Some(n),
            ..
        }
        | Input::Cancel {
            session,
            request: Some(n),
            ..
        } => Some((*session, *n)),
        _ => None,
    }
}

/// Whether two numbered inputs are the same request (same kind, lock and mode).
fn same_request(a: &Input, b: &Input) -> bool {
    match (a, b) {
        (Input::KeepAlive { .. }, Input::KeepAlive { .. }) => true,
        (
            Input::Acquire {
                lock: l1, mode: m1, ..
            },
            Input::Acquire {
                lock: l2, mode: m2, ..
            },
        ) => l1 == l2 && m1 == m2,
        (Input::Release { lock: l1, .. }, Input::Release { lock: l2, .. })
        | (Input::Cancel { lock: l1, .. }, Input::Cancel { lock: l2, .. }) => l1 == l2,
        _ => false,
    }
}
