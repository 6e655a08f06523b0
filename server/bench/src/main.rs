//! `fencelock-bench-cluster`: the same lock workload against a fencelock cluster or an
//! etcd cluster (v3lock Lock/Unlock with a lease). Each client opens one session (etcd:
//! one lease, kept alive), then loops acquire → release until the time is up, recording
//! the latency of each acquire+release pair. Prints one JSON object.
//!
//! Both speak TLS when given `--tls-ca` (the CA that signed the nodes' certificates; etcd
//! endpoints are then `https://…`) and authenticate: fencelock's client with a bearer token
//! (`--auth-token-file`), etcd's with a client certificate (`--tls-cert`, `--tls-key`).
//!
//! Uncontended: each client its own lock. Contended: every client the same lock; then
//! throughput is the lock's hand-off rate. For fencelock it also counts the pushes each
//! client received: with no thundering herd, every push is the `Granted` of a waiting
//! acquire ("wasted" counts any other push).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use fencelock::{Mode, Output};
use fencelock_server::client::{Acquired, Client, ClientOptions, LeaseGuard};
use fencelock_server::protocol::WaitSpec;

#[derive(Parser, Clone)]
struct Args {
    /// fencelock or etcd.
    #[arg(long)]
    system: String,
    /// Client endpoints, comma-separated (etcd: http://host:port).
    #[arg(long)]
    endpoints: String,
    /// Concurrent clients.
    #[arg(long, default_value_t = 1)]
    clients: usize,
    /// All clients on one lock.
    #[arg(long)]
    contended: bool,
    /// Seconds to run.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// Scenario label for the report.
    #[arg(long, default_value = "")]
    label: String,
    /// The CA certificate (PEM) to verify the nodes' TLS certificates against; without
    /// it, plain TCP.
    #[arg(long)]
    tls_ca: Option<std::path::PathBuf>,
    /// fencelock: a file holding the bearer token to present.
    #[arg(long)]
    auth_token_file: Option<std::path::PathBuf>,
    /// etcd: the client certificate (PEM) to present (etcd with `--trusted-ca-file`
    /// requires one), with `--tls-key`.
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<std::path::PathBuf>,
    /// etcd: the client certificate's key (PEM).
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<std::path::PathBuf>,
}

#[derive(Default)]
struct Counters {
    pushes: AtomicU64,
    wasted: AtomicU64,
}

fn lock_name(a: &Args, i: usize) -> String {
    if a.contended {
        "bench/contended".into()
    } else {
        format!("bench/client-{i}")
    }
}

async fn fencelock_client(a: Args, i: usize, stop: Instant, c: Arc<Counters>) -> Vec<u64> {
    let tls = a
        .tls_ca
        .as_ref()
        .map(|ca| fencelock_server::tls::client_config(ca).expect("fencelock CA"));
    let token = a.auth_token_file.as_ref().map(|p| {
        std::fs::read_to_string(p)
            .expect("token file")
            .trim()
            .to_string()
    });
    let client = Client::with_options(
        a.endpoints.split(',').map(String::from).collect(),
        ClientOptions {
            token,
            tls,
            ..ClientOptions::default()
        },
    );
    let mut pushes = client.subscribe();
    let opened_at = Instant::now();
    let session = Arc::new(client.open_session(10_000).await.expect("open session"));
    let _guard = LeaseGuard::start(session.clone(), 10_000, 2_000, 2_000, opened_at).unwrap();
    let me = session.id();
    let counter = c.clone();
    let watcher = tokio::spawn(async move {
        while let Ok(o) = pushes.recv().await {
            counter.pushes.fetch_add(1, Ordering::Relaxed);
            if !matches!(o, Output::Granted { session, .. } if session.0 == me) {
                counter.wasted.fetch_add(1, Ordering::Relaxed);
            }
        }
    });
    let name = lock_name(&a, i);
    let mut lat = Vec::new();
    while Instant::now() < stop {
        let t0 = Instant::now();
        match session
            .acquire(&name, Mode::Exclusive, WaitSpec::Forever)
            .await
        {
            Ok(Acquired::Granted(_)) => {}
            other => panic!("acquire: {other:?}"),
        }
        session.release(&name).await.expect("release");
        lat.push(t0.elapsed().as_micros() as u64);
    }
    let _ = session.close().await;
    watcher.abort();
    lat
}

async fn etcd_client(a: Args, i: usize, stop: Instant) -> Vec<u64> {
    let eps: Vec<String> = a.endpoints.split(',').map(String::from).collect();
    let options = a.tls_ca.as_ref().map(|ca| {
        let pem = std::fs::read(ca).expect("etcd CA");
        let mut tls =
            etcd_client::TlsOptions::new().ca_certificate(etcd_client::Certificate::from_pem(pem));
        if let (Some(cert), Some(key)) = (&a.tls_cert, &a.tls_key) {
            tls = tls.identity(etcd_client::Identity::from_pem(
                std::fs::read(cert).expect("client certificate"),
                std::fs::read(key).expect("client key"),
            ));
        }
        etcd_client::ConnectOptions::new().with_tls(tls)
    });
    let mut client = etcd_client::Client::connect(eps, options)
        .await
        .expect("connect etcd");
    let lease = client.lease_grant(10, None).await.expect("lease").id();
    let (mut keeper, mut stream) = client.lease_keep_alive(lease).await.expect("keepalive");
    let ka = tokio::spawn(async move {
        loop {
            if keeper.keep_alive().await.is_err() {
                return;
            }
            let _ = stream.message().await;
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    });
    let name = lock_name(&a, i);
    let mut lat = Vec::new();
    while Instant::now() < stop {
        let t0 = Instant::now();
        let r = client
            .lock(
                name.as_str(),
                Some(etcd_client::LockOptions::new().with_lease(lease)),
            )
            .await
            .expect("etcd lock");
        client.unlock(r.key().to_vec()).await.expect("etcd unlock");
        lat.push(t0.elapsed().as_micros() as u64);
    }
    ka.abort();
    let _ = client.lease_revoke(lease).await;
    lat
}

fn pct(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i] as f64 / 1000.0
}

#[tokio::main]
async fn main() {
    let a = Args::parse();
    let counters = Arc::new(Counters::default());
    let start = Instant::now();
    let stop = start + Duration::from_secs(a.seconds);
    let mut tasks = Vec::new();
    for i in 0..a.clients {
        let a2 = a.clone();
        let c = counters.clone();
        tasks.push(tokio::spawn(async move {
            match a2.system.as_str() {
                "fencelock" => fencelock_client(a2, i, stop, c).await,
                _ => etcd_client(a2, i, stop).await,
            }
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("client task"));
    }
    let elapsed = start.elapsed().as_secs_f64();
    all.sort_unstable();
    println!(
        "{{\"system\":\"{}\",\"label\":\"{}\",\"clients\":{},\"contended\":{},\"ops\":{},\"seconds\":{:.2},\"ops_per_s\":{:.1},\"p50_ms\":{:.3},\"p99_ms\":{:.3},\"pushes\":{},\"wasted_pushes\":{}}}",
        a.system,
        a.label,
        a.clients,
        a.contended,
        all.len(),
        elapsed,
        all.len() as f64 / elapsed,
        pct(&all, 0.50),
        pct(&all, 0.99),
        counters.pushes.load(Ordering::Relaxed),
        counters.wasted.load(Ordering::Relaxed),
    );
}
