//! One test per error kind: the typed error, its `Display` message, and — for inputs — a
//! byte-identical snapshot and no output (`common::refused` checks both).

mod common;
use common::*;

use fencelock::{
    Config, Error, FenceGate, GateRow, Input, Label, LockService, Mode, Reply, SessionId,
    SessionKeeper, Table, Tick, Token, VecStorage, Wait,
};

/// A service with a holder (1) of "a", a waiter (2) on "a", and numbered requests used.
fn busy_service() -> (Svc, SessionId, SessionId) {
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    let b = open(&mut svc, 10);
    run(&mut svc, |v, now, o| {
        v.acquire(now, a, "a", Mode::Exclusive, Wait::None, Some(5), o)
    });
    x(&mut svc, b, "a");
    (svc, a, b)
}

#[test]
fn unknown_session() {
    let (mut svc, _, _) = busy_service();
    let ghost = SessionId(99);
    let e = refused(&mut svc, |v, now, o| v.keep_alive(now, ghost, None, o));
    assert_eq!(e, Error::UnknownSession(ghost));
    assert_eq!(e.to_string(), "unknown session: session 99 is not open");
    assert_eq!((e.code(), e.kind()), (101, "unknown_session"));
    // every input naming a session refuses it the same way
    type Named<'a> = &'a dyn Fn(&mut Svc, Tick, &mut Events) -> Result<(), Error>;
    let ghostly: [Named; 8] = [
        &|v, now, o| v.close_session(now, ghost, None, o).map(|_| ()),
        &|v, now, o| {
            v.acquire(now, ghost, "a", Mode::Shared, Wait::None, None, o)
                .map(|_| ())
        },
        &|v, now, o| v.release(now, ghost, "a", None, o).map(|_| ()),
        &|v, now, o| v.cancel(now, ghost, "a", None, o).map(|_| ()),
        &|v, now, o| v.campaign(now, ghost, "a", None, o).map(|_| ()),
        &|v, now, o| v.resign(now, ghost, "a", None, o).map(|_| ()),
        &|v, now, o| v.watch(now, ghost, "a", None, o).map(|_| ()),
        &|v, now, o| v.unwatch(now, ghost, "a", None, o).map(|_| ()),
    ];
    for (i, call) in ghostly.iter().enumerate() {
        let e = refused(&mut svc, |v, now, o| call(v, now, o));
        assert_eq!(e, Error::UnknownSession(ghost), "call {i}");
    }
}

fn permits(count: u32, limit: u32) -> Mode {
    Mode::Permits { count, limit }
}

#[test]
fn limit_mismatch() {
    let (mut svc, a, b) = busy_service();
    // "a" is held and awaited as a plain lock: no permit acquire, whatever its wait
    let e = refused(&mut svc, |v, now, o| {
        v.acquire(now, b, "a", permits(1, 3), Wait::None, None, o)
    });
    assert_eq!(e, Error::LimitMismatch { limit: 0 });
    assert_eq!(
        e.to_string(),
        "limit mismatch: the lock is in use as a plain lock, not a semaphore"
    );
    assert_eq!((e.code(), e.kind()), (108, "limit_mismatch"));
    // "s" is a semaphore of 3: another limit, or a plain mode, is refused
    acquire(&mut svc, a, "s", permits(1, 3), Wait::None);
    for mode in [permits(1, 4), Mode::Exclusive, Mode::Shared] {
        let e = refused(&mut svc, |v, now, o| {
            v.acquire(now, b, "s", mode, Wait::Forever, None, o)
        });
        assert_eq!(e, Error::LimitMismatch { limit: 3 });
    }
    assert_eq!(
        Error::LimitMismatch { limit: 3 }.to_string(),
        "limit mismatch: the lock is in use as a semaphore of 3 permits"
    );
    // the holder itself too, before its own claim is looked at
    let e = refused(&mut svc, |v, now, o| {
        v.acquire(now, a, "s", Mode::Exclusive, Wait::None, None, o)
    });
    assert_eq!(e, Error::LimitMismatch { limit: 3 });
}

#[test]
fn not_watching() {
    let (mut svc, a, b) = busy_service();
    // a holds "a" and b waits for it: neither watches it; nobody watches "z"
    for (s, lock) in [(a, "a"), (b, "a"), (a, "z")] {
        let e = refused(&mut svc, |v, now, o| v.unwatch(now, s, lock, None, o));
        assert_eq!(e, Error::NotWatching(s));
    }
    let e = Error::NotWatching(a);
    assert_eq!(
        e.to_string(),
        "not watching: session 1 does not watch this lock"
    );
    assert_eq!((e.code(), e.kind()), (109, "not_watching"));
}

#[test]
fn already_watching() {
    let (mut svc, a, _) = busy_service();
    run(&mut svc, |v, now, o| v.watch(now, a, "a", None, o));
    let e = refused(&mut svc, |v, now, o| v.watch(now, a, "a", None, o));
    assert_eq!(e, Error::AlreadyWatching(a));
    assert_eq!(
        e.to_string(),
        "already watching: session 1 already watches this lock"
    );
    assert_eq!((e.code(), e.kind()), (110, "already_watching"));
}

