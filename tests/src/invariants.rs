//! The invariants of docs/SPEC.md §7 as executable checks: the one checker, used by the
//! simulation, the model-based tests, the determinism tests, the conformance generator,
//! the model checker and the fuzz targets. Every message names the invariant it found
//! broken (I1 … I10, and "I-time" for the rule on keep-alives after the list).
//!
//! * [`check_service`]: the state invariants, from the service's public queries alone
//!   (I1 mutual exclusion, I2 tokens in `1..=revision` and never held twice, I4 no dead or
//!   past-deadline session listed, I3 no waiter left behind on a lock that could grant
//!   it, I8 lock-delay in the future only, within lock-delay of now, and with no exclusive
//!   holder, I2 holders' tokens rising in grant order, I10 no session twice on a lock; counts,
//!   deadlines, `poll_timeout`).
//! * [`check_round_trip`]: snapshot → restore → snapshot gives the same bytes (§9).
//! * [`Shadow`]: the history invariants, from each input's reply and events: I2 strictly
//!   growing tokens, I3 FIFO and no barging, I4 no grant to a dead session and expiry
//!   before grants, I5 a refused input emits only its advance's events, I7 at most
//!   `max_events` events, I8 lock-delay, I9 retries replay, I10 re-acquire keeps the
//!   token, I-time (a keep-alive moves the deadline to its own `now` + ttl), and every
//!   waiter accounted for.
//!
//! `tests/invariant_checks.rs` shows each of the [`Shadow`]'s checks firing on a doctored
//! reply or event (and passing the same story as the core answered it), each of
//! [`check_service`]'s on one doctored query answer ([`Queries`]), and its I2 on a core
//! built with the test-only `fault-injection` feature.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use fencelock::{
    Capacity, Change, Error, Holder, Input, Label, LockName, LockService, Mode, Output, Permits,
    ReleaseReason, Reply, SessionId, SessionInfo, Storage, Tick, Token, Usage, VecStorage, Waiter,
};

/// The queries [`check_service`] reads, and nothing else: a [`LockService`] answers them
/// as it is; `tests/invariant_checks.rs` wraps one to doctor a single answer into what a
/// broken core would report, and so sees each check fire.
pub trait Queries {
    /// [`LockService::now`].
    fn now(&self) -> Tick;
    /// [`LockService::revision`].
    fn revision(&self) -> u64;
    /// [`LockService::capacity`].
    fn capacity(&self) -> Capacity;
    /// [`LockService::usage`].
    fn usage(&self) -> Usage;
    /// [`LockService::sessions`], collected.
    fn sessions(&self) -> Vec<SessionId>;
    /// [`LockService::session`].
    fn session(&self, s: SessionId) -> Option<SessionInfo>;
    /// [`LockService::is_open`].
    fn is_open(&self, s: SessionId) -> bool;
    /// [`LockService::locks`], collected as strings.
    fn locks(&self) -> Vec<String>;
    /// [`LockService::holders`], collected.
    fn holders(&self, lock: &str) -> Vec<Holder>;
    /// [`LockService::waiters`], collected.
    fn waiters(&self, lock: &str) -> Vec<Waiter>;
    /// [`LockService::lock_delay_until`].
    fn lock_delay_until(&self, lock: &str) -> Option<Tick>;
    /// [`LockService::permits`].
    fn permits(&self, lock: &str) -> Option<Permits>;
    /// [`LockService::poll_timeout`].
    fn poll_timeout(&self) -> Option<Tick>;
    /// The lock-delay of [`LockService::config`].
    fn lock_delay(&self) -> u64;
}

impl<S: Storage> Queries for LockService<S> {
    fn now(&self) -> Tick {
        LockService::now(self)
    }
    fn revision(&self) -> u64 {
        LockService::revision(self)
    }
    fn capacity(&self) -> Capacity {
        LockService::capacity(self)
    }
    fn usage(&self) -> Usage {
        LockService::usage(self)
    }
    fn sessions(&self) -> Vec<SessionId> {
        LockService::sessions(self).collect()
    }
    fn session(&self, s: SessionId) -> Option<SessionInfo> {
        LockService::session(self, s)
    }
    fn is_open(&self, s: SessionId) -> bool {
        LockService::is_open(self, s)
    }
    fn locks(&self) -> Vec<String> {
        LockService::locks(self)
            .map(|l| l.as_str().to_string())
            .collect()
    }
    fn holders(&self, lock: &str) -> Vec<Holder> {
        LockService::holders(self, lock).collect()
    }
    fn waiters(&self, lock: &str) -> Vec<Waiter> {
        LockService::waiters(self, lock).collect()
    }
    fn lock_delay_until(&self, lock: &str) -> Option<Tick> {
        LockService::lock_delay_until(self, lock)
    }
    fn permits(&self, lock: &str) -> Option<Permits> {
        LockService::permits(self, lock)
    }
    fn poll_timeout(&self) -> Option<Tick> {
        LockService::poll_timeout(self)
    }
    fn lock_delay(&self) -> u64 {
        LockService::config(self).lock_delay
    }
}

