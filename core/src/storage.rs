//! Where the service's tables live. The host provides the memory (smoltcp's way): fixed
//! arrays for firmware, caller-provided slices, or (feature `alloc`) vectors sized at run
//! time. The service itself never allocates.
//!
//! Memory per entry, the whole cost of the service (there is no other memory):
//!
//! | row | bytes | one per |
//! |---|---|---|
//! | [`SessionRow`] + 2 × [`Bucket`] | 80 + 8 = 88 | open session |
//! | [`LabelRow`] | 65 | open session *with a holder label*, in a table the host sizes (by default one per session; 0 for a host that never labels) |
//! | [`LockRow`] + 2 × [`TaggedBucket`] | 136 + 16 = 152 | lock that is held, awaited, watched or in lock-delay (an idle lock's entry ends; its row stays indexed under the name until the name is taken again or the row is needed for another) |
//! | [`ClaimRow`] + 2 × [`Bucket`] | 64 + 8 = 72 | hold, wait *or* watch of one session on one lock (one pool for all three) |
//! | [`GateRow`](crate::GateRow) | 96 | resource a [`FenceGate`](crate::FenceGate) guards |
//!
//! So a service for 10 000 sessions, 10 000 locks and 40 000 claims takes
//! 0.88 + 1.52 + 2.88 MB = 5.28 MB, plus 0.65 MB if every session may carry a label
//! (5.93 MB). Each of the three tables has a hash index of two buckets per row (so the
//! load stays ≤ 50 %), kept in an array of its own: a lookup
//! probes that dense array, which stays in cache when the table does not (the index of
//! 64k locks is 1 MB, their rows 9 MB), and reads a row only to confirm a match. A
//! session is usually read straight from its home row, (id − 1) mod the rows, with no
//! index read; only the sessions away from theirs are indexed.
//! Each row also carries its share of its table's heap of deadlines. Label rows have
//! neither (a session finds its label by row number); a gate's rows carry their own
//! buckets (a gate is append-only).
//!
//! Where the bytes go, and why each field has the width it has:
//!
//! * **Session** (80 + 8): id, deadline, latest request number and its fingerprint (four
//!   `u64`); the latest reply packed into a `u64` and a byte; one `u64` that is the ttl
//!   while the session is in no ttl class and its neighbours in its class's deadline list
//!   (what makes a keep-alive O(1)) while it is in one (the class has the ttl then); its
//!   ttl-class number (a byte); its claim list (head, tail); its neighbours in id order
//!   (the snapshot's order); its label-table row (`u32`, none = no label); 8 bytes of
//!   heap; and apart, 8 bytes of index (two row numbers: the index holds only the
//!   sessions away from their home row, but any number of them may be).
//! * **Label** (65): a length byte and 64 bytes, byte-aligned; a free row links to the
//!   next free one through its own bytes. Apart from it because most sessions of most
//!   hosts have no label: inline it was 65 of a session's bytes, used or not.
//! * **Lock** (136 + 16): the name inline (65); id, lock-delay end (two `u64`); holder list
//!   (head, tail, count), wait queue (head, tail, count, the count is a queue position)
//!   and its first watch (a row number: the first watch's claim row keeps the number of
//!   watchers and the last one in its mode fields, which a watch does not use); the permits its holders hold (a semaphore's
//!   `in_use`, `u32`; the limit is read from any of its claims); creation-order
//!   neighbours; the dirty-list link; a dirty flag (a byte); 8 bytes of heap; and apart,
//!   16 bytes of index (two row numbers and the high 32 bits of each entry's name hash, so
//!   a probe never compares or re-hashes a name it need not). The name stays inline
//!   because [`LockService::locks`](crate::LockService::locks) lends out `&LockName` from
//!   the row.
//! * **Claim** (64 + 8): session and lock row numbers (`u32`, with watch and hold in their
//!   top bits, free since rows are < 2³¹); the mode as two `u32` (count and limit of
//!   `Permits`; limit 0 for exclusive or shared); arrival number and token-or-deadline
//!   (`u64`); its neighbours on the lock (holders, queue or watchers), in the session and
//!   in arrival order (the snapshot's); 8 of heap and, apart, 8 bytes of index. A lock's only hold
//!   or wait is not in the claim index at all (it is found from the lock row), but keeps
//!   its share of the buckets; a watch is always indexed, under a key no hold or wait
//!   has (the lock's row number with its top bit set).
//!
//! The figures are the same on 64-bit and 32-bit targets: rows hold only `u64`, `u32`,
//! byte-sized fields (`u8`, `bool`, fieldless enums) and enums of those (a name's length
//! is a `u8`, never a `usize`; no pointers), so their layout depends only on the
//! alignment of `u64`, which is 8 bytes on x86_64, aarch64, wasm32 and ARM EABI targets
//! such as thumbv7em. A compile-time assertion below checks the figures on every build
//! for such a target (the `thumbv7em-none-eabihf` build in CI included), and
//! `core/tests/memory.rs` checks them on the host. On a target where `u64` is only 4-byte
//! aligned (i686) rows can be a few bytes smaller, never larger.

use crate::table::{Aux, Indexed, NameKey, Row, NIL};
pub use crate::table::{Bucket, TaggedBucket, BUCKETS_PER_ROW};
use crate::{Label, LockName, Mode};

// The table above, checked at compile time wherever `u64` is 8-byte aligned.
const _: () = assert!(
    core::mem::align_of::<u64>() != 8
        || (core::mem::size_of::<SessionRow>() == 80
            && core::mem::size_of::<Bucket>() == 4
            && core::mem::size_of::<LockRow>() == 136
            && core::mem::size_of::<TaggedBucket>() == 8
            && core::mem::size_of::<ClaimRow>() == 64
            && core::mem::size_of::<LabelRow>() == 65
            && core::mem::size_of::<crate::GateRow>() == 96)
);

