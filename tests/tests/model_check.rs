//! Exhaustive model checking with stateright, over the real core.
//!
//! The state is the service's canonical snapshot plus each client's view (its session,
//! the tokens it believes it holds, an inbox of undelivered outputs) and
//! the resource (highest token per resource, checked by a real `FenceGate`). Every transition
//! restores the service from the snapshot, applies one real input, checks the state
//! invariants (`check_service`) and snapshots again, so equal states are deduplicated by
//! their canonical bytes.
//!
//! A stop-the-world pause is a client that is not scheduled while time passes: the
//! checker explores every interleaving, so a client may stay silent (no keep-alive, not
//! reading its inbox) for any number of ticks, then write with the token it believes it
//! holds before reading the news (the GC pause fencing exists for). A reply reaches its
//! caller at once; events wait in the inbox of the session they name. Sessions expire;
//! the lock is granted on. Every input carries the host's clock; with a lazy host the
//! clock moves without any tick, and only the inputs' own advances move the service's
//! time (docs/SPEC.md §2). Properties:
//! * always: the service's invariants hold after every input;
//! * always: tokens rise — every fresh grant (an acquire's answer for a lock it did not
//!   hold, each waiter granted) carries a token above every earlier grant's, tracked from
//!   the grants, not from the service's revision (a core that reuses a token is caught:
//!   `fault_core_reusing_a_token_is_found`);
//! * always: no write with a token lower than an accepted one is accepted at the resource
//!   (the check is the core's own `FenceGate`) — holds with the fence check by the gate's
//!   construction, and means "a paused holder's write is refused once its successor
//!   wrote" because tokens rise; with the check off the checker must find the GC-pause
//!   counterexample by itself;
//! * sometimes: a stale write is attempted and refused (the scenario is reachable);
//! * reached, where the configuration has them (recorded beside the states, so it splits
//!   none; [`Reached`]): a keep-alive that moved a deadline, a timed wait ending at its
//!   deadline, a wait cancelled, a session closed while it held or waited, under
//!   lock-delay a semaphore's waiter kept back, a numbered keep-alive repeated, a shared
//!   grant, two shared holders and a run of two shared waiters granted at once, a holder
//!   forced out by the operator whose write the fence refused — a configuration that has
//!   them and never reached them would check nothing of them;
//! * every refused input (it has no successor state, so this is checked as it happens and
//!   `check` fails on it): it changed nothing beyond the advance to its `now` (I5), and its
//!   error is one its state calls for — an unknown session is not open, a release's session
//!   does not hold the lock (or not with that token), a cancel's is not waiting, a table is
//!   full; the model's inputs are well formed, so no other refusal is right.
//!
//! Semaphores and watches (configurations with `permits` / `watch` set): the locks are
//! semaphores (client 0 asks for the whole limit, the others for one permit, so a large
//! request stands at the head of the queue) and clients may watch and unwatch them.
//! * always: never more permits held than the limit (from the holders after every input),
//!   and nothing granted on a lock that is in lock-delay after the input;
//! * always: grants go to the queue in order — the sessions granted by one input are a
//!   prefix of the queue before it, less the waits that ended in it (a large head is not
//!   overtaken);
//! * always: a watcher sees every holder change in order — its view, built only from its
//!   `HolderChanged` events in the order they were emitted, equals the service's holders
//!   after every input — and no event reaches it once its watch ended (unwatch, or its
//!   session expired);
//! * sometimes: the head waits while permits are free (a large head blocks smaller ones),
//!   and a watcher is told of an expiry.
//!
//! An operator (configuration with `operator` set) lists a lock's holder and, at any later
//! moment, forces that hold out by its token (`ReleaseHold`, unnumbered), and may send the
//! same release again (a retry after a lost answer); the holder is told as the server
//! tells it (a `Released` in its inbox, read when it runs).
//! * always: a forced release ends only the hold it names — it is applied exactly when the
//!   session holds the lock with that token after the advance, and answers that token;
//! * sometimes: a forced release of an old token is refused while the session holds the
//!   lock again with a later one (the retry that must not end the new hold).

use fencelock::{
    Change, Config, Input, LockName, LockService, Mode, Output, ReleaseReason, Reply, SessionId,
    Table, Tick, VecStorage, Wait,
};
use fencelock_tests::invariants::check_service;
use stateright::{Checker, HasDiscoveries, Model, Property};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

const NAMES: [&str; 2] = ["a", "b"];
/// Watches one client may begin in a run.
const MAX_WATCHES: u8 = 2;
/// Request numbers one client may use in a run (later inputs carry none), so that the
/// numbers, like tokens, keep the state space finite.
const MAX_REQUESTS: u64 = 4;
/// Acquires one client may make in a run where waits can be cancelled (an acquire that
/// queues takes a fresh claim number without a token, and a cancel frees it again: without
/// a bound, acquire and cancel would make new states for ever).
const MAX_ACQUIRES: u8 = 3;

/// What the checker learned of refused inputs: a refused input has no successor state, so
/// its checks cannot be state properties; they are kept here (shared by the model's
/// clones) and `check` fails on any.
#[derive(Clone, Debug, Default)]
struct Refusals(Arc<Mutex<RefusalLog>>);

