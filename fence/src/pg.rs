//! [`PgFence`]: the fence row and the data in one PostgreSQL transaction.

use postgres::types::Type;
use postgres::{Client, IsolationLevel, Transaction};

use crate::{precheck, stale, stored_token, Fence, FenceError, StorageError, Token, DEFERRED};

// Any constant: serialises concurrent `PgFence::new` calls around CREATE TABLE IF NOT
// EXISTS, which can otherwise fail with a unique violation when two sessions race.
const CREATE_LOCK: i64 = 0x6665_6e63_656c_6f63; // "fenceloc"

/// `CREATE TABLE` of the fence table `table` (schema-qualified, quoted).
pub(crate) fn create(table: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {table} (
    resource bytea PRIMARY KEY,
    highest bigint NOT NULL CHECK (highest > 0)
)"
    )
}

/// Insert the resource's first token, or raise the stored one if it is not higher than
/// ours. ON CONFLICT DO UPDATE locks the conflicting row even when the WHERE fails, so the
/// row stays locked until this transaction ends. RETURNING yields no row: stale; else the
/// token stored and the transaction's id (checked again before COMMIT: the write must not
/// have ended the transaction).
pub(crate) fn admit(table: &str) -> String {
    format!(
        "INSERT INTO {table} AS f (resource, highest) VALUES ($1, $2)
    ON CONFLICT (resource) DO UPDATE SET highest = EXCLUDED.highest
    WHERE f.highest OPERATOR(pg_catalog.<=) EXCLUDED.highest
    RETURNING f.highest, pg_catalog.txid_current()"
    )
}

/// Before COMMIT: true only in the transaction the fence began (its id, `$1`), so a write
/// that ended it (a `COMMIT` or `ROLLBACK` of its own) is caught; it fails (25P02) in a
/// transaction a swallowed error left aborted. It reads no table and names its function
/// and operator in `pg_catalog`, so nothing the write set (`search_path`, a role) can
/// change its answer.
const STILL_OURS: &str = "SELECT pg_catalog.txid_current_if_assigned() OPERATOR(pg_catalog.=) $1";

/// The state of the fence's transaction by its id (`$1`), after it ended: `committed`,
/// `aborted`, or `in progress`. Read after a failed write is rolled back, which is then
/// `aborted` unless the write committed the fence's transaction itself. Named in
/// `pg_catalog`, as `STILL_OURS` is.
const TXID_STATUS: &str = "SELECT pg_catalog.txid_status($1)";

/// Before `BEGIN`: true when the connection is already inside a transaction: one the
/// caller began through [`PgFence::client`] and left open, which the fence's write would
/// otherwise join (PostgreSQL answers a `BEGIN` inside a transaction with a warning only).
/// Sent as a simple query, alone: outside a transaction it is the first and only command
/// of a transaction of its own, whose start time is its own (PostgreSQL documents the two
/// timestamps equal during a transaction's first command); inside one begun earlier, the
/// transaction's start is the earlier `BEGIN`'s. One that has written has an id too.
/// Named in `pg_catalog`, as `STILL_OURS` is.
const OUTER_OPEN: &str = "SELECT pg_catalog.statement_timestamp() \
     OPERATOR(pg_catalog.<>) pg_catalog.transaction_timestamp() \
     OR pg_catalog.txid_current_if_assigned() IS NOT NULL";

