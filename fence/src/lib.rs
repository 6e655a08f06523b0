//! # fencelock-fence — the resource checks the token, in real storage
//!
//! Fencing only works if **the resource** refuses a write whose token is lower than one it
//! has already seen. fencelock's [`FenceGate`](fencelock::FenceGate) is that check in
//! process; this crate puts the same rule in front of real storage, and makes the check and
//! the write **one atomic step**: a check followed by a separate write reopens the race
//! (between the two, a newer holder can write, and the older write then lands on top).
//!
//! One trait, [`Fence`]: `write(resource, token, |tx| …)` admits `token` for `resource`
//! and runs the caller's write inside the same transaction; either both happen or neither.
//!
//! | implementation | storage | what makes it atomic |
//! |---|---|---|
//! | [`GateFence`] | a `FenceGate` and the data it guards, in process (keyed with [`GateFence::with_name_key`] when others choose the names) | one mutex around check, write and admit |
//! | [`SqliteFence`] | an SQLite database (bundled build) | `BEGIN IMMEDIATE`: conditional upsert of the fence row, then the write, one transaction |
//! | [`PgFence`] | a PostgreSQL database | conditional upsert of the fence row (which locks it until commit), then the write, one transaction |
//!
//! The rule is `FenceGate`'s, answer for answer (the gate conformance vectors in
//! `tests/vectors/gate/` are replayed against every implementation): a token equal to the
//! highest seen is admitted (the same holder writes again), a higher one is admitted and
//! becomes the highest, a lower one is refused with
//! [`Error::Stale`]`{ token, highest }`, token 0 with [`Error::ZeroToken`], a bad name
//! with [`Error::EmptyName`] / [`Error::NameTooLong`]. Names and tokens are checked by the
//! core's own `FenceGate::check` before storage is touched; only the comparison with the
//! stored highest token runs in the database.
//!
//! The SQL fences store the highest token in a signed 64-bit column, so they refuse a
//! token above `i64::MAX` with [`FenceError::TokenOutOfRange`]. fencelock's own tokens
//! never get there: grants alone would take 292 years at a billion a second, and every
//! skip is bounded (the core refuses a revision floor above 2^62, `MAX_REVISION_FLOOR`,
//! which the server's `--skip-tokens` goes through; its `--token-floor` stops at
//! 2^53 − 1). A token from another issuer, or from a snapshot edited by hand, can.
//!
//! ```
//! use fencelock::{Error, Token};
//! use fencelock_fence::{Fence, FenceError, SqliteFence};
//!
//! let mut fence = SqliteFence::new(rusqlite::Connection::open_in_memory()?)?;
//! fence.connection().execute("CREATE TABLE ledger (entry TEXT)", [])?;
//! let pay = |tx: &mut rusqlite::Transaction<'_>| tx.execute("INSERT INTO ledger VALUES ('pay')", []);
//! fence.write("ledger", Token(35), pay)?;                       // B, the newer holder
//! match fence.write("ledger", Token(34), pay) {                 // A, back from a pause
//!     Err(FenceError::Refused(Error::Stale { highest, .. })) => assert_eq!(highest, Token(35)),
//!     other => panic!("stale write not refused: {other:?}"),
//! }
//! let n: i64 = fence.connection().query_row("SELECT count(*) FROM ledger", [], |r| r.get(0))?;
//! assert_eq!(n, 1);                                             // only B's write landed
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The same with PostgreSQL, as a worker run by `fencelock lock ledger -- ./pay` (the CLI
//! puts the grant's token in `FENCELOCK_TOKEN`):
//!
//! ```no_run
//! use fencelock::Token;
//! use fencelock_fence::{Fence, PgFence};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let token = Token(std::env::var("FENCELOCK_TOKEN")?.parse()?);
//! let db = postgres::Client::connect("host=/run/postgresql dbname=shop", postgres::NoTls)?;
//! let mut fence = PgFence::new(db)?; // creates public.fencelock_fence if missing
//! let paid = fence.write("ledger", token, |tx| {
//!     // the same transaction as the token check: both commit, or neither
//!     tx.execute("INSERT INTO ledger (amount) VALUES ($1)", &[&10_i64])
//! });
//! match paid {
//!     Ok(_) => println!("paid"),
//!     Err(e) if e.stale_highest().is_some() => eprintln!("refused: a newer holder wrote"),
//!     Err(e) => return Err(e.into()),
//! }
//! # Ok(())
//! # }
//! ```

#![deny(missing_docs)]
#![forbid(unsafe_code)]

use std::convert::Infallible;
use std::fmt;

pub use fencelock::{Error, Token};

mod gate;
mod pg;
mod sqlite;

pub use gate::GateFence;
pub use pg::PgFence;
pub use sqlite::SqliteFence;

/// The table the SQL fences keep their highest tokens in: one row per resource,
/// `(resource, highest)`, with `resource` the name's UTF-8 bytes (compared byte for byte,
/// like `FenceGate`) and `highest > 0`.
pub const FENCE_TABLE: &str = "fencelock_fence";

/// A fence in front of a resource: admits a write carrying a fencing token and makes it
/// in one atomic step.
pub trait Fence {
    /// What the write runs against: the open transaction (SQL fences) or the guarded data
    /// (in process). The write's effects become visible only together with the admit.
    type Tx<'t>
    where
        Self: 't;

    /// Admits `token` for `resource` and, in the same atomic step, runs `write`.
    ///
    /// On `Ok`, the write's effects and the new highest token (`max(highest, token)`) are
    /// both durable as far as the storage makes anything durable. On any `Err`, neither:
    /// the transaction is rolled back and the highest token is unchanged — except a
    /// failure at commit (outcome unknown, see [`FenceError::Storage`]) and, in
    /// PostgreSQL, a closure that ended the transaction itself (a `COMMIT` or `ROLLBACK`
    /// of its own, which it must not send): that is reported, but what it ran after
    /// ending it committed on its own, outside the fence. `write` must not touch the fence
    /// table either: deleting or lowering its resource's row would let the next stale
    /// token in (the SQLite fence refuses such a write before commit, with
    /// [`FenceError::Storage`] and nothing written; the PostgreSQL fence does not catch it).
    ///
    /// Errors: [`FenceError::Refused`] with [`Error::Stale`]`{ token, highest }` (a higher
    /// token was admitted before), [`Error::ZeroToken`], [`Error::EmptyName`],
    /// [`Error::NameTooLong`] (checked before storage is touched), or
    /// [`Error::CapacityExceeded`] (a full in-process gate); [`FenceError::TokenOutOfRange`]
    /// (SQL fences, token above `i64::MAX`); [`FenceError::Write`] with the error `write`
    /// returned; [`FenceError::Storage`] when the storage fails (connection lost, disk
    /// error, lock timeout) or, in PostgreSQL, the connection is inside a transaction of
    /// the caller's ([`PgFence::IN_OPEN_TRANSACTION`]: nothing written, that
    /// transaction left open). A storage failure at commit leaves the outcome unknown, as
    /// any database commit does: read back before retrying — except a deferred
    /// constraint's refusal of the commit (its message says so), which is certain: rolled
    /// back, nothing written.
    ///
    /// Cost: the in-process gate O(name length) plus the write, under one mutex; the SQL
    /// fences one transaction (PostgreSQL first sends one `SELECT` that finds a
    /// transaction of the caller's left open, see [`PgFence`]) — `BEGIN`, the conditional
    /// upsert, the write's statements, one more statement before `COMMIT` (PostgreSQL: a
    /// `SELECT` that finds a transaction the write left aborted or ended itself; SQLite:
    /// an indexed read of the fence row that finds its raise still there), `COMMIT` (a
    /// stale one: `BEGIN`, the upsert, one read, `ROLLBACK`) — with the
    /// resource's fence row locked until it ends, so writes to one resource are serialised
    /// and writes to different resources are not (SQLite serialises all writers of the
    /// database file anyway).
    fn write<T, E, F>(
        &mut self,
        resource: &str,
        token: Token,
        write: F,
    ) -> Result<T, FenceError<E>>
    where
        F: FnOnce(&mut Self::Tx<'_>) -> Result<T, E>;

    /// The highest token admitted for `resource`, if any (`None` too for a name no
    /// resource can have).
    ///
    /// Errors: [`StorageError`] when the storage fails or holds a row that breaks the
    /// table's rules (a token of 0 or less). Cost: one indexed read.
    fn highest(&mut self, resource: &str) -> Result<Option<Token>, StorageError>;

    /// Admits `token` for `resource` with nothing else written: [`write`](Self::write)
    /// with an empty write. It only raises the fence: its `Ok` grants nothing to a write
    /// made afterwards on another connection or transaction (that is the check-then-write
    /// race); fenced statements go through [`write`](Self::write)'s transaction.
    ///
    /// Errors: as [`write`](Self::write), never [`FenceError::Write`]. Cost: as `write`.
    fn admit(&mut self, resource: &str, token: Token) -> Result<(), FenceError<Infallible>> {
        self.write(resource, token, |_| Ok(()))
    }
}

/// Why a fenced write did not happen. In every case nothing was written and the highest
/// token is unchanged (but see [`FenceError::Storage`]: a failure at commit, and a
/// PostgreSQL write that ended the fence's transaction itself).
#[derive(Debug)]
#[non_exhaustive]
pub enum FenceError<E> {
    /// The fence refused the write: [`Error::Stale`] (the caller's lock is gone: stop
    /// acting on it), [`Error::ZeroToken`], [`Error::EmptyName`], [`Error::NameTooLong`],
    /// [`Error::CapacityExceeded`].
    Refused(Error),
    /// An SQL fence cannot store a token above `i64::MAX`.
    TokenOutOfRange(Token),
    /// The caller's write failed; the transaction was rolled back. (Its errors are the
    /// caller's to judge: under PostgreSQL's `REPEATABLE READ` or `SERIALIZABLE` one of its
    /// statements can fail with a serialization failure, which may be retried as a
    /// retryable [`StorageError`] is.)
    Write(E),
    /// The storage failed (see [`StorageError::is_retryable`] and
    /// [`StorageError::commit_refused`]), or, in PostgreSQL, the write ended the fence's
    /// transaction itself: what it ran after that committed outside the fence.
    Storage(StorageError),
}

impl<E> FenceError<E> {
    /// The highest token seen, if this is a stale refusal. Cost: O(1).
    pub fn stale_highest(&self) -> Option<Token> {
        match self {
            FenceError::Refused(Error::Stale { highest, .. }) => Some(*highest),
            _ => None,
        }
    }
}

impl<E> FenceError<E> {
    /// True for a [`FenceError::Storage`] that [`StorageError::is_retryable`] says may be
    /// retried as it is. Your write's own errors ([`FenceError::Write`]) are yours to judge.
    /// Cost: O(length of the source chain).
    pub fn is_retryable(&self) -> bool {
        matches!(self, FenceError::Storage(e) if e.is_retryable())
    }
}

impl<E> FenceError<E> {
    /// True for a [`FenceError::Storage`] that [`StorageError::may_have_committed`] says
    /// may have committed some of the write: read your data back. Every other error
    /// (a refusal, your write's own error, a storage failure before `COMMIT`) leaves
    /// nothing written. Cost: O(1).
    pub fn may_have_committed(&self) -> bool {
        matches!(self, FenceError::Storage(e) if e.may_have_committed())
    }
}

impl<E> From<StorageError> for FenceError<E> {
    fn from(e: StorageError) -> Self {
        FenceError::Storage(e)
    }
}

impl<E: fmt::Display> fmt::Display for FenceError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FenceError::Refused(e) => write!(f, "fence refused the write: {e}"),
            FenceError::TokenOutOfRange(t) => {
                write!(f, "{t} is above i64::MAX, which an SQL fence cannot store")
            }
            FenceError::Write(e) => write!(f, "the fenced write failed: {e}"),
            FenceError::Storage(e) => write!(f, "{e}"),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for FenceError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            FenceError::Write(e) => Some(e),
            FenceError::Storage(e) => Some(e),
            // The refusal's text is in this error's own message.
            FenceError::Refused(_) | FenceError::TokenOutOfRange(_) => None,
        }
    }
}

