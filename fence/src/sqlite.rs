//! [`SqliteFence`]: the fence row and the data in one SQLite transaction.

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rusqlite::{Connection, DropBehavior, OptionalExtension, Transaction, TransactionBehavior};

use crate::{precheck, stale, stored_token, Fence, FenceError, StorageError, Token, DEFERRED};

// Always `main.`: an unqualified name would find a TEMP table of the same name first.
pub(crate) const CREATE: &str = "CREATE TABLE IF NOT EXISTS main.fencelock_fence (
    resource BLOB PRIMARY KEY NOT NULL,
    highest INTEGER NOT NULL CHECK (highest > 0)
) STRICT, WITHOUT ROWID";

// Insert the resource's first token, or raise the stored one if it is not higher than
// ours. RETURNING yields a row only when a row was written: none means stale.
// (An unqualified `highest` in DO UPDATE is the stored row's.)
pub(crate) const ADMIT: &str =
    "INSERT INTO main.fencelock_fence (resource, highest) VALUES (?1, ?2)
    ON CONFLICT (resource) DO UPDATE SET highest = excluded.highest
    WHERE highest <= excluded.highest
    RETURNING highest";

pub(crate) const HIGHEST: &str = "SELECT highest FROM main.fencelock_fence WHERE resource = ?1";

/// A fence in an SQLite database: the table `fencelock_fence` (see
/// [`FENCE_TABLE`](crate::FENCE_TABLE)) in the connection's main database, next to your
/// data (always named `main.fencelock_fence`, so a `TEMP` table or an attached
/// database's table of the same name is never used instead), and every fenced write one
/// `BEGIN IMMEDIATE` transaction:
///
/// ```sql
/// INSERT INTO main.fencelock_fence (resource, highest) VALUES (:resource, :token)
///   ON CONFLICT (resource) DO UPDATE SET highest = excluded.highest
///   WHERE highest <= excluded.highest
///   RETURNING highest;            -- no row: stale (then read the highest back)
/// -- your write
/// SELECT highest FROM main.fencelock_fence WHERE resource = :resource;  -- still :token
/// COMMIT;
/// ```
///
/// `IMMEDIATE` takes SQLite's write lock before the conditional upsert, so no other
/// connection can move the fence between the check and the commit. Writers on other
/// connections wait for the lock up to the connection's busy timeout (then
/// [`FenceError::Storage`]). Every connection to the file may fence; they share the table.
///
/// **When SQLite rolls the transaction back on its own** inside your write — a conflict
/// under `OR ROLLBACK` / `ON CONFLICT ROLLBACK`, a trigger's `RAISE(ROLLBACK, …)`, a full
/// disk or an I/O error — the raise of the fence is undone and the connection falls back
/// to autocommit, so a statement your write runs afterwards would commit on its own,
/// unfenced, possibly after a newer holder's write. The fence keeps a commit hook on its
/// connection that refuses every commit while your write runs, so such a statement fails
/// (`SQLITE_CONSTRAINT_COMMITHOOK`) instead of landing, and the write as a whole is a
/// [`FenceError::Storage`] ("rolled back by SQLite"), nothing of it committed. A rollback
/// hook notes any rollback while your write runs, so a write that goes on in a transaction
/// of its own after one is refused too, however its statements end. Do not replace the
/// connection's commit or rollback hook (`connection()` lends it).
///
/// Whatever drop behaviour your write sets on the transaction, a failed write, a failed
/// commit and a panic inside the write roll it back.
pub struct SqliteFence {
    conn: Connection,
    /// Set while a write runs: the commit hook then refuses every commit.
    in_write: Arc<AtomicBool>,
    /// Set by the rollback hook when a transaction rolls back while a write runs (SQLite
    /// rolled the fence's back, the write sent ROLLBACK, or the commit hook refused a
    /// COMMIT): the fence's transaction ended inside the write, whatever came after.
    rolled_back: Arc<AtomicBool>,
}

/// Clears the write's flag however the write ends (a panic included).
struct InWrite<'a>(&'a AtomicBool);

impl Drop for InWrite<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

