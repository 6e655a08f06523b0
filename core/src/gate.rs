//! [`FenceGate`]: the resource-side check that stops a stale holder.

use crate::table::{
    keyed_name_hash, BucketArray, NameKey, TableState, TaggedBucket, BUCKETS_PER_ROW,
};
use crate::{Error, LockName, Table, Token};

/// The four bytes a fence-gate snapshot begins with.
pub const GATE_MAGIC: [u8; 4] = *b"FLGT";
/// The gate snapshot format this build writes and reads.
pub const GATE_VERSION: u16 = 1;

/// How many resources a [`FenceGate::snapshot`]'s bytes hold, read from their header
/// with the checks [`FenceGate::restore`] makes first (magic, version, count), so that a
/// host can refuse bytes that are no gate snapshot before it allocates rows to restore
/// them into. It does not check the rest; `restore` does.
///
/// Errors: [`Error::BadMagic`], [`Error::UnsupportedVersion`], [`Error::CorruptSnapshot`]
/// (`"bad version"`: a version that is no `u16` varint; `"truncated header"`: bytes that
/// end inside the header; `"bad header"`: a count that is no `u32` varint). Cost: O(1).
pub fn gate_snapshot_resources(bytes: &[u8]) -> Result<u32, Error> {
    read_gate_header(bytes).map(|(count, _)| count)
}

/// The most bytes a gate snapshot with this header can be: the header as written, then
/// each resource it counts at its longest record (a 64-byte name and a `u64` token at
/// their widest). [`FenceGate::restore`] refuses longer bytes
/// (`CorruptSnapshot("longer than its records can be")`) with the header's other
/// refusals, before a row is cleared, so its answer for any bytes is its answer for their
/// first `gate_snapshot_max_len + 1`: a host holding the bytes elsewhere copies at most
/// that many. Read from the first [`SNAPSHOT_HEADER_MAX_LEN`](crate::SNAPSHOT_HEADER_MAX_LEN)
/// bytes as from the whole.
///
/// Errors: as [`gate_snapshot_resources`]. Cost: O(1).
pub fn gate_snapshot_max_len(bytes: &[u8]) -> Result<usize, Error> {
    gate_snapshot_max_len_within(bytes, usize::MAX)
}

/// As [`gate_snapshot_max_len`], for a restore into `rows` rows: a header that counts more
/// resources is refused by its count (`CapacityExceeded(Resources)`) before a record is
/// read, so such a count is taken as the rows. What a binding that holds the bytes
/// elsewhere copies at most, plus one byte, once it knows its rows.
///
/// Errors: as [`gate_snapshot_resources`]. Cost: O(1).
pub fn gate_snapshot_max_len_within(bytes: &[u8], rows: usize) -> Result<usize, Error> {
    let (count, rest) = read_gate_header(bytes)?;
    let count = count.min(u32::try_from(rows).unwrap_or(u32::MAX));
    Ok((bytes.len() - rest.len()).saturating_add(records_max_len(count)))
}

/// A resource record at its longest: a name and a `u64` token.
const RECORD_MAX_LEN: usize = crate::snapshot::STR_MAX_LEN + crate::snapshot::U64_MAX_LEN;

/// The most bytes `count` resource records can take. Cost: O(1).
fn records_max_len(count: u32) -> usize {
    (count as usize).saturating_mul(RECORD_MAX_LEN)
}

/// A gate snapshot's header: its resource count and the bytes after it. Errors: as
/// [`gate_snapshot_resources`]. Cost: O(1).
fn read_gate_header(bytes: &[u8]) -> Result<(u32, &[u8]), Error> {
    // Magic, version, count: each judged before the next is read, as a lock service's
    // snapshot header is (the magic alone is a truncated header, not a foreign file).
    let rest = bytes.strip_prefix(&GATE_MAGIC).ok_or(Error::BadMagic)?;
    let (version, rest) = postcard::take_from_bytes::<u16>(rest)
        .map_err(|_| Error::CorruptSnapshot(crate::snapshot::bad_varint(rest)))?;
    if version != GATE_VERSION {
        return Err(Error::UnsupportedVersion(version));
    }
    postcard::take_from_bytes::<u32>(rest).map_err(|e| {
        Error::CorruptSnapshot(crate::snapshot::cut_or_bad(
            e,
            "truncated header",
            "bad header",
        ))
    })
}

