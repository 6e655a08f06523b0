//! Sessions: open, keep-alive, close, expiry, ids and the session queries.

mod common;
use common::*;

use fencelock::{LockService, Mode, ReleaseReason::*, Reply, SessionId, Tick, VecStorage, Wait};

#[test]
fn open_assigns_increasing_ids_and_deadlines() {
    let mut svc = svc(4);
    let (reply, out) = run(&mut svc, |v, now, o| v.open_session(now, 10, o));
    let a = SessionId(1);
    assert_eq!(
        (reply, out),
        (
            Reply::Opened {
                session: a,
                expires_at: Tick(10)
            },
            vec![]
        )
    );
    tick(&mut svc, 3);
    let (reply, out) = run(&mut svc, |v, now, o| v.open_session(now, 5, o));
    let b = SessionId(2);
    assert_eq!(
        (reply, out),
        (
            Reply::Opened {
                session: b,
                expires_at: Tick(8)
            },
            vec![]
        )
    );
    // an open at a later now counts its ttl from that now
    let c = open_at(&mut svc, 6, 5);
    assert_eq!(svc.session(c).unwrap().expires_at, Tick(11));
    close(&mut svc, c);
    let info = svc.session(b).unwrap();
    assert_eq!(
        (info.id, info.ttl, info.expires_at, info.holds, info.waits),
        (b, 5, Tick(8), 0, 0)
    );
    assert_eq!(info.last_request, 0);
    assert_eq!(svc.sessions().collect::<Vec<_>>(), vec![a, b]);
    assert_eq!(svc.usage().sessions, 2);
    assert!(!svc.is_empty());
}

#[test]
fn ids_are_never_reused_not_even_after_restore() {
    let mut svc = svc(2);
    let a = open(&mut svc, 10);
    close(&mut svc, a);
    let b = open(&mut svc, 10);
    assert_eq!(b, SessionId(2));
    let bytes = svc.snapshot_vec();
    let mut restored = LockService::restore(VecStorage::new(2, 2, 4), &bytes)
        .map_err(|e| e.1)
        .unwrap();
    let c = open(&mut restored, 10);
    assert_eq!(c, SessionId(3));
}

#[test]
fn keep_alive_moves_the_deadline_to_now_plus_ttl() {
    let mut svc = svc(2);
    let a = open(&mut svc, 10);
    tick(&mut svc, 7);
    assert_eq!(keep_alive(&mut svc, a), (reply_kept_alive(17), vec![]));
    assert_eq!(svc.session(a).unwrap().expires_at, Tick(17));
    assert_eq!(svc.poll_timeout(), Some(Tick(17)));
    // the old deadline passes without effect
    assert_eq!(tick(&mut svc, 10), vec![]);
    assert_eq!(tick(&mut svc, 16), vec![]);
    assert_eq!(tick(&mut svc, 17), vec![expired(a)]);
    assert!(svc.session(a).is_none());
}

#[test]
fn many_keep_alives_leave_no_garbage() {
    // An indexed heap, not lazy deletion: a million keep-alives would otherwise fill it up.
    let mut svc = svc(2);
    let a = open(&mut svc, 10);
    let b = open(&mut svc, 1_000_000);
    for t in 1..=5_000 {
        if t % 2 == 0 {
            tick(&mut svc, t);
            keep_alive(&mut svc, a);
        } else {
            // no tick first: the keep-alive advances time itself
            keep_alive_at(&mut svc, t, a);
        }
    }
    assert_eq!(svc.poll_timeout(), Some(Tick(5_010)));
    assert_eq!(tick(&mut svc, 5_010), vec![expired(a)]);
    assert_eq!(svc.poll_timeout(), Some(Tick(1_000_000)));
    assert!(svc.session(b).is_some());
}

#[test]
fn close_releases_holds_in_acquire_order_drops_waits_and_grants() {
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    let b = open(&mut svc, 10);
    x(&mut svc, b, "q"); // b holds q, a will wait for it
    x(&mut svc, a, "m");
    x(&mut svc, a, "q");
    x(&mut svc, a, "k");
    x(&mut svc, b, "m"); // b waits for m
    assert_eq!(svc.session(a).unwrap().holds, 2);
    assert_eq!(svc.session(a).unwrap().waits, 1);
    assert_eq!(
        close(&mut svc, a),
        (
            Reply::Closed,
            vec![
                released(a, "m", 2, Closed),
                released(a, "k", 3, Closed),
                gx(b, "m", 4),
            ]
        )
    );
    assert!(svc.session(a).is_none());
    assert_eq!(waiters(&svc, "q"), vec![]);
    assert_eq!(holders(&svc, "m"), vec![(b, Mode::Exclusive, 4)]);
    // "k" was idle after the close and is evicted
    assert_eq!(
        svc.locks()
            .map(|l| l.as_str().to_owned())
            .collect::<Vec<_>>(),
        vec!["q", "m"]
    );
}