impl SqliteFence {
    /// A fence on `conn`, creating the fence table if it is missing.
    ///
    /// Refused, with nothing changed: a main database in journal mode `OFF` (SQLite's
    /// `ROLLBACK` is then undefined, so a refused, failed or SQLite-ended write, and the
    /// commit hook's refusal, could leave the raise or half the write behind; do not switch
    /// to `OFF` later either); a main database with `synchronous = OFF` (a power loss or
    /// an operating-system crash can then corrupt it, and a fence row that goes back
    /// lets a stale token's write in; do not switch to it later either — `NORMAL` in WAL
    /// mode may lose the last commits to a power loss, each raise with its own write, and
    /// `FULL` keeps every acknowledged one); and a `main.fencelock_fence` that is not the fence's own
    /// shape: a `STRICT`, `WITHOUT ROWID` table of exactly `resource BLOB PRIMARY KEY NOT
    /// NULL` and `highest INTEGER NOT NULL` (made by hand or by another tool, it could
    /// hold keys the fence never matches — a `TEXT` key never equals the fence's `BLOB` —
    /// and so keep a second highest token for a resource). The check is of the shape
    /// only: its `CHECK (highest > 0)` is not looked at (a stored token of 0 or less is
    /// never reported as a highest anyway), nor are triggers or indexes someone added to
    /// a table of the right shape — keep the fence's table to the fence.
    ///
    /// Errors: [`StorageError`] — [`what`](StorageError::what) is
    /// [`JOURNAL_OFF`](Self::JOURNAL_OFF), [`SYNCHRONOUS_OFF`](Self::SYNCHRONOUS_OFF) or
    /// [`NOT_OUR_TABLE`](Self::NOT_OUR_TABLE) for the refusals above, else the table
    /// cannot be read or created. Cost: five statements.
    pub fn new(mut conn: Connection) -> Result<Self, StorageError> {
        let mode: String = conn
            .query_row("PRAGMA main.journal_mode", [], |r| r.get(0))
            .map_err(|e| StorageError::new("read the journal mode", e))?;
        if mode.eq_ignore_ascii_case("off") {
            return Err(StorageError::new(
                Self::JOURNAL_OFF,
                "SQLite cannot roll a transaction back reliably in journal mode OFF; set \
                 another (WAL, DELETE, MEMORY for an in-memory database) first",
            ));
        }
        let sync: i64 = conn
            .query_row("PRAGMA main.synchronous", [], |r| r.get(0))
            .map_err(|e| StorageError::new("read the synchronous setting", e))?;
        if sync == 0 {
            return Err(StorageError::new(
                Self::SYNCHRONOUS_OFF,
                "with synchronous OFF a power loss or an operating-system crash can corrupt \
                 the database, the fence's highest tokens with it; set NORMAL or FULL first",
            ));
        }
        // Created only if missing (a no-op on a table of any shape), then checked: what
        // is there now is what every fenced write will use.
        conn.execute_batch(CREATE)
            .map_err(|e| StorageError::new("create the fence table", e))?;
        check_table(&conn)?;
        let in_write = Arc::new(AtomicBool::new(false));
        let flag = in_write.clone();
        // Returning true turns the commit into a rollback.
        conn.commit_hook(Some(move || flag.load(Ordering::SeqCst)))
            .map_err(|e| StorageError::new("install the commit hook", e))?;
        // Not called for ROLLBACK TO a savepoint, which a write may use freely.
        let rolled_back = Arc::new(AtomicBool::new(false));
        let (flag, rolled) = (in_write.clone(), rolled_back.clone());
        conn.rollback_hook(Some(move || {
            if flag.load(Ordering::SeqCst) {
                rolled.store(true, Ordering::SeqCst);
            }
        }))
        .map_err(|e| StorageError::new("install the rollback hook", e))?;
        Ok(SqliteFence {
            conn,
            in_write,
            rolled_back,
        })
    }

    /// [`StorageError::what`] of [`new`](Self::new)'s refusal of a main database in
    /// journal mode `OFF`.
    pub const JOURNAL_OFF: &'static str = "refused: the database is in journal mode OFF";

    /// [`StorageError::what`] of [`new`](Self::new)'s refusal of a main database with
    /// `synchronous = OFF`.
    pub const SYNCHRONOUS_OFF: &'static str = "refused: the database has synchronous OFF";

    /// [`StorageError::what`] of [`new`](Self::new)'s refusal of a `main.fencelock_fence`
    /// that is not the fence's own shape.
    pub const NOT_OUR_TABLE: &'static str =
        "refused: main.fencelock_fence is not the fence's own table";

