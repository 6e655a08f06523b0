//! Every fence gives FenceGate's answers: the gate conformance vectors
//! (`tests/vectors/gate/*.vec`) replayed against the in-process gate, SQLite and a real
//! PostgreSQL server; then what each does on a failed write, a token it cannot store and a
//! hostile table.

mod common;

use fencelock::{Error, Table, Token};
use fencelock_fence::{Fence, FenceError, GateFence, PgFence, SqliteFence};
use fencelock_tests::gate_vectors::{gate_vector_files, replay_gate, GateUnderTest};

/// Drives any fence as a gate vector expects; a storage failure fails the test.
struct Under<F: Fence>(F);

impl<F: Fence> GateUnderTest for Under<F> {
    fn admit(&mut self, resource: &str, token: Token) -> Result<(), Error> {
        match self.0.admit(resource, token) {
            Ok(()) => Ok(()),
            Err(FenceError::Refused(e)) => Err(e),
            Err(e) => panic!("admit({resource:?}, {token}): {e}"),
        }
    }
    fn highest(&mut self, resource: &str) -> Option<Token> {
        self.0
            .highest(resource)
            .unwrap_or_else(|e| panic!("highest({resource:?}): {e}"))
    }
}

fn replay_all<F: Fence>(what: &str, mut make: impl FnMut(usize) -> F) {
    let files = gate_vector_files().expect("tests/vectors/gate");
    assert!(files.len() >= 3, "expected the committed gate vectors");
    let mut admits = 0;
    for (name, text) in &files {
        let stats = replay_gate(text, |c| Under(make(c.resources)))
            .unwrap_or_else(|e| panic!("{what}: {name}: {e}"));
        assert!(stats.refusals > 0 && stats.highest > 0, "{name}: {stats:?}");
        admits += stats.admits;
    }
    println!(
        "{what}: {} gate vector files, {admits} admits, same answers as FenceGate",
        files.len()
    );
}

#[test]
fn gate_fence_replays_the_gate_vectors() {
    replay_all("in-process gate", |n| GateFence::new(n, ()).unwrap());
}

/// A fence keyed for names others choose gives every answer an unkeyed one gives: the
/// gate vectors, and random admits against a plain (unkeyed) `FenceGate`.
#[test]
fn gate_fence_with_a_name_key_answers_as_without_one() {
    let key = fencelock::NameKey([0x0123_4567_89ab_cdef, 0xfedc_ba98_7654_3210]);
    let keyed = GateFence::with_name_key(8, (), key).unwrap();
    assert!(keyed.is_name_keyed().unwrap());
    assert!(!GateFence::new(8, ()).unwrap().is_name_keyed().unwrap());
    replay_all("in-process gate, keyed", |n| {
        GateFence::with_name_key(n, (), key).unwrap()
    });
    for seed in [1, 2, 3] {
        random_vs_gate(
            "in-process gate, keyed",
            GateFence::with_name_key(8, (), key).unwrap(),
            seed,
        );
    }
    assert!(matches!(
        GateFence::with_name_key(fencelock::MAX_ROWS + 1, (), key),
        Err(Error::BadConfig(_))
    ));
}

#[test]
fn sqlite_fence_replays_the_gate_vectors() {
    replay_all("sqlite", |_| {
        SqliteFence::new(rusqlite::Connection::open_in_memory().unwrap()).unwrap()
    });
}

#[test]
fn postgres_fence_replays_the_gate_vectors() {
    let pg = common::Postgres::start();
    replay_all("postgres", |_| {
        let mut c = pg.connect();
        c.batch_execute("DROP TABLE IF EXISTS fencelock_fence")
            .unwrap();
        PgFence::new(c).unwrap()
    });
}

#[test]
fn gate_fence_failed_write_records_nothing_and_capacity_is_kept() {
    let mut f = GateFence::new(2, Vec::<u64>::new()).unwrap();
    f.write("a", Token(5), |d| {
        d.push(5);
        Ok::<_, ()>(())
    })
    .unwrap();
    // The write fails: the gate is unchanged (a new resource is not recorded either).
    assert!(matches!(
        f.write("a", Token(9), |_| Err::<(), _>("disk full")),
        Err(FenceError::Write("disk full"))
    ));
    assert!(matches!(
        f.write("b", Token(9), |_| Err::<(), _>("disk full")),
        Err(FenceError::Write(_))
    ));
    assert_eq!(f.highest("a").unwrap(), Some(Token(5)));
    assert_eq!(f.highest("b").unwrap(), None);
    // A stale write never reaches the data.
    let r = f.write("a", Token(4), |d| {
        d.push(4);
        Ok::<_, ()>(())
    });
    assert_eq!(r.unwrap_err().stale_highest(), Some(Token(5)));
    assert_eq!(f.read(|d| d.clone()).unwrap(), vec![5]);
    // Full: known resources are served, a new one is refused before its write runs.
    f.admit("b", Token(1)).unwrap();
    let mut ran = false;
    let r = f.write("c", Token(1), |_| {
        ran = true;
        Ok::<_, ()>(())
    });
    assert!(matches!(
        r,
        Err(FenceError::Refused(Error::CapacityExceeded(
            Table::Resources
        )))
    ));
    assert!(!ran);
    f.admit("a", Token(6)).unwrap();
    // The in-process gate keeps FenceGate's full token range.
    f.admit("b", Token(u64::MAX)).unwrap();
    assert_eq!(f.highest("b").unwrap(), Some(Token(u64::MAX)));
}

#[test]
fn gate_fence_poisoned_by_a_panicking_write_refuses_with_a_storage_error() {
    // Keep the log clean: the one panic this test causes is expected.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if info.payload().downcast_ref::<&str>() != Some(&"write panics") {
            hook(info)
        }
    }));
    let f = GateFence::new(2, 0u32).unwrap();
    let mut g = f.clone();
    let _ = std::thread::spawn(move || {
        let _ = g.write("a", Token(1), |_| -> Result<(), ()> {
            panic!("write panics")
        });
    })
    .join();
    let mut f = f;
    assert!(matches!(
        f.admit("a", Token(2)),
        Err(FenceError::Storage(_))
    ));
    assert!(f.highest("a").is_err());
    assert!(f.read(|d| *d).is_err());
}

/// A panic inside `read` reaches its caller and leaves the fence whole: the data was only
/// read, so later writes, admits and reads go on (only a panicking write poisons it).
#[test]
fn gate_fence_survives_a_panicking_read() {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if info.payload().downcast_ref::<&str>() != Some(&"read panics") {
            hook(info)
        }
    }));
    let mut f = GateFence::new(2, vec![1u32]).unwrap();
    f.admit("a", Token(3)).unwrap();
    let g = f.clone();
    let r = std::thread::spawn(move || g.read(|_| -> u32 { panic!("read panics") })).join();
    assert!(r.is_err(), "the panic reaches the reader");
    f.write("a", Token(4), |d| {
        d.push(4);
        Ok::<_, ()>(())
    })
    .expect("a write after a panicking read");
    assert_eq!(f.highest("a").unwrap(), Some(Token(4)));
    assert_eq!(
        f.admit("a", Token(3)).unwrap_err().stale_highest(),
        Some(Token(4))
    );
    assert_eq!(f.read(|d| d.clone()).unwrap(), vec![1, 4]);
}

fn count(conn: &rusqlite::Connection, sql: &str) -> i64 {
    conn.query_row(sql, [], |r| r.get(0)).unwrap()
}

#[test]
fn sqlite_fence_rolls_back_a_failed_write_and_refuses_what_it_cannot_store() {
    let mut f = SqliteFence::new(rusqlite::Connection::open_in_memory().unwrap()).unwrap();
    f.connection()
        .execute_batch("CREATE TABLE ledger (entry TEXT NOT NULL)")
        .unwrap();
    let insert = |e: &'static str| {
        move |tx: &mut rusqlite::Transaction<'_>| tx.execute("INSERT INTO ledger VALUES (?1)", [e])
    };
    f.write("ledger", Token(35), insert("b")).unwrap();
    // The write fails after a first statement: both it and the fence move roll back.
    let r = f.write("ledger", Token(40), |tx| {
        tx.execute("INSERT INTO ledger VALUES ('half')", [])?;
        tx.execute("INSERT INTO nowhere VALUES (1)", [])
    });
    assert!(matches!(r, Err(FenceError::Write(_))));
    assert_eq!(f.highest("ledger").unwrap(), Some(Token(35)));
    let r = f.write("new", Token(7), |_| Err::<(), _>("no"));
    assert!(matches!(r, Err(FenceError::Write("no"))));
    assert_eq!(f.highest("new").unwrap(), None);
    // Stale: refused with the highest, nothing written.
    assert_eq!(
        f.write("ledger", Token(34), insert("a"))
            .unwrap_err()
            .stale_highest(),
        Some(Token(35))
    );
    assert_eq!(count(f.connection(), "SELECT count(*) FROM ledger"), 1);
    // A token no BIGINT holds is refused, not wrapped into a negative number.
    let big = Token(i64::MAX as u64 + 1);
    assert!(matches!(f.admit("ledger", big), Err(FenceError::TokenOutOfRange(t)) if t == big));
    assert_eq!(f.highest("ledger").unwrap(), Some(Token(35)));
}

