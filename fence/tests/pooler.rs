//! Behind a pooler in transaction mode (PgBouncer), a server connection serves many
//! clients in turn, and a named prepared statement left on it is another client's. The
//! `postgres` crate names the statements it prepares `s0`, `s1`, … from a counter that
//! starts at 0 in every process, so another client process has left exactly those names
//! behind. A fence prepares no statement at all — its constructor included — so it works
//! on such a connection. (A test binary of its own: here no other test moves the counter.)

mod common;

use fencelock::Token;
use fencelock_fence::{Fence, PgFence};

#[test]
fn postgres_fence_works_where_another_client_left_prepared_statements() {
    let pg = common::Postgres::start();
    let mut c = pg.connect();
    // What another client process left on the server connection: the names this
    // process's `postgres` crate would give its next prepared statements.
    let left: String = (0..256)
        .map(|n| format!("PREPARE s{n} AS SELECT {n};"))
        .collect();
    c.batch_execute(&left).unwrap();
    let mut f = PgFence::new(c).expect("a fence on a connection with s0, s1, … prepared");
    f.admit("ledger", Token(3)).unwrap();
    assert_eq!(
        f.admit("ledger", Token(2)).unwrap_err().stale_highest(),
        Some(Token(3))
    );
    assert_eq!(f.highest("ledger").unwrap(), Some(Token(3)));
    let mut f = PgFence::in_schema(f.into_inner(), "public").expect("made again");
    f.write("ledger", Token(4), |_| Ok::<_, ()>(())).unwrap();
    let left: i64 = f
        .client()
        .simple_query("SELECT count(*) FROM pg_prepared_statements")
        .unwrap()
        .iter()
        .find_map(|m| match m {
            postgres::SimpleQueryMessage::Row(r) => r.get(0)?.parse().ok(),
            _ => None,
        })
        .unwrap();
    assert_eq!(left, 256, "the other client's statements are untouched");
}