/// Hands the service its tables. Implemented for [`ArrayStorage`], [`SliceStorage`],
/// [`LabeledSliceStorage`] and (feature `alloc`) `VecStorage`; implement it for anything
/// else that owns the rows. The lengths must not change while a service uses the storage.
pub trait Storage {
    /// The three tables, mutably. The service calls
    /// [`tables_and_labels`](Self::tables_and_labels) once or twice per input (twice when
    /// the input moves time forward: its advance, then the input), whose default calls
    /// this (a storage with a label table overrides both). It must be O(1) and must return slices
    /// of the same lengths every time (a service never re-checks them).
    fn tables(&mut self) -> Tables<'_>;
    /// The three tables, read-only. Called by every query; O(1) like
    /// [`tables`](Self::tables).
    fn tables_ref(&self) -> TablesRef<'_>;
    /// The three tables and the label table ([`LabelRow`], one per open session that has
    /// a holder label), mutably. O(1) like [`tables`](Self::tables), the same lengths
    /// every time. The default has no label table: every session can open, but a
    /// labelled open is refused with
    /// [`CapacityExceeded(Table::Labels)`](crate::Error::CapacityExceeded).
    fn tables_and_labels(&mut self) -> (Tables<'_>, &mut [LabelRow]) {
        (self.tables(), &mut [])
    }
    /// The label table, read-only: the same rows [`tables_and_labels`](Self::tables_and_labels)
    /// gives (empty by default; implement both or neither: a service made or restored on
    /// storage whose read-only views disagree with its mutable ones is refused with
    /// [`BadConfig`](crate::Error::BadConfig)). O(1).
    fn labels_ref(&self) -> &[LabelRow] {
        &[]
    }
}

/// Mutable views of the three tables and their hash indexes. Each index has exactly
/// [`BUCKETS_PER_ROW`] (two) buckets per row of its table, so its load stays ≤ 50 %.
#[derive(Debug)]
pub struct Tables<'a> {
    /// One row per session.
    pub sessions: &'a mut [SessionRow],
    /// The session table's index: twice as many buckets as `sessions` has rows.
    pub session_index: &'a mut [Bucket],
    /// One row per live lock entry.
    pub locks: &'a mut [LockRow],
    /// The lock table's index: twice as many buckets as `locks` has rows.
    pub lock_index: &'a mut [TaggedBucket],
    /// One row per claim (hold, wait or watch).
    pub claims: &'a mut [ClaimRow],
    /// The claim pool's index: twice as many buckets as `claims` has rows.
    pub claim_index: &'a mut [Bucket],
}

/// Read-only views of the three tables and their hash indexes.
#[derive(Debug, Clone, Copy)]
pub struct TablesRef<'a> {
    /// One row per session.
    pub sessions: &'a [SessionRow],
    /// The session table's index.
    pub session_index: &'a [Bucket],
    /// One row per live lock entry.
    pub locks: &'a [LockRow],
    /// The lock table's index.
    pub lock_index: &'a [TaggedBucket],
    /// One row per claim (hold, wait or watch).
    pub claims: &'a [ClaimRow],
    /// The claim pool's index.
    pub claim_index: &'a [Bucket],
}

impl Tables<'_> {
    /// These tables, lent for a shorter time. Cost: O(1).
    pub(crate) fn reborrow(&mut self) -> Tables<'_> {
        Tables {
            sessions: self.sessions,
            session_index: self.session_index,
            locks: self.locks,
            lock_index: self.lock_index,
            claims: self.claims,
            claim_index: self.claim_index,
        }
    }

    /// These tables, read-only. Cost: O(1).
    pub(crate) fn as_ref(&self) -> TablesRef<'_> {
        TablesRef {
            sessions: self.sessions,
            session_index: self.session_index,
            locks: self.locks,
            lock_index: self.lock_index,
            claims: self.claims,
            claim_index: self.claim_index,
        }
    }
}

/// The memory of three tables and their indexes in fixed arrays (an index as pairs of
/// buckets, one pair per row: `[T; 2 * S]` is not a type stable Rust can write).
#[derive(Debug)]
struct ArrayTables<const S: usize, const L: usize, const C: usize> {
    sessions: [SessionRow; S],
    session_index: [[Bucket; BUCKETS_PER_ROW]; S],
    locks: [LockRow; L],
    lock_index: [[TaggedBucket; BUCKETS_PER_ROW]; L],
    claims: [ClaimRow; C],
    claim_index: [[Bucket; BUCKETS_PER_ROW]; C],
}

impl<const S: usize, const L: usize, const C: usize> ArrayTables<S, L, C> {
    fn tables(&mut self) -> Tables<'_> {
        Tables {
            sessions: &mut self.sessions,
            session_index: self.session_index.as_flattened_mut(),
            locks: &mut self.locks,
            lock_index: self.lock_index.as_flattened_mut(),
            claims: &mut self.claims,
            claim_index: self.claim_index.as_flattened_mut(),
        }
    }
    fn tables_ref(&self) -> TablesRef<'_> {
        TablesRef {
            sessions: &self.sessions,
            session_index: self.session_index.as_flattened(),
            locks: &self.locks,
            lock_index: self.lock_index.as_flattened(),
            claims: &self.claims,
            claim_index: self.claim_index.as_flattened(),
        }
    }
}

/// Storage in fixed arrays, for `static`s and firmware: `S` sessions, `L` locks, `C`
/// claims and `N` holder labels (by default one per session; `0` for a host that never
/// labels, which then pays nothing for labels). Large services belong in a `static` or on
/// the heap, not on the stack.
#[derive(Debug)]
pub struct ArrayStorage<const S: usize, const L: usize, const C: usize, const N: usize = S> {
    tables: ArrayTables<S, L, C>,
    labels: [LabelRow; N],
}