/// SQLite rolls a transaction back on its own (here a conflict under `OR ROLLBACK`), and
/// the write swallows the error and goes on. The raise of the fence was undone and the
/// connection is in autocommit: the write's next statement would commit on its own,
/// unfenced. The fence's commit hook refuses it, the write is reported as not written,
/// and neither the data nor the fence moved.
#[test]
fn sqlite_fence_lets_nothing_through_after_sqlite_rolled_the_write_back() {
    let c = rusqlite::Connection::open_in_memory().unwrap();
    c.execute_batch(
        "CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT); INSERT INTO t VALUES (1, 'a');",
    )
    .unwrap();
    let mut f = SqliteFence::new(c).unwrap();
    f.admit("r", Token(5)).unwrap();
    let r = f.write("r", Token(6), |tx| {
        let conflict = tx.execute("INSERT OR ROLLBACK INTO t VALUES (1, 'dup')", []);
        assert!(conflict.is_err(), "the conflict rolls the transaction back");
        assert!(tx.is_autocommit(), "SQLite ended the transaction");
        let after = tx.execute("UPDATE t SET v = 'stale' WHERE k = 1", []);
        assert!(
            after.is_err(),
            "the unfenced statement is refused: {after:?}"
        );
        Ok::<_, rusqlite::Error>(())
    });
    match r {
        Err(FenceError::Storage(e)) => {
            assert!(e.to_string().contains("rolled back by SQLite"), "{e}")
        }
        other => panic!("expected a storage error, got {other:?}"),
    }
    let v: String = f
        .connection()
        .query_row("SELECT v FROM t WHERE k = 1", [], |r| r.get(0))
        .unwrap();
    assert_eq!(v, "a", "nothing of the write committed");
    assert_eq!(
        f.highest("r").unwrap(),
        Some(Token(5)),
        "the raise did not commit"
    );
    // Outside a write, the connection commits as before; and the fence goes on.
    f.connection()
        .execute("UPDATE t SET v = 'b' WHERE k = 1", [])
        .unwrap();
    f.write("r", Token(6), |tx| {
        tx.execute("UPDATE t SET v = 'c' WHERE k = 1", [])
    })
    .unwrap();
    assert_eq!(f.highest("r").unwrap(), Some(Token(6)));
}

/// A deferred foreign key the write broke refuses the COMMIT: the fence rolls back
/// (SQLite leaves the transaction open after such a refusal) and the error names it.
#[test]
fn sqlite_fence_names_a_deferred_constraints_refusal_of_the_commit() {
    let c = rusqlite::Connection::open_in_memory().unwrap();
    c.execute_batch(
        "PRAGMA foreign_keys = ON;
         CREATE TABLE parent (id INTEGER PRIMARY KEY);
         CREATE TABLE child (p INTEGER REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED);",
    )
    .unwrap();
    let mut f = SqliteFence::new(c).unwrap();
    let r = f.write("r", Token(2), |tx| {
        tx.execute("INSERT INTO child VALUES (7)", [])
    });
    match r {
        Err(FenceError::Storage(e)) => {
            assert!(
                e.to_string().contains("deferred constraint") && e.commit_refused(),
                "{e}"
            )
        }
        other => panic!("expected a storage error, got {other:?}"),
    }
    assert!(f.connection().is_autocommit(), "no transaction left open");
    assert_eq!(f.highest("r").unwrap(), None, "the raise was rolled back");
    let n: i64 = f
        .connection()
        .query_row("SELECT count(*) FROM child", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 0, "nothing written");
}

/// A write that rolls the fence's transaction back and goes on in one of its own, under a
/// token already stored (the same holder writing again): the raise read back before the
/// COMMIT is the stored one, so only the rollback, which the fence notes, tells that the
/// write's first statement was undone. Refused, nothing of it committed (it used to come
/// back `Ok` with only the statement after the rollback written).
#[test]
fn sqlite_fence_commits_nothing_after_a_rollback_even_under_an_equal_token() {
    let c = rusqlite::Connection::open_in_memory().unwrap();
    c.execute_batch("CREATE TABLE t (v TEXT)").unwrap();
    let mut f = SqliteFence::new(c).unwrap();
    f.admit("r", Token(5)).unwrap();
    let r = f.write("r", Token(5), |tx| {
        tx.execute("INSERT INTO t VALUES ('first')", [])?;
        tx.execute_batch("ROLLBACK; BEGIN")?;
        tx.execute("INSERT INTO t VALUES ('second')", [])?;
        Ok::<_, rusqlite::Error>(())
    });
    assert!(matches!(r, Err(FenceError::Storage(_))), "{r:?}");
    assert!(f.connection().is_autocommit(), "no transaction left open");
    let n: i64 = f
        .connection()
        .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 0, "nothing of the write committed");
    assert_eq!(f.highest("r").unwrap(), Some(Token(5)));
    // The fence goes on, and a savepoint rolled back to is no rollback of the write.
    f.write("r", Token(5), |tx| {
        tx.execute_batch("SAVEPOINT s; INSERT INTO t VALUES ('undone'); ROLLBACK TO s; RELEASE s")?;
        tx.execute("INSERT INTO t VALUES ('kept')", [])
    })
    .unwrap();
    let v: String = f
        .connection()
        .query_row("SELECT group_concat(v) FROM t", [], |r| r.get(0))
        .unwrap();
    assert_eq!(v, "kept");
}