/// The checks on a gate's rows before anything is built in them: at most
/// [`MAX_ROWS`](crate::MAX_ROWS), and the same rows through both views (a host type whose
/// `as_ref` were shorter than its `as_mut` would have the gate read past it), as
/// [`LockService`](crate::LockService) checks its storage's views. Errors:
/// [`Error::BadConfig`]. Cost: O(1).
fn check_gate_rows<R: AsRef<[GateRow]> + AsMut<[GateRow]>>(rows: &mut R) -> Result<(), Error> {
    crate::check_rows(rows.as_ref().len())?;
    if rows.as_ref().len() != rows.as_mut().len() {
        return Err(Error::BadConfig(
            "the gate's rows must be the same through as_ref and as_mut",
        ));
    }
    Ok(())
}

/// The highest token a [`FenceGate`] has seen for one resource. Opaque row of its table.
#[derive(Clone, Debug)]
pub struct GateRow {
    name: LockName,
    highest: u64, // 0 = free row
    /// Buckets `2i` and `2i + 1` of the gate's index, in row `i`.
    index: [TaggedBucket; BUCKETS_PER_ROW],
}

impl GateRow {
    /// A free row.
    pub const EMPTY: GateRow = GateRow {
        name: LockName::EMPTY,
        highest: 0,
        index: [TaggedBucket::EMPTY; BUCKETS_PER_ROW],
    };
}

/// A gate's rows are its index too: row `i` holds buckets `2i` and `2i + 1`.
impl BucketArray for [GateRow] {
    fn buckets(&self) -> usize {
        self.len() * BUCKETS_PER_ROW
    }
    fn bucket(&self, b: usize) -> (u32, Option<u32>) {
        self[b / BUCKETS_PER_ROW].index[..].bucket(b % BUCKETS_PER_ROW)
    }
    fn set_bucket(&mut self, b: usize, slot: u32, tag: u32) {
        self[b / BUCKETS_PER_ROW].index[..].set_bucket(b % BUCKETS_PER_ROW, slot, tag);
    }
}

/// The resource side of fencing: remembers the highest token seen per resource and
/// refuses anything lower. This is the `UPDATE … WHERE token <= 34` conditional write, the
/// object store's `412 Precondition Failed`, shipped as a component: put it (or its
/// rule) in front of whatever the lock protects, and a holder that was paused past its
/// session's expiry is refused instead of corrupting data.
///
/// Entries are never evicted: forgetting a resource's highest token would let a stale
/// holder back in. Size the table for every resource the gate will ever guard.
///
/// Storage is the caller's: `[GateRow; N]`, a `Vec<GateRow>` or a `&mut [GateRow]`.
///
/// A gate in front of resources whose names others choose (a shared store's tenants)
/// takes a secret [`NameKey`] ([`set_name_key`](Self::set_name_key)), as a lock service
/// does, so that names chosen to share a probe run cannot slow every check.
#[derive(Debug)]
pub struct FenceGate<R: AsRef<[GateRow]> + AsMut<[GateRow]>> {
    rows: R,
    st: TableState,
    key: Option<NameKey>,
}

impl<R: AsRef<[GateRow]> + AsMut<[GateRow]>> FenceGate<R> {
    /// An empty gate over `rows` (their content is discarded).
    ///
    /// Errors: [`Error::BadConfig`] for more than [`MAX_ROWS`](crate::MAX_ROWS) rows, or
    /// for a host type whose `as_ref` and `as_mut` views differ in length. Cost:
    /// O(capacity).
    pub fn new(mut rows: R) -> Result<Self, Error> {
        check_gate_rows(&mut rows)?;
        Ok(Self::build(rows))
    }

    fn build(mut rows: R) -> Self {
        for r in rows.as_mut().iter_mut() {
            *r = GateRow::EMPTY;
        }
        let st = TableState::init_append_only(rows.as_mut());
        FenceGate {
            rows,
            st,
            key: None,
        }
    }

    fn hash(&self, resource: &str) -> u64 {
        keyed_name_hash(self.key.as_ref(), resource.as_bytes())
    }

    fn find(&self, resource: &str) -> Option<u32> {
        let rows = self.rows.as_ref();
        TableState::find(rows, rows, self.hash(resource), |r| {
            r.highest != 0 && r.name.as_str() == resource
        })
    }

