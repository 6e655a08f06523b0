//! [`LockService`]: sessions, locks, FIFO wait queues and the fencing revision.

use serde::{Deserialize, Serialize};

use crate::storage::{
    claim_hash, session_hash, watch_hash, Bucket, Chain, ClaimRow, LabelPool, LabelRow, Link, List,
    LockRow, Recorded, SessionRow, Storage, Tables, TaggedBucket, TtlClass, CLASSES, NO_CLASS,
};
use crate::table::{fnv1a, keyed_name_hash, Indexed, NameKey, TableState, NIL};
use crate::{
    Change, Error, Input, Label, LockName, Mode, Output, ReleaseReason, Reply, SessionId, Sink,
    Table, Tick, Token, Wait, MAX_NAME_LEN,
};

/// Settings fixed at construction (capacities come from the [`Storage`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    /// Ticks during which a lock whose holder's session *expired* is not granted again
    /// (Chubby's and Consul's lock-delay). 0 turns it off. Release and close never delay.
    pub lock_delay: u64,
    /// The longest lock name accepted, 1 to [`MAX_NAME_LEN`] bytes.
    pub max_name_len: u32,
    /// The most sessions that may watch one lock at once
    /// ([`LockService::watch`]); 0 disables watches. Beyond it a watch is refused with
    /// [`Error::CapacityExceeded`]`(Watchers)`. It bounds the events one holder change
    /// can cause, so [`LockService::max_events`] grows with it.
    pub max_watchers: u32,
}

/// [`Config::max_watchers`] by default.
pub(crate) const DEFAULT_MAX_WATCHERS: u32 = 4;

impl Default for Config {
    /// No lock-delay, names up to [`MAX_NAME_LEN`] bytes, at most 4 watchers per lock.
    fn default() -> Self {
        Config {
            lock_delay: 0,
            max_name_len: MAX_NAME_LEN as u32,
            max_watchers: DEFAULT_MAX_WATCHERS,
        }
    }
}

impl Config {
    /// The check [`LockService::new`] and [`LockService::restore`] make of a config before
    /// they look at the storage: a host that allocates its tables itself calls it first,
    /// so that its refusals come in the core's order.
    ///
    /// Errors: [`Error::BadConfig`] (`max_name_len` outside 1..=[`MAX_NAME_LEN`]).
    /// Cost: O(1).
    pub fn validate(&self) -> Result<(), Error> {
        if self.max_name_len == 0 || self.max_name_len as usize > MAX_NAME_LEN {
            return Err(Error::BadConfig("max_name_len must be 1..=64"));
        }
        Ok(())
    }

    /// The lock-name rule, its one home (inputs and restored snapshots both): 1 to
    /// `max_name_len` bytes.
    ///
    /// Errors: [`Error::EmptyName`], [`Error::NameTooLong`]. Cost: O(1).
    #[cfg_attr(not(target_family = "wasm"), inline(always))]
    pub(crate) fn check_name(&self, name: &str) -> Result<(), Error> {
        if name.is_empty() {
            return Err(Error::EmptyName);
        }
        if name.len() > self.max_name_len as usize {
            return Err(Error::NameTooLong {
                len: name.len().min(u32::MAX as usize) as u32,
                max: self.max_name_len,
            });
        }
        Ok(())
    }
}

/// Capacities of the three tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capacity {
    /// Sessions that can be open at once.
    pub sessions: u32,
    /// Locks that can be held, awaited, watched or in lock-delay at once.
    pub locks: u32,
    /// Holds, waits and watches, over all sessions and locks.
    pub claims: u32,
}

impl Capacity {
    /// The most events one input can emit to a service of this capacity whose config
    /// allows `max_watchers` watchers per lock: [`LockService::max_events`] with every
    /// table full and every claim a possible watch, S + 2·C + (2·C + 1)·min(`max_watchers`,
    /// C) for S sessions and C claims (S + 2·C with watches off). No input of such a
    /// service ever needs more, so a bounded [`Sink`] with this much room always takes the
    /// next input: size an event ring by it. Saturates at `usize::MAX`; a table larger
    /// than [`MAX_ROWS`] (which no service has) counts as `MAX_ROWS`. Errors: none. Cost:
    /// O(1).
    pub fn max_events(&self, max_watchers: u32) -> usize {
        clamp(self.max_events_u64(max_watchers))
    }

    /// [`max_events`](Self::max_events) in 64 bits, never saturated: what a heap queue's
    /// default limit is made from, so that it is the same on 32- and 64-bit targets.
    pub(crate) fn max_events_u64(&self, max_watchers: u32) -> u64 {
        let rows = |n: u32| u64::from(n).min(MAX_ROWS as u64);
        let claims = rows(self.claims);
        event_bound(rows(self.sessions), claims, claims, max_watchers)
    }
}

/// The events one input can emit with `sessions` open, `holds` holds and waits, `watches`
/// watches and at most `max_watchers` watchers per lock: the rule of
/// [`LockService::max_events`], the one home of it. In 64 bits, so the bound is the same
/// on every target. Each count is at most [`MAX_ROWS`] (a service's by `check_rows`,
/// [`Capacity::max_events`]'s by clamping), so it cannot overflow: the bound is below
/// 2³¹ + 2³² + (2³² + 1)·2³¹ < 2⁶⁴ (plain arithmetic: on wasm32 a saturating 64-bit
/// multiply costs code the small module feels).
#[inline(always)]
fn event_bound(sessions: u64, holds: u64, watches: u64, max_watchers: u32) -> u64 {
    debug_assert!(sessions <= MAX_ROWS as u64 && holds <= MAX_ROWS as u64);
    debug_assert!(watches <= MAX_ROWS as u64);
    let fan = (max_watchers as u64).min(watches);
    let changes = 2 * holds;
    sessions + changes + (changes + 1) * fan
}

/// `n` as a `usize`, `usize::MAX` past it (a 32-bit target). Cost: O(1).
pub(crate) const fn clamp(n: u64) -> usize {
    if n > usize::MAX as u64 {
        usize::MAX
    } else {
        n as usize
    }
}

/// Rows in use in each of the three tables, as returned by [`LockService::usage`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Open sessions.
    pub sessions: u32,
    /// Live lock entries (held, awaited, watched or in lock-delay).
    pub locks: u32,
    /// Holds, waits and watches.
    pub claims: u32,
}

/// A session as seen by [`LockService::session`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionInfo {
    /// Its id.
    pub id: SessionId,
    /// Its time to live in ticks.
    pub ttl: u64,
    /// It expires at this tick unless kept alive.
    pub expires_at: Tick,
    /// Locks it holds.
    pub holds: u32,
    /// Locks it waits for.
    pub waits: u32,
    /// Locks it watches ([`Input::Watch`](crate::Input::Watch)).
    pub watches: u32,
    /// Its latest idempotent-retry request number (0 = none yet).
    pub last_request: u64,
    /// Its holder label ([`LockService::open_labeled`]; empty = none).
    pub label: Label,
}

/// A holder of a lock, as seen by [`LockService::holders`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// The holding session.
    pub session: SessionId,
    /// Its mode.
    pub mode: Mode,
    /// Its fencing token.
    pub token: Token,
    /// The holding session's label (empty = none).
    pub label: Label,
}

/// A waiter for a lock, as seen by [`LockService::waiters`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Waiter {
    /// The waiting session.
    pub session: SessionId,
    /// The mode asked for.
    pub mode: Mode,
    /// When the wait times out (`None` = waits forever).
    pub deadline: Option<Tick>,
    /// The waiting session's label (empty = none).
    pub label: Label,
}

/// A live semaphore's permits, as seen by [`LockService::permits`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Permits {
    /// Permits its holders hold together (never more than `limit`).
    pub in_use: u32,
    /// Its limit (the one every acquire of it carries).
    pub limit: u32,
}

/// Everything but the rows: counters, list heads, time. Small and `Copy`, so the
/// service's whole state is this plus the rows.
#[derive(Clone, Copy, Debug)]
pub(crate) struct State {
    pub(crate) config: Config,
    pub(crate) now: u64,
    pub(crate) next_session: u64,
    pub(crate) revision: u64,
    pub(crate) next_seq: u64,
    pub(crate) next_lock: u64,
    pub(crate) sessions: TableState,
    pub(crate) locks: TableState,
    pub(crate) claims: TableState,
    pub(crate) session_order: List,
    pub(crate) lock_order: List,
    /// Lock rows that went idle, oldest first (linked through `order`, which only live
    /// locks use otherwise): still indexed by name, so taking the lock again reuses the
    /// row; taken for another name when the free list is empty. Invisible: not listed,
    /// counted or snapshotted; a lock in it is free, unheld and undelayed.
    pub(crate) idle_locks: List,
    pub(crate) claim_order: List,
    /// Watch claims in use (the rest of the claim table's rows are holds and waits).
    pub(crate) watches: u32,
    /// The label table's free rows.
    pub(crate) labels: LabelPool,
    dirty_head: u32,
    dirty_tail: u32,
    /// Up to [`CLASSES`] ttls whose sessions are kept in deadline lists (see
    /// `View::renew`); which ttls they are depends on history and never shows outside.
    pub(crate) classes: [TtlClass; CLASSES],
    /// The key of all three indexes ([`LockService::set_name_key`]); `None`: the public
    /// hashes.
    pub(crate) name_key: Option<NameKey>,
    /// TEST ONLY (feature `fault-injection`): see
    /// [`LockService::inject_fault_expiry_after_grants`].
    #[cfg(feature = "fault-injection")]
    fault_expiry_after_grants: bool,
    /// TEST ONLY (feature `fault-injection`): see
    /// [`LockService::inject_fault_reuse_token`].
    #[cfg(feature = "fault-injection")]
    fault_reuse_token: bool,
}

/// The lock service: a deterministic state machine with no clock and no I/O.
///
/// # Call order and the host's obligations (docs/SPEC.md §8)
///
/// * **Inputs**: [`handle`](Self::handle) (or the typed methods it dispatches to:
///   [`open_session`](Self::open_session), [`keep_alive`](Self::keep_alive),
///   [`close_session`](Self::close_session), [`acquire`](Self::acquire),
///   [`release`](Self::release), [`cancel`](Self::cancel), [`tick`](Self::tick),
///   [`open_labeled`](Self::open_labeled), [`watch`](Self::watch),
///   [`unwatch`](Self::unwatch), [`release_hold`](Self::release_hold)).
///   Each carries the host's `now` and returns the caller's [`Reply`]; every event —
///   for other sessions, caused by time, or the few for the caller (its holds'
///   `Released` on close, a watch's `Holding` snapshot) — goes to the [`Sink`] `out`, in
///   order, before the call returns: route each by [`Output::session`](crate::Output::session). The service buffers nothing, so it can drop nothing.
/// * **Time**: every input first advances the service to its `now`, exactly as
///   [`tick`](Self::tick) would, so messages need no tick between them. The host MUST
///   still call `tick` no later than [`poll_timeout`](Self::poll_timeout) says, so that
///   expiries, timeouts and lock-delay ends are not late (calling it earlier, or twice
///   with the same tick, is harmless). `now` never goes backwards.
/// * **Events**: the host MUST deliver each event to the session it names
///   ([`Output::session`]); a `Granted` is how a waiter learns it holds the lock, so
///   nobody polls.
/// * **Errors**: a refused input changed nothing beyond the advance to its `now` (whose
///   events are in the sink); the host answers the client with the error. The order in
///   which several faults are reported is docs/SPEC.md §5.
/// * **Getters** (`&self`) never change anything.
///
/// # Bound on events per input
///
/// The advance: one `SessionExpired` per expired session, then one event per hold or wait
/// at most (`Released` for a hold it ends, `WaitTimedOut` or `Granted` for a wait). The
/// input itself: release or cancel, the waiters then granted; close, one `Released` per
/// hold plus the grants they free; watch, one `Holding` per holder; open, keep-alive,
/// acquire, unwatch and replays, none. A claim granted by the advance and released by a
/// close in the same input has two events. Each holder change (a `Granted` or `Released`
/// above, or an acquire granted at once, or a release) also reaches every watcher of its
/// lock. So no input emits more than [`max_events`](Self::max_events) (its docs give the
/// formula; with no watch in use it is sessions + 2 × claims, the counts of
/// [`usage`](Self::usage) before it). A bounded sink with less room than `max_events()` is
/// refused up front ([`Error::BufferTooSmall`]).
///
/// # Cost
///
/// Every input is its advance plus O(1) expected, plus O(log n) per deadline it moves,
/// plus O(1) per event, except close/expiry which is O(claims of that session), each
/// timed wait or lock-delay among them O(log n) more (its deadline leaves or enters a heap), and an
/// acquire retried (same request number) while its session waits, which finds its queue
/// position by walking the queue, O(waiters ahead). An advance with nothing due is O(1);
/// expiring k sessions is O(k log n) plus their events. No input scans a table (the
/// queries and `snapshot` walk what they list).
///
/// "Expected" assumes lock names not chosen against the index's hash. Unkeyed (the
/// default) the hash has no seed (determinism): a client that can pick many names hashing
/// to one place can make lookups of those names cost up to their number. A host that
/// takes names from untrusted clients keys the index with a secret
/// ([`set_name_key`](Self::set_name_key), and [`restore_keyed`](Self::restore_keyed) after
/// a restart), and may also bound how many locks each client may create (the server's
/// role prefixes do).
///
/// A session is kept, when it can be, at the row its id names — (id − 1) mod the session
/// rows, its home row — so a call that names a session finds it with one load and no
/// index read. A session opened while its home row was taken (by an earlier session with
/// the same home that still lives, or by one that was itself placed away from home)
/// takes the most recently freed row instead and is indexed there; only such sessions
/// are in the session index. While sessions live for fewer opens than there are rows,
/// nearly all are at home. Which row a session has never shows.
///
/// Session deadlines of up to four ttls at a time are kept in one list per ttl, in
/// deadline order, with only each list's head in the deadline heap: a keep-alive (whose
/// new deadline, now + ttl, is the latest of its ttl) moves its session to the tail in
/// O(1), whatever the number of sessions — and when the session headed its list (the one
/// due first, as the next keep-alive's session often is), its list's new head takes its
/// place in the deadline heap, O(log h) for the h entries there: the four lists' heads and
/// the sessions in no list, so at most 2 sifts of a 4-entry heap once every session's ttl
/// has a list. Sessions of other ttls, and those restored from a snapshot until their
/// first keep-alive, are in the heap on their own (O(log n) per keep-alive). Which ttls have lists depends on history and never shows: replies,
/// events, [`poll_timeout`](Self::poll_timeout) and snapshots are the same either way.
#[derive(Debug)]
pub struct LockService<S: Storage> {
    pub(crate) storage: S,
    pub(crate) st: State,
}

