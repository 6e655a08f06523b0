//! Fixed-capacity tables over caller-provided rows: a free list, a hash index (a public,
//! seedless hash, or SipHash-1-3 under the host's [`NameKey`]) and an indexed min-heap
//! of deadlines.
//!
//! The hash index of each of the service's tables is a dense array of its own (two
//! [`Bucket`]s or [`TaggedBucket`]s per table row, so the load stays ≤ 50 %), apart
//! from the rows: a probe reads a 4- or 8-byte bucket from that array instead of
//! landing on a random row of the table, so the whole index of a large table stays in
//! cache while its rows do not, and it reads a row only to confirm a match. The heap
//! array is a column of the rows: row `i` carries slot `i` of its table's heap ([`Aux`]).
//!
//! In the tables keyed by names (locks, a gate's resources) each bucket also stores the
//! high 32 bits of its entry's hash ([`TaggedBucket`]). A probe compares those bits
//! first and reads a row only when they match (a false match has probability 2⁻³²), and
//! an entry's home bucket is computed from the stored bits alone, so a deletion's
//! backward shift never reads a row or re-hashes a name. Tables keyed by integers
//! (sessions, claims) store row numbers only ([`Bucket`]): their key is one load from
//! the row and one mix (a SipHash of 8 bytes under a key). A gate's rows carry their own two buckets (a gate is
//! append-only and small), so its rows are its index array too.

pub(crate) const NIL: u32 = u32::MAX;

/// Buckets of a table's hash index per row of the table: its load stays ≤ 50 %, so an
/// empty bucket always ends a probe. The index slices of a
/// [`SliceStorage`](crate::SliceStorage) have `rows × BUCKETS_PER_ROW` elements.
pub const BUCKETS_PER_ROW: usize = 2;

/// The buckets of a table's hash index, twice as many as the table has rows (so the load
/// stays ≤ 50 %): a dense array of [`Bucket`]s or [`TaggedBucket`]s, or a gate's rows,
/// which carry two buckets each.
pub(crate) trait BucketArray {
    /// How many buckets.
    fn buckets(&self) -> usize;
    /// Bucket `b`: its row number (`NIL` = empty) and, if this index stores them, the
    /// high hash bits of its entry.
    fn bucket(&self, b: usize) -> (u32, Option<u32>);
    fn set_bucket(&mut self, b: usize, slot: u32, tag: u32);
}

/// One bucket of the hash index of a table keyed by names (locks): a row number and the
/// high 32 bits of its entry's name hash, so a probe never compares or re-hashes a name
/// it need not. Opaque: only the service reads it. 8 bytes; two per lock row.
#[derive(Clone, Copy, Debug)]
pub struct TaggedBucket {
    slot: u32,
    tag: u32,
}

impl TaggedBucket {
    /// An empty bucket.
    pub const EMPTY: TaggedBucket = TaggedBucket { slot: NIL, tag: 0 };
}

impl BucketArray for [TaggedBucket] {
    fn buckets(&self) -> usize {
        self.len()
    }
    fn bucket(&self, b: usize) -> (u32, Option<u32>) {
        let x = self[b];
        (x.slot, Some(x.tag))
    }
    fn set_bucket(&mut self, b: usize, slot: u32, tag: u32) {
        self[b] = TaggedBucket { slot, tag };
    }
}

/// One bucket of the hash index of a table keyed by integers (sessions, claims): a row
/// number only, since such a key is one load from the row and one mix (or, under a key,
/// one SipHash of 8 bytes). Opaque: only the
/// service reads it. 4 bytes; two per session or claim row.
#[derive(Clone, Copy, Debug)]
pub struct Bucket {
    slot: u32,
}

impl Bucket {
    /// An empty bucket.
    pub const EMPTY: Bucket = Bucket { slot: NIL };
}

impl BucketArray for [Bucket] {
    fn buckets(&self) -> usize {
        self.len()
    }
    fn bucket(&self, b: usize) -> (u32, Option<u32>) {
        (self[b].slot, None)
    }
    fn set_bucket(&mut self, b: usize, slot: u32, _: u32) {
        self[b].slot = slot;
    }
}

/// Per-row bookkeeping of a table with deadlines and a free list: one slot of the heap
/// array and this entry's heap position.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Aux {
    /// One slot of the heap array (a row number).
    heap: u32,
    /// Where this entry sits in the heap array, `NIL` when it has no pending deadline.
    /// Also the free-list link while the row is free.
    heap_pos: u32,
}

impl Aux {
    pub(crate) const EMPTY: Aux = Aux {
        heap: NIL,
        heap_pos: NIL,
    };
}