/// A write that ends the fence's transaction itself and begins its own: its `COMMIT` is
/// refused by the fence's hook (and rolls the raise back), and what it runs in its own
/// transaction afterwards is not committed by the fence either — the rollback hook saw
/// the fence's transaction end. (The check before commit that the raise stands is
/// reached by `sqlite_fence_commits_nothing_for_a_write_that_touched_its_fence_row`.)
#[test]
fn sqlite_fence_commits_nothing_for_a_write_that_began_its_own_transaction() {
    let c = rusqlite::Connection::open_in_memory().unwrap();
    c.execute_batch("CREATE TABLE t (v TEXT); INSERT INTO t VALUES ('a');")
        .unwrap();
    let mut f = SqliteFence::new(c).unwrap();
    f.admit("r", Token(5)).unwrap();
    // Under a higher token and under the stored one (the same holder writing again, where
    // the raise read back before the COMMIT is the stored one and cannot tell): the
    // rollback hook's refusal, by its own words, in both.
    for token in [6, 5] {
        let r = f.write("r", Token(token), |tx| {
            assert!(tx.execute_batch("COMMIT").is_err(), "the hook refuses it");
            tx.execute_batch("BEGIN")?;
            tx.execute("UPDATE t SET v = 'stale'", [])?;
            Ok::<_, rusqlite::Error>(())
        });
        match r {
            Err(FenceError::Storage(e)) => {
                assert!(
                    e.to_string()
                        .contains("went on in a transaction of its own"),
                    "token {token}: {e}"
                )
            }
            other => panic!("token {token}: expected a storage error, got {other:?}"),
        }
        assert!(f.connection().is_autocommit(), "no transaction left open");
        let v: String = f
            .connection()
            .query_row("SELECT v FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(v, "a", "token {token}: nothing of the write committed");
        assert_eq!(f.highest("r").unwrap(), Some(Token(5)));
    }
}

/// A write that deletes or changes the fence's own row for its resource (a reset helper
/// run inside it, say) would leave the next stale token admitted: the fence refuses to
/// commit it, and nothing of it is written.
#[test]
fn sqlite_fence_commits_nothing_for_a_write_that_touched_its_fence_row() {
    let c = rusqlite::Connection::open_in_memory().unwrap();
    c.execute_batch("CREATE TABLE t (v TEXT); INSERT INTO t VALUES ('a');")
        .unwrap();
    let mut f = SqliteFence::new(c).unwrap();
    f.admit("r", Token(5)).unwrap();
    for touch in [
        "DELETE FROM main.fencelock_fence WHERE resource = CAST('r' AS BLOB)",
        "UPDATE main.fencelock_fence SET highest = 1 WHERE resource = CAST('r' AS BLOB)",
    ] {
        let r = f.write("r", Token(6), |tx| {
            tx.execute("UPDATE t SET v = 'b'", [])?;
            tx.execute(touch, [])?;
            Ok::<_, rusqlite::Error>(())
        });
        match r {
            Err(FenceError::Storage(e)) => {
                assert!(e.to_string().contains("deleted or changed"), "{touch}: {e}")
            }
            other => panic!("{touch}: expected a storage error, got {other:?}"),
        }
        assert!(f.connection().is_autocommit(), "no transaction left open");
        let v: String = f
            .connection()
            .query_row("SELECT v FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(v, "a", "{touch}: nothing of the write committed");
        assert_eq!(f.highest("r").unwrap(), Some(Token(5)), "{touch}");
        assert!(
            f.admit("r", Token(4)).is_err(),
            "{touch}: a stale token still refused"
        );
    }
}

/// The commit hook refuses commits only: a write that recovers from an error with a
/// savepoint (released or rolled back inside the fence's transaction, which commits
/// nothing) is written whole.
#[test]
fn sqlite_fence_keeps_a_write_that_uses_savepoints() {
    let c = rusqlite::Connection::open_in_memory().unwrap();
    c.execute_batch("CREATE TABLE t (k INTEGER PRIMARY KEY)")
        .unwrap();
    let mut f = SqliteFence::new(c).unwrap();
    f.write("r", Token(9), |tx| {
        let sp = tx.savepoint()?;
        sp.execute("INSERT INTO t VALUES (1)", [])?;
        sp.commit()?;
        let mut sp = tx.savepoint()?;
        assert!(
            sp.execute("INSERT INTO t VALUES (1)", []).is_err(),
            "a duplicate"
        );
        sp.rollback()?;
        drop(sp);
        tx.execute("INSERT INTO t VALUES (2)", [])?;
        Ok::<_, rusqlite::Error>(())
    })
    .unwrap();
    let n: i64 = f
        .connection()
        .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 2);
    assert_eq!(f.highest("r").unwrap(), Some(Token(9)));
}

/// A write that sets the transaction's drop behaviour to `Commit` and then panics
/// commits nothing: the fence rolls back on every way out but its own commit.
#[test]
fn sqlite_fence_rolls_back_a_panicking_write_whatever_its_drop_behaviour() {
    let c = rusqlite::Connection::open_in_memory().unwrap();
    c.execute_batch("CREATE TABLE t (v TEXT)").unwrap();
    let mut f = SqliteFence::new(c).unwrap();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = f.write("r", Token(3), |tx| {
            tx.set_drop_behavior(rusqlite::DropBehavior::Commit);
            tx.execute("INSERT INTO t VALUES ('half')", [])?;
            if std::hint::black_box(true) {
                panic!("a bug in the write (expected by this test)");
            }
            Ok::<_, rusqlite::Error>(())
        });
    }));
    assert!(r.is_err(), "the panic reaches the caller");
    let n: i64 = f
        .connection()
        .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 0, "nothing of the write committed");
    assert_eq!(f.highest("r").unwrap(), None, "the raise did not commit");
    f.write("r", Token(3), |tx| {
        tx.execute("INSERT INTO t VALUES ('whole')", [])
    })
    .unwrap();
    assert_eq!(f.highest("r").unwrap(), Some(Token(3)));
}

/// A `main.fencelock_fence` someone else made, of another shape than the fence's own, is
/// refused at construction, naming the rule, and left as it was: the fence neither uses
/// it nor writes to it. (A non-STRICT table takes TEXT keys from another tool, which never
/// equal the fence's BLOB keys: two highest tokens for one resource.)
#[test]
fn sqlite_fence_refuses_a_hostile_fence_table_instead_of_trusting_it() {
    for (shape, why) in [
        (
            "CREATE TABLE fencelock_fence (resource BLOB PRIMARY KEY, highest INTEGER)",
            "not STRICT, nullable",
        ),
        (
            "CREATE TABLE fencelock_fence (resource TEXT PRIMARY KEY NOT NULL,
               highest INTEGER NOT NULL) STRICT, WITHOUT ROWID",
            "TEXT keys",
        ),
        (
            "CREATE TABLE fencelock_fence (resource BLOB PRIMARY KEY NOT NULL,
               highest INTEGER NOT NULL) STRICT",
            "a rowid table",
        ),
        (
            "CREATE TABLE fencelock_fence (resource BLOB NOT NULL,
               highest INTEGER NOT NULL PRIMARY KEY) STRICT, WITHOUT ROWID",
            "keyed by the token",
        ),
        (
            "CREATE TABLE fencelock_fence (resource BLOB PRIMARY KEY NOT NULL,
               highest INTEGER NOT NULL, note TEXT) STRICT, WITHOUT ROWID",
            "a third column",
        ),
        (
            "CREATE TABLE fencelock_fence (resource BLOB PRIMARY KEY NOT NULL,
               highest INTEGER NOT NULL, shadow INTEGER AS (highest + 1)) STRICT, WITHOUT ROWID",
            "a generated column",
        ),
        (
            "CREATE TABLE fencelock_fence (resource BLOB PRIMARY KEY NOT NULL,
               highest INTEGER NOT NULL DEFAULT 1) STRICT, WITHOUT ROWID",
            "a default",
        ),
        (
            "CREATE TABLE other (resource BLOB PRIMARY KEY NOT NULL, highest INTEGER NOT NULL);
             CREATE VIEW fencelock_fence AS SELECT resource, highest FROM other",
            "a view",
        ),
    ] {
        let dir = common::TempDir::new("sqlite-hostile");
        let path = dir.path().join("hostile.db");
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch(shape).unwrap();
        let before: Vec<String> = schema(&c);
        let e = match SqliteFence::new(c) {
            Err(e) => e,
            Ok(_) => panic!("{why}: a fence on a table not its own"),
        };
        assert_eq!(e.what(), SqliteFence::NOT_OUR_TABLE, "{why}: {e}");
        let c = rusqlite::Connection::open(&path).unwrap();
        assert_eq!(schema(&c), before, "{why}: nothing changed");
    }
    // The fence's own shape, made by hand in any case and with INT, is taken.
    let c = rusqlite::Connection::open_in_memory().unwrap();
    c.execute_batch(
        "create table FENCELOCK_FENCE (Resource blob primary key not null,
           highest int not null check (highest > 0)) strict, without rowid;
         INSERT INTO fencelock_fence VALUES (CAST('ledger' AS BLOB), 9);",
    )
    .unwrap();
    let mut f = SqliteFence::new(c).unwrap();
    assert_eq!(
        f.admit("ledger", Token(8)).unwrap_err().stale_highest(),
        Some(Token(9))
    );
}

fn schema(c: &rusqlite::Connection) -> Vec<String> {
    let mut st = c
        .prepare("SELECT type || ' ' || name || ': ' || coalesce(sql, '') FROM sqlite_schema ORDER BY name")
        .unwrap();
    let rows = st.query_map([], |r| r.get(0)).unwrap();
    rows.collect::<Result<_, _>>().unwrap()
}

/// A token of 0 or less stored in the fence's own table (its CHECK bypassed, as
/// `PRAGMA ignore_check_constraints` does) is never reported as a highest; an admission
/// compares it like any number and overwrites it.
#[test]
fn sqlite_fence_never_reports_a_stored_token_of_zero_or_less() {
    let mut f = SqliteFence::new(rusqlite::Connection::open_in_memory().unwrap()).unwrap();
    f.connection()
        .execute_batch(
            "PRAGMA ignore_check_constraints = ON;
             INSERT INTO fencelock_fence VALUES (CAST('ledger' AS BLOB), -5);
             PRAGMA ignore_check_constraints = OFF;",
        )
        .unwrap();
    let e = f.highest("ledger").unwrap_err();
    assert_eq!(e.what(), "the fence table holds a token of 0 or less");
    // -5 <= 3, so the upsert overwrote it: the fence treats its own writes normally.
    f.admit("ledger", Token(3)).unwrap();
    assert_eq!(f.highest("ledger").unwrap(), Some(Token(3)));
}

/// A connection in journal mode OFF, where SQLite's ROLLBACK is undefined (a refused or
/// failed write could leave half of itself behind), is refused before anything is made.
#[test]
fn sqlite_fence_refuses_journal_mode_off() {
    let dir = common::TempDir::new("sqlite-journal-off");
    let path = dir.path().join("off.db");
    let c = rusqlite::Connection::open(&path).unwrap();
    let mode: String = c
        .pragma_update_and_check(None, "journal_mode", "OFF", |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "off");
    let e = match SqliteFence::new(c) {
        Err(e) => e,
        Ok(_) => panic!("a fence in journal mode OFF"),
    };
    assert_eq!(e.what(), SqliteFence::JOURNAL_OFF, "{e}");
    let c = rusqlite::Connection::open(&path).unwrap();
    assert!(schema(&c).is_empty(), "nothing made: {:?}", schema(&c));
    // In another mode, the same file takes a fence.
    SqliteFence::new(c).unwrap().admit("r", Token(1)).unwrap();
}