/// The highest floor [`LockService::raise_revision`] accepts: 2^62. A snapshot restores a
/// revision up to 2^63 (the bound that keeps a restored counter's `+= 1` from ever
/// overflowing), so 2^62 grants — 146 years at a billion a second — lie between the
/// highest floor and a revision whose snapshot could not be restored; and the tokens stay
/// below 2^63, which a signed 64-bit database column holds. (That room is a history's: a
/// snapshot with a counter set near 2^63 by hand restores, and once the counter passes
/// 2^63 the service's snapshots are refused by restore — docs/SPEC.md §1.)
pub const MAX_REVISION_FLOOR: u64 = 1 << 62;

/// The most rows any table (the service's three, a gate's) may have: row indexes are
/// `u32` with one value reserved, and the bindings hand counts to 32-bit callers.
pub const MAX_ROWS: usize = i32::MAX as usize;

/// The one check of [`MAX_ROWS`]; every constructor and restore calls it, and so may a
/// binding before it allocates. Errors: [`Error::BadConfig`]. Cost: O(1).
pub fn check_rows(rows: usize) -> Result<(), Error> {
    if rows > MAX_ROWS {
        return Err(Error::BadConfig("a table has more than 2^31 - 1 rows"));
    }
    Ok(())
}

/// The one check that each table's hash index has two buckets per row (a host's own
/// [`Storage`] or [`SliceStorage`](crate::SliceStorage) could hand in any lengths). Called
/// after [`check_rows`], so the doubled row counts cannot overflow.
/// Errors: [`Error::BadConfig`]. Cost: O(1).
fn check_indexes(t: &Tables<'_>) -> Result<(), Error> {
    let n = crate::storage::BUCKETS_PER_ROW;
    if t.session_index.len() != n * t.sessions.len()
        || t.lock_index.len() != n * t.locks.len()
        || t.claim_index.len() != n * t.claims.len()
    {
        return Err(Error::BadConfig(
            "a table's index must have two buckets per row",
        ));
    }
    Ok(())
}

/// Which input a recorded reply belongs to (to catch a reused request number).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    KeepAlive,
    Acquire,
    Release,
    Cancel,
    Close,
    Watch,
    Unwatch,
}

/// What [`View::begin`] found: apply the input, or answer a repeat of the latest request.
enum Begin {
    /// Apply it: the session's row and the request's fingerprint ([`target`]).
    Apply { s: u32, target: u64 },
    /// A repeat of the latest request: its recorded reply.
    Replay(Recorded),
}

impl<S: Storage> LockService<S> {
    /// A service with empty tables in `storage` (whatever the rows held is discarded).
    ///
    /// Errors: [`Error::BadConfig`] for a bad `max_name_len`, a table of more than
    /// 2³¹ − 1 rows, an index without two buckets per row, or a [`Storage`] whose
    /// read-only views (`tables_ref`, `labels_ref`) give other tables or indexes (by
    /// length) than its mutable ones. Cost: O(capacity).
    pub fn new(mut storage: S, config: Config) -> Result<Self, Error> {
        Self::check(&mut storage, &config)?;
        Ok(Self::build(storage, config))
    }