#[test]
fn bad_permits() {
    let (mut svc, a, _) = busy_service();
    for (count, limit) in [(0, 3), (4, 3), (0, 0), (1, 0)] {
        let e = refused(&mut svc, |v, now, o| {
            v.acquire(now, a, "p", permits(count, limit), Wait::Forever, None, o)
        });
        assert_eq!(e, Error::BadPermits { count, limit });
    }
    let e = Error::BadPermits { count: 4, limit: 3 };
    assert_eq!(
        e.to_string(),
        "bad permits: 4 of 3 permits, need 1 <= count <= limit"
    );
    assert_eq!((e.code(), e.kind()), (207, "bad_permits"));
    // checked with the name, before the lock is looked at: a plain lock's name too
    let e = refused(&mut svc, |v, now, o| {
        v.acquire(now, a, "a", permits(0, 1), Wait::None, None, o)
    });
    assert_eq!(e, Error::BadPermits { count: 0, limit: 1 });
}

#[test]
fn label_too_long() {
    let e = Label::new(&"x".repeat(65)).unwrap_err();
    assert_eq!(e, Error::LabelTooLong { len: 65, max: 64 });
    assert_eq!(e.to_string(), "label too long: 65 bytes, at most 64");
    assert_eq!((e.code(), e.kind()), (208, "label_too_long"));
    assert!(Label::new(&"x".repeat(64)).is_ok());
    assert!(Label::new("").unwrap().is_empty());
    // a frame carrying a longer label does not decode: it never reaches the service
    let mut frame = vec![7, 0, 5, 65];
    frame.extend(std::iter::repeat_n(b'x', 65));
    assert_eq!(Input::from_frame(&frame), Err(Error::BadFrame));
    frame[3] = 64;
    frame.pop();
    assert!(matches!(
        Input::from_frame(&frame),
        Ok(Input::OpenLabeled { .. })
    ));
}

#[test]
fn capacity_exceeded_watchers() {
    let config = Config {
        max_watchers: 2,
        ..Config::default()
    };
    let mut svc = svc_with(4, 4, 8, config);
    let s: Vec<SessionId> = (0..3).map(|_| open(&mut svc, 10)).collect();
    run(&mut svc, |v, now, o| v.watch(now, s[0], "w", None, o));
    run(&mut svc, |v, now, o| v.watch(now, s[1], "w", None, o));
    let e = refused(&mut svc, |v, now, o| v.watch(now, s[2], "w", None, o));
    assert_eq!(e, Error::CapacityExceeded(Table::Watchers));
    assert_eq!(
        e.to_string(),
        "capacity exceeded: the watchers table is full"
    );
    // another lock has its own watchers
    run(&mut svc, |v, now, o| v.watch(now, s[2], "v", None, o));
    // 0 disables watches, even of a lock nobody watches
    let off = Config {
        max_watchers: 0,
        ..Config::default()
    };
    let mut svc = svc_with(4, 4, 8, off);
    let a = open(&mut svc, 10);
    let e = refused(&mut svc, |v, now, o| v.watch(now, a, "w", None, o));
    assert_eq!(e, Error::CapacityExceeded(Table::Watchers));
    // a watch is a claim: a full claim table refuses it, after the watchers check
    let mut full = svc_with(2, 2, 1, Config::default());
    let a = open(&mut full, 10);
    x(&mut full, a, "x");
    let e = refused(&mut full, |v, now, o| v.watch(now, a, "x", None, o));
    assert_eq!(e, Error::CapacityExceeded(Table::Claims));
    // and a full lock table refuses a watch of a new name, giving the claim row back
    let mut full = svc_with(2, 1, 4, Config::default());
    let a = open(&mut full, 10);
    x(&mut full, a, "x");
    let e = refused(&mut full, |v, now, o| v.watch(now, a, "y", None, o));
    assert_eq!(e, Error::CapacityExceeded(Table::Locks));
}