impl<const S: usize, const L: usize, const C: usize, const N: usize> ArrayStorage<S, L, C, N> {
    /// Empty tables. `const`, so it can initialise a `static`. Cost: O(S + L + C + N).
    /// Errors: none.
    pub const fn new() -> Self {
        ArrayStorage {
            tables: ArrayTables {
                sessions: [SessionRow::EMPTY; S],
                session_index: [[Bucket::EMPTY; BUCKETS_PER_ROW]; S],
                locks: [LockRow::EMPTY; L],
                lock_index: [[TaggedBucket::EMPTY; BUCKETS_PER_ROW]; L],
                claims: [ClaimRow::EMPTY; C],
                claim_index: [[Bucket::EMPTY; BUCKETS_PER_ROW]; C],
            },
            labels: [LabelRow::EMPTY; N],
        }
    }
}

impl<const S: usize, const L: usize, const C: usize, const N: usize> Default
    for ArrayStorage<S, L, C, N>
{
    fn default() -> Self {
        Self::new()
    }
}

impl<const S: usize, const L: usize, const C: usize, const N: usize> Storage
    for ArrayStorage<S, L, C, N>
{
    fn tables(&mut self) -> Tables<'_> {
        self.tables.tables()
    }
    fn tables_ref(&self) -> TablesRef<'_> {
        self.tables.tables_ref()
    }
    fn tables_and_labels(&mut self) -> (Tables<'_>, &mut [LabelRow]) {
        (self.tables.tables(), &mut self.labels)
    }
    fn labels_ref(&self) -> &[LabelRow] {
        &self.labels
    }
}

/// Storage in slices the caller owns (memory from a linker section, an arena, C), without
/// a label table: a labelled open is refused with
/// [`CapacityExceeded(Table::Labels)`](crate::Error::CapacityExceeded). For labels, use
/// [`LabeledSliceStorage`]. Each index slice must have twice as many buckets as its table
/// has rows ([`LockService::new`](crate::LockService::new) refuses it otherwise).
pub type SliceStorage<'a> = Tables<'a>;

impl Storage for Tables<'_> {
    fn tables(&mut self) -> Tables<'_> {
        self.reborrow()
    }
    fn tables_ref(&self) -> TablesRef<'_> {
        self.as_ref()
    }
}

/// Storage in slices the caller owns, with a label table: `labels` has one row per open
/// session that may carry a holder label at once (any length, 0 included).
#[derive(Debug)]
pub struct LabeledSliceStorage<'a> {
    /// The three tables and their indexes (as [`SliceStorage`]).
    pub tables: Tables<'a>,
    /// One row per labelled session.
    pub labels: &'a mut [LabelRow],
}

impl Storage for LabeledSliceStorage<'_> {
    fn tables(&mut self) -> Tables<'_> {
        self.tables.reborrow()
    }
    fn tables_ref(&self) -> TablesRef<'_> {
        self.tables.as_ref()
    }
    fn tables_and_labels(&mut self) -> (Tables<'_>, &mut [LabelRow]) {
        (self.tables.reborrow(), self.labels)
    }
    fn labels_ref(&self) -> &[LabelRow] {
        self.labels
    }
}

/// Storage on the heap, sized at run time (C ABI, wasm, servers, benchmarks).
#[cfg(feature = "alloc")]
#[derive(Debug)]
pub struct VecStorage {
    sessions: alloc::vec::Vec<SessionRow>,
    session_index: alloc::vec::Vec<Bucket>,
    locks: alloc::vec::Vec<LockRow>,
    lock_index: alloc::vec::Vec<TaggedBucket>,
    claims: alloc::vec::Vec<ClaimRow>,
    claim_index: alloc::vec::Vec<Bucket>,
    labels: alloc::vec::Vec<LabelRow>,
}

#[cfg(feature = "alloc")]
impl VecStorage {
    /// Allocates the tables (the host's allocation; the service makes none), with a label
    /// row for every session. Cost: O(sessions + locks + claims) time and the memory in
    /// the module table.
    ///
    /// Errors: none returned; as `vec!`, a size whose bytes overflow `isize` panics and
    /// one the allocator refuses aborts. Sizes from untrusted input go through
    /// [`try_new`](Self::try_new).
    pub fn new(sessions: usize, locks: usize, claims: usize) -> Self {
        Self::with_labels(sessions, locks, claims, sessions)
    }

    /// As [`new`](Self::new), with `labels` label rows: at most that many open sessions
    /// carry a holder label at once (0: labelled opens are refused with
    /// [`CapacityExceeded(Table::Labels)`](crate::Error::CapacityExceeded)).
    /// Cost: O(sessions + locks + claims + labels). Errors: as [`new`](Self::new).
    pub fn with_labels(sessions: usize, locks: usize, claims: usize, labels: usize) -> Self {
        VecStorage {
            sessions: alloc::vec![SessionRow::EMPTY; sessions],
            session_index: alloc::vec![Bucket::EMPTY; BUCKETS_PER_ROW * sessions],
            locks: alloc::vec![LockRow::EMPTY; locks],
            lock_index: alloc::vec![TaggedBucket::EMPTY; BUCKETS_PER_ROW * locks],
            claims: alloc::vec![ClaimRow::EMPTY; claims],
            claim_index: alloc::vec![Bucket::EMPTY; BUCKETS_PER_ROW * claims],
            labels: alloc::vec![LabelRow::EMPTY; labels],
        }
    }
}

#[cfg(feature = "alloc")]
impl VecStorage {
    /// As [`new`](Self::new), but a size the allocator cannot satisfy is an error instead
    /// of an abort (for hosts that take capacities from untrusted input, like wasm).
    ///
    /// Errors: the allocator's [`TryReserveError`](alloc::collections::TryReserveError);
    /// nothing stays allocated. Cost: as `new`.
    pub fn try_new(
        sessions: usize,
        locks: usize,
        claims: usize,
    ) -> Result<Self, alloc::collections::TryReserveError> {
        Self::try_with_labels(sessions, locks, claims, sessions)
    }