/// A row type whose table has a hash index.
pub(crate) trait Indexed {
    /// The hash of this entry's key under the service's index key (only called on live
    /// rows).
    fn key_hash(&self, key: Option<&NameKey>) -> u64;
}

/// A row type that a [`TableState`] can allocate and schedule.
pub(crate) trait Row {
    fn aux(&self) -> &Aux;
    fn aux_mut(&mut self) -> &mut Aux;
    /// (deadline, unique tie-breaker): a total order, so the heap pops in the same order
    /// whatever its layout (a restored replica behaves like one that never restarted).
    fn timer_key(&self) -> (u64, u64);
}

/// Counters of one table; the rows live in the host's storage.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TableState {
    pub(crate) len: u32,
    free: u32,
    heap_len: u32,
}

/// The high bits of a hash that a bucket stores.
pub(crate) fn tag_of(hash: u64) -> u32 {
    (hash >> 32) as u32
}

/// The home bucket of a stored tag among `n` buckets: Lemire's multiply-shift range
/// reduction (no power-of-two requirement; `n` < 2³² since a table has < 2³¹ rows). It
/// keeps the hash's *high* bits, so keys must be well mixed: see `name_hash`.
pub(crate) fn home(tag: u32, n: usize) -> usize {
    ((tag as u64 * n as u64) >> 32) as usize
}

impl TableState {
    /// Threads every row onto the free list and clears the index, which has two buckets
    /// per row. O(capacity).
    pub(crate) fn init<T: Row, I: BucketArray + ?Sized>(
        rows: &mut [T],
        index: &mut I,
    ) -> TableState {
        debug_assert_eq!(rows.len() * BUCKETS_PER_ROW, index.buckets());
        for b in 0..index.buckets() {
            index.set_bucket(b, NIL, 0);
        }
        let n = rows.len() as u32;
        for (i, r) in rows.iter_mut().enumerate() {
            let a = r.aux_mut();
            *a = Aux::EMPTY;
            a.heap_pos = if i as u32 + 1 < n { i as u32 + 1 } else { NIL };
        }
        TableState {
            len: 0,
            free: if n > 0 { 0 } else { NIL },
            heap_len: 0,
        }
    }

    /// A table whose rows are taken in order and never freed (a gate's): no free list.
    /// `rows` are its index too (each carries its two buckets).
    pub(crate) fn init_append_only<T>(rows: &mut [T]) -> TableState
    where
        [T]: BucketArray,
    {
        for b in 0..rows.buckets() {
            rows.set_bucket(b, NIL, 0);
        }
        let n = rows.len() as u32;
        TableState {
            len: 0,
            free: if n > 0 { 0 } else { NIL },
            heap_len: 0,
        }
    }

    /// Takes the next row of an append-only table. O(1).
    pub(crate) fn alloc_append_only(&mut self, capacity: usize) -> Option<u32> {
        let slot = self.free;
        if slot == NIL {
            return None;
        }
        self.free = if slot as usize + 1 < capacity {
            slot + 1
        } else {
            NIL
        };
        self.len += 1;
        Some(slot)
    }

    pub(crate) fn is_full(&self) -> bool {
        self.free == NIL
    }

    /// Takes a free row (its heap position is reset to `NIL`). O(1).
    #[cfg_attr(not(target_family = "wasm"), inline(always))]
    pub(crate) fn alloc<T: Row>(&mut self, rows: &mut [T]) -> Option<u32> {
        let slot = self.free;
        if slot == NIL {
            return None;
        }
        let a = rows[slot as usize].aux_mut();
        self.free = a.heap_pos;
        a.heap_pos = NIL;
        self.len += 1;
        Some(slot)
    }

    /// Returns a row to the free list. It must be out of the index and the heap. O(1).
    pub(crate) fn release<T: Row>(&mut self, rows: &mut [T], slot: u32) {
        debug_assert_eq!(rows[slot as usize].aux().heap_pos, NIL);
        rows[slot as usize].aux_mut().heap_pos = self.free;
        self.free = slot;
        self.len -= 1;
    }

    // ---- a free list that can also give up a chosen row (the session table's) ----
    //
    // A free row's predecessor in the free list is kept in a field of the row that only
    // live rows use (`prev`), so taking any free row out of the list is O(1).

    /// [`init`](Self::init), with each free row's predecessor set. O(capacity).
    pub(crate) fn init_linked<T: Row, I: BucketArray + ?Sized>(
        rows: &mut [T],
        index: &mut I,
        prev: fn(&mut T) -> &mut u32,
    ) -> TableState {
        let st = Self::init(rows, index);
        for (i, r) in rows.iter_mut().enumerate() {
            *prev(r) = if i == 0 { NIL } else { i as u32 - 1 };
        }
        st
    }

