//! TLS (rustls, with the *ring* provider): server-authenticated TLS on the client port, and
//! mutual TLS between peers on the Raft port.
//!
//! One cluster CA signs every node's certificate. A node's certificate names the node —
//! the DNS name [`node_name`]`(id)`, `fencelock-node-<id>` — and the addresses clients dial
//! (IP addresses or DNS names). So:
//!
//! * a **client** verifies the node it dials against the CA, for the host part of the
//!   address it dialled ([`server_name`]); it authenticates itself with a bearer token
//!   ([`crate::auth::Tokens`]), not a certificate;
//! * a **node dialling a peer** verifies the peer's certificate against the CA for the name
//!   `fencelock-node-<target id>`, and presents its own certificate;
//! * a **node accepting a peer** requires a certificate signed by the CA, and then checks
//!   every Raft request against it ([`check_peer`]): the node the request says it comes
//!   from (the vote's node) must be the node the certificate names, and a member of the
//!   cluster (voter or learner) as this node knows it. So a program without a member's
//!   certificate and key cannot vote, append or install a snapshot, and neither can a node
//!   removed from the cluster. A node that knows no membership yet — before `--init`
//!   reaches it, or a new node before its first entry — serves only the nodes its operator
//!   listed for that time (`fencelock-node`'s `--peer` list: [`crate::net::PeerPolicy`]'s
//!   `first_peers`): were it to take any certificate of the CA then, a removed member's
//!   could give it a membership and state of its own making, or a vote in a term the
//!   cluster's elections cannot follow. One exception keeps a node that missed a
//!   membership change from being left
//!   behind: a node it does not know as a member may append and install snapshots (never
//!   vote) as leader, under exactly the committed vote a member it knows says it follows
//!   ([`crate::election::Elector::vouched`], learned from pre-vote answers).
//!
//! Certificates and keys are read from PEM files ([`NodeTls::load`],
//! [`client_config`]); `fencelock-certs` makes a development CA and node certificates.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio_rustls::{TlsAcceptor, TlsConnector};

use crate::types::{NodeId, Raft};

/// How long a TLS handshake may take before the connection is dropped.
pub const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The DNS name a node's certificate carries for its id: `fencelock-node-<id>`. Cost: O(1).
pub fn node_name(id: NodeId) -> String {
    format!("fencelock-node-{id}")
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Every certificate in a PEM file.
///
/// Errors: I/O, a file over [`MAX_PEM_FILE`] bytes, a PEM section that does not parse, or
/// no certificate; described with the path. Cost: O(file).
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let pem = read_pem(path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no certificate", path.display()));
    }
    Ok(certs)
}

/// The private key in a PEM file (PKCS#8, PKCS#1 or SEC1).
///
/// Errors: I/O, a file over [`MAX_PEM_FILE`] bytes, or no key that parses; described with
/// the path. Cost: O(file).
pub fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    PrivateKeyDer::from_pem_slice(&read_pem(path)?).map_err(|e| format!("{}: {e}", path.display()))
}

/// The largest PEM file (certificates, a CA bundle, a key) a node reads: 1 MiB, several
/// times a system's whole CA bundle.
pub const MAX_PEM_FILE: u64 = 1 << 20;

/// The bytes of the PEM file at `path`. Errors: I/O, or over [`MAX_PEM_FILE`] bytes;
/// described with the path. Cost: O(file).
fn read_pem(path: &Path) -> Result<Vec<u8>, String> {
    crate::disk::read_capped(path, MAX_PEM_FILE).map_err(|e| format!("{}: {e}", path.display()))
}