    /// As [`with_labels`](Self::with_labels), but a size the allocator cannot satisfy is
    /// an error instead of an abort.
    ///
    /// Errors: the allocator's [`TryReserveError`](alloc::collections::TryReserveError);
    /// nothing stays allocated. Cost: as `with_labels`.
    pub fn try_with_labels(
        sessions: usize,
        locks: usize,
        claims: usize,
        labels: usize,
    ) -> Result<Self, alloc::collections::TryReserveError> {
        fn rows<T: Clone>(
            n: usize,
            empty: T,
        ) -> Result<alloc::vec::Vec<T>, alloc::collections::TryReserveError> {
            let mut v = alloc::vec::Vec::new();
            v.try_reserve_exact(n)?;
            v.resize(n, empty);
            Ok(v)
        }
        Ok(VecStorage {
            sessions: rows(sessions, SessionRow::EMPTY)?,
            session_index: rows(sessions.saturating_mul(BUCKETS_PER_ROW), Bucket::EMPTY)?,
            locks: rows(locks, LockRow::EMPTY)?,
            lock_index: rows(locks.saturating_mul(BUCKETS_PER_ROW), TaggedBucket::EMPTY)?,
            claims: rows(claims, ClaimRow::EMPTY)?,
            claim_index: rows(claims.saturating_mul(BUCKETS_PER_ROW), Bucket::EMPTY)?,
            labels: rows(labels, LabelRow::EMPTY)?,
        })
    }
}

#[cfg(feature = "alloc")]
impl Storage for VecStorage {
    fn tables(&mut self) -> Tables<'_> {
        Tables {
            sessions: &mut self.sessions,
            session_index: &mut self.session_index,
            locks: &mut self.locks,
            lock_index: &mut self.lock_index,
            claims: &mut self.claims,
            claim_index: &mut self.claim_index,
        }
    }
    fn tables_ref(&self) -> TablesRef<'_> {
        TablesRef {
            sessions: &self.sessions,
            session_index: &self.session_index,
            locks: &self.locks,
            lock_index: &self.lock_index,
            claims: &self.claims,
            claim_index: &self.claim_index,
        }
    }
    fn tables_and_labels(&mut self) -> (Tables<'_>, &mut [LabelRow]) {
        (
            Tables {
                sessions: &mut self.sessions,
                session_index: &mut self.session_index,
                locks: &mut self.locks,
                lock_index: &mut self.lock_index,
                claims: &mut self.claims,
                claim_index: &mut self.claim_index,
            },
            &mut self.labels,
        )
    }
    fn labels_ref(&self) -> &[LabelRow] {
        &self.labels
    }
}

/// One row of the label table: the holder label of one open session. Opaque: only the
/// service reads it. While free, its bytes link the free rows.
#[derive(Clone, Debug)]
pub struct LabelRow {
    pub(crate) label: Label,
}

impl LabelRow {
    /// A free row.
    pub const EMPTY: LabelRow = LabelRow {
        label: Label::EMPTY,
    };
}

/// The free rows of the label table, linked through the rows themselves (no memory of
/// its own beyond the first free row).
#[derive(Clone, Copy, Debug)]
pub(crate) struct LabelPool {
    free: u32,
}

impl LabelPool {
    /// Threads every row onto the free list. O(rows).
    pub(crate) fn init(rows: &mut [LabelRow]) -> LabelPool {
        let n = rows.len() as u32;
        for (i, r) in rows.iter_mut().enumerate() {
            let next = if i as u32 + 1 < n { i as u32 + 1 } else { NIL };
            r.label = Label::free_link(next);
        }
        LabelPool {
            free: if n > 0 { 0 } else { NIL },
        }
    }

    pub(crate) fn is_full(&self) -> bool {
        self.free == NIL
    }

    /// Stores `label` in a free row and returns it, `None` when none is free. O(1).
    pub(crate) fn alloc(&mut self, rows: &mut [LabelRow], label: Label) -> Option<u32> {
        let slot = self.free;
        if slot == NIL {
            return None;
        }
        let row = &mut rows[slot as usize];
        self.free = row.label.link();
        row.label = label;
        Some(slot)
    }

    /// Frees a row taken by [`alloc`](Self::alloc). O(1).
    pub(crate) fn release(&mut self, rows: &mut [LabelRow], slot: u32) {
        rows[slot as usize].label = Label::free_link(self.free);
        self.free = slot;
    }
}

/// What a session's latest numbered request answered, for idempotent retries. The same
/// variants, in the same order, as when this was first written: its encoding is part of
/// the snapshot format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) enum Recorded {
    None,
    KeptAlive {
        expires_at: u64,
    },
    Granted {
        mode: Mode,
        token: u64,
    },
    Queued {
        mode: Mode,
        position: u32,
    },
    Busy,
    Released {
        token: u64,
    },
    Cancelled,
    // Version 2 of the snapshot format (appended: the variants above keep their bytes).
    /// An acquire in `Permits` mode granted (its mode is in the request fingerprint and in
    /// the claim; a replay answers from the claim).
    GrantedPermits {
        token: u64,
    },
    /// An acquire in `Permits` mode queued.
    QueuedPermits {
        position: u32,
    },
    Watching {
        holders: u32,
    },
    Unwatched,
}

/// One row of the session table. Opaque: only the service reads it.
#[derive(Clone, Debug)]
pub struct SessionRow {
    pub(crate) id: u64, // 0 = free row
    /// Its ttl while it is in no ttl class; in a class (whose ttl it shares), its
    /// neighbours in the class's deadline list instead (see [`SessionRow::due`]).
    pub(crate) ttl_or_due: u64,
    pub(crate) expires_at: u64,
    pub(crate) last_request: u64,
    /// The latest numbered request's reply, packed (see [`SessionRow::last_reply`]).
    pub(crate) last_value: u64,
    pub(crate) last_kind: u8,
    /// Fingerprint of the latest numbered request's arguments (lock name and mode), so a
    /// number reused for another lock or mode is refused instead of replayed.
    pub(crate) last_target: u64,
    /// This session's claims, in claim-sequence order.
    pub(crate) claims: Chain,
    /// Neighbours in the list of all sessions, in id order. While the row is free,
    /// `prev` is its predecessor in the free list instead (see `service::free_prev`).
    pub(crate) order: Link,
    /// Its ttl class, `NO_CLASS` if it is scheduled on its own.
    pub(crate) class: u8,
    /// Its row in the label table, `NIL` = no label.
    pub(crate) label: u32,
    pub(crate) aux: Aux,
}