    /// Takes free row `slot` out of a linked free list (its heap position is reset to
    /// `NIL`). `slot` must be free. O(1).
    pub(crate) fn alloc_at<T: Row>(
        &mut self,
        rows: &mut [T],
        slot: u32,
        prev: fn(&mut T) -> &mut u32,
    ) {
        let row = &mut rows[slot as usize];
        let before = *prev(row);
        let after = row.aux().heap_pos;
        row.aux_mut().heap_pos = NIL;
        *prev(row) = NIL;
        if before == NIL {
            debug_assert_eq!(self.free, slot);
            self.free = after;
        } else {
            rows[before as usize].aux_mut().heap_pos = after;
        }
        if after != NIL {
            *prev(&mut rows[after as usize]) = before;
        }
        self.len += 1;
    }

    /// [`alloc`](Self::alloc) from a linked free list. O(1).
    pub(crate) fn alloc_linked<T: Row>(
        &mut self,
        rows: &mut [T],
        prev: fn(&mut T) -> &mut u32,
    ) -> Option<u32> {
        let slot = self.free;
        if slot == NIL {
            return None;
        }
        self.alloc_at(rows, slot, prev);
        Some(slot)
    }

    /// [`release`](Self::release) onto a linked free list. O(1).
    pub(crate) fn release_linked<T: Row>(
        &mut self,
        rows: &mut [T],
        slot: u32,
        prev: fn(&mut T) -> &mut u32,
    ) {
        let head = self.free;
        *prev(&mut rows[slot as usize]) = NIL;
        if head != NIL {
            *prev(&mut rows[head as usize]) = slot;
        }
        self.release(rows, slot);
    }

    // ---- hash index: linear probing with backward-shift deletion ----

    /// The row of `rows` whose key hashes to `hash` and satisfies `eq`, looked up in
    /// `index` (one element per row). Reads only rows whose stored hash bits match.
    /// O(1) expected.
    #[cfg_attr(not(target_family = "wasm"), inline(always))]
    pub(crate) fn find<T, I: BucketArray + ?Sized>(
        index: &I,
        rows: &[T],
        hash: u64,
        eq: impl Fn(&T) -> bool,
    ) -> Option<u32> {
        let n = index.buckets();
        if n == 0 {
            return None;
        }
        let tag = tag_of(hash);
        let mut b = home(tag, n);
        // At most half the buckets are used, so an empty one always ends the probe.
        loop {
            let (slot, t) = index.bucket(b);
            if slot == NIL {
                return None;
            }
            // A stored tag that differs rules the row out without reading it.
            if t.is_none_or(|t| t == tag) && eq(&rows[slot as usize]) {
                return Some(slot);
            }
            b = if b + 1 == n { 0 } else { b + 1 };
        }
    }

    /// Indexes a live row under its key, whose hash is `hash`. O(1) expected.
    pub(crate) fn index_insert<I: BucketArray + ?Sized>(index: &mut I, slot: u32, hash: u64) {
        let n = index.buckets();
        let tag = tag_of(hash);
        let mut b = home(tag, n);
        while index.bucket(b).0 != NIL {
            b = if b + 1 == n { 0 } else { b + 1 };
        }
        index.set_bucket(b, slot, tag);
    }

    /// Removes a row of `rows` from `index`. O(1) expected.
    pub(crate) fn index_remove<T: Indexed, I: BucketArray + ?Sized>(
        index: &mut I,
        rows: &[T],
        slot: u32,
        key: Option<&NameKey>,
    ) {
        let hash = rows[slot as usize].key_hash(key);
        Self::index_remove_hashed(index, rows, slot, hash, key);
    }