#[test]
fn capacity_exceeded_labels() {
    let lbl = |s: &str| Label::new(s).unwrap();
    // one label row for four sessions
    let storage = VecStorage::with_labels(4, 4, 8, 1);
    let mut svc = LockService::new(storage, Config::default()).unwrap();
    let a = run(&mut svc, |v, now, o| v.open_labeled(now, 10, lbl("a"), o)).0;
    let a = a.opened().unwrap();
    let e = refused(&mut svc, |v, now, o| v.open_labeled(now, 10, lbl("b"), o));
    assert_eq!(e, Error::CapacityExceeded(Table::Labels));
    assert_eq!(e.to_string(), "capacity exceeded: the labels table is full");
    assert_eq!((e.code(), e.kind()), (301, "capacity_exceeded"));
    assert_eq!(Table::Labels.name(), "labels");
    // unlabelled opens (and an empty label, which is no label) still fit
    let plain = open(&mut svc, 10);
    let empty = run(&mut svc, |v, now, o| {
        v.open_labeled(now, 10, Label::EMPTY, o)
    })
    .0;
    assert!(empty.opened().is_some());
    assert_eq!(svc.session(plain).unwrap().label, Label::EMPTY);
    // the row comes back when its session ends, and serves the next labelled open
    run(&mut svc, |v, now, o| v.close_session(now, a, None, o));
    let b = run(&mut svc, |v, now, o| v.open_labeled(now, 10, lbl("b"), o)).0;
    assert_eq!(svc.session(b.opened().unwrap()).unwrap().label, lbl("b"));
    // and when it expires
    let now = svc.now().0;
    tick(&mut svc, now + 10);
    assert_eq!(svc.usage().sessions, 0);
    let c = run(&mut svc, |v, now, o| v.open_labeled(now, 10, lbl("c"), o)).0;
    assert_eq!(svc.session(c.opened().unwrap()).unwrap().label, lbl("c"));
    // a full session table is reported first
    let mut full =
        LockService::new(VecStorage::with_labels(1, 1, 1, 0), Config::default()).unwrap();
    open(&mut full, 10);
    let e = refused(&mut full, |v, now, o| v.open_labeled(now, 10, lbl("c"), o));
    assert_eq!(e, Error::CapacityExceeded(Table::Sessions));
    // no label table at all: labelled opens are refused, the rest works
    let mut none =
        LockService::new(VecStorage::with_labels(2, 2, 2, 0), Config::default()).unwrap();
    let e = refused(&mut none, |v, now, o| v.open_labeled(now, 10, lbl("d"), o));
    assert_eq!(e, Error::CapacityExceeded(Table::Labels));
    let c = open(&mut none, 10);
    x(&mut none, c, "l");
}

#[test]
fn not_holder() {
    let (mut svc, _, b) = busy_service();
    // b waits for "a" but does not hold it; nobody holds "z"
    let e = refused(&mut svc, |v, now, o| v.release(now, b, "a", None, o));
    assert_eq!(e, Error::NotHolder(b));
    assert_eq!(
        e.to_string(),
        "not holder: session 2 does not hold this lock"
    );
    assert_eq!(
        refused(&mut svc, |v, now, o| v.release(now, b, "z", None, o)),
        Error::NotHolder(b)
    );
}

#[test]
fn not_queued() {
    let (mut svc, a, _) = busy_service();
    // a holds "a" (a hold is not a wait) and has nothing on "z"
    let e = refused(&mut svc, |v, now, o| v.cancel(now, a, "a", None, o));
    assert_eq!(e, Error::NotQueued(a));
    assert_eq!(
        e.to_string(),
        "not queued: session 1 does not wait for this lock"
    );
    assert_eq!(
        refused(&mut svc, |v, now, o| v.cancel(now, a, "z", None, o)),
        Error::NotQueued(a)
    );
}

#[test]
fn already_queued() {
    let (mut svc, _, b) = busy_service();
    let e = refused(&mut svc, |v, now, o| {
        v.acquire(now, b, "a", Mode::Exclusive, Wait::Forever, None, o)
    });
    assert_eq!(e, Error::AlreadyQueued(b));
    assert_eq!(
        e.to_string(),
        "already queued: session 2 already waits for this lock"
    );
    // whatever the mode or wait of the second attempt
    let e = refused(&mut svc, |v, now, o| {
        v.acquire(now, b, "a", Mode::Shared, Wait::None, None, o)
    });
    assert_eq!(e, Error::AlreadyQueued(b));
}

#[test]
fn mode_mismatch() {
    let (mut svc, a, _) = busy_service();
    let e = refused(&mut svc, |v, now, o| {
        v.acquire(now, a, "a", Mode::Shared, Wait::Forever, None, o)
    });
    assert_eq!(
        e,
        Error::ModeMismatch {
            held: Mode::Exclusive
        }
    );
    assert_eq!(
        e.to_string(),
        "mode mismatch: the lock is held exclusive by this session"
    );
}

#[test]
fn empty_name() {
    let (mut svc, a, _) = busy_service();
    let e = refused(&mut svc, |v, now, o| {
        v.acquire(now, a, "", Mode::Exclusive, Wait::None, None, o)
    });
    assert_eq!(e, Error::EmptyName);
    assert_eq!(e.to_string(), "empty name: a name needs at least one byte");
    assert_eq!(
        refused(&mut svc, |v, now, o| v.release(now, a, "", None, o)),
        Error::EmptyName
    );
    assert_eq!(
        refused(&mut svc, |v, now, o| v.cancel(now, a, "", None, o)),
        Error::EmptyName
    );
}

#[test]
fn name_too_long() {
    let (mut svc, a, _) = busy_service();
    let long = "n".repeat(65);
    let e = refused(&mut svc, |v, now, o| {
        v.acquire(now, a, &long, Mode::Exclusive, Wait::None, None, o)
    });
    assert_eq!(e, Error::NameTooLong { len: 65, max: 64 });
    assert_eq!(e.to_string(), "name too long: 65 bytes, at most 64");
    // the configured limit applies, not just the build's
    let mut small = svc_with(
        2,
        2,
        2,
        Config {
            lock_delay: 0,
            max_name_len: 4,
            max_watchers: 4,
        },
    );
    let s = open(&mut small, 5);
    let e = refused(&mut small, |v, now, o| {
        v.acquire(now, s, "abcde", Mode::Exclusive, Wait::None, None, o)
    });
    assert_eq!(e, Error::NameTooLong { len: 5, max: 4 });
    acquire(&mut small, s, "abcd", Mode::Exclusive, Wait::None);
}