    pub(crate) fn check(storage: &mut S, config: &Config) -> Result<(), Error> {
        config.validate()?;
        let (t, labels) = storage.tables_and_labels();
        check_rows(t.sessions.len())?;
        check_rows(t.locks.len())?;
        check_rows(t.claims.len())?;
        check_rows(labels.len())?;
        check_indexes(&t)?;
        // A host's `Storage` whose read-only views disagree with its mutable ones (say,
        // `tables_and_labels` given labels but `labels_ref` left at its default) would
        // write snapshots that restore refuses: refused here, before anything is built.
        // The tables', indexes' and labels' lengths are compared (the views must be of
        // the same rows, which only the host can make so): a read-only index shorter than
        // the one kept at most half full could be full, and a query's probe of it, which
        // ends only at a free bucket, would never end.
        let lens = |t: &crate::storage::TablesRef<'_>, labels: usize| {
            [
                t.sessions.len(),
                t.session_index.len(),
                t.locks.len(),
                t.lock_index.len(),
                t.claims.len(),
                t.claim_index.len(),
                labels,
            ]
        };
        let mutable = lens(&t.as_ref(), labels.len());
        if lens(&storage.tables_ref(), storage.labels_ref().len()) != mutable {
            return Err(Error::BadConfig(
                "tables_ref and labels_ref must give the rows tables_and_labels gives",
            ));
        }
        Ok(())
    }

    pub(crate) fn build(mut storage: S, config: Config) -> Self {
        let (t, labels) = storage.tables_and_labels();
        for r in t.sessions.iter_mut() {
            *r = SessionRow::EMPTY;
        }
        for r in t.locks.iter_mut() {
            *r = LockRow::EMPTY;
        }
        for r in t.claims.iter_mut() {
            *r = ClaimRow::EMPTY;
        }
        let st = State {
            config,
            now: 0,
            next_session: 1,
            revision: 0,
            next_seq: 1,
            next_lock: 1,
            sessions: TableState::init_linked(t.sessions, t.session_index, free_prev),
            locks: TableState::init(t.locks, t.lock_index),
            claims: TableState::init(t.claims, t.claim_index),
            session_order: List::EMPTY,
            lock_order: List::EMPTY,
            idle_locks: List::EMPTY,
            claim_order: List::EMPTY,
            watches: 0,
            labels: LabelPool::init(labels),
            dirty_head: NIL,
            dirty_tail: NIL,
            classes: [TtlClass::EMPTY; CLASSES],
            name_key: None,
            #[cfg(feature = "fault-injection")]
            fault_expiry_after_grants: false,
            #[cfg(feature = "fault-injection")]
            fault_reuse_token: false,
        };
        LockService { storage, st }
    }

    /// Sets the secret key the indexes hash with ([`NameKey`]): from now on a name's place
    /// in the lock index depends on it, so names chosen to share a probe run under the
    /// public hash (or under another key) are spread out; so are the session ids and
    /// claims of the session and claim indexes (which a snapshot's author steers through
    /// its ids). A host that serves names it does not choose (a shared server's tenants)
    /// calls this after [`new`](Self::new) or [`restore`](Self::restore), with a key from
    /// a random source; it may be called again. Nothing else changes: replies, events,
    /// queries, snapshots and [`poll_timeout`](Self::poll_timeout) are the same whatever
    /// the key, and with none. To restore bytes of a source that may choose them, use
    /// [`restore_keyed`](Self::restore_keyed), which indexes the rows under the key as it
    /// loads them. Cost: O(capacity of the three tables), to rebuild the indexes;
    /// afterwards every input that names a lock hashes the name with SipHash-1-3 (some 60
    /// instructions more per input for a short name), as does a lookup of a session away
    /// from its home row, of a watch, or of a hold or wait on a lock with two or more
    /// (some 70). Errors: none.
    pub fn set_name_key(&mut self, key: NameKey) {
        self.st.name_key = Some(key);
        self.view().rebuild_indexes();
    }

    /// Whether the indexes hash under a key ([`set_name_key`](Self::set_name_key)).
    /// Errors: none. Cost: O(1).
    pub fn is_name_keyed(&self) -> bool {
        self.st.name_key.is_some()
    }

    /// The row of live session `session`, if it is open ([`find_session`]). Cost: O(1)
    /// expected.
    fn session_row(&self, session: SessionId) -> Option<u32> {
        let t = self.storage.tables_ref();
        find_session(
            t.session_index,
            t.sessions,
            self.st.name_key.as_ref(),
            session.0,
        )
    }

    /// Gives the storage back. Errors: none. Cost: O(1).
    pub fn into_storage(self) -> S {
        self.storage
    }

    pub(crate) fn view(&mut self) -> View<'_> {
        let (t, labels) = self.storage.tables_and_labels();
        View {
            s: t.sessions,
            si: t.session_index,
            l: t.locks,
            li: t.lock_index,
            c: t.claims,
            ci: t.claim_index,
            lb: labels,
            st: &mut self.st,
        }
    }

    // ------------------------------------------------------------------ inputs

    /// Applies one input and returns the caller's [`Reply`]; its events (everything but
    /// the reply, see [`LockService`]) go to `out`, in order.
    ///
    /// Errors: those of the typed method the input names. Cost: that method's.
    pub fn handle(&mut self, input: Input, out: &mut impl Sink) -> Result<Reply, Error> {
        match input {
            Input::OpenSession { now, ttl } => self.open_session(now, ttl, out),
            Input::KeepAlive {
                now,
                session,
                request,
            } => self.keep_alive(now, session, request, out),
            Input::CloseSession {
                now,
                session,
                request,
            } => self.close_session(now, session, request, out),
            Input::Acquire {
                now,
                session,
                lock,
                mode,
                wait,
                request,
            } => self.acquire(now, session, lock.as_str(), mode, wait, request, out),
            Input::Release {
                now,
                session,
                lock,
                request,
            } => self.release(now, session, lock.as_str(), request, out),
            Input::Cancel {
                now,
                session,
                lock,
                request,
            } => self.cancel(now, session, lock.as_str(), request, out),
            Input::Tick { now } => self.tick(now, out).map(|()| Reply::Ticked { now }),
            Input::OpenLabeled { now, ttl, label } => self.open_labeled(now, ttl, label, out),
            Input::Watch {
                now,
                session,
                lock,
                request,
            } => self.watch(now, session, lock.as_str(), request, out),
            Input::Unwatch {
                now,
                session,
                lock,
                request,
            } => self.unwatch(now, session, lock.as_str(), request, out),
            Input::ReleaseHold {
                now,
                session,
                lock,
                token,
                request,
            } => self.release_hold(now, session, lock.as_str(), token, request, out),
        }
    }

    /// Opens a session expiring `ttl` ticks after `now`. Replies `Opened`.
    ///
    /// Errors: [`Error::TimeWentBackwards`], [`Error::BufferTooSmall`] (a bounded sink
    /// with less room than [`max_events`](Self::max_events)), then — after advancing to
    /// `now`, which stands — [`Error::BadTtl`] (0), [`Error::DeadlineOverflow`],
    /// [`Error::CapacityExceeded`]`(Sessions)`. Cost: the advance, then O(1) expected for
    /// a ttl that open sessions already have, O(log sessions) for a new ttl (its list's
    /// head enters the deadline heap, or, with four ttls in use, the session itself does;
    /// see the type's Cost section).
    pub fn open_session(
        &mut self,
        now: Tick,
        ttl: u64,
        out: &mut impl Sink,
    ) -> Result<Reply, Error> {
        self.open_labeled(now, ttl, Label::EMPTY, out)
    }

    /// Opens a session as [`open_session`](Self::open_session) does, with a holder label
    /// that [`SessionInfo`], [`Holder`], [`Waiter`] and watchers'
    /// [`Output::HolderChanged`] events show. Replies `Opened`.
    ///
    /// A non-empty label takes a row of the storage's label table
    /// ([`Storage::tables_and_labels`]) until the session ends; an empty one takes none.
    ///
    /// Errors: those of [`open_session`](Self::open_session), then
    /// [`Error::CapacityExceeded`]`(Labels)` when the label is not empty and every label
    /// row is taken (a too-long label is refused when the [`Label`] is made:
    /// [`Error::LabelTooLong`]). Cost: as `open_session`, plus O(label length) to store
    /// the label.
    pub fn open_labeled(
        &mut self,
        now: Tick,
        ttl: u64,
        label: Label,
        out: &mut impl Sink,
    ) -> Result<Reply, Error> {
        self.advance(now, out)?;
        let mut v = self.view();
        if ttl == 0 {
            return Err(Error::BadTtl);
        }
        let expires_at = v.st.now.checked_add(ttl).ok_or(Error::DeadlineOverflow)?;
        // Both tables are checked before either is taken, so a refusal changes nothing.
        if v.st.sessions.is_full() {
            return Err(Error::CapacityExceeded(Table::Sessions));
        }
        if !label.is_empty() && v.st.labels.is_full() {
            return Err(Error::CapacityExceeded(Table::Labels));
        }
        let id = v.st.next_session;
        let slot = v
            .alloc_session(id)
            .ok_or(Error::CapacityExceeded(Table::Sessions))?;
        v.st.next_session += 1;
        v.insert_session(slot, id, ttl, expires_at);
        v.set_label(slot, label)?;
        v.schedule_session(slot, true);
        Ok(Reply::Opened {
            session: SessionId(id),
            expires_at: Tick(expires_at),
        })
    }

    /// Keeps a session alive: its deadline becomes `now` + ttl. Replies `KeptAlive` (the
    /// client's acknowledgement; its [`SessionKeeper`](crate::SessionKeeper) counts the
    /// lease from when it sent this).
    ///
    /// Errors: [`Error::TimeWentBackwards`], [`Error::BufferTooSmall`], then (after the
    /// advance) [`Error::UnknownSession`], request-number errors,
    /// [`Error::DeadlineOverflow`]. Cost: the advance, then O(1) expected (the session
    /// moves to the tail of its ttl's deadline list; O(log h) more when it headed the list,
    /// h the deadline heap's entries: see the type's Cost section), O(log sessions) for a
    /// session alone in its list or in none.
    pub fn keep_alive(
        &mut self,
        now: Tick,
        session: SessionId,
        request: Option<u64>,
        out: &mut impl Sink,
    ) -> Result<Reply, Error> {
        self.advance(now, out)?;
        let mut v = self.view();
        let s = v.session_slot(session)?;
        if let Some(recorded) = v.check_request(s, request, Kind::KeepAlive, 0)? {
            return Ok(recorded.reply());
        }
        let expires_at =
            v.st.now
                .checked_add(v.s[s as usize].ttl(&v.st.classes))
                .ok_or(Error::DeadlineOverflow)?;
        v.renew(s, expires_at);
        v.record(s, request, 0, Recorded::KeptAlive { expires_at });
        Ok(Reply::KeptAlive {
            expires_at: Tick(expires_at),
        })
    }

    /// Closes a session. Replies `Closed`; its watches end first (silently), then it emits
    /// `Released` (reason `Closed`) for each lock it held (in the order it asked for them:
    /// a hold granted after a wait counts from when it queued),
    /// each followed by the lock's watchers' `HolderChanged` (`Closed`), then `Granted` to
    /// the waiters that this frees. Its waits are dropped silently. No lock-delay.
    ///
    /// Errors: [`Error::TimeWentBackwards`], [`Error::BufferTooSmall`], then (after the
    /// advance) [`Error::UnknownSession`], request-number errors. Cost: the advance, then
    /// O(its claims + events), plus O(log claims) per timed wait dropped.
    pub fn close_session(
        &mut self,
        now: Tick,
        session: SessionId,
        request: Option<u64>,
        out: &mut impl Sink,
    ) -> Result<Reply, Error> {
        self.advance(now, out)?;
        let mut v = self.view();
        let s = v.session_slot(session)?;
        v.check_request(s, request, Kind::Close, 0)?;
        v.end_session(s, ReleaseReason::Closed, out);
        v.grant_dirty(out);
        Ok(Reply::Closed)
    }

    /// Acquires `lock` for `session` in `mode`.
    ///
    /// * Free (or held shared, for a shared request, with nobody queued) and not in
    ///   lock-delay: replies `Granted` with a fresh token.
    /// * Already held by this session in this mode: replies `Granted` with its current
    ///   token (no second hold, no new token).
    /// * Otherwise with `Wait::None` or a deadline not after now: replies `Busy`; with a
    ///   later deadline or `Wait::Forever`: queues it at the tail and replies `Queued`.
    /// * A repeat of the session's latest `request` number applies nothing and leaves the
    ///   recorded reply as it was; it answers from the session's claim on the lock *now*,
    ///   so a client that lost replies never waits on a stale one:
    ///   - holding it: `Granted` with the held mode and current token (a queued acquire
    ///     granted since included: no second `Granted` would ever come);
    ///   - queued for it: `Queued` with the queued mode and its current 1-based position
    ///     (found by walking the queue from its head: O(queue length), on this replay path
    ///     only);
    ///   - neither, recorded `Busy`: `Busy`;
    ///   - neither, recorded `Queued`: `WaitEnded` (the wait is over: it timed out, or it
    ///     was granted and that hold ended since, by a release without a number or a
    ///     forced one; a cancel would have been the client's own later request);
    ///   - neither, recorded `Granted`: `HoldEnded` with the recorded token.
    ///
    /// Acquire emits no events of its own to the caller (only those of the advance to
    /// `now`); a grant at once reaches the lock's watchers (`HolderChanged`, `Granted`).
    ///
    /// In [`Mode::Permits`] (a semaphore, docs/SPEC.md §13): granted at once only when
    /// nobody is queued, there is no lock-delay and `in_use + count <= limit`; queued
    /// waiters are granted in strict FIFO order as permits come back. Each grant has its
    /// own token.
    ///
    /// Errors: [`Error::TimeWentBackwards`], [`Error::BufferTooSmall`], then (after the
    /// advance) [`Error::UnknownSession`], [`Error::EmptyName`], [`Error::NameTooLong`],
    /// [`Error::BadPermits`], request-number errors, [`Error::LimitMismatch`],
    /// [`Error::AlreadyQueued`], [`Error::ModeMismatch`],
    /// [`Error::CapacityExceeded`]`(Claims | Locks)`, in that order.
    /// Cost: the advance, then O(name length + log claims); a replay that finds the
    /// session queued adds O(queue length).
    #[allow(clippy::too_many_arguments)]
    pub fn acquire(
        &mut self,
        now: Tick,
        session: SessionId,
        lock: &str,
        mode: Mode,
        wait: Wait,
        request: Option<u64>,
        out: &mut impl Sink,
    ) -> Result<Reply, Error> {
        self.advance(now, out)?;
        let mut v = self.view();
        let s = v.session_slot(session)?;
        v.check_name(lock)?;
        let mode = mode.validate()?;
        let hash = v.name_hash(lock);
        let target = target(lock, Some(mode), request);
        if let Some(recorded) = v.check_request(s, request, Kind::Acquire, target)? {
            return Ok(v.replay_acquire(s, lock, hash, recorded));
        }
        let l = v.lock_slot(lock, hash);
        if let Some(l) = l {
            if let Some(live) = v.live_limit(l) {
                let want = match mode {
                    Mode::Permits { limit, .. } => limit,
                    Mode::Exclusive | Mode::Shared => 0,
                };
                if want != live {
                    return Err(Error::LimitMismatch { limit: live });
                }
            }
            if let Some(c) = v.claim_slot(s, l) {
                let claim = &v.c[c as usize];
                if !claim.holding() {
                    return Err(Error::AlreadyQueued(session));
                }
                if claim.mode() != mode {
                    return Err(Error::ModeMismatch { held: claim.mode() });
                }
                let token = claim.value;
                v.record(s, request, target, granted(mode, token));
                return Ok(Reply::Granted {
                    mode,
                    token: Token(token),
                });
            }
        }
        let grantable = match l {
            None => true,
            Some(l) => v.grantable_now(l, mode),
        };
        let deadline = match wait {
            Wait::None => None,
            Wait::Until(t) if t.0 <= v.st.now => None,
            Wait::Until(t) => Some(t.0),
            Wait::Forever => Some(u64::MAX),
        };
        if !grantable && deadline.is_none() {
            v.record(s, request, target, Recorded::Busy);
            return Ok(Reply::Busy);
        }
        // Take the rows before the first change: a full table changes nothing. Taking a
        // free row and giving it back leaves the free list exactly as it was.
        let Some(c) = v.st.claims.alloc(v.c) else {
            return Err(Error::CapacityExceeded(Table::Claims));
        };
        let l = v.take_lock(l, lock, hash, c)?;
        let seq = v.st.next_seq;
        v.st.next_seq += 1;
        v.insert_claim(c, s, l, mode, seq);
        if grantable {
            let token = v.grant(c);
            v.record(s, request, target, granted(mode, token));
            v.tell_watchers(l, s, mode, token, Change::Granted, out);
            Ok(Reply::Granted {
                mode,
                token: Token(token),
            })
        } else {
            let deadline = deadline.unwrap_or(u64::MAX);
            v.c[c as usize].value = deadline;
            v.l[l as usize].waiters.push_back(v.c, c, in_lock);
            if deadline != u64::MAX {
                v.st.claims.schedule(v.c, c);
            }
            let position = v.l[l as usize].waiters.len;
            v.record(s, request, target, queued(mode, position));
            Ok(Reply::Queued { mode, position })
        }
    }

    /// Releases a lock the session holds. Replies `Released`; emits `HolderChanged`
    /// (`Released`) to the lock's watchers, then `Granted` to the head of the queue (one
    /// exclusive waiter, the run of shared waiters at the head, or the permit waiters at
    /// the head that fit), each followed by its watchers' `HolderChanged` (`Granted`).
    ///
    /// Errors: [`Error::TimeWentBackwards`], [`Error::BufferTooSmall`], then (after the
    /// advance) [`Error::UnknownSession`], name errors, request-number errors,
    /// [`Error::NotHolder`]. Cost: the advance, then O(name length + log claims + events).
    pub fn release(
        &mut self,
        now: Tick,
        session: SessionId,
        lock: &str,
        request: Option<u64>,
        out: &mut impl Sink,
    ) -> Result<Reply, Error> {
        self.advance(now, out)?;
        self.release_now(session, lock, request, out)
    }

    /// [`release`](Self::release) after the advance (also [`resign`](Self::resign)'s).
    #[cfg_attr(not(target_family = "wasm"), inline(always))]
    pub(crate) fn release_now(
        &mut self,
        session: SessionId,
        lock: &str,
        request: Option<u64>,
        out: &mut impl Sink,
    ) -> Result<Reply, Error> {
        self.release_claim(session, lock, None, request, out)
    }

    /// Releases the session's hold on `lock` if it is the hold granted with `token`, as
    /// [`release`](Self::release) does (the same reply and events). A session holds a lock
    /// at most once, so the token names one hold: if the session holds the lock with
    /// another token (it took the lock again after the hold this token names ended), that
    /// hold stays and the answer is `NotHolder`. An operator forcing out a hold they read
    /// from a listing, or a host retrying a release without a request number, names the
    /// hold by its token so that the retry cannot release the session's next hold.
    ///
    /// A request number used for it is a different request from a `release` of the same
    /// lock and from a `release_hold` with another token (`RequestReused`); its repeat
    /// replays the recorded `Released`.
    ///
    /// Errors: as [`release`](Self::release), with [`Error::NotHolder`] also when the
    /// session holds the lock with another token. Cost: as `release`.
    pub fn release_hold(
        &mut self,
        now: Tick,
        session: SessionId,
        lock: &str,
        token: Token,
        request: Option<u64>,
        out: &mut impl Sink,
    ) -> Result<Reply, Error> {
        self.advance(now, out)?;
        self.release_claim(session, lock, Some(token.0), request, out)
    }

    /// The release of `session`'s hold on `lock` (only the hold of token `hold`, if
    /// given), after the advance.
    #[cfg_attr(not(target_family = "wasm"), inline(always))]
    fn release_claim(
        &mut self,
        session: SessionId,
        lock: &str,
        hold: Option<u64>,
        request: Option<u64>,
        out: &mut impl Sink,
    ) -> Result<Reply, Error> {
        let mut v = self.view();
        let (s, target) = match v.begin_as(session, lock, request, Kind::Release, hold)? {
            Begin::Apply { s, target } => (s, target),
            Begin::Replay(recorded) => return Ok(recorded.reply()),
        };
        let hash = v.name_hash(lock);
        let c = v
            .lock_slot(lock, hash)
            .and_then(|l| v.claim_slot(s, l))
            .filter(|c| {
                let c = &v.c[*c as usize];
                c.holding() && hold.is_none_or(|token| c.value == token)
            })
            .ok_or(Error::NotHolder(session))?;
        let l = v.c[c as usize].lock();
        let token = v.c[c as usize].value;
        let mode = v.c[c as usize].mode();
        v.remove_claim(c);
        v.record(s, request, target, Recorded::Released { token });
        v.tell_watchers(l, s, mode, token, Change::Released, out);
        // What `grant_dirty` does for one lock, without the list (nothing else is marked
        // after the advance).
        if v.l[l as usize].waiters.head != NIL {
            v.grant_queue_head(l, out);
        }
        v.evict_if_idle(l);
        Ok(Reply::Released {
            token: Token(token),
        })
    }

    /// Withdraws a queued acquire. Replies `Cancelled`; emits `Granted` to the waiters it
    /// alone kept waiting (shared waiters behind it, or permit waiters that now fit),
    /// each followed by its watchers' `HolderChanged`.
    ///
    /// Errors: [`Error::TimeWentBackwards`], [`Error::BufferTooSmall`], then (after the
    /// advance) [`Error::UnknownSession`], name errors, request-number errors,
    /// [`Error::NotQueued`]. Cost: the advance, then O(name length + log claims + events).
    pub fn cancel(
        &mut self,
        now: Tick,
        session: SessionId,
        lock: &str,
        request: Option<u64>,
        out: &mut impl Sink,
    ) -> Result<Reply, Error> {
        self.advance(now, out)?;
        self.cancel_now(session, lock, request, out)
    }

    /// [`cancel`](Self::cancel) after the advance (also [`resign`](Self::resign)'s).
    pub(crate) fn cancel_now(
        &mut self,
        session: SessionId,
        lock: &str,
        request: Option<u64>,
        out: &mut impl Sink,
    ) -> Result<Reply, Error> {
        let mut v = self.view();
        let (s, target) = match v.begin(session, lock, request, Kind::Cancel)? {
            Begin::Apply { s, target } => (s, target),
            Begin::Replay(recorded) => return Ok(recorded.reply()),
        };
        let c = v
            .lock_slot(lock, v.name_hash(lock))
            .and_then(|l| v.claim_slot(s, l))
            .filter(|c| !v.c[*c as usize].holding())
            .ok_or(Error::NotQueued(session))?;
        let l = v.c[c as usize].lock();
        v.remove_claim(c);
        v.record(s, request, target, Recorded::Cancelled);
        v.grant_queue_head(l, out);
        v.evict_if_idle(l);
        Ok(Reply::Cancelled)
    }

    /// Watches `lock` for `session`: replies `Watching { holders }` and emits one
    /// [`Output::HolderChanged`] with change `Holding` per current holder, in grant order;
    /// from then on, every holder change of the lock (`Granted`, `Released`, `Closed`,
    /// `Expired`) reaches the watcher as a `HolderChanged`, in order, each right after the
    /// event that tells the holder (or where its reply is decided), watchers in the order
    /// they began watching. The watch ends by [`unwatch`](Self::unwatch), or by the
    /// watcher's close or expiry; no event reaches the watcher after that. A session may
    /// watch a lock it holds or waits for, and acquire a lock it watches. A watch takes a
    /// claim row (neither a hold nor a wait) and keeps the lock's entry alive.
    ///
    /// Errors: [`Error::TimeWentBackwards`], [`Error::BufferTooSmall`], then (after the
    /// advance) [`Error::UnknownSession`], name errors, request-number errors,
    /// [`Error::AlreadyWatching`], [`Error::CapacityExceeded`]`(Watchers)` (the lock
    /// has [`Config::max_watchers`] watchers already; always when it is 0), then
    /// `CapacityExceeded(Claims | Locks)`, in that order. Cost: the advance, then O(name
    /// length + holders of the lock) expected.
    pub fn watch(
        &mut self,
        now: Tick,
        session: SessionId,
        lock: &str,
        request: Option<u64>,
        out: &mut impl Sink,
    ) -> Result<Reply, Error> {
        self.advance(now, out)?;
        let mut v = self.view();
        let (s, target) = match v.begin(session, lock, request, Kind::Watch)? {
            Begin::Apply { s, target } => (s, target),
            Begin::Replay(recorded) => return Ok(recorded.reply()),
        };
        let hash = v.name_hash(lock);
        let l = v.lock_slot(lock, hash);
        let live = l.filter(|l| v.l[*l as usize].id != 0);
        if let Some(l) = live {
            if v.watch_slot(s, l).is_some() {
                return Err(Error::AlreadyWatching(session));
            }
        }
        let watchers = live.map_or(0, |l| v.watcher_count(l));
        if watchers >= v.st.config.max_watchers {
            return Err(Error::CapacityExceeded(Table::Watchers));
        }
        let Some(c) = v.st.claims.alloc(v.c) else {
            return Err(Error::CapacityExceeded(Table::Claims));
        };
        let l = v.take_lock(l, lock, hash, c)?;
        let seq = v.st.next_seq;
        v.st.next_seq += 1;
        v.insert_watch(c, s, l, seq);
        let holders = v.l[l as usize].holders.len;
        let mut h = v.l[l as usize].holders.head;
        while h != NIL {
            let claim = &v.c[h as usize];
            let holder = &v.s[claim.session() as usize];
            out.event(Output::HolderChanged {
                session,
                lock: v.l[l as usize].name.clone(),
                holder: SessionId(holder.id),
                mode: claim.mode(),
                token: Token(claim.value),
                change: Change::Holding,
                label: label_of(v.lb, holder),
            });
            h = claim.in_lock.next;
        }
        v.record(s, request, target, Recorded::Watching { holders });
        Ok(Reply::Watching { holders })
    }

    /// Ends `session`'s watch of `lock`. Replies `Unwatched`; no event reaches the watch
    /// after it.
    ///
    /// Errors: [`Error::TimeWentBackwards`], [`Error::BufferTooSmall`], then (after the
    /// advance) [`Error::UnknownSession`], name errors, request-number errors,
    /// [`Error::NotWatching`]. Cost: the advance, then O(name length) expected.
    pub fn unwatch(
        &mut self,
        now: Tick,
        session: SessionId,
        lock: &str,
        request: Option<u64>,
        out: &mut impl Sink,
    ) -> Result<Reply, Error> {
        self.advance(now, out)?;
        let mut v = self.view();
        let (s, target) = match v.begin(session, lock, request, Kind::Unwatch)? {
            Begin::Apply { s, target } => (s, target),
            Begin::Replay(recorded) => return Ok(recorded.reply()),
        };
        let c = v
            .lock_slot(lock, v.name_hash(lock))
            .filter(|l| v.l[*l as usize].id != 0)
            .and_then(|l| v.watch_slot(s, l))
            .ok_or(Error::NotWatching(session))?;
        let l = v.c[c as usize].lock();
        v.remove_claim(c);
        v.record(s, request, target, Recorded::Unwatched);
        v.evict_if_idle(l);
        Ok(Reply::Unwatched)
    }

    /// Advances time to `now` and does what has come due, in this order:
    /// 1. expire every session with `expires_at <= now` (earliest first, ties by id):
    ///    `SessionExpired`, its watches ended, then `Released` (reason `Expired`) per
    ///    hold, each followed by its lock's watchers' `HolderChanged`, starting
    ///    lock-delay on each;
    /// 2. time out every wait with `deadline <= now` (`WaitTimedOut`);
    /// 3. end lock-delays that are over;
    /// 4. grant the locks these freed to their live waiters, FIFO (`Granted`, each
    ///    followed by its watchers' `HolderChanged`).
    ///
    /// So expiry at a tick always comes before any grant at that tick: a session past its
    /// deadline is never granted. A tick equal to the current one is a no-op. Every other
    /// input does exactly this first, with the `now` it carries.
    ///
    /// Errors: [`Error::TimeWentBackwards`], [`Error::BufferTooSmall`] (nothing changed).
    /// Cost: O(1) with nothing due, else O(log n) per due deadline plus the events, and an
    /// expiring session's claims as [`close_session`](Self::close_session)'s (a timed
    /// wait dropped, a lock-delay begun: O(log n) each, with or without an event).
    pub fn tick(&mut self, now: Tick, out: &mut impl Sink) -> Result<(), Error> {
        self.advance(now, out)
    }

    /// The most events one input can emit now:
    ///
    /// `S + 2·H + (2·H + 1) · min(max_watchers, W)`
    ///
    /// where `S` is the open sessions, `H` the holds and waits and `W` the watches in use
    /// (so `H + W` is [`usage`](Self::usage)`().claims`). `S`: one `SessionExpired` per
    /// session. `2·H`: each hold or wait changes holder at most twice in one input (a wait
    /// granted by the advance and then released by a close, say), each change one event
    /// to its holder. Each holder change — those, plus the grant of an acquire's new claim
    /// (the `+ 1`) — reaches every watcher of its lock, at most `min(max_watchers, W)`.
    /// A watch's `Holding` events (one per holder of its lock, at most `H`) come after an
    /// advance that changes each hold or wait at most once, so they fit in the second `H`.
    /// With no watches in use (`W = 0`) it is `S + 2·H`, as before watches existed.
    ///
    /// A bounded [`Sink`] must have this much room, or the input is refused with
    /// [`Error::BufferTooSmall`]; sizing it for the same formula at capacity (`S` =
    /// sessions, `H` = claims, `W` = claims: [`Capacity::max_events`]) is always enough,
    /// and without watches `capacity().sessions + 2 × capacity().claims` is. Saturates at
    /// `usize::MAX`.
    /// Errors: none. Cost: O(1).
    pub fn max_events(&self) -> usize {
        let watches = self.st.watches as u64;
        clamp(event_bound(
            self.st.sessions.len as u64,
            self.st.claims.len as u64 - watches,
            watches,
            self.st.config.max_watchers,
        ))
    }

    /// The shared first step of every input: refuse a `now` in the past or a sink too
    /// small for [`max_events`](Self::max_events) (nothing changes), then advance. Called
    /// once per input: the room it checked covers the advance and the input together.
    #[inline(always)]
    pub(crate) fn advance(&mut self, now: Tick, out: &mut impl Sink) -> Result<(), Error> {
        if now.0 < self.st.now {
            return Err(Error::TimeWentBackwards {
                now: Tick(self.st.now),
                requested: now,
            });
        }
        // An unbounded sink (room usize::MAX) can take any bound, so the bound is only
        // worked out for a bounded one: a sink whose room is not a constant (an enum of
        // both kinds, as the C ABI's queue) does not pay for it on every input.
        let room = out.room();
        if room != usize::MAX {
            let need = self.max_events();
            if room < need {
                return Err(Error::BufferTooSmall {
                    need: u32::try_from(need).unwrap_or(u32::MAX),
                });
            }
        }
        if now.0 == self.st.now {
            // Everything due at or before the current tick was done when time reached it,
            // and nothing an input schedules is due at the tick it is applied.
            return Ok(());
        }
        self.advance_to(now, out);
        Ok(())
    }

    /// [`advance`](Self::advance) once its checks passed and `now` is later.
    fn advance_to(&mut self, now: Tick, out: &mut impl Sink) {
        let mut v = self.view();
        v.st.now = now.0;
        // A deliberately broken order for the verification suite only; `false` (and gone)
        // without the test-only feature.
        #[cfg(feature = "fault-injection")]
        let broken = v.st.fault_expiry_after_grants;
        #[cfg(not(feature = "fault-injection"))]
        let broken = false;
        if !broken {
            v.expire_due(now.0, out);
        }
        while let Some(c) = v.st.claims.earliest(v.c) {
            if v.c[c as usize].value > now.0 {
                break;
            }
            let claim = &v.c[c as usize];
            let (session, l) = (SessionId(v.s[claim.session() as usize].id), claim.lock());
            let lock = v.l[l as usize].name.clone();
            v.remove_claim(c);
            out.event(Output::WaitTimedOut { session, lock });
            v.mark_dirty(l);
        }
        while let Some(l) = v.st.locks.earliest(v.l) {
            if v.l[l as usize].in_delay(now.0) {
                break;
            }
            v.st.locks.unschedule(v.l, l);
            // Canonical state: a lock-delay that is over is no lock-delay at all.
            v.l[l as usize].delay_until = 0;
            v.mark_dirty(l);
        }
        v.grant_dirty(out);
        if broken {
            v.expire_due(now.0, out);
            v.grant_dirty(out);
        }
    }
    /// TEST ONLY — exists only with the non-default feature `fault-injection`, which no
    /// shipped crate enables. `true` makes [`tick`](Self::tick) grant freed locks *before*
    /// expiring the sessions that are due (the lease-expiry race etcd once had), so the verification suite
    /// (`tests/`) can prove that its simulation and invariant checks catch a broken core.
    /// Never use it otherwise. Cost: O(1).
    #[cfg(feature = "fault-injection")]
    #[doc(hidden)]
    pub fn inject_fault_expiry_after_grants(&mut self, on: bool) {
        self.st.fault_expiry_after_grants = on;
    }

    /// TEST ONLY — exists only with the non-default feature `fault-injection`, which no
    /// shipped crate enables. `true` makes a grant reuse the latest token instead of a
    /// fresh, higher one (a revision that fails to rise), so the verification suite
    /// (`tests/`) can prove that its checks catch a core whose tokens do not rise. Never
    /// use it otherwise. Cost: O(1).
    #[cfg(feature = "fault-injection")]
    #[doc(hidden)]
    pub fn inject_fault_reuse_token(&mut self, on: bool) {
        self.st.fault_reuse_token = on;
    }

    /// For a repeat of `session`'s latest numbered request: `Some(true)` if it was
    /// answered by a release, `Some(false)` by a cancel, else `None`.
    pub(crate) fn recorded_release_or_cancel(
        &self,
        session: SessionId,
        request: Option<u64>,
    ) -> Option<bool> {
        let t = self.storage.tables_ref();
        let row = &t.sessions[self.session_row(session)? as usize];
        if request != Some(row.last_request) {
            return None;
        }
        match row.last_reply() {
            Recorded::Released { .. } => Some(true),
            Recorded::Cancelled => Some(false),
            _ => None,
        }
    }

    // ----------------------------------------------------------------- getters

    /// The current tick. Errors: none. Cost: O(1).
    pub fn now(&self) -> Tick {
        Tick(self.st.now)
    }

    /// The next tick at which something is due (a session deadline, a wait deadline or
    /// the end of a lock-delay), or `None` if nothing is scheduled. Errors: none. Cost:
    /// O(1).
    pub fn poll_timeout(&self) -> Option<Tick> {
        let t = self.storage.tables_ref();
        let a = self
            .st
            .sessions
            .earliest(t.sessions)
            .map(|s| t.sessions[s as usize].expires_at);
        let b = self
            .st
            .claims
            .earliest(t.claims)
            .map(|c| t.claims[c as usize].value);
        let c = self
            .st
            .locks
            .earliest(t.locks)
            .map(|l| t.locks[l as usize].delay_until);
        [a, b, c].into_iter().flatten().min().map(Tick)
    }

    /// The configuration. Errors: none. Cost: O(1).
    pub fn config(&self) -> Config {
        self.st.config
    }

    /// The highest token granted so far (0 before the first grant). The next grant gets a
    /// higher one. Errors: none. Cost: O(1).
    pub fn revision(&self) -> u64 {
        self.st.revision
    }

    /// Raises the fencing revision to at least `floor`, so that the next grant's token is
    /// above `floor` (and above every token granted before); a lower `floor` changes
    /// nothing. For recovering a service whose replicas were lost: tokens may have been
    /// granted that this copy of the state never saw, and no token may be handed out twice.
    /// Nothing else changes (sessions, holds and queues keep their tokens). Returns the
    /// revision now.
    ///
    /// Errors: [`Error::BadConfig`] for a `floor` above [`MAX_REVISION_FLOOR`] (2^62);
    /// nothing changes then. Cost: O(1).
    pub fn raise_revision(&mut self, floor: u64) -> Result<u64, Error> {
        if floor > MAX_REVISION_FLOOR {
            return Err(Error::BadConfig("revision floor above 2^62"));
        }
        self.st.revision = self.st.revision.max(floor);
        Ok(self.st.revision)
    }

    /// The limit a heap event queue of this service starts with (an `EventQueue`'s, or a
    /// binding's that keeps events until its host takes them): [`EventLimit::new`] of the
    /// most events one input can emit at capacity, [`Capacity::max_events`] for the
    /// config's `max_watchers`. Errors: none. Cost: O(1).
    ///
    /// [`EventLimit::new`]: crate::EventLimit::new
    pub fn default_event_limit(&self) -> crate::EventLimit {
        crate::EventLimit::of_bound(self.capacity().max_events_u64(self.st.config.max_watchers))
    }

    /// Table capacities. Errors: none. Cost: O(1).
    pub fn capacity(&self) -> Capacity {
        let t = self.storage.tables_ref();
        Capacity {
            sessions: t.sessions.len() as u32,
            locks: t.locks.len() as u32,
            claims: t.claims.len() as u32,
        }
    }

    /// Rows in use per table (open sessions, live lock entries, holds + waits + watches).
    /// Errors: none. Cost: O(1).
    pub fn usage(&self) -> Usage {
        Usage {
            sessions: self.st.sessions.len,
            locks: self.st.lock_order.len,
            claims: self.st.claims.len,
        }
    }

    /// Watches in use (of [`usage`](Self::usage)`().claims`, which counts them with the
    /// holds and waits). Errors: none. Cost: O(1).
    pub fn watches(&self) -> u32 {
        self.st.watches
    }

    /// True when no session is open. Errors: none. Cost: O(1).
    pub fn is_empty(&self) -> bool {
        self.st.sessions.len == 0
    }

    /// True when `session` is open. The check to use when only that matters:
    /// [`session`](Self::session) also counts the session's holds, waits and watches.
    /// Cost: O(1) expected (the session's home row, else one index probe). Errors: none.
    pub fn is_open(&self, session: SessionId) -> bool {
        self.session_row(session).is_some()
    }

    /// A live session's state, `None` if it is not open. Errors: none. Cost: O(1)
    /// expected plus O(its claims: holds, waits and watches) to count them.
    pub fn session(&self, session: SessionId) -> Option<SessionInfo> {
        let t = self.storage.tables_ref();
        let s = self.session_row(session)?;
        let row = &t.sessions[s as usize];
        let (mut holds, mut waits, mut watches) = (0, 0, 0);
        let mut c = row.claims.head;
        while c != NIL {
            let claim = &t.claims[c as usize];
            if claim.holding() {
                holds += 1;
            } else if claim.watching() {
                watches += 1;
            } else {
                waits += 1;
            }
            c = t.claims[c as usize].in_session.next;
        }
        Some(SessionInfo {
            id: session,
            ttl: row.ttl(&self.st.classes),
            expires_at: Tick(row.expires_at),
            holds,
            waits,
            watches,
            last_request: row.last_request,
            label: label_of(self.storage.labels_ref(), row),
        })
    }

    /// Open sessions, in id order. Errors: none. Cost: O(1) per item.
    pub fn sessions(&self) -> impl Iterator<Item = SessionId> + '_ {
        let rows = self.storage.tables_ref().sessions;
        walk(rows, self.st.session_order.head, |r: &SessionRow| {
            r.order.next
        })
        .map(|s| SessionId(rows[s as usize].id))
    }

    /// Lock entries (held, awaited, watched or in lock-delay), in creation order. Idle locks are
    /// evicted, so a lock nobody uses is not listed. Errors: none. Cost: O(1) per item.
    pub fn locks(&self) -> impl Iterator<Item = &LockName> + '_ {
        let rows = self.storage.tables_ref().locks;
        walk(rows, self.st.lock_order.head, |r: &LockRow| r.order.next)
            .map(|l| &rows[l as usize].name)
    }

    /// The holders of `lock` in grant order (empty if free or unknown). Errors: none.
    /// Cost: O(name
    /// length) + O(1) per item.
    pub fn holders(&self, lock: &str) -> impl Iterator<Item = Holder> + '_ {
        self.claims_of(lock, true).map(|(t, c)| {
            let claim = &t.claims[c as usize];
            let session = &t.sessions[claim.session() as usize];
            Holder {
                session: SessionId(session.id),
                mode: claim.mode(),
                token: Token(claim.value),
                label: label_of(self.storage.labels_ref(), session),
            }
        })
    }

    /// `session`'s hold of `lock` (its mode, token and label), `None` when it holds none:
    /// it waits for the lock or only watches it, the lock is not live, or the session is
    /// not open. What a client that holds a lock asks to learn whether its hold still
    /// stands, without reading every holder of a semaphore. Errors: none. Cost: O(name
    /// length) + O(1) expected.
    pub fn hold(&self, session: SessionId, lock: &str) -> Option<Holder> {
        let t = self.storage.tables_ref();
        let key = self.st.name_key.as_ref();
        let s = self.session_row(session)?;
        let l = find_lock(t.lock_index, t.locks, key, lock)?;
        let c = claim_slot(t.locks, t.claims, t.claim_index, key, s, l)?;
        let claim = &t.claims[c as usize];
        claim.holding().then(|| Holder {
            session,
            mode: claim.mode(),
            token: Token(claim.value),
            label: label_of(self.storage.labels_ref(), &t.sessions[s as usize]),
        })
    }

    /// The queue of `lock`, head first. Errors: none. Cost: O(name length) + O(1) per item.
    pub fn waiters(&self, lock: &str) -> impl Iterator<Item = Waiter> + '_ {
        self.claims_of(lock, false).map(|(t, c)| {
            let claim = &t.claims[c as usize];
            let session = &t.sessions[claim.session() as usize];
            Waiter {
                session: SessionId(session.id),
                mode: claim.mode(),
                deadline: (claim.value != u64::MAX).then_some(Tick(claim.value)),
                label: label_of(self.storage.labels_ref(), session),
            }
        })
    }

    /// The permits of `lock` while it is a live semaphore (held or awaited in
    /// [`Mode::Permits`]); `None` otherwise (free, unknown, or a plain lock).
    /// Errors: none. Cost: O(name length) expected.
    pub fn permits(&self, lock: &str) -> Option<Permits> {
        let t = self.storage.tables_ref();
        let l = find_lock(t.lock_index, t.locks, self.st.name_key.as_ref(), lock)?;
        let row = &t.locks[l as usize];
        let any = if row.holders.head != NIL {
            row.holders.head
        } else {
            row.waiters.head
        };
        if any == NIL {
            return None;
        }
        match t.claims[any as usize].mode() {
            Mode::Permits { limit, .. } => Some(Permits {
                in_use: row.in_use,
                limit,
            }),
            Mode::Exclusive | Mode::Shared => None,
        }
    }

    /// The tick before which `lock` will not be granted because of lock-delay, if that is
    /// in the future. Errors: none. Cost: O(name length).
    pub fn lock_delay_until(&self, lock: &str) -> Option<Tick> {
        let t = self.storage.tables_ref();
        let l = find_lock(t.lock_index, t.locks, self.st.name_key.as_ref(), lock)?;
        let row = &t.locks[l as usize];
        row.in_delay(self.st.now).then_some(Tick(row.delay_until))
    }

    fn claims_of(
        &self,
        lock: &str,
        holders: bool,
    ) -> impl Iterator<Item = (crate::storage::TablesRef<'_>, u32)> + '_ {
        let t = self.storage.tables_ref();
        let head = match find_lock(t.lock_index, t.locks, self.st.name_key.as_ref(), lock) {
            Some(l) if holders => t.locks[l as usize].holders.head,
            Some(l) => t.locks[l as usize].waiters.head,
            None => NIL,
        };
        walk(t.claims, head, |r: &ClaimRow| r.in_lock.next).map(move |c| (t, c))
    }
}