    /// [`index_remove`](Self::index_remove) of a row whose key hash the caller has. With
    /// stored hash bits it reads no row: homes come from the buckets.
    pub(crate) fn index_remove_hashed<T: Indexed, I: BucketArray + ?Sized>(
        index: &mut I,
        rows: &[T],
        slot: u32,
        hash: u64,
        key: Option<&NameKey>,
    ) {
        let n = index.buckets();
        let mut b = home(tag_of(hash), n);
        while index.bucket(b).0 != slot {
            b = if b + 1 == n { 0 } else { b + 1 };
        }
        // The caller's hash is the one the entry was indexed under: its stored bits, or,
        // in an index without them, its row's key hash (a keyed name hash is stored).
        debug_assert!(index.bucket(b).1.map_or_else(
            || hash == rows[slot as usize].key_hash(key),
            |t| t == tag_of(hash)
        ));
        // Backward shift: pull later members of the probe run into the hole.
        let mut hole = b;
        let mut j = b;
        loop {
            j = if j + 1 == n { 0 } else { j + 1 };
            let (s, t) = index.bucket(j);
            if s == NIL {
                break;
            }
            let t = t.unwrap_or_else(|| tag_of(rows[s as usize].key_hash(key)));
            let h = home(t, n);
            // Move s into the hole unless its home lies cyclically in (hole, j].
            let stays = if hole <= j {
                hole < h && h <= j
            } else {
                hole < h || h <= j
            };
            if !stays {
                index.set_bucket(hole, s, t);
                hole = j;
            }
        }
        index.set_bucket(hole, NIL, 0);
    }

    // ---- indexed binary min-heap of deadlines ----

    fn key_at<T: Row>(rows: &[T], pos: u32) -> (u64, u64) {
        rows[rows[pos as usize].aux().heap as usize].timer_key()
    }

    fn place<T: Row>(rows: &mut [T], pos: u32, slot: u32) {
        rows[pos as usize].aux_mut().heap = slot;
        rows[slot as usize].aux_mut().heap_pos = pos;
    }

    fn sift_up<T: Row>(rows: &mut [T], mut pos: u32) {
        let slot = rows[pos as usize].aux().heap;
        let key = rows[slot as usize].timer_key();
        while pos > 0 {
            let parent = (pos - 1) / 2;
            if Self::key_at(rows, parent) <= key {
                break;
            }
            let p = rows[parent as usize].aux().heap;
            Self::place(rows, pos, p);
            pos = parent;
        }
        Self::place(rows, pos, slot);
    }

    fn sift_down<T: Row>(&self, rows: &mut [T], mut pos: u32) {
        let slot = rows[pos as usize].aux().heap;
        let key = rows[slot as usize].timer_key();
        loop {
            let l = 2 * pos + 1;
            if l >= self.heap_len {
                break;
            }
            let r = l + 1;
            let c = if r < self.heap_len && Self::key_at(rows, r) < Self::key_at(rows, l) {
                r
            } else {
                l
            };
            if key <= Self::key_at(rows, c) {
                break;
            }
            let cs = rows[c as usize].aux().heap;
            Self::place(rows, pos, cs);
            pos = c;
        }
        Self::place(rows, pos, slot);
    }

    /// Schedules a live row by its `timer_key`, or reschedules it if already scheduled.
    /// O(log n).
    pub(crate) fn schedule<T: Row>(&mut self, rows: &mut [T], slot: u32) {
        let pos = rows[slot as usize].aux().heap_pos;
        if pos == NIL {
            let pos = self.heap_len;
            self.heap_len += 1;
            Self::place(rows, pos, slot);
            Self::sift_up(rows, pos);
        } else {
            Self::sift_up(rows, pos);
            let pos = rows[slot as usize].aux().heap_pos;
            self.sift_down(rows, pos);
        }
    }

    /// Gives `old`'s place in the heap to `new` (not scheduled) and unschedules `old`.
    /// O(log n).
    pub(crate) fn replace<T: Row>(&mut self, rows: &mut [T], old: u32, new: u32) {
        let pos = rows[old as usize].aux().heap_pos;
        debug_assert!(pos != NIL && rows[new as usize].aux().heap_pos == NIL);
        rows[old as usize].aux_mut().heap_pos = NIL;
        Self::place(rows, pos, new);
        // The same deadline with a smaller tie-breaker can sort before `old`.
        Self::sift_up(rows, pos);
        let pos = rows[new as usize].aux().heap_pos;
        self.sift_down(rows, pos);
    }

    /// Removes a row's deadline if it has one. O(1) if it has none, else O(log n).
    #[inline(always)]
    pub(crate) fn unschedule<T: Row>(&mut self, rows: &mut [T], slot: u32) {
        let pos = rows[slot as usize].aux().heap_pos;
        if pos != NIL {
            self.unschedule_at(rows, slot, pos);
        }
    }

    fn unschedule_at<T: Row>(&mut self, rows: &mut [T], slot: u32, pos: u32) {
        rows[slot as usize].aux_mut().heap_pos = NIL;
        self.heap_len -= 1;
        let last = self.heap_len;
        if pos != last {
            let moved = rows[last as usize].aux().heap;
            Self::place(rows, pos, moved);
            Self::sift_up(rows, pos);
            let p = rows[moved as usize].aux().heap_pos;
            self.sift_down(rows, p);
        }
        rows[last as usize].aux_mut().heap = NIL;
    }