impl SessionRow {
    /// A free row.
    pub const EMPTY: SessionRow = SessionRow {
        id: 0,
        ttl_or_due: 0,
        expires_at: 0,
        last_request: 0,
        last_value: 0,
        last_kind: 0,
        last_target: 0,
        claims: Chain::EMPTY,
        order: Link::EMPTY,
        class: NO_CLASS,
        label: NIL,
        aux: Aux::EMPTY,
    };
}

impl SessionRow {
    /// Its ttl (`classes` are the service's ttl classes). Cost: O(1).
    pub(crate) fn ttl(&self, classes: &[TtlClass; CLASSES]) -> u64 {
        match classes.get(self.class as usize) {
            Some(class) => class.ttl,
            None => self.ttl_or_due,
        }
    }
    /// Sets its ttl; it must be in no class. Cost: O(1).
    pub(crate) fn set_ttl(&mut self, ttl: u64) {
        debug_assert_eq!(self.class, NO_CLASS);
        self.ttl_or_due = ttl;
    }
    /// Puts it in class `c`, whose ttl must be its own, with neighbours `due`. Cost: O(1).
    pub(crate) fn join_class(&mut self, c: u8, due: Link) {
        self.class = c;
        self.set_due(due);
    }
    /// Takes it out of its class, whose ttl is `ttl`: the ttl is its own again. Cost: O(1).
    pub(crate) fn leave_class(&mut self, ttl: u64) {
        self.class = NO_CLASS;
        self.ttl_or_due = ttl;
    }
    /// Neighbours in its ttl class's deadline list (see `View::renew`); only while it is in
    /// a class. Cost: O(1).
    pub(crate) fn due(&self) -> Link {
        debug_assert_ne!(self.class, NO_CLASS);
        Link {
            prev: self.ttl_or_due as u32,
            next: (self.ttl_or_due >> 32) as u32,
        }
    }
    /// Sets both neighbours in its class. Cost: O(1).
    pub(crate) fn set_due(&mut self, due: Link) {
        debug_assert_ne!(self.class, NO_CLASS);
        self.ttl_or_due = due.prev as u64 | (due.next as u64) << 32;
    }
    /// Sets its predecessor in its class. Cost: O(1).
    pub(crate) fn set_due_prev(&mut self, prev: u32) {
        let next = self.due().next;
        self.set_due(Link { prev, next });
    }
    /// Sets its successor in its class. Cost: O(1).
    pub(crate) fn set_due_next(&mut self, next: u32) {
        let prev = self.due().prev;
        self.set_due(Link { prev, next });
    }

    /// What its latest numbered request answered. Cost: O(1).
    pub(crate) fn last_reply(&self) -> Recorded {
        let v = self.last_value;
        let mode = |k: u8| {
            if k & 1 == 0 {
                Mode::Exclusive
            } else {
                Mode::Shared
            }
        };
        match self.last_kind {
            1 => Recorded::KeptAlive { expires_at: v },
            k @ (2 | 3) => Recorded::Granted {
                mode: mode(k),
                token: v,
            },
            k @ (4 | 5) => Recorded::Queued {
                mode: mode(k),
                position: v as u32,
            },
            6 => Recorded::Busy,
            7 => Recorded::Released { token: v },
            8 => Recorded::Cancelled,
            9 => Recorded::GrantedPermits { token: v },
            10 => Recorded::QueuedPermits { position: v as u32 },
            11 => Recorded::Watching { holders: v as u32 },
            12 => Recorded::Unwatched,
            _ => Recorded::None,
        }
    }

    /// Records `reply` in a byte and a word (an enum with a payload would take 16 bytes).
    pub(crate) fn set_last_reply(&mut self, reply: Recorded) {
        // Only `Exclusive` and `Shared` are recorded with a mode (`Permits` has variants
        // of its own), so everything else counts as exclusive here.
        let shared = |m: Mode| (m == Mode::Shared) as u8;
        (self.last_kind, self.last_value) = match reply {
            Recorded::None => (0, 0),
            Recorded::KeptAlive { expires_at } => (1, expires_at),
            Recorded::Granted { mode, token } => (2 + shared(mode), token),
            Recorded::Queued { mode, position } => (4 + shared(mode), position as u64),
            Recorded::Busy => (6, 0),
            Recorded::Released { token } => (7, token),
            Recorded::Cancelled => (8, 0),
            Recorded::GrantedPermits { token } => (9, token),
            Recorded::QueuedPermits { position } => (10, position as u64),
            Recorded::Watching { holders } => (11, holders as u64),
            Recorded::Unwatched => (12, 0),
        };
    }
}

/// The `class` of a session in no ttl class.
pub(crate) const NO_CLASS: u8 = u8::MAX;

/// How many ttl classes a service tracks at once.
pub(crate) const CLASSES: usize = 4;

/// The sessions of one ttl in deadline order: only the head is in the session heap, so a
/// keep-alive moves a session to the tail in O(1) instead of sifting it through the heap
/// (a keep-alive's new deadline, now + ttl, is never earlier than any other member's).
/// `head == NIL`: the class is unused.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TtlClass {
    pub(crate) ttl: u64,
    pub(crate) head: u32,
    pub(crate) tail: u32,
}

impl TtlClass {
    pub(crate) const EMPTY: TtlClass = TtlClass {
        ttl: 0,
        head: NIL,
        tail: NIL,
    };
}