/// Refuses a connection inside a transaction the caller began and left open (one that has
/// written, only read, or failed), before anything is sent that could end or join it
/// ([`PgFence::IN_OPEN_TRANSACTION`]). A simple query (one message): the extended
/// protocol's Bind and Execute would each set the statement's time (see `OUTER_OPEN`).
///
/// Errors: [`PgFence::IN_OPEN_TRANSACTION`], or the query's own failure. Cost: one round
/// trip.
fn refuse_open_transaction(client: &mut Client) -> Result<(), StorageError> {
    let answer = client.simple_query(OUTER_OPEN).map_err(|e| {
        // A transaction of the caller's that failed answers nothing but this.
        if e.code() == Some(&postgres::error::SqlState::IN_FAILED_SQL_TRANSACTION) {
            StorageError::new(
                PgFence::IN_OPEN_TRANSACTION,
                "a transaction begun on this connection (through client(), or before the \
                 fence was made) has failed and was not ended: nothing was written; end it \
                 (ROLLBACK) first",
            )
        } else {
            StorageError::new("look for a transaction left open", e)
        }
    })?;
    let outer = answer.iter().find_map(|m| match m {
        postgres::SimpleQueryMessage::Row(r) => Some(r.get(0)),
        _ => None,
    });
    match outer {
        Some(Some("f")) => Ok(()),
        Some(Some("t")) => Err(StorageError::new(
            PgFence::IN_OPEN_TRANSACTION,
            "a transaction begun on this connection (through client(), or before the \
             fence was made) and not ended: the fence's own transaction would have joined \
             it, committed or rolled back with statements that are not the fence's; \
             nothing was written, and that transaction is still open: end it (COMMIT or \
             ROLLBACK) first",
        )),
        other => Err(StorageError::new(
            "look for a transaction left open",
            format!("an answer that is not a boolean: {other:?}"),
        )),
    }
}

/// Refuses a fence table found in place that is not [`create`]'s shape: an ordinary table
/// whose columns are exactly `resource bytea NOT NULL` and `highest bigint NOT NULL`, with
/// no default or generated value, and a unique index on `resource` alone (no expression,
/// no predicate, valid and not deferrable: what `ON CONFLICT` can use). Generated and
/// identity columns count as defaults. (Catalog columns of PostgreSQL 10 and later.) A
/// table made by hand or by another tool could hold `text` keys (which
/// the fence's `bytea` keys never equal, so a resource would have two highest tokens) or
/// a NULL highest (which no admission would ever overwrite, closing that resource for
/// good). It must also be logged (an `UNLOGGED` table is emptied by a crash and missing
/// on a promoted standby, while the data it guards is not: every highest token would be
/// forgotten, letting stale holders back in) and have no tables inheriting from it (whose
/// rows reads would see but its key would not). Row-level security, rules and triggers
/// someone added are not checked. Every name is read from `pg_catalog`, as the write
/// statements name theirs.
///
/// Errors: [`PgFence::NOT_OUR_TABLE`], describing the table found, or the look-up's own
/// failure. Cost: one round trip.
fn check_table(tx: &mut Transaction<'_>, table: &str) -> Result<(), StorageError> {
    let read = |e| StorageError::new("read the fence table's shape", e);
    let row = tx
        .query_typed_one(
            "SELECT c.relkind::text,
               pg_catalog.array_to_string(ARRAY(
                 SELECT a.attname::text OPERATOR(pg_catalog.||) ' '
                   OPERATOR(pg_catalog.||) pg_catalog.format_type(a.atttypid, a.atttypmod)
                   OPERATOR(pg_catalog.||) CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END
                   OPERATOR(pg_catalog.||) CASE WHEN a.atthasdef
                     OR a.attidentity OPERATOR(pg_catalog.<>) '' THEN ' DEFAULT' ELSE '' END
                 FROM pg_catalog.pg_attribute a
                 WHERE a.attrelid OPERATOR(pg_catalog.=) c.oid
                   AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped
                 ORDER BY a.attnum), ', '),
               EXISTS (SELECT 1 FROM pg_catalog.pg_index i
                 JOIN pg_catalog.pg_attribute k
                   ON k.attrelid OPERATOR(pg_catalog.=) c.oid
                  AND k.attname OPERATOR(pg_catalog.=) 'resource'
                 WHERE i.indrelid OPERATOR(pg_catalog.=) c.oid AND i.indisunique
                   AND i.indisvalid AND i.indimmediate
                   AND i.indnatts OPERATOR(pg_catalog.=) 1
                   AND i.indexprs IS NULL AND i.indpred IS NULL
                   AND i.indkey[0] OPERATOR(pg_catalog.=) k.attnum),
               c.relpersistence::text,
               EXISTS (SELECT 1 FROM pg_catalog.pg_inherits h
                 WHERE h.inhparent OPERATOR(pg_catalog.=) c.oid)
             FROM pg_catalog.pg_class c
             WHERE c.oid OPERATOR(pg_catalog.=) pg_catalog.to_regclass($1)::oid",
            &[(&table, Type::TEXT)],
        )
        .map_err(read)?;
    let kind: String = row.try_get(0).map_err(read)?;
    let columns: String = row.try_get(1).map_err(read)?;
    let keyed: bool = row.try_get(2).map_err(read)?;
    let persistence: String = row.try_get(3).map_err(read)?;
    let inherited: bool = row.try_get(4).map_err(read)?;
    let logged = persistence == "p";
    if kind == "r"
        && keyed
        && logged
        && !inherited
        && columns == "resource bytea NOT NULL, highest bigint NOT NULL"
    {
        return Ok(());
    }
    Err(StorageError::new(
        PgFence::NOT_OUR_TABLE,
        format!(
            "{table} is {} with columns ({columns}){}; the fence's is a table of \
             (resource bytea PRIMARY KEY, highest bigint NOT NULL CHECK (highest > 0)): \
             move its rows into one of that shape",
            match kind.as_str() {
                "r" => "a table",
                "p" => "a partitioned table",
                "v" => "a view",
                "m" => "a materialized view",
                "f" => "a foreign table",
                _ => "not a table",
            },
            [
                (!keyed, " and no unique index on resource alone"),
                (
                    !logged,
                    " and not logged (PostgreSQL empties an unlogged table after a crash \
                     and does not replicate it: every highest token would be forgotten)",
                ),
                (
                    inherited,
                    " and tables that inherit from it (their rows are read as its own but \
                     not checked by its key)",
                ),
            ]
            .iter()
            .filter(|(on, _)| *on)
            .map(|(_, why)| *why)
            .collect::<String>(),
        ),
    ))
}