/// Checks every state invariant of `svc` through its queries.
///
/// Errors: a description of the first violation.
pub fn check_service(svc: &(impl Queries + ?Sized)) -> Result<(), String> {
    let now = svc.now().0;
    let revision = svc.revision();
    let cap = svc.capacity();
    let len = svc.usage();
    let sessions: Vec<SessionId> = svc.sessions();
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
                "I4: {s} is listed but expired at {} <= now {now}",
                info.expires_at
            ));
        }
        if info.ttl == 0 || info.expires_at.0 > now.saturating_add(info.ttl) {
            return Err(format!(
                "I-time: {s}: expires_at {} beyond now + ttl {}",
                info.expires_at, info.ttl
            ));
        }
        deadlines.push(info.expires_at.0);
    }
    let live: BTreeSet<SessionId> = sessions.iter().copied().collect();
    // `is_open` answers as the listing does: for every listed id, and for the ids next to
    // them (closed, expired, or never opened), and id 0, which is never an open session.
    let mut probe: BTreeSet<u64> = BTreeSet::from([0]);
    for s in &sessions {
        probe.extend([s.0.saturating_sub(1), s.0, s.0.saturating_add(1)]);
    }
    for id in probe {
        if svc.is_open(SessionId(id)) != live.contains(&SessionId(id)) {
            return Err(format!(
                "is_open({id}) = {} but the listing says {}",
                svc.is_open(SessionId(id)),
                live.contains(&SessionId(id))
            ));
        }
    }
    let locks: Vec<String> = svc.locks();
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
    let mut watched_only = 0u32;
    for lock in &locks {
        let holders = svc.holders(lock);
        let waiters = svc.waiters(lock);
        let delay = svc.lock_delay_until(lock);
        if holders.is_empty() && waiters.is_empty() && delay.is_none() {
            // Only a watch keeps such an entry (counted against the watch rows below).
            watched_only += 1;
        }
        if let Some(d) = delay {
            if d.0 <= now {
                return Err(format!(
                    "I8: lock {lock:?}: delay {d} reported though not after now"
                ));
            }
            // A delay begins when a holder's session ends, at the latest now.
            if d.0 > now.saturating_add(svc.lock_delay()) {
                return Err(format!(
                    "I8: lock {lock:?}: delay {d} beyond now + lock-delay {}",
                    svc.lock_delay()
                ));
            }
            // No grant during a delay, and one begins only when the last exclusive hold
            // ended (shared holders may remain).
            if holders.iter().any(|h| h.mode == Mode::Exclusive) {
                return Err(format!(
                    "I8: lock {lock:?}: an exclusive holder during its delay: {holders:?}"
                ));
            }
            deadlines.push(d.0);
        }
        // I1 Mutual exclusion.
        let exclusive = holders.iter().filter(|h| h.mode == Mode::Exclusive).count();
        if exclusive > 1 || (exclusive == 1 && holders.len() > 1) {
            return Err(format!(
                "I1: lock {lock:?}: mutual exclusion violated: {holders:?}"
            ));
        }
        // I1 for semaphores: one limit, never more permits held than it, no plain claim.
        let modes = holders
            .iter()
            .map(|h| h.mode)
            .chain(waiters.iter().map(|w| w.mode));
        let limits: BTreeSet<Option<u32>> = modes
            .map(|m| match m {
                Mode::Permits { limit, .. } => Some(limit),
                _ => None,
            })
            .collect();
        if limits.len() > 1 {
            return Err(format!(
                "I11: lock {lock:?}: plain and permit claims or two limits: {holders:?} {waiters:?}"
            ));
        }
        let in_use: u64 = holders
            .iter()
            .map(|h| match h.mode {
                Mode::Permits { count, .. } => u64::from(count),
                _ => 0,
            })
            .sum();
        let semaphore = match limits.first() {
            Some(Some(limit)) => {
                if in_use > u64::from(*limit) {
                    return Err(format!(
                        "I11: lock {lock:?}: {in_use} permits held, limit {limit}: {holders:?}"
                    ));
                }
                Some(Permits {
                    in_use: in_use as u32,
                    limit: *limit,
                })
            }
            _ => None,
        };
        if svc.permits(lock) != semaphore {
            return Err(format!(
                "lock {lock:?}: permits() says {:?}, holders and waiters {semaphore:?}",
                svc.permits(lock)
            ));
        }
        let mut seen = BTreeSet::new();
        for h in &holders {
            // I2 Tokens: 1..=revision, every grant its own.
            if h.token.0 == 0 || h.token.0 > revision {
                return Err(format!(
                    "I2: lock {lock:?}: token {} outside 1..={revision}",
                    h.token.0
                ));
            }
            if !tokens.insert(h.token.0) {
                return Err(format!("I2: token {} held twice", h.token.0));
            }
            if !live.contains(&h.session) {
                return Err(format!("I4: lock {lock:?} held by dead {}", h.session));
            }
            if !seen.insert(h.session) {
                return Err(format!("I10: lock {lock:?}: {} holds twice", h.session));
            }
            *holds.entry(h.session).or_default() += 1;
        }
        // Holders are listed in grant order, so their tokens rise.
        if holders.windows(2).any(|w| w[0].token >= w[1].token) {
            return Err(format!(
                "I2: lock {lock:?}: holders' tokens not rising in grant order: {holders:?}"
            ));
        }
        for w in &waiters {
            if !live.contains(&w.session) {
                return Err(format!("I4: lock {lock:?}: dead {} waits", w.session));
            }
            if !seen.insert(w.session) {
                return Err(format!(
                    "I10: lock {lock:?}: {} holds/waits twice",
                    w.session
                ));
            }
            if let Some(d) = w.deadline {
                if d.0 <= now {
                    return Err(format!(
                        "I3: lock {lock:?}: wait of {} past its deadline",
                        w.session
                    ));
                }
                deadlines.push(d.0);
            }
            *waits.entry(w.session).or_default() += 1;
        }
        // I3 No lost wake-up: the head of a queue waits only for a reason.
        if let Some(head) = waiters.first() {
            let blocked = delay.is_some()
                || match head.mode {
                    Mode::Permits { count, limit } => in_use + u64::from(count) > u64::from(limit),
                    _ => {
                        !holders.is_empty()
                            && (head.mode == Mode::Exclusive || holders[0].mode == Mode::Exclusive)
                    }
                };
            if !blocked {
                return Err(format!(
                    "I3: lock {lock:?}: head {} could be granted but waits",
                    head.session
                ));
            }
        }
        claims += (holders.len() + waiters.len()) as u32;
    }
    // Claim rows: holds and waits, plus watches (no query lists them: every lock listed
    // with neither holder, waiter nor lock-delay needs one of its own).
    if claims > len.claims || len.claims > cap.claims {
        return Err(format!(
            "claims {claims} / len {} / cap {}",
            len.claims, cap.claims
        ));
    }
    if watched_only > len.claims - claims {
        return Err(format!(
            "{watched_only} locks are idle but listed, with {} watch rows",
            len.claims - claims
        ));
    }
    let mut watches = 0u64;
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
        watches += u64::from(info.watches);
    }
    // Every claim row that is neither a hold nor a wait is one session's watch.
    if watches != u64::from(len.claims - claims) {
        return Err(format!(
            "the sessions count {watches} watches, the claim rows beside the holds and waits are {}",
            len.claims - claims
        ));
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
struct Waiting {
    session: SessionId,
    mode: Mode,
    deadline: Option<u64>,
}

/// Bookkeeping of what the service answered and emitted, which checks the history
/// invariants.
///
/// Feed it every input with [`Shadow::before`] and, after the service handled it, the
/// reply (or the error) and the events with [`Shadow::after`]. It follows only what the
/// replies and events say plus the inputs' own fields, never the service's internals.
#[derive(Clone, Debug, Default)]
pub struct Shadow {
    lock_delay: u64,
    now: u64,
    real_now: u64,
    max_token: u64,
    max_session: u64,
    /// Live sessions: their ttl and deadline as the replies announced them.
    sessions: BTreeMap<SessionId, (u64, u64)>,
    holds: BTreeMap<String, Vec<Hold>>,
    queues: BTreeMap<String, VecDeque<Waiting>>,
    delay_until: BTreeMap<String, u64>,
    input: Option<(Input, usize)>,
    /// Per session: its latest numbered request, what it was, and the reply it got.
    numbered: BTreeMap<SessionId, (u64, Input, Reply)>,
    /// Each live session's label as its open gave it.
    labels: BTreeMap<SessionId, Label>,
    /// Per lock: its watchers in the order they began.
    watchers: BTreeMap<String, Vec<SessionId>>,
    /// Watcher events due next, in this order (each holder change is followed at once by
    /// one event per watcher of its lock).
    due: VecDeque<Output>,
    /// Watcher events seen.
    pub watch_events: u64,
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
    /// A shadow for a fresh service with this lock-delay. Cost: O(1).
    pub fn new(lock_delay: u64) -> Shadow {
        Shadow {
            lock_delay,
            ..Shadow::default()
        }
    }

    /// Tells the shadow the host's real time (in ticks). A host must stamp each input with
    /// it; one that stamps an older time (the time of its last tick, say) can get a
    /// session past its deadline granted (the lease-expiry race etcd fixed in its lessor),
    /// which [`after`](Self::after) then reports. Cost: O(1).
    pub fn set_real_now(&mut self, now: u64) {
        self.real_now = now;
    }

    /// Records a `raise_revision` the service answered with `revision`: the revision may
    /// now be above every token granted, and the next grant must be above it (I2).
    /// Cost: O(1).
    pub fn raised(&mut self, revision: u64) {
        self.max_token = self.max_token.max(revision);
    }

    /// Records the input about to be applied. Cost: O(locks).
    pub fn before(&mut self, input: &Input) {
        let bound = self.event_bound();
        self.input = Some((input.clone(), bound));
    }

    /// The most events one input may emit in the state the replies and events described
    /// (I7): a session expires once; a hold or wait changes holder at most twice in one
    /// input (granted, then released by a close), an acquire's new claim once; each change
    /// reaches every watcher of its lock — at most as many as the most-watched lock has
    /// (tighter than the service's bound, which counts all watches up to `max_watchers`);
    /// a watch's `Holding` events follow an advance that changes each claim at most once.
    fn event_bound(&self) -> usize {
        let holds: usize = self.holds.values().map(Vec::len).sum();
        let waits: usize = self.queues.values().map(VecDeque::len).sum();
        let h = holds + waits;
        let most_watched = self.watchers.values().map(Vec::len).max().unwrap_or(0);
        self.sessions.len() + 2 * h + (2 * h + 1) * most_watched
    }

    /// Checks the reply (or error) and the events of the input given to
    /// [`before`](Self::before). Cost: O(events × (claims + locks)).
    ///
    /// Errors: a description of the first violation, naming the invariant.
    pub fn after(
        &mut self,
        result: &Result<Reply, Error>,
        events: &[Output],
    ) -> Result<(), String> {
        let (input, bound) = self.input.take().ok_or("after() without before()")?;
        if events.len() > bound {
            return Err(format!(
                "I7: {} events, more than max_events = {bound} before the input",
                events.len()
            ));
        }
        let now = input.now().0;
        match result {
            Err(Error::TimeWentBackwards { .. }) | Err(Error::BufferTooSmall { .. }) => {
                if matches!(result, Err(Error::TimeWentBackwards { .. })) && now >= self.now {
                    return Err(format!(
                        "TimeWentBackwards for {now}, but time is {}",
                        self.now
                    ));
                }
                if !events.is_empty() {
                    return Err(format!(
                        "I5: refused before the advance but emitted {events:?}"
                    ));
                }
                return Ok(());
            }
            _ => {}
        }
        if now < self.now {
            return Err(format!(
                "I-time: an input at {now} was taken though time is {}",
                self.now
            ));
        }
        self.now = now;
        let replay = match (result, numbered(&input)) {
            (Ok(_), Some((session, n))) => match self.numbered.get(&session) {
                Some((m, first, _)) if n == *m && same_request(first, &input) => true,
                Some((m, _, _)) if n == *m => {
                    return Err(format!(
                        "I9: request number {n} reused for {input:?}, accepted"
                    ))
                }
                Some((m, _, _)) if n < *m => {
                    return Err(format!("I9: stale request number {n} (< {m}) accepted"))
                }
                _ => false,
            },
            _ => false,
        };
        let mut pending = match result {
            Ok(r) if !replay => Some(*r),
            _ => None,
        };
        let own_events = matches!(
            input,
            Input::Release { .. }
                | Input::ReleaseHold { .. }
                | Input::Cancel { .. }
                | Input::CloseSession { .. }
                | Input::Acquire { .. }
                | Input::Watch { .. }
        );
        let mut granted = false;
        for e in events {
            if self.due.is_empty() && own_events && pending.is_some() && self.needs_reply(e) {
                let r = pending.take().expect("pending");
                self.reply(&input, r)?;
            }
            if let Some(want) = self.due.pop_front() {
                if *e != want {
                    return Err(format!(
                        "I12 watch: {e:?} where the watcher's event {want:?} was due"
                    ));
                }
                self.watch_events += 1;
                continue;
            }
            self.event(&input, e, &mut granted)?;
        }
        if !self.due.is_empty() {
            return Err(format!(
                "I12 watch: {:?} due but not emitted (events {events:?})",
                self.due
            ));
        }
        if replay {
            let Ok(got) = result else {
                unreachable!("a replay is Ok")
            };
            let (session, _) = numbered(&input).expect("numbered");
            let (_, first, recorded) = self.numbered[&session].clone();
            let want = self.replay_answer(session, &first, recorded);
            if *got != want {
                return Err(format!(
                    "I9: retry of {input:?} answered {got:?}, expected {want:?} (first answer \
                     {recorded:?})"
                ));
            }
            self.replays += 1;
        } else {
            if let Some(r) = pending {
                self.reply(&input, r)?;
            }
            if let Some(want) = self.due.front() {
                return Err(format!(
                    "I12 watch: {want:?} due after {input:?} but not emitted (events {events:?})"
                ));
            }
            // A fresh numbered request (close records nothing: the session is gone).
            if let (Ok(r), Some((session, n))) = (result, numbered(&input)) {
                if self.sessions.contains_key(&session) {
                    self.numbered.insert(session, (n, input.clone(), *r));
                }
            }
        }
        // Anything the advance made due is gone (docs/SPEC.md §2).
        if let Some((s, (_, d))) = self.sessions.iter().find(|(_, (_, d))| *d <= self.now) {
            return Err(format!(
                "I4: {s} (deadline {d}) not expired at {}",
                self.now
            ));
        }
        for (lock, q) in &self.queues {
            if let Some(w) = q.iter().find(|w| w.deadline.is_some_and(|d| d <= self.now)) {
                return Err(format!(
                    "I3: wait of {} on {lock:?} not timed out at {}",
                    w.session, self.now
                ));
            }
        }
        Ok(())
    }

    /// Whether event `e` (of a release, cancel or close) cannot be explained before the
    /// input's own change: a grant to a waiter that is not yet grantable.
    fn needs_reply(&self, e: &Output) -> bool {
        match e {
            Output::Granted {
                session,
                lock,
                mode,
                ..
            } => !self.grantable_head(*session, lock.as_str(), *mode),
            // A watcher's event with nothing due: the caller's own grant, release or watch.
            Output::HolderChanged { .. } => true,
            _ => false,
        }
    }

    /// Queues one event per watcher of `lock` about `holder`'s hold (`mode`, `token`).
    fn tell_watchers(
        &mut self,
        lock: &LockName,
        holder: SessionId,
        mode: Mode,
        token: u64,
        change: Change,
    ) {
        let label = self.labels.get(&holder).cloned().unwrap_or_default();
        for w in self.watchers.get(lock.as_str()).map_or(&[][..], |w| &w[..]) {
            self.due.push_back(Output::HolderChanged {
                session: *w,
                lock: lock.clone(),
                holder,
                mode,
                token: Token(token),
                change,
                label,
            });
        }
    }

    /// Ends every watch of `session` (its close or expiry): nothing reaches it after.
    fn end_watches_of(&mut self, session: SessionId) {
        for w in self.watchers.values_mut() {
            w.retain(|s| *s != session);
        }
    }

    fn grantable_head(&self, session: SessionId, lock: &str, mode: Mode) -> bool {
        let head = self.queues.get(lock).and_then(|q| q.front());
        let holds = self.holds.get(lock).map_or(&[][..], |h| &h[..]);
        head.is_some_and(|w| w.session == session)
            && compatible(holds, mode)
            && self.delay_until.get(lock).is_none_or(|d| self.now >= *d)
    }

    /// What a repeat of `first` (which was answered `recorded`) must answer now.
    fn replay_answer(&self, session: SessionId, first: &Input, recorded: Reply) -> Reply {
        let Input::Acquire { lock, .. } = first else {
            return recorded;
        };
        let held = self
            .holds
            .get(lock.as_str())
            .and_then(|h| h.iter().find(|h| h.session == session));
        if let Some(h) = held {
            return Reply::Granted {
                mode: h.mode,
                token: Token(h.token),
            };
        }
        let queued = self.queues.get(lock.as_str()).and_then(|q| {
            q.iter()
                .position(|w| w.session == session)
                .map(|at| (at, q[at].mode))
        });
        if let Some((at, mode)) = queued {
            return Reply::Queued {
                mode,
                position: at as u32 + 1,
            };
        }
        match recorded {
            Reply::Granted { token, .. } => Reply::HoldEnded { token },
            Reply::Queued { .. } => Reply::WaitEnded,
            other => other,
        }
    }

    fn end_waits_of(&mut self, session: SessionId) {
        for q in self.queues.values_mut() {
            let before = q.len();
            q.retain(|w| w.session != session);
            self.waits_ended += (before - q.len()) as u64;
        }
    }

    /// A new token for `session` on `lock`: I1, I2, I4, I8.
    fn new_grant(
        &mut self,
        session: SessionId,
        lock: &LockName,
        mode: Mode,
        token: Token,
    ) -> Result<(), String> {
        let name = lock.as_str().to_string();
        // I2 Strictly growing tokens.
        if token.0 <= self.max_token {
            return Err(format!(
                "I2: {token} not above the previous {}",
                self.max_token
            ));
        }
        self.max_token = token.0;
        self.grants += 1;
        // I4 No grant to the dead (by the service's clock and by the host's).
        let now = self.now.max(self.real_now);
        match self.sessions.get(&session) {
            Some((_, d)) if *d > now => {}
            _ => return Err(format!("I4: {token} granted to dead {session} at {now}")),
        }
        // I8 Lock-delay.
        if let Some(d) = self.delay_until.get(&name) {
            if self.now < *d {
                return Err(format!(
                    "I8: {lock} granted at {} inside lock-delay until {d}",
                    self.now
                ));
            }
        }
        let holds = self.holds.entry(name).or_default();
        // I1 Mutual exclusion.
        if !compatible(holds, mode) {
            return Err(format!(
                "I1: {session} granted {lock} {mode} while held: {holds:?}"
            ));
        }
        holds.push(Hold {
            session,
            mode,
            token: token.0,
        });
        Ok(())
    }

    fn event(&mut self, input: &Input, e: &Output, granted: &mut bool) -> Result<(), String> {
        match e {
            Output::SessionExpired { session } => {
                let (_, d) = self
                    .sessions
                    .remove(session)
                    .ok_or(format!("{session} expired but was not open"))?;
                if d > self.now {
                    return Err(format!(
                        "I-time: {session} expired at {} before its deadline {d}",
                        self.now
                    ));
                }
                // I4 Expiry precedes every grant of the advance.
                if *granted {
                    return Err(format!(
                        "I4: {session} expired after a grant in the same input"
                    ));
                }
                self.end_waits_of(*session);
                self.end_watches_of(*session);
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
                let hold = holds.remove(i);
                self.end_watches_of(*session);
                let change = match reason {
                    ReleaseReason::Expired => Change::Expired,
                    _ => Change::Closed,
                };
                self.tell_watchers(lock, *session, hold.mode, hold.token, change);
                match reason {
                    ReleaseReason::Expired => {
                        if self.sessions.contains_key(session) {
                            return Err(format!("{session} released (expired) while still open"));
                        }
                        if self.lock_delay > 0 {
                            let until = self.now.saturating_add(self.lock_delay);
                            let d = self
                                .delay_until
                                .entry(lock.as_str().to_string())
                                .or_default();
                            *d = (*d).max(until);
                        }
                    }
                    ReleaseReason::Closed => {
                        if input.session() != Some(*session)
                            || !matches!(input, Input::CloseSession { .. })
                        {
                            return Err(format!("{e:?} but the input was {input:?}"));
                        }
                    }
                    _ => return Err(format!("an event for the caller's own release: {e:?}")),
                }
            }
            Output::Granted {
                session,
                lock,
                mode,
                token,
            } => {
                // I3 FIFO: an event grant goes to the head of the queue.
                let q = self.queues.entry(lock.as_str().to_string()).or_default();
                match q.front() {
                    // The advance times out every wait whose deadline came before it grants
                    // (SPEC §2): a head granted at or past its deadline was owed a timeout.
                    Some(w)
                        if w.session == *session && w.deadline.is_some_and(|d| d <= self.now) =>
                    {
                        return Err(format!(
                            "I3: {session} granted {lock} at {} on a wait that ended at {}: not timed out first",
                            self.now,
                            w.deadline.unwrap_or_default()
                        ));
                    }
                    Some(w) if w.session == *session && w.mode == *mode => {
                        q.pop_front();
                        self.waits_ended += 1;
                    }
                    Some(w) => {
                        return Err(format!(
                            "I3: {session} granted {lock} {mode} ahead of waiter {} ({})",
                            w.session, w.mode
                        ));
                    }
                    None => return Err(format!("I3: {session} granted {lock} without waiting")),
                }
                self.new_grant(*session, lock, *mode, *token)?;
                self.tell_watchers(lock, *session, *mode, token.0, Change::Granted);
                *granted = true;
            }
            Output::WaitTimedOut { session, lock } => {
                let q = self.queues.entry(lock.as_str().to_string()).or_default();
                let i = q
                    .iter()
                    .position(|w| w.session == *session)
                    .ok_or(format!("{session} left {lock}'s queue it was not in"))?;
                let w = q.remove(i).expect("index found");
                self.waits_ended += 1;
                if w.deadline.is_none_or(|d| d > self.now) {
                    return Err(format!(
                        "I3: {session} timed out on {lock} before its deadline"
                    ));
                }
            }
            Output::HolderChanged { .. } => {
                return Err(format!(
                    "I12 watch: {e:?} follows no holder change (or its watch had ended)"
                ))
            }
            _ => return Err(format!("unknown event {e:?}")),
        }
        Ok(())
    }

    /// Applies the caller's reply to a fresh (not replayed) input.
    fn reply(&mut self, input: &Input, r: Reply) -> Result<(), String> {
        let now = self.now;
        match (input, r) {
            (
                Input::OpenSession { ttl, .. } | Input::OpenLabeled { ttl, .. },
                Reply::Opened {
                    session,
                    expires_at,
                },
            ) => {
                let label = match input {
                    Input::OpenLabeled { label, .. } => *label,
                    _ => Label::default(),
                };
                self.labels.insert(session, label);
                if session.0 <= self.max_session {
                    return Err(format!(
                        "{session} opened, but ids up to {} were used",
                        self.max_session
                    ));
                }
                self.max_session = session.0;
                if Some(expires_at.0) != now.checked_add(*ttl) {
                    return Err(format!(
                        "I-time: opened at {now} with ttl {ttl}, expires at {expires_at}"
                    ));
                }
                self.sessions.insert(session, (*ttl, expires_at.0));
            }
            (Input::KeepAlive { session, .. }, Reply::KeptAlive { expires_at }) => {
                let (ttl, d) = self
                    .sessions
                    .get_mut(session)
                    .ok_or(format!("kept alive {session}, which is not open"))?;
                if Some(expires_at.0) != now.checked_add(*ttl) {
                    return Err(format!(
                        "I-time: keep-alive of {session} at {now} (ttl {ttl}) gave deadline {expires_at}"
                    ));
                }
                *d = expires_at.0;
            }
            (Input::CloseSession { session, .. }, Reply::Closed) => {
                self.sessions
                    .remove(session)
                    .ok_or(format!("closed {session}, which is not open"))?;
                if let Some((lock, _)) = self
                    .holds
                    .iter()
                    .find(|(_, h)| h.iter().any(|h| h.session == *session))
                {
                    return Err(format!("closed {session} still holds {lock:?}"));
                }
                self.end_waits_of(*session);
                self.end_watches_of(*session);
                self.labels.remove(session);
                self.numbered.remove(session);
            }
            (
                Input::Acquire {
                    session,
                    lock,
                    mode,
                    ..
                },
                Reply::Granted { mode: m, token },
            ) => {
                let name = lock.as_str();
                let held = self
                    .holds
                    .get(name)
                    .and_then(|h| h.iter().find(|h| h.session == *session))
                    .cloned();
                if let Some(h) = held {
                    // I10 Re-acquire: the same grant.
                    if h.token != token.0 || h.mode != m || m != *mode {
                        return Err(format!(
                            "I10: {session} re-acquired {lock}: held {} {}, answered {token} {m}",
                            h.token, h.mode
                        ));
                    }
                    return Ok(());
                }
                if m != *mode {
                    return Err(format!("asked for {lock} {mode}, granted {m}"));
                }
                // I3 No barging: a direct grant only when nobody waits.
                if let Some(w) = self.queues.get(name).and_then(|q| q.front()) {
                    return Err(format!(
                        "I3: {session} granted {lock} directly while {} waits",
                        w.session
                    ));
                }
                self.new_grant(*session, lock, m, token)?;
                self.tell_watchers(lock, *session, m, token.0, Change::Granted);
            }
            (
                Input::Acquire {
                    session,
                    lock,
                    mode,
                    wait,
                    ..
                },
                Reply::Queued { mode: m, position },
            ) => {
                if m != *mode {
                    return Err(format!("asked for {lock} {mode}, queued {m}"));
                }
                let deadline = match wait {
                    fencelock::Wait::Until(t) if t.0 <= now => {
                        return Err(format!(
                            "I3: queued with a deadline {t} not after now {now}"
                        ))
                    }
                    fencelock::Wait::Until(t) => Some(t.0),
                    fencelock::Wait::Forever => None,
                    fencelock::Wait::None => return Err("I3: a try-lock was queued".into()),
                };
                let q = self.queues.entry(lock.as_str().to_string()).or_default();
                if q.iter().any(|w| w.session == *session) {
                    return Err(format!("{session} queued twice on {lock}"));
                }
                q.push_back(Waiting {
                    session: *session,
                    mode: m,
                    deadline,
                });
                if position as usize != q.len() {
                    return Err(format!(
                        "I3: {session} queued at {position}, shadow says {}",
                        q.len()
                    ));
                }
                self.waits_queued += 1;
            }
            (Input::Acquire { lock, mode, .. }, Reply::Busy) => {
                let name = lock.as_str();
                let holds = self.holds.get(name).map_or(&[][..], |h| &h[..]);
                let free = compatible(holds, *mode)
                    && self.queues.get(name).is_none_or(|q| q.is_empty())
                    && self.delay_until.get(name).is_none_or(|d| now >= *d);
                if free {
                    return Err(format!("I3: busy, but {lock} was grantable in {mode}"));
                }
            }
            (
                Input::Release { session, lock, .. } | Input::ReleaseHold { session, lock, .. },
                Reply::Released { token },
            ) => {
                if let Input::ReleaseHold { token: named, .. } = input {
                    if *named != token {
                        return Err(format!(
                            "{session} asked to release {lock} ({named}) and released {token}"
                        ));
                    }
                }
                let holds = self.holds.entry(lock.as_str().to_string()).or_default();
                let i = holds
                    .iter()
                    .position(|h| h.session == *session && h.token == token.0)
                    .ok_or(format!(
                        "{session} released {lock} ({token}) it did not hold"
                    ))?;
                let hold = holds.remove(i);
                self.tell_watchers(lock, *session, hold.mode, hold.token, Change::Released);
            }
            (Input::Cancel { session, lock, .. }, Reply::Cancelled) => {
                let q = self.queues.entry(lock.as_str().to_string()).or_default();
                let i = q
                    .iter()
                    .position(|w| w.session == *session)
                    .ok_or(format!("{session} cancelled {lock}, but it was not queued"))?;
                q.remove(i);
                self.waits_ended += 1;
            }
            (Input::Watch { session, lock, .. }, Reply::Watching { holders }) => {
                let watchers = self.watchers.entry(lock.as_str().to_string()).or_default();
                if watchers.contains(session) {
                    return Err(format!("{session} watches {lock} twice"));
                }
                watchers.push(*session);
                let mut holds = self.holds.get(lock.as_str()).cloned().unwrap_or_default();
                if holds.len() != holders as usize {
                    return Err(format!(
                        "watch of {lock}: {holders} holders answered, {} hold it",
                        holds.len()
                    ));
                }
                // In grant order, to this watcher only.
                holds.sort_by_key(|h| h.token);
                for h in holds {
                    self.due.push_back(Output::HolderChanged {
                        session: *session,
                        lock: lock.clone(),
                        holder: h.session,
                        mode: h.mode,
                        token: Token(h.token),
                        change: Change::Holding,
                        label: self.labels.get(&h.session).cloned().unwrap_or_default(),
                    });
                }
            }
            (Input::Unwatch { session, lock, .. }, Reply::Unwatched) => {
                let watchers = self.watchers.entry(lock.as_str().to_string()).or_default();
                let i = watchers.iter().position(|w| w == session).ok_or(format!(
                    "{session} unwatched {lock}, but it did not watch it"
                ))?;
                watchers.remove(i);
            }
            (Input::Tick { now: t }, Reply::Ticked { now: got }) if *t == got => {}
            (input, r) => return Err(format!("reply {r:?} does not answer {input:?}")),
        }
        Ok(())
    }

    /// Waits the replies announced that have not ended yet. Cost: O(locks).
    pub fn open_waits(&self) -> usize {
        self.queues.values().map(|q| q.len()).sum()
    }

    /// Live sessions per the replies and events. Cost: O(1).
    pub fn live_sessions(&self) -> usize {
        self.sessions.len()
    }

    /// Checks the service's queries against what the replies and events said (sessions
    /// and their deadlines, holders, queues in order, the revision).
    /// Cost: O(sessions + claims).
    ///
    /// Errors: the first difference.
    pub fn agrees_with<S: Storage>(&self, svc: &LockService<S>) -> Result<(), String> {
        let live: Vec<SessionId> = svc.sessions().collect();
        let mine: Vec<SessionId> = self.sessions.keys().copied().collect();
        if live != mine {
            return Err(format!(
                "sessions: service {live:?}, replies and events {mine:?}"
            ));
        }
        for (s, (_, d)) in &self.sessions {
            let got = svc.session(*s).map(|i| i.expires_at.0);
            if got != Some(*d) {
                return Err(format!(
                    "I-time: deadline of {s}: service {got:?}, replies {d}"
                ));
            }
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
                    "holders of {lock:?}: service {got:?}, replies {want:?}"
                ));
            }
        }
        for (lock, q) in &self.queues {
            let got: Vec<SessionId> = svc.waiters(lock).map(|w| w.session).collect();
            let want: Vec<SessionId> = q.iter().map(|w| w.session).collect();
            if got != want {
                return Err(format!(
                    "queue of {lock:?}: service {got:?}, replies {want:?}"
                ));
            }
        }
        // The other way round: a lock the service holds or queues for that no reply or
        // event announced (the loops above visit only the locks the replies named).
        for lock in svc.locks() {
            let l = lock.as_str();
            let known_held = self.holds.get(l).is_some_and(|h| !h.is_empty());
            let known_queued = self.queues.get(l).is_some_and(|q| !q.is_empty());
            if (svc.holders(l).next().is_some() && !known_held)
                || (svc.waiters(l).next().is_some() && !known_queued)
            {
                return Err(format!(
                    "lock {l:?}: held or queued in the service, announced by no reply or event"
                ));
            }
        }
        if svc.revision() != self.max_token {
            return Err(format!(
                "I2: revision {} but the highest token granted is {}",
                svc.revision(),
                self.max_token
            ));
        }
        Ok(())
    }
}