    /// The row with the earliest deadline, if any. O(1).
    pub(crate) fn earliest<T: Row>(&self, rows: &[T]) -> Option<u32> {
        if self.heap_len == 0 {
            None
        } else {
            Some(rows[0].aux().heap)
        }
    }

    pub(crate) fn is_scheduled<T: Row>(rows: &[T], slot: u32) -> bool {
        rows[slot as usize].aux().heap_pos != NIL
    }
}

/// A secret key for the indexes of a service or a gate
/// ([`LockService::set_name_key`](crate::LockService::set_name_key)).
///
/// Without one, the index hashes names with a fixed, public function, so whoever chooses
/// lock names (a tenant of a shared server) can choose many that share a home bucket, and
/// make every lookup of them probe past all the others: O(n) per operation, for every
/// client of the service. With a key the names are hashed by SipHash-1-3 under it, which
/// an attacker who does not know the key cannot aim at. A service's session and claim
/// indexes are hashed under it too: the service hands session ids out itself, but a
/// snapshot's ids are its author's
/// ([`LockService::restore_keyed`](crate::LockService::restore_keyed)). The key places
/// rows in the indexes and nothing else: replies, events, queries and snapshots are the
/// same whatever the key (and without one), so replicas may each pick their own. Pick it
/// from a random source, and keep it secret (it is not in snapshots).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct NameKey(pub [u64; 2]);

impl NameKey {
    /// Bytes in a key's byte form ([`from_bytes`](Self::from_bytes)): 16.
    pub const LEN: usize = 16;

    /// The key whose words are `bytes[0..8]` and `bytes[8..16]`, little-endian: the one
    /// byte form every binding takes (16 bytes from the host's random source), so a key
    /// means the same in Rust, C, Python and JavaScript. Cost: O(1). Errors: none (the
    /// length is in the type; a binding checks it before calling).
    pub const fn from_bytes(bytes: [u8; Self::LEN]) -> NameKey {
        let [a0, a1, a2, a3, a4, a5, a6, a7, b0, b1, b2, b3, b4, b5, b6, b7] = bytes;
        NameKey([
            u64::from_le_bytes([a0, a1, a2, a3, a4, a5, a6, a7]),
            u64::from_le_bytes([b0, b1, b2, b3, b4, b5, b6, b7]),
        ])
    }
}

impl core::fmt::Debug for NameKey {
    /// Never prints the key.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("NameKey(..)")
    }
}

/// The index hash of `bytes` under `key` (the unkeyed [`name_hash`] without one). Cost:
/// O(bytes): about 20 instructions per 8 bytes unkeyed, about 4 times that keyed.
#[cfg_attr(not(target_family = "wasm"), inline(always))]
pub(crate) fn keyed_name_hash(key: Option<&NameKey>, bytes: &[u8]) -> u64 {
    match key {
        None => name_hash(bytes),
        Some(k) => siphash::<1, 3>(k.0, bytes),
    }
}

/// The index hash of an integer key (a session id, a claim's two row numbers) under
/// `key`: [`mix`] without one, SipHash-1-3 of its 8 little-endian bytes with one, so that
/// ids or rows chosen to share a probe run under the public mixer (a snapshot's author
/// chooses its session ids) are spread out. Cost: O(1): a few instructions unkeyed, about
/// 70 keyed.
#[cfg_attr(not(target_family = "wasm"), inline(always))]
pub(crate) fn keyed_int_hash(key: Option<&NameKey>, x: u64) -> u64 {
    match key {
        None => mix(x),
        Some(k) => siphash::<1, 3>(k.0, &x.to_le_bytes()),
    }
}

/// SipHash-c-d of `bytes` under `key` (Aumasson and Bernstein, 2012): `c` rounds per
/// 8-byte word, `d` to finalise. 1-3 is what Rust's `HashMap` uses against hash flooding.
fn siphash<const C: usize, const D: usize>(key: [u64; 2], bytes: &[u8]) -> u64 {
    let mut v = [
        key[0] ^ 0x736f_6d65_7073_6575,
        key[1] ^ 0x646f_7261_6e64_6f6d,
        key[0] ^ 0x6c79_6765_6e65_7261,
        key[1] ^ 0x7465_6462_7974_6573,
    ];
    let round = |v: &mut [u64; 4]| {
        v[0] = v[0].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(13) ^ v[0];
        v[0] = v[0].rotate_left(32);
        v[2] = v[2].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(16) ^ v[2];
        v[0] = v[0].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(21) ^ v[0];
        v[2] = v[2].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(17) ^ v[2];
        v[2] = v[2].rotate_left(32);
    };
    let absorb = |v: &mut [u64; 4], m: u64| {
        v[3] ^= m;
        for _ in 0..C {
            round(v);
        }
        v[0] ^= m;
    };
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        absorb(&mut v, u64::from_le_bytes(w));
    }
    let mut last = [0u8; 8];
    let rest = chunks.remainder();
    last[..rest.len()].copy_from_slice(rest);
    last[7] = bytes.len() as u8;
    absorb(&mut v, u64::from_le_bytes(last));
    v[2] ^= 0xff;
    for _ in 0..D {
        round(&mut v);
    }
    v[0] ^ v[1] ^ v[2] ^ v[3]
}