#[test]
fn close_applies_no_lock_delay() {
    let mut svc = svc_with(
        4,
        4,
        8,
        fencelock::Config {
            lock_delay: 100,
            max_name_len: 64,
            max_watchers: 4,
        },
    );
    let a = open(&mut svc, 10);
    let b = open(&mut svc, 10);
    x(&mut svc, a, "l");
    x(&mut svc, b, "l");
    let (reply, out) = close(&mut svc, a);
    assert_eq!(reply, Reply::Closed);
    assert_eq!(out.last(), Some(&gx(b, "l", 2)));
    assert_eq!(svc.lock_delay_until("l"), None);
}

#[test]
fn expiry_releases_holds_with_reason_expired_and_drops_waits() {
    let mut svc = svc(4);
    let a = open(&mut svc, 5);
    let b = open(&mut svc, 50);
    x(&mut svc, a, "one");
    x(&mut svc, b, "two");
    x(&mut svc, a, "two"); // a waits on two
    assert_eq!(
        tick(&mut svc, 5),
        vec![expired(a), released(a, "one", 1, Expired)]
    );
    assert_eq!(waiters(&svc, "two"), vec![]);
    assert_eq!(svc.usage().claims, 1);
    // an expired session is unknown from then on
    let e = refused(&mut svc, |v, now, o| v.keep_alive(now, a, None, o));
    assert_eq!(e, fencelock::Error::UnknownSession(a));
}

#[test]
fn sessions_expire_in_deadline_order_ties_by_id() {
    let mut svc = svc(4);
    let a = open(&mut svc, 9);
    let b = open(&mut svc, 7);
    let c = open(&mut svc, 7);
    let d = open(&mut svc, 20);
    assert_eq!(tick(&mut svc, 9), vec![expired(b), expired(c), expired(a)]);
    assert_eq!(svc.sessions().collect::<Vec<_>>(), vec![d]);
}

#[test]
fn session_query_counts_holds_and_waits() {
    let mut svc = svc(4);
    let a = open(&mut svc, 10);
    let b = open(&mut svc, 10);
    acquire(&mut svc, a, "r", Mode::Shared, Wait::None);
    acquire(&mut svc, a, "w", Mode::Exclusive, Wait::None);
    x(&mut svc, b, "w");
    acquire(&mut svc, b, "r", Mode::Shared, Wait::None);
    let ia = svc.session(a).unwrap();
    let ib = svc.session(b).unwrap();
    assert_eq!((ia.holds, ia.waits), (2, 0));
    assert_eq!((ib.holds, ib.waits), (1, 1));
    assert_eq!(svc.session(SessionId(77)), None);
}

#[test]
fn capacity_and_usage_report_the_tables() {
    let mut svc = svc_with(3, 5, 7, fencelock::Config::default());
    let cap = svc.capacity();
    assert_eq!((cap.sessions, cap.locks, cap.claims), (3, 5, 7));
    assert!(svc.is_empty());
    let a = open(&mut svc, 10);
    let b = open(&mut svc, 10);
    x(&mut svc, a, "l");
    x(&mut svc, b, "l");
    x(&mut svc, b, "m");
    let usage = svc.usage();
    assert_eq!((usage.sessions, usage.locks, usage.claims), (2, 2, 3));
}

#[test]
fn slice_storage_owned_by_the_caller_works_like_the_others() {
    use fencelock::Config;
    let mut memory = Slices::new(4, 4, 8);
    let mut slice = LockService::new(memory.storage(), Config::default()).unwrap();
    let mut vec = svc(4);
    let v = open(&mut vec, 10);
    x(&mut vec, v, "l");
    let mut events = Vec::new();
    let a = slice
        .open_session(Tick(0), 10, &mut events)
        .unwrap()
        .opened()
        .unwrap();
    slice
        .acquire(
            Tick(0),
            a,
            "l",
            Mode::Exclusive,
            Wait::Forever,
            None,
            &mut events,
        )
        .unwrap();
    assert_eq!(events, vec![]);
    let mut buf = vec![0u8; slice.snapshot_len()];
    slice.snapshot(&mut buf).unwrap();
    assert_eq!(buf, vec.snapshot_vec());
    // the caller gets its memory back, and it still serves: restored into, it holds the
    // same state
    let storage = slice.into_storage();
    let again = LockService::restore(storage, &buf).unwrap();
    assert_eq!(again.snapshot_vec(), buf);
}

