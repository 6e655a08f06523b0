//! Fixed-capacity tables over caller-provided rows: a free list, a seedless hash index
//! and an indexed min-heap of deadlines, all stored in the rows themselves.
//!
//! Row `i` carries three *columns* that do not belong to that row's entry: buckets
//! `2i` and `2i + 1` of the table's hash index, and slot `i` of its heap array. Packing
//! them into the rows means a table is one slice (sized by the host, at compile time or
//! run time) instead of four, with the index always at 2× capacity (load ≤ 50 %).

pub(crate) const NIL: u32 = u32::MAX;

/// Per-row bookkeeping: the packed index/heap columns and this entry's heap position.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Aux {
    /// Two buckets of the hash index (slot numbers, `NIL` = empty).
    bucket: [u32; 2],
    /// One slot of the heap array (a row number).
    heap: u32,
    /// Where this entry sits in the heap array, `NIL` when it has no pending deadline.
    /// Also the free-list link while the row is free.
    heap_pos: u32,
}

impl Aux {
    pub(crate) const EMPTY: Aux = Aux {
        bucket: [NIL; 2],
        heap: NIL,
        heap_pos: NIL,
    };
}

/// A row type that a [`Table`] can index and schedule.
pub(crate) trait Row {
    fn aux(&self) -> &Aux;
    fn aux_mut(&mut self) -> &mut Aux;
    /// The hash of this entry's key (only called on live rows).
    fn key_hash(&self) -> u64;
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

impl TableState {
    /// Threads every row onto the free list and clears the index. O(capacity).
    pub(crate) fn init<T: Row>(rows: &mut [T]) -> TableState {
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

    pub(crate) fn is_full(&self) -> bool {
        self.free == NIL
    }

    /// Takes a free row (its heap position is reset to `NIL`). O(1).
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

    // ---- hash index: linear probing with backward-shift deletion ----

    fn buckets<T>(rows: &[T]) -> usize {
        rows.len() * 2
    }

    fn bucket<T: Row>(rows: &[T], b: usize) -> u32 {
        rows[b / 2].aux().bucket[b % 2]
    }

    fn set_bucket<T: Row>(rows: &mut [T], b: usize, v: u32) {
        rows[b / 2].aux_mut().bucket[b % 2] = v;
    }

    fn home(hash: u64, n: usize) -> usize {
        // Lemire's multiply-shift range reduction (no power-of-two requirement). It keeps
        // the hash's *high* bits, so keys must be well mixed: see `name_hash`.
        ((hash as u128 * n as u128) >> 64) as usize
    }

    /// The row whose key hashes to `hash` and satisfies `eq`. O(1) expected.
    pub(crate) fn find<T: Row>(rows: &[T], hash: u64, eq: impl Fn(&T) -> bool) -> Option<u32> {
        let n = Self::buckets(rows);
        if n == 0 {
            return None;
        }
        let mut b = Self::home(hash, n);
        // At most half the buckets are used, so an empty one always ends the probe.
        loop {
            let slot = Self::bucket(rows, b);
            if slot == NIL {
                return None;
            }
            if eq(&rows[slot as usize]) {
                return Some(slot);
            }
            b = if b + 1 == n { 0 } else { b + 1 };
        }
    }

    /// Indexes a live row under its key. O(1) expected.
    pub(crate) fn index_insert<T: Row>(rows: &mut [T], slot: u32) {
        let n = Self::buckets(rows);
        let mut b = Self::home(rows[slot as usize].key_hash(), n);
        while Self::bucket(rows, b) != NIL {
            b = if b + 1 == n { 0 } else { b + 1 };
        }
        Self::set_bucket(rows, b, slot);
    }

    /// Removes a row from the index. O(1) expected.
    pub(crate) fn index_remove<T: Row>(rows: &mut [T], slot: u32) {
        let n = Self::buckets(rows);
        let mut b = Self::home(rows[slot as usize].key_hash(), n);
        while Self::bucket(rows, b) != slot {
            b = if b + 1 == n { 0 } else { b + 1 };
        }
        // Backward shift: pull later members of the probe run into the hole.
        let mut hole = b;
        let mut j = b;
        loop {
            j = if j + 1 == n { 0 } else { j + 1 };
            let s = Self::bucket(rows, j);
            if s == NIL {
                break;
            }
            let h = Self::home(rows[s as usize].key_hash(), n);
            // Move s into the hole unless its home lies cyclically in (hole, j].
            let stays = if hole <= j {
                hole < h && h <= j
            } else {
                hole < h || h <= j
            };
            if !stays {
                Self::set_bucket(rows, hole, s);
                hole = j;
            }
        }
        Self::set_bucket(rows, hole, NIL);
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

    /// Removes a row's deadline if it has one. O(log n).
    pub(crate) fn unschedule<T: Row>(&mut self, rows: &mut [T], slot: u32) {
        let pos = rows[slot as usize].aux().heap_pos;
        if pos == NIL {
            return;
        }
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

/// The index hash of a name: a word-at-a-time multiply-rotate over the bytes, finalised
/// by [`mix`]. [`TableState::home`] keeps the high bits, so they must depend on every byte
/// (plain FNV-1a's do not: `lock/0001`, `lock/0002`… shared a home bucket and probed
/// linearly), and one multiply per 8 bytes is a shorter dependency chain than FNV-1a's
/// one per byte. Seedless and the same on every platform; it only places rows in the
/// index and is never persisted. (Integer keys are hashed by [`mix`] alone; `fnv1a` stays
/// as it is for the persisted request fingerprint.)
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
        let mut w = [0u8; 8];
        for (d, s) in w.iter_mut().zip(rest) {
            *d = *s;
        }
        h = (h ^ u64::from_le_bytes(w)).wrapping_mul(K).rotate_left(29);
    }
    mix(h)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Names that differ only in their last bytes (the usual naming scheme) must spread
    /// over the index: at load 1/2, uniform hashing gives ~79 % distinct home buckets.
    #[test]
    fn sequential_names_get_distinct_home_buckets() {
        let n = 2048;
        let mut seen = std::vec![false; n];
        for i in 0..n / 2 {
            let name = std::format!("lock/{i:08}");
            seen[TableState::home(name_hash(name.as_bytes()), n)] = true;
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
            seen[TableState::home(name_hash(name.as_bytes()), n)] = true;
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
}