/// The storage failed: the database's own error, or a row that breaks the fence table's
/// rules.
#[derive(Debug)]
pub struct StorageError {
    what: &'static str,
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
    /// Some of the write, or the fence's raise, may have committed.
    unknown: bool,
}

/// What a [`StorageError`] says when a deferred constraint refused the commit: the write
/// broke it, the transaction was rolled back, nothing was written (certain, unlike other
/// failures at commit).
pub(crate) const DEFERRED: &str =
    "commit refused by a deferred constraint the write broke (rolled back: nothing was written)";

impl StorageError {
    pub(crate) fn new(
        what: &'static str,
        source: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Self {
        StorageError {
            what,
            source: Some(source.into()),
            unknown: false,
        }
    }

    /// A failure after which some of the write, or the fence's raise, may have committed
    /// ([`may_have_committed`](Self::may_have_committed)).
    pub(crate) fn outcome_unknown(
        what: &'static str,
        source: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Self {
        StorageError {
            unknown: true,
            ..StorageError::new(what, source)
        }
    }

    pub(crate) fn corrupt(what: &'static str) -> Self {
        StorageError {
            what,
            source: None,
            unknown: false,
        }
    }

    /// What the fence was doing, or which rule a stored row broke. Cost: O(1).
    pub fn what(&self) -> &'static str {
        self.what
    }

    /// True when a deferred constraint the write broke refused the `COMMIT`: unlike any
    /// other failure at commit, the outcome is known — rolled back, nothing written, the
    /// highest token unchanged. Cost: O(1).
    pub fn commit_refused(&self) -> bool {
        self.what == DEFERRED
    }

    /// True when some of what the write did, or the fence's raise of the highest token,
    /// may have committed: a `COMMIT` whose outcome the database did not say (PostgreSQL:
    /// no answer, the connection lost, or a `FATAL` one, the server ending the session;
    /// SQLite: an error other than busy, such as an I/O error), or, in PostgreSQL, a write
    /// that ended the fence's transaction itself (a `COMMIT` or `ROLLBACK` of its own).
    /// Read your data back before you write again. False for every other storage error:
    /// the fence never sent `COMMIT`, or the database refused it and rolled back (an
    /// `ERROR` answer in PostgreSQL — a deferred constraint, a serialization failure, a
    /// deferred trigger's exception — or SQLite busy), so nothing of the write and no raise
    /// committed — unless the write itself committed behind the fence's back in a way it
    /// could not see (a write must not end its transaction; the fence catches the ways the
    /// docs list). Cost: O(1).
    pub fn may_have_committed(&self) -> bool {
        self.unknown
    }

    /// True when the same write may simply be made again (nothing was written): a
    /// PostgreSQL serialization failure (SQLSTATE 40001, under `REPEATABLE READ` or
    /// `SERIALIZABLE`), deadlock (40P01), a lock wait past `lock_timeout` (55P03) or a
    /// statement cancelled by `statement_timeout` (57014; PostgreSQL reports a cancel by
    /// `pg_cancel_backend` the same way), or SQLite still busy or locked after the busy
    /// timeout. Each ended the transaction with nothing of it written. Never when
    /// [`may_have_committed`](Self::may_have_committed): a write that may have committed
    /// is not made again blindly, whatever its cause says. Cost: O(length of the source
    /// chain).
    pub fn is_retryable(&self) -> bool {
        use postgres::error::SqlState;
        if self.unknown {
            return false;
        }
        let mut next: Option<&(dyn std::error::Error + 'static)> = self
            .source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static));
        while let Some(e) = next {
            if let Some(pg) = e.downcast_ref::<postgres::Error>() {
                if let Some(code) = pg.code() {
                    return [
                        SqlState::T_R_SERIALIZATION_FAILURE,
                        SqlState::T_R_DEADLOCK_DETECTED,
                        SqlState::LOCK_NOT_AVAILABLE,
                        SqlState::QUERY_CANCELED,
                    ]
                    .contains(code);
                }
            }
            if let Some(rusqlite::Error::SqliteFailure(f, _)) = e.downcast_ref::<rusqlite::Error>()
            {
                return matches!(
                    f.code,
                    rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
                );
            }
            next = e.source();
        }
        false
    }
}

