//! Snapshots: canonical bytes, round trips, and `restore` refusing every broken invariant
//! with a typed error (never a panic, never a broken state).

mod common;
use common::*;

use fencelock::{
    Config, Error, LockService, Mode, SessionId, Table, Tick, VecStorage, Wait, MAX_REVISION_FLOOR,
    SNAPSHOT_MAGIC, SNAPSHOT_VERSION,
};

/// Mirror of a claim's kind: 0 wait, 1 hold (version 1's `holding: bool`), 2 watch.
#[derive(Serialize, Clone, Copy)]
#[allow(dead_code)]
enum Kind {
    Wait,
    Hold,
    Watch,
}
use serde::Serialize;
use Kind::{Hold as HOLD, Wait as WAIT, Watch as WATCH};

/// Mirror of the snapshot's records (the real ones are private): postcard encodes a
/// struct as its fields in order, so tuples of the same fields encode identically.
#[derive(Serialize, Clone, Copy)]
#[allow(dead_code)]
enum Recorded {
    None,
    KeptAlive { expires_at: u64 },
    Granted { mode: Mode, token: u64 },
    Queued { mode: Mode, position: u32 },
    Busy,
    Released { token: u64 },
    Cancelled,
    GrantedPermits { token: u64 },
    QueuedPermits { position: u32 },
    Watching { holders: u32 },
    Unwatched,
}

#[derive(Clone)]
struct Snap {
    /// 1 writes no `max_watchers` and no labels; 2 writes both.
    version: u16,
    config: Config,
    now: u64,
    next_session: u64,
    revision: u64,
    next_seq: u64,
    next_lock: u64,
    /// (id, ttl, expires_at, last_request, last_reply, last_target)
    sessions: Vec<(u64, u64, u64, u64, Recorded, u64)>,
    /// (id, name, delay_until)
    locks: Vec<(u64, &'static str, u64)>,
    /// Version 2: each session's label, in session order (missing = empty).
    labels: Vec<&'static str>,
    /// (session id, lock id, mode, kind, seq, value)
    claims: Vec<(u64, u64, Mode, Kind, u64, u64)>,
    trailing: Vec<u8>,
}

fn put<T: Serialize>(out: &mut Vec<u8>, v: &T) {
    let mut buf = [0u8; 256];
    out.extend_from_slice(postcard::to_slice(v, &mut buf).unwrap());
}

impl Snap {
    /// Session 1 (ttl 10) holds "l" with token 1; session 2 (ttl 20) waits for it forever.
    fn base() -> Snap {
        Snap {
            version: 1,
            config: Config::default(),
            now: 0,
            next_session: 3,
            revision: 1,
            next_seq: 3,
            next_lock: 2,
            sessions: vec![
                (1, 10, 10, 0, Recorded::None, 0),
                (2, 20, 20, 0, Recorded::None, 0),
            ],
            locks: vec![(1, "l", 0)],
            labels: vec![],
            claims: vec![
                (1, 1, Mode::Exclusive, HOLD, 1, 1),
                (2, 1, Mode::Exclusive, WAIT, 2, u64::MAX),
            ],
            trailing: vec![],
        }
    }

    fn bytes(&self) -> Vec<u8> {
        let mut b = Vec::new();
        put(&mut b, &(SNAPSHOT_MAGIC, self.version));
        if self.version == 1 {
            put(&mut b, &(self.config.lock_delay, self.config.max_name_len));
        } else {
            put(&mut b, &self.config);
        }
        put(
            &mut b,
            &(
                self.now,
                self.next_session,
                self.revision,
                self.next_seq,
                self.next_lock,
                self.sessions.len() as u32,
                self.locks.len() as u32,
                self.claims.len() as u32,
            ),
        );
        for (i, s) in self.sessions.iter().enumerate() {
            put(&mut b, s);
            if self.version != 1 {
                put(&mut b, &self.labels.get(i).copied().unwrap_or(""));
            }
        }
        for l in &self.locks {
            put(&mut b, l);
        }
        for c in &self.claims {
            put(&mut b, c);
        }
        b.extend_from_slice(&self.trailing);
        b
    }

    fn restore(&self) -> Result<Svc, Error> {
        LockService::restore(VecStorage::new(4, 4, 8), &self.bytes()).map_err(|(_, e)| e)
    }