#[test]
fn bad_ttl() {
    let (mut svc, _, _) = busy_service();
    let e = refused(&mut svc, |v, now, o| v.open_session(now, 0, o));
    assert_eq!(e, Error::BadTtl);
    assert_eq!(
        e.to_string(),
        "bad ttl: a session needs a ttl of at least 1 tick"
    );
}

#[test]
fn deadline_overflow() {
    let mut svc = svc(2);
    let long = open(&mut svc, u64::MAX - 10); // deadline u64::MAX - 10: fits
    tick(&mut svc, 20);
    let e = refused(&mut svc, |v, now, o| v.open_session(now, u64::MAX - 10, o));
    assert_eq!(e, Error::DeadlineOverflow);
    assert_eq!(
        e.to_string(),
        "deadline overflow: now + ttl does not fit in u64"
    );
    // a keep-alive would move the deadline past u64::MAX too
    assert_eq!(
        refused(&mut svc, |v, now, o| v.keep_alive(now, long, None, o)),
        Error::DeadlineOverflow
    );
}

#[test]
fn time_went_backwards() {
    let (mut svc, _, _) = busy_service();
    tick(&mut svc, 7);
    let e = refused(&mut svc, |v, _now, o| v.tick(Tick(6), o));
    assert_eq!(
        e,
        Error::TimeWentBackwards {
            now: Tick(7),
            requested: Tick(6)
        }
    );
    assert_eq!(
        e.to_string(),
        "time went backwards: now is t7, asked for t6"
    );
}

#[test]
fn stale_request() {
    let (mut svc, a, _) = busy_service(); // a's latest request number is 5
    let e = refused(&mut svc, |v, now, o| v.keep_alive(now, a, Some(4), o));
    assert_eq!(
        e,
        Error::StaleRequest {
            request: 4,
            latest: 5
        }
    );
    assert_eq!(
        e.to_string(),
        "stale request: number 4 is older than the latest, 5"
    );
}

#[test]
fn request_reused() {
    let (mut svc, a, _) = busy_service(); // request 5 was an acquire of "a"
    let e = refused(&mut svc, |v, now, o| v.keep_alive(now, a, Some(5), o));
    assert_eq!(e, Error::RequestReused { request: 5 });
    assert_eq!(
        e.to_string(),
        "request reused: number 5 was used for a different input"
    );
    // the same number for another lock, or another mode, is not a retry either
    let e = refused(&mut svc, |v, now, o| {
        v.acquire(now, a, "b", Mode::Exclusive, Wait::None, Some(5), o)
    });
    assert_eq!(e, Error::RequestReused { request: 5 });
    let e = refused(&mut svc, |v, now, o| {
        v.acquire(now, a, "a", Mode::Shared, Wait::None, Some(5), o)
    });
    assert_eq!(e, Error::RequestReused { request: 5 });
    let e = refused(&mut svc, |v, now, o| v.close_session(now, a, Some(5), o));
    assert_eq!(e, Error::RequestReused { request: 5 });
}

#[test]
fn capacity_exceeded_sessions() {
    let mut svc = svc_with(2, 2, 2, Config::default());
    open(&mut svc, 5);
    open(&mut svc, 5);
    let e = refused(&mut svc, |v, now, o| v.open_session(now, 5, o));
    assert_eq!(e, Error::CapacityExceeded(Table::Sessions));
    assert_eq!(
        e.to_string(),
        "capacity exceeded: the sessions table is full"
    );
    assert_eq!((e.code(), e.kind()), (301, "capacity_exceeded"));
}

/// A table prints as its name, the word the capacity error's message uses.
#[test]
fn a_table_prints_as_its_name() {
    for (t, name) in [
        (Table::Sessions, "sessions"),
        (Table::Locks, "locks"),
        (Table::Claims, "claims"),
        (Table::Resources, "resources"),
        (Table::Watchers, "watchers"),
        (Table::Labels, "labels"),
    ] {
        assert_eq!((t.to_string(), t.name()), (name.to_string(), name));
    }
}

/// A table of no rows is a table that is always full: each refuses as full (and nothing
/// reads a row it does not have).
#[test]
fn tables_of_no_rows_refuse_as_full() {
    let mut none = svc_with(0, 4, 4, Config::default());
    let e = refused(&mut none, |v, now, o| v.open_session(now, 10, o));
    assert_eq!(e, Error::CapacityExceeded(Table::Sessions));
    let mut svc = svc_with(2, 0, 4, Config::default());
    let a = open(&mut svc, 5);
    let e = refused(&mut svc, |v, now, o| {
        v.acquire(now, a, "l", Mode::Exclusive, Wait::None, None, o)
    });
    assert_eq!(e, Error::CapacityExceeded(Table::Locks));
    let mut svc = svc_with(2, 4, 0, Config::default());
    let a = open(&mut svc, 5);
    let e = refused(&mut svc, |v, now, o| {
        v.acquire(now, a, "l", Mode::Exclusive, Wait::None, None, o)
    });
    assert_eq!(e, Error::CapacityExceeded(Table::Claims));
}

