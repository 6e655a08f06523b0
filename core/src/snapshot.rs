//! Versioned, canonical snapshots of a [`LockService`].
//!
//! Layout (each record postcard-encoded, one after another):
//!
//! ```text
//! Header  { magic: b"FLCK", version: u16 }
//! Meta    { config, now, next_session, revision, next_seq, next_lock,
//!           sessions: u32, locks: u32, claims: u32 }
//! SessionRec × sessions   in id order
//! LockRec    × locks      in creation order (id order)
//! ClaimRec   × claims     in sequence order (arrival order)
//! ```
//!
//! Two versions, one layout. **Version 2** adds `config.max_watchers` (after
//! `max_name_len`) and each session's `label` (after its record), and may hold what
//! version 1 cannot: `Permits` modes, watch claims (a claim's `holding: bool` becomes a
//! kind: 0 wait, 1 hold, 2 watch — the same bytes for the first two) and the recorded
//! replies of permit acquires and watches. **Version 1** is written whenever none of
//! that is in use (no label, no permits, no watch, `max_watchers` at its default of 4,
//! no such recorded reply), so a state that uses nothing new has the bytes it had before
//! version 2 existed; restore reads both and refuses either version where the other is
//! the one that state is written in.
//!
//! What the bytes promise:
//!
//! * **Deterministic.** The same input history gives the same bytes on every platform (all
//!   integers are fixed-width or postcard varints; nothing depends on `usize`), and a
//!   refused input leaves them unchanged.
//! * **Canonical.** Each state has exactly one encoding: the logical state is written,
//!   never the rows' layout (which row a session, lock or claim landed in never shows),
//!   and [`restore`](LockService::restore) refuses every other byte string (trailing
//!   bytes, over-long varints, a lock-delay that is over but not zeroed, records out of
//!   order).
//! * **Not history-free.** The state includes counters that record history: `next_seq`
//!   (claims ever made) and the lock ids (`next_lock`, entries ever created). Two
//!   histories that behave the same from now on can differ there, so their bytes differ:
//!   e.g. a wait queued then cancelled advances `next_seq` and a try-lock answered `Busy`
//!   does not.

use serde::{Deserialize, Serialize};

use crate::service::{find_lock, find_session, in_lock, Config, LockService, DEFAULT_MAX_WATCHERS};
use crate::storage::{Recorded, Storage};
use crate::table::{NameKey, NIL};
use crate::{Error, Label, LockName, Mode, SessionId, Table};

/// The four bytes every snapshot begins with.
pub const SNAPSHOT_MAGIC: [u8; 4] = *b"FLCK";
/// The newest snapshot format this build writes and reads (2). A state that uses no
/// label, permit, watch or non-default `max_watchers`, and has no recorded reply of a
/// watch, an unwatch or a permits acquire, is written as version 1, which this build reads
/// too.
pub const SNAPSHOT_VERSION: u16 = 2;

/// The version written when nothing needs version 2.
const V1: u16 = 1;

#[derive(Serialize, Deserialize)]
struct Header {
    magic: [u8; 4],
    version: u16,
}

/// Version 1's config: no `max_watchers` (the default, 4, is implied).
#[derive(Serialize, Deserialize)]
struct ConfigV1 {
    lock_delay: u64,
    max_name_len: u32,
}

/// Version 1's meta record.
#[derive(Serialize, Deserialize)]
struct MetaV1 {
    config: ConfigV1,
    now: u64,
    next_session: u64,
    revision: u64,
    next_seq: u64,
    next_lock: u64,
    sessions: u32,
    locks: u32,
    claims: u32,
}

#[derive(Serialize, Deserialize)]
struct Meta {
    config: Config,
    now: u64,
    next_session: u64,
    revision: u64,
    next_seq: u64,
    next_lock: u64,
    sessions: u32,
    locks: u32,
    claims: u32,
}

#[derive(Serialize, Deserialize)]
struct SessionRec {
    id: u64,
    ttl: u64,
    expires_at: u64,
    last_request: u64,
    last_reply: Recorded,
    last_target: u64,
}

#[derive(Serialize)]
struct LockRec {
    id: u64,
    name: LockName,
    delay_until: u64,
}

/// What a claim is. Encoded as 0, 1, 2: the bytes of version 1's `holding: bool` for a
/// wait and a hold.
#[derive(Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
enum ClaimKind {
    Wait,
    Hold,
    Watch,
}

#[derive(Serialize, Deserialize)]
struct ClaimRec {
    session: u64,
    lock: u64,
    mode: Mode,
    kind: ClaimKind,
    seq: u64,
    value: u64,
}

/// Writes records into a buffer, counting what did not fit.
struct Writer<'b> {
    buf: &'b mut [u8],
    used: usize,
    need: usize,
}

impl Writer<'_> {
    fn put<T: Serialize>(&mut self, rec: &T) {
        // Every record is small and bounded (a name or label is at most 64 bytes).
        let mut scratch = [0u8; 160];
        // The largest record (a session: five varints, a recorded reply and a label; or a
        // lock: two varints and a 64-byte name) fits, so this cannot fail; if it ever did,
        // count the whole scratch (an over-estimate that makes `snapshot` report
        // BufferTooSmall rather than write a short record).
        let n = postcard::to_slice(rec, &mut scratch)
            .map(|b| b.len())
            .unwrap_or(scratch.len());
        if self.need == self.used && self.used + n <= self.buf.len() {
            self.buf[self.used..self.used + n].copy_from_slice(&scratch[..n]);
            self.used += n;
        }
        self.need += n;
    }
}

impl<S: Storage> LockService<S> {
    /// Whether the state uses anything only version 2 can hold. O(sessions + claims).
    fn needs_v2(&self) -> bool {
        let t = self.storage.tables_ref();
        let st = &self.st;
        if st.config.max_watchers != DEFAULT_MAX_WATCHERS || st.watches > 0 {
            return true;
        }
        let mut s = st.session_order.head;
        while s != NIL {
            let r = &t.sessions[s as usize];
            let new_reply = matches!(
                r.last_reply(),
                Recorded::GrantedPermits { .. }
                    | Recorded::QueuedPermits { .. }
                    | Recorded::Watching { .. }
                    | Recorded::Unwatched
            );
            if r.label != NIL || new_reply {
                return true;
            }
            s = r.order.next;
        }
        let mut c = st.claim_order.head;
        while c != NIL {
            let r = &t.claims[c as usize];
            if matches!(r.mode(), Mode::Permits { .. }) {
                return true;
            }
            c = r.order.next;
        }
        false
    }