/// The index hash of a name: a word-at-a-time multiply-rotate over the bytes, finalised
/// by [`mix`]. `home` keeps the high bits, so they must depend on every byte
/// (plain FNV-1a's do not: `lock/0001`, `lock/0002`… shared a home bucket and probed
/// linearly), and one multiply per 8 bytes is a shorter dependency chain than FNV-1a's
/// one per byte. Seedless and the same on every platform; it only places rows in the
/// index and is never persisted. (Unkeyed, integer keys are hashed by [`mix`] alone;
/// `fnv1a` stays as it is for the persisted request fingerprint.)
#[cfg_attr(not(target_family = "wasm"), inline(always))]
pub(crate) fn name_hash(bytes: &[u8]) -> u64 {
    // Eight bytes per step (little-endian, so the same on every platform), then the
    // finaliser; the length goes in first so trailing NULs still change the hash.
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut h = bytes.len() as u64;
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        if let Ok(w) = <[u8; 8]>::try_from(c) {
            h = (h ^ u64::from_le_bytes(w)).wrapping_mul(K).rotate_left(29);
        }
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        h = (h ^ tail_word(rest)).wrapping_mul(K).rotate_left(29);
    }
    mix(h)
}

/// The 1 to 7 bytes after the last whole word, as one word, with two or three loads
/// instead of a byte loop: 4 to 7 bytes as two overlapping 4-byte words, 1 to 3 as their
/// first, middle and last byte. Every byte counts; together with the length, which
/// `name_hash` folds in first, that is all a hash needs.
#[cfg_attr(not(target_family = "wasm"), inline(always))]
fn tail_word(rest: &[u8]) -> u64 {
    let n = rest.len();
    let le32 = |b: &[u8]| match <[u8; 4]>::try_from(b) {
        Ok(w) => u32::from_le_bytes(w) as u64,
        Err(_) => 0,
    };
    if n >= 4 {
        le32(&rest[..4]) | (le32(&rest[n - 4..]) << 32)
    } else {
        rest[0] as u64 | (rest[n / 2] as u64) << 8 | (rest[n - 1] as u64) << 16
    }
}