#[test]
fn capacity_exceeded_locks() {
    let mut svc = svc_with(2, 1, 4, Config::default());
    let a = open(&mut svc, 5);
    x(&mut svc, a, "one");
    let e = refused(&mut svc, |v, now, o| {
        v.acquire(now, a, "two", Mode::Exclusive, Wait::None, None, o)
    });
    assert_eq!(e, Error::CapacityExceeded(Table::Locks));
    assert_eq!(e.to_string(), "capacity exceeded: the locks table is full");
    // the existing lock still takes claims
    let b = open(&mut svc, 5);
    x(&mut svc, b, "one");
}

#[test]
fn capacity_exceeded_claims() {
    let mut svc = svc_with(3, 3, 2, Config::default());
    let a = open(&mut svc, 5);
    let b = open(&mut svc, 5);
    x(&mut svc, a, "one");
    x(&mut svc, b, "one"); // a hold and a wait: the pool is full
    let c = open(&mut svc, 5);
    // a new wait, and a new grant on a new lock, both need a claim
    let e = refused(&mut svc, |v, now, o| {
        v.acquire(now, c, "one", Mode::Exclusive, Wait::Forever, None, o)
    });
    assert_eq!(e, Error::CapacityExceeded(Table::Claims));
    assert_eq!(e.to_string(), "capacity exceeded: the claims table is full");
    let e = refused(&mut svc, |v, now, o| {
        v.acquire(now, c, "two", Mode::Exclusive, Wait::None, None, o)
    });
    assert_eq!(e, Error::CapacityExceeded(Table::Claims));
    // a try-lock that finds the lock busy needs no claim, nor does a re-acquire
    assert_eq!(
        acquire(&mut svc, c, "one", Mode::Exclusive, Wait::None),
        (Reply::Busy, vec![])
    );
    assert_eq!(x(&mut svc, a, "one"), (reply_x(1), vec![]));
}

#[test]
fn capacity_exceeded_claims_and_locks_together() {
    // Both tables full: the claim pool is reported, and the claim row taken first is given
    // back (the snapshot check in `refused` and the next grant prove nothing leaked).
    let mut svc = svc_with(2, 1, 1, Config::default());
    let a = open(&mut svc, 5);
    x(&mut svc, a, "one");
    let e = refused(&mut svc, |v, now, o| {
        v.acquire(now, a, "two", Mode::Exclusive, Wait::None, None, o)
    });
    assert_eq!(e, Error::CapacityExceeded(Table::Claims));
    release(&mut svc, a, "one");
    // lock table empty again, claim pool empty again: a new lock fits
    assert_eq!(x(&mut svc, a, "two"), (reply_x(2), vec![]));
}

#[test]
fn capacity_exceeded_locks_gives_the_claim_row_back() {
    let mut svc = svc_with(2, 1, 3, Config::default());
    let a = open(&mut svc, 5);
    x(&mut svc, a, "one");
    for _ in 0..5 {
        // each refusal takes a claim row and must give it back
        let e = refused(&mut svc, |v, now, o| {
            v.acquire(now, a, "two", Mode::Exclusive, Wait::None, None, o)
        });
        assert_eq!(e, Error::CapacityExceeded(Table::Locks));
    }
    assert_eq!(svc.usage().claims, 1);
    let b = open(&mut svc, 5);
    x(&mut svc, b, "one");
    assert_eq!(svc.usage().claims, 2);
}

#[test]
fn bad_frame() {
    let (mut svc, _, _) = busy_service();
    let e = refused(&mut svc, |v, _now, o| {
        v.handle_frame(&[0xff, 0xff, 0xff], o)
    });
    assert_eq!(e, Error::BadFrame);
    assert_eq!(e.to_string(), "bad frame: bytes do not decode");
    assert_eq!(Input::from_frame(&[]), Err(Error::BadFrame));
}

#[test]
fn buffer_too_small() {
    let (svc, _, _) = busy_service();
    let need = svc.snapshot_len();
    let mut buf = vec![0u8; need - 1];
    let e = svc.snapshot(&mut buf).unwrap_err();
    assert_eq!(e, Error::BufferTooSmall { need: need as u32 });
    assert_eq!(
        e.to_string(),
        format!("buffer too small: room for {need} needed (bytes, or events for a sink)")
    );
    let mut buf = vec![0u8; need];
    assert_eq!(svc.snapshot(&mut buf), Ok(need));
}

#[test]
fn bad_magic() {
    let e = LockService::restore(VecStorage::new(1, 1, 1), b"NOPE\x01")
        .map(|_| ())
        .unwrap_err()
        .1;
    assert_eq!(e, Error::BadMagic);
    assert_eq!(e.to_string(), "bad magic: not a fencelock snapshot");
}