/// The resource's highest token. Its operator is named in `pg_catalog`, as the admission's
/// is, so a `search_path` a write set cannot give `highest()` or a stale refusal another
/// `=`.
pub(crate) fn highest(table: &str) -> String {
    format!("SELECT highest FROM ONLY {table} WHERE resource OPERATOR(pg_catalog.=) $1")
}

/// `schema`.`FENCE_TABLE` as an SQL name, each part a quoted identifier (so any schema
/// name means itself: no case folding, no injection).
///
/// Errors: a schema name PostgreSQL cannot have: empty, longer than 63 bytes (its
/// `NAMEDATALEN` − 1; a longer one would be truncated, naming another schema), or with a
/// NUL; or one of PostgreSQL's own: `pg_…` (`pg_temp` above all: each session's
/// temporary schema, which would give every connection a fence of its own) and
/// `information_schema`. Cost: O(name length).
fn qualified(schema: &str) -> Result<String, StorageError> {
    if schema.is_empty() || schema.len() > 63 || schema.contains('\0') {
        return Err(StorageError::new(
            "name the fence table's schema",
            format!("{schema:?} is not a PostgreSQL schema name (1 to 63 bytes, no NUL)"),
        ));
    }
    if schema.starts_with("pg_") || schema == "information_schema" {
        return Err(StorageError::new(
            "name the fence table's schema",
            format!(
                "{schema:?} is one of PostgreSQL's own schemas (pg_temp would give every \
                 session a temporary fence of its own): name a schema every writer shares"
            ),
        ));
    }
    let quote = |id: &str| format!("\"{}\"", id.replace('"', "\"\""));
    Ok(format!("{}.{}", quote(schema), quote(crate::FENCE_TABLE)))
}