    fn write_snapshot(&self, w: &mut Writer<'_>) {
        let t = self.storage.tables_ref();
        let st = &self.st;
        let v2 = self.needs_v2();
        w.put(&Header {
            magic: SNAPSHOT_MAGIC,
            version: if v2 { SNAPSHOT_VERSION } else { V1 },
        });
        let meta = Meta {
            config: st.config,
            now: st.now,
            next_session: st.next_session,
            revision: st.revision,
            next_seq: st.next_seq,
            next_lock: st.next_lock,
            sessions: st.sessions.len,
            locks: st.lock_order.len,
            claims: st.claims.len,
        };
        if v2 {
            w.put(&meta);
        } else {
            w.put(&MetaV1 {
                config: ConfigV1 {
                    lock_delay: meta.config.lock_delay,
                    max_name_len: meta.config.max_name_len,
                },
                now: meta.now,
                next_session: meta.next_session,
                revision: meta.revision,
                next_seq: meta.next_seq,
                next_lock: meta.next_lock,
                sessions: meta.sessions,
                locks: meta.locks,
                claims: meta.claims,
            });
        }
        let mut s = st.session_order.head;
        while s != NIL {
            let r = &t.sessions[s as usize];
            w.put(&SessionRec {
                id: r.id,
                ttl: r.ttl(&st.classes),
                expires_at: r.expires_at,
                last_request: r.last_request,
                last_reply: r.last_reply(),
                last_target: r.last_target,
            });
            if v2 {
                // Appended to the record: the same bytes as a field after `last_target`.
                w.put(&crate::service::label_of(self.storage.labels_ref(), r));
            }
            s = r.order.next;
        }
        let mut l = st.lock_order.head;
        while l != NIL {
            let r = &t.locks[l as usize];
            w.put(&LockRec {
                id: r.id,
                name: r.name.clone(),
                delay_until: r.delay_until,
            });
            l = r.order.next;
        }
        let mut c = st.claim_order.head;
        while c != NIL {
            let r = &t.claims[c as usize];
            w.put(&ClaimRec {
                session: t.sessions[r.session() as usize].id,
                lock: t.locks[r.lock() as usize].id,
                mode: r.mode(),
                kind: if r.watching() {
                    ClaimKind::Watch
                } else if r.holding() {
                    ClaimKind::Hold
                } else {
                    ClaimKind::Wait
                },
                seq: r.seq,
                value: r.value,
            });
            c = r.order.next;
        }
    }

    /// The id the next [`open_session`](Self::open_session) will assign (ids count up from
    /// 1 and are never reused; the counter is part of the snapshot). A binding whose host
    /// numbers are narrower than `u64` (JavaScript's 2^53 - 1) checks it before opening a
    /// session, so it never emits an id it cannot represent. Errors: none. Cost: O(1).
    pub fn next_session_id(&self) -> SessionId {
        SessionId(self.st.next_session)
    }

    /// The size of [`snapshot`](Self::snapshot)'s output in bytes.
    /// Errors: none. Cost: O(sessions + locks + claims).
    pub fn snapshot_len(&self) -> usize {
        let mut w = Writer {
            buf: &mut [],
            used: 0,
            need: 0,
        };
        self.write_snapshot(&mut w);
        w.need
    }

    /// Writes the canonical snapshot into `buf` and returns its length.
    ///
    /// Errors: [`Error::BufferTooSmall`] with the size needed (nothing useful is written).
    /// Cost: O(sessions + locks + claims).
    pub fn snapshot(&self, buf: &mut [u8]) -> Result<usize, Error> {
        let mut w = Writer {
            buf,
            used: 0,
            need: 0,
        };
        self.write_snapshot(&mut w);
        if w.need > w.used {
            return Err(Error::BufferTooSmall {
                need: w.need.min(u32::MAX as usize) as u32,
            });
        }
        Ok(w.used)
    }

    /// The snapshot in a new vector (feature `alloc`). Errors: none. Cost: as
    /// [`snapshot`](Self::snapshot).
    #[cfg(feature = "alloc")]
    pub fn snapshot_vec(&self) -> alloc::vec::Vec<u8> {
        let mut v = alloc::vec![0u8; self.snapshot_len()];
        let n = self.snapshot(&mut v).unwrap_or(0);
        v.truncate(n);
        v
    }

    /// Rebuilds a service in `storage` from snapshot bytes, checking every invariant:
    /// magic and version; ids below their counters and in canonical order; sessions live
    /// (`now < expires_at <= now + ttl`); names valid and unique; at most one exclusive
    /// holder and never a mix of modes; tokens in `1..=revision`, each held once, rising
    /// in arrival order; waits in arrival order with deadlines after now, every holder of
    /// a lock older than its every waiter; no exclusive holder in lock-delay; no (session,
    /// lock) pair twice; no lock left idle; no waiter left ungranted on a lock that could
    /// grant it; everything within capacity. Version 2 adds: permits in `1..=limit`, one
    /// limit per lock and never more permits held than it; watches without mode or value,
    /// one per (session, lock), at most `max_watchers` per lock; labels of at most 64
    /// bytes; and a snapshot must be in the version its state is written in (version 1
    /// exactly when nothing of version 2 is in use).
    /// Trailing bytes and non-canonical encodings (over-long varints) are refused, so
    /// restore accepts exactly the bytes [`snapshot`](Self::snapshot) writes; bytes longer
    /// than the records the header counts can be ([`snapshot_max_len`]) are refused
    /// before a record is read. The bytes carry no checksum: a value changed by damage
    /// that still makes a consistent state (a revision lowered below a token handed out)
    /// restores as that state, so store snapshots with a checksum of your own
    /// (docs/SPEC.md §9).
    ///
    /// Errors: [`Error::BadMagic`], [`Error::UnsupportedVersion`] (neither 1 nor 2),
    /// [`Error::CorruptSnapshot`] (says which check failed), [`Error::CapacityExceeded`],
    /// [`Error::BadConfig`]. On error the storage is handed back (its rows are scratch).
    /// Cost: O(capacity) to clear the tables (every row, bucket and label row, whatever
    /// the snapshot holds), then O(sessions + locks) expected + O(claims log claims) (the
    /// token check).
    pub fn restore(storage: S, bytes: &[u8]) -> Result<Self, (S, Error)> {
        Self::restore_inner(storage, bytes, None)
    }

