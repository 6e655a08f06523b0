//! [`PgFence`]: the fence row and the data in one PostgreSQL transaction.

use postgres::{Client, Statement, Transaction};

use crate::{precheck, stale, stored_token, Fence, FenceError, StorageError, Token};

// Any constant: serialises concurrent `PgFence::new` calls around CREATE TABLE IF NOT
// EXISTS, which can otherwise fail with a unique violation when two sessions race.
const CREATE_LOCK: i64 = 0x6665_6e63_656c_6f63; // "fenceloc"

pub(crate) const CREATE: &str = "CREATE TABLE IF NOT EXISTS fencelock_fence (
    resource bytea PRIMARY KEY,
    highest bigint NOT NULL CHECK (highest > 0)
)";

// Insert the resource's first token, or raise the stored one if it is not higher than
// ours. ON CONFLICT DO UPDATE locks the conflicting row even when the WHERE fails, so the
// row stays locked until this transaction ends. RETURNING yields no row: stale.
pub(crate) const ADMIT: &str =
    "INSERT INTO fencelock_fence AS f (resource, highest) VALUES ($1, $2)
    ON CONFLICT (resource) DO UPDATE SET highest = EXCLUDED.highest
    WHERE f.highest <= EXCLUDED.highest
    RETURNING f.highest";

pub(crate) const HIGHEST: &str = "SELECT highest FROM fencelock_fence WHERE resource = $1";

/// A fence in a PostgreSQL database: the table `fencelock_fence` (see
/// [`FENCE_TABLE`](crate::FENCE_TABLE)) next to your data, and every fenced write one
/// transaction:
///
/// ```sql
/// BEGIN;
/// INSERT INTO fencelock_fence AS f (resource, highest) VALUES ($1, $2)
///   ON CONFLICT (resource) DO UPDATE SET highest = EXCLUDED.highest
///   WHERE f.highest <= EXCLUDED.highest
///   RETURNING f.highest;          -- no row: stale (then read the highest back)
/// -- your write, in the same transaction
/// COMMIT;
/// ```
///
/// The upsert either inserts the resource's row or locks the existing one (PostgreSQL
/// locks the conflicting row whether or not the `WHERE` holds), so until `COMMIT` no other
/// transaction can raise the fence and then see its own write overtaken by this one:
/// writes to one resource commit in fence order. Written for the default isolation,
/// `READ COMMITTED`; under `REPEATABLE READ` or `SERIALIZABLE` a writer that waited for a
/// concurrent one to commit gets a serialization failure instead
/// ([`FenceError::is_retryable`]) and may simply retry.
pub struct PgFence {
    client: Client,
    admit: Statement,
    highest: Statement,
}

impl PgFence {
    /// A fence on `client`, creating the fence table if it is missing (so a role that may
    /// only read and write an existing table needs no CREATE on the schema) and preparing
    /// its two statements. Every writer of a resource must find the same
    /// `fencelock_fence` through its `search_path`: a role whose own schema comes first
    /// would otherwise get a fence of its own, and the two would not refuse each other's
    /// stale tokens.
    ///
    /// The closure given to [`Fence::write`] must not end the transaction itself (no
    /// `COMMIT` or `ROLLBACK` statements): the fence commits or rolls back.
    ///
    /// Errors: [`StorageError`] if the table cannot be found or created, or a statement
    /// prepared. Cost: seven round trips (a transaction taking an advisory lock around a
    /// look-up and, if missing, `CREATE TABLE`, then two prepares); make one fence per
    /// connection and keep it.
    pub fn new(mut client: Client) -> Result<Self, StorageError> {
        let mut tx = client
            .transaction()
            .map_err(|e| StorageError::new("begin", e))?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&CREATE_LOCK])
            .map_err(|e| StorageError::new("lock for create", e))?;
        // Created only when missing: CREATE ... IF NOT EXISTS needs CREATE on the schema
        // even when the table exists, which a least-privilege role (SELECT, INSERT and
        // UPDATE on a table an administrator made) does not have.
        let exists: bool = tx
            .query_one("SELECT to_regclass('fencelock_fence') IS NOT NULL", &[])
            .and_then(|row| row.try_get(0))
            .map_err(|e| StorageError::new("look for the fence table", e))?;
        if !exists {
            tx.batch_execute(CREATE)
                .map_err(|e| StorageError::new("create the fence table", e))?;
        }
        tx.commit()
            .map_err(|e| StorageError::new("create the fence table", e))?;
        let admit = client
            .prepare(ADMIT)
            .map_err(|e| StorageError::new("prepare the conditional upsert", e))?;
        let highest = client
            .prepare(HIGHEST)
            .map_err(|e| StorageError::new("prepare the highest-token read", e))?;
        Ok(PgFence {
            client,
            admit,
            highest,
        })
    }

    /// The client, for reads and unfenced statements. Cost: O(1).
    pub fn client(&mut self) -> &mut Client {
        &mut self.client
    }

    /// Gives the client back. Cost: O(1).
    pub fn into_inner(self) -> Client {
        self.client
    }
}

impl Fence for PgFence {
    type Tx<'t> = Transaction<'t>;

    fn write<T, E, F>(&mut self, resource: &str, token: Token, write: F) -> Result<T, FenceError<E>>
    where
        F: FnOnce(&mut Transaction<'_>) -> Result<T, E>,
    {
        precheck(resource, token, true)?;
        let key = resource.as_bytes();
        let t = token.0 as i64; // in range: precheck
        let mut tx = self
            .client
            .transaction()
            .map_err(|e| StorageError::new("begin", e))?;
        let admitted = tx
            .query_opt(&self.admit, &[&key, &t])
            .map_err(|e| StorageError::new("conditional upsert", e))?;
        if admitted.is_none() {
            let stored = tx
                .query_opt(&self.highest, &[&key])
                .map_err(|e| StorageError::new("read the highest token", e))?
                .map(|row| row.try_get::<_, i64>(0))
                .transpose()
                .map_err(|e| StorageError::new("read the highest token", e))?;
            return Err(stale(token, stored)); // dropping tx rolls back
        }
        let out = match write(&mut tx) {
            Ok(out) => out,
            Err(e) => {
                // Rolled back here, not left to the drop: nothing the closure did to the
                // transaction decides what happens to its writes and the fence's raise.
                let _ = tx.rollback();
                return Err(FenceError::Write(e));
            }
        };
        // A statement error the closure swallowed leaves the transaction aborted, and
        // PostgreSQL answers COMMIT in an aborted transaction with ROLLBACK, not an error:
        // one statement first, which fails (25P02) in an aborted transaction, so an `Ok`
        // always means the write and the fence's raise both committed. It reads no table,
        // so nothing the closure set (`search_path`, a role) can make it fail otherwise.
        if let Err(e) = tx.batch_execute("SELECT 1") {
            let what = if e.code() == Some(&postgres::error::SqlState::IN_FAILED_SQL_TRANSACTION) {
                "the write left the transaction aborted"
            } else {
                "check the transaction before commit"
            };
            return Err(StorageError::new(what, e).into());
        }
        tx.commit().map_err(|e| StorageError::new("commit", e))?;
        Ok(out)
    }

    fn highest(&mut self, resource: &str) -> Result<Option<Token>, StorageError> {
        let row = self
            .client
            .query_opt(&self.highest, &[&resource.as_bytes()])
            .map_err(|e| StorageError::new("read the highest token", e))?;
        match row {
            None => Ok(None),
            Some(row) => {
                let h: i64 = row
                    .try_get(0)
                    .map_err(|e| StorageError::new("read the highest token", e))?;
                stored_token(h).map(Some)
            }
        }
    }
}