    /// Sets the secret key the resource index hashes names with ([`NameKey`]), as
    /// [`LockService::set_name_key`](crate::LockService::set_name_key) does for lock
    /// names: names chosen to share a probe run under the public hash (or under another
    /// key) are spread out. Call it after [`new`](Self::new) or [`restore`](Self::restore)
    /// with a key from a random source (or restore with
    /// [`restore_keyed`](Self::restore_keyed)); it may be called again. Nothing else
    /// changes: answers, [`iter`](Self::iter) and snapshots are the same whatever the key.
    /// Cost: O(capacity), to rebuild the index; afterwards every name is hashed with
    /// SipHash-1-3. Errors: none.
    pub fn set_name_key(&mut self, key: NameKey) {
        self.key = Some(key);
        // Not `self.hash`: the rows are borrowed mutably while their names are hashed.
        let len = self.st.len;
        let rows = self.rows.as_mut();
        for b in 0..rows.buckets() {
            rows.set_bucket(b, crate::table::NIL, 0);
        }
        // Rows are never freed: the live ones are exactly 0..len.
        for r in 0..len {
            let hash = keyed_name_hash(Some(&key), rows[r as usize].name.as_str().as_bytes());
            TableState::index_insert(rows, r, hash);
        }
    }

    /// Whether resource names are hashed under a key ([`set_name_key`](Self::set_name_key)).
    /// Errors: none. Cost: O(1).
    pub fn is_name_keyed(&self) -> bool {
        self.key.is_some()
    }

    /// Checks `token` for a write to `resource` without recording it: `Ok` means
    /// [`admit`](Self::admit) would accept it, unless `resource` is new and the table is
    /// full.
    ///
    /// Errors: [`Error::ZeroToken`], [`Error::Stale`] if a higher token was seen,
    /// [`Error::EmptyName`] / [`Error::NameTooLong`] for a name no resource can have.
    /// Cost: O(name length).
    pub fn check(&self, resource: &str, token: Token) -> Result<(), Error> {
        if token.0 == 0 {
            return Err(Error::ZeroToken);
        }
        match self.highest(resource) {
            Some(highest) if token < highest => Err(Error::Stale { token, highest }),
            Some(_) => Ok(()),
            None => LockName::new(resource).map(|_| ()),
        }
    }

    /// Checks `token` for a write to `resource` exactly as [`admit`](Self::admit) would,
    /// without recording it: `Ok` means `admit` accepts it now, a new resource in a full
    /// table included. For a host that checks, writes the data it guards, then admits, all
    /// under one lock (so nothing changes in between).
    ///
    /// Errors: those of [`admit`](Self::admit). Cost: O(name length).
    pub fn check_admit(&self, resource: &str, token: Token) -> Result<(), Error> {
        self.check(resource, token)?;
        if self.is_full() && self.highest(resource).is_none() {
            return Err(Error::CapacityExceeded(Table::Resources));
        }
        Ok(())
    }

    /// Admits a write to `resource` carrying `token`: accepted if `token` is at least the
    /// highest seen (the same holder writes many times), which then becomes the highest.
    ///
    /// Errors (nothing recorded): [`Error::ZeroToken`], [`Error::Stale`]`{ token, highest }`,
    /// [`Error::EmptyName`], [`Error::NameTooLong`], [`Error::CapacityExceeded`]`(Resources)`
    /// for a new resource when the table is full. Cost: O(name length).
    pub fn admit(&mut self, resource: &str, token: Token) -> Result<(), Error> {
        self.check(resource, token)?;
        if let Some(r) = self.find(resource) {
            self.rows.as_mut()[r as usize].highest = token.0;
            return Ok(());
        }
        let name = LockName::new(resource)?;
        let hash = self.hash(resource);
        let rows = self.rows.as_mut();
        let r = self
            .st
            .alloc_append_only(rows.len())
            .ok_or(Error::CapacityExceeded(Table::Resources))?;
        rows[r as usize].name = name;
        rows[r as usize].highest = token.0;
        TableState::index_insert(rows, r, hash);
        Ok(())
    }

    /// The highest token admitted for `resource`, if any. Errors: none. Cost: O(name
    /// length).
    pub fn highest(&self, resource: &str) -> Option<Token> {
        self.find(resource)
            .map(|r| Token(self.rows.as_ref()[r as usize].highest))
    }