/// Each table's index must have two buckets per row: slices of other lengths are refused
/// with a typed error before anything is written to them.
#[test]
fn slice_storage_with_an_index_of_the_wrong_length_is_refused_untouched() {
    use fencelock::storage::Bucket;
    use fencelock::{Config, Error};
    let cases: [fn(&mut Slices); 3] = [
        |m| {
            m.session_index.pop();
        },
        |m| m.lock_index.truncate(4),
        |m| m.claim_index.push(Bucket::EMPTY),
    ];
    let dump = |m: &Slices| {
        format!(
            "{:?}{:?}{:?}{:?}{:?}{:?}",
            m.sessions, m.session_index, m.locks, m.lock_index, m.claims, m.claim_index
        )
    };
    for (i, wrong) in cases.into_iter().enumerate() {
        let mut memory = Slices::new(4, 4, 8);
        wrong(&mut memory);
        let before = dump(&memory);
        let refused = LockService::new(memory.storage(), Config::default()).map(|_| ());
        assert_eq!(
            refused,
            Err(Error::BadConfig(
                "a table's index must have two buckets per row"
            )),
            "case {i}"
        );
        let after = dump(&memory);
        assert_eq!(before, after, "case {i}: nothing written");
    }
    // the right lengths are taken
    assert!(LockService::new(Slices::new(4, 4, 8).storage(), Config::default()).is_ok());
}

/// Labels live in a table of their own, sized by the host: slices with a label table
/// label like the vector storage does, slices or arrays without one refuse a labelled
/// open with a typed error and serve unlabelled sessions as before.
#[test]
fn the_label_table_is_the_hosts_to_size() {
    use fencelock::storage::LabelRow;
    use fencelock::{ArrayStorage, Config, Error, Label, LabeledSliceStorage, Table};
    let label = Label::new("worker-7").unwrap();
    let mut events = Vec::new();
    // slices with two label rows
    let mut memory = Slices::new(4, 4, 8);
    let mut labels = [LabelRow::EMPTY; 2];
    let storage = LabeledSliceStorage {
        tables: memory.storage(),
        labels: &mut labels,
    };
    let mut slice = LockService::new(storage, Config::default()).unwrap();
    let mut vec = svc(4);
    for svc_label in [label, label] {
        let a = slice
            .open_labeled(Tick(0), 10, svc_label, &mut events)
            .unwrap()
            .opened()
            .unwrap();
        assert_eq!(slice.session(a).unwrap().label, label);
        run(&mut vec, |v, now, o| v.open_labeled(now, 10, svc_label, o));
    }
    let third = slice.open_labeled(Tick(0), 10, label, &mut events);
    assert_eq!(third, Err(Error::CapacityExceeded(Table::Labels)));
    // the same state, the same snapshot bytes (the label is part of the session's record)
    let mut buf = vec![0u8; slice.snapshot_len()];
    slice.snapshot(&mut buf).unwrap();
    assert_eq!(buf, vec.snapshot_vec());
    // plain slices have no label table
    let mut memory = Slices::new(2, 2, 2);
    let mut plain = LockService::new(memory.storage(), Config::default()).unwrap();
    let refused = plain.open_labeled(Tick(0), 10, label, &mut events);
    assert_eq!(refused, Err(Error::CapacityExceeded(Table::Labels)));
    assert!(plain.open_session(Tick(0), 10, &mut events).is_ok());
    // arrays: one label row per session unless the fourth parameter says otherwise
    let mut arrays = LockService::new(ArrayStorage::<2, 2, 2>::new(), Config::default()).unwrap();
    for _ in 0..2 {
        assert!(arrays.open_labeled(Tick(0), 10, label, &mut events).is_ok());
    }
    let mut bare = LockService::new(ArrayStorage::<2, 2, 2, 0>::new(), Config::default()).unwrap();
    let refused = bare.open_labeled(Tick(0), 10, label, &mut events);
    assert_eq!(refused, Err(Error::CapacityExceeded(Table::Labels)));
    assert!(bare.open_session(Tick(0), 10, &mut events).is_ok());
    assert_eq!(events, vec![]);
}

