//! The race: many writers, tokens from one rising counter (as a lock service grants them),
//! each writer delayed at random between getting its token and writing (so lower tokens
//! often arrive after higher ones), all writing one row through the fence at once. The
//! protected data records every write that landed, in its own order; afterwards
//! `check_history` shows that no lower token landed after a higher one, that every write a
//! writer saw accepted landed once and no refused one did. Run against every fence; and a
//! check-then-write "fence" (the check and the write in two transactions) is caught by the
//! same check, so the check can fail.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use common::{check_history, Attempt, Landed};
use fencelock::Token;
use fencelock_fence::{Fence, FenceError, GateFence, PgFence, SqliteFence};

const WRITERS: u64 = 8;
const WRITES: u64 = 25;
const RESOURCE: &str = "account/1";

/// A small seeded generator (xorshift64), one per writer.
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Runs the writers: `make` gives each its own handle (a connection), `write` makes
/// one fenced write and answers `Err(highest)` for a stale refusal.
fn race<F, M, W>(make: M, write: W) -> Vec<Attempt>
where
    M: Fn() -> F + Sync,
    W: Fn(&mut F, u64, u64) -> Result<(), u64> + Sync,
{
    let counter = AtomicU64::new(0);
    let attempts = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for w in 0..WRITERS {
            let (make, write, counter, attempts) = (&make, &write, &counter, &attempts);
            s.spawn(move || {
                let mut fence = make();
                let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ ((w + 1) * 0x1000_0001));
                let mut mine = Vec::new();
                for _ in 0..WRITES {
                    let token = counter.fetch_add(1, Ordering::SeqCst) + 1;
                    // Paused between the grant and the write: up to 2 ms.
                    std::thread::sleep(Duration::from_micros(rng.below(2000)));
                    let repeat = 1 + rng.below(2); // the same holder may write twice
                    for _ in 0..repeat {
                        let result = write(&mut fence, w, token);
                        mine.push(Attempt {
                            writer: w,
                            token,
                            result,
                        });
                    }
                }
                attempts.lock().unwrap().extend(mine);
            });
        }
    });
    attempts.into_inner().unwrap()
}

fn assert_race(what: &str, attempts: &[Attempt], landed: &[Landed], highest: Option<u64>) {
    check_history(landed, attempts, highest).unwrap_or_else(|e| panic!("{what}: {e}"));
    let refused = attempts.iter().filter(|a| a.result.is_err()).count();
    println!(
        "{what}: {} attempts by {WRITERS} writers, {} landed in token order, {refused} refused as stale",
        attempts.len(),
        landed.len()
    );
    // The race must have happened: some late, lower tokens, some writes through.
    assert!(
        refused > 0,
        "{what}: no write was stale; the race did not happen"
    );
    assert!(!landed.is_empty(), "{what}: nothing landed");
}

fn stale_or_panic<E: std::fmt::Display>(r: Result<(), FenceError<E>>) -> Result<(), u64> {
    match r {
        Ok(()) => Ok(()),
        Err(e) => match e.stale_highest() {
            Some(h) => Err(h.0),
            None => panic!("fenced write failed: {e}"),
        },
    }
}

#[test]
fn gate_fence_race_lands_writes_in_token_order() {
    let fence = GateFence::new(4, Vec::<Landed>::new()).unwrap();
    let attempts = race(
        || fence.clone(),
        |f, w, t| {
            stale_or_panic(f.write(RESOURCE, Token(t), |d| {
                let seq = d.len() as u64 + 1;
                d.push(Landed {
                    seq,
                    writer: w,
                    token: t,
                });
                Ok::<_, std::convert::Infallible>(())
            }))
        },
    );
    let landed = fence.read(|d| d.clone()).unwrap();
    let mut f = fence.clone();
    let highest = f.highest(RESOURCE).unwrap().map(|t| t.0);
    assert_race("in-process gate", &attempts, &landed, highest);
}