/// A connection with `synchronous = OFF`, where a power loss can corrupt the database and
/// with it the highest tokens, is refused before anything is made; NORMAL is taken.
#[test]
fn sqlite_fence_refuses_synchronous_off() {
    let dir = common::TempDir::new("sqlite-sync-off");
    let path = dir.path().join("off.db");
    let c = rusqlite::Connection::open(&path).unwrap();
    c.pragma_update(None, "synchronous", "OFF").unwrap();
    let e = match SqliteFence::new(c) {
        Err(e) => e,
        Ok(_) => panic!("a fence with synchronous OFF"),
    };
    assert_eq!(e.what(), SqliteFence::SYNCHRONOUS_OFF, "{e}");
    let c = rusqlite::Connection::open(&path).unwrap();
    assert!(schema(&c).is_empty(), "nothing made: {:?}", schema(&c));
    c.pragma_update(None, "synchronous", "NORMAL").unwrap();
    SqliteFence::new(c).unwrap().admit("r", Token(1)).unwrap();
}

#[test]
fn postgres_fence_rolls_back_a_failed_write_and_survives_a_lost_connection() {
    let pg = common::Postgres::start();
    let mut f = PgFence::new(pg.connect()).unwrap();
    f.client()
        .batch_execute("CREATE TABLE ledger (entry text NOT NULL)")
        .unwrap();
    f.write("ledger", Token(35), |tx| {
        tx.execute("INSERT INTO ledger VALUES ('b')", &[])
    })
    .unwrap();
    let r = f.write("ledger", Token(40), |tx| {
        tx.execute("INSERT INTO ledger VALUES ('half')", &[])?;
        tx.execute("INSERT INTO nowhere VALUES (1)", &[])
    });
    assert!(matches!(r, Err(FenceError::Write(_))));
    assert_eq!(f.highest("ledger").unwrap(), Some(Token(35)));
    let r = f.write("ledger", Token(34), |tx| {
        tx.execute("INSERT INTO ledger VALUES ('a')", &[])
    });
    assert_eq!(r.unwrap_err().stale_highest(), Some(Token(35)));
    let n: i64 = f
        .client()
        .query_one("SELECT count(*) FROM ledger", &[])
        .unwrap()
        .get(0);
    assert_eq!(n, 1);
    assert!(matches!(
        f.admit("ledger", Token(u64::MAX)),
        Err(FenceError::TokenOutOfRange(_))
    ));
    // The table's rule holds in the database too: a direct write of 0 is refused.
    assert!(f
        .client()
        .execute("UPDATE fencelock_fence SET highest = 0", &[])
        .is_err());
    // The server drops the fence's connection: a typed storage error, no panic.
    let mut admin = pg.connect();
    admin
        .batch_execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE pid <> pg_backend_pid() AND datname = 'postgres'",
        )
        .unwrap();
    match f.admit("ledger", Token(36)) {
        Err(FenceError::Storage(e)) => {
            let text = e.to_string();
            println!("lost connection: {text}");
            assert!(text.starts_with("fence storage failed ("), "{text}");
        }
        other => panic!("expected a storage error, got {other:?}"),
    }
    let mut f = PgFence::new(pg.connect()).unwrap();
    assert_eq!(f.highest("ledger").unwrap(), Some(Token(35)));
}

/// Random admits (bad names and token 0 included) on a few resources, answered by the
/// fence under test and by a plain `FenceGate`: every answer and every highest token agree.
fn random_vs_gate<F: Fence>(what: &str, fence: F, seed: u64) {
    let long = "x".repeat(65);
    let names = ["a", "b", "ledger/1", "", long.as_str()];
    let mut model = fencelock::FenceGate::new(vec![fencelock::GateRow::EMPTY; 8]).unwrap();
    let mut under = Under(fence);
    let mut x = seed | 1;
    let mut next = |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    let mut refused = 0;
    for step in 0..300 {
        let r = names[next(names.len() as u64) as usize];
        let t = match next(10) {
            0 => 0,
            1 => i64::MAX as u64 - next(3),
            _ => next(25) + 1,
        };
        let want = model.admit(r, Token(t));
        let got = under.admit(r, Token(t));
        assert_eq!(got, want, "{what}: step {step}: admit({r:?}, {t})");
        refused += got.is_err() as u32;
        for n in names {
            assert_eq!(
                under.highest(n),
                model.highest(n),
                "{what}: step {step}: highest({n:?})"
            );
        }
    }
    assert!(
        refused > 50,
        "{what}: only {refused} refusals; the run did not exercise the rule"
    );
}

#[test]
fn random_admits_answer_like_fence_gate_on_every_fence() {
    for seed in [1, 2, 3] {
        random_vs_gate("in-process gate", GateFence::new(8, ()).unwrap(), seed);
        let c = rusqlite::Connection::open_in_memory().unwrap();
        random_vs_gate("sqlite", SqliteFence::new(c).unwrap(), seed);
    }
    let pg = common::Postgres::start();
    for seed in [1, 2, 3] {
        let mut c = pg.connect();
        c.batch_execute("DROP TABLE IF EXISTS fencelock_fence")
            .unwrap();
        random_vs_gate("postgres", PgFence::new(c).unwrap(), seed);
    }
}

#[test]
fn sqlite_fence_busy_past_its_timeout_is_a_retryable_storage_error() {
    let dir = common::TempDir::new("sqlite-busy");
    let path = dir.path().join("busy.db");
    let mut holder = SqliteFence::open(&path, std::time::Duration::from_secs(5)).unwrap();
    let mut waiter = SqliteFence::open(&path, std::time::Duration::from_millis(50)).unwrap();
    let r = holder.write("a", Token(2), |_| {
        // While the holder's transaction is open, the other connection cannot fence.
        let e = waiter.admit("b", Token(1)).unwrap_err();
        assert!(e.is_retryable(), "{e}");
        Ok::<_, ()>(())
    });
    r.unwrap();
    waiter.admit("b", Token(1)).unwrap(); // and retried later, it goes through
    assert!(!FenceError::<()>::Refused(Error::ZeroToken).is_retryable());
}

/// `SqliteFence::open` leaves the file in WAL mode, and refuses a database that stays in
/// another journal mode (an in-memory one) instead of promising WAL it does not have.
#[test]
fn sqlite_fence_open_sets_wal_or_refuses() {
    let dir = common::TempDir::new("sqlite-wal");
    let path = dir.path().join("wal.db");
    let mut f = SqliteFence::open(&path, std::time::Duration::from_secs(1)).unwrap();
    let mode: String = f
        .connection()
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    let e = SqliteFence::open(":memory:", std::time::Duration::from_secs(1))
        .err()
        .expect("an in-memory database cannot be in WAL mode");
    assert!(e.to_string().contains("journal mode \"memory\""), "{e}");
}

/// `SqliteFence::open` refuses a fence table of another shape before it switches the file
/// to WAL (a journal mode that outlives the connection): the refused file keeps its mode.
#[test]
fn sqlite_fence_open_refuses_a_foreign_table_before_switching_to_wal() {
    let dir = common::TempDir::new("sqlite-foreign-wal");
    let path = dir.path().join("foreign.db");
    let c = rusqlite::Connection::open(&path).unwrap();
    c.execute_batch("CREATE TABLE fencelock_fence (resource TEXT PRIMARY KEY, highest INTEGER)")
        .unwrap();
    drop(c);
    let e = SqliteFence::open(&path, std::time::Duration::from_secs(1))
        .err()
        .expect("a table of another shape");
    assert_eq!(e.what(), SqliteFence::NOT_OUR_TABLE, "{e}");
    let c = rusqlite::Connection::open(&path).unwrap();
    let mode: String = c
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "delete", "the refused file's journal mode, as it was");
}

/// A statement error the write's closure catches and ignores leaves a PostgreSQL
/// transaction aborted, where COMMIT answers ROLLBACK without an error: the fence reports
/// a storage error, never `Ok` for a write and a raise that did not commit. A closure that
/// fails is rolled back whatever it did to the transaction.
#[test]
fn postgres_fence_never_reports_an_aborted_transaction_as_written() {
    let pg = common::Postgres::start();
    let mut f = PgFence::new(pg.connect()).unwrap();
    f.client()
        .batch_execute("CREATE TABLE ledger (entry text NOT NULL)")
        .unwrap();
    f.admit("ledger", Token(5)).unwrap();
    let r = f.write("ledger", Token(6), |tx| {
        tx.execute("INSERT INTO ledger VALUES ('lost')", &[])?;
        let _ignored = tx.execute("INSERT INTO nowhere VALUES (1)", &[]);
        Ok::<_, postgres::Error>(())
    });
    match r {
        Err(FenceError::Storage(e)) => {
            assert!(e.to_string().contains("aborted"), "{e}");
            assert!(!e.may_have_committed(), "nothing committed: {e}");
        }
        other => panic!("expected a storage error, got {other:?}"),
    }
    assert_eq!(
        f.highest("ledger").unwrap(),
        Some(Token(5)),
        "the raise did not commit"
    );
    let n: i64 = f
        .client()
        .query_one("SELECT count(*) FROM ledger", &[])
        .unwrap()
        .get(0);
    assert_eq!(n, 0, "the write did not commit");
    // and the fence goes on: the same token, written properly, is admitted
    f.write("ledger", Token(6), |tx| {
        tx.execute("INSERT INTO ledger VALUES ('kept')", &[])
    })
    .unwrap();
    assert_eq!(f.highest("ledger").unwrap(), Some(Token(6)));
}