/// Sessions due at the same tick expire in id order, whatever order their keep-alives came
/// in, and `poll_timeout` is the earliest deadline after every step: checked against a
/// plain model (a map of deadlines) over random opens, keep-alives and closes with more
/// distinct ttls than the service keeps deadline lists for, with snapshots restored on
/// the way (a restored service schedules every session on its own); every session reports
/// its own ttl throughout, in a class or not.
#[test]
fn expiry_order_and_poll_timeout_match_a_model_under_random_keep_alives() {
    use std::collections::BTreeMap;
    for seed in 1..=25u64 {
        let mut rng = Rng(seed);
        let mut svc = svc(32);
        let mut model: BTreeMap<SessionId, (u64, u64)> = BTreeMap::new(); // id -> (ttl, due)
        let mut now = 0u64;
        let ttls = [5u64, 7, 9, 11, 13, 20];
        for step in 0..400 {
            match rng.below(10) {
                0..=2 if model.len() < 32 => {
                    let ttl = ttls[rng.below(ttls.len() as u64) as usize];
                    let s = open_at(&mut svc, now, ttl);
                    model.insert(s, (ttl, now + ttl));
                }
                3..=6 if !model.is_empty() => {
                    let k = rng.below(model.len() as u64) as usize;
                    let s = *model.keys().nth(k).unwrap();
                    let ttl = model[&s].0;
                    assert_eq!(
                        keep_alive_at(&mut svc, now, s).0,
                        reply_kept_alive(now + ttl)
                    );
                    model.insert(s, (ttl, now + ttl));
                }
                7 if !model.is_empty() => {
                    let k = rng.below(model.len() as u64) as usize;
                    let s = *model.keys().nth(k).unwrap();
                    close_at(&mut svc, now, s);
                    model.remove(&s);
                }
                8 if step % 50 == 8 => {
                    let bytes = svc.snapshot_vec();
                    svc = LockService::restore(VecStorage::new(32, 32, 64), &bytes)
                        .map_err(|e| e.1)
                        .unwrap();
                }
                _ => {
                    now += rng.below(4);
                    let mut due: Vec<(u64, SessionId)> = model
                        .iter()
                        .filter(|(_, (_, d))| *d <= now)
                        .map(|(s, (_, d))| (*d, *s))
                        .collect();
                    due.sort();
                    let want: Vec<_> = due.iter().map(|(_, s)| expired(*s)).collect();
                    assert_eq!(tick(&mut svc, now), want, "seed {seed} step {step}");
                    for (_, s) in due {
                        model.remove(&s);
                    }
                }
            }
            let earliest = model.values().map(|(_, d)| *d).min().map(Tick);
            assert_eq!(svc.poll_timeout(), earliest, "seed {seed} step {step}");
            // a session in a ttl class shares the class's ttl; it is its own again outside
            for (s, (ttl, _)) in &model {
                assert_eq!(
                    svc.session(*s).unwrap().ttl,
                    *ttl,
                    "seed {seed} step {step}"
                );
            }
        }
    }
}

/// Memory a caller owns for a [`fencelock::SliceStorage`]: each table's rows and its index
/// (two buckets a row).
struct Slices {
    sessions: Vec<fencelock::storage::SessionRow>,
    session_index: Vec<fencelock::storage::Bucket>,
    locks: Vec<fencelock::storage::LockRow>,
    lock_index: Vec<fencelock::storage::TaggedBucket>,
    claims: Vec<fencelock::storage::ClaimRow>,
    claim_index: Vec<fencelock::storage::Bucket>,
}

impl Slices {
    fn new(sessions: usize, locks: usize, claims: usize) -> Slices {
        use fencelock::storage::{
            Bucket, ClaimRow, LockRow, SessionRow, TaggedBucket, BUCKETS_PER_ROW,
        };
        Slices {
            sessions: vec![SessionRow::EMPTY; sessions],
            session_index: vec![Bucket::EMPTY; BUCKETS_PER_ROW * sessions],
            locks: vec![LockRow::EMPTY; locks],
            lock_index: vec![TaggedBucket::EMPTY; BUCKETS_PER_ROW * locks],
            claims: vec![ClaimRow::EMPTY; claims],
            claim_index: vec![Bucket::EMPTY; BUCKETS_PER_ROW * claims],
        }
    }

    fn storage(&mut self) -> fencelock::SliceStorage<'_> {
        fencelock::SliceStorage {
            sessions: &mut self.sessions,
            session_index: &mut self.session_index,
            locks: &mut self.locks,
            lock_index: &mut self.lock_index,
            claims: &mut self.claims,
            claim_index: &mut self.claim_index,
        }
    }
}