/// A fence in a PostgreSQL database: the table `fencelock_fence` (see
/// [`FENCE_TABLE`](crate::FENCE_TABLE)) in one named schema (`public` unless you choose
/// another, [`PgFence::in_schema`]), and every fenced write one transaction:
///
/// ```sql
/// SELECT statement_timestamp() <> transaction_timestamp()      -- a simple query; true: inside
///        OR txid_current_if_assigned() IS NOT NULL;            -- a transaction of yours: refused
/// BEGIN;
/// INSERT INTO "public"."fencelock_fence" AS f (resource, highest) VALUES ($1, $2)
///   ON CONFLICT (resource) DO UPDATE SET highest = EXCLUDED.highest
///   WHERE f.highest OPERATOR(pg_catalog.<=) EXCLUDED.highest
///   RETURNING f.highest, pg_catalog.txid_current();   -- no row: stale (then read the highest back)
/// -- your write, in the same transaction
/// SELECT pg_catalog.txid_current_if_assigned() OPERATOR(pg_catalog.=) $xid;  -- still the fence's transaction, not aborted
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
///
/// **One table for every writer.** The table is always named with its schema, never
/// looked up through the role's `search_path`: PostgreSQL's default path is
/// `"$user", public`, so an unqualified name would give each role that has a schema of
/// its own a fence of its own, and the two would not refuse each other's stale tokens.
/// A fence is also refused at construction when the connection's `search_path` finds
/// another `fencelock_fence` first (one made by an earlier build in a role's own schema,
/// or by hand): writers using that one would not see this one's tokens. Give
/// [`in_schema`](Self::in_schema) that schema, or move the rows and drop it.
pub struct PgFence {
    client: Client,
    /// The conditional upsert, for this fence's table.
    admit: String,
    /// The highest-token read, for this fence's table.
    highest: String,
}

impl PgFence {
    /// [`StorageError::what`] of a [`Fence::write`] (or a [`PgFence::in_schema`]) refused
    /// because the connection is inside a transaction of the caller's (a `BEGIN` sent
    /// through [`client`](Self::client), or before the fence was made, and not ended).
    /// Nothing was written; after a refused write that transaction is still open. (The
    /// probe that found it, one read-only `SELECT`, ran inside it: in a `REPEATABLE READ`
    /// or `SERIALIZABLE` transaction that had run no query yet, that takes its snapshot,
    /// and a later `SET TRANSACTION` in it fails; a probe cancelled by a
    /// `statement_timeout` aborts it.)
    pub const IN_OPEN_TRANSACTION: &'static str =
        "refused: the connection is inside a transaction of the caller's";

    /// [`StorageError::what`] of [`in_schema`](Self::in_schema)'s refusal of a fence table
    /// that is not the fence's own shape.
    pub const NOT_OUR_TABLE: &'static str = "refused: the fence table is not the fence's own";

    /// The schema [`new`](Self::new) keeps the fence table in.
    pub const DEFAULT_SCHEMA: &'static str = "public";

    /// A fence on `client` with its table in `public`: [`in_schema`](Self::in_schema)
    /// with [`DEFAULT_SCHEMA`](Self::DEFAULT_SCHEMA).
    ///
    /// Errors and cost: as there.
    pub fn new(client: Client) -> Result<Self, StorageError> {
        Self::in_schema(client, Self::DEFAULT_SCHEMA)
    }