/// What the exploration did at least once, named: a configuration named after timed
/// waits, cancels or a semaphore under lock-delay must be seen to reach them, or its
/// checks of them mean nothing. Kept beside the states (shared by the model's clones),
/// so it splits none; `check` asserts the ones its configuration calls for.
#[derive(Clone, Debug, Default)]
struct Reached(Arc<Mutex<BTreeSet<&'static str>>>);

/// A timed wait ended at its deadline (a `WaitTimedOut` event).
const TIMED_OUT: &str = "a timed wait ended at its deadline";
/// A wait was cancelled (a `Cancelled` reply).
const CANCELLED: &str = "a wait was cancelled";
/// A session was closed while it held or waited for a lock.
const CLOSED_WITH_CLAIMS: &str = "a session holding or waiting was closed";
/// A semaphore's waiter was kept back by lock-delay.
const SEMAPHORE_DELAYED: &str = "a semaphore's waiter was kept back by lock-delay";
/// A keep-alive moved a session's deadline (a `KeptAlive` reply that changed the state).
const KEPT_ALIVE: &str = "a keep-alive moved a deadline";
/// A repeated numbered keep-alive was answered from its record.
const KEEP_ALIVE_REPEATED: &str = "a numbered keep-alive was repeated";
/// A lazy host's repeat carried an advance in which something fell due (an expiry, a timed
/// wait ended, a grant: an event, not the clock alone), checked to change nothing more.
const LAZY_REPEAT_ADVANCED: &str = "a lazy host's repeat carried an advance";
/// A lock was granted in shared mode (a reply or a `Granted` event).
const SHARED_GRANTED: &str = "a lock was granted in shared mode";
/// Two sessions held one lock in shared mode at once.
const TWO_SHARED: &str = "two sessions held one lock in shared mode";
/// One input granted a run of two shared waiters at once (the queue's head run).
const SHARED_RUN: &str = "one input granted two shared waiters";
/// A holder the operator forced out wrote with its token before it read the news, and
/// the fence refused the write.
const FORCED_STALE_REFUSED: &str = "a forced-out holder's write was refused";

#[derive(Debug, Default)]
struct RefusalLog {
    /// Refused inputs checked, by error code.
    checked: BTreeMap<u32, usize>,
    /// The first few that broke a rule: more than the advance changed (I5), or an error
    /// the state did not call for.
    wrong: Vec<String>,
}

#[derive(Clone, Debug)]
struct LockModel {
    clients: usize,
    locks: usize,
    fence: bool,
    max_time: u64,
    max_tokens: u64,
    ttl: u64,
    lock_delay: u64,
    /// Run the core with its test-only fault (feature `fault-injection`).
    core_fault: bool,
    /// Run the core with its test-only token fault (feature `fault-injection`): a grant
    /// reuses the latest token.
    reuse_token: bool,
    /// The host's clock moves without ticking the service (inputs carry it).
    lazy_host: bool,
    /// The locks are semaphores of this limit (client 0 asks for all of it, the others
    /// for one permit); no writes.
    permits: Option<u32>,
    /// The last this many clients may watch and unwatch the locks.
    watchers: usize,
    /// A broken delivery (test-only): the first watcher event of every input is lost.
    lose_watcher_event: bool,
    /// Odd-numbered clients acquire in shared mode (readers: they write nothing), the
    /// others exclusively.
    shared: bool,
    /// With `shared`, client 2 reads too (two readers beside one writer).
    two_readers: bool,
    /// The last client waits this many ticks (`Wait::Until`), the others for ever.
    timed: Option<u64>,
    /// Clients may cancel their waits and close their sessions.
    cancel_close: bool,
    /// Inputs carry request numbers (1, 2, 3… per session) and a client may repeat its
    /// latest numbered input (a retry after a lost reply).
    numbered: bool,
    /// Keep-alives carry numbers too (with `numbered`; they are the most frequent input,
    /// so this multiplies the states most).
    number_keep_alives: bool,
    /// A broken retry (test-only): a repeated acquire is applied afresh instead of
    /// answered from the record (its number is dropped).
    retry_applies: bool,
    /// An operator lists holders and forces them out by token (see the module doc).
    operator: bool,
    /// A broken operator (test-only): it forces a hold out by session (`Release`), not by
    /// the token it listed.
    force_by_session: bool,
    /// Refused inputs, checked (see [`Refusals`]).
    refusals: Refusals,
    /// What the exploration reached (see [`Reached`]).
    reached: Reached,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
enum Msg {
    Granted(usize, u64),
    Lost(usize),
    /// The operator forced its hold on the lock out (the server's notice).
    Forced(usize),
    SessionGone,
    /// A timed wait ended without a grant.
    WaitEnded(usize),
}

/// A client's latest numbered input, as it would repeat it, and the reply it got.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct Last {
    kind: Kind,
    lock: usize,
    mode: Mode,
    wait: Wait,
    request: u64,
    reply: Reply,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
enum Kind {
    KeepAlive,
    Acquire,
    Release,
    Cancel,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct Client {
    session: Option<u64>,
    opened: bool,
    /// The token the client believes it holds, per lock.
    believes: Vec<Option<u64>>,
    waiting: Vec<bool>,
    inbox: Vec<Msg>,
    /// Per lock: whether it watches it, and the holders (session, token) its events said.
    watching: Vec<bool>,
    view: Vec<Vec<(u64, u64)>>,
    /// Watches begun (each takes a fresh claim number, so they are bounded like tokens).
    watches: u8,
    /// The latest request number used, and that input.
    request: u64,
    last: Option<Last>,
    /// Acquires made (bounded by [`MAX_ACQUIRES`] where waits can be cancelled).
    acquires: u8,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct State {
    svc: Vec<u8>,
    revision: u64,
    /// The host's clock.
    now: u64,
    clients: Vec<Client>,
    /// The gate's highest admitted token per resource (0 = none yet), kept in a real
    /// `FenceGate` for each write.
    highest: Vec<u64>,
    /// The highest token any grant has carried so far (0 = none yet), from the grants
    /// the service answered and emitted — not from its own revision counter.
    granted_max: u64,
    /// A fresh grant carried a token not above every earlier grant's (what).
    tokens_reused: Option<String>,
    /// Per lock, the tick before which it may not be granted (lock-delay, I8), worked out
    /// here from the expiries the service reported, not read from the service.
    delay_until: Vec<u64>,
    stale_accepted: bool,
    stale_refused: bool,
    /// A Granted went to a session whose deadline had passed (the lease-expiry race).
    granted_to_dead: bool,
    broken: Option<String>,
    /// A semaphore or watch property failed (what, as text).
    watch_broken: Option<String>,
    /// The head of a semaphore's queue waited while some permits were free.
    head_blocked: bool,
    /// A watcher was told that a holder's session expired.
    saw_expiry: bool,
    /// A retry changed the service or answered otherwise than the record says (what).
    retry_broken: Option<String>,
    /// A retry was answered from a claim that changed since (granted, or ended).
    retry_saw_change: bool,
    /// Per lock, the holder (session, token) the operator last listed.
    listed: Vec<Option<(u64, u64)>>,
    /// A forced release ended a hold it did not name, or kept the one it named (what).
    forced_wrong: Option<String>,
    /// A forced release of an old token was refused while the session held the lock
    /// with a later one.
    forced_kept: bool,
    /// Two sessions wait for one lock (FIFO order can be told apart). A function of the
    /// service's state, so it splits no states.
    two_waiting: bool,
    /// A lock nobody holds has a waiter kept back by lock-delay. A function of the
    /// service's state and the clock.
    delayed: bool,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
enum Action {
    Open(usize),
    Acquire(usize, usize),
    KeepAlive(usize),
    Release(usize, usize),
    Write(usize, usize),
    Deliver(usize),
    Watch(usize, usize),
    Unwatch(usize, usize),
    Cancel(usize, usize),
    Close(usize),
    /// The client repeats its latest numbered input.
    Retry(usize),
    /// The operator lists the lock's holder.
    List(usize),
    /// The operator forces out the hold it listed on the lock, by its token.
    Force(usize),
    Tick,
    /// The lazy host's clock moves on; the service is not ticked.
    Elapse,
}

impl LockModel {
    fn service(&self, bytes: &[u8]) -> LockService<VecStorage> {
        let storage = VecStorage::new(self.clients, self.locks, self.clients * self.locks);
        #[allow(unused_mut)]
        let mut svc = LockService::restore(storage, bytes).expect("own snapshot restores");
        #[cfg(feature = "fault-injection")]
        {
            svc.inject_fault_expiry_after_grants(self.core_fault);
            svc.inject_fault_reuse_token(self.reuse_token);
        }
        svc
    }

    /// The mode client `i` acquires in.
    fn mode(&self, i: usize) -> Mode {
        match self.permits {
            // client 0 asks for the whole limit: a large head
            Some(limit) if i == 0 => Mode::Permits {
                count: limit,
                limit,
            },
            Some(limit) => Mode::Permits { count: 1, limit },
            None if self.shared && (i % 2 == 1 || self.two_readers && i == 2) => Mode::Shared,
            None => Mode::Exclusive,
        }
    }

    /// How client `i` waits, asking at `now`.
    fn wait(&self, i: usize, now: u64) -> Wait {
        match self.timed {
            Some(t) if i + 1 == self.clients => Wait::Until(Tick(now + t)),
            _ => Wait::Forever,
        }
    }

    /// The request number client `i`'s next numbered input carries (none once it used
    /// [`MAX_REQUESTS`]).
    fn number(&self, st: &State, i: usize) -> Option<u64> {
        let n = st.clients[i].request + 1;
        (self.numbered && n <= MAX_REQUESTS).then_some(n)
    }

    /// Records a numbered input of client `i` that was applied.
    fn record(&self, st: &mut State, i: usize, last: Last) {
        if self.numbered {
            st.clients[i].request = last.request;
            st.clients[i].last = Some(last);
        }
    }

    /// The input `last` describes, from `session` at `now` with request number `request`.
    fn input_of(last: &Last, now: Tick, session: SessionId, request: Option<u64>) -> Input {
        let lock = LockName::new(NAMES[last.lock]).expect("name");
        match last.kind {
            Kind::KeepAlive => Input::KeepAlive {
                now,
                session,
                request,
            },
            Kind::Acquire => Input::Acquire {
                now,
                session,
                lock,
                mode: last.mode,
                wait: last.wait,
                request,
            },
            Kind::Release => Input::Release {
                now,
                session,
                lock,
                request,
            },
            Kind::Cancel => Input::Cancel {
                now,
                session,
                lock,
                request,
            },
        }
    }

    /// Whether `reply` is the answer docs/SPEC.md §6 gives a repeat of `last` by `session`
    /// in the service `svc` (after the repeat): the recorded reply, except that an acquire
    /// is answered from the session's claim on the lock now.
    fn retry_answer_ok(
        svc: &LockService<VecStorage>,
        session: SessionId,
        last: &Last,
        reply: &Reply,
    ) -> bool {
        if last.kind != Kind::Acquire {
            return *reply == last.reply;
        }
        let name = NAMES[last.lock];
        let held = svc
            .holders(name)
            .find(|h| h.session == session)
            .map(|h| h.token);
        let queued = svc.waiters(name).position(|w| w.session == session);
        match (held, queued, last.reply, *reply) {
            (Some(t), _, _, Reply::Granted { token, .. }) => token == t,
            (None, Some(at), _, Reply::Queued { position, .. }) => position as usize == at + 1,
            (None, None, Reply::Busy, Reply::Busy) => true,
            (None, None, Reply::Queued { .. }, Reply::WaitEnded) => true,
            (None, None, Reply::Granted { token: a, .. }, Reply::HoldEnded { token: b }) => a == b,
            _ => false,
        }
    }

    /// Applies `input` (stamped with the host's clock) to the service in `st`; routes the
    /// events; returns the caller's reply, or None if refused.
    fn apply(&self, st: &mut State, input: Input) -> Option<Reply> {
        let mut svc = self.service(&st.svc);
        let deadlines: Vec<(SessionId, u64)> = svc
            .sessions()
            .map(|id| (id, svc.session(id).expect("listed").expires_at.0))
            .collect();
        let queues: Vec<Vec<u64>> = NAMES[..self.locks]
            .iter()
            .map(|l| svc.waiters(l).map(|w| w.session.0).collect())
            .collect();
        let cancelled = match &input {
            Input::Unwatch { .. } | Input::Watch { .. } => None,
            i => i.session(),
        };
        // Who held what before the input: a Granted answered for a hold that already was
        // (a repeat, an acquire of a lock held) is no fresh grant.
        let held_before: Vec<(u64, String, u64)> = NAMES[..self.locks]
            .iter()
            .flat_map(|l| {
                svc.holders(l)
                    .map(|h| (h.session.0, l.to_string(), h.token.0))
                    .collect::<Vec<_>>()
            })
            .collect();
        let mut events: Vec<Output> = Vec::new();
        let reply = match svc.handle(input.clone().at(Tick(st.now)), &mut events) {
            Ok(reply) => reply,
            Err(e) => {
                self.check_refusal(st, &svc, &input, &e, &events);
                return None;
            }
        };
        if self.lose_watcher_event {
            if let Some(i) = events
                .iter()
                .position(|o| matches!(o, Output::HolderChanged { .. }))
            {
                events.remove(i);
            }
        }
        let now = svc.now().0;
        self.note_reached(&svc, &input, &reply, &events, &queues, &held_before);
        // FIFO grants and I8 (nothing granted during lock-delay) in every configuration;
        // the permit and watcher checks inside apply only where those are in use.
        if let Err(e) =
            self.check_semaphores_and_watches(st, &svc, &input, &reply, &events, &queues, cancelled)
        {
            st.watch_broken = Some(e);
        }
        for o in &events {
            if let Output::Granted { session, .. } = o {
                if deadlines.iter().any(|(id, d)| id == session && *d <= now) {
                    st.granted_to_dead = true;
                }
            }
        }
        // Tokens rise (I2, what fencing rests on): every fresh grant of the input — each
        // waiter granted (by its advance or by the input), and the acquire's answer for a
        // hold it did not have before and was not granted in this advance — carries a token
        // above every grant before the input, and no two carry the same. Order within the
        // input is not assumed (an advance's grants come before the answer).
        let mut fresh: Vec<u64> = events
            .iter()
            .filter_map(|o| match o {
                Output::Granted { token, .. } => Some(token.0),
                _ => None,
            })
            .collect();
        if let (Input::Acquire { session, lock, .. }, Reply::Granted { token, .. }) =
            (&input, &reply)
        {
            if !held_before.contains(&(session.0, lock.to_string(), token.0))
                && !fresh.contains(&token.0)
            {
                fresh.push(token.0);
            }
        }
        fresh.sort_unstable();
        let reused = fresh.first().is_some_and(|t| *t <= st.granted_max)
            || fresh.windows(2).any(|w| w[0] == w[1]);
        if reused && st.tokens_reused.is_none() {
            st.tokens_reused = Some(format!(
                "{input:?}: granted tokens {fresh:?}, not all above the earlier grants' {} \
                 and distinct",
                st.granted_max
            ));
        }
        if let Some(top) = fresh.last() {
            st.granted_max = st.granted_max.max(*top);
        }
        if let Err(e) = check_service(&svc) {
            st.broken = Some(e);
        }
        st.svc = svc.snapshot_vec();
        st.revision = svc.revision();
        st.two_waiting = NAMES[..self.locks]
            .iter()
            .any(|l| svc.waiters(l).count() >= 2);
        st.delayed = NAMES[..self.locks].iter().any(|l| {
            svc.holders(l).next().is_none()
                && svc.waiters(l).next().is_some()
                && svc.lock_delay_until(l).is_some_and(|t| t.0 > now)
        });
        for o in events {
            let owner = st
                .clients
                .iter()
                .position(|c| c.session == Some(o.session().0));
            let lock = |l: &LockName| NAMES.iter().position(|n| *n == l.as_str()).expect("ours");
            let msg = match &o {
                Output::Granted { lock: l, token, .. } => Msg::Granted(lock(l), token.0),
                Output::Released { lock: l, .. } => Msg::Lost(lock(l)),
                Output::SessionExpired { .. } => Msg::SessionGone,
                Output::WaitTimedOut { lock: l, .. } => Msg::WaitEnded(lock(l)),
                // Watcher events were checked above (the watcher's view).
                _ => continue,
            };
            if let Some(c) = owner {
                st.clients[c].inbox.push(msg);
            }
        }
        Some(reply)
    }

    /// Records what this input reached ([`Reached`]): a timed wait ending, a cancel, a
    /// session closed with claims, a semaphore's waiter kept back by lock-delay. `queues`
    /// and `held` are the waiters and holders before the input.
    fn note_reached(
        &self,
        svc: &LockService<VecStorage>,
        input: &Input,
        reply: &Reply,
        events: &[Output],
        queues: &[Vec<u64>],
        held: &[(u64, String, u64)],
    ) {
        let mut seen = self.reached.0.lock().expect("reached");
        if events
            .iter()
            .any(|o| matches!(o, Output::WaitTimedOut { .. }))
        {
            seen.insert(TIMED_OUT);
        }
        if matches!(reply, Reply::Cancelled) {
            seen.insert(CANCELLED);
        }
        if let (Input::CloseSession { session, .. }, Reply::Closed) = (input, reply) {
            let s = session.0;
            if held.iter().any(|h| h.0 == s) || queues.iter().flatten().any(|&w| w == s) {
                seen.insert(CLOSED_WITH_CLAIMS);
            }
        }
        let shared = |m: &Mode| *m == Mode::Shared;
        if matches!(reply, Reply::Granted { mode, .. } if shared(mode))
            || events
                .iter()
                .any(|o| matches!(o, Output::Granted { mode, .. } if shared(mode)))
        {
            seen.insert(SHARED_GRANTED);
        }
        if NAMES[..self.locks]
            .iter()
            .any(|l| svc.holders(l).filter(|h| shared(&h.mode)).count() >= 2)
        {
            seen.insert(TWO_SHARED);
        }
        if events
            .iter()
            .filter(|o| matches!(o, Output::Granted { mode, .. } if shared(mode)))
            .count()
            >= 2
        {
            seen.insert(SHARED_RUN);
        }
        let now = svc.now();
        if self.permits.is_some()
            && NAMES[..self.locks].iter().any(|l| {
                svc.waiters(l).next().is_some() && svc.lock_delay_until(l).is_some_and(|t| t > now)
            })
        {
            seen.insert(SEMAPHORE_DELAYED);
        }
    }

    /// A refused input (docs/SPEC.md §5): it changed nothing beyond the advance to its
    /// `now` — the service equals a copy only ticked there, with the same events (I5) —
    /// and its error is one that state calls for (an unknown session is not open; a
    /// release's session holds nothing there, or not that token; a cancel's is not
    /// waiting; an acquire's already waits or holds in another mode; a table is full).
    /// The model's inputs are well formed, so any other refusal is wrong. Recorded in
    /// `self.refusals`.
    fn check_refusal(
        &self,
        st: &State,
        svc: &LockService<VecStorage>,
        input: &Input,
        e: &fencelock::Error,
        events: &[Output],
    ) {
        use fencelock::Error as E;
        let mut copy = self.service(&st.svc);
        let mut advance: Vec<Output> = Vec::new();
        let ticked = copy.tick(Tick(st.now), &mut advance);
        let open = |s: SessionId| copy.is_open(s);
        let holds =
            |s: SessionId, lock: &LockName| copy.holders(lock.as_str()).find(|h| h.session == s);
        let waits =
            |s: SessionId, lock: &LockName| copy.waiters(lock.as_str()).any(|w| w.session == s);
        // Whether `s` watches `lock`, as the checker kept it (see below).
        let watching = |s: SessionId, lock: &LockName| {
            let l = NAMES.iter().position(|n| *n == lock.as_str());
            st.clients
                .iter()
                .any(|c| c.session == Some(s.0) && l.is_some_and(|l| c.watching[l]))
        };
        let wrong = if ticked.is_err() {
            Some(format!(
                "{input:?}: refused {e:?}, and a tick to its now fails: {ticked:?}"
            ))
        } else if svc.snapshot_vec() != copy.snapshot_vec() || events != advance.as_slice() {
            Some(format!(
                "{input:?}: refused {e:?}, but changed more than its advance (I5)"
            ))
        } else {
            let (usage, cap) = (copy.usage(), copy.capacity());
            let mine = |s: &SessionId| input.session() == Some(*s);
            let called_for = match (e, input) {
                (E::UnknownSession(s), _) => mine(s) && !open(*s),
                // A full table: the one the input needed a row of is full.
                (E::CapacityExceeded(Table::Sessions), Input::OpenSession { .. }) => {
                    usage.sessions == cap.sessions
                }
                (E::CapacityExceeded(Table::Claims), _) => usage.claims == cap.claims,
                (E::CapacityExceeded(Table::Locks), _) => usage.locks == cap.locks,
                // Watches are not among the service's queries, but the checker knows them:
                // each client's `watching`, kept from the service's own events (a watch
                // begins with its `Holding` events or reply, ends with an unwatch or the
                // session's end; only an expiry in this input's advance could end one
                // unseen, and that refusal is `UnknownSession`, first).
                (E::CapacityExceeded(Table::Watchers), Input::Watch { lock, .. }) => {
                    let l = NAMES.iter().position(|n| *n == lock.as_str());
                    let watchers = st
                        .clients
                        .iter()
                        .filter(|c| l.is_some_and(|l| c.watching[l]))
                        .count();
                    watchers >= Config::default().max_watchers as usize
                }
                (E::NotHolder(s), Input::Release { lock, .. }) => {
                    mine(s) && holds(*s, lock).is_none()
                }
                (E::NotHolder(s), Input::ReleaseHold { lock, token, .. }) => {
                    mine(s) && holds(*s, lock).is_none_or(|h| h.token != *token)
                }
                (E::NotQueued(s), Input::Cancel { lock, .. }) => mine(s) && !waits(*s, lock),
                (E::AlreadyQueued(s), Input::Acquire { lock, .. }) => mine(s) && waits(*s, lock),
                (
                    E::ModeMismatch { held },
                    Input::Acquire {
                        session,
                        lock,
                        mode,
                        ..
                    },
                ) => holds(*session, lock).is_some_and(|h| h.mode == *held && h.mode != *mode),
                (E::AlreadyWatching(s), Input::Watch { lock, .. }) => mine(s) && watching(*s, lock),
                (E::NotWatching(s), Input::Unwatch { lock, .. }) => mine(s) && !watching(*s, lock),
                _ => false,
            };
            (!called_for)
                .then(|| format!("{input:?}: refused {e:?}, which its state does not call for"))
        };
        let mut log = self.refusals.0.lock().expect("refusal log");
        *log.checked.entry(e.code()).or_default() += 1;
        if let Some(w) = wrong {
            if log.wrong.len() < 5 {
                log.wrong.push(w);
            }
        }
    }

    /// The semaphore and watch properties of one input (see the module doc): permits within
    /// the limit, grants a prefix of the queue, each watcher's view equal to the holders.
    /// Updates the watchers' views in `st`.
    #[allow(clippy::too_many_arguments)]
    fn check_semaphores_and_watches(
        &self,
        st: &mut State,
        svc: &LockService<VecStorage>,
        input: &Input,
        reply: &Reply,
        events: &[Output],
        queues: &[Vec<u64>],
        caller: Option<SessionId>,
    ) -> Result<(), String> {
        let lock = |l: &LockName| NAMES.iter().position(|n| *n == l.as_str()).expect("ours");
        let client =
            |st: &State, s: SessionId| st.clients.iter().position(|c| c.session == Some(s.0));
        // Grants: a prefix of the queue, less the waits that ended in this input.
        for (l, queue) in queues.iter().enumerate() {
            let mut queue: Vec<u64> = queue.clone();
            let ended: Vec<u64> = events
                .iter()
                .filter_map(|o| match o {
                    Output::SessionExpired { session } => Some(session.0),
                    Output::WaitTimedOut { session, lock: x } if lock(x) == l => Some(session.0),
                    _ => None,
                })
                .chain(
                    caller.map(|s| s.0).filter(|_| {
                        matches!(input, Input::CloseSession { .. } | Input::Cancel { .. })
                    }),
                )
                .collect();
            let granted: Vec<u64> = events
                .iter()
                .filter_map(|o| match o {
                    Output::Granted {
                        session, lock: x, ..
                    } if lock(x) == l => Some(session.0),
                    _ => None,
                })
                .collect();
            // A wait the caller's close ends was not granted in the advance before it (a
            // lazy host's close may come after the grant, in the same input).
            queue.retain(|s| !ended.contains(s) || granted.contains(s));
            if queue.len() < granted.len() || queue[..granted.len()] != granted[..] {
                return Err(format!(
                    "FIFO: {NAMES:?}[{l}] granted {granted:?} out of the queue {queue:?}"
                ));
            }
            // I8: a lock in lock-delay after the input was granted nothing in it (the
            // advance expires before it grants; an acquire comes after the advance). The
            // delay is this checker's own: each holder's expiry reported in this input
            // starts one, `lock_delay` ticks from the input's now (the longest wins).
            let now = svc.now().0;
            if self.lock_delay > 0 {
                for o in events {
                    if let Output::Released {
                        lock: x,
                        reason: ReleaseReason::Expired,
                        ..
                    } = o
                    {
                        if lock(x) == l {
                            let until = now.saturating_add(self.lock_delay);
                            st.delay_until[l] = st.delay_until[l].max(until);
                        }
                    }
                }
            }
            let delayed = now < st.delay_until[l];
            let fresh = match (input, reply) {
                (Input::Acquire { lock: x, .. }, Reply::Granted { token, .. }) => {
                    lock(x) == l && token.0 > st.revision
                }
                _ => false,
            };
            if delayed && (fresh || !granted.is_empty()) {
                return Err(format!("{} granted during its lock-delay", NAMES[l]));
            }
            // And the service says the same delay.
            let says = svc.lock_delay_until(NAMES[l]).map(|t| t.0);
            if says != delayed.then_some(st.delay_until[l]) {
                return Err(format!(
                    "{}: the service says lock-delay until {says:?}, the expiries say {:?}",
                    NAMES[l],
                    delayed.then_some(st.delay_until[l])
                ));
            }
            // Never more permits than the limit.
            if let Some(limit) = self.permits {
                let in_use: u32 = svc
                    .holders(NAMES[l])
                    .map(|h| match h.mode {
                        Mode::Permits { count, .. } => count,
                        m => panic!("a plain {m} hold on a semaphore"),
                    })
                    .sum();
                if in_use > limit {
                    return Err(format!(
                        "{in_use} permits held on {}, limit {limit}",
                        NAMES[l]
                    ));
                }
                if let Some(head) = svc.waiters(NAMES[l]).next() {
                    if in_use < limit && svc.lock_delay_until(NAMES[l]).is_none() {
                        let Mode::Permits { count, .. } = head.mode else {
                            unreachable!("a semaphore")
                        };
                        if in_use + count <= limit {
                            return Err(format!("head {} fits but waits", head.session));
                        }
                        st.head_blocked = true;
                    }
                }
            }
        }
        // A watch begins after the advance's events: at its first Holding event, or at the
        // end when the lock has no holder.
        let mut begins = match (input, reply) {
            (
                Input::Watch {
                    session, lock: l, ..
                },
                Reply::Watching { .. },
            ) => Some((client(st, *session).expect("a client's session"), lock(l))),
            _ => None,
        };
        // The watchers' views, event by event.
        for o in events {
            if let Output::HolderChanged {
                session,
                lock: x,
                change: Change::Holding,
                ..
            } = o
            {
                match begins.take() {
                    Some((c, l)) if client(st, *session) == Some(c) && lock(x) == l => {
                        st.clients[c].watching[l] = true;
                    }
                    b => {
                        if !b.is_none_or(|(c, l)| st.clients[c].watching[l]) {
                            return Err(format!("{o:?} but no watch began"));
                        }
                        begins = b;
                    }
                }
            }
            match o {
                Output::SessionExpired { session } => {
                    if let Some(c) = client(st, *session) {
                        let c = &mut st.clients[c];
                        c.watching.iter_mut().for_each(|w| *w = false);
                        c.view.iter_mut().for_each(Vec::clear);
                    }
                }
                Output::HolderChanged {
                    session,
                    lock: x,
                    holder,
                    token,
                    change,
                    ..
                } => {
                    let l = lock(x);
                    let c = client(st, *session).ok_or(format!("{o:?} to no client"))?;
                    if !st.clients[c].watching[l] {
                        return Err(format!("{o:?} after the watch ended"));
                    }
                    let view = &mut st.clients[c].view[l];
                    let entry = (holder.0, token.0);
                    match change {
                        Change::Holding | Change::Granted => {
                            if view.iter().any(|(_, t)| *t >= token.0) {
                                return Err(format!("{o:?} out of order: view {view:?}"));
                            }
                            view.push(entry);
                        }
                        Change::Released | Change::Closed | Change::Expired => {
                            let i = view
                                .iter()
                                .position(|e| *e == entry)
                                .ok_or(format!("{o:?}: not a holder it was told of {view:?}"))?;
                            view.remove(i);
                            if *change == Change::Expired {
                                st.saw_expiry = true;
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        if let Some((c, l)) = begins {
            st.clients[c].watching[l] = true;
        }
        // A watch ends after the unwatch's advance.
        if let (
            Input::Unwatch {
                session, lock: l, ..
            },
            Reply::Unwatched,
        ) = (input, reply)
        {
            let c = client(st, *session).expect("a client's session");
            st.clients[c].watching[lock(l)] = false;
            st.clients[c].view[lock(l)].clear();
        }
        for c in &st.clients {
            for (l, name) in NAMES[..self.locks].iter().enumerate() {
                if c.watching[l] {
                    let holders: Vec<(u64, u64)> = svc
                        .holders(name)
                        .map(|h| (h.session.0, h.token.0))
                        .collect();
                    if c.view[l] != holders {
                        return Err(format!(
                            "watcher {:?} sees {:?} on {name}, holders {holders:?}",
                            c.session, c.view[l]
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

impl Model for LockModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let svc = LockService::new(
            VecStorage::new(self.clients, self.locks, self.clients * self.locks),
            Config {
                lock_delay: self.lock_delay,
                ..Config::default()
            },
        )
        .expect("config");
        vec![State {
            svc: svc.snapshot_vec(),
            revision: 0,
            now: 0,
            clients: vec![
                Client {
                    session: None,
                    opened: false,
                    believes: vec![None; self.locks],
                    waiting: vec![false; self.locks],
                    inbox: Vec::new(),
                    watching: vec![false; self.locks],
                    view: vec![Vec::new(); self.locks],
                    watches: 0,
                    request: 0,
                    last: None,
                    acquires: 0,
                };
                self.clients
            ],
            highest: vec![0; self.locks],
            granted_max: 0,
            tokens_reused: None,
            delay_until: vec![0; self.locks],
            stale_accepted: false,
            stale_refused: false,
            granted_to_dead: false,
            broken: None,
            watch_broken: None,
            head_blocked: false,
            saw_expiry: false,
            retry_broken: None,
            retry_saw_change: false,
            listed: vec![None; self.locks],
            forced_wrong: None,
            forced_kept: false,
            two_waiting: false,
            delayed: false,
        }]
    }

    fn actions(&self, st: &State, actions: &mut Vec<Action>) {
        if st.stale_accepted
            || st.granted_to_dead
            || st.tokens_reused.is_some()
            || st.broken.is_some()
            || st.watch_broken.is_some()
            || st.retry_broken.is_some()
            || st.forced_wrong.is_some()
        {
            return; // a violation ends the path
        }
        if self.operator {
            for l in 0..self.locks {
                actions.push(Action::List(l));
                if st.listed[l].is_some() {
                    actions.push(Action::Force(l));
                }
            }
        }
        if st.now < self.max_time {
            actions.push(if self.lazy_host {
                Action::Elapse
            } else {
                Action::Tick
            });
        }
        for (i, c) in st.clients.iter().enumerate() {
            if !c.inbox.is_empty() {
                actions.push(Action::Deliver(i));
            }
            match c.session {
                None if !c.opened => actions.push(Action::Open(i)),
                None => {}
                Some(_) => {
                    actions.push(Action::KeepAlive(i));
                    for l in 0..self.locks {
                        if c.believes[l].is_some() {
                            actions.push(Action::Release(i, l));
                        } else if !c.waiting[l]
                            && st.revision < self.max_tokens
                            && (!self.cancel_close || c.acquires < MAX_ACQUIRES)
                        {
                            actions.push(Action::Acquire(i, l));
                        }
                        if i + self.watchers >= self.clients {
                            if c.watching[l] {
                                actions.push(Action::Unwatch(i, l));
                            } else if c.watches < MAX_WATCHES {
                                actions.push(Action::Watch(i, l));
                            }
                        }
                        if self.cancel_close && c.waiting[l] {
                            actions.push(Action::Cancel(i, l));
                        }
                    }
                    if self.cancel_close {
                        actions.push(Action::Close(i));
                    }
                    if c.last.is_some() {
                        actions.push(Action::Retry(i));
                    }
                }
            }
            if self.mode(i) != Mode::Exclusive {
                continue; // permit holders and readers share the resource: no fenced writes
            }
            // A client writes whenever it believes it holds the lock, session or not
            // (it has not read the news yet).
            for l in 0..self.locks {
                if c.believes[l].is_some() {
                    actions.push(Action::Write(i, l));
                }
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut st = last.clone();
        // The host's clock (apply stamps every input with it).
        let now = Tick(st.now);
        match action {
            Action::Tick => {
                st.now += 1;
                let now = Tick(st.now);
                self.apply(&mut st, Input::Tick { now })?;
            }
            Action::Elapse => st.now += 1,
            Action::Open(i) => {
                let input = Input::OpenSession { now, ttl: self.ttl };
                let id = self.apply(&mut st, input)?.opened()?;
                st.clients[i].session = Some(id.0);
                st.clients[i].opened = true;
            }
            Action::KeepAlive(i) => {
                let session = SessionId(st.clients[i].session?);
                let before = st.svc.clone();
                let request = if self.number_keep_alives {
                    self.number(&st, i)
                } else {
                    None
                };
                let reply = self.apply(
                    &mut st,
                    Input::KeepAlive {
                        now,
                        session,
                        request,
                    },
                )?;
                if st.svc == before {
                    return None;
                }
                self.reached.0.lock().expect("reached").insert(KEPT_ALIVE);
                if let Some(request) = request {
                    let last = Last {
                        kind: Kind::KeepAlive,
                        lock: 0,
                        mode: Mode::Exclusive,
                        wait: Wait::None,
                        request,
                        reply,
                    };
                    self.record(&mut st, i, last);
                }
            }
            Action::Acquire(i, l) | Action::Release(i, l) | Action::Cancel(i, l) => {
                let session = SessionId(st.clients[i].session?);
                let request = self.number(&st, i);
                let last = Last {
                    kind: match action {
                        Action::Acquire(..) => Kind::Acquire,
                        Action::Release(..) => Kind::Release,
                        _ => Kind::Cancel,
                    },
                    lock: l,
                    mode: self.mode(i),
                    wait: self.wait(i, st.now),
                    request: request.unwrap_or(0),
                    reply: Reply::Busy,
                };
                let reply = self.apply(&mut st, Self::input_of(&last, now, session, request))?;
                // The caller's answer arrives at once.
                let c = &mut st.clients[i];
                // Counted only where it bounds anything (elsewhere it would split states).
                if self.cancel_close && last.kind == Kind::Acquire {
                    c.acquires += 1;
                }
                match reply {
                    Reply::Granted { token, .. } => c.believes[l] = Some(token.0),
                    Reply::Queued { .. } => c.waiting[l] = true,
                    // The client knows it let go: it stops using the token at once.
                    Reply::Released { .. } => c.believes[l] = None,
                    Reply::Cancelled => c.waiting[l] = false,
                    _ => {}
                }
                if request.is_some() {
                    self.record(&mut st, i, Last { reply, ..last });
                }
            }
            Action::Close(i) => {
                let session = SessionId(st.clients[i].session?);
                let input = Input::CloseSession {
                    now,
                    session,
                    request: None,
                };
                self.apply(&mut st, input)?;
                // The client knows its session is gone, with every hold, wait and watch.
                let c = &mut st.clients[i];
                c.session = None;
                c.last = None;
                c.believes.iter_mut().for_each(|b| *b = None);
                c.waiting.iter_mut().for_each(|w| *w = false);
                c.watching.iter_mut().for_each(|w| *w = false);
                c.view.iter_mut().for_each(Vec::clear);
            }
            Action::Retry(i) => {
                let session = SessionId(st.clients[i].session?);
                let last = st.clients[i].last.clone()?;
                // What the service must be after the repeat: as after the advance to its time
                // alone. A ticking host ticks first, so what follows is the repeat alone; a
                // lazy host's repeat carries its own advance (docs/SPEC.md §2), which must be
                // all it changes.
                let before = if self.lazy_host {
                    let mut advanced = self.service(&st.svc);
                    let mut fell_due = Vec::new();
                    advanced.tick(now, &mut fell_due).ok()?;
                    let advanced = advanced.snapshot_vec();
                    if !fell_due.is_empty() {
                        self.reached
                            .0
                            .lock()
                            .expect("reached")
                            .insert(LAZY_REPEAT_ADVANCED);
                    }
                    advanced
                } else {
                    self.apply(&mut st, Input::Tick { now })?;
                    st.svc.clone()
                };
                let request = if self.retry_applies && last.kind == Kind::Acquire {
                    None
                } else {
                    Some(last.request)
                };
                let reply = self.apply(&mut st, Self::input_of(&last, now, session, request))?;
                let svc = self.service(&st.svc);
                if st.svc != before {
                    st.retry_broken = Some(format!("a repeat of {last:?} changed the service"));
                } else if !Self::retry_answer_ok(&svc, session, &last, &reply) {
                    st.retry_broken = Some(format!("a repeat of {last:?} was answered {reply:?}"));
                }
                if reply != last.reply {
                    st.retry_saw_change = true;
                }
                if last.kind == Kind::KeepAlive {
                    self.reached
                        .0
                        .lock()
                        .expect("reached")
                        .insert(KEEP_ALIVE_REPEATED);
                }
                // What the client learns from the answer.
                let c = &mut st.clients[i];
                match reply {
                    Reply::Granted { token, .. } => {
                        c.believes[last.lock] = Some(token.0);
                        c.waiting[last.lock] = false;
                    }
                    Reply::HoldEnded { .. } => c.believes[last.lock] = None,
                    Reply::WaitEnded => c.waiting[last.lock] = false,
                    _ => {}
                }
            }
            Action::Watch(i, l) | Action::Unwatch(i, l) => {
                let session = SessionId(st.clients[i].session?);
                let lock = LockName::new(NAMES[l]).expect("name");
                let input = match action {
                    Action::Watch(..) => Input::Watch {
                        now,
                        session,
                        lock,
                        request: None,
                    },
                    _ => Input::Unwatch {
                        now,
                        session,
                        lock,
                        request: None,
                    },
                };
                if matches!(action, Action::Watch(..)) {
                    st.clients[i].watches += 1;
                }
                self.apply(&mut st, input)?;
            }
            Action::Write(i, l) => {
                let token = st.clients[i].believes[l]?;
                // The resource's check is the core's own `FenceGate`, holding the highest
                // token admitted so far.
                let admitted = !self.fence || {
                    let mut gate = fencelock::FenceGate::new(vec![fencelock::GateRow::EMPTY; 4])
                        .expect("a gate of 4 rows");
                    if st.highest[l] > 0 {
                        gate.admit(NAMES[l], fencelock::Token(st.highest[l]))
                            .expect("the highest admitted again");
                    }
                    gate.check_admit(NAMES[l], fencelock::Token(token)).is_ok()
                };
                if admitted {
                    if token < st.highest[l] {
                        st.stale_accepted = true;
                    }
                    st.highest[l] = st.highest[l].max(token);
                } else {
                    st.stale_refused = true;
                    if st.clients[i].inbox.contains(&Msg::Forced(l)) {
                        self.reached
                            .0
                            .lock()
                            .expect("reached")
                            .insert(FORCED_STALE_REFUSED);
                    }
                }
                if st == *last {
                    return None;
                }
            }
            Action::List(l) => {
                let svc = self.service(&st.svc);
                let holder = svc.holders(NAMES[l]).next()?;
                let seen = Some((holder.session.0, holder.token.0));
                if st.listed[l] == seen {
                    return None;
                }
                st.listed[l] = seen;
            }
            Action::Force(l) => {
                let (session, token) = st.listed[l]?;
                // The advance first, on its own, so that what follows is the release alone.
                self.apply(&mut st, Input::Tick { now })?;
                let held = self
                    .service(&st.svc)
                    .holders(NAMES[l])
                    .find(|h| h.session.0 == session)
                    .map(|h| h.token.0);
                let lock = LockName::new(NAMES[l]).expect("name");
                let session_id = SessionId(session);
                let input = if self.force_by_session {
                    Input::Release {
                        now,
                        session: session_id,
                        lock,
                        request: None,
                    }
                } else {
                    Input::ReleaseHold {
                        now,
                        session: session_id,
                        lock,
                        token: fencelock::Token(token),
                        request: None,
                    }
                };
                match (self.apply(&mut st, input), held) {
                    (Some(Reply::Released { token: t }), Some(h)) if t.0 == token && h == token => {
                        // The server tells the holder (it reads it when it runs).
                        if let Some(c) = st.clients.iter().position(|c| c.session == Some(session))
                        {
                            st.clients[c].inbox.push(Msg::Forced(l));
                        }
                    }
                    (None, Some(h)) if h != token => st.forced_kept = true,
                    (None, None) => {}
                    (r, h) => {
                        st.forced_wrong = Some(format!(
                            "forced release of {}'s token {token} (it held {h:?}) answered {r:?}",
                            session
                        ))
                    }
                }
                if st == *last {
                    return None;
                }
            }
            Action::Deliver(i) => {
                let c = &mut st.clients[i];
                match c.inbox.remove(0) {
                    Msg::Granted(l, t) => {
                        c.believes[l] = Some(t);
                        c.waiting[l] = false;
                    }
                    Msg::Lost(l) | Msg::Forced(l) => c.believes[l] = None,
                    Msg::WaitEnded(l) => c.waiting[l] = false,
                    Msg::SessionGone => {
                        c.session = None;
                        c.believes.iter_mut().for_each(|b| *b = None);
                        c.waiting.iter_mut().for_each(|w| *w = false);
                    }
                }
            }
        }
        Some(st)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("service invariants hold", |_, s: &State| s.broken.is_none()),
            Property::always("no stale write accepted", |_, s: &State| !s.stale_accepted),
            Property::always("tokens rise", |_, s: &State| s.tokens_reused.is_none()),
            Property::always("no grant to a dead session", |_, s: &State| {
                !s.granted_to_dead
            }),
            Property::sometimes("a stale write is refused", |_, s: &State| s.stale_refused),
            Property::sometimes("two sessions wait for one lock", |_, s: &State| {
                s.two_waiting
            }),
            Property::sometimes(
                "a free lock's waiter is kept back by lock-delay",
                |_, s: &State| s.delayed,
            ),
            Property::always("permits, FIFO and watchers hold", |_, s: &State| {
                s.watch_broken.is_none()
            }),
            Property::sometimes("a large head blocks smaller requests", |_, s: &State| {
                s.head_blocked
            }),
            Property::sometimes("a watcher is told of an expiry", |_, s: &State| {
                s.saw_expiry
            }),
            Property::always(
                "a repeat applies nothing and answers as recorded",
                |_, s: &State| s.retry_broken.is_none(),
            ),
            Property::sometimes(
                "a repeat is answered from a claim that changed",
                |_, s: &State| s.retry_saw_change,
            ),
            Property::always(
                "a forced release ends only the hold it names",
                |_, s: &State| s.forced_wrong.is_none(),
            ),
            Property::sometimes(
                "a forced release of an old token keeps the later hold",
                |_, s: &State| s.forced_kept,
            ),
        ]
    }
}

fn check(m: LockModel) -> (usize, usize, Option<Vec<Action>>) {
    // One thread: breadth-first in a fixed order, so the counterexample is a shortest one
    // and the same on every run.
    // With the fence off, stop at the first failure: its path is the shortest.
    let mut builder = m.clone().checker().threads(1);
    if !m.fence {
        builder = builder.finish_when(HasDiscoveries::AnyFailures);
    }
    let checker = builder.spawn_bfs().join();
    let refusals = std::mem::take(&mut *m.refusals.0.lock().expect("refusal log"));
    assert!(
        refusals.wrong.is_empty(),
        "a refused input broke a rule: {:#?}",
        refusals.wrong
    );
    println!("refusals checked, by error code: {:?}", refusals.checked);
    // Sessions expire in every configuration, so an input of an expired session is
    // refused somewhere in a whole exploration: a run that checked no refusal did not
    // exercise the refusal rules it claims to.
    if m.fence {
        assert!(!refusals.checked.is_empty(), "no refusal was checked");
    }
    let reached = std::mem::take(&mut *m.reached.0.lock().expect("reached"));
    // A configuration named after these reaches them (checked where the whole space is
    // explored: with the fence off the run stops at the first failure).
    let mut wanted = Vec::new();
    if m.timed.is_some() {
        wanted.push(TIMED_OUT);
    }
    if m.cancel_close {
        wanted.extend([CANCELLED, CLOSED_WITH_CLAIMS]);
    }
    if m.permits.is_some() && m.lock_delay > 0 {
        wanted.push(SEMAPHORE_DELAYED);
    }
    // Every configuration has keep-alives; a numbered one may be repeated.
    wanted.push(KEPT_ALIVE);
    if m.number_keep_alives {
        wanted.push(KEEP_ALIVE_REPEATED);
    }
    if m.lazy_host && m.numbered {
        wanted.push(LAZY_REPEAT_ADVANCED);
    }
    // From the configuration, not from `mode()`: a model whose readers became writers
    // must fail here, not ask for less.
    if m.shared && m.permits.is_none() {
        wanted.push(SHARED_GRANTED);
        if m.two_readers {
            wanted.extend([TWO_SHARED, SHARED_RUN]);
        }
    }
    if m.operator && !m.shared && m.permits.is_none() {
        wanted.push(FORCED_STALE_REFUSED);
    }
    if m.fence {
        for w in &wanted {
            assert!(
                reached.contains(w),
                "never reached: {w} (reached: {reached:?})"
            );
        }
    }
    let states = checker.unique_state_count();
    let depth = checker.max_depth();
    // Every whole exploration here is larger (the smallest, about 17 000 states): one
    // that is not has lost a dimension to a bug in the model.
    if m.fence {
        assert!(states > 1000, "suspiciously small state space: {states}");
    }
    println!(
        "MODELCHECK clients={} locks={} permits={:?} watchers={} readers={} timed={:?} cancel_close={} numbered={} numbered_keep_alives={} operator={} lock_delay={} max_time={} max_tokens={} host={} fence={} states={} depth={}",
        m.clients,
        m.locks,
        m.permits,
        m.watchers,
        (0..m.clients)
            .filter(|i| m.mode(*i) == Mode::Shared)
            .count(),
        m.timed,
        m.cancel_close,
        m.numbered,
        m.number_keep_alives,
        m.operator,
        m.lock_delay,
        m.max_time,
        m.max_tokens,
        if m.lazy_host { "lazy" } else { "ticking" },
        if m.fence { "on" } else { "off" },
        states,
        depth
    );
    checker.assert_no_discovery("service invariants hold");
    checker.assert_no_discovery("permits, FIFO and watchers hold");
    checker.assert_no_discovery("a repeat applies nothing and answers as recorded");
    checker.assert_no_discovery("a forced release ends only the hold it names");
    if !m.reuse_token {
        checker.assert_no_discovery("tokens rise");
    }
    if m.operator {
        checker.assert_any_discovery("a forced release of an old token keeps the later hold");
    }
    if m.numbered {
        checker.assert_any_discovery("a repeat is answered from a claim that changed");
    }
    if !m.core_fault {
        checker.assert_no_discovery("no grant to a dead session");
    }
    let cex = checker.discovery("no stale write accepted").map(|p| {
        println!("counterexample (fence off):\n{p}");
        p.into_actions()
    });
    if m.permits.is_some() {
        checker.assert_any_discovery("a large head blocks smaller requests");
    }
    // The FIFO check tells orders apart only with two waiters, and I8 bites only when a
    // free lock's waiter is held back: where the configuration allows them, they happen.
    if m.clients >= 3 && m.permits.is_none() && !m.shared {
        checker.assert_any_discovery("two sessions wait for one lock");
    }
    if m.lock_delay > 0 && m.permits.is_none() {
        checker.assert_any_discovery("a free lock's waiter is kept back by lock-delay");
    }
    if m.watchers > 0 {
        checker.assert_any_discovery("a watcher is told of an expiry");
    }
    if m.fence && m.permits.is_none() {
        assert!(cex.is_none(), "a stale write got past the fence");
        // The scenario the fence exists for is reachable: a stale write was attempted
        // (where two clients write).
        let writers = (0..m.clients)
            .filter(|i| m.mode(*i) == Mode::Exclusive)
            .count();
        if writers >= 2 {
            checker.assert_any_discovery("a stale write is refused");
        }
    }
    (states, depth, cex)
}

/// Checks `m`, which carries the injected fault `fault`, breadth-first until `property`
/// fails (it must), prints the counterexample and the `FAULT` line the verification
/// figures count, and returns the counterexample's actions (a shortest path).
fn fault_found(m: &LockModel, property: &'static str, fault: &str) -> Vec<Action> {
    let checker = m
        .clone()
        .checker()
        .threads(1)
        .finish_when(HasDiscoveries::AnyOf([property].into()))
        .spawn_bfs()
        .join();
    let path = checker
        .discovery(property)
        .unwrap_or_else(|| panic!("the checker must find {fault} ({property:?} fails)"));
    println!("counterexample ({fault}):\n{path}");
    let actions = path.into_actions();
    println!(
        "FAULT {fault} caught by the model checker: a {}-step path, {} states",
        actions.len(),
        checker.unique_state_count()
    );
    actions
}

/// The state `m` reaches along `actions` from its initial state (each must apply).
fn replay(m: &LockModel, actions: Vec<Action>) -> State {
    let mut st = m.init_states().remove(0);
    for a in actions {
        st = m.next_state(&st, a).expect("path replays");
    }
    st
}

fn full() -> bool {
    !cfg!(debug_assertions) || std::env::var_os("MODEL_CHECK_FULL").is_some()
}

fn base(fence: bool) -> LockModel {
    LockModel {
        clients: 2,
        locks: 1,
        fence,
        max_time: if full() { 5 } else { 4 },
        max_tokens: 3,
        ttl: 2,
        lock_delay: 0,
        core_fault: false,
        reuse_token: false,
        lazy_host: false,
        permits: None,
        watchers: 0,
        lose_watcher_event: false,
        shared: false,
        two_readers: false,
        timed: None,
        cancel_close: false,
        numbered: false,
        number_keep_alives: false,
        retry_applies: false,
        operator: false,
        force_by_session: false,
        refusals: Refusals::default(),
        reached: Reached::default(),
    }
}

#[test]
fn two_clients_one_lock_fence_on_no_stale_write() {
    check(base(true));
}

/// The deliberately broken build: the resource accepts lower tokens. The checker must find
/// the GC-pause timeline by itself: a holder pauses, its session expires, the next holder
/// is granted a higher token and writes, the first resumes and writes with its old token.
#[test]
fn fence_off_checker_finds_the_gc_pause() {
    let (states, _, cex) = check(base(false));
    println!("fence off: counterexample found after {states} states");
    let actions = cex.expect("with the fence off the checker must find a stale write");
    println!(
        "FAULT gate-accepts-lower-tokens caught by the model checker: a {}-step GC-pause path",
        actions.len()
    );
    // Replay the path up to the first stale write: it is a write by a client whose inbox
    // still holds the news that it lost the lock (it was "paused": it had not read it),
    // after time passed and its session expired.
    let m = base(false);
    let mut st = m.init_states().remove(0);
    let mut steps = 0;
    for a in &actions {
        let next = m.next_state(&st, a.clone()).expect("path replays");
        steps += 1;
        if next.stale_accepted {
            let Action::Write(c, _) = a else {
                panic!("the stale write is not a write: {actions:?}")
            };
            assert!(
                st.clients[*c].inbox.contains(&Msg::SessionGone),
                "the stale writer had not lost its session: {st:?}"
            );
            break;
        }
        st = next;
    }
    assert!(actions[..steps].iter().any(|a| matches!(a, Action::Tick)));
    assert_eq!(steps, actions.len(), "the path goes on after the violation");
}

/// A lazy host: its clock moves without ticking the service, and every input carries the
/// clock, so expiries and grants happen in the advance of whatever message comes next.
/// With the fence the resource still admits no stale write and nobody dead is granted;
/// without it the checker still finds the GC pause.
#[test]
fn lazy_host_fence_holds_and_fence_off_finds_the_gc_pause() {
    let lazy = |fence| LockModel {
        lazy_host: true,
        ..base(fence)
    };
    check(lazy(true));
    let (_, _, cex) = check(lazy(false));
    let actions = cex.expect("with the fence off the checker must find a stale write");
    assert!(
        actions.iter().any(|a| matches!(a, Action::Elapse)),
        "{actions:?}"
    );
    assert!(
        !actions.iter().any(|a| matches!(a, Action::Tick)),
        "{actions:?}"
    );
}

/// Two more dimensions, one at a time (their product is too large to check): a third
/// client on one lock (release runs only), and a second lock with lock-delay; and a
/// lock-delay longer than a tick (release runs only), so a delay that one expiry starts
/// spans ticks, inputs and a second expiry's.
#[test]
fn a_third_client_or_a_second_lock_with_lock_delay() {
    let configs = if full() {
        vec![
            LockModel {
                clients: 3,
                max_time: 4,
                max_tokens: 3,
                ..base(true)
            },
            LockModel {
                locks: 2,
                max_time: 4,
                max_tokens: 3,
                lock_delay: 1,
                ..base(true)
            },
            LockModel {
                lock_delay: 2,
                ..base(true)
            },
        ]
    } else {
        // Debug builds (the quick workspace run) check a smaller space; the release run of
        // scripts/test-verify.sh checks the full ones above.
        vec![LockModel {
            locks: 2,
            max_time: 3,
            max_tokens: 2,
            lock_delay: 1,
            ..base(true)
        }]
    };
    for m in configs {
        check(m);
    }
}

/// A broken core (test-only feature `fault-injection`: a tick grants before it expires):
/// the checker must find a grant to a session whose deadline has passed — a waiter whose
/// session dies at the very tick its lock's delay ends.
#[cfg(feature = "fault-injection")]
#[test]
fn fault_core_expiry_after_grants_is_found() {
    let m = LockModel {
        lock_delay: 1,
        core_fault: true,
        ..base(true)
    };
    let actions = fault_found(&m, "no grant to a dead session", "core-expiry-after-grants");
    assert!(matches!(actions.last(), Some(Action::Tick)), "{actions:?}");
    // The same path on the real core grants nobody dead.
    let good = LockModel {
        core_fault: false,
        ..m
    };
    let st = replay(&good, actions);
    assert!(!st.granted_to_dead);
}

/// A broken core (test-only feature `fault-injection`: a grant reuses the latest token, a
/// revision that fails to rise): the checker must find a grant whose token is not above
/// an earlier grant's — the reuse a paused holder's write would pass the fence with, since
/// the fence admits a token equal to the highest it has seen. The same path on the real
/// core grants rising tokens.
#[cfg(feature = "fault-injection")]
#[test]
fn fault_core_reusing_a_token_is_found() {
    let m = LockModel {
        reuse_token: true,
        ..base(true)
    };
    let actions = fault_found(&m, "tokens rise", "core-reuses-a-token");
    let good = LockModel {
        reuse_token: false,
        ..m
    };
    let st = replay(&good, actions);
    assert!(st.tokens_reused.is_none(), "{:?}", st.tokens_reused);
    assert!(st.granted_max >= 2, "the path granted twice");
}

/// The refusal check calls a watch refusal right only when the checker's own record of
/// the watches does: `AlreadyWatching` for a session that watches nothing, `NotWatching`
/// for one that watches, and a full watcher list for a lock nobody watches are recorded as
/// wrong (they used to be taken as called for whenever watches were on).
#[test]
fn watch_refusals_its_state_does_not_call_for_are_caught() {
    let m = LockModel {
        watchers: 1,
        ..base(true)
    };
    let mut st = m.init_states().remove(0);
    st = m.next_state(&st, Action::Open(1)).expect("client 1 opens");
    let s = SessionId(st.clients[1].session.expect("open"));
    let lock = LockName::new(NAMES[0]).expect("name");
    let mut svc = m.service(&st.svc);
    svc.tick(Tick(st.now), &mut Vec::new())
        .expect("at its time");
    let watch = Input::Watch {
        now: Tick(st.now),
        session: s,
        lock: lock.clone(),
        request: None,
    };
    let unwatch = Input::Unwatch {
        now: Tick(st.now),
        session: s,
        lock,
        request: None,
    };
    let wrong = |input: &Input, e: fencelock::Error, st: &State| {
        m.check_refusal(st, &svc, input, &e, &[]);
        let mut log = m.refusals.0.lock().expect("refusal log");
        !std::mem::take(&mut log.wrong).is_empty()
    };
    assert!(wrong(&watch, fencelock::Error::AlreadyWatching(s), &st));
    assert!(wrong(
        &watch,
        fencelock::Error::CapacityExceeded(Table::Watchers),
        &st
    ));
    assert!(
        !wrong(&unwatch, fencelock::Error::NotWatching(s), &st),
        "it watches nothing"
    );
    let mut watching = st.clone();
    watching.clients[1].watching[0] = true;
    assert!(wrong(&unwatch, fencelock::Error::NotWatching(s), &watching));
    assert!(
        !wrong(&watch, fencelock::Error::AlreadyWatching(s), &watching),
        "it watches"
    );
}

/// Semaphores and watchers: clients on one semaphore of 2 permits (client 0 asks for
/// both, the others for one, so a large request stands at the head), the last client may
/// also watch it; sessions expire. Never more permits than the limit, grants in queue
/// order (the large head does block smaller requests behind it, and is not overtaken),
/// the watcher's view equal to the holders after every input, nothing after its watch
/// ends, an expiry seen by the watcher. Then a watcher of a plain lock under a lazy host
/// with lock-delay. The quick run has two clients; `MODEL_CHECK_FULL` (or a release
/// build) adds a third client (a small request queued behind the large head), the
/// semaphore under lock-delay, and two watchers.
#[test]
fn semaphores_and_watchers() {
    let semaphore = LockModel {
        max_time: 3,
        max_tokens: 3,
        permits: Some(2),
        watchers: 1,
        ..base(true)
    };
    check(semaphore.clone());
    let plain = LockModel {
        lock_delay: 1,
        lazy_host: true,
        watchers: 1,
        max_time: 3,
        ..base(true)
    };
    check(plain.clone());
    if full() {
        check(LockModel {
            clients: 3,
            ..semaphore.clone()
        });
        // An expiring holder puts the semaphore in lock-delay: nothing is granted during it,
        // however many permits are free.
        check(LockModel {
            lock_delay: 1,
            max_time: 4,
            ..semaphore
        });
        check(LockModel {
            max_time: 4,
            watchers: 2,
            ..plain
        });
    }
}

/// The watcher property has teeth: with the first watcher event of each input lost on the
/// way, the checker finds a watcher whose view differs from the holders.
#[test]
fn a_lost_watcher_event_is_found() {
    let m = LockModel {
        max_time: 2,
        permits: Some(2),
        watchers: 1,
        lose_watcher_event: true,
        ..base(true)
    };
    let actions = fault_found(&m, "permits, FIFO and watchers hold", "watcher-event-lost");
    assert!(
        actions.iter().any(|a| matches!(a, Action::Watch(..))),
        "{actions:?}"
    );
}

/// Shared mode, timed waits, cancel and close, which the configurations above leave out:
/// client 0 an exclusive writer, client 1 a shared reader that waits at most one tick;
/// either may cancel its wait or close its session. Besides the fence: the service's
/// invariants (mutual exclusion with shared holders, nothing granted to a closed or
/// expired session) and grants in queue order after every input. `MODEL_CHECK_FULL` (or a
/// release build) adds three clients — a reader between two writers, so a stale write is
/// reachable — with waits for ever and no cancel or close, and three
/// clients of which two read, so that two sessions share the lock and a release grants a
/// run of shared waiters at once (both reached: `check` asserts them).
#[test]
fn shared_timed_cancel_and_close() {
    let m = LockModel {
        max_time: 3,
        max_tokens: 3,
        shared: true,
        timed: Some(1),
        cancel_close: true,
        ..base(true)
    };
    check(m);
    if full() {
        check(LockModel {
            clients: 3,
            max_time: 3,
            max_tokens: 3,
            shared: true,
            ..base(true)
        });
        check(LockModel {
            clients: 3,
            max_time: 3,
            max_tokens: 3,
            shared: true,
            two_readers: true,
            ..base(true)
        });
    }
}

/// Numbered requests and retries: acquires, releases and cancels carry request numbers
/// (1, 2, 3… per session, at most four), and a client may repeat its latest at any moment
/// (a reply lost, or a retry racing the grant); either client may cancel its wait or close
/// its session. A repeat applies nothing and gets the answer docs/SPEC.md §6 gives — the
/// recorded reply, or for an acquire the claim as it is now (granted since, or the hold or
/// wait over) — and that second case is reached. `MODEL_CHECK_FULL` (or a release build)
/// adds a timed waiter, a lazy host, and numbered keep-alives.
#[test]
fn numbered_retries_apply_nothing() {
    let m = LockModel {
        max_time: 3,
        max_tokens: 2,
        cancel_close: true,
        numbered: true,
        ..base(true)
    };
    check(m.clone());
    if full() {
        let timed = LockModel {
            timed: Some(1),
            ..m.clone()
        };
        check(timed.clone());
        check(LockModel {
            lazy_host: true,
            ..timed
        });
        check(LockModel {
            max_time: 2,
            number_keep_alives: true,
            ..m
        });
    }
}

/// The retry property has teeth: with a repeated acquire applied afresh (its number
/// dropped) instead of answered from the record, the checker finds a repeat that changes
/// the service (a timed wait that ended queued again), under a ticking host and under a
/// lazy one.
#[test]
fn a_retry_applied_twice_is_found() {
    // Under a ticking host, and under a lazy one, whose repeat is not ticked first but
    // carries its own advance: there the service after the repeat is compared with the
    // service after that advance alone.
    for lazy_host in [false, true] {
        let m = LockModel {
            max_time: 3,
            numbered: true,
            timed: Some(1),
            retry_applies: true,
            lazy_host,
            ..base(true)
        };
        let actions = fault_found(
            &m,
            "a repeat applies nothing and answers as recorded",
            "retry-applied-afresh",
        );
        assert!(
            matches!(actions.last(), Some(Action::Retry(_))),
            "{actions:?}"
        );
        // The same path with the retry answered from its record breaks nothing.
        let good = LockModel {
            retry_applies: false,
            ..m
        };
        assert_eq!(replay(&good, actions).retry_broken, None);
    }
}

/// An operator lists a lock's holder and forces that hold out by its token, at any moment
/// after, as often as it likes (each repeat a retry after a lost answer): a forced release
/// ends only the hold it names; a repeat after the session took the lock again is refused
/// and the later hold stays (reached); a holder forced out that writes before it reads
/// the news is refused by the fence (reached: `check` asserts [`FORCED_STALE_REFUSED`]).
#[test]
fn forced_releases_by_token_end_only_the_named_hold() {
    let m = LockModel {
        operator: true,
        ..base(true)
    };
    check(m);
}

/// The operator broken on purpose: it forces a hold out by session, as a plain release
/// does. The checker must find the retry that ends the session's later hold.
#[test]
fn a_forced_release_by_session_is_found() {
    let m = LockModel {
        operator: true,
        force_by_session: true,
        ..base(true)
    };
    let actions = fault_found(
        &m,
        "a forced release ends only the hold it names",
        "force-release-by-session",
    );
    assert!(
        matches!(actions.last(), Some(Action::Force(_))),
        "{actions:?}"
    );
}
