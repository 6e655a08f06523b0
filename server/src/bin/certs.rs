//! `fencelock-certs`: a development CA and node certificates for a local or test cluster.
//!
//! ```text
//! fencelock-certs --dir DIR --node 1=127.0.0.1 --node 2=127.0.0.2,host2.example --node 3=127.0.0.3
//! ```
//! writes `DIR/ca.pem` (give it to clients and nodes as the CA) and, per node,
//! `DIR/node-ID.pem` and `DIR/node-ID.key` (mode 0600). Each node certificate names
//! `fencelock-node-ID` (what peers check) and the listed hosts (what clients check). The
//! CA's key is not kept: to add a node later, make a new set. For production, issue the
//! same names from your own CA.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use clap::Parser;
use fencelock_server::tls::DevCa;

#[derive(Parser)]
#[command(about = "Make a development CA and fencelock node certificates")]
struct Args {
    /// Output directory (created).
    #[arg(long)]
    dir: PathBuf,
    /// A node: ID=HOST[,HOST…] (IP addresses or DNS names clients dial).
    #[arg(long = "node", required = true)]
    nodes: Vec<String>,
}

/// Writes `text` to `path` whole: into a new private file beside it, fsynced, then
/// renamed into place (so a crash or a second run leaves the old file or the new one,
/// never half of either), and given `mode` (a key stays private throughout; a
/// certificate becomes readable once it is whole).
fn write(path: &Path, text: &str, mode: u32) -> Result<(), String> {
    fencelock_server::disk::write_file_synced(path, text.as_bytes()).map_err(|e| e.to_string())?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| format!("{}: {e}", path.display()))
}

fn run(args: Args) -> Result<(), String> {
    std::fs::create_dir_all(&args.dir).map_err(|e| format!("{}: {e}", args.dir.display()))?;
    let ca = DevCa::new()?;
    write(&args.dir.join("ca.pem"), &ca.cert_pem(), 0o644)?;
    for n in &args.nodes {
        let (id, hosts) = n.split_once('=').ok_or("a node is ID=HOST[,HOST…]")?;
        let id: u64 = id.parse().map_err(|e| format!("bad id {id}: {e}"))?;
        let hosts: Vec<&str> = hosts.split(',').filter(|h| !h.is_empty()).collect();
        let pem = ca.node(id, &hosts)?;
        write(&args.dir.join(format!("node-{id}.pem")), &pem.cert, 0o644)?;
        write(&args.dir.join(format!("node-{id}.key")), &pem.key, 0o600)?;
    }
    Ok(())
}

fn main() {
    if let Err(e) = run(Args::parse()) {
        fencelock_server::stdio::note(&format!("fencelock-certs: {e}"));
        std::process::exit(1);
    }
}