    /// [`restore`](Self::restore) with the indexes keyed by `key` from the start
    /// ([`set_name_key`](Self::set_name_key)): the rows are indexed under the key as they
    /// are loaded, so a snapshot whose lock names, or whose session ids, were chosen to
    /// share one probe run under the public hash costs no more than any other (restoring,
    /// then keying, would index them under the public hash first: O(n²) for such a
    /// snapshot). The way to restore bytes of a source that may choose them. The same
    /// checks, errors and result as [`restore`](Self::restore), keyed. Cost: as
    /// `restore`'s, with each name, each session away from its home row, each watch and
    /// each hold or wait of a lock with two or more hashed by SipHash-1-3.
    /// Errors: as `restore`.
    pub fn restore_keyed(storage: S, bytes: &[u8], key: NameKey) -> Result<Self, (S, Error)> {
        Self::restore_inner(storage, bytes, Some(key))
    }

    fn restore_inner(storage: S, bytes: &[u8], key: Option<NameKey>) -> Result<Self, (S, Error)> {
        let (meta, v2, rest) = match read_header(bytes) {
            Ok(x) => x,
            Err(e) => return Err((storage, e)),
        };
        let mut storage = storage;
        if let Err(e) = LockService::check(&mut storage, &meta.config) {
            return Err((storage, e));
        }
        let mut svc = LockService::build(storage, meta.config);
        svc.st.name_key = key;
        match svc.load(&meta, v2, rest) {
            // One state, one version: version 2 only for what version 1 cannot hold.
            Ok(()) if svc.needs_v2() != v2 => Err((
                svc.storage,
                Error::CorruptSnapshot("snapshot version not the one its state is written in"),
            )),
            // postcard also decodes over-long varints; the state re-encodes minimally, so
            // the lengths differ exactly when the input was not the canonical encoding.
            // Refusing it keeps "one state, one byte string" true for restored bytes too.
            Ok(()) if svc.snapshot_len() != bytes.len() => Err((
                svc.storage,
                Error::CorruptSnapshot("non-canonical encoding"),
            )),
            Ok(()) => Ok(svc),
            Err(e) => Err((svc.storage, e)),
        }
    }
}

/// The most bytes [`snapshot_config`] and [`gate_snapshot_resources`](crate::gate_snapshot_resources)
/// read: a service snapshot's header at its longest (the magic, a three-byte version and
/// the meta record with every varint at its widest; a gate's header is shorter). Their
/// answer for any bytes is their answer for the first `SNAPSHOT_HEADER_MAX_LEN` of them,
/// so a host holding the bytes elsewhere (a JS array, a file) can judge that prefix before
/// it copies or reads the rest.
pub const SNAPSHOT_HEADER_MAX_LEN: usize = 92;

/// The config a [`LockService::snapshot`] was taken with, read from its header and
/// checked as [`Config::validate`] checks one: the refusals [`LockService::restore`] makes
/// before it looks at the storage, for a host that allocates the tables to restore into
/// only once the bytes are known to be a snapshot (the C library and the wasm binding do),
/// so that their refusals come in the core's order. It does not check the rest of the
/// snapshot; `restore` does.
///
/// Errors: [`Error::BadMagic`], [`Error::UnsupportedVersion`] (neither 1 nor 2),
/// [`Error::CorruptSnapshot`] (`"bad version"`: a version that is no `u16` varint;
/// `"truncated header"`: bytes that end inside the header; `"bad header"`: a header field
/// that is no value of its type, such as a varint past its range), [`Error::BadConfig`].
/// Cost: O(1).
pub fn snapshot_config(bytes: &[u8]) -> Result<Config, Error> {
    let (meta, _, _) = read_header(bytes)?;
    meta.config.validate()?;
    Ok(meta.config)
}

/// The most bytes a snapshot with this header can be: the header as written, then each
/// record it counts at its longest (every field at its widest minimal varint, a name or
/// label of 64 bytes: more than any record restore accepts). [`LockService::restore`] refuses
/// longer bytes (`CorruptSnapshot("longer than its records can be")`) before it reads a
/// record, so its answer for any bytes is its answer for their first
/// `snapshot_max_len + 1`: a host holding the bytes elsewhere (a JS array, a file) copies
/// at most that many, however much junk follows a header. Read from the first
/// [`SNAPSHOT_HEADER_MAX_LEN`] bytes as from the whole.
///
/// Errors: as [`snapshot_config`] (the config is judged as there, so a binding that
/// needs no config from the header asks only this). Cost: O(1).
pub fn snapshot_max_len(bytes: &[u8]) -> Result<usize, Error> {
    let any = crate::Capacity {
        sessions: u32::MAX,
        locks: u32::MAX,
        claims: u32::MAX,
    };
    snapshot_max_len_within(bytes, any)
}

/// As [`snapshot_max_len`], for a restore into tables of `capacity`: a header that counts
/// more sessions, locks or claims than its table has rows is refused by those counts
/// (`CapacityExceeded`) before a record is read, so such a count is taken as the rows.
/// What a binding that holds the bytes elsewhere copies at most, plus one byte, once it
/// knows the tables it restores into: a header claiming more records than the tables
/// hold brings no more bytes in than the tables could.
///
/// Errors: as [`snapshot_config`]. Cost: O(1).
pub fn snapshot_max_len_within(bytes: &[u8], capacity: crate::Capacity) -> Result<usize, Error> {
    let (mut meta, v2, rest) = read_header(bytes)?;
    meta.config.validate()?;
    meta.sessions = meta.sessions.min(capacity.sessions);
    meta.locks = meta.locks.min(capacity.locks);
    meta.claims = meta.claims.min(capacity.claims);
    Ok((bytes.len() - rest.len()).saturating_add(records_max_len(&meta, v2)))
}

/// A `u64` varint at its longest (postcard's canonical encoding of `u64::MAX`).
pub(crate) const U64_MAX_LEN: usize = 10;
/// A `u32` varint at its longest.
const U32_MAX_LEN: usize = 5;
/// A name or a label (at most 64 bytes) with its one-byte length.
pub(crate) const STR_MAX_LEN: usize = 1 + crate::MAX_NAME_LEN;
/// A [`Mode`] at its longest: `Permits` with two `u32`s.
const MODE_MAX_LEN: usize = 1 + 2 * U32_MAX_LEN;
/// A [`SessionRec`] at its longest: five `u64`s and a recorded `Granted` (a mode and a
/// token); version 2 appends a label.
const SESSION_REC_MAX_LEN: usize = 5 * U64_MAX_LEN + (1 + MODE_MAX_LEN + U64_MAX_LEN);
/// A [`LockRec`] at its longest: two `u64`s and a name.
const LOCK_REC_MAX_LEN: usize = 2 * U64_MAX_LEN + STR_MAX_LEN;
/// A [`ClaimRec`] at its longest: four `u64`s, a mode and a kind.
const CLAIM_REC_MAX_LEN: usize = 4 * U64_MAX_LEN + MODE_MAX_LEN + 1;