/// Includes the whole source chain: a database client's own message is often only its
/// outermost layer ("db error"), with what went wrong in the sources.
impl fmt::Display for StorageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.source {
            Some(e) => {
                write!(f, "fence storage failed ({}): {e}", self.what)?;
                let mut next = e.source();
                while let Some(s) = next {
                    write!(f, ": {s}")?;
                    next = s.source();
                }
                Ok(())
            }
            None => write!(f, "fence storage failed: {}", self.what),
        }
    }
}

impl std::error::Error for StorageError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// What an SQL fence's [`Fence::write`] refuses before storage is touched, for a caller
/// that wants to know before it connects or does its work (as `fencelock-fence-write`
/// does): [`FenceError::Refused`] with [`Error::ZeroToken`], [`Error::EmptyName`] or
/// [`Error::NameTooLong`] (the core's own checks, in its order), then
/// [`FenceError::TokenOutOfRange`]. `Ok` promises nothing about the stored highest token.
/// Cost: O(name length).
pub fn check_sql_input(resource: &str, token: Token) -> Result<(), FenceError<Infallible>> {
    precheck(resource, token, true)
}

/// The checks made before storage is touched, by the core's own rule: token 0, then the
/// name; for the SQL fences, a token their column cannot hold.
fn precheck<E>(resource: &str, token: Token, sql: bool) -> Result<(), FenceError<E>> {
    // A one-row gate that has seen nothing answers exactly the input checks of `admit`.
    fencelock::FenceGate::new([fencelock::GateRow::EMPTY])
        .and_then(|gate| gate.check(resource, token))
        .map_err(FenceError::Refused)?;
    if sql && i64::try_from(token.0).is_err() {
        return Err(FenceError::TokenOutOfRange(token));
    }
    Ok(())
}