    /// Opens (creating if needed) the database file at `path` in WAL mode with a busy
    /// timeout of `busy`, and makes a fence on it.
    ///
    /// Errors: [`StorageError`] if the file cannot be opened or set up, or stays in
    /// another journal mode (an in-memory database, a VFS without shared memory): set up
    /// such a connection yourself and pass it to [`SqliteFence::new`]; and `new`'s. A
    /// `main.fencelock_fence` of another shape ([`NOT_OUR_TABLE`](Self::NOT_OUR_TABLE)) is
    /// refused before the switch to WAL, which would outlive the refusal. Cost: a file
    /// open and three statements, then `new`'s.
    pub fn open(path: impl AsRef<Path>, busy: Duration) -> Result<Self, StorageError> {
        let conn = Connection::open(path).map_err(|e| StorageError::new("open the database", e))?;
        conn.busy_timeout(busy)
            .map_err(|e| StorageError::new("set the busy timeout", e))?;
        // A fence table of another shape is refused before the switch to WAL, which
        // outlives the connection: a refused open leaves the file's journal mode as it was.
        let exists: bool = conn
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM pragma_table_list
                 WHERE schema = 'main' AND name = 'fencelock_fence' COLLATE NOCASE)",
                [],
                |r| r.get(0),
            )
            .map_err(|e| StorageError::new("read the fence table's shape", e))?;
        if exists {
            check_table(&conn)?;
        }
        let mode: String = conn
            .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
            .map_err(|e| StorageError::new("switch to WAL", e))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StorageError::new(
                "switch to WAL",
                format!("the database stayed in journal mode {mode:?}"),
            ));
        }
        Self::new(conn)
    }

    /// The connection, for reads and unfenced statements. Cost: O(1).
    pub fn connection(&mut self) -> &mut Connection {
        &mut self.conn
    }

    /// Gives the connection back, without the fence's commit and rollback hooks. Cost:
    /// O(1).
    pub fn into_inner(mut self) -> Connection {
        let _ = self.conn.commit_hook(None::<fn() -> bool>);
        let _ = self.conn.rollback_hook(None::<fn()>);
        self.conn
    }
}