#[test]
fn unsupported_version() {
    let (svc, _, _) = busy_service();
    let mut bytes = svc.snapshot_vec();
    bytes[4] = 9; // the version varint follows the 4-byte magic
    let e = LockService::restore(VecStorage::new(4, 4, 8), &bytes)
        .map(|_| ())
        .unwrap_err()
        .1;
    assert_eq!(e, Error::UnsupportedVersion(9));
    assert_eq!(e.to_string(), "unsupported snapshot version 9");
}

#[test]
fn corrupt_snapshot() {
    let (svc, _, _) = busy_service();
    let mut bytes = svc.snapshot_vec();
    bytes.push(0);
    let e = LockService::restore(VecStorage::new(4, 4, 8), &bytes)
        .map(|_| ())
        .unwrap_err()
        .1;
    assert_eq!(e, Error::CorruptSnapshot("trailing bytes"));
    assert_eq!(e.to_string(), "corrupt snapshot: trailing bytes");
}

#[test]
fn bad_config() {
    let e = LockService::new(
        VecStorage::new(1, 1, 1),
        Config {
            lock_delay: 0,
            max_name_len: 0,
            max_watchers: 4,
        },
    )
    .unwrap_err();
    assert_eq!(e, Error::BadConfig("max_name_len must be 1..=64"));
    assert_eq!(e.to_string(), "bad config: max_name_len must be 1..=64");
    let e = LockService::new(
        VecStorage::new(1, 1, 1),
        Config {
            lock_delay: 0,
            max_name_len: 65,
            max_watchers: 4,
        },
    )
    .unwrap_err();
    assert_eq!(e.code(), 206);
    let e = SessionKeeper::new(10, 3, 10).unwrap_err();
    assert_eq!(e.to_string(), "bad config: margin must be in 1..ttl");
}

/// A gate's refusals leave its snapshot byte-identical too.
fn gate_refuses(gate: &mut FenceGate<[GateRow; 2]>, resource: &str, token: u64) -> Error {
    let mut before = [0u8; 512];
    let n = gate.snapshot(&mut before).unwrap();
    let e = gate.admit(resource, Token(token)).unwrap_err();
    let mut after = [0u8; 512];
    let m = gate.snapshot(&mut after).unwrap();
    assert_eq!(before[..n], after[..m], "a refused admit changed the gate");
    e
}

#[test]
fn stale() {
    let mut gate = FenceGate::new([GateRow::EMPTY; 2]).unwrap();
    gate.admit("ledger", Token(35)).unwrap();
    let e = gate_refuses(&mut gate, "ledger", 34);
    assert_eq!(
        e,
        Error::Stale {
            token: Token(34),
            highest: Token(35)
        }
    );
    assert_eq!(
        e.to_string(),
        "stale: token 34 is lower than the highest seen, token 35"
    );
    assert_eq!((e.code(), e.kind()), (401, "stale"));
}

#[test]
fn zero_token() {
    let mut gate = FenceGate::new([GateRow::EMPTY; 2]).unwrap();
    let e = gate_refuses(&mut gate, "ledger", 0);
    assert_eq!(e, Error::ZeroToken);
    assert_eq!(
        e.to_string(),
        "zero token: 0 is never a valid fencing token"
    );
}

#[test]
fn capacity_exceeded_resources() {
    let mut gate = FenceGate::new([GateRow::EMPTY; 2]).unwrap();
    gate.admit("a", Token(1)).unwrap();
    gate.admit("b", Token(1)).unwrap();
    let e = gate_refuses(&mut gate, "c", 3);
    assert_eq!(e, Error::CapacityExceeded(Table::Resources));
    assert_eq!(
        e.to_string(),
        "capacity exceeded: the resources table is full"
    );
    assert!(gate.is_full());
    // known resources still admit
    gate.admit("a", Token(2)).unwrap();
}

#[test]
fn gate_name_errors() {
    let mut gate = FenceGate::new([GateRow::EMPTY; 2]).unwrap();
    assert_eq!(gate_refuses(&mut gate, "", 1), Error::EmptyName);
    assert_eq!(
        gate_refuses(&mut gate, &"r".repeat(65), 1),
        Error::NameTooLong { len: 65, max: 64 }
    );
    assert_eq!(gate.check("", Token(1)), Err(Error::EmptyName));
}