impl Indexed for SessionRow {
    fn key_hash(&self, key: Option<&NameKey>) -> u64 {
        session_hash(key, self.id)
    }
}

/// The index key of session `id` (for a session away from its home row). Cost: O(1).
#[cfg_attr(not(target_family = "wasm"), inline(always))]
pub(crate) fn session_hash(key: Option<&NameKey>, id: u64) -> u64 {
    crate::table::keyed_int_hash(key, id)
}

impl Row for SessionRow {
    fn aux(&self) -> &Aux {
        &self.aux
    }
    fn aux_mut(&mut self) -> &mut Aux {
        &mut self.aux
    }
    fn timer_key(&self) -> (u64, u64) {
        (self.expires_at, self.id)
    }
}

/// Whether a lock-delay ending at `until` still holds at `now`: no grant before `until`
/// (the bound is strict: at `until` itself a grant may come; 0 is no delay). The one
/// home of that rule, for rows and snapshot records. Cost: O(1).
#[inline(always)]
pub(crate) fn delay_holds(until: u64, now: u64) -> bool {
    until > now
}

/// One row of the lock table. Opaque: only the service reads it.
#[derive(Clone, Debug)]
pub struct LockRow {
    pub(crate) id: u64, // 0 = free row; otherwise creation order
    pub(crate) name: LockName,
    pub(crate) holders: List,
    pub(crate) waiters: List,
    /// The first of its watch claims (`NIL` = none), which also keeps the number of
    /// watchers and the last one (see [`ClaimRow::watch_meta`]); the rest follow through
    /// their `in_lock` links, in the order they began watching.
    pub(crate) watchers: u32,
    /// Permits its holders hold together (a semaphore; 0 otherwise).
    pub(crate) in_use: u32,
    /// No grant before this tick (lock-delay); scheduled in the heap while in the future.
    pub(crate) delay_until: u64,
    pub(crate) order: Link,
    /// Next lock in the tick's list of locks to try granting (`NIL` = end).
    pub(crate) dirty_next: u32,
    pub(crate) dirty: bool,
    pub(crate) aux: Aux,
}

impl LockRow {
    /// A free row.
    pub const EMPTY: LockRow = LockRow {
        id: 0,
        name: LockName::EMPTY,
        holders: List::EMPTY,
        waiters: List::EMPTY,
        watchers: NIL,
        in_use: 0,
        delay_until: 0,
        order: Link::EMPTY,
        dirty_next: NIL,
        dirty: false,
        aux: Aux::EMPTY,
    };
}

impl LockRow {
    /// Whether lock-delay still holds it at `now` ([`delay_holds`]). Cost: O(1).
    #[inline(always)]
    pub(crate) fn in_delay(&self, now: u64) -> bool {
        delay_holds(self.delay_until, now)
    }

    /// Its one claim, when it has exactly one (holder or waiter).
    pub(crate) fn only_claim(&self) -> u32 {
        if self.holders.head != NIL {
            self.holders.head
        } else {
            self.waiters.head
        }
    }
}

impl Indexed for LockRow {
    /// The lock index stores its entries' hash bits, so no index operation calls this:
    /// remove a lock row with `index_remove_hashed` and `View::name_hash`.
    fn key_hash(&self, key: Option<&NameKey>) -> u64 {
        crate::table::keyed_name_hash(key, self.name.as_str().as_bytes())
    }
}

impl Row for LockRow {
    fn aux(&self) -> &Aux {
        &self.aux
    }
    fn aux_mut(&mut self) -> &mut Aux {
        &mut self.aux
    }
    fn timer_key(&self) -> (u64, u64) {
        (self.delay_until, self.id)
    }
}

/// One row of the claim pool: a session's hold on, wait for, or watch of one lock.
#[derive(Clone, Debug)]
pub struct ClaimRow {
    /// The session's row, and in the top bit whether this claim is a watch (row numbers
    /// are < 2³¹); `NIL` = free row (no live value is all ones: the largest row number is
    /// 2³¹ − 2).
    who: u32,
    /// The lock's row, and in the top bit whether this claim holds it.
    at: u32,
    /// The mode: `limit` 0 is a plain lock (`count` 0 exclusive, 1 shared), else
    /// `Permits { count, limit }`. A watch has no mode: the first watch of a lock keeps
    /// the lock's number of watchers and its last watch here (see `watch_meta`), any
    /// other has 0 and 0.
    count: u32,
    limit: u32,
    /// Arrival order, unique: FIFO order and the heap's tie-breaker.
    pub(crate) seq: u64,
    /// Holding: the token. Waiting: the deadline (`u64::MAX` = forever).
    pub(crate) value: u64,
    /// Neighbours in the lock's holder list or wait queue.
    pub(crate) in_lock: Link,
    /// Neighbours in the session's claim list.
    pub(crate) in_session: Link,
    /// Neighbours in the list of all claims, in sequence order.
    pub(crate) order: Link,
    pub(crate) aux: Aux,
}

impl ClaimRow {
    /// A free row.
    pub const EMPTY: ClaimRow = ClaimRow {
        who: NIL,
        at: NIL,
        count: 0,
        limit: 0,
        seq: 0,
        value: 0,
        in_lock: Link::EMPTY,
        in_session: Link::EMPTY,
        order: Link::EMPTY,
        aux: Aux::EMPTY,
    };
}

const TOP: u32 = 1 << 31;