    /// A fence on `client` with its table in `schema` (which must exist), creating the
    /// table if it is missing (so a role that may only read and write an existing table
    /// needs no CREATE on the schema). Every writer of a resource must use the same schema.
    ///
    /// The closure given to [`Fence::write`] must not end the transaction itself (no
    /// `COMMIT` or `ROLLBACK` statements): the fence commits or rolls back. One that does is
    /// reported (a [`StorageError`]) but not undone: what it ran after its own `COMMIT` or
    /// `ROLLBACK` committed statement by statement, outside the fence.
    ///
    /// Every fenced write is a transaction of its own: do not call [`Fence::write`] with a
    /// transaction of yours open on the client (a `BEGIN` sent through
    /// [`client`](Self::client)). Such a transaction, whether it has written or only read,
    /// is found before the fence's `BEGIN` (a statement's start time is its transaction's
    /// only when it is that transaction's first) and the write refused
    /// ([`IN_OPEN_TRANSACTION`](Self::IN_OPEN_TRANSACTION); nothing written, your
    /// transaction left open, its probe aside: see that constant).
    ///
    /// `client` must not be inside a transaction either: the look-up's transaction would
    /// commit it. Such a client is refused
    /// ([`IN_OPEN_TRANSACTION`](Self::IN_OPEN_TRANSACTION)) before anything but that probe is sent,
    /// and dropped with the error, as on any error: closing its connection rolls that
    /// transaction back.
    ///
    /// Errors: [`StorageError`] if `schema` is no schema name (empty, over 63 bytes, a
    /// NUL) or one of PostgreSQL's own (`pg_…`, `information_schema`), if `client` is
    /// inside a transaction, if the connection's `search_path` finds another `fencelock_fence` first
    /// (naming its schema), if the table found is not the fence's shape
    /// ([`NOT_OUR_TABLE`](Self::NOT_OUR_TABLE)), if the table cannot be found or created (a
    /// missing schema included). Cost: a transaction taking an advisory lock around a look-up and, if
    /// missing, `CREATE TABLE` (about six round trips; the transaction is `READ COMMITTED`
    /// whatever the connection's default); make one fence per connection
    /// and keep it. Its statements are not prepared (each is sent with its parameter
    /// types), so a fence works behind a pooler in transaction mode (PgBouncer).
    pub fn in_schema(mut client: Client, schema: &str) -> Result<Self, StorageError> {
        let table = qualified(schema)?;
        // Its transaction would commit the caller's. (The client goes with the error, so
        // the message says what becomes of that transaction then.)
        refuse_open_transaction(&mut client).map_err(|e| {
            if e.what() == Self::IN_OPEN_TRANSACTION {
                StorageError::new(
                    Self::IN_OPEN_TRANSACTION,
                    "the client was handed over inside a transaction of yours: the fence's \
                     table look-up would have committed it; nothing was written, and the client \
                     is dropped with this error, which closes its connection and rolls that \
                     transaction back",
                )
            } else {
                e
            }
        })?;
        // READ COMMITTED whatever the connection's default: under REPEATABLE READ or
        // SERIALIZABLE the snapshot would be taken as the advisory lock's statement starts,
        // before it waits for a constructor creating the table, and the look-up after the
        // wait would not see that table's catalog rows.
        let mut tx = client
            .build_transaction()
            .isolation_level(IsolationLevel::ReadCommitted)
            .start()
            .map_err(|e| StorageError::new("begin", e))?;
        // Sent with their parameter types, as every statement of the fence is (see below).
        tx.query_typed(
            "SELECT pg_catalog.pg_advisory_xact_lock($1)",
            &[(&CREATE_LOCK, Type::INT8)],
        )
        .map_err(|e| StorageError::new("lock for create", e))?;
        // Created only when missing: CREATE ... IF NOT EXISTS needs CREATE on the schema
        // even when the table exists, which a least-privilege role (SELECT, INSERT and
        // UPDATE on a table an administrator made) does not have.
        // Ours (NULL: missing), and whatever the search_path finds under the bare name,
        // with its schema. Every function, catalog and operator named in `pg_catalog`, as
        // the write's statements are: a schema the search_path lists before it cannot
        // answer for them.
        let (ours, found, found_in): (Option<u32>, Option<u32>, Option<String>) = tx
            .query_typed_one(
                "SELECT pg_catalog.to_regclass($1)::pg_catalog.oid, c.oid, n.nspname::pg_catalog.text
                 FROM (SELECT pg_catalog.to_regclass($2)::pg_catalog.oid AS oid) AS bare
                 LEFT JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) bare.oid
                 LEFT JOIN pg_catalog.pg_namespace n
                   ON n.oid OPERATOR(pg_catalog.=) c.relnamespace",
                &[(&table, Type::TEXT), (&crate::FENCE_TABLE, Type::TEXT)],
            )
            .and_then(|row| Ok((row.try_get(0)?, row.try_get(1)?, row.try_get(2)?)))
            .map_err(|e| StorageError::new("look for the fence table", e))?;
        if found.is_some_and(|f| Some(f) != ours) {
            return Err(StorageError::new(
                "find one fence table",
                format!(
                    "this connection's search_path finds {:?}.{} before {table}: writers \
                     using that table would not refuse this fence's stale tokens, nor it \
                     theirs; pass its schema to PgFence::in_schema (unless it is a \
                     temporary table), or move its rows into {table} and drop it",
                    found_in.as_deref().unwrap_or("?"),
                    crate::FENCE_TABLE
                ),
            ));
        }
        if ours.is_none() {
            tx.batch_execute(&create(&table))
                .map_err(|e| StorageError::new("create the fence table", e))?;
        }
        // Checked after the create as well: `IF NOT EXISTS` does nothing if a table of
        // that name was committed since the look-up (by hand, or by a tool the advisory
        // lock does not hold back), and what is there now is what every write will use.
        check_table(&mut tx, &table)?;
        tx.commit()
            .map_err(|e| StorageError::new("create the fence table", e))?;
        // Not prepared: a named prepared statement lives on one server connection, and
        // behind a pooler in transaction mode the next transaction may run on another —
        // where a statement of the same name may be another client's. Each statement is
        // sent with its parameter types instead (the extended protocol's unnamed
        // statement), which any pooler passes through whole.
        Ok(PgFence {
            client,
            admit: admit(&table),
            highest: highest(&table),
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

    /// After the fence rolled back a transaction that failed: whether its own
    /// transaction (id `xid`) committed anyway, ended by a `COMMIT` the write sent
    /// itself. False when the status cannot be read. Cost: one round trip.
    fn committed_anyway(&mut self, xid: i64) -> bool {
        self.client
            .query_typed_one(TXID_STATUS, &[(&xid, Type::INT8)])
            .ok()
            .and_then(|row| row.try_get::<_, Option<String>>(0).ok().flatten())
            .is_some_and(|s| s != "aborted")
    }
}

/// What a write that ended the fence's transaction itself is told.
const ENDED_ITSELF: &str = "the write ended the fence's transaction itself (a COMMIT or \
     ROLLBACK of its own): what it did may be partly committed, outside the fence; read your \
     data back";

impl Fence for PgFence {
    type Tx<'t> = Transaction<'t>;

    fn write<T, E, F>(&mut self, resource: &str, token: Token, write: F) -> Result<T, FenceError<E>>
    where
        F: FnOnce(&mut Transaction<'_>) -> Result<T, E>,
    {
        precheck(resource, token, true)?;
        let key = resource.as_bytes();
        let t = token.0 as i64; // in range: precheck

        refuse_open_transaction(&mut self.client)?;
        let mut tx = self
            .client
            .transaction()
            .map_err(|e| StorageError::new("begin", e))?;
        let admitted = tx
            .query_typed_opt(&self.admit, &[(&key, Type::BYTEA), (&t, Type::INT8)])
            .map_err(|e| StorageError::new("conditional upsert", e))?;
        let Some(admitted) = admitted else {
            let stored = tx
                .query_typed_opt(&self.highest, &[(&key, Type::BYTEA)])
                .map_err(|e| StorageError::new("read the highest token", e))?
                .map(|row| row.try_get::<_, i64>(0))
                .transpose()
                .map_err(|e| StorageError::new("read the highest token", e))?;
            return Err(stale(token, stored)); // dropping tx rolls back
        };
        let (stored, xid) = admitted
            .try_get::<_, i64>(0)
            .and_then(|h| Ok((h, admitted.try_get::<_, i64>(1)?)))
            .map_err(|e| StorageError::new("conditional upsert", e))?;
        if stored != t {
            return Err(
                StorageError::corrupt("conditional upsert: another value came back").into(),
            );
        }
        let out = match write(&mut tx) {
            Ok(out) => out,
            Err(e) => {
                // Rolled back here, not left to the drop — but first the same check as
                // before a COMMIT: a write that sent COMMIT (or ROLLBACK) of its own and
                // then failed has already ended the fence's transaction, and what it did
                // may have committed with the raise; that is not the certain rollback
                // `Write` says. An aborted transaction (the check fails with 25P02) is
                // still the fence's, and rolls back.
                let ended = matches!(
                    tx.query_typed_one(STILL_OURS, &[(&xid, Type::INT8)]),
                    Ok(row) if row.try_get::<_, Option<bool>>(0).ok().flatten() != Some(true)
                );
                let _ = tx.rollback();
                // A write that sent COMMIT, then BEGIN, and failed in its own transaction
                // leaves that one aborted (the check above fails as for one of ours): the
                // fence's own transaction is asked after by its id.
                if ended || self.committed_anyway(xid) {
                    return Err(StorageError::outcome_unknown(
                        "the fenced transaction",
                        "the write failed after it ended the fence's transaction itself (a \
                         COMMIT or ROLLBACK of its own): what it did, and the fence's raise, \
                         may be partly committed; read your data back",
                    )
                    .into());
                }
                return Err(FenceError::Write(e));
            }
        };
        // A statement error the closure swallowed leaves the transaction aborted, and
        // PostgreSQL answers COMMIT in an aborted transaction with ROLLBACK, not an error;
        // a closure that sent COMMIT or ROLLBACK of its own ended the fence's transaction,
        // and COMMIT then only warns. One statement first (STILL_OURS), which fails
        // (25P02) in an aborted transaction and is true only in the fence's own, so an
        // `Ok` always means the write and the fence's raise committed together.
        // (It reads no table: a read of the fence's row here would put a serializable
        // transaction's predicate lock on the fence table, and two fenced writes of
        // different resources would fail each other's commits as write skew; it would
        // also need SELECT on the table under whatever role the write set. So a write
        // that changes the fence's own row is not caught here, as it is in SQLite.)
        match tx.query_typed_one(STILL_OURS, &[(&xid, Type::INT8)]) {
            Ok(row) if row.try_get::<_, Option<bool>>(0).ok().flatten() == Some(true) => {}
            Ok(_) => {
                return Err(
                    StorageError::outcome_unknown("the fenced transaction", ENDED_ITSELF).into(),
                )
            }
            Err(e) => {
                if e.code() != Some(&postgres::error::SqlState::IN_FAILED_SQL_TRANSACTION) {
                    return Err(StorageError::new("check the transaction before commit", e).into());
                }
                // Aborted: the fence's transaction, or one the write began after a COMMIT
                // of its own (then the fence's committed, with the raise): asked after by
                // its id once this one is rolled back, as for a write that failed.
                let _ = tx.rollback();
                if self.committed_anyway(xid) {
                    return Err(StorageError::outcome_unknown(
                        "the fenced transaction",
                        ENDED_ITSELF,
                    )
                    .into());
                }
                return Err(StorageError::new("the write left the transaction aborted", e).into());
            }
        }
        tx.commit().map_err(|e| {
            // A deferred constraint (class 23) refuses the COMMIT itself: certain, rolled
            // back — not the unknown outcome of a commit that failed on the way.
            if e.code().is_some_and(|c| c.code().starts_with("23")) {
                StorageError::new(DEFERRED, e)
            } else if e.as_db_error().is_some_and(|d| match d.parsed_severity() {
                // The untranslated field: `severity()` is in the server's `lc_messages`
                // ("FEHLER", "ERREUR"…); a server before 9.6 sends only that one.
                Some(s) => s == postgres::error::Severity::Error,
                None => d.severity() == "ERROR",
            }) {
                // An ERROR the server answered COMMIT with (a serialization failure, a
                // deferred trigger's exception) aborted the transaction: certain, nothing
                // written. No answer (the connection lost) or a FATAL one (the server
                // ending the session, perhaps after the commit) leaves it unknown.
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
        let row = self
            .client
            .query_typed_opt(&self.highest, &[(&resource.as_bytes(), Type::BYTEA)])
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