#[test]
fn time_went_backwards_for_every_input() {
    // every input carries a now; one earlier than the service's is refused first, with
    // nothing changed (not even for a session that does not exist)
    let (mut svc, a, b) = busy_service();
    tick(&mut svc, 7);
    let back = Error::TimeWentBackwards {
        now: Tick(7),
        requested: Tick(6),
    };
    let t = Tick(6);
    let ghost = SessionId(99);
    type Call<'a> = &'a dyn Fn(&mut Svc, &mut Events) -> Result<Reply, Error>;
    let calls: [Call; 13] = [
        &|v, o| v.open_session(t, 5, o),
        &|v, o| v.open_labeled(t, 5, Label::new("worker-1").unwrap(), o),
        &|v, o| v.watch(t, a, "a", None, o),
        &|v, o| v.unwatch(t, b, "a", None, o),
        &|v, o| v.keep_alive(t, a, None, o),
        &|v, o| v.close_session(t, a, None, o),
        &|v, o| v.acquire(t, ghost, "", Mode::Exclusive, Wait::None, None, o),
        &|v, o| v.release(t, a, "a", None, o),
        &|v, o| v.cancel(t, b, "a", None, o),
        &|v, o| v.campaign(t, a, "e", None, o),
        &|v, o| v.resign(t, a, "a", None, o),
        &|v, o| v.handle(Input::Tick { now: t }, o),
        &|v, o| {
            let mut frame = [0u8; fencelock::MAX_FRAME_LEN];
            let input = Input::KeepAlive {
                now: t,
                session: a,
                request: Some(5),
            };
            let n = input.to_frame(&mut frame)?;
            v.handle_frame(&frame[..n], o)
        },
    ];
    for (i, call) in calls.iter().enumerate() {
        let e = refused(&mut svc, |v, _now, o| call(v, o));
        assert_eq!(e, back, "call {i}");
    }
}

#[test]
fn buffer_too_small_for_an_input() {
    // a bounded sink with less room than max_events() refuses the input before anything
    // changes, even one whose advance would expire sessions
    let (mut svc, a, _) = busy_service();
    let need = svc.max_events();
    assert_eq!(need, 2 + 2 * 2);
    let mut small: heapless::Deque<fencelock::Output, 5> = heapless::Deque::new();
    let before = svc.snapshot_vec();
    let e = svc.keep_alive(Tick(10), a, None, &mut small).unwrap_err();
    assert_eq!(e, Error::BufferTooSmall { need: need as u32 });
    assert!(small.is_empty());
    assert_eq!(svc.snapshot_vec(), before);
    assert_eq!(svc.now(), Tick(0));
}

#[test]
fn the_order_of_checks_is_the_documented_precedence() {
    // docs/SPEC.md §5: TimeWentBackwards → BufferTooSmall → (the advance) →
    // UnknownSession → EmptyName/NameTooLong → request-number errors → input-specific.
    let (mut svc, a, b) = busy_service(); // a: latest request 5 (an acquire of "a")
    tick(&mut svc, 2);
    let ghost = SessionId(99);
    // backwards beats a sink too small
    let mut tiny: heapless::Deque<fencelock::Output, 1> = heapless::Deque::new();
    assert_eq!(
        svc.acquire(
            Tick(1),
            ghost,
            "",
            Mode::Exclusive,
            Wait::None,
            None,
            &mut tiny
        ),
        Err(Error::TimeWentBackwards {
            now: Tick(2),
            requested: Tick(1)
        })
    );
    // a sink too small beats an unknown session
    assert_eq!(
        svc.acquire(
            Tick(2),
            ghost,
            "",
            Mode::Exclusive,
            Wait::None,
            None,
            &mut tiny
        ),
        Err(Error::BufferTooSmall {
            need: svc.max_events() as u32
        })
    );
    // the unknown session beats the empty name
    let e = refused(&mut svc, |v, now, o| {
        v.acquire(now, ghost, "", Mode::Exclusive, Wait::None, None, o)
    });
    assert_eq!(e, Error::UnknownSession(ghost));
    // the name beats the request number
    let e = refused(&mut svc, |v, now, o| {
        v.acquire(now, a, "", Mode::Exclusive, Wait::None, Some(1), o)
    });
    assert_eq!(e, Error::EmptyName);
    // the stale request number beats the input's own checks (b holds nothing)
    run(&mut svc, |v, now, o| v.keep_alive(now, b, Some(3), o));
    let e = refused(&mut svc, |v, now, o| v.release(now, b, "a", Some(2), o));
    assert_eq!(
        e,
        Error::StaleRequest {
            request: 2,
            latest: 3
        }
    );
    // a reused number beats AlreadyQueued
    let e = refused(&mut svc, |v, now, o| {
        v.acquire(now, b, "a", Mode::Exclusive, Wait::Forever, Some(3), o)
    });
    assert_eq!(e, Error::RequestReused { request: 3 });
    // claims before locks when both tables are full
    let mut full = svc_with(2, 1, 1, Config::default());
    let c = open(&mut full, 9);
    x(&mut full, c, "one");
    let e = refused(&mut full, |v, now, o| {
        v.acquire(now, c, "two", Mode::Exclusive, Wait::None, None, o)
    });
    assert_eq!(e, Error::CapacityExceeded(Table::Claims));
}