/// The holder label of a session row (empty when it has none). Cost: O(1).
pub(crate) fn label_of(labels: &[LabelRow], row: &SessionRow) -> Label {
    // `get`: a `Storage` whose `labels_ref` breaks its contract (a shorter table than
    // `tables_and_labels` gave) shows no label instead of panicking.
    match labels.get(row.label as usize) {
        Some(r) if row.label != NIL => r.label,
        _ => Label::EMPTY,
    }
}

fn walk<T>(rows: &[T], head: u32, next: fn(&T) -> u32) -> impl Iterator<Item = u32> + '_ {
    let mut cur = head;
    core::iter::from_fn(move || {
        if cur == NIL {
            return None;
        }
        let here = cur;
        cur = next(&rows[here as usize]);
        Some(here)
    })
}

/// FNV-1a's 64-bit prime ([`fnv1a`]), with which the request fingerprints go on past the
/// name.
const PRIME: u64 = 0x0000_0100_0000_01b3;

/// The fingerprint of a numbered request's arguments: FNV-1a over the lock name, then one
/// byte for the mode (0xFE/0xFF never occur in UTF-8, so no name can imitate it). 0 for an
/// unnumbered request, which records nothing and is never compared. It is 64 bits, not
/// the arguments: a client that searched out two names with one fingerprint (about 2^32
/// tries) could have a reused number taken as a retry on the other name. Only its own
/// session's answers are affected (docs/SPEC.md §6).
// The small lookup helpers are forced inline (measured: without it, a C library built
// with LTO called them out of line from every entry point, ~150 instructions an acquire +
// release), except on wasm, a size build, where inlining them cost 3 KB.
#[cfg_attr(not(target_family = "wasm"), inline(always))]
fn target(name: &str, mode: Option<Mode>, request: Option<u64>) -> u64 {
    if request.is_none() {
        return 0;
    }
    let mut h = fnv1a(name.as_bytes());
    if let Some(mode) = mode {
        h ^= match mode {
            Mode::Exclusive => 0xFE,
            Mode::Shared => 0xFF,
            Mode::Permits { .. } => 0xFD,
        };
        h = h.wrapping_mul(PRIME);
        if let Mode::Permits { count, limit } = mode {
            for b in count.to_le_bytes().into_iter().chain(limit.to_le_bytes()) {
                h = (h ^ b as u64).wrapping_mul(PRIME);
            }
        }
    }
    h
}