fn roots(ca: &[CertificateDer<'static>]) -> Result<Arc<RootCertStore>, String> {
    let mut roots = RootCertStore::empty();
    for c in ca {
        roots
            .add(c.clone())
            .map_err(|e| format!("CA certificate: {e}"))?;
    }
    Ok(Arc::new(roots))
}

/// A client's TLS configuration: nodes are verified against the CA certificates in
/// `ca`; no client certificate.
///
/// Errors: the CA does not load or is not a usable trust anchor. Cost: O(file).
pub fn client_config(ca: &Path) -> Result<Arc<ClientConfig>, String> {
    client_config_from(&load_certs(ca)?)
}

/// [`client_config`] from certificates in memory. Errors: as there.
pub fn client_config_from(ca: &[CertificateDer<'static>]) -> Result<Arc<ClientConfig>, String> {
    let cfg = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots(ca)?)
        .with_no_client_auth();
    Ok(Arc::new(cfg))
}

/// The name a client checks a node's certificate for: the host part of `addr`
/// (`host:port`, `[v6]:port`), as an IP address or a DNS name.
///
/// Errors: no port, or a host that is neither. Cost: O(len).
pub fn server_name(addr: &str) -> Result<ServerName<'static>, String> {
    let (host, _port) = addr
        .rsplit_once(':')
        .ok_or_else(|| format!("address {addr} has no port"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_string()).map_err(|e| format!("address {addr}: {e}"))
}

/// A node's TLS: its acceptor for clients, its acceptor for peers (client certificate
/// required) and its connector to peers (presenting its certificate). Cheap to clone.
#[derive(Clone)]
pub struct NodeTls {
    /// For the client port (server authentication only).
    pub clients: TlsAcceptor,
    /// For the Raft port (mutual: the peer's certificate must be signed by the CA).
    pub peers: TlsAcceptor,
    /// For dialling peers.
    pub dial: TlsConnector,
}

impl NodeTls {
    /// Loads the cluster CA (`ca`), this node's certificate chain (`cert`) and key (`key`)
    /// from PEM files.
    ///
    /// Errors: a file that does not load, a key that does not match the certificate, a
    /// CA that is not a usable trust anchor; described. Cost: O(files).
    pub fn load(ca: &Path, cert: &Path, key: &Path) -> Result<NodeTls, String> {
        NodeTls::from_parts(&load_certs(ca)?, load_certs(cert)?, load_key(key)?)
    }

    /// [`NodeTls::load`] from certificates and key in memory. Errors: as there.
    pub fn from_parts(
        ca: &[CertificateDer<'static>],
        cert: Vec<CertificateDer<'static>>,
        key: PrivateKeyDer<'static>,
    ) -> Result<NodeTls, String> {
        let roots = roots(ca)?;
        let server = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_no_client_auth()
            .with_single_cert(cert.clone(), key.clone_key())
            .map_err(|e| format!("node certificate: {e}"))?;
        let verifier = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider())
            .build()
            .map_err(|e| format!("CA certificate: {e}"))?;
        let peer_server = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_client_cert_verifier(verifier)
            .with_single_cert(cert.clone(), key.clone_key())
            .map_err(|e| format!("node certificate: {e}"))?;
        let dial = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_client_auth_cert(cert, key)
            .map_err(|e| format!("node certificate: {e}"))?;
        Ok(NodeTls {
            clients: TlsAcceptor::from(Arc::new(server)),
            peers: TlsAcceptor::from(Arc::new(peer_server)),
            dial: TlsConnector::from(Arc::new(dial)),
        })
    }
}

/// Whether a Raft request that says it comes from node `from` may be served on a
/// connection whose peer presented `cert` (already verified against the CA): the
/// certificate must name `from` ([`node_name`]), and `from` must be a member (voter or
/// learner) of the membership `raft` knows — or, while it knows none yet, one of `first`
/// (the nodes the operator listed for that time) — unless
/// `vouched_leader()` says the request is a leader's under a vote a member follows (an
/// append or snapshot under `from`'s committed vote, which a member this node knows said
/// it follows: [`crate::election::Elector::vouched`]; asked only for a non-member): a
/// node that missed `from`'s addition learns it only from `from`'s entries. Votes and
/// pre-votes are never served from a node that is not a member (or, before a membership,
/// one of `first`).
///
/// Errors: the reason, when it may not. Cost: one certificate name check, a metrics read.
pub fn check_peer(
    raft: &Raft,
    cert: &CertificateDer<'_>,
    from: NodeId,
    first: &BTreeSet<NodeId>,
    vouched_leader: impl FnOnce() -> bool,
) -> Result<(), String> {
    let ee = webpki::EndEntityCert::try_from(cert).map_err(|e| format!("peer certificate: {e}"))?;
    let name = ServerName::try_from(node_name(from)).map_err(|e| e.to_string())?;
    ee.verify_is_valid_for_subject_name(&name)
        .map_err(|_| format!("the peer's certificate is not node {from}'s"))?;
    let m = raft.metrics().borrow().membership_config.clone();
    let members = m.membership();
    if members.nodes().next().is_none() {
        if first.contains(&from) {
            return Ok(());
        }
        return Err(format!(
            "node {from} is not among the nodes this node serves before it knows a membership"
        ));
    }
    if members.get_node(&from).is_none() && !vouched_leader() {
        return Err(format!("node {from} is not a member"));
    }
    Ok(())
}

/// Whether the peer that presented `cert` (already verified against the CA) may send Raft
/// requests at all: its certificate names a member (voter or learner) of the membership
/// `raft` knows, or one of `vouched` (leaders whose votes members this node knows
/// follow: [`crate::election::Elector::vouched_leaders`]), or, while `raft` knows no
/// membership yet, one of `first`.
/// Checked when a peer connects, before a byte it sends is decoded, so a holder of a
/// certificate of this CA that is not a member's (a node removed, a certificate issued
/// for something else) cannot make a node decode anything; each request is still checked
/// by [`check_peer`], as membership changes.
///
/// Errors: the reason, when it may not. Cost: one certificate parse, a metrics read, one
/// name check per member and vouched leader.
pub fn check_member_cert(
    raft: &Raft,
    cert: &CertificateDer<'_>,
    vouched: &BTreeSet<NodeId>,
    first: &BTreeSet<NodeId>,
) -> Result<(), String> {
    let ee = webpki::EndEntityCert::try_from(cert).map_err(|e| format!("peer certificate: {e}"))?;
    let m = raft.metrics().borrow().membership_config.clone();
    let members = m.membership();
    let names = |id: NodeId| {
        ServerName::try_from(node_name(id))
            .is_ok_and(|n| ee.verify_is_valid_for_subject_name(&n).is_ok())
    };
    if members.nodes().next().is_none() {
        if first.iter().any(|id| names(*id)) {
            return Ok(());
        }
        return Err(
            "the peer's certificate names none of the nodes this node serves before it knows a membership".into(),
        );
    }
    if members.nodes().any(|(id, _)| names(*id)) || vouched.iter().any(|id| names(*id)) {
        Ok(())
    } else {
        Err("the peer's certificate names no member".into())
    }
}

/// A development certificate authority (rcgen): a fresh CA key and certificate, and
/// node certificates signed by it. For tests and `fencelock-certs` (`make cluster`); a
/// production cluster uses its own PKI with the same names ([`node_name`] plus the
/// addresses clients dial).
pub struct DevCa {
    issuer: rcgen::CertifiedIssuer<'static, rcgen::KeyPair>,
}

/// A certificate and its key, PEM-encoded.
pub struct Pem {
    /// The certificate.
    pub cert: String,
    /// Its private key (PKCS#8).
    pub key: String,
}

impl DevCa {
    /// A new CA (ECDSA P-256, valid from now on for rcgen's default period).
    ///
    /// Errors: rcgen's (key generation). Cost: one key generation.
    pub fn new() -> Result<DevCa, String> {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyUsagePurpose};
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(|e| e.to_string())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "fencelock development CA");
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = rcgen::KeyPair::generate().map_err(|e| e.to_string())?;
        let issuer = rcgen::CertifiedIssuer::self_signed(params, key).map_err(|e| e.to_string())?;
        Ok(DevCa { issuer })
    }

    /// The CA certificate (PEM): what clients and nodes trust.
    pub fn cert_pem(&self) -> String {
        self.issuer.pem()
    }

    /// The CA certificate (DER).
    pub fn cert_der(&self) -> CertificateDer<'static> {
        self.issuer.der().clone()
    }

    /// A certificate for node `id` reachable at `hosts` (IP addresses or DNS names), for
    /// both TLS server and client use; it names [`node_name`]`(id)` too.
    ///
    /// Errors: a host that is not a valid name; rcgen's. Cost: one key generation.
    pub fn node(&self, id: NodeId, hosts: &[&str]) -> Result<Pem, String> {
        self.leaf(&node_name(id), hosts)
    }

    /// A certificate for `name` and `hosts` signed by this CA (a node's, or — in tests —
    /// a non-member's). Errors and cost: as [`DevCa::node`].
    pub fn leaf(&self, name: &str, hosts: &[&str]) -> Result<Pem, String> {
        use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose, KeyUsagePurpose};
        let mut names = vec![name.to_string()];
        names.extend(hosts.iter().map(|h| h.to_string()));
        let mut params = CertificateParams::new(names).map_err(|e| e.to_string())?;
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let key = rcgen::KeyPair::generate().map_err(|e| e.to_string())?;
        let cert = params
            .signed_by(&key, &self.issuer)
            .map_err(|e| e.to_string())?;
        Ok(Pem {
            cert: cert.pem(),
            key: key.serialize_pem(),
        })
    }
}