impl ClaimRow {
    /// The claiming session's row. Cost: O(1).
    pub(crate) fn session(&self) -> u32 {
        self.who & !TOP
    }
    /// The claimed lock's row. Cost: O(1).
    pub(crate) fn lock(&self) -> u32 {
        self.at & !TOP
    }
    /// The mode held or asked for (`Exclusive` for a watch). Cost: O(1).
    pub(crate) fn mode(&self) -> Mode {
        if self.watching() {
            return Mode::Exclusive;
        }
        match (self.limit, self.count) {
            (0, 0) => Mode::Exclusive,
            (0, _) => Mode::Shared,
            (limit, count) => Mode::Permits { count, limit },
        }
    }
    /// The permits it holds or asks for (0 unless `Permits`). Cost: O(1).
    pub(crate) fn permits(&self) -> u32 {
        if self.limit == 0 || self.watching() {
            0
        } else {
            self.count
        }
    }
    /// True for a hold, false for a wait or a watch. Cost: O(1).
    pub(crate) fn holding(&self) -> bool {
        self.at & TOP != 0
    }
    /// True for a watch. Cost: O(1).
    pub(crate) fn watching(&self) -> bool {
        self.who & TOP != 0
    }
    /// Fills the packed fields of a live hold or wait (rows < 2³¹). Cost: O(1).
    pub(crate) fn set(&mut self, session: u32, lock: u32, mode: Mode, holding: bool) {
        debug_assert!(session < TOP && lock < TOP);
        self.who = session;
        self.at = lock | if holding { TOP } else { 0 };
        (self.count, self.limit) = match mode {
            Mode::Exclusive => (0, 0),
            Mode::Shared => (1, 0),
            Mode::Permits { count, limit } => (count, limit),
        };
    }
    /// Fills the packed fields of a live watch. Cost: O(1).
    pub(crate) fn set_watch(&mut self, session: u32, lock: u32) {
        debug_assert!(session < TOP && lock < TOP);
        self.who = session | TOP;
        self.at = lock;
        (self.count, self.limit) = (0, 0);
    }
    /// Of a lock's first watch: how many watchers the lock has and which is the last.
    /// Cost: O(1).
    pub(crate) fn watch_meta(&self) -> (u32, u32) {
        debug_assert!(self.watching());
        (self.count, self.limit)
    }
    /// Sets what [`watch_meta`](Self::watch_meta) returns (0 and 0 on a watch that is not
    /// first). Cost: O(1).
    pub(crate) fn set_watch_meta(&mut self, watchers: u32, last: u32) {
        debug_assert!(self.watching());
        (self.count, self.limit) = (watchers, last);
    }
    /// Makes it a hold or a wait. Cost: O(1).
    pub(crate) fn set_holding(&mut self, holding: bool) {
        self.at = self.lock() | if holding { TOP } else { 0 };
    }
    /// Marks the row free. Cost: O(1).
    pub(crate) fn free(&mut self) {
        self.who = NIL;
    }
}

impl Indexed for ClaimRow {
    fn key_hash(&self, key: Option<&NameKey>) -> u64 {
        if self.watching() {
            watch_hash(key, self.session(), self.lock())
        } else {
            claim_hash(key, self.session(), self.lock())
        }
    }
}

impl Row for ClaimRow {
    fn aux(&self) -> &Aux {
        &self.aux
    }
    fn aux_mut(&mut self) -> &mut Aux {
        &mut self.aux
    }
    fn timer_key(&self) -> (u64, u64) {
        (self.value, self.seq)
    }
}

/// The index key of session row `session`'s hold or wait on lock row `lock`. Cost: O(1).
pub(crate) fn claim_hash(key: Option<&NameKey>, session: u32, lock: u32) -> u64 {
    crate::table::keyed_int_hash(key, ((session as u64) << 32) | lock as u64)
}

/// The index key of a watch: the lock's row with the top bit set, which no row number
/// has, so a session's watch and its hold or wait on the same lock never share a key.
pub(crate) fn watch_hash(key: Option<&NameKey>, session: u32, lock: u32) -> u64 {
    claim_hash(key, session, lock | TOP)
}

/// Links of an intrusive doubly-linked list (row numbers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Link {
    pub(crate) prev: u32,
    pub(crate) next: u32,
}

impl Link {
    pub(crate) const EMPTY: Link = Link {
        prev: NIL,
        next: NIL,
    };
}

/// Head, tail and length of an intrusive list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct List {
    pub(crate) head: u32,
    pub(crate) tail: u32,
    pub(crate) len: u32,
}

impl List {
    pub(crate) const EMPTY: List = List {
        head: NIL,
        tail: NIL,
        len: 0,
    };

    /// Appends `slot` (whose link is reached through `link`). O(1).
    pub(crate) fn push_back<T>(
        &mut self,
        rows: &mut [T],
        slot: u32,
        link: fn(&mut T) -> &mut Link,
    ) {
        let l = link(&mut rows[slot as usize]);
        l.prev = self.tail;
        l.next = NIL;
        if self.tail == NIL {
            self.head = slot;
        } else {
            link(&mut rows[self.tail as usize]).next = slot;
        }
        self.tail = slot;
        self.len += 1;
    }

    /// Inserts `slot` keeping the list sorted by `key` (scans from the tail, so appending
    /// in order is O(1)). Used for a lock's holders, which grants append in sequence order
    /// (so in practice this appends); kept sorted by construction rather than by assumption.
    pub(crate) fn insert_sorted<T>(
        &mut self,
        rows: &mut [T],
        slot: u32,
        link: fn(&mut T) -> &mut Link,
        key: fn(&T) -> u64,
    ) {
        let k = key(&rows[slot as usize]);
        let mut after = self.tail;
        while after != NIL && key(&rows[after as usize]) > k {
            after = link(&mut rows[after as usize]).prev;
        }
        let next = if after == NIL {
            self.head
        } else {
            link(&mut rows[after as usize]).next
        };
        {
            let l = link(&mut rows[slot as usize]);
            l.prev = after;
            l.next = next;
        }
        if after == NIL {
            self.head = slot;
        } else {
            link(&mut rows[after as usize]).next = slot;
        }
        if next == NIL {
            self.tail = slot;
        } else {
            link(&mut rows[next as usize]).prev = slot;
        }
        self.len += 1;
    }