/// Refuses a `main.fencelock_fence` that is not [`CREATE`]'s shape: a `STRICT`,
/// `WITHOUT ROWID` table whose columns are exactly `resource BLOB NOT NULL`, the primary
/// key, and `highest INTEGER NOT NULL` (or `INT`), no defaults (hidden and generated
/// columns count: `ncol` includes them).
fn check_table(conn: &Connection) -> Result<(), StorageError> {
    let read = |e| StorageError::new("read the fence table's shape", e);
    let table: Option<(String, i64, bool, bool)> = conn
        .query_row(
            "SELECT type, ncol, wr, strict FROM pragma_table_list
             WHERE schema = 'main' AND name = 'fencelock_fence' COLLATE NOCASE",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .optional()
        .map_err(read)?;
    let mut st = conn
        .prepare(
            "SELECT name, type, \"notnull\", dflt_value IS NULL, pk
             FROM pragma_table_info('fencelock_fence', 'main') ORDER BY cid",
        )
        .map_err(read)?;
    let columns: Vec<(String, String, bool, bool, i64)> = st
        .query_map([], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
        .map_err(read)?
        .collect::<Result<_, _>>()
        .map_err(read)?;
    // Declared types as STRICT spells them, in any case (INT and INTEGER are one type).
    let is = |c: &(String, String, bool, bool, i64), name: &str, types: &[&str], pk: i64| {
        c.0.eq_ignore_ascii_case(name)
            && types.iter().any(|t| c.1.eq_ignore_ascii_case(t))
            && c.2
            && c.3
            && c.4 == pk
    };
    let ours = table == Some(("table".to_string(), 2, true, true))
        && matches!(&columns[..], [r, h]
            if is(r, "resource", &["BLOB"], 1) && is(h, "highest", &["INTEGER", "INT"], 0));
    if ours {
        return Ok(());
    }
    Err(StorageError::new(
        SqliteFence::NOT_OUR_TABLE,
        format!(
            "it is {} with columns {:?}; the fence's is a STRICT, WITHOUT ROWID table \
             (resource BLOB PRIMARY KEY NOT NULL, highest INTEGER NOT NULL CHECK \
             (highest > 0)): move its rows into one of that shape",
            match &table {
                Some((kind, ncol, without_rowid, strict)) => format!(
                    "a {kind} of {ncol} columns{}{}",
                    if *strict { ", STRICT" } else { ", not STRICT" },
                    if *without_rowid {
                        ", WITHOUT ROWID"
                    } else {
                        ", with rowid"
                    },
                ),
                None => "not a table".to_string(),
            },
            columns
                .iter()
                .map(|(name, ty, not_null, no_default, pk)| format!(
                    "{name} {ty}{}{}{}",
                    if *pk > 0 { " PRIMARY KEY" } else { "" },
                    if *not_null { " NOT NULL" } else { "" },
                    if *no_default { "" } else { " DEFAULT …" },
                ))
                .collect::<Vec<_>>(),
        ),
    ))
}

impl Fence for SqliteFence {
    type Tx<'t> = Transaction<'t>;

    fn write<T, E, F>(&mut self, resource: &str, token: Token, write: F) -> Result<T, FenceError<E>>
    where
        F: FnOnce(&mut Transaction<'_>) -> Result<T, E>,
    {
        precheck(resource, token, true)?;
        let key = resource.as_bytes();
        let t = token.0 as i64; // in range: precheck
        let mut tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| StorageError::new("begin", e))?;
        let admitted: Option<i64> = tx
            .query_row(ADMIT, (key, t), |r| r.get(0))
            .optional()
            .map_err(|e| StorageError::new("conditional upsert", e))?;
        if admitted.is_none() {
            let stored: Option<i64> = tx
                .query_row(HIGHEST, (key,), |r| r.get(0))
                .optional()
                .map_err(|e| StorageError::new("read the highest token", e))?;
            return Err(stale(token, stored)); // dropping tx rolls back
        }
        let ran = {
            self.rolled_back.store(false, Ordering::SeqCst);
            self.in_write.store(true, Ordering::SeqCst);
            let _armed = InWrite(&self.in_write);
            catch_unwind(AssertUnwindSafe(|| write(&mut tx)))
        };
        // Rolled back on every way out but the commit below, whatever drop behaviour the
        // closure set (a failed commit included).
        tx.set_drop_behavior(DropBehavior::Rollback);
        let out = match ran {
            Ok(Ok(out)) => out,
            Ok(Err(e)) => {
                let _ = tx.rollback();
                return Err(FenceError::Write(e));
            }
            Err(panic) => {
                drop(tx);
                resume_unwind(panic);
            }
        };
        if tx.is_autocommit() {
            // SQLite ended the transaction inside the write; the hook refused to commit
            // anything the write ran after that.
            return Err(StorageError::new(
                "the fenced transaction",
                "the transaction ended inside the write: rolled back by SQLite (a \
                 conflict under OR ROLLBACK, a RAISE(ROLLBACK), a full disk or an I/O \
                 error) or ended by the write itself (a COMMIT or ROLLBACK of its own): \
                 nothing of it was written",
            )
            .into());
        }
        if self.rolled_back.load(Ordering::SeqCst) {
            // It ended (the rollback hook saw it) and the write began a transaction of its
            // own since: what it ran before the end was undone, so even when the stored
            // highest is this token (the same holder wrote before, which the check below
            // cannot tell) the write is not whole.
            return Err(StorageError::new(
                "the fenced transaction",
                "the write ended the fence's transaction itself, or SQLite rolled it back, \
                 and the write went on in a transaction of its own: nothing of it was \
                 committed by the fence",
            )
            .into());
        }
        // The transaction about to commit must still carry the raise: a write that
        // deleted or changed the fence's own row would otherwise commit, and the next
        // stale token be admitted (the rollback hook above catches a write that ended the
        // fence's transaction and began one of its own before it gets here). The
        // highest is ours only while the fence's raise stands (an equal token stored
        // before is the same holder's: admitted either way), and no other writer can
        // commit between this read and the COMMIT (this transaction holds the write
        // lock once it wrote).
        let stands: Option<i64> = tx
            .query_row(HIGHEST, (key,), |r| r.get(0))
            .optional()
            .map_err(|e| StorageError::new("check the fence before commit", e))?;
        if stands != Some(t) {
            return Err(StorageError::new(
                "the fenced transaction",
                "the write deleted or changed the fence's own row for this resource, or \
                 ended the fence's transaction itself: nothing of it was committed by the \
                 fence (a write must not touch the fence table); read your data back",
            )
            .into());
        }
        tx.commit().map_err(|e| {
            // A deferred foreign key refuses the COMMIT itself, and the transaction is then
            // rolled back by the drop (its behaviour set above): certain, nothing written.
            if e.sqlite_error_code() == Some(rusqlite::ErrorCode::ConstraintViolation) {
                StorageError::new(DEFERRED, e)
            } else if matches!(
                e.sqlite_error_code(),
                Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
            ) {
                // Busy at COMMIT: the transaction stays open, and the drop rolls it back.
                StorageError::new("commit", e)
            } else {
                StorageError::outcome_unknown("commit", e)
            }
        })?;
        Ok(out)
    }

    fn highest(&mut self, resource: &str) -> Result<Option<Token>, StorageError> {
        if !crate::nameable(resource) {
            return Ok(None);
        }
        let stored: Option<i64> = self
            .conn
            .query_row(HIGHEST, (resource.as_bytes(),), |r| r.get(0))
            .optional()
            .map_err(|e| StorageError::new("read the highest token", e))?;
        stored.map(stored_token).transpose()
    }
}