    fn refused(&self, why: &'static str) {
        match self.restore() {
            Err(e) => assert_eq!(e, Error::CorruptSnapshot(why)),
            Ok(_) => panic!("restore accepted a snapshot that breaks: {why}"),
        }
    }
}

#[test]
fn the_mirror_matches_a_real_snapshot() {
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    let b = open(&mut svc, 20);
    x(&mut svc, a, "l");
    x(&mut svc, b, "l");
    assert_eq!(svc.snapshot_vec(), Snap::base().bytes());
    let restored = Snap::base().restore().unwrap();
    check_invariants(&restored);
    assert_eq!(holders(&restored, "l"), vec![(a, Mode::Exclusive, 1)]);
    assert_eq!(waiters(&restored, "l"), vec![b]);
}

#[test]
fn restore_checks_counters() {
    let mut s = Snap::base();
    s.next_session = 0;
    s.refused("counter is zero");
    let mut s = Snap::base();
    s.revision = (1 << 63) + 1;
    s.refused("counter beyond 2^63");
    let mut s = Snap::base();
    s.next_seq = u64::MAX;
    s.refused("counter beyond 2^63");
    // The bound itself restores (docs/SPEC.md §1): a revision of exactly 2^63; the next
    // grant takes it past, and from then on the service's snapshots are refused — typed,
    // as the SPEC says, and its tokens are past what a signed 64-bit column holds.
    let mut s = Snap::base();
    s.revision = 1 << 63;
    let mut svc = s.restore().expect("a revision of 2^63 restores");
    svc.release(Tick(1), SessionId(1), "l", None, &mut |_| {})
        .expect("session 1 releases");
    assert_eq!(
        svc.revision(),
        (1 << 63) + 1,
        "session 2 was granted the next token"
    );
    let bytes = svc.snapshot_vec();
    match LockService::restore(VecStorage::new(4, 4, 8), &bytes) {
        Err((_, e)) => assert_eq!(e, Error::CorruptSnapshot("counter beyond 2^63")),
        Ok(_) => panic!("a revision past 2^63 restored"),
    }
}

#[test]
fn restore_checks_each_counter_alone() {
    // Each of the four counters on its own (docs/SPEC.md §9): the three that number
    // things may not be 0, and none may pass 2^63; exactly 2^63 restores, to the same
    // bytes. (Each check is an `||` of the counters: one counter out of bounds is enough.)
    type Field = fn(&mut Snap) -> &mut u64;
    let fields: [(&str, Field); 4] = [
        ("next_session", |s| &mut s.next_session),
        ("next_seq", |s| &mut s.next_seq),
        ("next_lock", |s| &mut s.next_lock),
        ("revision", |s| &mut s.revision),
    ];
    for (name, field) in fields {
        if name != "revision" {
            let mut s = Snap::base();
            *field(&mut s) = 0;
            assert_eq!(
                s.restore().err(),
                Some(Error::CorruptSnapshot("counter is zero")),
                "{name}"
            );
        }
        for past in [(1 << 63) + 1, u64::MAX] {
            let mut s = Snap::base();
            *field(&mut s) = past;
            assert_eq!(
                s.restore().err(),
                Some(Error::CorruptSnapshot("counter beyond 2^63")),
                "{name} = {past}"
            );
        }
        let mut s = Snap::base();
        *field(&mut s) = 1 << 63;
        let bytes = s.bytes();
        let svc = s
            .restore()
            .unwrap_or_else(|e| panic!("{name} = 2^63: {e:?}"));
        assert_eq!(svc.snapshot_vec(), bytes, "{name} = 2^63");
    }
}

#[test]
fn restore_checks_sessions() {
    let mut s = Snap::base();
    s.sessions.swap(0, 1);
    s.refused("session ids out of order or beyond the counter");
    let mut s = Snap::base();
    s.next_session = 2;
    s.refused("session ids out of order or beyond the counter");
    let mut s = Snap::base();
    s.now = 10; // session 1's deadline is not after now
    s.refused("session deadline not in (now, now + ttl]");
    let mut s = Snap::base();
    s.sessions[0].2 = 11; // expires_at beyond now + ttl
    s.refused("session deadline not in (now, now + ttl]");
    let mut s = Snap::base();
    s.sessions[0].1 = 0; // ttl 0
    s.refused("session deadline not in (now, now + ttl]");
}

#[test]
fn restore_checks_recorded_replies() {
    let mut s = Snap::base();
    s.sessions[0].3 = 4; // a request number without its reply
    s.refused("recorded reply does not fit its session");
    let mut s = Snap::base();
    s.sessions[0].3 = 4;
    s.sessions[0].4 = Recorded::Granted {
        mode: Mode::Exclusive,
        token: 2,
    }; // beyond revision
    s.refused("recorded reply does not fit its session");
    let mut s = Snap::base();
    s.sessions[0].3 = 4;
    s.sessions[0].4 = Recorded::Queued {
        mode: Mode::Shared,
        position: 0,
    };
    s.refused("recorded reply does not fit its session");
    let mut s = Snap::base();
    s.sessions[0].3 = 4;
    s.sessions[0].4 = Recorded::KeptAlive { expires_at: 11 }; // later than the session's deadline
    s.refused("recorded reply does not fit its session");
    let mut s = Snap::base();
    s.sessions[0].3 = 4;
    s.sessions[0].4 = Recorded::KeptAlive { expires_at: 9 }; // below the ttl: no time t >= 0 gives t + ttl
    s.refused("recorded reply does not fit its session");
    let mut s = Snap::base();
    s.sessions[0].3 = 4;
    s.sessions[0].4 = Recorded::KeptAlive { expires_at: 10 }; // recorded at time 0
    assert!(
        s.restore().is_ok(),
        "a keep-alive recorded at time 0 restores"
    );
    let mut s = Snap::base();
    s.sessions[0].3 = 4;
    s.sessions[0].4 = Recorded::Released { token: 1 };
    s.sessions[0].5 = 0xdead_beef;
    assert!(s.restore().is_ok(), "a valid recorded reply restores");
}

#[test]
fn restore_checks_locks() {
    let mut s = Snap::base();
    s.locks[0].0 = 2; // not below next_lock
    s.refused("lock ids out of order or beyond the counter");
    let mut s = Snap::base();
    s.locks[0].1 = "";
    s.refused("lock name empty or too long");
    let mut s = Snap::base();
    s.config.max_name_len = 4;
    s.locks[0].1 = "lllll";
    s.refused("lock name empty or too long");
    let mut s = Snap::base();
    s.locks.push((1, "m", 0));
    s.next_lock = 3;
    s.locks[1].0 = 2;
    s.locks[1].1 = "l";
    s.refused("lock name twice");
    let mut s = Snap::base();
    s.now = 5;
    s.locks[0].2 = 5; // a delay that is over must be stored as 0
    s.refused("lock-delay that is over is not zeroed (non-canonical)");
    let mut s = Snap::base();
    s.locks[0].2 = 7; // lock_delay is 0: no delay can run
    s.refused("lock-delay beyond now + lock_delay");
    let mut s = Snap::base();
    s.claims.clear();
    s.refused("idle lock entry");
}

#[test]
fn restore_checks_claims() {
    let mut s = Snap::base();
    s.claims.swap(0, 1);
    s.refused("claim sequence out of order or beyond the counter");
    let mut s = Snap::base();
    s.next_seq = 2;
    s.refused("claim sequence out of order or beyond the counter");
    let mut s = Snap::base();
    s.claims[1].0 = 9;
    s.refused("claim of an unknown session");
    let mut s = Snap::base();
    s.claims[1].1 = 7;
    s.refused("claim on an unknown lock");
    let mut s = Snap::base();
    s.claims[1].0 = 1;
    s.refused("a session claims a lock twice");
    let mut s = Snap::base();
    s.claims[0].5 = 0;
    s.refused("token outside 1..=revision");
    let mut s = Snap::base();
    s.claims[0].5 = 2;
    s.refused("token outside 1..=revision");
    let mut s = Snap::base();
    s.revision = 2;
    s.claims[1] = (2, 1, Mode::Shared, HOLD, 2, 2);
    s.refused("exclusive lock with more than one holder");
    let mut s = Snap::base();
    s.revision = 2;
    s.claims[0] = (1, 1, Mode::Shared, HOLD, 1, 2);
    s.claims[1] = (2, 1, Mode::Shared, HOLD, 2, 1);
    s.refused("holders' tokens not rising in arrival order");
    let mut s = Snap::base();
    s.claims[1].5 = 0;
    s.refused("wait deadline not after now");
    let mut s = Snap::base();
    s.claims.remove(0);
    s.refused("a grantable waiter was left waiting");
    let mut s = Snap::base();
    s.claims[0].2 = Mode::Shared;
    s.claims[1].2 = Mode::Shared;
    s.refused("a grantable waiter was left waiting");
}

#[test]
fn restore_refuses_a_waiter_that_arrived_before_a_holder() {
    // Holders are granted only from an empty queue or its head: a holder's seq is below
    // every waiter's on its lock.
    let mut s = Snap::base();
    s.claims = vec![
        (2, 1, Mode::Exclusive, WAIT, 1, u64::MAX),
        (1, 1, Mode::Exclusive, HOLD, 2, 1),
    ];
    s.refused("a waiter arrived before a holder");
    let mut s = Snap::base();
    s.claims = vec![
        (2, 1, Mode::Exclusive, WAIT, 1, u64::MAX),
        (1, 1, Mode::Shared, HOLD, 2, 1),
    ];
    s.refused("a waiter arrived before a holder");
    // the same claims with the holder first restore
    let mut s = Snap::base();
    s.claims[0].2 = Mode::Shared;
    assert!(s.restore().is_ok());
}

#[test]
fn restore_refuses_an_exclusive_holder_in_lock_delay() {
    // A delay starts when a holder expires and nothing is granted during it, so a
    // delayed lock has only shared holders or none.
    let mut s = Snap::base();
    s.config.lock_delay = 5;
    s.locks[0].2 = 3;
    s.refused("lock-delay with an exclusive holder");
    let mut s = Snap::base();
    s.config.lock_delay = 5;
    s.locks[0].2 = 3;
    s.claims[0].2 = Mode::Shared;
    let restored = s.restore().expect("a shared holder in lock-delay restores");
    assert_eq!(restored.lock_delay_until("l"), Some(Tick(3)));
}

#[test]
fn restore_checks_framing_capacity_and_config() {
    let mut s = Snap::base();
    s.trailing = vec![0];
    s.refused("trailing bytes");
    let good = Snap::base().bytes();
    let restore = |b: &[u8]| {
        LockService::restore(VecStorage::new(4, 4, 8), b)
            .map(|_| ())
            .map_err(|e| e.1)
    };
    assert_eq!(
        restore(&good[..6]),
        Err(Error::CorruptSnapshot("truncated header"))
    );
    assert_eq!(
        restore(&good[..good.len() - 1]),
        Err(Error::CorruptSnapshot("truncated record"))
    );
    assert_eq!(restore(&good[..2]), Err(Error::BadMagic));
    // the magic alone, or with half a version: a truncated header (SPEC §9's order)
    assert_eq!(
        restore(&good[..4]),
        Err(Error::CorruptSnapshot("truncated header"))
    );
    assert_eq!(
        restore(&[&good[..4], &[0x80][..]].concat()),
        Err(Error::CorruptSnapshot("truncated header"))
    );
    // a version that is whole but no u16 (over-long, or past its range) is not truncated
    for bad in [&[0xff, 0xff, 0xff][..], &[0x80, 0x80, 0x80, 0x00]] {
        assert_eq!(
            restore(&[&good[..4], bad].concat()),
            Err(Error::CorruptSnapshot("bad version")),
            "{bad:x?}"
        );
    }
    // A header or a record that ends early is truncated; one that is whole but holds
    // what no value is (a varint past its type's range, a bool that is neither) is
    // bad, whatever follows it.
    assert_eq!(
        good[6], 64,
        "max_name_len, after the magic, version and lock_delay"
    );
    let past_u32 = [0xff, 0xff, 0xff, 0xff, 0x1f];
    let bad_header = [&good[..6], &past_u32[..], &good[7..]].concat();
    assert_eq!(
        restore(&bad_header),
        Err(Error::CorruptSnapshot("bad header"))
    );
    assert_eq!(
        restore(&bad_header[..8]),
        Err(Error::CorruptSnapshot("truncated header"))
    );
    let mut tail = Vec::new();
    put(
        &mut tail,
        &(2u64, 1u64, Mode::Exclusive, WAIT, 2u64, u64::MAX),
    );
    assert!(
        good.ends_with(&tail),
        "the last record is the waiter's claim"
    );
    let at = good.len() - tail.len();
    let mut kind = Vec::new();
    put(&mut kind, &(2u64, 1u64, Mode::Exclusive));
    assert_eq!(tail[kind.len()], 0, "its kind, WAIT");
    let mut bad_record = good.clone();
    bad_record[at + kind.len()] = 3; // a version 1 kind is a bool: 0 or 1
    assert_eq!(
        restore(&bad_record),
        Err(Error::CorruptSnapshot("bad record"))
    );
    assert_eq!(
        restore(&bad_record[..at + kind.len()]),
        Err(Error::CorruptSnapshot("truncated record"))
    );
    for (storage, table) in [
        (VecStorage::new(1, 4, 8), Table::Sessions),
        (VecStorage::new(4, 0, 8), Table::Locks),
        (VecStorage::new(4, 4, 1), Table::Claims),
    ] {
        let (back, e) = LockService::restore(storage, &good)
            .map(|_| ())
            .unwrap_err();
        assert_eq!(e, Error::CapacityExceeded(table));
        // the storage comes back and is usable
        let _ = LockService::new(back, Config::default()).unwrap();
    }
    let mut s = Snap::base();
    s.config.max_name_len = 0;
    assert_eq!(
        s.restore().map(|_| ()),
        Err(Error::BadConfig("max_name_len must be 1..=64"))
    );
}

/// `snapshot_config` makes exactly the refusals `restore` makes before the storage, and
/// returns the snapshot's config; the rest of the snapshot is left to `restore`.
#[test]
fn snapshot_config_judges_the_header_as_restore_does() {
    let good = Snap::base().bytes();
    assert_eq!(fencelock::snapshot_config(&good), Ok(Snap::base().config));
    let mut bad_config = Snap::base();
    bad_config.config.max_name_len = 0;
    let mut version = good.clone();
    version[4] = 9;
    for bytes in [
        good[..2].to_vec(),
        good[..6].to_vec(),
        version,
        bad_config.bytes(),
        b"NOPE\x01".to_vec(),
    ] {
        let header = fencelock::snapshot_config(&bytes).map(|_| ());
        assert!(header.is_err());
        // An empty storage: restore's verdict is the header's whenever the header is bad.
        let restored = LockService::restore(VecStorage::new(0, 0, 0), &bytes)
            .map(|_| ())
            .map_err(|e| e.1);
        assert_eq!(header, restored);
    }
    // A header that is fine says nothing of the records after it.
    let truncated = &good[..good.len() - 1];
    assert!(fencelock::snapshot_config(truncated).is_ok());
    assert!(LockService::restore(VecStorage::new(4, 4, 8), truncated).is_err());
}

/// A service in a busy state: holds, shared runs, timed waits, lock-delay, numbered replies.
fn busy() -> Svc {
    let mut svc = svc_with(
        8,
        8,
        16,
        Config {
            lock_delay: 7,
            max_name_len: 64,
            max_watchers: 4,
        },
    );
    let a = open(&mut svc, 10);
    let b = open(&mut svc, 30);
    let c = open(&mut svc, 40);
    run(&mut svc, |v, now, o| {
        v.acquire(now, a, "x", Mode::Exclusive, Wait::None, Some(1), o)
    });
    run(&mut svc, |v, now, o| {
        v.acquire(now, b, "r", Mode::Shared, Wait::None, Some(2), o)
    });
    acquire(&mut svc, c, "r", Mode::Shared, Wait::None);
    acquire(&mut svc, b, "x", Mode::Exclusive, Wait::Until(Tick(25)));
    acquire(&mut svc, c, "x", Mode::Shared, Wait::Forever);
    run(&mut svc, |v, now, o| v.keep_alive(now, c, Some(5), o));
    x(&mut svc, a, "y");
    tick(&mut svc, 10); // a expires: x and y enter lock-delay
    svc
}

#[test]
fn round_trip_is_byte_identical_and_behaves_the_same() {
    let mut original = busy();
    let bytes = original.snapshot_vec();
    assert_eq!(bytes.len(), original.snapshot_len());
    assert_eq!(bytes[..4], SNAPSHOT_MAGIC);
    // into storage of another size: the layout differs, the bytes do not
    let mut restored = LockService::restore(VecStorage::new(20, 9, 33), &bytes)
        .map_err(|e| e.1)
        .unwrap();
    assert_eq!(restored.snapshot_vec(), bytes);
    assert_eq!(restored.poll_timeout(), original.poll_timeout());
    for t in [11, 17, 25, 40, 60] {
        assert_eq!(tick(&mut restored, t), tick(&mut original, t), "at {t}");
        assert_eq!(restored.snapshot_vec(), original.snapshot_vec());
    }
}

#[test]
fn the_row_layout_never_shows_in_the_bytes() {
    // Two histories that free rows in opposite orders, so the next lock and claim land in
    // different rows; the logical state (counters included), and so the snapshot, is the
    // same.
    let history = |release_first: &str, release_second: &str| {
        let mut svc = svc(4);
        let a = open(&mut svc, 50);
        x(&mut svc, a, "p");
        x(&mut svc, a, "q");
        release(&mut svc, a, release_first);
        release(&mut svc, a, release_second);
        x(&mut svc, a, "r");
        svc.snapshot_vec()
    };
    assert_eq!(history("p", "q"), history("q", "p"));
}

#[test]
fn the_bytes_record_history_that_behaviour_does_not_show() {
    // A wait queued then cancelled and a try-lock answered Busy leave services that behave
    // the same from here on, but the queued wait took a claim sequence number (next_seq),
    // so the snapshots differ: snapshots are canonical per state, not history-free.
    let history = |queue_then_cancel: bool| {
        let mut svc = svc(4);
        let a = open(&mut svc, 50);
        let b = open(&mut svc, 50);
        x(&mut svc, a, "l");
        if queue_then_cancel {
            x(&mut svc, b, "l");
            cancel(&mut svc, b, "l");
        } else {
            assert_eq!(
                acquire(&mut svc, b, "l", Mode::Exclusive, Wait::None),
                (fencelock::Reply::Busy, vec![])
            );
        }
        (svc, a)
    };
    let ((mut queued, a), (mut busy_once, a2)) = (history(true), history(false));
    assert_eq!(a, a2);
    assert_ne!(queued.snapshot_vec(), busy_once.snapshot_vec());
    assert_eq!(
        release(&mut queued, a, "l"),
        release(&mut busy_once, a, "l")
    );
    for t in [10, 51, 60] {
        assert_eq!(tick(&mut queued, t), tick(&mut busy_once, t), "at {t}");
    }
}

#[test]
fn snapshot_into_a_short_buffer_reports_the_size_needed() {
    let svc = busy();
    let need = svc.snapshot_len();
    for len in [0, 1, 10, need - 1] {
        let mut buf = vec![0u8; len];
        assert_eq!(
            svc.snapshot(&mut buf),
            Err(Error::BufferTooSmall { need: need as u32 })
        );
    }
}

#[test]
fn restore_never_panics_on_mutated_or_truncated_bytes() {
    let good = busy().snapshot_vec();
    let mut accepted = 0;
    for i in 0..good.len() {
        let _ = LockService::restore(VecStorage::new(8, 8, 16), &good[..i]);
        for b in [0u8, 1, 2, 0x3f, 0x7f, 0x80, 0xfe, 0xff] {
            let mut v = good.clone();
            v[i] = b;
            if let Ok(svc) = LockService::restore(VecStorage::new(8, 8, 16), &v) {
                // whatever was accepted is a state the service could be in: checked by
                // queries, not by `restore` again
                check_queries(&svc);
                assert_eq!(svc.snapshot_vec(), v, "accepted bytes are canonical");
                accepted += 1;
            }
        }
    }
    assert!(
        accepted > 0,
        "some mutations (a deadline, a ttl) are valid states"
    );
}

#[test]
fn restore_refuses_a_non_canonical_encoding_of_a_valid_state() {
    let good = Snap::base().bytes();
    // header: magic (4) + version (1); meta: lock_delay (1), max_name_len (1), now at 7
    assert_eq!(good[7], 0);
    let mut long = good[..7].to_vec();
    long.extend_from_slice(&[0x80, 0x00]); // 0 as an over-long varint
    long.extend_from_slice(&good[8..]);
    let e = LockService::restore(VecStorage::new(4, 4, 8), &long)
        .map(|_| ())
        .unwrap_err()
        .1;
    assert_eq!(e, Error::CorruptSnapshot("non-canonical encoding"));
}

/// Two holds (of different locks) with one token are refused wherever they stand in the
/// snapshot. Restore finds a repeat by draining the holds from its deadline heap in token
/// order; a heap that kept them in another order would bring this repeat out apart.
#[test]
fn restore_refuses_a_token_held_twice_whatever_the_order() {
    let mut s = Snap::base();
    s.next_session = 5;
    s.next_lock = 5;
    s.next_seq = 5;
    s.revision = 3;
    s.sessions = (1..=4)
        .map(|i| (i, 10 * i, 10 * i, 0, Recorded::None, 0))
        .collect();
    s.locks = vec![(1, "k", 0), (2, "l", 0), (3, "m", 0), (4, "n", 0)];
    s.claims = [2, 2, 1, 3]
        .into_iter()
        .zip(1..)
        .map(|(token, i)| (i, i, Mode::Exclusive, HOLD, i, token))
        .collect();
    s.refused("a token held twice");
    // The same with the second token its own: restored.
    s.revision = 4;
    s.claims[1].5 = 4;
    assert!(s.restore().is_ok());
}

#[test]
fn restore_survives_random_corruption_of_busy_snapshots() {
    let mut rng = Rng(0xc0ff_ee11);
    let base = busy().snapshot_vec();
    let mut accepted = 0;
    for round in 0..3_000 {
        let mut v = base.clone();
        for _ in 0..1 + rng.below(3) {
            let i = rng.below(v.len() as u64) as usize;
            match rng.below(4) {
                0 => v[i] = rng.below(256) as u8,
                1 => v[i] ^= 1 << rng.below(8),
                2 => {
                    v.remove(i);
                }
                _ => v.insert(i, rng.below(256) as u8),
            }
        }
        if let Ok(svc) = LockService::restore(VecStorage::new(8, 8, 16), &v) {
            check_queries(&svc);
            assert_eq!(
                svc.snapshot_vec(),
                v,
                "round {round}: accepted bytes are canonical"
            );
            accepted += 1;
        }
    }
    assert!(accepted > 0);
}

/// `raise_revision`: the next grant's token is above the floor, holds keep their tokens, a
/// lower floor changes nothing, the raised revision survives a snapshot, and a floor above
/// `MAX_REVISION_FLOOR` (2^62) is refused with nothing changed.
#[test]
fn raise_revision_puts_the_next_token_above_the_floor() {
    let mut svc = svc(4);
    let a = open(&mut svc, 100);
    let b = open(&mut svc, 100);
    assert_eq!(x(&mut svc, a, "l").0, reply_x(1));
    assert_eq!(svc.raise_revision(1000), Ok(1000));
    assert_eq!(
        svc.raise_revision(5),
        Ok(1000),
        "a lower floor changes nothing"
    );
    let before = svc.snapshot_vec();
    for floor in [MAX_REVISION_FLOOR + 1, (1u64 << 63) + 1, u64::MAX] {
        assert_eq!(
            svc.raise_revision(floor),
            Err(Error::BadConfig("revision floor above 2^62"))
        );
        assert_eq!(
            svc.snapshot_vec(),
            before,
            "a refused floor changes nothing"
        );
    }
    let mut svc = twin(&svc);
    assert_eq!(
        svc.revision(),
        1000,
        "the raised revision is in the snapshot"
    );
    assert_eq!(x(&mut svc, b, "m").0, reply_x(1001));
    assert_eq!(release(&mut svc, a, "l").0, reply_released(1));
}

/// The highest floor `raise_revision` accepts leaves room for grants: a service raised to
/// it grants above it, and its snapshot restores (the restore's bound is 2^63). A floor of
/// 2^63 once passed `raise_revision`, and the next grant made every later snapshot of the
/// service one that `restore` refused.
#[test]
fn a_service_raised_to_the_highest_floor_still_restores_from_its_snapshot() {
    let mut svc = svc(4);
    let a = open(&mut svc, 100);
    assert_eq!(
        svc.raise_revision(MAX_REVISION_FLOOR),
        Ok(MAX_REVISION_FLOOR)
    );
    assert_eq!(x(&mut svc, a, "l").0, reply_x(MAX_REVISION_FLOOR + 1));
    assert_eq!(x(&mut svc, a, "m").0, reply_x(MAX_REVISION_FLOOR + 2));
    let mut copy = twin(&svc);
    assert_eq!(copy.snapshot_vec(), svc.snapshot_vec());
    assert_eq!(copy.revision(), MAX_REVISION_FLOOR + 2);
    assert_eq!(x(&mut copy, a, "n").0, reply_x(MAX_REVISION_FLOOR + 3));
}

// ---------------------------------------------------------------- version 2 (§13.6)

fn p(count: u32, limit: u32) -> Mode {
    Mode::Permits { count, limit }
}

impl Snap {
    /// Version 2: session 1 (label "a", ttl 10) holds 1 of 2 permits of "l" with token 1;
    /// session 2 (ttl 20) watches "l".
    fn base2() -> Snap {
        Snap {
            version: 2,
            labels: vec!["a"],
            claims: vec![
                (1, 1, p(1, 2), HOLD, 1, 1),
                (2, 1, Mode::Exclusive, WATCH, 2, 0),
            ],
            ..Snap::base()
        }
    }
}

fn version(svc: &Svc) -> u8 {
    svc.snapshot_vec()[4] // the version varint follows the 4-byte magic
}

#[test]
fn the_version_2_mirror_matches_a_real_snapshot() {
    assert_eq!(SNAPSHOT_VERSION, 2);
    let mut svc = svc(4);
    let (reply, _) = run(&mut svc, |v, now, o| {
        v.open_labeled(now, 10, fencelock::Label::new("a").unwrap(), o)
    });
    let a = reply.opened().unwrap();
    let b = open(&mut svc, 20);
    acquire(&mut svc, a, "l", p(1, 2), Wait::Forever);
    run(&mut svc, |v, now, o| v.watch(now, b, "l", None, o));
    assert_eq!(svc.snapshot_vec(), Snap::base2().bytes());
    let restored = Snap::base2().restore().unwrap();
    check_invariants(&restored);
    assert_eq!(holders(&restored, "l"), vec![(a, p(1, 2), 1)]);
    assert_eq!(restored.session(a).unwrap().label.as_str(), "a");
    assert_eq!(
        restored.permits("l"),
        Some(fencelock::Permits {
            in_use: 1,
            limit: 2
        })
    );
    // the restored watch still watches
    let mut restored = restored;
    let (_, events) = release(&mut restored, a, "l");
    assert_eq!(events.len(), 1, "b hears of the release: {events:?}");
}

#[test]
fn version_1_is_written_exactly_while_nothing_new_is_in_use() {
    let mut svc = svc(4);
    let a = open(&mut svc, 100);
    x(&mut svc, a, "l");
    assert_eq!(version(&svc), 1);
    // each new thing alone makes it version 2, and its end makes it version 1 again
    run(&mut svc, |v, now, o| v.watch(now, a, "l", None, o));
    assert_eq!(version(&svc), 2, "a watch");
    run(&mut svc, |v, now, o| v.unwatch(now, a, "l", None, o));
    assert_eq!(version(&svc), 1);
    acquire(&mut svc, a, "pool", p(1, 2), Wait::Forever);
    assert_eq!(version(&svc), 2, "a permit hold");
    release(&mut svc, a, "pool");
    assert_eq!(version(&svc), 1);
    let (reply, _) = run(&mut svc, |v, now, o| {
        v.open_labeled(now, 10, fencelock::Label::new("x").unwrap(), o)
    });
    assert_eq!(version(&svc), 2, "a label");
    close(&mut svc, reply.opened().unwrap());
    assert_eq!(version(&svc), 1);
    // an empty label is no label
    run(&mut svc, |v, now, o| {
        v.open_labeled(now, 10, fencelock::Label::EMPTY, o)
    });
    assert_eq!(version(&svc), 1);
    // a numbered watch's recorded reply outlives the watch
    run(&mut svc, |v, now, o| v.watch(now, a, "l", Some(1), o));
    run(&mut svc, |v, now, o| v.unwatch(now, a, "l", None, o));
    assert_eq!(version(&svc), 2, "a recorded Watching");
    keep_alive(&mut svc, a);
    run(&mut svc, |v, now, o| v.keep_alive(now, a, Some(2), o));
    assert_eq!(version(&svc), 1);
    // a max_watchers other than the default
    let config = Config {
        max_watchers: 5,
        ..Config::default()
    };
    let other = svc_with(2, 2, 2, config);
    assert_eq!(version(&other), 2);
    check_invariants(&other);
    assert_eq!(twin(&other).config().max_watchers, 5);
    // version 1 restores with the default
    assert_eq!(twin(&svc).config().max_watchers, 4);
}

#[test]
fn restore_refuses_a_version_that_is_not_the_states_own() {
    let mut s = Snap::base();
    s.version = 2;
    s.refused("snapshot version not the one its state is written in");
    // version 1 bytes that hold what only version 2 may
    let mut s = Snap::base();
    s.claims[0].2 = p(1, 1);
    s.claims[1].2 = p(1, 1);
    s.refused("snapshot version not the one its state is written in");
    let mut s = Snap::base();
    s.claims.push((2, 1, Mode::Exclusive, WATCH, 3, 0));
    s.next_seq = 4;
    s.refused("snapshot version not the one its state is written in");
}

#[test]
fn restore_checks_permits() {
    for bad in [p(0, 2), p(3, 2), p(1, 0)] {
        let mut s = Snap::base2();
        s.claims[0].2 = bad;
        s.refused("permits outside 1..=limit");
    }
    // every hold and wait of a lock carries one limit, or none
    for other in [p(1, 3), Mode::Exclusive, Mode::Shared] {
        let mut s = Snap::base2();
        s.claims.push((2, 1, other, WAIT, 3, u64::MAX));
        s.next_seq = 4;
        s.refused("holds and waits of a lock differ in limit");
    }
    let mut s = Snap::base2();
    s.claims[0].2 = p(2, 2);
    s.claims.push((2, 1, p(1, 2), HOLD, 3, 2));
    s.next_seq = 4;
    s.revision = 2;
    s.refused("more permits held than the limit");
    // a waiter that fits must have been granted
    let mut s = Snap::base2();
    s.claims.push((2, 1, p(1, 2), WAIT, 3, u64::MAX));
    s.next_seq = 4;
    s.refused("a grantable waiter was left waiting");
    // one that does not fit waits
    s.claims[2].2 = p(2, 2);
    assert!(s.restore().is_ok());
    // several permit holders, tokens rising
    let mut s = Snap::base2();
    s.claims.push((2, 1, p(1, 2), HOLD, 3, 2));
    s.next_seq = 4;
    s.revision = 2;
    assert!(s.restore().is_ok());
}

#[test]
fn restore_checks_watches() {
    let mut s = Snap::base2();
    s.claims[1].2 = Mode::Shared;
    s.refused("a watch with a mode or value");
    let mut s = Snap::base2();
    s.claims[1].5 = 1;
    s.refused("a watch with a mode or value");
    let mut s = Snap::base2();
    s.claims.push((2, 1, Mode::Exclusive, WATCH, 3, 0));
    s.next_seq = 4;
    s.refused("a session watches a lock twice");
    let mut s = Snap::base2();
    s.config.max_watchers = 0;
    s.refused("more watchers than max_watchers");
    // a watch of its own lock by the holder, and a lock that only a watch keeps, restore
    let mut s = Snap::base2();
    s.claims.push((1, 1, Mode::Exclusive, WATCH, 3, 0));
    s.next_seq = 4;
    assert!(s.restore().is_ok());
    let mut s = Snap::base2();
    s.claims.remove(0);
    s.revision = 1;
    assert!(
        s.restore().is_ok(),
        "a watched lock with no holder is not idle"
    );
    // a watch of an unknown session or lock
    let mut s = Snap::base2();
    s.claims[1].1 = 9;
    s.refused("claim on an unknown lock");
}

#[test]
fn restore_checks_labels_and_recorded_replies_of_version_2() {
    let mut s = Snap::base2();
    s.labels = vec!["a"; 2];
    assert!(s.restore().is_ok());
    let long: &'static str = Box::leak("x".repeat(65).into_boxed_str());
    s.labels[1] = long;
    s.refused("bad record");
    let mut s = Snap::base2();
    s.sessions[0].3 = 4;
    s.sessions[0].4 = Recorded::GrantedPermits { token: 2 }; // beyond revision
    s.refused("recorded reply does not fit its session");
    s.sessions[0].4 = Recorded::GrantedPermits { token: 1 };
    assert!(s.restore().is_ok());
    s.sessions[0].4 = Recorded::QueuedPermits { position: 0 };
    s.refused("recorded reply does not fit its session");
    // a permit acquire's reply has variants of its own
    s.sessions[0].4 = Recorded::Granted {
        mode: p(1, 2),
        token: 1,
    };
    s.refused("recorded reply does not fit its session");
    s.sessions[0].4 = Recorded::Queued {
        mode: p(1, 2),
        position: 1,
    };
    s.refused("recorded reply does not fit its session");
    for ok in [
        Recorded::QueuedPermits { position: 1 },
        Recorded::Watching { holders: 3 },
        Recorded::Unwatched,
    ] {
        s.sessions[0].4 = ok;
        assert!(s.restore().is_ok());
    }
}

/// A labelled session needs a label row on restore too: storage with fewer label rows than
/// the snapshot's labelled sessions is refused with the labels table's capacity error,
/// and with enough it restores to the same bytes.
#[test]
fn restore_needs_a_label_row_per_labelled_session() {
    let mut svc = svc(4);
    for l in ["a", "b"] {
        let label = fencelock::Label::new(l).unwrap();
        run(&mut svc, |v, now, o| v.open_labeled(now, 10, label, o));
    }
    open(&mut svc, 10);
    let bytes = svc.snapshot_vec();
    let small = VecStorage::with_labels(4, 4, 8, 1);
    let e = LockService::restore(small, &bytes).err().map(|(_, e)| e);
    assert_eq!(e, Some(Error::CapacityExceeded(Table::Labels)));
    let enough = VecStorage::with_labels(4, 4, 8, 2);
    let back = LockService::restore(enough, &bytes).ok().unwrap();
    assert_eq!(back.snapshot_vec(), bytes);
}

#[test]
fn a_permit_acquires_recorded_busy_is_version_1_and_its_recorded_grant_version_2() {
    use fencelock::{Reply, Token};
    // docs/SPEC.md §9, §13.6: a recorded `Busy` is version 1's whatever the acquire. Here
    // the only trace of permits is b's latest recorded reply: the Busy of a permit
    // try-lock, made while a held the whole semaphore (a's hold is gone since, and a
    // numbered nothing).
    let mut svc = svc(4);
    let a = open(&mut svc, 100);
    let b = open(&mut svc, 100);
    let b_acquire = |svc: &mut Svc, n| {
        run(svc, |v, now, o| {
            v.acquire(now, b, "pool", p(1, 2), Wait::None, Some(n), o)
        })
    };
    acquire(&mut svc, a, "pool", p(2, 2), Wait::None);
    assert_eq!(b_acquire(&mut svc, 1), (Reply::Busy, vec![]));
    assert_eq!(version(&svc), 2, "a's permit hold");
    release(&mut svc, a, "pool");
    assert_eq!(svc.usage().claims, 0, "nothing held, awaited or watched");
    let bytes = svc.snapshot_vec();
    assert_eq!(bytes[..5], *b"FLCK\x01", "the magic, then version 1");
    // it restores, to the same bytes, with b's recorded Busy: its retry is answered Busy
    let mut restored = twin(&svc);
    assert_eq!(restored.snapshot_vec(), bytes);
    assert_eq!(b_acquire(&mut restored, 1), (Reply::Busy, vec![]));
    // contrast: the same acquire granted records a permit acquire's grant, which only
    // version 2 can hold — and it outlives the hold
    assert_eq!(
        b_acquire(&mut svc, 2).0,
        Reply::Granted {
            mode: p(1, 2),
            token: Token(2)
        }
    );
    release(&mut svc, b, "pool");
    assert_eq!(svc.usage().claims, 0, "nothing held, awaited or watched");
    let bytes = svc.snapshot_vec();
    assert_eq!(bytes[..5], *b"FLCK\x02", "the magic, then version 2");
    let mut restored = twin(&svc);
    assert_eq!(restored.snapshot_vec(), bytes);
    assert_eq!(
        b_acquire(&mut restored, 2),
        (Reply::HoldEnded { token: Token(2) }, vec![])
    );
}

#[test]
fn restore_checks_the_record_counts_against_the_tables_before_reading_any_record() {
    // docs/SPEC.md §9: the header's counts are checked against the tables before anything
    // after the header is read. A real snapshot (two sessions, one lock, two claims) with
    // its first session record made corrupt (ttl 0): into tables big enough it is
    // CorruptSnapshot; into tables too small for any of its counts, CapacityExceeded of
    // that table, though the corrupt record comes first.
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    let b = open(&mut svc, 20);
    x(&mut svc, a, "l");
    x(&mut svc, b, "l");
    let good = svc.snapshot_vec();
    assert_eq!(good, Snap::base().bytes(), "the mirror's state");
    // where session 1's record (id 1, ttl 10, expires_at 10, ...) begins: after the header,
    // as long with no records (each count is one byte, 0 as 2)
    let mut header = Snap::base();
    header.sessions.clear();
    header.locks.clear();
    header.claims.clear();
    let at = header.bytes().len();
    assert_eq!(good[at..at + 3], [1, 10, 10], "id, ttl, expires_at");
    let mut bad = good.clone();
    bad[at + 1] = 0; // ttl 0, one byte as 10 was
    let storage = |(sessions, locks, claims)| VecStorage::new(sessions, locks, claims);
    let restore = |rows, bytes: &[u8]| {
        LockService::restore(storage(rows), bytes)
            .map(|svc| svc.snapshot_vec())
            .map_err(|(_, e)| e)
    };
    assert_eq!(restore((2, 1, 2), &good), Ok(good.clone()));
    assert_eq!(
        restore((2, 1, 2), &bad),
        Err(Error::CorruptSnapshot(
            "session deadline not in (now, now + ttl]"
        ))
    );
    for (rows, table) in [
        ((1, 1, 2), Table::Sessions),
        ((2, 0, 2), Table::Locks),
        ((2, 1, 1), Table::Claims),
    ] {
        let e = Error::CapacityExceeded(table);
        assert_eq!(restore(rows, &bad), Err(e), "{rows:?}");
        assert_eq!(restore(rows, &good), Err(e), "{rows:?}");
        let Err((back, _)) = LockService::restore(storage(rows), &bad) else {
            panic!("{rows:?}: restored");
        };
        // restore changes no service (it makes one): the storage comes back, as large as
        // it went in, and makes a service
        let back = LockService::new(back, Config::default()).unwrap();
        assert_eq!(
            back.capacity(),
            svc_with(rows.0, rows.1, rows.2, Config::default()).capacity()
        );
    }
}

/// postcard reads a string's length as a `usize` varint, so a name's or a label's length
/// prefix stretched to 6 bytes decodes on a 64-bit target and not on a 32-bit one (its
/// varint stops at 5 bytes). Restore refuses it before postcard reads it, with the error a
/// 32-bit target gives, whatever the storage's label rows (with none, a 64-bit restore
/// used to get as far as the label and answer `CapacityExceeded(Labels)`).
/// `tests/bare-metal` restores the same bytes on a Cortex-M4.
#[test]
fn a_name_or_label_length_stretched_past_five_bytes_is_a_bad_record_on_every_target() {
    let mut svc = svc(4);
    let (reply, _) = run(&mut svc, |v, now, o| {
        v.open_labeled(now, 10, fencelock::Label::new("lbl").unwrap(), o)
    });
    let a = reply.opened().unwrap();
    acquire(&mut svc, a, "nm", Mode::Exclusive, Wait::None);
    let good = svc.snapshot_vec();
    for text in ["lbl", "nm"] {
        let at = good
            .windows(text.len())
            .position(|w| w == text.as_bytes())
            .unwrap()
            - 1;
        assert_eq!(good[at] as usize, text.len(), "{text}: its length prefix");
        let mut long = good[..at].to_vec();
        long.extend_from_slice(&[0x80 | text.len() as u8, 0x80, 0x80, 0x80, 0x80, 0x00]);
        long.extend_from_slice(&good[at + 1..]);
        // (with no label rows, the lock's record is never reached: the label's row is
        // refused first, alike on every target)
        let rows: &[usize] = if text == "lbl" { &[0, 4] } else { &[4] };
        for &labels in rows {
            let e = LockService::restore(VecStorage::with_labels(4, 4, 8, labels), &long)
                .map(|_| ())
                .unwrap_err()
                .1;
            assert_eq!(
                e,
                Error::CorruptSnapshot("bad record"),
                "{text}, {labels} label rows"
            );
        }
    }
}
