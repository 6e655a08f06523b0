//! The client library's embedding example (the top-level README shows `main`): holds one
//! lock of a running cluster, writes with its fencing token while the lease is safe and
//! the hold stands, and lets it go. The cluster's addresses, CA and token come from the variables `fencelock`
//! reads (`make cluster` prints them); `scripts/test-server.sh` runs it against a cluster.
//!
//! `cargo run -p fencelock-server --example hold_lock`

use std::sync::Arc;
use std::time::Duration;

use fencelock::Mode;
use fencelock_server::client::{
    Acquired, Client, ClientOptions, LeaseGuard, LeaseInstant, Timeouts,
};
use fencelock_server::protocol::WaitSpec;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let var = |k: &str| std::env::var(k).map_err(|_| format!("{k} is not set"));
    let bearer = std::fs::read_to_string(var("FENCELOCK_AUTH_TOKEN_FILE")?)?;
    let tls = fencelock_server::tls::client_config(var("FENCELOCK_TLS_CA")?.as_ref())?;
    let addrs = var("FENCELOCK_CLUSTER")?
        .split(',')
        .map(String::from)
        .collect();
    let ttl_ms = 10_000;
    let timeouts = Timeouts::for_ttl(ttl_ms);
    let client = Client::with_options(
        addrs,
        ClientOptions {
            token: Some(bearer.trim().into()),
            tls: Some(tls),
            timeouts,
        },
    );
    let opened_at = LeaseInstant::now(); // before the open: the lease counts from here
    let session = Arc::new(client.open_session(ttl_ms).await?);
    // Keep-alives every ttl/4; safe while one sent less than ttl − ttl/5 ago was acked.
    let guard = LeaseGuard::start_at(session.clone(), ttl_ms, ttl_ms / 4, ttl_ms / 5, opened_at)?;
    let lock = "jobs/reindex";
    let Acquired::Granted(fence) = session
        .acquire(lock, Mode::Exclusive, WaitSpec::Forever)
        .await?
    else {
        return Err("not granted".into());
    };
    // The lease says nothing of an administrator's forced release: watch the hold too,
    // and ask both before each write (here one write, as soon as the lock is held).
    let hold = session.watch_hold(lock, fence, Duration::from_millis(ttl_ms / 4));
    if guard.may_act() && hold.ended_now().is_none() {
        // The resource checks the token (a FenceGate, or fencelock-fence in SQL).
        println!("writing as the holder of {lock}, token {}", fence.0);
    }
    session.release(lock).await?;
    session.close().await?;
    Ok(())
}