    /// Resources with their highest tokens, in the order first admitted. Errors: none.
    /// Cost: O(1) per item.
    pub fn iter(&self) -> impl Iterator<Item = (&str, Token)> + '_ {
        // Rows are never freed, so the live ones are exactly 0..len, in admission order.
        self.rows
            .as_ref()
            .iter()
            .take(self.st.len as usize)
            .map(|r| (r.name.as_str(), Token(r.highest)))
    }

    /// Resources recorded. Errors: none. Cost: O(1).
    pub fn len(&self) -> usize {
        self.st.len as usize
    }

    /// True before the first admitted write. Errors: none. Cost: O(1).
    pub fn is_empty(&self) -> bool {
        self.st.len == 0
    }

    /// How many resources fit. Errors: none. Cost: O(1).
    pub fn capacity(&self) -> usize {
        self.rows.as_ref().len()
    }

    /// True when a new resource would be refused. Errors: none. Cost: O(1).
    pub fn is_full(&self) -> bool {
        self.st.is_full()
    }

    /// Writes `GATE_MAGIC`, `GATE_VERSION`, the count, then `(name, highest)` per resource
    /// in admission order (postcard), returning the length.
    ///
    /// Errors: [`Error::BufferTooSmall`] with the size needed. Cost: O(resources).
    pub fn snapshot(&self, buf: &mut [u8]) -> Result<usize, Error> {
        let (used, need) = self.write_snapshot(buf)?;
        if need > used {
            return Err(Error::BufferTooSmall {
                need: need.min(u32::MAX as usize) as u32,
            });
        }
        Ok(used)
    }

    /// Writes what fits of the snapshot into `buf`: the bytes written and the bytes the
    /// whole snapshot takes (exact, however large: the error's `u32` saturates). Never
    /// inlined: one copy of the encoder serves `snapshot` and `snapshot_len`.
    #[inline(never)]
    fn write_snapshot(&self, buf: &mut [u8]) -> Result<(usize, usize), Error> {
        let mut used = 0;
        let mut need = 0usize;
        let mut put = |bytes: &[u8]| {
            if used == need && used + bytes.len() <= buf.len() {
                buf[used..used + bytes.len()].copy_from_slice(bytes);
                used += bytes.len();
            }
            need = need.saturating_add(bytes.len());
        };
        let mut scratch = [0u8; 96];
        let header = (GATE_MAGIC, GATE_VERSION, self.st.len);
        put(postcard::to_slice(&header, &mut scratch).map_err(|_| Error::BadFrame)?);
        for (name, token) in self.iter() {
            put(postcard::to_slice(&(name, token.0), &mut scratch).map_err(|_| Error::BadFrame)?);
        }
        Ok((used, need))
    }

    /// The size of [`snapshot`](Self::snapshot)'s output in bytes (exact, also beyond
    /// the `u32` that [`Error::BufferTooSmall`] can say). Errors: none. Cost: O(resources).
    pub fn snapshot_len(&self) -> usize {
        self.write_snapshot(&mut []).map_or(0, |(_, need)| need)
    }

    /// Rebuilds a gate in `rows` from [`snapshot`](Self::snapshot) bytes, checking magic,
    /// version, names (valid, unique), tokens (≥ 1), capacity, length (no longer than the
    /// records the header counts can be: [`gate_snapshot_max_len`]), no trailing bytes and
    /// the canonical encoding (exactly the bytes `snapshot` writes). The bytes carry no
    /// checksum: a highest token lowered, or a name changed, by damage restores as it
    /// reads and admits a stale holder, so store them with a checksum of your own.
    ///
    /// Errors: [`Error::BadMagic`], [`Error::UnsupportedVersion`],
    /// [`Error::CorruptSnapshot`], [`Error::CapacityExceeded`], [`Error::BadConfig`] (more
    /// than [`MAX_ROWS`](crate::MAX_ROWS) rows, or `as_ref` and `as_mut` of different
    /// lengths); the rows come back with the error. Cost: O(capacity + resources): every
    /// row and bucket is cleared once the header (magic, version, count within the
    /// capacity, length within what the count allows) has passed — the rows come back
    /// untouched when it does not.
    ///
    /// Restore only bytes as fresh as the data the gate guards: a gate restored from a
    /// snapshot taken before it admitted a higher token has forgotten that token, and
    /// admits the stale holder it refused (§11 of docs/SPEC.md). Keep the gate's state in
    /// the same atomic write as the data (the SQLite and PostgreSQL fences keep it in a
    /// table beside the data, written in the same transaction).
    pub fn restore(rows: R, bytes: &[u8]) -> Result<Self, (R, Error)> {
        Self::restore_inner(rows, bytes, None)
    }

    /// [`restore`](Self::restore) under a name key: the same checks and errors, and the
    /// rows are indexed under `key` as they load (as [`set_name_key`](Self::set_name_key)
    /// after `restore` would, without indexing them twice). Cost: as `restore`,
    /// O(capacity + resources). Errors: as `restore`.
    pub fn restore_keyed(rows: R, bytes: &[u8], key: NameKey) -> Result<Self, (R, Error)> {
        Self::restore_inner(rows, bytes, Some(key))
    }

    fn restore_inner(mut rows: R, bytes: &[u8], key: Option<NameKey>) -> Result<Self, (R, Error)> {
        if let Err(e) = check_gate_rows(&mut rows) {
            return Err((rows, e));
        }
        // The header is judged before a row is cleared: bytes that are no snapshot, or
        // that hold more resources than fit, cost O(1) and leave the rows as they were.
        let (count, records) = match read_gate_header(bytes) {
            Err(e) => return Err((rows, e)),
            Ok((count, _)) if count as usize > rows.as_ref().len() => {
                return Err((rows, Error::CapacityExceeded(Table::Resources)))
            }
            Ok((count, records)) if records.len() > records_max_len(count) => {
                return Err((
                    rows,
                    Error::CorruptSnapshot("longer than its records can be"),
                ))
            }
            Ok(header) => header,
        };
        let mut gate = FenceGate::build(rows);
        gate.key = key;
        match gate.load(count, records) {
            // Over-long varints decode too; the canonical re-encoding is then shorter.
            Ok(()) if gate.snapshot_len() != bytes.len() => {
                Err((gate.rows, Error::CorruptSnapshot("non-canonical encoding")))
            }
            Ok(()) => Ok(gate),
            Err(e) => Err((gate.rows, e)),
        }
    }

    /// Admits `count` resource records from `rest` (a header's count, judged within the
    /// capacity, and the bytes after it).
    fn load(&mut self, count: u32, mut rest: &[u8]) -> Result<(), Error> {
        for _ in 0..count {
            // A name's length prefix is one byte below 0x80 (names are at most 64 bytes);
            // postcard reads it as a `usize` varint, which would take a prefix stretched
            // to 6–10 bytes on a 64-bit target only: refused first, alike on every target.
            if rest.first().is_some_and(|&b| b >= 0x80) {
                return Err(Error::CorruptSnapshot("bad resource record"));
            }
            let ((name, highest), r) =
                postcard::take_from_bytes::<(LockName, u64)>(rest).map_err(|e| {
                    Error::CorruptSnapshot(crate::snapshot::cut_or_bad(
                        e,
                        "truncated resource record",
                        "bad resource record",
                    ))
                })?;
            rest = r;
            if name.is_empty() || highest == 0 {
                return Err(Error::CorruptSnapshot("empty resource name or token 0"));
            }
            if self.find(name.as_str()).is_some() {
                return Err(Error::CorruptSnapshot("resource twice"));
            }
            self.admit(name.as_str(), crate::Token(highest))?;
        }
        if !rest.is_empty() {
            return Err(Error::CorruptSnapshot("trailing bytes"));
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a test's failed set-up is a failed test
mod tests {
    use super::*;
    use crate::table::{home, name_hash, tag_of, NIL};
    use std::{format, string::String, vec, vec::Vec};

    /// `gate_snapshot_resources` reads the count a snapshot holds and refuses what restore
    /// refuses first, with the same error, whatever the rows: junk, another version, a
    /// header cut short.
    #[test]
    fn a_snapshots_header_is_judged_as_restore_judges_it() {
        let mut g = FenceGate::new(vec![GateRow::EMPTY; 4]).unwrap();
        g.admit("a", Token(5)).unwrap();
        g.admit("b", Token(2)).unwrap();
        let mut buf = vec![0u8; g.snapshot_len()];
        let n = g.snapshot(&mut buf).unwrap();
        let snap = &buf[..n];
        assert_eq!(gate_snapshot_resources(snap), Ok(2));
        let mut other = snap.to_vec();
        other[GATE_MAGIC.len()] = 0x7f;
        let cut = &snap[..GATE_MAGIC.len() + 1];
        for bad in [&b"junk"[..], &other, cut] {
            let e = gate_snapshot_resources(bad).unwrap_err();
            let restored = FenceGate::restore(vec![GateRow::EMPTY; 4], bad).map(|_| ());
            assert_eq!(restored.unwrap_err().1, e, "{bad:?}");
        }
    }

    /// Bytes whose header restore refuses — no gate snapshot, another version, more
    /// resources than the rows hold — come back with the rows as they were: nothing is
    /// cleared before the header has passed.
    #[test]
    fn a_refused_header_leaves_the_rows_untouched() {
        let mut g = FenceGate::new(vec![GateRow::EMPTY; 4]).unwrap();
        for r in ["a", "b", "c"] {
            g.admit(r, Token(3)).unwrap();
        }
        let mut buf = vec![0u8; g.snapshot_len()];
        let n = g.snapshot(&mut buf).unwrap();
        let too_many = &buf[..n];
        let mut other = too_many.to_vec();
        other[GATE_MAGIC.len()] = 0x7f;
        let mut sentinel = vec![GateRow::EMPTY; 2];
        sentinel[1].highest = 7;
        sentinel[1].name = LockName::new("kept").unwrap();
        for (bad, e) in [
            (&b"junk"[..], Error::BadMagic),
            (&other[..], Error::UnsupportedVersion(0x7f)),
            (too_many, Error::CapacityExceeded(Table::Resources)),
        ] {
            let (rows, got) = FenceGate::restore(sentinel.clone(), bad).unwrap_err();
            assert_eq!(got, e);
            assert_eq!((rows[1].highest, rows[1].name.as_str()), (7, "kept"));
        }
    }

    /// Rows whose `as_ref` is shorter than their `as_mut` (a host's type that lies) are
    /// refused by `new` and `restore` with `BadConfig`, instead of a gate that would read
    /// past the shorter view.
    #[test]
    fn rows_whose_two_views_differ_are_refused() {
        struct Short(Vec<GateRow>);
        impl AsRef<[GateRow]> for Short {
            fn as_ref(&self) -> &[GateRow] {
                &self.0[1..]
            }
        }
        impl AsMut<[GateRow]> for Short {
            fn as_mut(&mut self) -> &mut [GateRow] {
                &mut self.0
            }
        }
        let short = || Short(vec![GateRow::EMPTY; 3]);
        assert!(matches!(FenceGate::new(short()), Err(Error::BadConfig(_))));
        let mut g = FenceGate::new(vec![GateRow::EMPTY; 3]).unwrap();
        g.admit("a", Token(1)).unwrap();
        let mut buf = vec![0u8; g.snapshot_len()];
        let n = g.snapshot(&mut buf).unwrap();
        let refused = FenceGate::restore(short(), &buf[..n]).map(|_| ());
        assert!(matches!(refused, Err((_, Error::BadConfig(_)))));
    }

    /// `check_admit` answers what `admit` then does, for every case of the rule: a zero
    /// token, a stale one, a bad name, a known resource in a full table (accepted), a new
    /// one in a full table (refused, where `check` says yes), and it records nothing.
    #[test]
    fn check_admit_answers_what_admit_does() {
        let mut g = FenceGate::new(vec![GateRow::EMPTY; 2]).unwrap();
        g.admit("a", Token(5)).unwrap();
        let long = "x".repeat(crate::MAX_NAME_LEN + 1);
        let cases: [(&str, u64); 7] = [
            ("a", 0),
            ("a", 4),
            ("a", 5),
            ("", 1),
            (&long, 1),
            ("b", 1),
            ("c", 1),
        ];
        // Before and after the table fills ("b" fills it: then "c" is new in a full table).
        for (resource, token) in cases {
            let before = g.snapshot_len();
            let said = g.check_admit(resource, Token(token));
            assert_eq!(g.snapshot_len(), before, "check_admit recorded something");
            let mut copy = FenceGate::new(vec![GateRow::EMPTY; 2]).unwrap();
            for (r, t) in g.iter() {
                copy.admit(r, t).unwrap();
            }
            assert_eq!(
                said,
                copy.admit(resource, Token(token)),
                "{resource:?} {token}"
            );
            if said.is_ok() {
                g.admit(resource, Token(token)).unwrap();
            }
        }
        assert!(g.is_full());
        assert_eq!(g.check("c", Token(1)), Ok(()), "check leaves capacity out");
        assert_eq!(
            g.check_admit("c", Token(1)),
            Err(Error::CapacityExceeded(Table::Resources))
        );
        assert_eq!(g.check_admit("a", Token(9)), Ok(()), "a known resource");
    }

    /// Two resource names whose hashes share the 32 bits the index stores (found by a
    /// birthday search over the public hash): the index cannot tell them apart, so only
    /// the lookup's name comparison keeps each to its own row.
    #[test]
    fn resources_whose_stored_hash_bits_collide_keep_their_own_tokens() {
        let (a, b) = crate::table::names_sharing_a_tag("r");
        assert_eq!(
            tag_of(name_hash(a.as_bytes())),
            tag_of(name_hash(b.as_bytes()))
        );
        let mut g = FenceGate::new(vec![GateRow::EMPTY; 2]).unwrap();
        g.admit(&a, Token(10)).unwrap();
        assert_eq!(g.highest(&b), None, "{b} is not {a}");
        assert_eq!(
            g.check(&b, Token(1)),
            Ok(()),
            "a new resource takes any token"
        );
        g.admit(&b, Token(5)).unwrap();
        assert_eq!(
            (g.highest(&a), g.highest(&b)),
            (Some(Token(10)), Some(Token(5)))
        );
        assert_eq!(
            g.admit(&b, Token(4)),
            Err(Error::Stale {
                token: Token(4),
                highest: Token(5)
            })
        );
    }

    /// How far past its home bucket each resource sits in the index, summed: the probes a
    /// lookup of every resource makes beyond the first.
    fn displacement(gate: &FenceGate<Vec<GateRow>>) -> usize {
        let rows = gate.rows.as_slice();
        let n = rows.buckets();
        (0..n)
            .filter_map(|b| {
                let (slot, _) = rows.bucket(b);
                (slot != NIL).then(|| {
                    let h = home(tag_of(gate.hash(rows[slot as usize].name.as_str())), n);
                    (b + n - h) % n
                })
            })
            .sum()
    }

    /// Resource names chosen to share a home bucket under the public hash pile up in one
    /// probe run; under a key (set on a live gate, or given to `restore_keyed`) they are
    /// spread out, and every answer, the order and the snapshot bytes stay the same.
    #[test]
    fn a_name_key_spreads_resource_names_chosen_to_collide() {
        let rows = 64;
        let n = rows * BUCKETS_PER_ROW;
        let target = home(tag_of(name_hash(b"r/0")), n);
        let colliding: Vec<String> = (0..)
            .map(|i| format!("r/{i}"))
            .filter(|s| home(tag_of(name_hash(s.as_bytes())), n) == target)
            .take(rows)
            .collect();
        let mut gate = FenceGate::new(vec![GateRow::EMPTY; rows]).unwrap();
        for (i, name) in colliding.iter().enumerate() {
            gate.admit(name, Token(i as u64 + 2)).unwrap();
        }
        // One run from the shared home: the k-th name sits k buckets past it.
        assert_eq!(displacement(&gate), rows * (rows - 1) / 2);
        let before = gate.snapshot_len();
        let mut bytes = vec![0; before];
        gate.snapshot(&mut bytes).unwrap();

        let key = NameKey([0x0123_4567_89ab_cdef, 0xfedc_ba98_7654_3210]);
        gate.set_name_key(key);
        assert!(gate.is_name_keyed());
        // 64 names in 128 buckets at random: about half a probe each past home.
        assert!(displacement(&gate) < 128, "{}", displacement(&gate));
        let restored = FenceGate::restore_keyed(vec![GateRow::EMPTY; rows], &bytes, key)
            .map_err(|(_, e)| e)
            .unwrap();
        assert_eq!(displacement(&restored), displacement(&gate));
        for g in [&gate, &restored] {
            for (i, name) in colliding.iter().enumerate() {
                assert_eq!(g.highest(name), Some(Token(i as u64 + 2)), "{name}");
                assert_eq!(
                    g.check(name, Token(i as u64 + 1)),
                    Err(Error::Stale {
                        token: Token(i as u64 + 1),
                        highest: Token(i as u64 + 2)
                    })
                );
            }
            assert_eq!(g.highest("r/none"), None);
            let order: Vec<&str> = g.iter().map(|(name, _)| name).collect();
            assert_eq!(
                order,
                colliding.iter().map(String::as_str).collect::<Vec<_>>()
            );
            let mut again = vec![0; before];
            assert_eq!(g.snapshot(&mut again), Ok(before));
            assert_eq!(again, bytes);
        }
        assert!(!FenceGate::new(vec![GateRow::EMPTY; 1])
            .unwrap()
            .is_name_keyed());
    }
}