    /// Unlinks `slot`. O(1).
    pub(crate) fn remove<T>(&mut self, rows: &mut [T], slot: u32, link: fn(&mut T) -> &mut Link) {
        let Link { prev, next } = *link(&mut rows[slot as usize]);
        if prev == NIL {
            self.head = next;
        } else {
            link(&mut rows[prev as usize]).next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            link(&mut rows[next as usize]).prev = prev;
        }
        *link(&mut rows[slot as usize]) = Link::EMPTY;
        self.len -= 1;
    }
}

/// Head and tail of an intrusive list whose length nobody needs (a session's claims).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Chain {
    pub(crate) head: u32,
    pub(crate) tail: u32,
}

impl Chain {
    pub(crate) const EMPTY: Chain = Chain {
        head: NIL,
        tail: NIL,
    };

    /// Appends `slot` (whose link is reached through `link`). O(1).
    pub(crate) fn push_back<T>(
        &mut self,
        rows: &mut [T],
        slot: u32,
        link: fn(&mut T) -> &mut Link,
    ) {
        let mut list = self.as_list();
        list.push_back(rows, slot, link);
        *self = Chain {
            head: list.head,
            tail: list.tail,
        };
    }

    /// Unlinks `slot`. O(1).
    pub(crate) fn remove<T>(&mut self, rows: &mut [T], slot: u32, link: fn(&mut T) -> &mut Link) {
        let mut list = self.as_list();
        list.remove(rows, slot, link);
        *self = Chain {
            head: list.head,
            tail: list.tail,
        };
    }

    fn as_list(self) -> List {
        // The length is not kept; `List` only counts it (1 so a removal cannot underflow).
        List {
            head: self.head,
            tail: self.tail,
            len: 1,
        }
    }
}

impl Recorded {
    /// The reply a repeat of the request returns (an acquire's repeat is answered from the
    /// claim now instead, see `LockService::acquire`).
    pub(crate) fn reply(self) -> crate::Reply {
        use crate::{Reply, Tick, Token};
        match self {
            Recorded::KeptAlive { expires_at } => Reply::KeptAlive {
                expires_at: Tick(expires_at),
            },
            Recorded::Granted { mode, token } => Reply::Granted {
                mode,
                token: Token(token),
            },
            Recorded::Queued { mode, position } => Reply::Queued { mode, position },
            Recorded::Busy => Reply::Busy,
            Recorded::Released { token } => Reply::Released {
                token: Token(token),
            },
            Recorded::Cancelled => Reply::Cancelled,
            // An acquire's repeat is answered by `replay_acquire`, never here; these two
            // say what such a repeat says when the claim is gone.
            Recorded::GrantedPermits { token } => Reply::HoldEnded {
                token: Token(token),
            },
            Recorded::QueuedPermits { .. } => Reply::WaitEnded,
            Recorded::Watching { holders } => Reply::Watching { holders },
            Recorded::Unwatched => Reply::Unwatched,
            // `check_request` never replays a session with nothing recorded.
            Recorded::None => Reply::Closed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The claim index's keys: each (session row, lock row) pair has its own, and a watch's
    /// differs from a hold's or wait's on the same lock (`mix` is a bijection, so this
    /// is exact, not likely: the packing must be one-to-one).
    #[test]
    fn claim_and_watch_keys_are_all_distinct() {
        let mut keys = std::collections::HashSet::new();
        for s in [0u32, 1, 2, 63, 1 << 20, TOP - 2] {
            for l in [0u32, 1, 2, 63, 1 << 20, TOP - 2] {
                assert!(keys.insert(claim_hash(None, s, l)), "claim ({s}, {l})");
                assert!(keys.insert(watch_hash(None, s, l)), "watch ({s}, {l})");
            }
        }
    }

    /// Claim keys (row pairs, which a snapshot's author steers through its session ids)
    /// chosen to share one home bucket under the public mixer do not share one under a
    /// key: 64 such pairs land in at least 48 different buckets of 512, where the public
    /// mixer puts all 64 in one.
    #[test]
    fn claim_keys_chosen_to_collide_are_spread_out_by_a_key() {
        use crate::table::{home, tag_of};
        let n = 512;
        let key = NameKey([0x0123_4567_89ab_cdef, 0xfedc_ba98_7654_3210]);
        type KeyHash = fn(Option<&NameKey>, u32, u32) -> u64;
        let kinds: [(&str, KeyHash); 2] = [("claim", claim_hash), ("watch", watch_hash)];
        for (kind, hash) in kinds {
            let pairs: std::vec::Vec<(u32, u32)> = (0u32..)
                .map(|i| (i % 256, i / 256))
                .filter(|(s, l)| home(tag_of(hash(None, *s, *l)), n) == 0)
                .take(64)
                .collect();
            let homes: std::collections::BTreeSet<usize> = pairs
                .iter()
                .map(|(s, l)| home(tag_of(hash(Some(&key), *s, *l)), n))
                .collect();
            assert!(homes.len() >= 48, "{kind}: {} buckets", homes.len());
        }
    }

    /// The packed reply of a session row gives back every variant it was given.
    #[test]
    fn a_recorded_reply_round_trips_through_its_packed_form() {
        let all = [
            Recorded::None,
            Recorded::KeptAlive { expires_at: 17 },
            Recorded::Granted {
                mode: Mode::Exclusive,
                token: u64::MAX,
            },
            Recorded::Granted {
                mode: Mode::Shared,
                token: 3,
            },
            Recorded::Queued {
                mode: Mode::Exclusive,
                position: u32::MAX,
            },
            Recorded::Queued {
                mode: Mode::Shared,
                position: 1,
            },
            Recorded::Busy,
            Recorded::Released { token: 9 },
            Recorded::Cancelled,
            Recorded::GrantedPermits { token: u64::MAX },
            Recorded::QueuedPermits { position: u32::MAX },
            Recorded::Watching { holders: 7 },
            Recorded::Unwatched,
        ];
        let mut row = SessionRow::EMPTY;
        for r in all {
            row.set_last_reply(r);
            assert_eq!(row.last_reply(), r);
        }
    }
}