/// FNV-1a, 64 bit: fixed, seedless, the same on every platform.
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// A fixed 64-bit mixer (splitmix64's finaliser) for integer keys.
pub(crate) fn mix(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Two distinct names, `{prefix}{i}`, whose public hashes share the 32 bits an index
/// stores (a birthday search: about 2^16 names, ~0.1 s), for the tests of the indexes
/// that store those bits (the lock table's and the gate's).
#[cfg(test)]
pub(crate) fn names_sharing_a_tag(prefix: &str) -> (std::string::String, std::string::String) {
    let mut seen = std::collections::HashMap::new();
    (0u32..)
        .find_map(|i| {
            let name = std::format!("{prefix}{i}");
            let tag = tag_of(name_hash(name.as_bytes()));
            seen.insert(tag, name.clone()).map(|first| (first, name))
        })
        .unwrap_or_else(|| unreachable!("2^32 names, 2^32 tags"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SipHash-2-4 as this module computes it agrees with the standard library's (the
    /// reference algorithm) on every length from 0 to 64 bytes and several keys; 1-3 is
    /// the same code with other round counts.
    #[test]
    fn siphash_agrees_with_the_reference() {
        #[allow(deprecated)]
        use core::hash::{Hasher, SipHasher};
        let bytes: std::vec::Vec<u8> = (0..64u8).map(|b| b.wrapping_mul(37) ^ 0x5a).collect();
        for key in [
            [0, 0],
            [1, 2],
            [0x0706_0504_0302_0100, 0x0f0e_0d0c_0b0a_0908],
        ] {
            for n in 0..=64 {
                #[allow(deprecated)]
                let mut h = SipHasher::new_with_keys(key[0], key[1]);
                h.write(&bytes[..n]);
                assert_eq!(siphash::<2, 4>(key, &bytes[..n]), h.finish(), "{n} bytes");
            }
        }
    }

    /// Names chosen to share a home bucket under the public hash (which anyone can do by
    /// trying names) are spread out under a key: aiming them needs the key.
    #[test]
    fn names_colliding_under_the_public_hash_spread_under_a_key() {
        let n = 1024;
        let home_of = |h: u64| home(tag_of(h), n);
        let target = home_of(name_hash(b"t/0"));
        let colliding: std::vec::Vec<std::string::String> = (0..)
            .map(|i| std::format!("t/{i}"))
            .filter(|s| home_of(name_hash(s.as_bytes())) == target)
            .take(64)
            .collect();
        let key = NameKey([0x0123_4567_89ab_cdef, 0xfedc_ba98_7654_3210]);
        let homes: std::collections::BTreeSet<usize> = colliding
            .iter()
            .map(|s| home_of(keyed_name_hash(Some(&key), s.as_bytes())))
            .collect();
        // 64 names in 1024 buckets at random: about 62 distinct homes.
        assert!(homes.len() >= 56, "{} distinct homes of 64", homes.len());
    }

    /// Keyed, the hash depends on the key and on every byte; unkeyed, it is `name_hash`.
    #[test]
    fn a_keyed_name_hash_depends_on_the_key() {
        let (a, b) = (NameKey([1, 2]), NameKey([1, 3]));
        assert_ne!(
            keyed_name_hash(Some(&a), b"x"),
            keyed_name_hash(Some(&b), b"x")
        );
        assert_ne!(
            keyed_name_hash(Some(&a), b"x"),
            keyed_name_hash(Some(&a), b"y")
        );
        assert_ne!(
            keyed_name_hash(Some(&a), b"a"),
            keyed_name_hash(Some(&a), b"a\0")
        );
        assert_eq!(keyed_name_hash(None, b"x"), name_hash(b"x"));
        assert_eq!(std::format!("{a:?}"), "NameKey(..)");
    }

    /// The byte form is the two words, little-endian, in order: every binding hands the
    /// core the same key for the same 16 bytes.
    #[test]
    fn a_key_from_bytes_is_its_two_little_endian_words() {
        let mut bytes = [0u8; NameKey::LEN];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = i as u8 + 1;
        }
        assert_eq!(
            NameKey::from_bytes(bytes),
            NameKey([0x0807_0605_0403_0201, 0x100f_0e0d_0c0b_0a09])
        );
    }

    /// Names that differ only in their last bytes (the usual naming scheme) must spread
    /// over the index: at load 1/2, uniform hashing gives ~79 % distinct home buckets.
    #[test]
    fn sequential_names_get_distinct_home_buckets() {
        let n = 2048;
        let mut seen = std::vec![false; n];
        for i in 0..n / 2 {
            let name = std::format!("lock/{i:08}");
            seen[home(tag_of(name_hash(name.as_bytes())), n)] = true;
        }
        let distinct = seen.iter().filter(|b| **b).count();
        assert!(
            distinct > n / 2 * 7 / 10,
            "{distinct} distinct homes of {}",
            n / 2
        );
    }

    /// The same for names that differ only in their first bytes (the word-at-a-time
    /// path) and for names of every length up to the maximum (the remainder path).
    #[test]
    fn names_differing_in_their_first_bytes_or_length_spread_too() {
        let n = 2048;
        let mut seen = std::vec![false; n];
        for i in 0..n / 2 {
            let name = std::format!("{i:08}/lock");
            seen[home(tag_of(name_hash(name.as_bytes())), n)] = true;
        }
        let distinct = seen.iter().filter(|b| **b).count();
        assert!(
            distinct > n / 2 * 7 / 10,
            "{distinct} distinct homes of {}",
            n / 2
        );
        let long = [b'x'; 64];
        let mut hashes: std::vec::Vec<u64> = (1..=64).map(|l| name_hash(&long[..l])).collect();
        hashes.sort_unstable();
        hashes.dedup();
        assert_eq!(hashes.len(), 64, "every length hashes differently");
        assert_ne!(
            name_hash(b"a"),
            name_hash(b"a\0"),
            "a trailing NUL changes the hash"
        );
    }

    /// `fnv1a` is FNV-1a 64 (the request fingerprint, persisted in snapshots: a change
    /// would misjudge the retries of a restored service): the published test values.
    #[test]
    fn fnv1a_is_the_published_fnv1a_64() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
    }

    /// `mix` is splitmix64's finaliser: SplitMix64 seeded with 0 gives mix(k), mix(2k)…
    /// for its increment k, whose first outputs are published.
    #[test]
    fn mix_is_splitmix64s_finaliser() {
        const K: u64 = 0x9e37_79b9_7f4a_7c15;
        assert_eq!(mix(K), 16_294_208_416_658_607_535);
        assert_eq!(mix(K.wrapping_mul(2)), 7_960_286_522_194_355_700);
    }

    /// Every byte of a name, at every length, moves the tag the index stores and `home`
    /// places by (the hash's high 32 bits): a name with one byte changed (to each of
    /// three other values, at each position of each length up to 64) gets another tag.
    /// (That any of these 6,240 pairs shares a tag by chance has odds of about 1.5 in a
    /// million; the hash is fixed, so the answer never changes.)
    #[test]
    fn every_byte_of_a_name_moves_its_tag() {
        let base: std::vec::Vec<u8> = (0..64u8).map(|i| b'a' + i % 26).collect();
        for len in 1..=64 {
            let name = &base[..len];
            let tag = tag_of(name_hash(name));
            for at in 0..len {
                for other in [b'0', b'~', name[at] ^ 1] {
                    let mut changed = name.to_vec();
                    changed[at] = other;
                    assert_ne!(
                        tag_of(name_hash(&changed)),
                        tag,
                        "{len} bytes, byte {at} made {other}"
                    );
                }
            }
        }
    }

    /// A row for the free-list test: its heap bookkeeping and a predecessor field.
    #[derive(Clone, Copy)]
    struct R {
        aux: Aux,
        prev: u32,
        live: bool,
    }
    impl Row for R {
        fn aux(&self) -> &Aux {
            &self.aux
        }
        fn aux_mut(&mut self) -> &mut Aux {
            &mut self.aux
        }
        fn timer_key(&self) -> (u64, u64) {
            (0, 0)
        }
    }
    fn prev(r: &mut R) -> &mut u32 {
        &mut r.prev
    }

    /// Walks the free list both ways: it holds exactly the rows not live, each once, and
    /// every row's predecessor is the row before it.
    fn check_free_list(st: &TableState, rows: &mut [R]) {
        let mut seen = std::vec![false; rows.len()];
        let (mut at, mut before, mut free) = (st.free, NIL, 0);
        while at != NIL {
            let r = rows[at as usize];
            assert!(
                !r.live && !seen[at as usize],
                "row {at} listed twice or live"
            );
            assert_eq!(r.prev, before, "row {at}'s predecessor");
            seen[at as usize] = true;
            (before, at) = (at, r.aux.heap_pos);
            free += 1;
        }
        assert_eq!(free, rows.iter().filter(|r| !r.live).count());
        assert_eq!(st.len as usize, rows.len() - free);
        assert_eq!(st.is_full(), free == 0);
    }

    /// Any free row can be taken out of a linked free list, and the list stays whole
    /// through any mix of chosen takes, first takes and returns (a seeded random walk).
    #[test]
    fn a_linked_free_list_gives_up_any_row_and_stays_whole() {
        for n in [1usize, 2, 3, 8, 33] {
            let mut rows = std::vec![
                R {
                    aux: Aux::EMPTY,
                    prev: 0,
                    live: false
                };
                n
            ];
            let mut index = std::vec![Bucket::EMPTY; n * BUCKETS_PER_ROW];
            let mut st = TableState::init_linked(&mut rows[..], &mut index[..], prev);
            check_free_list(&st, &mut rows);
            let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ n as u64;
            for _ in 0..2000 {
                x = mix(x);
                let slot = (x % n as u64) as u32;
                if rows[slot as usize].live {
                    rows[slot as usize].live = false;
                    st.release_linked(&mut rows[..], slot, prev);
                } else if x & (1 << 40) != 0 {
                    st.alloc_at(&mut rows[..], slot, prev);
                    rows[slot as usize].live = true;
                } else {
                    let got = st.alloc_linked(&mut rows[..], prev);
                    assert!(got.is_some(), "a row is free, yet none was given");
                    let got = got.unwrap_or(NIL);
                    assert!(!rows[got as usize].live);
                    rows[got as usize].live = true;
                }
                assert!(rows.iter().all(|r| !r.live || r.aux.heap_pos == NIL));
                check_free_list(&st, &mut rows);
            }
            while st.alloc_linked(&mut rows[..], prev).is_some() {}
            assert!(st.is_full());
            assert_eq!(st.len as usize, n, "every row was taken once");
        }
    }
}