/// A session usually lives at the row its id names, (id − 1) mod rows, and is found there
/// without the index; one opened while that row was taken lives elsewhere and is found
/// through the index. Either way lookups, snapshots and restores are the same, and an id
/// whose row holds another session (or no session: id 0 is a free row's) is unknown.
#[test]
fn sessions_away_from_their_home_row_are_found_and_others_refused() {
    use fencelock::Error::UnknownSession;
    let mut svc = svc(3);
    let a = open(&mut svc, 50); // 1, row 0
    let b = open(&mut svc, 50); // 2, row 1
    let c = open(&mut svc, 50); // 3, row 2
    close(&mut svc, b);
    let d = open(&mut svc, 50); // 4: row 0 is a's, so row 1
    close(&mut svc, c);
    let e = open(&mut svc, 50); // 5: row 1 is d's, so row 2
    assert_eq!((d, e), (SessionId(4), SessionId(5)));
    for s in [a, d, e] {
        assert!(matches!(keep_alive(&mut svc, s).0, Reply::KeptAlive { .. }));
        assert!(matches!(
            x(&mut svc, s, &format!("l{}", s.0)).0,
            Reply::Granted { .. }
        ));
    }
    // 7's row is a's, 2's is d's, 3's is e's: none of them is live.
    for gone in [7, 2, 3, 0] {
        let err = refused(&mut svc, |v, now, o| {
            v.keep_alive(now, SessionId(gone), None, o)
        });
        assert_eq!(err, UnknownSession(SessionId(gone)));
    }
    // A restore puts them back (each at its home row if free) and finds every one.
    let mut restored = twin(&svc);
    assert_eq!(restored.sessions().collect::<Vec<_>>(), vec![a, d, e]);
    for s in [a, d, e] {
        assert_eq!(release(&mut restored, s, &format!("l{}", s.0)).1.len(), 0);
    }
    // Every row is taken exactly once: the table is full at three, and after a close
    // the freed row is the one the next open takes.
    let full = refused(&mut svc, |v, now, o| v.open_session(now, 50, o));
    assert_eq!(
        full,
        fencelock::Error::CapacityExceeded(fencelock::Table::Sessions)
    );
    close(&mut svc, a);
    let f = open(&mut svc, 50);
    assert_eq!(svc.sessions().collect::<Vec<_>>(), vec![d, e, f]);
    close(&mut svc, e);
    close(&mut svc, d);
    close(&mut svc, f);
    assert_eq!(svc.session(d), None);
    // A free row's id is 0, and 0 names no session, not even at its home row (row 0 of
    // 3, free now).
    let e0 = refused(&mut svc, |v, now, o| {
        v.keep_alive(now, SessionId(0), None, o)
    });
    assert_eq!(e0, UnknownSession(SessionId(0)));
}

#[test]
fn is_open_answers_for_sessions_at_home_away_closed_expired_and_never_opened() {
    // Four rows: ids 1..=4 sit at their home rows ((id - 1) mod 4). Closing 2 frees row 1;
    // 5's home row (0) is taken by 1, so 5 lands in row 1 and is found through the index.
    let mut svc = svc(4);
    let ids: Vec<SessionId> = (0..4).map(|_| open(&mut svc, 10)).collect();
    assert_eq!(close(&mut svc, ids[1]).0, Reply::Closed);
    let e = open(&mut svc, 10);
    assert_eq!(e, SessionId(5));
    for (id, open_now) in [
        (0, false),
        (1, true),
        (2, false),
        (3, true),
        (4, true),
        (5, true),
    ] {
        assert_eq!(svc.is_open(SessionId(id)), open_now, "session {id}");
        assert_eq!(
            svc.is_open(SessionId(id)),
            svc.session(SessionId(id)).is_some()
        );
    }
    // 9 has 5's home row too, and was never opened; u64::MAX is far past any id.
    assert!(!svc.is_open(SessionId(9)));
    assert!(!svc.is_open(SessionId(u64::MAX)));
    // Expiry closes: 1, 3 and 4 expire at 10; 5 was opened at 0 with ttl 10 too.
    keep_alive_at(&mut svc, 5, e);
    tick(&mut svc, 10);
    assert!(!svc.is_open(ids[0]) && !svc.is_open(ids[2]) && !svc.is_open(ids[3]));
    assert!(svc.is_open(e), "kept alive until 15");
    tick(&mut svc, 15);
    assert!(!svc.is_open(e));
}