/// Whether `resource` is a name a resource can have (the core's checks: not empty, not
/// too long). An SQL fence's `highest` answers `None` for any other without asking the
/// database, as [`fencelock::FenceGate::highest`] does, whatever a hand-made row holds.
/// Cost: O(1).
fn nameable(resource: &str) -> bool {
    precheck::<()>(resource, Token(1), false).is_ok()
}

/// A token read back from an SQL fence table: must be positive.
fn stored_token(h: i64) -> Result<Token, StorageError> {
    u64::try_from(h)
        .ok()
        .filter(|&h| h > 0)
        .map(Token)
        .ok_or(StorageError::corrupt(
            "the fence table holds a token of 0 or less",
        ))
}

/// The stale refusal after the conditional upsert changed no row: the stored highest must
/// be above `token`, or the table changed under the transaction's lock.
fn stale<E>(token: Token, stored: Option<i64>) -> FenceError<E> {
    match stored.map(stored_token) {
        Some(Ok(highest)) if highest > token => {
            FenceError::Refused(Error::Stale { token, highest })
        }
        Some(Err(e)) => FenceError::Storage(e),
        _ => FenceError::Storage(StorageError::corrupt(
            "the conditional write changed no row, yet no higher token is stored",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cause that would be retried (SQLite busy) is not, once the outcome is unknown:
    /// the caller must find out whether the write committed before it makes it again.
    #[test]
    fn an_error_that_may_have_committed_is_never_retryable() {
        let busy = || {
            rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
                None,
            )
        };
        let certain = StorageError::new("commit", busy());
        assert!(certain.is_retryable() && !certain.may_have_committed());
        let unknown = StorageError::outcome_unknown("commit", busy());
        assert!(unknown.may_have_committed());
        assert!(!unknown.is_retryable(), "{unknown}");
        assert!(!FenceError::<()>::Storage(unknown).is_retryable());
    }

    #[test]
    fn precheck_is_the_cores_order_then_the_sql_range() {
        let p = |r: &str, t: u64, sql: bool| precheck::<()>(r, Token(t), sql);
        assert!(matches!(
            p("", 0, true),
            Err(FenceError::Refused(Error::ZeroToken))
        ));
        assert!(matches!(
            p("", 1, true),
            Err(FenceError::Refused(Error::EmptyName))
        ));
        assert!(matches!(
            p(&"n".repeat(65), 1, true),
            Err(FenceError::Refused(Error::NameTooLong { len: 65, max: 64 }))
        ));
        assert!(p("r", i64::MAX as u64, true).is_ok());
        assert!(
            matches!(p("r", 1 << 63, true), Err(FenceError::TokenOutOfRange(Token(t))) if t == 1 << 63)
        );
        assert!(p("r", u64::MAX, false).is_ok());
    }

    #[test]
    fn a_stored_token_must_be_positive_and_above_a_stale_one() {
        assert_eq!(stored_token(7).unwrap(), Token(7));
        assert!(stored_token(0).is_err() && stored_token(-1).is_err());
        assert_eq!(
            stale::<()>(Token(3), Some(7)).stale_highest(),
            Some(Token(7))
        );
        // Nothing higher stored, yet the conditional write changed no row: not "stale".
        for stored in [None, Some(3), Some(2), Some(-4)] {
            assert!(
                matches!(stale::<()>(Token(3), stored), FenceError::Storage(_)),
                "{stored:?}"
            );
        }
    }

    #[test]
    fn the_sql_names_the_documented_table_with_its_schema() {
        for sql in [sqlite::CREATE, sqlite::ADMIT, sqlite::HIGHEST] {
            assert!(sql.contains(&format!("main.{FENCE_TABLE} ")), "{sql}");
        }
        let table = format!("\"public\".\"{FENCE_TABLE}\"");
        for sql in [pg::create(&table), pg::admit(&table), pg::highest(&table)] {
            assert!(sql.contains(&format!("{table} ")), "{sql}");
        }
    }
}