const SQLITE_SCHEMA: &str = "CREATE TABLE account (id INTEGER PRIMARY KEY, version INTEGER NOT NULL, last_token INTEGER NOT NULL);
     INSERT INTO account VALUES (1, 0, 0);
     CREATE TABLE history (seq INTEGER PRIMARY KEY, writer INTEGER NOT NULL, token INTEGER NOT NULL);";

#[test]
fn sqlite_fence_race_lands_writes_in_token_order() {
    let dir = common::TempDir::new("sqlite-race");
    let path = dir.path().join("race.db");
    let busy = Duration::from_secs(30);
    let mut first = SqliteFence::open(&path, busy).unwrap();
    first.connection().execute_batch(SQLITE_SCHEMA).unwrap();
    let attempts = race(
        || SqliteFence::open(&path, busy).unwrap(),
        |f, w, t| {
            stale_or_panic(f.write(RESOURCE, Token(t), |tx| {
                let seq: i64 = tx.query_row(
                    "UPDATE account SET version = version + 1, last_token = ?1 WHERE id = 1 RETURNING version",
                    [t as i64],
                    |r| r.get(0),
                )?;
                tx.execute("INSERT INTO history VALUES (?1, ?2, ?3)", [seq, w as i64, t as i64])
                    .map(|_| ())
            }))
        },
    );
    let conn = first.connection();
    let mut st = conn
        .prepare("SELECT seq, writer, token FROM history")
        .unwrap();
    let landed: Vec<Landed> = st
        .query_map([], |r| {
            Ok(Landed {
                seq: r.get::<_, i64>(0)? as u64,
                writer: r.get::<_, i64>(1)? as u64,
                token: r.get::<_, i64>(2)? as u64,
            })
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    drop(st);
    let highest = first.highest(RESOURCE).unwrap().map(|t| t.0);
    assert_race("sqlite", &attempts, &landed, highest);
}

const PG_SCHEMA: &str = "CREATE TABLE account (id int PRIMARY KEY, version bigint NOT NULL, last_token bigint NOT NULL);
     INSERT INTO account VALUES (1, 0, 0);
     CREATE TABLE history (seq bigint PRIMARY KEY, writer bigint NOT NULL, token bigint NOT NULL);";

fn pg_write(tx: &mut postgres::Transaction<'_>, w: u64, t: u64) -> Result<(), postgres::Error> {
    let seq: i64 = tx
        .query_one(
            "UPDATE account SET version = version + 1, last_token = $1 WHERE id = 1 RETURNING version",
            &[&(t as i64)],
        )?
        .get(0);
    tx.execute(
        "INSERT INTO history VALUES ($1, $2, $3)",
        &[&seq, &(w as i64), &(t as i64)],
    )?;
    Ok(())
}

fn pg_history(c: &mut postgres::Client) -> Vec<Landed> {
    c.query("SELECT seq, writer, token FROM history", &[])
        .unwrap()
        .iter()
        .map(|r| Landed {
            seq: r.get::<_, i64>(0) as u64,
            writer: r.get::<_, i64>(1) as u64,
            token: r.get::<_, i64>(2) as u64,
        })
        .collect()
}

#[test]
fn postgres_fence_race_lands_writes_in_token_order() {
    let pg = common::Postgres::start();
    let mut first = PgFence::new(pg.connect()).unwrap();
    first.client().batch_execute(PG_SCHEMA).unwrap();
    let attempts = race(
        || PgFence::new(pg.connect()).unwrap(),
        |f, w, t| stale_or_panic(f.write(RESOURCE, Token(t), |tx| pg_write(tx, w, t))),
    );
    let landed = pg_history(first.client());
    let highest = first.highest(RESOURCE).unwrap().map(|t| t.0);
    assert_race("postgres", &attempts, &landed, highest);
}

/// The broken pattern the fence replaces: read the highest token in one transaction, write
/// in another. Between the two a newer holder can write, and the older write lands on top.
fn check_then_write(c: &mut postgres::Client, w: u64, t: u64) -> Result<(), u64> {
    let h: Option<i64> = c
        .query_opt(
            "SELECT highest FROM fencelock_fence WHERE resource = $1",
            &[&RESOURCE.as_bytes()],
        )
        .unwrap()
        .map(|r| r.get(0));
    if let Some(h) = h.filter(|&h| h > t as i64) {
        return Err(h as u64);
    }
    std::thread::sleep(Duration::from_micros(300)); // the window: any real work here
    let mut tx = c.transaction().unwrap();
    tx.execute(
        "INSERT INTO fencelock_fence (resource, highest) VALUES ($1, $2)
         ON CONFLICT (resource) DO UPDATE SET highest = EXCLUDED.highest",
        &[&RESOURCE.as_bytes(), &(t as i64)],
    )
    .unwrap();
    pg_write(&mut tx, w, t).unwrap();
    tx.commit().unwrap();
    Ok(())
}

#[test]
fn the_history_check_catches_a_check_then_write_fence() {
    let pg = common::Postgres::start();
    let mut admin = PgFence::new(pg.connect()).unwrap().into_inner();
    admin.batch_execute(PG_SCHEMA).unwrap();
    // A race is a matter of timing; a few rounds make missing it vanishingly unlikely.
    for round in 1..=5 {
        admin
            .batch_execute("TRUNCATE history, fencelock_fence; UPDATE account SET version = 0")
            .unwrap();
        let attempts = race(
            || pg.connect(),
            |c: &mut postgres::Client, w, t| check_then_write(c, w, t),
        );
        let landed = pg_history(&mut admin);
        let highest: Option<i64> = admin
            .query_opt("SELECT highest FROM fencelock_fence", &[])
            .unwrap()
            .map(|r| r.get(0));
        if let Err(e) = check_history(&landed, &attempts, highest.map(|h| h as u64)) {
            println!("check-then-write caught in round {round}: {e}");
            return;
        }
    }
    panic!("five rounds of check-then-write passed the history check: the check cannot fail");
}

#[test]
fn the_history_check_refuses_bad_histories() {
    let l = |seq, token| Landed {
        seq,
        writer: 0,
        token,
    };
    let ok = |token| Attempt {
        writer: 0,
        token,
        result: Ok(()),
    };
    assert!(check_history(
        &[l(1, 5), l(2, 5), l(3, 7)],
        &[ok(5), ok(5), ok(7)],
        Some(7)
    )
    .is_ok());
    // lower after higher, in data order (not in the order given)
    let e = check_history(&[l(2, 5), l(1, 7)], &[ok(5), ok(7)], Some(5)).unwrap_err();
    assert!(e.contains("token 5") && e.contains("after token 7"), "{e}");
    // an accepted write that did not land, a landed one nobody saw accepted
    assert!(check_history(&[l(1, 5)], &[ok(5), ok(6)], Some(5)).is_err());
    assert!(check_history(&[l(1, 5), l(2, 6)], &[ok(5)], Some(6)).is_err());
    // a refusal that names a highest not above the token
    let bad = Attempt {
        writer: 1,
        token: 6,
        result: Err(6),
    };
    assert!(check_history(&[l(1, 5)], &[ok(5), bad], Some(5)).is_err());
    // the fence's highest disagrees with the data
    assert!(check_history(&[l(1, 5)], &[ok(5)], Some(9)).is_err());
}

/// Under `SERIALIZABLE` a concurrent writer of the same resource is told to retry
/// (SQLSTATE 40001) instead of waiting; retried, the race gives the same guarantees.
#[test]
fn postgres_fence_race_under_serializable_with_retries() {
    race_under_isolation("serializable");
}

/// `REPEATABLE READ` too: a writer that waited for a concurrent one to commit is told to
/// retry (its snapshot is older than the row it would raise); retried, the same guarantees.
#[test]
fn postgres_fence_race_under_repeatable_read_with_retries() {
    race_under_isolation("repeatable read");
}

fn race_under_isolation(level: &str) {
    let pg = common::Postgres::start();
    let mut first = PgFence::new(pg.connect()).unwrap();
    first.client().batch_execute(PG_SCHEMA).unwrap();
    let (retries, write_retries) = (AtomicU64::new(0), AtomicU64::new(0));
    let attempts = race(
        || {
            let mut c = pg.connect();
            c.batch_execute(&format!("SET default_transaction_isolation = '{level}'"))
                .unwrap();
            PgFence::new(c).unwrap()
        },
        |f, w, t| {
            for _ in 0..1000 {
                match f.write(RESOURCE, Token(t), |tx| pg_write(tx, w, t)) {
                    Ok(()) => return Ok(()),
                    Err(e) if e.stale_highest().is_some() => {
                        return Err(e.stale_highest().unwrap().0)
                    }
                    // At the fence's upsert: the fence says so.
                    Err(e) if e.is_retryable() => {
                        retries.fetch_add(1, Ordering::Relaxed);
                    }
                    // At the write's own UPDATE: the caller's judgement.
                    Err(e @ FenceError::Write(_)) if serialization_failure(&e) => {
                        write_retries.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => panic!("fenced write failed: {e}"),
                }
            }
            panic!("token {t}: 1000 serialization failures in a row")
        },
    );
    let landed = pg_history(first.client());
    let highest = first.highest(RESOURCE).unwrap().map(|t| t.0);
    assert_race(&format!("postgres {level}"), &attempts, &landed, highest);
    let (fence, write) = (retries.into_inner(), write_retries.into_inner());
    println!("postgres {level}: {fence} retries at the fence, {write} at the write");
    assert!(
        fence > 0,
        "no serialization failure at the fence: the case was not exercised"
    );
}

fn serialization_failure<E: std::error::Error + 'static>(e: &FenceError<E>) -> bool {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = next {
        if let Some(db) = err.downcast_ref::<postgres::Error>() {
            if db.code() == Some(&postgres::error::SqlState::T_R_SERIALIZATION_FAILURE) {
                return true;
            }
        }
        next = err.source();
    }
    false
}

/// The fence locks one resource's row until commit: a second writer of the same resource
/// waits (PostgreSQL reports it waiting on a lock), a writer of another resource does not.
#[test]
fn postgres_fence_blocks_the_same_resource_only() {
    let pg = common::Postgres::start();
    let mut admin = PgFence::new(pg.connect()).unwrap().into_inner();
    let waiting_on_locks = |admin: &mut postgres::Client| -> i64 {
        admin
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'",
                &[],
            )
            .unwrap()
            .get(0)
    };
    let pg = &pg;
    std::thread::scope(|s| {
        // Writer 1 holds "a" inside its write until told to finish.
        let (one, release_tx) = hold_a(s, pg);
        // Another resource goes through while "a" is held: on a thread, so that a fence
        // that held it up fails this test instead of hanging it ("a" is let go first, so
        // the scope's join does not wait on it either).
        let (b_tx, b_rx) = std::sync::mpsc::channel();
        s.spawn(move || {
            let mut other = PgFence::new(pg.connect()).unwrap();
            let _ = b_tx.send(other.admit("b", Token(4)).map_err(|e| e.to_string()));
        });
        match b_rx.recv_timeout(Duration::from_secs(30)) {
            Ok(r) => r.unwrap(),
            Err(_) => {
                let _ = release_tx.send(());
                panic!("the writer of \"b\" was held up while \"a\" was held");
            }
        }
        // The same resource waits: seen waiting on a lock, not finished.
        let two = s.spawn(move || {
            let mut f = PgFence::new(pg.connect()).unwrap();
            f.admit("a", Token(6))
        });
        let since = std::time::Instant::now();
        while waiting_on_locks(&mut admin) < 1 {
            assert!(
                since.elapsed() < Duration::from_secs(30),
                "second writer never waited"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(
            !two.is_finished(),
            "second writer of \"a\" finished while \"a\" was held"
        );
        release_tx.send(()).unwrap();
        one.join().unwrap();
        two.join().unwrap().unwrap();
    });
    let mut f = PgFence::new(admin).unwrap();
    assert_eq!(f.highest("a").unwrap(), Some(Token(6)));
    assert_eq!(f.highest("b").unwrap(), Some(Token(4)));
}

/// A writer that gives up waiting for a resource another write holds — past its
/// `lock_timeout` or its `statement_timeout` — gets a retryable storage error, with nothing
/// of its write done; retried once the resource is free, it goes through.
#[test]
fn postgres_fence_a_lock_or_statement_timeout_is_retryable() {
    let pg = common::Postgres::start();
    let pg = &pg;
    std::thread::scope(|s| {
        let (one, release_tx) = hold_a(s, pg);
        for (setting, sqlstate) in [
            (
                "lock_timeout",
                postgres::error::SqlState::LOCK_NOT_AVAILABLE,
            ),
            (
                "statement_timeout",
                postgres::error::SqlState::QUERY_CANCELED,
            ),
        ] {
            // The fence is made first: its constructor's statements are not what this
            // test times out.
            let mut f = PgFence::new(pg.connect()).unwrap();
            f.client()
                .batch_execute(&format!("SET {setting} = '50ms'"))
                .unwrap();
            let mut ran = false;
            let e = f
                .write("a", Token(6), |_| {
                    ran = true;
                    Ok::<_, &str>(())
                })
                .expect_err("went through a held resource");
            assert!(e.is_retryable(), "{setting}: {e}");
            assert!(!ran, "{setting}: the write ran");
            let fencelock_fence::FenceError::Storage(storage) = &e else {
                panic!("{setting}: not a storage error: {e}");
            };
            let mut next: Option<&(dyn std::error::Error + 'static)> = Some(storage);
            let mut code = None;
            while let Some(err) = next {
                if let Some(p) = err.downcast_ref::<postgres::Error>() {
                    code = p.code().cloned();
                }
                next = err.source();
            }
            assert_eq!(code, Some(sqlstate), "{setting}: {e}");
        }
        release_tx.send(()).unwrap();
        one.join().unwrap();
    });
    let mut f = PgFence::new(pg.connect()).unwrap();
    assert_eq!(
        f.highest("a").unwrap(),
        Some(Token(5)),
        "a timed-out write raised it"
    );
    f.write("a", Token(6), |_| Ok::<_, &str>(())).unwrap();
    assert_eq!(f.highest("a").unwrap(), Some(Token(6)));
}

/// Fences made at once on a database without the fence table — eight connections racing
/// to create it — all come up, on one table: a token admitted through one is stale
/// through every other.
#[test]
fn postgres_fences_made_at_once_on_an_empty_database_share_one_table() {
    let pg = common::Postgres::start();
    let pg = &pg;
    let start = std::sync::Barrier::new(8);
    let start = &start;
    let fences: Vec<PgFence> = std::thread::scope(|s| {
        let made: Vec<_> = (0..8)
            .map(|_| {
                s.spawn(move || {
                    let c = pg.connect();
                    start.wait();
                    PgFence::new(c)
                })
            })
            .collect();
        made.into_iter()
            .map(|h| h.join().unwrap().expect("a fence made in the race"))
            .collect()
    });
    let mut fences = fences.into_iter();
    let mut first = fences.next().unwrap();
    first.admit("r", Token(9)).unwrap();
    for mut f in fences {
        let e = f
            .admit("r", Token(8))
            .expect_err("a fence of its own admitted a stale token");
        assert_eq!(e.stale_highest(), Some(Token(9)), "{e}");
    }
}

/// Spawns a writer that holds resource "a" (token 5) inside its write until told to finish
/// (a send on the returned channel); returns once it holds it.
fn hold_a<'scope>(
    s: &'scope std::thread::Scope<'scope, '_>,
    pg: &'scope common::Postgres,
) -> (
    std::thread::ScopedJoinHandle<'scope, ()>,
    std::sync::mpsc::Sender<()>,
) {
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let (held_tx, held_rx) = std::sync::mpsc::channel::<()>();
    let one = s.spawn(move || {
        let mut f = PgFence::new(pg.connect()).unwrap();
        f.write("a", Token(5), |_| {
            held_tx.send(()).unwrap();
            release_rx
                .recv_timeout(Duration::from_secs(30))
                .map_err(|_| "never released")
        })
        .unwrap();
    });
    held_rx.recv_timeout(Duration::from_secs(30)).unwrap();
    (one, release_tx)
}