/// A deferred constraint the write broke refuses the COMMIT itself: the transaction is
/// certainly rolled back, and the error says so instead of "outcome unknown".
#[test]
fn postgres_fence_names_a_deferred_constraints_refusal_of_the_commit() {
    let pg = common::Postgres::start();
    let mut f = PgFence::new(pg.connect()).unwrap();
    f.client()
        .batch_execute("CREATE TABLE once (k int, UNIQUE (k) DEFERRABLE INITIALLY DEFERRED)")
        .unwrap();
    let r = f.write("once", Token(4), |tx| {
        tx.execute("INSERT INTO once VALUES (1), (1)", &[])
    });
    match r {
        Err(FenceError::Storage(e)) => {
            assert!(
                e.to_string().contains("deferred constraint") && e.commit_refused(),
                "{e}"
            );
            assert!(!e.is_retryable(), "{e}");
            assert!(!e.may_have_committed(), "{e}");
        }
        other => panic!("expected a storage error, got {other:?}"),
    }
    assert_eq!(
        f.highest("once").unwrap(),
        None,
        "the raise was rolled back"
    );
    let n: i64 = f
        .client()
        .query_one("SELECT count(*) FROM once", &[])
        .unwrap()
        .get(0);
    assert_eq!(n, 0, "nothing written");
    // Any ERROR the server answers COMMIT with rolled the transaction back (here a deferred
    // trigger's exception): certain too, not an unknown outcome.
    f.client()
        .batch_execute(
            "CREATE TABLE late (k int);
             CREATE FUNCTION late_fails() RETURNS trigger LANGUAGE plpgsql AS
               $$ BEGIN RAISE EXCEPTION 'refused late'; END $$;
             CREATE CONSTRAINT TRIGGER late_fails AFTER INSERT ON late
               DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION late_fails();",
        )
        .unwrap();
    let r = f.write("late", Token(4), |tx| {
        tx.execute("INSERT INTO late VALUES (1)", &[])
    });
    match r {
        Err(e @ FenceError::Storage(_)) => {
            assert!(!e.may_have_committed(), "{e}");
            let FenceError::Storage(s) = &e else {
                unreachable!()
            };
            assert!(!s.commit_refused() && s.what() == "commit", "{e}");
        }
        other => panic!("expected a storage error, got {other:?}"),
    }
    assert_eq!(f.highest("late").unwrap(), None);
    // A COMMIT the server never finished answering (the session ended while a deferred
    // trigger ran: another client terminated it) is an outcome the fence cannot know: it
    // says the write may have committed.
    f.client()
        .batch_execute(
            "CREATE TABLE slow (k int);
             CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS
               $$ BEGIN PERFORM pg_sleep(5); RETURN NULL; END $$;
             CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON slow
               DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slow_commit();",
        )
        .unwrap();
    let pid: i32 = f
        .client()
        .query_one("SELECT pg_backend_pid()", &[])
        .unwrap()
        .get(0);
    let mut admin = pg.connect();
    let killer = std::thread::spawn(move || {
        // Until the fence's session is inside the slow trigger (its COMMIT sent).
        let start = std::time::Instant::now();
        while start.elapsed() < std::time::Duration::from_secs(20) {
            let waiting: bool = admin
                .query_one(
                    "SELECT count(*) > 0 FROM pg_stat_activity WHERE pid = $1 AND query ILIKE 'commit%'",
                    &[&pid],
                )
                .unwrap()
                .get(0);
            if waiting {
                admin
                    .query_one("SELECT pg_terminate_backend($1)", &[&pid])
                    .unwrap();
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        false
    });
    let r = f.write("slow", Token(5), |tx| {
        tx.execute("INSERT INTO slow VALUES (1)", &[])
    });
    assert!(killer.join().unwrap(), "the COMMIT was never seen running");
    match r {
        Err(e @ FenceError::Storage(_)) => assert!(e.may_have_committed(), "{e}"),
        other => panic!("expected a storage error, got {other:?}"),
    }
}

/// A write that sends a `COMMIT` of its own and then fails: the raise and what it wrote
/// before committed, so the answer is not `Write` (a certain rollback) but a storage
/// error that says the write ended the fence's transaction. The raise stands.
#[test]
fn postgres_fence_reports_a_failed_write_that_committed_its_transaction() {
    let pg = common::Postgres::start();
    let mut f = PgFence::new(pg.connect()).unwrap();
    f.client()
        .batch_execute("CREATE TABLE ledger (entry text NOT NULL)")
        .unwrap();
    let r = f.write("ledger", Token(7), |tx| {
        tx.execute("INSERT INTO ledger VALUES ('before')", &[])?;
        tx.batch_execute("COMMIT")?;
        tx.execute("INSERT INTO no_such_table VALUES (1)", &[])?;
        Ok::<_, postgres::Error>(())
    });
    match r {
        Err(FenceError::Storage(e)) => {
            assert!(
                e.to_string().contains("ended the fence's transaction"),
                "{e}"
            );
            assert!(!e.commit_refused(), "the outcome is not a certain rollback");
            assert!(e.may_have_committed(), "{e}");
        }
        other => panic!("expected a storage error, got {other:?}"),
    }
    assert_eq!(
        f.highest("ledger").unwrap(),
        Some(Token(7)),
        "the raise committed with the write's own COMMIT"
    );
    let before: i64 = f
        .client()
        .query_one("SELECT count(*) FROM ledger WHERE entry = 'before'", &[])
        .unwrap()
        .get(0);
    assert_eq!(before, 1);
    let ended_itself = |r: Result<(), FenceError<postgres::Error>>| match r {
        Err(FenceError::Storage(e)) => assert!(
            e.to_string().contains("ended the fence's transaction") && e.may_have_committed(),
            "{e}"
        ),
        other => panic!("expected a storage error, got {other:?}"),
    };
    // The same after a BEGIN of its own, whose transaction the failure left aborted: the
    // fence's, committed by the write's COMMIT, is found by its id.
    let r = f.write("ledger", Token(8), |tx| {
        tx.batch_execute("COMMIT; BEGIN")?;
        tx.execute("INSERT INTO no_such_table VALUES (1)", &[])?;
        Ok::<_, postgres::Error>(())
    });
    ended_itself(r);
    assert_eq!(f.highest("ledger").unwrap(), Some(Token(8)));
    // The same when the write swallows that failure and returns `Ok`: the transaction it
    // leaves aborted is its own, and the fence's committed. (This read "the write left the
    // transaction aborted", which says nothing committed.)
    let r = f.write("ledger", Token(9), |tx| {
        tx.batch_execute("COMMIT; BEGIN")?;
        let _ignored = tx.execute("INSERT INTO no_such_table VALUES (1)", &[]);
        Ok::<_, postgres::Error>(())
    });
    ended_itself(r);
    assert_eq!(f.highest("ledger").unwrap(), Some(Token(9)));
    // A write that fails in the fence's own transaction is still `Write`, rolled back.
    let r = f.write("ledger", Token(10), |tx| {
        tx.execute("INSERT INTO no_such_table VALUES (1)", &[])
    });
    assert!(matches!(r, Err(FenceError::Write(_))), "{r:?}");
    assert!(!r.unwrap_err().may_have_committed());
    assert_eq!(f.highest("ledger").unwrap(), Some(Token(9)));
}

/// A write that ends the fence's transaction itself (here a `ROLLBACK` of its own, which
/// undoes the raise, then a statement that commits on its own) used to come back `Ok`:
/// PostgreSQL answers the fence's COMMIT outside a transaction with a warning. The check
/// before COMMIT finds the transaction is no longer the fence's and says so. It cannot
/// undo what the write ran after its ROLLBACK: that row committed outside the fence, as
/// the docs say (a closure must not end the transaction).
#[test]
fn postgres_fence_reports_a_write_that_ended_its_transaction() {
    let pg = common::Postgres::start();
    let mut f = PgFence::new(pg.connect()).unwrap();
    f.client()
        .batch_execute("CREATE TABLE ledger (entry text NOT NULL)")
        .unwrap();
    let r = f.write("ledger", Token(6), |tx| {
        tx.batch_execute("ROLLBACK")?;
        tx.execute("INSERT INTO ledger VALUES ('outside')", &[])?;
        Ok::<_, postgres::Error>(())
    });
    match r {
        Err(FenceError::Storage(e)) => {
            assert!(
                e.to_string().contains("ended the fence's transaction"),
                "{e}"
            );
            assert!(!e.commit_refused(), "the outcome is not a certain rollback");
            assert!(e.may_have_committed(), "{e}");
        }
        other => panic!("expected a storage error, got {other:?}"),
    }
    assert_eq!(
        f.highest("ledger").unwrap(),
        None,
        "the raise was rolled back"
    );
    let outside: i64 = f
        .client()
        .query_one("SELECT count(*) FROM ledger WHERE entry = 'outside'", &[])
        .unwrap()
        .get(0);
    assert_eq!(
        outside, 1,
        "what ran after the write's own ROLLBACK committed unfenced"
    );
    // The fence goes on.
    f.write("ledger", Token(6), |tx| {
        tx.execute("INSERT INTO ledger VALUES ('kept')", &[])
    })
    .unwrap();
    assert_eq!(f.highest("ledger").unwrap(), Some(Token(6)));
}

/// A transaction the caller began through `client()` and left open, one that has written
/// or one that has only read: the fence's `BEGIN` would only warn, and its write would
/// join that transaction (a stale refusal rolling back the caller's statements, a success
/// committing them). The write is refused before anything is sent, the caller's
/// transaction left as it was; writes one after another on their own are not refused.
#[test]
fn postgres_fence_refuses_to_join_a_transaction_the_caller_left_open() {
    let pg = common::Postgres::start();
    let mut f = PgFence::new(pg.connect()).unwrap();
    f.client()
        .batch_execute("CREATE TABLE audit (entry text NOT NULL)")
        .unwrap();
    f.admit("ledger", Token(5)).unwrap();
    f.client()
        .batch_execute("BEGIN; INSERT INTO audit VALUES ('mine')")
        .unwrap();
    for token in [4, 6] {
        let mut ran = false;
        let e = f
            .write("ledger", Token(token), |_| {
                ran = true;
                Ok::<_, &str>(())
            })
            .expect_err("a write inside the caller's transaction");
        match &e {
            FenceError::Storage(s) => {
                assert_eq!(s.what(), PgFence::IN_OPEN_TRANSACTION, "{e}");
                assert!(!e.is_retryable(), "{e}");
            }
            other => panic!("token {token}: expected a storage error, got {other:?}"),
        }
        assert!(!ran, "token {token}: the write ran");
    }
    // The caller's transaction is still open, its write in it; the fence row is as it was.
    let (mine, highest): (i64, i64) = f
        .client()
        .query_one(
            "SELECT (SELECT count(*) FROM audit),
                    (SELECT highest FROM fencelock_fence WHERE resource = 'ledger')",
            &[],
        )
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    assert_eq!((mine, highest), (1, 5));
    f.client().batch_execute("ROLLBACK").unwrap();
    let mine: i64 = f
        .client()
        .query_one("SELECT count(*) FROM audit", &[])
        .unwrap()
        .get(0);
    assert_eq!(mine, 0, "the caller's own ROLLBACK ended it: it was open");
    // One that has only read is found too, and left open.
    f.client().batch_execute("BEGIN; SELECT 1").unwrap();
    let e = f
        .admit("ledger", Token(6))
        .expect_err("a write inside the caller's read-only transaction");
    assert!(
        matches!(&e, FenceError::Storage(s) if s.what() == PgFence::IN_OPEN_TRANSACTION),
        "{e}"
    );
    f.client()
        .batch_execute("SET LOCAL statement_timeout = '7s'")
        .expect("still inside it (SET LOCAL outside a transaction only warns)");
    let local: String = f
        .client()
        .query_one("SHOW statement_timeout", &[])
        .unwrap()
        .get(0);
    assert_eq!(local, "7s", "the caller's transaction is still open");
    f.client().batch_execute("ROLLBACK").unwrap();
    // One that failed is named the same way.
    let _ = f.client().batch_execute("BEGIN; SELECT 1/0");
    let e = f
        .admit("ledger", Token(6))
        .expect_err("a write inside the caller's failed transaction");
    assert!(
        matches!(&e, FenceError::Storage(s) if s.what() == PgFence::IN_OPEN_TRANSACTION),
        "{e}"
    );
    f.client().batch_execute("ROLLBACK").unwrap();
    // With it ended, the fence goes on; and writes one after another are not taken for
    // writes inside a transaction.
    f.admit("ledger", Token(6)).unwrap();
    f.admit("ledger", Token(6)).unwrap();
    f.admit("ledger", Token(7)).unwrap();
    assert_eq!(f.highest("ledger").unwrap(), Some(Token(7)));
}

/// A client handed to the constructor inside a transaction of the caller's: the fence's
/// look-up transaction would have committed it (PostgreSQL answers its `BEGIN` with a
/// warning only). It is refused before anything is sent, and the caller's write is not
/// committed; a client outside a transaction makes a fence as before.
#[test]
fn postgres_fence_is_not_made_inside_a_transaction_the_caller_left_open() {
    let pg = common::Postgres::start();
    let mut setup = pg.connect();
    setup
        .batch_execute("CREATE TABLE audit (entry text NOT NULL)")
        .unwrap();
    for opened in [
        "BEGIN; INSERT INTO audit VALUES ('mine')",
        "BEGIN; SELECT 1",
        "BEGIN; SELECT 1/0",
    ] {
        let mut client = pg.connect();
        let _ = client.batch_execute(opened);
        let e = PgFence::new(client)
            .err()
            .unwrap_or_else(|| panic!("a fence made inside {opened:?}"));
        assert_eq!(e.what(), PgFence::IN_OPEN_TRANSACTION, "{opened:?}: {e}");
    }
    let (mine, tables): (i64, i64) = setup
        .query_one(
            "SELECT (SELECT count(*) FROM audit),
                    (SELECT count(*) FROM pg_class WHERE relname = 'fencelock_fence')",
            &[],
        )
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    assert_eq!(mine, 0, "the caller's write was committed by the fence");
    assert_eq!(tables, 0, "a refused fence made its table");
    let mut f = PgFence::new(pg.connect()).unwrap();
    f.admit("ledger", Token(1)).unwrap();
    assert_eq!(f.highest("ledger").unwrap(), Some(Token(1)));
}

/// A connection whose transactions default to REPEATABLE READ (or SERIALIZABLE) takes its
/// snapshot when the constructor's first statement starts — before it waits for another
/// constructor creating the table. The look-up after the wait must still see the table
/// that one committed: the constructor's transaction is READ COMMITTED whatever the
/// connection's default.
#[test]
fn postgres_fence_made_while_another_creates_the_table_sees_it_under_any_isolation() {
    let pg = common::Postgres::start();
    for isolation in ["repeatable read", "serializable"] {
        let mut creator = pg.connect();
        creator
            .batch_execute("DROP TABLE IF EXISTS fencelock_fence")
            .unwrap();
        // Holds the constructors' advisory lock, as a constructor creating the table does.
        creator
            .batch_execute("BEGIN; SELECT pg_advisory_xact_lock(7378424937698848611)")
            .unwrap();
        let mut waiting = pg.connect();
        waiting
            .batch_execute(&format!(
                "SET default_transaction_isolation = '{isolation}'"
            ))
            .unwrap();
        let made = std::thread::spawn(move || PgFence::new(waiting).map(|_| ()));
        let mut watch = pg.connect();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let blocked: i64 = watch
                .query_one(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted",
                    &[],
                )
                .unwrap()
                .get(0);
            if blocked == 1 {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the constructor never waited"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        creator
            .batch_execute(
                "CREATE TABLE fencelock_fence (
                   resource bytea PRIMARY KEY,
                   highest bigint NOT NULL CHECK (highest > 0));
                 COMMIT",
            )
            .unwrap();
        made.join()
            .unwrap()
            .unwrap_or_else(|e| panic!("{isolation}: {e}"));
    }
}

/// The check made before COMMIT reads no table: a write that changes the transaction's
/// `search_path` (here to one without the fence table) commits as any other.
#[test]
fn postgres_fence_commits_a_write_that_changed_the_search_path() {
    let pg = common::Postgres::start();
    let mut f = PgFence::new(pg.connect()).unwrap();
    f.client()
        .batch_execute("CREATE SCHEMA tenant; CREATE TABLE tenant.ledger (entry text NOT NULL)")
        .unwrap();
    f.write("ledger", Token(7), |tx| {
        tx.batch_execute("SET LOCAL search_path = tenant")?;
        tx.execute("INSERT INTO ledger VALUES ('kept')", &[])
    })
    .expect("written");
    assert_eq!(f.highest("ledger").unwrap(), Some(Token(7)));
    let n: i64 = f
        .client()
        .query_one("SELECT count(*) FROM tenant.ledger", &[])
        .unwrap()
        .get(0);
    assert_eq!(n, 1);
}

/// A role that may only read and write the fence table an administrator made (no CREATE
/// on the schema) can still make a fence and write through it.
#[test]
fn postgres_fence_works_for_a_role_without_create_on_the_schema() {
    let pg = common::Postgres::start();
    let admin = PgFence::new(pg.connect()).unwrap();
    let mut c = admin.into_inner();
    c.batch_execute(
        "REVOKE CREATE ON SCHEMA public FROM PUBLIC;
         CREATE ROLE app LOGIN;
         GRANT USAGE ON SCHEMA public TO app;
         GRANT SELECT, INSERT, UPDATE ON fencelock_fence TO app;",
    )
    .unwrap();
    let url = pg.url().replace("user=fencelock", "user=app");
    let mut app = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    assert!(
        app.batch_execute("CREATE TABLE t (x int)").is_err(),
        "the role must not be able to create tables for this test to mean anything"
    );
    let mut f = PgFence::new(app).unwrap();
    f.admit("ledger", Token(3)).unwrap();
    assert_eq!(
        f.admit("ledger", Token(2)).unwrap_err().stale_highest(),
        Some(Token(3))
    );
    assert_eq!(f.highest("ledger").unwrap(), Some(Token(3)));
}

/// PostgreSQL's default `search_path` is `"$user", public`: two roles that each have a
/// schema of their own must still share one fence (the table is named with its schema,
/// never looked up), so each refuses the other's stale token.
#[test]
fn postgres_roles_with_schemas_of_their_own_share_one_fence() {
    let pg = common::Postgres::start();
    let mut admin = pg.connect();
    // Two roles with schemas of their own (first on their search_path) that may also
    // create in public; whatever a creates, b may use. The first fence is a's: an
    // unqualified name would have made the table in schema a, and b's in schema b.
    admin
        .batch_execute(
            "CREATE ROLE a LOGIN; CREATE SCHEMA a AUTHORIZATION a;
             CREATE ROLE b LOGIN; CREATE SCHEMA b AUTHORIZATION b;
             GRANT CREATE, USAGE ON SCHEMA public TO a, b;
             ALTER DEFAULT PRIVILEGES FOR ROLE a IN SCHEMA public
               GRANT SELECT, INSERT, UPDATE ON TABLES TO b;",
        )
        .unwrap();
    let role = |r: &str| {
        let url = pg.url().replace("user=fencelock", &format!("user={r}"));
        postgres::Client::connect(&url, postgres::NoTls).unwrap()
    };
    let (mut a, mut b) = (
        PgFence::new(role("a")).unwrap(),
        PgFence::new(role("b")).unwrap(),
    );
    a.admit("ledger", Token(5)).unwrap();
    assert_eq!(
        b.admit("ledger", Token(4)).unwrap_err().stale_highest(),
        Some(Token(5)),
        "b sees a's token"
    );
    b.admit("ledger", Token(6)).unwrap();
    assert!(a.admit("ledger", Token(5)).is_err(), "and a sees b's");
    let own: i64 = admin
        .query_one(
            "SELECT count(*) FROM pg_tables WHERE tablename = 'fencelock_fence'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(own, 1, "one fence table in the database");
}

/// A `fencelock_fence` that the connection's `search_path` finds before the fence's own
/// (an earlier build's, made in a role's schema) refuses the fence with both names,
/// changing nothing; given that schema, the fence uses the table and its tokens.
#[test]
fn postgres_fence_refuses_another_table_found_first_and_takes_its_schema() {
    let pg = common::Postgres::start();
    let mut c = pg.connect();
    c.batch_execute(
        "CREATE SCHEMA app;
         CREATE TABLE app.fencelock_fence (resource bytea PRIMARY KEY,
                                           highest bigint NOT NULL CHECK (highest > 0));
         INSERT INTO app.fencelock_fence VALUES ('ledger', 9);
         SET search_path = app, public;",
    )
    .unwrap();
    let e = match PgFence::new(c) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("a fence beside the one the search_path finds"),
    };
    assert!(
        e.contains("finds \"app\".fencelock_fence before \"public\".\"fencelock_fence\""),
        "{e}"
    );
    let mut c = pg.connect();
    let n: Option<String> = c
        .query_one("SELECT to_regclass('public.fencelock_fence')::text", &[])
        .unwrap()
        .get(0);
    assert_eq!(n, None, "nothing created");
    c.batch_execute("SET search_path = app, public").unwrap();
    let mut f = PgFence::in_schema(c, "app").unwrap();
    assert_eq!(f.highest("ledger").unwrap(), Some(Token(9)));
    assert_eq!(
        f.admit("ledger", Token(8)).unwrap_err().stale_highest(),
        Some(Token(9))
    );
}

/// A schema name is an identifier, whatever it holds: quoted, never folded or spliced
/// into the SQL; a name PostgreSQL cannot have is refused before anything is sent.
#[test]
fn postgres_fence_schema_names_are_identifiers() {
    let pg = common::Postgres::start();
    let mut c = pg.connect();
    c.batch_execute(r#"CREATE SCHEMA "Odd ""name""; DROP TABLE x""#)
        .unwrap();
    let mut f = PgFence::in_schema(c, "Odd \"name\"; DROP TABLE x").unwrap();
    f.admit("r", Token(2)).unwrap();
    let n: i64 = f
        .client()
        .query_one(
            r#"SELECT count(*) FROM "Odd ""name""; DROP TABLE x".fencelock_fence"#,
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(n, 1);
    for bad in [
        "",
        "a\0b",
        &"s".repeat(64),
        "pg_temp",
        "pg_catalog",
        "information_schema",
    ] {
        let e = PgFence::in_schema(pg.connect(), bad)
            .err()
            .expect("refused");
        assert_eq!(e.what(), "name the fence table's schema", "{bad:?}");
    }
    let e = PgFence::in_schema(pg.connect(), "missing")
        .err()
        .expect("refused");
    assert_eq!(e.what(), "create the fence table");
}

/// The SQLite fence names its table in the main database: a `TEMP` table of the same
/// name (which an unqualified name would find first) neither takes its writes nor
/// answers its reads.
#[test]
fn sqlite_fence_ignores_a_temp_table_of_its_name() {
    let mut f = SqliteFence::new(rusqlite::Connection::open_in_memory().unwrap()).unwrap();
    f.admit("r", Token(5)).unwrap();
    f.connection()
        .execute_batch(
            "CREATE TEMP TABLE fencelock_fence (resource BLOB PRIMARY KEY, highest INTEGER);
             INSERT INTO temp.fencelock_fence VALUES (CAST('r' AS BLOB), 1);",
        )
        .unwrap();
    assert_eq!(f.highest("r").unwrap(), Some(Token(5)));
    assert_eq!(
        f.admit("r", Token(4)).unwrap_err().stale_highest(),
        Some(Token(5))
    );
    f.admit("r", Token(7)).unwrap();
    let temp: i64 = f
        .connection()
        .query_row("SELECT highest FROM temp.fencelock_fence", [], |r| r.get(0))
        .unwrap();
    assert_eq!(temp, 1, "the TEMP table is untouched");
}

/// The worker's `ready` line carries the resource name escaped: a name with a newline (any
/// UTF-8 is a name) cannot print a `written` line of its own before anything is written.
#[test]
fn the_worker_prints_the_resource_name_escaped() {
    let pg = common::Postgres::start();
    let worker = env!("CARGO_BIN_EXE_fencelock-fence-write");
    let forged = "x\nwritten token=999";
    let out = std::process::Command::new(worker)
        .env("FENCELOCK_TOKEN", "5")
        .env_remove("FENCELOCK_PERMITS")
        .args(["--pg", &pg.url(), "--note", "n", "--resource", forged])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines[0].starts_with("ready pid="), "{lines:?}");
    assert!(
        lines[0].ends_with(r#" token=5 resource="x\nwritten token=999""#),
        "{lines:?}"
    );
    assert_eq!(lines[1], "written token=5");
    let mut f = PgFence::new(pg.connect()).unwrap();
    assert_eq!(f.highest(forged).unwrap(), Some(Token(5)));
}

/// The worker refuses what the fence would refuse without reading the database (token 0,
/// a token no `BIGINT` holds, an empty resource, a semaphore's permits) before it
/// connects: exit 2, a bad argument, even with no database to reach — not 1, a database
/// failure.
#[test]
fn the_worker_refuses_a_bad_token_or_resource_before_connecting() {
    let worker = env!("CARGO_BIN_EXE_fencelock-fence-write");
    for (token, resource, says) in [
        ("0", "ledger", "zero token"),
        ("9223372036854775808", "ledger", "9223372036854775808"),
        ("5", "", "empty"),
    ] {
        let out = std::process::Command::new(worker)
            .env("FENCELOCK_TOKEN", token)
            .args([
                "--pg",
                "host=/nonexistent-fencelock-socket-dir",
                "--note",
                "x",
            ])
            .args(["--resource", resource])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(2),
            "token {token} resource {resource:?}: {err}"
        );
        assert!(
            out.stdout.is_empty(),
            "nothing done: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert!(err.to_lowercase().contains(says), "{err}");
    }
    // A semaphore's permit holder (`fencelock lock --permits` sets FENCELOCK_PERMITS): a
    // fence serves exclusive holders only, so that is refused the same way, token good.
    let out = std::process::Command::new(worker)
        .env("FENCELOCK_TOKEN", "5")
        .env("FENCELOCK_PERMITS", "1/3")
        .args([
            "--pg",
            "host=/nonexistent-fencelock-socket-dir",
            "--note",
            "x",
        ])
        .args(["--resource", "ledger"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(out.stdout.is_empty());
    assert!(err.contains("exclusive holders only"), "{err}");
    // Bytes that are not UTF-8, in an argument or in the environment: a bad argument or
    // environment (exit 2, named), not a panic (101) — and a FENCELOCK_PERMITS of any
    // bytes still refuses, where it was taken for unset.
    use std::os::unix::ffi::OsStrExt;
    let bad = std::ffi::OsStr::from_bytes(b"\xff");
    for (env, arg, says) in [
        (None, Some(bad), "argument \"\\xff\" is not utf-8"),
        (
            Some("FENCELOCK_PERMITS"),
            None,
            "fencelock_permits=\"\\xff\" is not utf-8",
        ),
        (
            Some("FENCELOCK_TOKEN"),
            None,
            "fencelock_token=\"\\xff\" is not utf-8",
        ),
        (
            Some("FENCELOCK_LOCK"),
            None,
            "fencelock_lock=\"\\xff\" is not utf-8",
        ),
    ] {
        let mut cmd = std::process::Command::new(worker);
        cmd.env("FENCELOCK_TOKEN", "5")
            .env_remove("FENCELOCK_PERMITS");
        if let Some(name) = env {
            cmd.env(name, bad);
        }
        cmd.args(["--pg", "host=/nonexistent-fencelock-socket-dir", "--note"]);
        cmd.arg(arg.unwrap_or(std::ffi::OsStr::new("x")));
        let out = cmd.output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{env:?} {arg:?}: {err}");
        assert!(out.stdout.is_empty());
        assert!(err.to_lowercase().contains(says), "{err}");
    }
    // FENCELOCK_LOCK is read only without --resource: given one, its bytes do not matter
    // (the worker goes on to the database, which is not there: exit 1).
    let out = std::process::Command::new(worker)
        .env("FENCELOCK_TOKEN", "5")
        .env_remove("FENCELOCK_PERMITS")
        .env("FENCELOCK_LOCK", bad)
        .args([
            "--pg",
            "host=/nonexistent-fencelock-socket-dir",
            "--note",
            "x",
            "--resource",
            "ledger",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
}

/// `highest` of a name no resource can have (empty, or longer than 64 bytes) is `None`
/// without asking the table, as the gate answers, even when a hand-made row holds one.
#[test]
fn sql_fences_answer_none_for_a_name_no_resource_can_have() {
    let long = "n".repeat(65);
    let mut s = SqliteFence::new(rusqlite::Connection::open_in_memory().unwrap()).unwrap();
    for name in ["", long.as_str()] {
        s.connection()
            .execute(
                "INSERT INTO main.fencelock_fence (resource, highest) VALUES (?1, 9)",
                (name.as_bytes(),),
            )
            .unwrap();
        assert_eq!(s.highest(name).unwrap(), None, "sqlite {name:?}");
    }
    let pg = common::Postgres::start();
    let mut f = PgFence::new(pg.connect()).unwrap();
    for name in ["", long.as_str()] {
        f.client()
            .execute(
                "INSERT INTO public.fencelock_fence (resource, highest) VALUES ($1, 9)",
                &[&name.as_bytes()],
            )
            .unwrap();
        assert_eq!(f.highest(name).unwrap(), None, "postgres {name:?}");
    }
    // A name that can be is read as before.
    f.admit("ledger", Token(3)).unwrap();
    assert_eq!(f.highest("ledger").unwrap(), Some(Token(3)));
}

/// A fence table found in place that is not the fence's own shape is refused at
/// construction (`PgFence::NOT_OUR_TABLE`), changing nothing: `text` keys would never
/// equal the fence's `bytea` keys (two highest tokens for one resource), a NULL highest
/// would close its resource for good. The fence's own shape, made by hand, is taken.
#[test]
fn postgres_fence_refuses_a_hostile_fence_table_instead_of_trusting_it() {
    let pg = common::Postgres::start();
    let mut c = pg.connect();
    for (shape, why) in [
        (
            "CREATE TABLE fencelock_fence (resource text PRIMARY KEY, highest bigint NOT NULL)",
            "text keys",
        ),
        (
            "CREATE TABLE fencelock_fence (resource bytea PRIMARY KEY, highest bigint)",
            "a nullable highest",
        ),
        (
            "CREATE TABLE fencelock_fence (resource bytea PRIMARY KEY, highest integer NOT NULL)",
            "a 32-bit highest",
        ),
        (
            "CREATE TABLE fencelock_fence (resource bytea NOT NULL, highest bigint NOT NULL)",
            "no key",
        ),
        (
            "CREATE TABLE fencelock_fence (resource bytea NOT NULL, highest bigint NOT NULL);
             CREATE UNIQUE INDEX ON fencelock_fence (resource) WHERE highest > 5",
            "a partial key",
        ),
        (
            "CREATE TABLE fencelock_fence (resource bytea PRIMARY KEY,
               highest bigint NOT NULL, note text)",
            "a third column",
        ),
        (
            "CREATE TABLE fencelock_fence (resource bytea PRIMARY KEY,
               highest bigint NOT NULL DEFAULT 1)",
            "a default",
        ),
        (
            "CREATE TABLE fencelock_fence (resource bytea PRIMARY KEY,
               highest bigint GENERATED ALWAYS AS IDENTITY)",
            "an identity column",
        ),
        (
            "CREATE TABLE fencelock_fence (resource bytea NOT NULL, highest bigint NOT NULL,
               UNIQUE (resource) DEFERRABLE)",
            "a deferrable key",
        ),
        (
            "CREATE TABLE other (resource bytea PRIMARY KEY, highest bigint NOT NULL);
             CREATE VIEW fencelock_fence AS SELECT resource, highest FROM other",
            "a view",
        ),
        (
            "CREATE UNLOGGED TABLE fencelock_fence (resource bytea PRIMARY KEY,
               highest bigint NOT NULL)",
            "an unlogged table",
        ),
        (
            "CREATE TABLE fencelock_fence (resource bytea PRIMARY KEY, highest bigint NOT NULL);
             CREATE TABLE other () INHERITS (fencelock_fence);
             INSERT INTO other VALUES ('ledger'::bytea, 100)",
            "a table inherited from",
        ),
    ] {
        c.batch_execute(shape).unwrap();
        let e = match PgFence::new(pg.connect()) {
            Err(e) => e,
            Ok(_) => panic!("{why}: a fence on a table not its own"),
        };
        assert_eq!(e.what(), PgFence::NOT_OUR_TABLE, "{why}: {e}");
        let kept: Option<u32> = c
            .query_one("SELECT to_regclass('public.fencelock_fence')::oid", &[])
            .unwrap()
            .get(0);
        assert!(kept.is_some(), "{why}: the table is still there");
        c.batch_execute(match why {
            "a view" => "DROP VIEW fencelock_fence; DROP TABLE other",
            "a table inherited from" => "DROP TABLE other; DROP TABLE fencelock_fence",
            _ => "DROP TABLE fencelock_fence",
        })
        .unwrap();
    }
    // The fence's own shape, made by hand (a UNIQUE constraint for the key), is taken.
    c.batch_execute(
        "CREATE TABLE fencelock_fence (resource bytea NOT NULL UNIQUE, highest bigint NOT NULL);
         INSERT INTO fencelock_fence VALUES ('ledger'::bytea, 9)",
    )
    .unwrap();
    let mut f = PgFence::new(pg.connect()).unwrap();
    assert_eq!(
        f.admit("ledger", Token(8)).unwrap_err().stale_highest(),
        Some(Token(9))
    );
}