/// The most bytes the records a header counts can take. Cost: O(1).
fn records_max_len(meta: &Meta, v2: bool) -> usize {
    let session = SESSION_REC_MAX_LEN + if v2 { STR_MAX_LEN } else { 0 };
    [
        (meta.sessions, session),
        (meta.locks, LOCK_REC_MAX_LEN),
        (meta.claims, CLAIM_REC_MAX_LEN),
    ]
    .iter()
    .fold(0usize, |sum, &(n, len)| {
        sum.saturating_add((n as usize).saturating_mul(len))
    })
}

/// Why a header's `u16` varint at the start of `rest` did not decode: cut short (at most
/// two bytes, each saying another follows) is a truncated header; anything else (longer
/// than a `u16`'s three bytes, or past its range) a bad version. Cost: O(1).
pub(crate) fn bad_varint(rest: &[u8]) -> &'static str {
    if rest.len() < 3 && rest.iter().all(|b| b & 0x80 != 0) {
        "truncated header"
    } else {
        "bad version"
    }
}

/// A snapshot's header: its counters and config, whether it is version 2, and the bytes
/// after it. Errors: as [`snapshot_config`], but for `BadConfig`. Cost: O(1).
fn read_header(bytes: &[u8]) -> Result<(Meta, bool, &[u8]), Error> {
    // The header's fields in order, each judged before the next is read: the magic (raw
    // bytes, as postcard writes a `[u8; 4]`), then the version (`"FLCK"` with no version
    // is a truncated header, not a foreign file).
    let Some(rest) = bytes.strip_prefix(&SNAPSHOT_MAGIC) else {
        return Err(Error::BadMagic);
    };
    let Ok((version, rest)) = postcard::take_from_bytes::<u16>(rest) else {
        return Err(Error::CorruptSnapshot(bad_varint(rest)));
    };
    let v2 = match version {
        V1 => false,
        SNAPSHOT_VERSION => true,
        v => return Err(Error::UnsupportedVersion(v)),
    };
    let meta = if v2 {
        postcard::take_from_bytes::<Meta>(rest)
    } else {
        postcard::take_from_bytes::<MetaV1>(rest).map(|(m, rest)| {
            let meta = Meta {
                config: Config {
                    lock_delay: m.config.lock_delay,
                    max_name_len: m.config.max_name_len,
                    max_watchers: DEFAULT_MAX_WATCHERS,
                },
                now: m.now,
                next_session: m.next_session,
                revision: m.revision,
                next_seq: m.next_seq,
                next_lock: m.next_lock,
                sessions: m.sessions,
                locks: m.locks,
                claims: m.claims,
            };
            (meta, rest)
        })
    };
    meta.map(|(meta, rest)| (meta, v2, rest))
        .map_err(|e| Error::CorruptSnapshot(cut_or_bad(e, "truncated header", "bad header")))
}

/// The reason for bytes postcard did not decode: `cut` when they ended inside the value
/// (more bytes could have made it whole), `bad` when they hold something no value is (a
/// varint longer than its type or past its range, an enum tag or a bool that is none,
/// text that is not UTF-8 or longer than its limit). Cost: O(1).
pub(crate) fn cut_or_bad(e: postcard::Error, cut: &'static str, bad: &'static str) -> &'static str {
    if e == postcard::Error::DeserializeUnexpectedEnd {
        cut
    } else {
        bad
    }
}