/// The fingerprint of a numbered `release_hold`: [`target`]'s of the name, then a byte
/// no UTF-8 name or mode byte is (0xFC), then the token's eight bytes, so it differs from
/// a plain release of the same lock and from a release of another hold.
fn hold_target(name: &str, token: u64, request: Option<u64>) -> u64 {
    if request.is_none() {
        return 0;
    }
    let mut h = (target(name, None, request) ^ 0xFC).wrapping_mul(PRIME);
    for b in token.to_le_bytes() {
        h = (h ^ b as u64).wrapping_mul(PRIME);
    }
    h
}

/// The recorded reply of a granted acquire in `mode`.
fn granted(mode: Mode, token: u64) -> Recorded {
    match mode {
        Mode::Permits { .. } => Recorded::GrantedPermits { token },
        Mode::Exclusive | Mode::Shared => Recorded::Granted { mode, token },
    }
}

/// The recorded reply of a queued acquire in `mode`.
fn queued(mode: Mode, position: u32) -> Recorded {
    match mode {
        Mode::Permits { .. } => Recorded::QueuedPermits { position },
        Mode::Exclusive | Mode::Shared => Recorded::Queued { mode, position },
    }
}

/// The live session `id`: at its home row (see [`home_row`]), where a session usually
/// is, without reading the index; else through the index, which holds exactly the
/// sessions away from their home rows. Cost: O(1) expected.
#[cfg_attr(not(target_family = "wasm"), inline(always))]
pub(crate) fn find_session(
    index: &[Bucket],
    rows: &[SessionRow],
    key: Option<&NameKey>,
    id: u64,
) -> Option<u32> {
    if id == 0 {
        return None; // the id of a free row
    }
    let home = home_row(id, rows.len())?;
    if rows[home as usize].id == id {
        return Some(home);
    }
    TableState::find(index, rows, session_hash(key, id), |r| r.id == id)
}

/// The home row of session `id`, the row it takes at open when that row is free:
/// (id − 1) mod rows. A session there is found with one load and one compare; one
/// elsewhere, through the index (see the Cost section of [`LockService`]). `None` for a
/// table with no rows. Cost: O(1) (one division; a 32-bit one while the id fits, as on
/// a 32-bit target a 64-bit division is a library call).
#[cfg_attr(not(target_family = "wasm"), inline(always))]
pub(crate) fn home_row(id: u64, rows: usize) -> Option<u32> {
    // A table has fewer than 2³¹ rows.
    let n = u32::try_from(rows).ok().filter(|n| *n != 0)?;
    let i = id.wrapping_sub(1);
    Some(match u32::try_from(i) {
        Ok(i) if i < n => i,
        Ok(i) => i % n,
        Err(_) => (i % n as u64) as u32,
    })
}

/// A free session row's predecessor in the free list: its id-order links are unused
/// while it is free.
pub(crate) fn free_prev(s: &mut SessionRow) -> &mut u32 {
    &mut s.order.prev
}

pub(crate) fn find_lock(
    index: &[TaggedBucket],
    rows: &[LockRow],
    key: Option<&NameKey>,
    name: &str,
) -> Option<u32> {
    TableState::find(index, rows, keyed_name_hash(key, name.as_bytes()), |r| {
        r.id != 0 && r.name.is(name)
    })
}

/// The hold or wait of session row `s` on lock row `l` (not a watch). A lock's only claim
/// is found from the lock row; the claim index holds only the claims of locks with two or
/// more (see [`View::insert_claim`]). Cost: O(1) expected. Inlined on every target, wasm
/// included: [`View::claim_slot`] is its one caller on the inputs' path, and a call
/// between the two would only add code.
#[inline(always)]
pub(crate) fn claim_slot(
    locks: &[LockRow],
    claims: &[ClaimRow],
    index: &[Bucket],
    key: Option<&NameKey>,
    s: u32,
    l: u32,
) -> Option<u32> {
    let lock = &locks[l as usize];
    match lock.holders.len + lock.waiters.len {
        0 => None,
        1 => {
            let only = lock.only_claim();
            (claims[only as usize].session() == s).then_some(only)
        }
        _ => TableState::find(index, claims, claim_hash(key, s, l), |r| {
            r.session() == s && r.lock() == l && !r.watching()
        }),
    }
}

pub(crate) fn in_lock(c: &mut ClaimRow) -> &mut Link {
    &mut c.in_lock
}
pub(crate) fn in_session(c: &mut ClaimRow) -> &mut Link {
    &mut c.in_session
}
pub(crate) fn claim_order(c: &mut ClaimRow) -> &mut Link {
    &mut c.order
}
pub(crate) fn session_order(s: &mut SessionRow) -> &mut Link {
    &mut s.order
}
pub(crate) fn lock_order(l: &mut LockRow) -> &mut Link {
    &mut l.order
}

/// The mutable working view of one input: the three tables, their hash indexes, the label
/// rows and the counters.
pub(crate) struct View<'a> {
    pub(crate) s: &'a mut [SessionRow],
    pub(crate) si: &'a mut [Bucket],
    pub(crate) l: &'a mut [LockRow],
    pub(crate) li: &'a mut [TaggedBucket],
    pub(crate) c: &'a mut [ClaimRow],
    pub(crate) ci: &'a mut [Bucket],
    pub(crate) lb: &'a mut [LabelRow],
    pub(crate) st: &'a mut State,
}