impl Pem {
    /// The node TLS of this certificate and key under the CA `ca` (PEM).
    ///
    /// Errors: as [`NodeTls::from_parts`]. Cost: parsing.
    pub fn node_tls(&self, ca: &CertificateDer<'static>) -> Result<NodeTls, String> {
        let certs = CertificateDer::pem_slice_iter(self.cert.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| e.to_string())?;
        let key = PrivateKeyDer::from_pem_slice(self.key.as_bytes()).map_err(|e| e.to_string())?;
        NodeTls::from_parts(std::slice::from_ref(ca), certs, key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A node's certificate and key load from their PEM files; a file over
    /// [`MAX_PEM_FILE`] (or a device with no end, named by mistake) is refused, naming it.
    #[test]
    fn pem_files_load_and_an_oversized_one_is_refused() {
        let d = std::env::temp_dir().join(format!("fencelock-pemcap-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let ca = DevCa::new().unwrap();
        let pem = ca.node(1, &["127.0.0.1"]).unwrap();
        let (cert, key) = (d.join("node.pem"), d.join("node.key"));
        std::fs::write(&cert, &pem.cert).unwrap();
        std::fs::write(&key, &pem.key).unwrap();
        assert_eq!(load_certs(&cert).unwrap().len(), 1);
        load_key(&key).unwrap();
        for path in [cert.as_path(), key.as_path()] {
            std::fs::OpenOptions::new()
                .append(true)
                .open(path)
                .unwrap()
                .set_len(MAX_PEM_FILE + 1)
                .unwrap();
        }
        for e in [load_certs(&cert).unwrap_err(), load_key(&key).unwrap_err()] {
            assert!(e.contains("over this file's limit"), "{e}");
        }
        assert!(load_certs(&cert).unwrap_err().contains("node.pem"));
        let e = load_certs(Path::new("/dev/zero")).unwrap_err();
        assert!(e.contains("over this file's limit"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