impl<S: Storage> LockService<S> {
    fn load(&mut self, meta: &Meta, v2: bool, mut rest: &[u8]) -> Result<(), Error> {
        fn take<'a, T: Deserialize<'a>>(rest: &mut &'a [u8]) -> Result<T, Error> {
            let (v, r) = postcard::take_from_bytes::<T>(rest).map_err(|e| {
                Error::CorruptSnapshot(cut_or_bad(e, "truncated record", "bad record"))
            })?;
            *rest = r;
            Ok(v)
        }
        // A name or a label: at most 64 bytes, so its canonical length prefix is one byte
        // below 0x80. postcard reads a string's length as a `usize` varint, so a prefix
        // stretched to 6–10 bytes decodes on a 64-bit target and not on a 32-bit one:
        // refused here, before postcard, the same way on every target.
        fn take_str<'a, T: Deserialize<'a>>(rest: &mut &'a [u8]) -> Result<T, Error> {
            if rest.first().is_some_and(|&b| b >= 0x80) {
                return Err(Error::CorruptSnapshot("bad record"));
            }
            take(rest)
        }
        let corrupt = Error::CorruptSnapshot;
        let cap = self.capacity();
        if meta.sessions > cap.sessions {
            return Err(Error::CapacityExceeded(Table::Sessions));
        }
        if meta.locks > cap.locks {
            return Err(Error::CapacityExceeded(Table::Locks));
        }
        if meta.claims > cap.claims {
            return Err(Error::CapacityExceeded(Table::Claims));
        }
        if meta.next_session == 0 || meta.next_seq == 0 || meta.next_lock == 0 {
            return Err(corrupt("counter is zero"));
        }
        // Each counter grows by at most one per grant or applied input, so a real history
        // keeps them far below 2^63; refusing more means `+= 1` can never overflow after a
        // restore of hostile bytes.
        let limit = 1u64 << 63;
        if meta.next_session > limit
            || meta.next_seq > limit
            || meta.next_lock > limit
            || meta.revision > limit
        {
            return Err(corrupt("counter beyond 2^63"));
        }
        // Judged before a record is read: a host that copies the bytes in from elsewhere
        // copies at most `snapshot_max_len + 1` of them and gets this same answer.
        if rest.len() > records_max_len(meta, v2) {
            return Err(corrupt("longer than its records can be"));
        }
        let config = meta.config;
        {
            let st = &mut self.st;
            st.now = meta.now;
            st.next_session = meta.next_session;
            st.revision = meta.revision;
            st.next_seq = meta.next_seq;
            st.next_lock = meta.next_lock;
        }
        let mut v = self.view();
        let now = meta.now;

        let mut last_id = 0;
        for _ in 0..meta.sessions {
            let r: SessionRec = take(&mut rest)?;
            let label: Label = if v2 {
                take_str(&mut rest)?
            } else {
                Label::EMPTY
            };
            if r.id <= last_id || r.id >= meta.next_session {
                return Err(corrupt("session ids out of order or beyond the counter"));
            }
            last_id = r.id;
            if r.ttl == 0 || r.expires_at <= now || r.expires_at > now.saturating_add(r.ttl) {
                return Err(corrupt("session deadline not in (now, now + ttl]"));
            }
            let reply_ok = match r.last_reply {
                // A number is only ever recorded together with its reply (0 may precede
                // any reply: request number 0 is legal).
                Recorded::None => r.last_request == 0 && r.last_target == 0,
                // Recorded at some time t >= 0 as t + ttl; later keep-alives without a
                // number may have moved the session's deadline on since.
                Recorded::KeptAlive { expires_at } => {
                    r.last_target == 0 && r.ttl <= expires_at && expires_at <= r.expires_at
                }
                // A permit acquire's reply is recorded as `GrantedPermits`/`QueuedPermits`.
                Recorded::Granted {
                    mode: Mode::Permits { .. },
                    ..
                }
                | Recorded::Queued {
                    mode: Mode::Permits { .. },
                    ..
                } => false,
                Recorded::Granted { token, .. }
                | Recorded::Released { token }
                | Recorded::GrantedPermits { token } => token >= 1 && token <= meta.revision,
                Recorded::Queued { position, .. } | Recorded::QueuedPermits { position } => {
                    position >= 1
                }
                Recorded::Busy
                | Recorded::Cancelled
                | Recorded::Watching { .. }
                | Recorded::Unwatched => true,
            };
            if !reply_ok {
                return Err(corrupt("recorded reply does not fit its session"));
            }
            let slot = v
                .alloc_session(r.id)
                .ok_or(Error::CapacityExceeded(Table::Sessions))?;
            v.insert_session(slot, r.id, r.ttl, r.expires_at);
            // On its own in the heap: records come in id order, not deadline order, so
            // they cannot be appended to classes (a later keep-alive moves it into one).
            v.schedule_session(slot, false);
            v.s[slot as usize].last_request = r.last_request;
            v.s[slot as usize].set_last_reply(r.last_reply);
            v.s[slot as usize].last_target = r.last_target;
            v.set_label(slot, label)?;
        }

        let mut last_id = 0;
        for _ in 0..meta.locks {
            // Field by field (what the derived decoder does), so the name's length is
            // judged as `take_str` does.
            let r = LockRec {
                id: take(&mut rest)?,
                name: take_str(&mut rest)?,
                delay_until: take(&mut rest)?,
            };
            if r.id <= last_id || r.id >= meta.next_lock {
                return Err(corrupt("lock ids out of order or beyond the counter"));
            }
            last_id = r.id;
            if config.check_name(r.name.as_str()).is_err() {
                return Err(corrupt("lock name empty or too long"));
            }
            if find_lock(v.li, v.l, v.st.name_key.as_ref(), r.name.as_str()).is_some() {
                return Err(corrupt("lock name twice"));
            }
            if r.delay_until != 0 && !crate::storage::delay_holds(r.delay_until, now) {
                return Err(corrupt(
                    "lock-delay that is over is not zeroed (non-canonical)",
                ));
            }
            if r.delay_until > now.saturating_add(config.lock_delay) {
                return Err(corrupt("lock-delay beyond now + lock_delay"));
            }
            let l =
                v.st.locks
                    .alloc(v.l)
                    .ok_or(Error::CapacityExceeded(Table::Locks))?;
            let hash = v.name_hash(r.name.as_str());
            v.insert_lock(l, r.name, hash, r.id);
            if crate::storage::delay_holds(r.delay_until, now) {
                v.l[l as usize].delay_until = r.delay_until;
                v.st.locks.schedule(v.l, l);
            }
        }

        let mut last_seq = 0;
        for _ in 0..meta.claims {
            let r: ClaimRec = take(&mut rest)?;
            if r.seq <= last_seq || r.seq >= meta.next_seq {
                return Err(corrupt("claim sequence out of order or beyond the counter"));
            }
            last_seq = r.seq;
            let s = find_session(v.si, v.s, v.st.name_key.as_ref(), r.session)
                .ok_or(corrupt("claim of an unknown session"))?;
            // Locks were restored into rows 0..n in id order: binary search by id.
            let n = meta.locks as usize;
            let l = v.l[..n]
                .binary_search_by_key(&r.lock, |row| row.id)
                .map_err(|_| corrupt("claim on an unknown lock"))? as u32;
            if r.kind == ClaimKind::Watch {
                // A watch has no mode or value of its own: one encoding, zeros.
                if r.mode != Mode::Exclusive || r.value != 0 {
                    return Err(corrupt("a watch with a mode or value"));
                }
                if v.watch_slot(s, l).is_some() {
                    return Err(corrupt("a session watches a lock twice"));
                }
                if v.watcher_count(l) >= config.max_watchers {
                    return Err(corrupt("more watchers than max_watchers"));
                }
                let c =
                    v.st.claims
                        .alloc(v.c)
                        .ok_or(Error::CapacityExceeded(Table::Claims))?;
                v.insert_watch(c, s, l, r.seq);
                continue;
            }
            let holding = r.kind == ClaimKind::Hold;
            if v.claim_slot(s, l).is_some() {
                return Err(corrupt("a session claims a lock twice"));
            }
            if r.mode.validate().is_err() {
                return Err(corrupt("permits outside 1..=limit"));
            }
            // Every hold and wait of a lock carries one limit (0: a plain lock).
            let limit = match r.mode {
                Mode::Permits { limit, .. } => limit,
                Mode::Exclusive | Mode::Shared => 0,
            };
            if v.live_limit(l).is_some_and(|live| live != limit) {
                return Err(corrupt("holds and waits of a lock differ in limit"));
            }
            let lock = &v.l[l as usize];
            if holding {
                // Holders are granted only from an empty queue or from its head, so every
                // holder arrived before every waiter (claims come in arrival order).
                if lock.waiters.len > 0 {
                    return Err(corrupt("a waiter arrived before a holder"));
                }
                if r.value == 0 || r.value > meta.revision {
                    return Err(corrupt("token outside 1..=revision"));
                }
                if lock.holders.len > 0
                    && (r.mode == Mode::Exclusive || v.holder_mode(l) == Some(Mode::Exclusive))
                {
                    return Err(corrupt("exclusive lock with more than one holder"));
                }
                if let Mode::Permits { count, limit } = r.mode {
                    if u64::from(lock.in_use) + u64::from(count) > u64::from(limit) {
                        return Err(corrupt("more permits held than the limit"));
                    }
                }
                // Holders of one lock were granted in arrival order, so their tokens rise
                // with their sequence numbers.
                if lock.holders.tail != NIL && v.c[lock.holders.tail as usize].value >= r.value {
                    return Err(corrupt("holders' tokens not rising in arrival order"));
                }
            } else if r.value <= now {
                return Err(corrupt("wait deadline not after now"));
            }
            let c =
                v.st.claims
                    .alloc(v.c)
                    .ok_or(Error::CapacityExceeded(Table::Claims))?;
            v.insert_claim(c, s, l, r.mode, r.seq);
            let row = &mut v.c[c as usize];
            row.set_holding(holding);
            row.value = r.value;
            let permits = row.permits();
            let lock = &mut v.l[l as usize];
            if holding {
                let mut h = lock.holders;
                h.push_back(v.c, c, in_lock);
                v.l[l as usize].holders = h;
                v.l[l as usize].in_use += permits;
                // Scratch use of the claim heap (keyed by value = token): see below.
                v.st.claims.schedule(v.c, c);
            } else {
                let mut w = lock.waiters;
                w.push_back(v.c, c, in_lock);
                v.l[l as usize].waiters = w;
            }
        }
        if !rest.is_empty() {
            return Err(corrupt("trailing bytes"));
        }
        // Every grant got its own token, across all locks: drain the holders from the heap
        // in token order and refuse a repeat. Then schedule the timed waits for real.
        let mut prev = 0;
        while let Some(c) = v.st.claims.earliest(v.c) {
            let token = v.c[c as usize].value;
            if token == prev {
                return Err(corrupt("a token held twice"));
            }
            prev = token;
            v.st.claims.unschedule(v.c, c);
        }
        let mut c = v.st.claim_order.head;
        while c != NIL {
            let row = &v.c[c as usize];
            let next = row.order.next;
            if !row.holding() && !row.watching() && row.value != u64::MAX {
                v.st.claims.schedule(v.c, c);
            }
            c = next;
        }

        // Whole-lock checks: no idle entry, no exclusive hold in lock-delay, no missed
        // grant.
        for l in 0..meta.locks as usize {
            let lock = &v.l[l];
            let delayed = lock.in_delay(now);
            if lock.holders.len == 0 && lock.waiters.len == 0 && lock.watchers == NIL && !delayed {
                return Err(corrupt("idle lock entry"));
            }
            // A delay starts only when a holder expires, and nothing is granted during it:
            // an exclusive holder is then gone, so only shared or permit holders (or none)
            // remain.
            if delayed && v.holder_mode(l as u32) == Some(Mode::Exclusive) {
                return Err(corrupt("lock-delay with an exclusive holder"));
            }
            if !delayed && lock.waiters.head != NIL {
                let head = v.c[lock.waiters.head as usize].mode();
                if v.fits(l as u32, head) {
                    return Err(corrupt("a grantable waiter was left waiting"));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a test's failed set-up is a failed test
mod tests {
    use super::*;
    use crate::storage::VecStorage;
    use crate::table::{home, mix, tag_of, BucketArray, Indexed};
    use crate::{Tick, Wait};

    /// The longest distance, in buckets, from an entry of the session index to its home
    /// bucket under the service's key: the most one lookup probes past.
    fn longest_probe(svc: &mut LockService<VecStorage>) -> usize {
        let v = svc.view();
        let n = v.si.buckets();
        (0..n)
            .filter_map(|b| {
                let slot = v.si.bucket(b).0;
                (slot != NIL).then(|| {
                    let h = home(tag_of(v.s[slot as usize].key_hash(v.key())), n);
                    (b + n - h) % n
                })
            })
            .max()
            .unwrap_or(0)
    }

    /// Each record's longest encoding is the constant `records_max_len` counts it at:
    /// every field at its widest minimal varint (`u64::MAX`, a 64-byte name or label, a
    /// permits mode of two `u32::MAX`), the widest recorded reply `Granted` — wider than
    /// any record restore accepts (ids stay below 2^63, and a permits grant is recorded
    /// otherwise), so the bound is safe.
    #[test]
    fn the_record_bounds_are_the_widest_records() {
        let wide = Mode::Permits {
            count: u32::MAX,
            limit: u32::MAX,
        };
        let replies = [
            Recorded::None,
            Recorded::KeptAlive {
                expires_at: u64::MAX,
            },
            Recorded::Granted {
                mode: wide,
                token: u64::MAX,
            },
            Recorded::Queued {
                mode: wide,
                position: u32::MAX,
            },
            Recorded::Busy,
            Recorded::Released { token: u64::MAX },
            Recorded::Cancelled,
            Recorded::GrantedPermits { token: u64::MAX },
            Recorded::QueuedPermits { position: u32::MAX },
            Recorded::Watching { holders: u32::MAX },
            Recorded::Unwatched,
        ];
        let widest_session = replies
            .iter()
            .map(|&last_reply| {
                enc_len(&SessionRec {
                    id: u64::MAX,
                    ttl: u64::MAX,
                    expires_at: u64::MAX,
                    last_request: u64::MAX,
                    last_reply,
                    last_target: u64::MAX,
                })
            })
            .max();
        assert_eq!(widest_session, Some(SESSION_REC_MAX_LEN));
        let name = "n".repeat(crate::MAX_NAME_LEN);
        let label = Label::new(&"l".repeat(crate::MAX_LABEL_LEN)).unwrap();
        assert_eq!(enc_len(&label), STR_MAX_LEN);
        let lock = LockRec {
            id: u64::MAX,
            name: LockName::new(&name).unwrap(),
            delay_until: u64::MAX,
        };
        assert_eq!(enc_len(&lock), LOCK_REC_MAX_LEN);
        for kind in [ClaimKind::Wait, ClaimKind::Hold, ClaimKind::Watch] {
            let claim = ClaimRec {
                session: u64::MAX,
                lock: u64::MAX,
                mode: wide,
                kind,
                seq: u64::MAX,
                value: u64::MAX,
            };
            assert_eq!(enc_len(&claim), CLAIM_REC_MAX_LEN);
        }
    }

    /// A record's encoded length, for the test above.
    fn enc_len<T: Serialize>(v: &T) -> usize {
        let mut buf = [0u8; 256];
        postcard::to_slice(v, &mut buf).map_or(usize::MAX, |b| b.len())
    }

    /// Junk after a header is refused before a record is read once it is longer than the
    /// records the header counts can be, so the answer for any bytes is the answer for
    /// their first `snapshot_max_len + 1` — what a host copying them in from elsewhere
    /// copies. Snapshots of the widest states stay within the bound.
    #[test]
    fn bytes_longer_than_their_records_can_be_are_refused_as_their_prefix_is() {
        let mut svc = LockService::new(VecStorage::new(4, 4, 8), Config::default()).unwrap();
        let mut out = std::vec::Vec::new();
        let label = Label::new(&"l".repeat(crate::MAX_LABEL_LEN)).unwrap();
        let name = "n".repeat(crate::MAX_NAME_LEN);
        let a = svc.open_labeled(Tick(1), 1_000, label, &mut out).unwrap();
        let b = svc.open_session(Tick(1), 1_000, &mut out).unwrap();
        let (a, b) = (a.opened().unwrap(), b.opened().unwrap());
        let permits = Mode::Permits { count: 2, limit: 3 };
        svc.acquire(Tick(2), a, &name, permits, Wait::None, Some(7), &mut out)
            .unwrap();
        svc.acquire(Tick(2), b, &name, permits, Wait::Forever, Some(9), &mut out)
            .unwrap();
        let mut buf = std::vec![0u8; svc.snapshot_len()];
        let n = svc.snapshot(&mut buf).unwrap();
        let good = &buf[..n];
        let max = snapshot_max_len(good).unwrap();
        assert!(n <= max, "{n} > {max}");
        assert_eq!(
            snapshot_max_len(&good[..SNAPSHOT_HEADER_MAX_LEN.min(n)]),
            Ok(max),
            "read from the header alone"
        );
        let mut other = good.to_vec();
        other[SNAPSHOT_MAGIC.len()] = 0x7f;
        for bad in [&b"junk"[..], &good[..5], &other] {
            assert_eq!(
                snapshot_max_len(bad).err(),
                snapshot_config(bad).err(),
                "the header's refusals, as snapshot_config's: {bad:?}"
            );
        }
        let restore = |bytes: &[u8]| {
            LockService::restore(VecStorage::new(4, 4, 8), bytes)
                .map(|_| ())
                .map_err(|(_, e)| e)
        };
        assert_eq!(restore(good), Ok(()));
        let mut padded = good.to_vec();
        padded.resize(max, 0);
        assert_eq!(
            restore(&padded),
            Err(Error::CorruptSnapshot("trailing bytes")),
            "within the bound: read as before"
        );
        padded.resize(max + 1, 0);
        let beyond = restore(&padded);
        assert_eq!(
            beyond,
            Err(Error::CorruptSnapshot("longer than its records can be"))
        );
        padded.resize(max + (1 << 20), 0xff);
        assert_eq!(restore(&padded), beyond);
        assert_eq!(restore(&padded[..max + 1]), beyond, "the prefix's answer");
        // The gate's bound, the same way.
        let mut g = crate::FenceGate::new(std::vec![crate::GateRow::EMPTY; 2]).unwrap();
        g.admit(&name, crate::Token(u64::MAX)).unwrap();
        let mut gbuf = std::vec![0u8; g.snapshot_len()];
        let gn = g.snapshot(&mut gbuf).unwrap();
        let gmax = crate::gate_snapshot_max_len(&gbuf[..gn]).unwrap();
        assert_eq!(gn, gmax, "one resource at its widest");
        let grestore = |bytes: &[u8]| {
            crate::FenceGate::restore(std::vec![crate::GateRow::EMPTY; 2], bytes)
                .map(|_| ())
                .map_err(|(_, e)| e)
        };
        assert_eq!(grestore(&gbuf[..gn]), Ok(()));
        let mut gpadded = gbuf[..gn].to_vec();
        gpadded.resize(gmax + (1 << 20), 0);
        assert_eq!(
            grestore(&gpadded),
            Err(Error::CorruptSnapshot("longer than its records can be"))
        );
        assert_eq!(grestore(&gpadded[..gmax + 1]), grestore(&gpadded));
    }

    /// Within tables: the bound counts no more records than the tables hold, since a
    /// header counting more is refused by its counts before a record is read — the same
    /// answer from the bound's prefix as from bytes of any length. Within the tables it
    /// is `snapshot_max_len`.
    #[test]
    fn a_header_counting_more_than_the_tables_hold_is_bounded_by_the_tables() {
        let cap = crate::Capacity {
            sessions: 2,
            locks: 2,
            claims: 4,
        };
        let svc = LockService::new(VecStorage::new(2, 2, 4), Config::default()).unwrap();
        let mut buf = std::vec![0u8; svc.snapshot_len()];
        let n = svc.snapshot(&mut buf).unwrap();
        let empty = &buf[..n];
        assert_eq!(snapshot_max_len_within(empty, cap), snapshot_max_len(empty));
        // An empty service's snapshot ends with its three counts: sessions → 2^32 - 1.
        let mut huge = empty[..n - 3].to_vec();
        huge.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f, 0, 0]);
        let whole = snapshot_max_len(&huge).unwrap();
        let within = snapshot_max_len_within(&huge, cap).unwrap();
        assert!(whole > 1 << 32, "{whole}");
        assert!(within < 1000, "{within}");
        let restore = |bytes: &[u8]| {
            LockService::restore(VecStorage::new(2, 2, 4), bytes)
                .map(|_| ())
                .map_err(|(_, e)| e)
        };
        let refused = Err(Error::CapacityExceeded(crate::Table::Sessions));
        huge.resize(within + (1 << 16), 0xff);
        assert_eq!(restore(&huge), refused);
        assert_eq!(restore(&huge[..within + 1]), refused, "the prefix's answer");
        // The gate's, the same way: a count of 2^32 - 1 resources into 2 rows.
        let g = crate::FenceGate::new(std::vec![crate::GateRow::EMPTY; 2]).unwrap();
        let mut gbuf = std::vec![0u8; g.snapshot_len()];
        let gn = g.snapshot(&mut gbuf).unwrap();
        assert_eq!(
            crate::gate_snapshot_max_len_within(&gbuf[..gn], 2),
            crate::gate_snapshot_max_len(&gbuf[..gn])
        );
        let mut ghuge = gbuf[..gn - 1].to_vec(); // an empty gate's ends with its count, 0
        ghuge.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
        let gwithin = crate::gate_snapshot_max_len_within(&ghuge, 2).unwrap();
        assert!(crate::gate_snapshot_max_len(&ghuge).unwrap() > 1 << 32);
        assert!(gwithin < 1000, "{gwithin}");
        ghuge.resize(gwithin + (1 << 16), 0xff);
        let grestore = |bytes: &[u8]| {
            crate::FenceGate::restore(std::vec![crate::GateRow::EMPTY; 2], bytes)
                .map(|_| ())
                .map_err(|(_, e)| e)
        };
        let grefused = Err(Error::CapacityExceeded(crate::Table::Resources));
        assert_eq!(grestore(&ghuge), grefused);
        assert_eq!(
            grestore(&ghuge[..gwithin + 1]),
            grefused,
            "the prefix's answer"
        );
    }

    /// The header judgements read at most `SNAPSHOT_HEADER_MAX_LEN` bytes: a service
    /// header with every field at its widest encoding (over-long varints decode) is
    /// judged the same from its first `SNAPSHOT_HEADER_MAX_LEN` bytes as whole, and one
    /// byte fewer is a truncated header; a gate's header is shorter.
    #[test]
    fn the_header_judgements_read_at_most_the_header_max_len() {
        let widest = |value: u64, width: usize| -> std::vec::Vec<u8> {
            let mut out: std::vec::Vec<u8> = (0..width)
                .map(|i| ((value >> (7 * i)) & 0x7f) as u8 | 0x80)
                .collect();
            if let Some(last) = out.last_mut() {
                *last &= 0x7f;
            }
            out
        };
        let mut b = SNAPSHOT_MAGIC.to_vec();
        b.extend(widest(SNAPSHOT_VERSION as u64, 3));
        b.extend(widest(5, 10)); // lock_delay
        b.extend(widest(64, 5)); // max_name_len
        b.extend(widest(4, 5)); // max_watchers
        for _ in 0..5 {
            b.extend(widest(1, 10)); // now and the four counters
        }
        for _ in 0..3 {
            b.extend(widest(0, 5)); // the three row counts
        }
        assert_eq!(b.len(), SNAPSHOT_HEADER_MAX_LEN);
        let whole = snapshot_config(&b);
        assert!(whole.is_ok(), "{whole:?}");
        b.extend([0xffu8; 64]);
        assert_eq!(snapshot_config(&b), whole);
        assert_eq!(snapshot_config(&b[..SNAPSHOT_HEADER_MAX_LEN]), whole);
        assert_eq!(
            snapshot_config(&b[..SNAPSHOT_HEADER_MAX_LEN - 1]),
            Err(Error::CorruptSnapshot("truncated header"))
        );
        let mut g = crate::GATE_MAGIC.to_vec();
        g.extend(widest(crate::GATE_VERSION as u64, 3));
        g.extend(widest(7, 5));
        assert!(g.len() <= SNAPSHOT_HEADER_MAX_LEN);
        assert_eq!(crate::gate_snapshot_resources(&g), Ok(7));
    }

    /// A snapshot's session ids are its author's. Ids chosen to share one home row and,
    /// under the public mixer, one home bucket of the session index make one probe run
    /// as long as the sessions: each lookup O(sessions), and the restore O(sessions²).
    /// Restored under a key, the same sessions are spread out; the service is the same
    /// (every session found, the snapshot byte for byte).
    #[test]
    fn session_ids_chosen_to_collide_are_spread_out_by_a_keyed_restore() {
        const ROWS: usize = 256;
        const CHOSEN: usize = 100;
        // Every id ≡ 1 (mod ROWS): home row 0, so all but the first are indexed; and
        // each one's public hash in home bucket 0 of the index's 2 × ROWS.
        let ids: std::vec::Vec<u64> = (0u64..)
            .map(|j| 1 + j * ROWS as u64)
            .filter(|id| home(tag_of(mix(*id)), 2 * ROWS) == 0)
            .take(CHOSEN)
            .collect();
        let mut buf = std::vec![0u8; 64 * 1024];
        let mut w = Writer {
            buf: &mut buf,
            used: 0,
            need: 0,
        };
        let config = Config::default();
        w.put(&Header {
            magic: SNAPSHOT_MAGIC,
            version: V1,
        });
        w.put(&MetaV1 {
            config: ConfigV1 {
                lock_delay: config.lock_delay,
                max_name_len: config.max_name_len,
            },
            now: 0,
            next_session: ids[CHOSEN - 1] + 1,
            revision: 0,
            next_seq: 1,
            next_lock: 1,
            sessions: CHOSEN as u32,
            locks: 0,
            claims: 0,
        });
        for id in &ids {
            w.put(&SessionRec {
                id: *id,
                ttl: 10,
                expires_at: 10,
                last_request: 0,
                last_reply: Recorded::None,
                last_target: 0,
            });
        }
        assert_eq!(w.need, w.used, "the buffer holds the snapshot");
        let used = w.used;
        let bytes = &buf[..used];
        let storage = || VecStorage::new(ROWS, 1, 1);

        let mut plain = LockService::restore(storage(), bytes)
            .unwrap_or_else(|(_, e)| unreachable!("restore: {e:?}"));
        assert_eq!(longest_probe(&mut plain), CHOSEN - 2, "one run, unkeyed");

        let key = NameKey([0x0123_4567_89ab_cdef, 0xfedc_ba98_7654_3210]);
        let mut keyed = LockService::restore_keyed(storage(), bytes, key)
            .unwrap_or_else(|(_, e)| unreachable!("keyed restore: {e:?}"));
        let longest = longest_probe(&mut keyed);
        assert!(longest < 16, "keyed: a probe run of {longest}");
        for id in &ids {
            assert!(keyed.is_open(SessionId(*id)), "session {id}");
        }
        assert_eq!(keyed.snapshot_vec(), bytes);

        // Keying the unkeyed service later re-indexes its sessions the same way.
        plain.set_name_key(key);
        assert_eq!(longest_probe(&mut plain), longest);
        assert!(ids.iter().all(|id| plain.is_open(SessionId(*id))));
    }
}