impl View<'_> {
    /// The lock index's hash of `name`: keyed when the service has a [`NameKey`].
    #[cfg_attr(not(target_family = "wasm"), inline(always))]
    pub(crate) fn name_hash(&self, name: &str) -> u64 {
        keyed_name_hash(self.st.name_key.as_ref(), name.as_bytes())
    }

    /// Empties the three indexes and indexes again every row each held, under the
    /// current key: the live locks and the idle ones (the two lists through `order`), the
    /// sessions away from their home rows, the watches and the holds and waits of locks
    /// with two or more. Cost: O(capacity of the three tables).
    fn rebuild_indexes(&mut self) {
        use crate::table::BucketArray;
        for b in 0..self.li.buckets() {
            self.li.set_bucket(b, NIL, 0);
        }
        for b in 0..self.si.buckets() {
            self.si.set_bucket(b, NIL, 0);
        }
        for b in 0..self.ci.buckets() {
            self.ci.set_bucket(b, NIL, 0);
        }
        let mut s = self.st.session_order.head;
        while s != NIL {
            let id = self.s[s as usize].id;
            if home_row(id, self.s.len()) != Some(s) {
                let hash = session_hash(self.key(), id);
                TableState::index_insert(self.si, s, hash);
            }
            s = self.s[s as usize].order.next;
        }
        let mut c = self.st.claim_order.head;
        while c != NIL {
            let row = &self.c[c as usize];
            let lock = &self.l[row.lock() as usize];
            if row.watching() || lock.holders.len + lock.waiters.len >= 2 {
                let hash = row.key_hash(self.key());
                TableState::index_insert(self.ci, c, hash);
            }
            c = row.order.next;
        }
        for head in [self.st.lock_order.head, self.st.idle_locks.head] {
            let mut l = head;
            while l != NIL {
                let hash = self.name_hash(self.l[l as usize].name.as_str());
                TableState::index_insert(self.li, l, hash);
                l = self.l[l as usize].order.next;
            }
        }
    }

    /// The key the indexes hash under ([`LockService::set_name_key`]), if any. Cost: O(1).
    #[cfg_attr(not(target_family = "wasm"), inline(always))]
    pub(crate) fn key(&self) -> Option<&NameKey> {
        self.st.name_key.as_ref()
    }

    #[cfg_attr(not(target_family = "wasm"), inline(always))]
    fn session_slot(&self, session: SessionId) -> Result<u32, Error> {
        find_session(self.si, self.s, self.st.name_key.as_ref(), session.0)
            .ok_or(Error::UnknownSession(session))
    }

    /// The row named `name`, whose [`View::name_hash`] is `hash`: a live lock, or an idle
    /// row still indexed under the name (`id` 0; see `storage`), which each caller tells
    /// apart.
    #[cfg_attr(not(target_family = "wasm"), inline(always))]
    fn lock_slot(&self, name: &str, hash: u64) -> Option<u32> {
        TableState::find(self.li, self.l, hash, |r| r.name.is(name))
    }

    /// The claim of session `s` on lock `l` ([`claim_slot`]). Cost: O(1) expected.
    #[cfg_attr(not(target_family = "wasm"), inline(always))]
    pub(crate) fn claim_slot(&self, s: u32, l: u32) -> Option<u32> {
        claim_slot(self.l, self.c, self.ci, self.key(), s, l)
    }

    /// How many sessions watch lock `l`. Cost: O(1).
    pub(crate) fn watcher_count(&self, l: u32) -> u32 {
        match self.l[l as usize].watchers {
            NIL => 0,
            head => self.c[head as usize].watch_meta().0,
        }
    }

    /// The watch of session `s` on lock `l` (always indexed, under [`watch_hash`]).
    /// Cost: O(1) expected.
    pub(crate) fn watch_slot(&self, s: u32, l: u32) -> Option<u32> {
        if self.l[l as usize].watchers == NIL {
            return None;
        }
        TableState::find(self.ci, self.c, watch_hash(self.key(), s, l), |r| {
            r.session() == s && r.lock() == l && r.watching()
        })
    }

    /// The limit every hold and wait of lock `l` carries: `Some(limit)` of a live
    /// semaphore, `Some(0)` of a plain lock held or awaited, `None` with no hold or wait.
    #[cfg_attr(not(target_family = "wasm"), inline(always))]
    pub(crate) fn live_limit(&self, l: u32) -> Option<u32> {
        let lock = &self.l[l as usize];
        let any = if lock.holders.head != NIL {
            lock.holders.head
        } else {
            lock.waiters.head
        };
        if any == NIL {
            return None;
        }
        Some(match self.c[any as usize].mode() {
            Mode::Permits { limit, .. } => limit,
            Mode::Exclusive | Mode::Shared => 0,
        })
    }

    /// The mode of lock `l`'s holders (all hold it in one mode kind), `None` if unheld.
    #[cfg_attr(not(target_family = "wasm"), inline(always))]
    pub(crate) fn holder_mode(&self, l: u32) -> Option<Mode> {
        let head = self.l[l as usize].holders.head;
        (head != NIL).then(|| self.c[head as usize].mode())
    }

    /// Whether a claim in `mode` fits lock `l`'s holders now (lock-delay and the queue
    /// aside): an unheld lock, shared beside shared, permits within the limit.
    #[cfg_attr(not(target_family = "wasm"), inline(always))]
    pub(crate) fn fits(&self, l: u32, mode: Mode) -> bool {
        match mode {
            Mode::Permits { count, limit } => {
                u64::from(self.l[l as usize].in_use) + u64::from(count) <= u64::from(limit)
            }
            Mode::Shared => matches!(self.holder_mode(l), None | Some(Mode::Shared)),
            Mode::Exclusive => self.holder_mode(l).is_none(),
        }
    }

    /// Tells every watcher of lock `l`, in watch order, that holder session `s` (mode,
    /// token) changed. O(1) with no watchers, else O(1) per watcher.
    // Inline, so the common case (no watchers) is one load and a branch at the call site
    // instead of a call that saves and restores registers (measured: ~50 instructions an
    // uncontended acquire + release).
    #[cfg_attr(not(target_family = "wasm"), inline(always))]
    fn tell_watchers(
        &self,
        l: u32,
        s: u32,
        mode: Mode,
        token: u64,
        change: Change,
        out: &mut impl Sink,
    ) {
        if self.l[l as usize].watchers != NIL {
            self.tell_each_watcher(l, s, mode, token, change, out);
        }
    }

    /// [`tell_watchers`](Self::tell_watchers) for a lock with at least one watcher.
    #[inline(never)]
    fn tell_each_watcher(
        &self,
        l: u32,
        s: u32,
        mode: Mode,
        token: u64,
        change: Change,
        out: &mut impl Sink,
    ) {
        let lock = &self.l[l as usize];
        let mut w = lock.watchers;
        let holder = &self.s[s as usize];
        while w != NIL {
            let watch = &self.c[w as usize];
            out.event(Output::HolderChanged {
                session: SessionId(self.s[watch.session() as usize].id),
                lock: lock.name.clone(),
                holder: SessionId(holder.id),
                mode,
                token: Token(token),
                change,
                label: label_of(self.lb, holder),
            });
            w = watch.in_lock.next;
        }
    }

    /// The live entry for lock `name` (hash `hash`) found as `l` by
    /// [`lock_slot`](Self::lock_slot), made live if idle or created if absent. On
    /// [`Error::CapacityExceeded`]`(Locks)` claim row `c`, just taken, is given back, so
    /// nothing changed.
    fn take_lock(&mut self, l: Option<u32>, name: &str, hash: u64, c: u32) -> Result<u32, Error> {
        Ok(match l {
            Some(l) if self.l[l as usize].id != 0 => l,
            Some(l) => {
                // Idle since its last use: a new entry in the same row, name and index.
                self.st.idle_locks.remove(self.l, l, lock_order);
                let id = self.st.next_lock;
                self.st.next_lock += 1;
                self.l[l as usize].id = id;
                self.st.lock_order.push_back(self.l, l, lock_order);
                l
            }
            None => {
                // Cannot fail: `check_name` allowed at most `max_name_len` ≤ 64 bytes.
                let name = match LockName::new(name) {
                    Ok(name) => name,
                    Err(e) => {
                        self.st.claims.release(self.c, c);
                        return Err(e);
                    }
                };
                let slot = match self.st.locks.alloc(self.l) {
                    Some(slot) => slot,
                    // A full table may still hold idle rows: the oldest goes.
                    None if self.st.idle_locks.head != NIL => {
                        let slot = self.st.idle_locks.head;
                        self.st.idle_locks.remove(self.l, slot, lock_order);
                        let old = self.name_hash(self.l[slot as usize].name.as_str());
                        let key = self.st.name_key;
                        TableState::index_remove_hashed(self.li, self.l, slot, old, key.as_ref());
                        slot
                    }
                    None => {
                        self.st.claims.release(self.c, c);
                        return Err(Error::CapacityExceeded(Table::Locks));
                    }
                };
                let id = self.st.next_lock;
                self.st.next_lock += 1;
                self.insert_lock(slot, name, hash, id);
                slot
            }
        })
    }

    /// The answer to a repeat of an acquire whose recorded reply is `recorded`, from the
    /// session's claim on the lock now (see [`LockService::acquire`]). Applies nothing.
    /// Cost: O(log claims), plus O(queue length) when the session is queued.
    fn replay_acquire(&self, s: u32, lock: &str, hash: u64, recorded: Recorded) -> Reply {
        let claim = self
            .lock_slot(lock, hash)
            .and_then(|l| self.claim_slot(s, l).map(|c| (l, c)));
        if let Some((l, c)) = claim {
            let row = &self.c[c as usize];
            if row.holding() {
                return Reply::Granted {
                    mode: row.mode(),
                    token: Token(row.value),
                };
            }
            let mut position = 1u32;
            let mut cur = self.l[l as usize].waiters.head;
            while cur != c && cur != NIL {
                position += 1;
                cur = self.c[cur as usize].in_lock.next;
            }
            return Reply::Queued {
                mode: row.mode(),
                position,
            };
        }
        match recorded {
            Recorded::Granted { token, .. } | Recorded::GrantedPermits { token } => {
                Reply::HoldEnded {
                    token: Token(token),
                }
            }
            Recorded::Queued { .. } | Recorded::QueuedPermits { .. } => Reply::WaitEnded,
            _ => Reply::Busy,
        }
    }

    /// The first steps of an input on a named lock other than an acquire (release,
    /// cancel, watch, unwatch), in the order their errors take precedence: the session
    /// (`UnknownSession`), the name (`EmptyName`, `NameTooLong`), the request number
    /// (`StaleRequest`, `RequestReused`). Then either the session's row and the request's
    /// fingerprint, to apply it, or the recorded reply of a repeat. Cost: O(name length).
    #[cfg_attr(not(target_family = "wasm"), inline(always))]
    fn begin(
        &self,
        session: SessionId,
        lock: &str,
        request: Option<u64>,
        kind: Kind,
    ) -> Result<Begin, Error> {
        self.begin_as(session, lock, request, kind, None)
    }

    /// [`begin`](Self::begin), for a `release_hold` of the hold of token `hold` when
    /// given: a release (so its repeat replays the recorded `Released`) whose fingerprint
    /// also covers the token ([`hold_target`]).
    #[cfg_attr(not(target_family = "wasm"), inline(always))]
    fn begin_as(
        &self,
        session: SessionId,
        lock: &str,
        request: Option<u64>,
        kind: Kind,
        hold: Option<u64>,
    ) -> Result<Begin, Error> {
        let s = self.session_slot(session)?;
        self.check_name(lock)?;
        let target = match hold {
            None => target(lock, None, request),
            Some(token) => hold_target(lock, token, request),
        };
        Ok(match self.check_request(s, request, kind, target)? {
            Some(recorded) => Begin::Replay(recorded),
            None => Begin::Apply { s, target },
        })
    }

    #[cfg_attr(not(target_family = "wasm"), inline(always))]
    fn check_name(&self, name: &str) -> Result<(), Error> {
        self.st.config.check_name(name)
    }

    /// `Some(reply)` for a repeat of the latest request (replay it), `None` to apply.
    #[cfg_attr(not(target_family = "wasm"), inline(always))]
    fn check_request(
        &self,
        s: u32,
        request: Option<u64>,
        kind: Kind,
        target: u64,
    ) -> Result<Option<Recorded>, Error> {
        let Some(n) = request else { return Ok(None) };
        let row = &self.s[s as usize];
        if n < row.last_request {
            return Err(Error::StaleRequest {
                request: n,
                latest: row.last_request,
            });
        }
        if n > row.last_request {
            return Ok(None);
        }
        let last_reply = row.last_reply();
        let recorded = match last_reply {
            Recorded::None => return Ok(None),
            Recorded::KeptAlive { .. } => Kind::KeepAlive,
            Recorded::Granted { .. }
            | Recorded::Queued { .. }
            | Recorded::Busy
            | Recorded::GrantedPermits { .. }
            | Recorded::QueuedPermits { .. } => Kind::Acquire,
            Recorded::Released { .. } => Kind::Release,
            Recorded::Cancelled => Kind::Cancel,
            Recorded::Watching { .. } => Kind::Watch,
            Recorded::Unwatched => Kind::Unwatch,
        };
        // Close records nothing (the session is gone), so it never matches. The same number
        // for another lock or mode is a different request, not a retry.
        if recorded != kind || row.last_target != target {
            return Err(Error::RequestReused { request: n });
        }
        Ok(Some(last_reply))
    }

    #[cfg_attr(not(target_family = "wasm"), inline)]
    fn record(&mut self, s: u32, request: Option<u64>, target: u64, reply: Recorded) {
        if let Some(n) = request {
            let row = &mut self.s[s as usize];
            row.last_request = n;
            row.set_last_reply(reply);
            row.last_target = target;
        }
    }

    /// Takes a row for new session `id`: its home row ([`home_row`]) if that is free,
    /// else the free list's first. `None` when the table is full. Cost: O(1).
    pub(crate) fn alloc_session(&mut self, id: u64) -> Option<u32> {
        let home = home_row(id, self.s.len())?;
        if self.s[home as usize].id == 0 {
            self.st.sessions.alloc_at(self.s, home, free_prev);
            return Some(home);
        }
        self.st.sessions.alloc_linked(self.s, free_prev)
    }

    pub(crate) fn insert_session(&mut self, slot: u32, id: u64, ttl: u64, expires_at: u64) {
        let row = &mut self.s[slot as usize];
        row.id = id;
        row.set_ttl(ttl);
        row.expires_at = expires_at;
        row.last_request = 0;
        row.set_last_reply(Recorded::None);
        row.last_target = 0;
        row.label = NIL;
        row.claims = Chain::EMPTY;
        // Only a session away from its home row is indexed (see `find_session`).
        if home_row(id, self.s.len()) != Some(slot) {
            let hash = session_hash(self.key(), id);
            TableState::index_insert(self.si, slot, hash);
        }
        self.st.session_order.push_back(self.s, slot, session_order);
    }

    /// Gives session `s` (which has none) its holder label: a label-table row unless it
    /// is empty.
    ///
    /// Errors: [`Error::CapacityExceeded`] of [`Table::Labels`] when no row is free (the
    /// session is then unlabelled). Cost: O(1).
    pub(crate) fn set_label(&mut self, s: u32, label: Label) -> Result<(), Error> {
        if label.is_empty() {
            return Ok(());
        }
        let row = self.st.labels.alloc(self.lb, label);
        self.s[s as usize].label = row.ok_or(Error::CapacityExceeded(Table::Labels))?;
        Ok(())
    }

    /// Schedules session `s` (scheduled nowhere yet) by its `expires_at`. With `join`, it
    /// joins the class of its ttl — claiming a free class if none has it — at the tail,
    /// which keeps the class in deadline order only because `expires_at` is now + ttl,
    /// never earlier than any member's (open, keep-alive; a restore schedules every
    /// session on its own). Cost: O(1) in a class that has members, else O(log n).
    pub(crate) fn schedule_session(&mut self, s: u32, join: bool) {
        let ttl = self.s[s as usize].ttl(&self.st.classes);
        let class = if join {
            let classes = &self.st.classes;
            (0..CLASSES)
                .find(|&c| classes[c].head != NIL && classes[c].ttl == ttl)
                .or_else(|| (0..CLASSES).find(|&c| classes[c].head == NIL))
        } else {
            None
        };
        let Some(c) = class else {
            self.st.sessions.schedule(self.s, s);
            return;
        };
        self.append_to_class(s, c, ttl);
    }

    /// Appends session `s` (scheduled nowhere) to class `c`, which is free or has ttl
    /// `ttl`, the session's. Cost: O(1) if the class has members, else O(log n).
    fn append_to_class(&mut self, s: u32, c: usize, ttl: u64) {
        let tail = self.st.classes[c].tail;
        let class = &mut self.st.classes[c];
        class.tail = s;
        if tail == NIL {
            class.ttl = ttl;
            class.head = s;
        }
        // Joined only now: the class's ttl is the session's (claimed above if free).
        let due = Link {
            prev: tail,
            next: NIL,
        };
        self.s[s as usize].join_class(c as u8, due);
        if tail == NIL {
            self.st.sessions.schedule(self.s, s);
        } else {
            self.s[tail as usize].set_due_next(s);
        }
    }

    /// Takes session `s` out of the heap and its class. Cost: O(1) for a class member
    /// behind the head, else O(log n).
    fn unschedule_session(&mut self, s: u32) {
        let row = &mut self.s[s as usize];
        let c = row.class as usize;
        if c == NO_CLASS as usize {
            self.st.sessions.unschedule(self.s, s);
            return;
        }
        let Link { prev, next } = row.due();
        row.leave_class(self.st.classes[c].ttl);
        if prev == NIL {
            // The head: its successor (never earlier) takes its place in the heap.
            self.st.classes[c].head = next;
            if next == NIL {
                self.st.sessions.unschedule(self.s, s);
            } else {
                self.s[next as usize].set_due_prev(NIL);
                self.st.sessions.replace(self.s, s, next);
            }
        } else {
            self.s[prev as usize].set_due_next(next);
        }
        if next == NIL {
            self.st.classes[c].tail = prev;
        } else {
            self.s[next as usize].set_due_prev(prev);
        }
    }

    /// Moves session `s`'s deadline to `expires_at` (now + ttl): the tail of its class, so
    /// no heap sift unless it is alone in it, heads it, or is not in a class. Cost: O(1) for
    /// a session in a class with other members, O(log h) more when it heads the class (its
    /// successor takes its heap entry, h the heap's entries); O(log n) otherwise.
    fn renew(&mut self, s: u32, expires_at: u64) {
        let c = self.s[s as usize].class as usize;
        if c != NO_CLASS as usize && self.st.classes[c].tail == s {
            self.s[s as usize].expires_at = expires_at;
            if self.st.classes[c].head == s {
                self.st.sessions.schedule(self.s, s);
            }
            return;
        }
        if c != NO_CLASS as usize {
            // Not the tail, so the class keeps a member when `s` leaves it: `s` goes back
            // to the tail of the same class (no other class has its ttl).
            let ttl = self.st.classes[c].ttl;
            self.unschedule_session(s);
            self.s[s as usize].expires_at = expires_at;
            self.append_to_class(s, c, ttl);
            return;
        }
        self.unschedule_session(s);
        self.s[s as usize].expires_at = expires_at;
        self.schedule_session(s, true);
    }

    /// Fills lock row `l`, just taken from the free list, as entry `id` named `name`.
    /// `hash` is the name's [`View::name_hash`].
    pub(crate) fn insert_lock(&mut self, l: u32, name: LockName, hash: u64, id: u64) {
        let row = &mut self.l[l as usize];
        row.id = id;
        row.name = name;
        row.holders = List::EMPTY;
        row.waiters = List::EMPTY;
        row.watchers = NIL;
        row.in_use = 0;
        row.delay_until = 0;
        row.dirty = false;
        row.dirty_next = NIL;
        TableState::index_insert(self.li, l, hash);
        self.st.lock_order.push_back(self.l, l, lock_order);
    }

    /// Fills claim row `c`, just taken from the free list, as a claim of `s` on `l`,
    /// neither holding nor queued yet (the caller links it next).
    ///
    /// The claim index holds the claims of locks with two claims or more: the common lock
    /// with a single holder costs no index insert or removal, and its claim is found from
    /// the lock row ([`claim_slot`](Self::claim_slot)). A second claim indexes both.
    pub(crate) fn insert_claim(&mut self, c: u32, s: u32, l: u32, mode: Mode, seq: u64) {
        let row = &mut self.c[c as usize];
        row.set(s, l, mode, false);
        row.seq = seq;
        row.value = 0;
        let lock = &self.l[l as usize];
        match lock.holders.len + lock.waiters.len {
            0 => {}
            1 => {
                let only = lock.only_claim();
                let other = &self.c[only as usize];
                let hash = claim_hash(self.key(), other.session(), other.lock());
                TableState::index_insert(self.ci, only, hash);
                let hash = claim_hash(self.key(), s, l);
                TableState::index_insert(self.ci, c, hash);
            }
            _ => {
                let hash = claim_hash(self.key(), s, l);
                TableState::index_insert(self.ci, c, hash);
            }
        }
        let mut list = self.s[s as usize].claims;
        list.push_back(self.c, c, in_session);
        self.s[s as usize].claims = list;
        self.st.claim_order.push_back(self.c, c, claim_order);
    }

    /// Fills claim row `c`, just taken from the free list, as session `s`'s watch of lock
    /// `l`: indexed under [`watch_hash`] (never the key of a hold or wait), last in the
    /// lock's watchers, the session's claims and the claim order.
    pub(crate) fn insert_watch(&mut self, c: u32, s: u32, l: u32, seq: u64) {
        let row = &mut self.c[c as usize];
        row.set_watch(s, l);
        row.seq = seq;
        row.value = 0;
        let hash = watch_hash(self.key(), s, l);
        TableState::index_insert(self.ci, c, hash);
        let head = self.l[l as usize].watchers;
        if head == NIL {
            self.l[l as usize].watchers = c;
            self.c[c as usize].in_lock = Link::EMPTY;
            self.c[c as usize].set_watch_meta(1, c);
        } else {
            let (n, last) = self.c[head as usize].watch_meta();
            self.c[last as usize].in_lock.next = c;
            self.c[c as usize].in_lock = Link {
                prev: last,
                next: NIL,
            };
            self.c[head as usize].set_watch_meta(n + 1, c);
        }
        let mut list = self.s[s as usize].claims;
        list.push_back(self.c, c, in_session);
        self.s[s as usize].claims = list;
        self.st.claim_order.push_back(self.c, c, claim_order);
        self.st.watches += 1;
    }

    /// Makes claim `c` a holder with a fresh token and returns the token.
    fn grant(&mut self, c: u32) -> u64 {
        #[cfg(feature = "fault-injection")]
        let fresh = !self.st.fault_reuse_token || self.st.revision == 0;
        #[cfg(not(feature = "fault-injection"))]
        let fresh = true;
        if fresh {
            self.st.revision += 1;
        }
        let token = self.st.revision;
        self.st.claims.unschedule(self.c, c);
        let l = self.c[c as usize].lock();
        let row = &mut self.c[c as usize];
        row.set_holding(true);
        row.value = token;
        // Holders are kept in claim-sequence order (like every other list), so a restored
        // service lists them exactly as the original did.
        let permits = row.permits();
        let mut holders = self.l[l as usize].holders;
        holders.insert_sorted(self.c, c, in_lock, |r| r.seq);
        self.l[l as usize].holders = holders;
        self.l[l as usize].in_use += permits;
        token
    }

    /// Unlinks and frees a claim (hold or wait). The lock is not re-examined here.
    fn remove_claim(&mut self, c: u32) {
        if self.c[c as usize].watching() {
            self.remove_watch(c);
            return;
        }
        let (s, l, holding) = {
            let r = &self.c[c as usize];
            (r.session(), r.lock(), r.holding())
        };
        if holding {
            self.l[l as usize].in_use -= self.c[c as usize].permits();
        }
        self.st.claims.unschedule(self.c, c);
        let lock = &mut self.l[l as usize];
        let mut list = if holding { lock.holders } else { lock.waiters };
        list.remove(self.c, c, in_lock);
        if holding {
            self.l[l as usize].holders = list;
        } else {
            self.l[l as usize].waiters = list;
        }
        let mut list = self.s[s as usize].claims;
        list.remove(self.c, c, in_session);
        self.s[s as usize].claims = list;
        self.st.claim_order.remove(self.c, c, claim_order);
        // Indexed only while its lock had two claims or more; at two, the one left is
        // found from the lock row from now on.
        let lock = &self.l[l as usize];
        match lock.holders.len + lock.waiters.len {
            0 => {}
            1 => {
                let only = lock.only_claim();
                let key = self.st.name_key;
                TableState::index_remove(self.ci, self.c, c, key.as_ref());
                TableState::index_remove(self.ci, self.c, only, key.as_ref());
            }
            _ => {
                let key = self.st.name_key;
                TableState::index_remove(self.ci, self.c, c, key.as_ref());
            }
        }
        // Free (no session); `insert_claim` sets every field when the row is taken again.
        self.c[c as usize].free();
        self.st.claims.release(self.c, c);
    }

    /// Unlinks and frees watch claim `c`. The lock is not re-examined here.
    fn remove_watch(&mut self, c: u32) {
        let (s, l) = {
            let r = &self.c[c as usize];
            (r.session(), r.lock())
        };
        let head = self.l[l as usize].watchers;
        let (n, last) = self.c[head as usize].watch_meta();
        let Link { prev, next } = self.c[c as usize].in_lock;
        if prev == NIL {
            // The first watch: the next one (if any) takes over the count and the last.
            self.l[l as usize].watchers = next;
            if next != NIL {
                self.c[next as usize].in_lock.prev = NIL;
                self.c[next as usize].set_watch_meta(n - 1, last);
            }
        } else {
            self.c[prev as usize].in_lock.next = next;
            if next != NIL {
                self.c[next as usize].in_lock.prev = prev;
            }
            let last = if next == NIL { prev } else { last };
            self.c[head as usize].set_watch_meta(n - 1, last);
        }
        self.c[c as usize].in_lock = Link::EMPTY;
        self.c[c as usize].set_watch_meta(0, 0);
        let mut list = self.s[s as usize].claims;
        list.remove(self.c, c, in_session);
        self.s[s as usize].claims = list;
        self.st.claim_order.remove(self.c, c, claim_order);
        let key = self.st.name_key;
        let hash = watch_hash(key.as_ref(), s, l);
        TableState::index_remove_hashed(self.ci, self.c, c, hash, key.as_ref());
        self.st.watches -= 1;
        self.c[c as usize].free();
        self.st.claims.release(self.c, c);
    }

    /// Whether an acquire in `mode` is granted at once: not in lock-delay, nobody queued
    /// (strict FIFO: a newcomer never overtakes a waiter), and it fits the holders.
    #[cfg_attr(not(target_family = "wasm"), inline(always))]
    fn grantable_now(&self, l: u32, mode: Mode) -> bool {
        let lock = &self.l[l as usize];
        if lock.in_delay(self.st.now) || lock.waiters.len > 0 {
            return false;
        }
        self.fits(l, mode)
    }

    /// Ends a session: `Released` per hold (lock-delay if it expired), waits dropped, the
    /// row freed. Its locks are marked for [`grant_dirty`](Self::grant_dirty).
    fn end_session(&mut self, s: u32, reason: ReleaseReason, out: &mut impl Sink) {
        let session = SessionId(self.s[s as usize].id);
        let delay = self.st.config.lock_delay;
        // Its watches end first: no event reaches a watcher once its session is ending,
        // not even about its own holds.
        let mut c = self.s[s as usize].claims.head;
        while c != NIL {
            let next = self.c[c as usize].in_session.next;
            if self.c[c as usize].watching() {
                let l = self.c[c as usize].lock();
                self.remove_watch(c);
                self.mark_dirty(l);
            }
            c = next;
        }
        let change = match reason {
            ReleaseReason::Released => Change::Released,
            ReleaseReason::Closed => Change::Closed,
            ReleaseReason::Expired => Change::Expired,
        };
        while self.s[s as usize].claims.head != NIL {
            let c = self.s[s as usize].claims.head;
            let (l, holding, token, mode) = {
                let r = &self.c[c as usize];
                (r.lock(), r.holding(), r.value, r.mode())
            };
            self.remove_claim(c);
            if holding {
                out.event(Output::Released {
                    session,
                    lock: self.l[l as usize].name.clone(),
                    token: Token(token),
                    reason,
                });
                self.tell_watchers(l, s, mode, token, change, out);
                if reason == ReleaseReason::Expired && delay > 0 {
                    let until = self.st.now.saturating_add(delay);
                    let lock = &mut self.l[l as usize];
                    if until > lock.delay_until {
                        lock.delay_until = until;
                        self.st.locks.schedule(self.l, l);
                    }
                }
            }
            self.mark_dirty(l);
        }
        self.unschedule_session(s);
        if home_row(self.s[s as usize].id, self.s.len()) != Some(s) {
            let key = self.st.name_key;
            TableState::index_remove(self.si, self.s, s, key.as_ref());
        }
        self.st.session_order.remove(self.s, s, session_order);
        let label = self.s[s as usize].label;
        if label != NIL {
            self.st.labels.release(self.lb, label);
        }
        self.s[s as usize] = SessionRow {
            aux: self.s[s as usize].aux,
            ..SessionRow::EMPTY
        };
        self.st.sessions.release_linked(self.s, s, free_prev);
    }

    /// Expires every session whose deadline is at or before `now`, earliest first, ties
    /// by id.
    fn expire_due(&mut self, now: u64, out: &mut impl Sink) {
        while let Some(top) = self.st.sessions.earliest(self.s) {
            let due = self.s[top as usize].expires_at;
            if due > now {
                break;
            }
            // Every session due at `due` must be in the heap before the first of them
            // goes, so the heap orders them by id: take the class members due then out
            // of their classes (each heads its class in turn, so each is scheduled).
            for c in 0..CLASSES {
                loop {
                    let head = self.st.classes[c].head;
                    if head == NIL || self.s[head as usize].expires_at != due {
                        break;
                    }
                    let next = self.s[head as usize].due().next;
                    let ttl = self.st.classes[c].ttl;
                    self.s[head as usize].leave_class(ttl);
                    self.st.classes[c].head = next;
                    if next == NIL {
                        self.st.classes[c].tail = NIL;
                    } else {
                        self.s[next as usize].set_due_prev(NIL);
                        self.st.sessions.schedule(self.s, next);
                    }
                }
            }
            while let Some(s) = self.st.sessions.earliest(self.s) {
                if self.s[s as usize].expires_at != due {
                    break;
                }
                out.event(Output::SessionExpired {
                    session: SessionId(self.s[s as usize].id),
                });
                self.end_session(s, ReleaseReason::Expired, out);
            }
        }
    }

    fn mark_dirty(&mut self, l: u32) {
        if self.l[l as usize].dirty {
            return;
        }
        self.l[l as usize].dirty = true;
        self.l[l as usize].dirty_next = NIL;
        if self.st.dirty_tail == NIL {
            self.st.dirty_head = l;
        } else {
            self.l[self.st.dirty_tail as usize].dirty_next = l;
        }
        self.st.dirty_tail = l;
    }

    /// For each marked lock in marking order: grant its queue head (one exclusive waiter
    /// or the run of shared ones), then evict it if idle.
    fn grant_dirty(&mut self, out: &mut impl Sink) {
        while self.st.dirty_head != NIL {
            let l = self.st.dirty_head;
            self.st.dirty_head = self.l[l as usize].dirty_next;
            if self.st.dirty_head == NIL {
                self.st.dirty_tail = NIL;
            }
            self.l[l as usize].dirty = false;
            self.l[l as usize].dirty_next = NIL;
            self.grant_queue_head(l, out);
            self.evict_if_idle(l);
        }
    }

    fn grant_queue_head(&mut self, l: u32, out: &mut impl Sink) {
        if self.l[l as usize].in_delay(self.st.now) {
            return;
        }
        loop {
            let lock = &self.l[l as usize];
            let head = lock.waiters.head;
            if head == NIL {
                return;
            }
            let mode = self.c[head as usize].mode();
            if !self.fits(l, mode) {
                return;
            }
            let mut waiters = self.l[l as usize].waiters;
            waiters.remove(self.c, head, in_lock);
            self.l[l as usize].waiters = waiters;
            let token = self.grant(head);
            let s = self.c[head as usize].session();
            out.event(Output::Granted {
                session: SessionId(self.s[s as usize].id),
                lock: self.l[l as usize].name.clone(),
                mode,
                token: Token(token),
            });
            self.tell_watchers(l, s, mode, token, Change::Granted, out);
            if mode == Mode::Exclusive {
                return;
            }
        }
    }

    /// Ends lock entry `l` if nothing holds, awaits or delays it: out of the list of
    /// entries, onto the idle list (still indexed, so the next acquire of the name reuses
    /// the row without re-indexing or copying the name). O(1).
    fn evict_if_idle(&mut self, l: u32) {
        let lock = &self.l[l as usize];
        if lock.holders.len > 0
            || lock.waiters.len > 0
            || lock.watchers != NIL
            || TableState::is_scheduled(self.l, l)
        {
            return;
        }
        self.st.lock_order.remove(self.l, l, lock_order);
        // Not an entry any more (id 0): getters, snapshots and counts skip it.
        self.l[l as usize].id = 0;
        self.st.idle_locks.push_back(self.l, l, lock_order);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::BucketArray;
    use crate::VecStorage;

    /// Two lock names whose hashes share the 32 bits the lock index stores (a birthday
    /// search over the public hash): the index cannot tell them apart, so only the
    /// lookup's name comparison keeps each lock to its own holder and token.
    #[test]
    fn locks_whose_stored_hash_bits_collide_stay_apart() {
        let (a, b) = crate::table::names_sharing_a_tag("l");
        let mut svc = LockService::new(VecStorage::new(2, 2, 4), Config::default())
            .unwrap_or_else(|_| unreachable!());
        let open = |svc: &mut LockService<VecStorage>| match svc.open_session(
            Tick(0),
            100,
            &mut |_: Output| {},
        ) {
            Ok(Reply::Opened { session, .. }) => session,
            r => unreachable!("{r:?}"),
        };
        let (s1, s2) = (open(&mut svc), open(&mut svc));
        let take = |svc: &mut LockService<VecStorage>, s, name: &str| {
            svc.acquire(
                Tick(0),
                s,
                name,
                Mode::Exclusive,
                Wait::None,
                None,
                &mut |_: Output| {},
            )
        };
        assert_eq!(
            take(&mut svc, s1, &a),
            Ok(Reply::Granted {
                mode: Mode::Exclusive,
                token: Token(1)
            })
        );
        assert_eq!(
            take(&mut svc, s2, &b),
            Ok(Reply::Granted {
                mode: Mode::Exclusive,
                token: Token(2)
            }),
            "{b} is not {a}"
        );
        let holder = |svc: &LockService<VecStorage>, name: &str| {
            let h: std::vec::Vec<_> = svc.holders(name).map(|h| (h.session, h.token)).collect();
            h
        };
        assert_eq!(holder(&svc, &a), [(s1, Token(1))]);
        assert_eq!(holder(&svc, &b), [(s2, Token(2))]);
    }

    /// A name key decides where the lock index files a name: after `set_name_key` (and
    /// after `restore_keyed`) the one bucket that holds the lock's row stores the keyed
    /// hash's tag, not the public one's; a plain restore files it by the public hash
    /// again. Through each, the lock keeps its holder.
    #[test]
    fn a_name_key_decides_where_the_lock_index_files_a_name() {
        use crate::table::{keyed_name_hash, name_hash, tag_of, NameKey};
        let key = NameKey([7, 11]);
        let public = tag_of(name_hash(b"ledger"));
        let keyed = tag_of(keyed_name_hash(Some(&key), b"ledger"));
        assert_ne!(public, keyed);
        // The tags of the buckets that hold a live row.
        let filed = |svc: &mut LockService<VecStorage>| {
            let v = svc.view();
            let tags: std::vec::Vec<Option<u32>> = (0..v.li.buckets())
                .map(|b| v.li.bucket(b))
                .filter(|(row, _)| *row != NIL && v.l[*row as usize].id != 0)
                .map(|(_, tag)| tag)
                .collect();
            tags
        };
        let holder = |svc: &LockService<VecStorage>| {
            let h: std::vec::Vec<_> = svc.holders("ledger").map(|h| h.token).collect();
            h
        };
        let mut svc = LockService::new(VecStorage::new(2, 4, 4), Config::default())
            .unwrap_or_else(|_| unreachable!());
        let Ok(Reply::Opened { session, .. }) = svc.open_session(Tick(0), 100, &mut |_: Output| {})
        else {
            unreachable!()
        };
        let r = svc.acquire(
            Tick(0),
            session,
            "ledger",
            Mode::Exclusive,
            Wait::None,
            None,
            &mut |_: Output| {},
        );
        assert!(matches!(r, Ok(Reply::Granted { .. })), "{r:?}");
        assert!(!svc.is_name_keyed());
        assert_eq!(filed(&mut svc), [Some(public)]);
        svc.set_name_key(key);
        assert!(svc.is_name_keyed());
        assert_eq!(filed(&mut svc), [Some(keyed)]);
        assert_eq!(holder(&svc), [Token(1)]);
        let bytes = svc.snapshot_vec();
        let mut plain = LockService::restore(VecStorage::new(2, 4, 4), &bytes)
            .unwrap_or_else(|_| unreachable!());
        assert!(!plain.is_name_keyed());
        assert_eq!(filed(&mut plain), [Some(public)]);
        assert_eq!(holder(&plain), [Token(1)]);
        let mut again = LockService::restore_keyed(VecStorage::new(2, 4, 4), &bytes, key)
            .unwrap_or_else(|_| unreachable!());
        assert!(again.is_name_keyed());
        assert_eq!(filed(&mut again), [Some(keyed)]);
        assert_eq!(holder(&again), [Token(1)]);
    }

    /// A numbered request's fingerprint (kept in snapshots, so it must not change) is
    /// FNV-1a over the lock name and then: one mode byte (0xFE exclusive, 0xFF shared;
    /// 0xFD and then count and limit, little-endian, for permits), nothing for a release
    /// or cancel, 0xFC and the token for a `release_hold`. An unnumbered request's is 0.
    #[test]
    fn request_fingerprints_are_fnv1a_over_the_name_and_what_follows_it() {
        use crate::table::fnv1a;
        let cat = |parts: &[&[u8]]| fnv1a(&parts.concat());
        let n = Some(1);
        assert_eq!(
            target("ledger", Some(Mode::Exclusive), n),
            cat(&[b"ledger", &[0xFE]])
        );
        assert_eq!(
            target("ledger", Some(Mode::Shared), n),
            cat(&[b"ledger", &[0xFF]])
        );
        let (count, limit) = (2u32, 0x0102_0305u32);
        assert_eq!(
            target("ledger", Some(Mode::Permits { count, limit }), n),
            cat(&[
                b"ledger",
                &[0xFD],
                &count.to_le_bytes(),
                &limit.to_le_bytes()
            ])
        );
        assert_eq!(target("ledger", None, n), fnv1a(b"ledger"));
        let token = 0x0102_0304_0506_0708u64;
        assert_eq!(
            hold_target("ledger", token, n),
            cat(&[b"ledger", &[0xFC], &token.to_le_bytes()])
        );
        assert_eq!(target("ledger", Some(Mode::Exclusive), None), 0);
        assert_eq!(hold_target("ledger", token, None), 0);
    }

    /// A session opened while its home row ((id − 1) mod rows) is free sits there, where
    /// one load finds it, and only the others are in the session index: opening as many
    /// sessions as rows into an empty table puts each at home and none in the index.
    #[test]
    fn sessions_sit_at_their_home_rows_when_those_are_free() {
        let rows = 6;
        let mut svc = LockService::new(VecStorage::new(rows, 1, 1), Config::default())
            .unwrap_or_else(|_| unreachable!());
        for _ in 0..rows {
            let r = svc.open_session(Tick(0), 10, &mut |_: Output| {});
            assert!(matches!(r, Ok(Reply::Opened { .. })), "{r:?}");
        }
        let v = svc.view();
        let ids: std::vec::Vec<u64> = v.s.iter().map(|s| s.id).collect();
        assert_eq!(ids, [1, 2, 3, 4, 5, 6]);
        assert!((0..v.si.buckets()).all(|b| v.si.bucket(b).0 == NIL));
        assert_eq!(home_row(7, rows), Some(0));
        assert_eq!(
            home_row(1 << 40, rows),
            Some((((1u64 << 40) - 1) % 6) as u32)
        );
        assert_eq!(home_row(1, 0), None);
    }

    /// Sessions of one ttl share a class (what makes their keep-alives O(1): a renewed
    /// session goes to its class's tail), and each ttl has its own: three sessions of ttl
    /// 10 and one of ttl 20 take two classes, not the deadline heap one by one.
    #[test]
    fn sessions_of_one_ttl_share_a_class() {
        let mut svc = LockService::new(VecStorage::new(4, 1, 1), Config::default())
            .unwrap_or_else(|_| unreachable!());
        for ttl in [10, 20, 10, 10] {
            let r = svc.open_session(Tick(0), ttl, &mut |_: Output| {});
            assert!(matches!(r, Ok(Reply::Opened { .. })), "{r:?}");
        }
        let v = svc.view();
        let class: std::vec::Vec<u8> = v.s.iter().map(|s| s.class).collect();
        assert_ne!(class[0], NO_CLASS, "{class:?}");
        assert_ne!(class[1], NO_CLASS, "{class:?}");
        assert_ne!(class[0], class[1], "{class:?}");
        assert_eq!([class[2], class[3]], [class[0], class[0]], "{class:?}");
    }

    /// The session index holds exactly the sessions away from their home rows, through
    /// any mix of opens and closes that wraps the ids round the table many times with
    /// sessions of every lifetime (a seeded walk; a stale bucket would, sooner or later,
    /// fill the index and hang a probe).
    #[test]
    fn the_session_index_holds_exactly_the_sessions_away_from_home() {
        let rows = 5;
        let mut svc = LockService::new(VecStorage::new(rows, 1, 2), Config::default())
            .unwrap_or_else(|_| unreachable!());
        let mut live: std::vec::Vec<SessionId> = std::vec::Vec::new();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut away_seen = 0;
        for step in 0..3000u64 {
            x = crate::table::mix(x ^ step);
            let close = !live.is_empty() && (live.len() == rows || x & 3 == 0);
            if close {
                let s = live.remove((x >> 8) as usize % live.len());
                let r = svc.close_session(svc.now(), s, None, &mut |_: Output| {});
                assert!(r.is_ok(), "close {s:?}: {r:?}");
            } else {
                let r = svc.open_session(svc.now(), 100, &mut |_: Output| {});
                let Ok(Reply::Opened { session, .. }) = r else {
                    unreachable!("open refused: {r:?}")
                };
                live.push(session);
            }
            let v = svc.view();
            let mut away = 0;
            for (row, s) in v.s.iter().enumerate() {
                if s.id != 0 && home_row(s.id, rows) != Some(row as u32) {
                    away += 1;
                }
            }
            let indexed = (0..v.si.buckets())
                .filter(|b| v.si.bucket(*b).0 != NIL)
                .count();
            assert_eq!(indexed, away, "step {step}");
            away_seen = away_seen.max(away);
            for s in &live {
                assert!(find_session(v.si, v.s, None, s.0).is_some(), "{s:?} lost");
            }
        }
        assert!(
            away_seen >= 2,
            "the walk never put two sessions away from home"
        );
    }
}