/// Whether a `mode` grant fits beside `holds` (I1).
fn compatible(holds: &[Hold], mode: Mode) -> bool {
    match mode {
        Mode::Permits { count, limit } => {
            let mut in_use = u64::from(count);
            for h in holds {
                match h.mode {
                    Mode::Permits { count, limit: l } if l == limit => in_use += u64::from(count),
                    _ => return false,
                }
            }
            in_use <= u64::from(limit)
        }
        Mode::Shared => holds.iter().all(|h| h.mode == Mode::Shared),
        _ => holds.is_empty(),
    }
}

/// The session and number of a numbered request (close never replays).
fn numbered(input: &Input) -> Option<(SessionId, u64)> {
    match input {
        Input::KeepAlive { .. }
        | Input::Acquire { .. }
        | Input::Release { .. }
        | Input::ReleaseHold { .. }
        | Input::Cancel { .. }
        | Input::Watch { .. }
        | Input::Unwatch { .. } => Some((input.session()?, input.request()?)),
        _ => None,
    }
}

/// Whether two numbered inputs are the same request (same kind, lock and mode; and token,
/// for a release of a named hold).
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
        (
            Input::ReleaseHold {
                lock: l1,
                token: t1,
                ..
            },
            Input::ReleaseHold {
                lock: l2,
                token: t2,
                ..
            },
        ) => l1 == l2 && t1 == t2,
        (Input::Release { lock: l1, .. }, Input::Release { lock: l2, .. })
        | (Input::Cancel { lock: l1, .. }, Input::Cancel { lock: l2, .. })
        | (Input::Watch { lock: l1, .. }, Input::Watch { lock: l2, .. })
        | (Input::Unwatch { lock: l1, .. }, Input::Unwatch { lock: l2, .. }) => l1 == l2,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fencelock::{Config, Tick, Wait};

    /// Runs `inputs` through a service and a shadow, letting `fault` tamper with each
    /// input's events (by index) before the shadow sees them.
    fn shadowed(fault: impl Fn(usize, &mut Vec<Output>)) -> Result<(), String> {
        let now = Tick(0);
        let x = LockName::new("x").unwrap();
        let acquire = Input::Acquire {
            now,
            session: SessionId(2),
            lock: x.clone(),
            mode: Mode::Exclusive,
            wait: Wait::None,
            request: None,
        };
        let watch = |s| Input::Watch {
            now,
            session: SessionId(s),
            lock: x.clone(),
            request: None,
        };
        let inputs = [
            Input::OpenSession { now, ttl: 10 },
            Input::OpenLabeled {
                now,
                ttl: 10,
                label: Label::new("b").unwrap(),
            },
            Input::OpenSession { now, ttl: 10 },
            watch(1),
            watch(3),
            acquire.clone(),
            Input::Release {
                now,
                session: SessionId(2),
                lock: x.clone(),
                request: None,
            },
            Input::Unwatch {
                now,
                session: SessionId(1),
                lock: x.clone(),
                request: None,
            },
            acquire,
        ];
        let mut svc = LockService::new(VecStorage::new(4, 2, 6), Config::default()).unwrap();
        let mut shadow = Shadow::new(0);
        for (i, input) in inputs.iter().enumerate() {
            let mut events = Vec::new();
            shadow.before(input);
            let r = svc.handle(input.clone(), &mut events);
            fault(i, &mut events);
            shadow.after(&r, &events)?;
        }
        Ok(())
    }

    #[test]
    fn the_shadow_catches_a_watcher_event_missing_reordered_mislabelled_or_late() {
        shadowed(|_, _| {}).expect("the real events pass");
        // step 5: the acquire's grant, told to watchers 1 and 3 in that order
        let missing = shadowed(|i, e| {
            if i == 5 {
                e.pop();
            }
        });
        assert!(
            missing
                .as_ref()
                .is_err_and(|e| e.starts_with("I12 watch:") && e.contains("due but not emitted")),
            "{missing:?}"
        );
        let swapped = shadowed(|i, e| {
            if i == 5 {
                e.swap(0, 1);
            }
        });
        assert!(
            swapped.as_ref().is_err_and(
                |e| e.starts_with("I12 watch:") && e.contains("where the watcher's event")
            ),
            "{swapped:?}"
        );
        let mislabelled = shadowed(|i, e| {
            if let (5, Some(Output::HolderChanged { label, .. })) = (i, e.first_mut()) {
                *label = Label::default();
            }
        });
        assert!(
            mislabelled.as_ref().is_err_and(
                |e| e.starts_with("I12 watch:") && e.contains("where the watcher's event")
            ),
            "{mislabelled:?}"
        );
        // step 8: after 1 unwatched, only 3 is told; an event to 1 is caught
        let late = shadowed(|i, e| {
            if i == 8 {
                let mut to_1 = e[0].clone();
                if let Output::HolderChanged { session, .. } = &mut to_1 {
                    *session = SessionId(1);
                }
                e.push(to_1);
            }
        });
        assert!(
            late.as_ref().is_err_and(
                |e| e.starts_with("I12 watch:") && e.contains("follows no holder change")
            ),
            "{late:?}"
        );
    }
}