/// Every kind of error in `Error::EXAMPLES` (the one list of them) is provoked by a real
/// scenario in this file: a new variant without a test fails here.
#[test]
fn every_error_kind_is_provoked_by_a_test_here() {
    for e in Error::EXAMPLES {
        match e.kind() {
            "unknown_session" => unknown_session(),
            "not_holder" => not_holder(),
            "not_queued" => not_queued(),
            "already_queued" => already_queued(),
            "mode_mismatch" => mode_mismatch(),
            "stale_request" => stale_request(),
            "request_reused" => request_reused(),
            "limit_mismatch" => limit_mismatch(),
            "not_watching" => not_watching(),
            "already_watching" => already_watching(),
            "bad_permits" => bad_permits(),
            "label_too_long" => label_too_long(),
            "empty_name" => empty_name(),
            "name_too_long" => name_too_long(),
            "bad_ttl" => bad_ttl(),
            "deadline_overflow" => deadline_overflow(),
            "time_went_backwards" => time_went_backwards(),
            "bad_config" => bad_config(),
            "capacity_exceeded" => capacity_exceeded_sessions(),
            "stale" => stale(),
            "zero_token" => zero_token(),
            "bad_frame" => bad_frame(),
            "buffer_too_small" => buffer_too_small(),
            "bad_magic" => bad_magic(),
            "unsupported_version" => unsupported_version(),
            "corrupt_snapshot" => corrupt_snapshot(),
            "unknown_keep_alive" => unknown_keep_alive(),
            other => panic!("no test here provokes {other} ({e:?})"),
        }
    }
}

#[test]
fn unknown_keep_alive() {
    let mut keeper = SessionKeeper::new(10, 3, 2).unwrap();
    keeper.keep_alive_sent(0).unwrap();
    let before = keeper;
    let e = keeper.keep_alive_acked(4).unwrap_err();
    assert_eq!(e, Error::UnknownKeepAlive { sent_at: 4 });
    assert_eq!(
        e.to_string(),
        "unknown keep-alive: no keep-alive sent at 4 is on record"
    );
    assert_eq!((e.code(), e.kind()), (601, "unknown_keep_alive"));
    assert_eq!(keeper, before, "nothing changed");
}

#[test]
fn codes_and_kinds_are_unique_and_stable() {
    let all = Error::EXAMPLES;
    let codes: Vec<u32> = all.iter().map(|e| e.code()).collect();
    // the codes are part of the C and JS interfaces: they never change
    assert_eq!(
        codes,
        [
            101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 201, 202, 203, 204, 205, 206, 207,
            208, 301, 401, 402, 501, 502, 503, 504, 505, 601
        ]
    );
    let kinds: std::collections::BTreeSet<_> = all.iter().map(|e| e.kind()).collect();
    assert_eq!(kinds.len(), all.len());
    for e in all {
        assert!(!e.to_string().is_empty());
        assert!(
            e.to_string().starts_with(&e.kind().replace('_', " ")[..4]),
            "{e}"
        );
    }
}

/// A host's `Storage` that gives labels through `tables_and_labels` but leaves
/// `labels_ref` at its default (the trait says: implement both or neither) would write
/// version-2 snapshots without the labels, which restore refuses. The service refuses such
/// storage when it is made or restored into.
#[test]
fn storage_whose_read_only_views_disagree_is_refused() {
    use fencelock::storage::{LabelRow, Tables, TablesRef};
    use fencelock::Storage;
    struct HalfLabelled(VecStorage);
    impl Storage for HalfLabelled {
        fn tables(&mut self) -> Tables<'_> {
            self.0.tables()
        }
        fn tables_ref(&self) -> TablesRef<'_> {
            self.0.tables_ref()
        }
        fn tables_and_labels(&mut self) -> (Tables<'_>, &mut [LabelRow]) {
            self.0.tables_and_labels()
        }
    }
    let want =
        Error::BadConfig("tables_ref and labels_ref must give the rows tables_and_labels gives");
    let made = LockService::new(HalfLabelled(VecStorage::new(2, 2, 4)), Config::default());
    assert_eq!(made.err(), Some(want));
    let bytes = svc(2).snapshot_vec();
    let restored = LockService::restore(HalfLabelled(VecStorage::new(2, 2, 4)), &bytes);
    assert_eq!(restored.err().map(|(_, e)| e), Some(want));
    // With no labels at all (both left at their defaults) it is consistent, and taken.
    struct Unlabelled(VecStorage);
    impl Storage for Unlabelled {
        fn tables(&mut self) -> Tables<'_> {
            self.0.tables()
        }
        fn tables_ref(&self) -> TablesRef<'_> {
            self.0.tables_ref()
        }
    }
    assert!(LockService::new(Unlabelled(VecStorage::new(2, 2, 4)), Config::default()).is_ok());
    // A read-only index shorter than the mutable one (here one bucket of the session
    // index's four): refused too — once that bucket were taken, a query's probe, which
    // ends only at a free bucket, would never end.
    struct ShortIndex(VecStorage);
    impl Storage for ShortIndex {
        fn tables(&mut self) -> Tables<'_> {
            self.0.tables()
        }
        fn tables_ref(&self) -> TablesRef<'_> {
            let t = self.0.tables_ref();
            TablesRef {
                session_index: &t.session_index[..1],
                ..t
            }
        }
    }
    let made = LockService::new(ShortIndex(VecStorage::new(2, 2, 4)), Config::default());
    assert_eq!(made.err(), Some(want));
}
