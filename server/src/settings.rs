//! Every node of a cluster runs with the same service settings, checked, not assumed.
//!
//! The core's answers depend on its settings ([`ServiceConfig`]: the three table sizes,
//! lock-delay, the watcher and name limits): a full table refuses the acquire a larger one
//! grants, and lock-delay holds back a lock another node would hand on at once. Replicas
//! that apply the same log with different settings diverge — one holds a lock the other
//! says is free — and the one that becomes leader decides for the cluster. So:
//!
//! * **Between peers** ([`PeerSettings`]). Every Raft request (append, vote, snapshot chunk,
//!   pre-vote) carries the sender's settings; a node serves it only if they equal its own,
//!   and otherwise answers with its own settings and does nothing else. A node started with
//!   other settings than its cluster's therefore never votes, never applies a log entry or
//!   a snapshot, and cannot be made a voter (`set-voters` finds it does not acknowledge);
//!   both sides log the difference, flag by flag, and the refusing side counts it
//!   (`fencelock_peer_settings_refused_total`).
//! * **Across restarts** ([`check_dir`]). A data directory records the settings it was made
//!   with (the file `settings`: text, checksummed), once its first start has passed its
//!   checks; a start with others is refused, naming each difference, and nothing is
//!   changed. A snapshot also carries the core's own settings (lock-delay, the limits),
//!   checked on restore the same way (which covers a directory of the build before, which
//!   records no settings but has a snapshot).
//!
//! Settings are fixed for the life of a cluster's data. The table sizes can be changed by
//! backing the state up and restoring it into a new cluster with the new sizes
//! (`fencelock-node snapshot save`, `snapshot restore`). Lock-delay and the watcher and
//! name limits travel with the state (its snapshots carry them), so a restore keeps them.

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Write};
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;

use crate::state_machine::ServiceConfig;
use crate::types::NodeId;

/// A refusal is logged at most this often (each refused request is still counted).
pub const LOG_EVERY: Duration = Duration::from_secs(5);

/// A peer's refusal is given as the reason it does not acknowledge for this long after it
/// last came (Raft sends to every member several times a second, so a peer that still
/// refuses renews it; one that has since gone down does not).
pub const REFUSAL_KEPT: Duration = Duration::from_secs(5);

/// A peer's latest refusal of this node's settings.
#[derive(Debug)]
struct Refused {
    why: String,
    logged: Instant,
    at: Instant,
}

impl ServiceConfig {
    /// What differs between these settings (`here`) and `theirs` (`there`), one phrase per
    /// setting, by its flag: `--sessions 100 here, 16384 there`. Empty when they agree.
    /// Cost: O(1).
    pub fn differences(&self, theirs: &ServiceConfig, here: &str, there: &str) -> Vec<String> {
        let pairs: [(&str, u64, u64); 6] = [
            ("--sessions", self.sessions as u64, theirs.sessions as u64),
            ("--locks", self.locks as u64, theirs.locks as u64),
            ("--claims", self.claims as u64, theirs.claims as u64),
            (
                "--lock-delay-ms",
                self.core.lock_delay,
                theirs.core.lock_delay,
            ),
            (
                "--max-watchers",
                self.core.max_watchers.into(),
                theirs.core.max_watchers.into(),
            ),
            (
                "the name limit",
                self.core.max_name_len.into(),
                theirs.core.max_name_len.into(),
            ),
        ];
        pairs
            .iter()
            .filter(|(_, a, b)| a != b)
            .map(|(flag, a, b)| format!("{flag} {a} {here}, {b} {there}"))
            .collect()
    }
}

/// This node's side of the peer check (see the module docs): its settings, compared with
/// those each inbound Raft request carries ([`PeerSettings::admit`]) and sent with each
/// outbound one ([`CarrySettings`]), and the peers that refused them
/// ([`PeerSettings::refusal_by`]). Held by the node's [`crate::election::Elector`], which
/// every inbound request passes through, and shared with its Raft network.
#[derive(Debug, Default)]
pub struct PeerSettings {
    ours: OnceLock<ServiceConfig>,
    /// Inbound requests refused because their sender's settings differ.
    pub refused: Counter,
    logged: Mutex<Option<Instant>>,
    /// Peers whose latest answer was a refusal of this node's settings: why, when that
    /// was last logged, and when it last came.
    refused_by: Mutex<BTreeMap<NodeId, Refused>>,
}

impl PeerSettings {
    /// Sets this node's settings (once, at start; later calls change nothing). Cost: O(1).
    pub fn set(&self, ours: ServiceConfig) {
        let _ = self.ours.set(ours);
    }

    /// This node's settings, once set. Cost: O(1).
    pub fn ours(&self) -> Option<ServiceConfig> {
        self.ours.get().copied()
    }

    /// Admits a request from `from` that carries `theirs`: `Ok` when they equal this node's
    /// settings. Otherwise `Err(ours)` (the answer the sender is given), counted and
    /// logged (at most every [`LOG_EVERY`]) with each difference. Before [`set`](Self::set),
    /// every request is refused with `Err(None)`. Cost: O(1).
    pub fn admit(
        &self,
        from: Option<NodeId>,
        theirs: &ServiceConfig,
    ) -> Result<(), Option<ServiceConfig>> {
        let Some(ours) = self.ours.get() else {
            return Err(None);
        };
        if ours == theirs {
            return Ok(());
        }
        self.refused.inc();
        let mut last = self.logged.lock().unwrap_or_else(|p| p.into_inner());
        if last.is_none_or(|t| t.elapsed() >= LOG_EVERY) {
            *last = Some(Instant::now());
            let peer = from.map_or("a peer".to_string(), |id| format!("node {id}"));
            tracing::warn!(
                "refused Raft requests from {peer}: its service settings differ from this \
                 node's ({}); every node of a cluster must run with the same settings \
                 (logged at most every {} s)",
                ours.differences(theirs, "here", "there").join("; "),
                LOG_EVERY.as_secs()
            );
        }
        Err(Some(*ours))
    }

    /// Notes that node `to` refused a request of this node's because its settings are
    /// `theirs` (`None`: it had not started), and returns the error the request fails
    /// with. Logged as a warning at most every [`LOG_EVERY`] per peer. Cost: O(log peers).
    pub fn refused_by(&self, to: NodeId, theirs: Option<&ServiceConfig>) -> io::Error {
        let what = match (self.ours(), theirs) {
            (Some(ours), Some(t)) => format!(
                "node {to} refuses this node's Raft requests: its service settings differ ({})",
                ours.differences(t, "here", "there").join("; ")
            ),
            _ => format!("node {to} refuses Raft requests: it has not started yet"),
        };
        self.note_refusal(to, what)
    }

    /// Notes that node `to` answered a request of this node's in another wire format
    /// (`v`: a build whose Raft messages this one cannot read, nor it this one's), and
    /// returns the error the request fails with; noted and logged as
    /// [`refused_by`](Self::refused_by). Cost: O(log peers).
    pub fn other_version_at(&self, to: NodeId, v: crate::frame::OtherVersion) -> io::Error {
        self.note_refusal(
            to,
            format!(
                "node {to} speaks peer wire version {}, this node {}: nodes of different \
                 wire versions cannot form a cluster (upgrade them together)",
                v.theirs, v.ours
            ),
        )
    }

    /// Keeps `what` as node `to`'s refusal (for [`refusal_by`](Self::refusal_by)), logs it
    /// at most every [`LOG_EVERY`] per peer, and returns it as an error.
    fn note_refusal(&self, to: NodeId, what: String) -> io::Error {
        let mut m = self.refused_by.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let logged = match m.get(&to) {
            Some(r) if r.logged.elapsed() < LOG_EVERY => r.logged,
            _ => {
                tracing::warn!("{what} (logged at most every {} s)", LOG_EVERY.as_secs());
                now
            }
        };
        let why = what.clone();
        m.insert(
            to,
            Refused {
                why,
                logged,
                at: now,
            },
        );
        io::Error::new(io::ErrorKind::InvalidInput, what)
    }

    /// Notes that node `to` served a request of this node's (its settings agree). Cost:
    /// O(log peers noted as refusing): O(1) while there are none.
    pub fn served_by(&self, to: NodeId) {
        let mut m = self.refused_by.lock().unwrap_or_else(|p| p.into_inner());
        m.remove(&to);
    }

    /// Why node `id` refuses this node's requests, if its latest answer was such a
    /// refusal and came within [`REFUSAL_KEPT`]: for an operator's error message
    /// ([`crate::membership::check_live`]). Cost: O(log peers).
    pub fn refusal_by(&self, id: NodeId) -> Option<String> {
        let m = self.refused_by.lock().unwrap_or_else(|p| p.into_inner());
        m.get(&id)
            .filter(|r| r.at.elapsed() < REFUSAL_KEPT)
            .map(|r| r.why.clone())
    }
}

/// The file in a data directory that records its settings.
pub const FILE: &str = "settings";

/// The largest settings file read (64 KiB; one is a few hundred bytes). A larger one is
/// refused, naming it.
pub const MAX_FILE: u64 = 64 << 10;

/// The first line of a settings file (its format and version).
const HEADER: &str = "fencelock-node settings 1";

/// The version a settings file of a later build names (a checksummed file whose first
/// line is [`HEADER`] with a version above 1), `None` for any other text. Cost: O(file
/// size).
fn later_version(text: &str) -> Option<u64> {
    let at = text.strip_suffix('\n')?.rfind('\n')?;
    let (body, last) = text.split_at(at + 1);
    let crc = u32::from_str_radix(last.strip_prefix("crc32 ")?.strip_suffix('\n')?, 16).ok()?;
    let v = body
        .split('\n')
        .next()?
        .strip_prefix("fencelock-node settings ")?
        .parse::<u64>()
        .ok()?;
    (v > 1 && crc32fast::hash(body.as_bytes()) == crc).then_some(v)
}

/// `config` as a settings file: a header line, one line per setting (`key value`, keys
/// named like the flags), and a last line `crc32 <hex>` over every byte before it — text
/// an operator can read, checksummed like every file a node keeps. Cost: O(1).
pub fn encode(config: &ServiceConfig) -> String {
    let body = format!(
        "{HEADER}\nsessions {}\nlocks {}\nclaims {}\nlock-delay-ms {}\nmax-watchers {}\nmax-name-len {}\n",
        config.sessions,
        config.locks,
        config.claims,
        config.core.lock_delay,
        config.core.max_watchers,
        config.core.max_name_len,
    );
    let crc = crc32fast::hash(body.as_bytes());
    format!("{body}crc32 {crc:08x}\n")
}

/// The settings a settings file records. Strict: the header, every key in
/// [`encode`]'s order, decimal values and the checksum must all be exactly as written.
///
/// Errors: what is wrong, described. Cost: O(file size).
pub fn decode(text: &str) -> Result<ServiceConfig, String> {
    let Some(at) = text.strip_suffix('\n').and_then(|t| t.rfind('\n')) else {
        return Err("too short".into());
    };
    let (body, last) = text.split_at(at + 1);
    let crc = last
        .strip_prefix("crc32 ")
        .and_then(|h| h.strip_suffix('\n'))
        // Exactly as written: eight lower-case hex digits (no sign, no upper case).
        .filter(|h| h.len() == 8 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
        .and_then(|h| u32::from_str_radix(h, 16).ok())
        .ok_or("its last line is not `crc32 <8 lower-case hex digits>`")?;
    if crc32fast::hash(body.as_bytes()) != crc {
        return Err("checksum mismatch".into());
    }
    // Lines end in a bare `\n` (not `\r\n`); the body's last one too.
    let Some(body) = body.strip_suffix('\n') else {
        return Err("its settings do not end in a line break".into());
    };
    let mut lines = body.split('\n');
    if lines.next() != Some(HEADER) {
        return Err(format!("its first line is not `{HEADER}`"));
    }
    let mut value = |key: &str| -> Result<u64, String> {
        lines
            .next()
            .and_then(|l| l.strip_prefix(key))
            .and_then(|l| l.strip_prefix(' '))
            // Decimal as written: no sign, no leading zero.
            .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
            .filter(|v| *v == "0" || !v.starts_with('0'))
            .and_then(|v| v.parse::<u64>().ok())
            .ok_or_else(|| format!("no `{key} <number>` line where expected"))
    };
    let sessions = value("sessions")?;
    let locks = value("locks")?;
    let claims = value("claims")?;
    let lock_delay = value("lock-delay-ms")?;
    let max_watchers = value("max-watchers")?;
    let max_name_len = value("max-name-len")?;
    if lines.next().is_some() {
        return Err("it has lines after its settings".into());
    }
    let narrow =
        |v: u64, key: &str| u32::try_from(v).map_err(|_| format!("{key} {v} is too large"));
    let config = ServiceConfig {
        sessions: narrow(sessions, "sessions")? as usize,
        locks: narrow(locks, "locks")? as usize,
        claims: narrow(claims, "claims")? as usize,
        core: fencelock::Config {
            lock_delay,
            max_watchers: narrow(max_watchers, "max-watchers")?,
            max_name_len: narrow(max_name_len, "max-name-len")?,
        },
    };
    // Only settings a node could have started with (as `fencelock-node` checks its flags).
    if config.sessions == 0 || config.locks == 0 || config.claims == 0 {
        return Err("a table size of 0".into());
    }
    fencelock::check_rows(config.sessions.max(config.locks).max(config.claims))
        .map_err(|e| format!("table sizes: {e}"))?;
    config
        .core
        .validate()
        .map_err(|e| format!("core settings: {e}"))?;
    Ok(config)
}

/// Checks that `dir` was made with `config`: `Ok(true)` when it records exactly these
/// settings, `Ok(false)` when it records none — a new directory, one written by the build
/// before (which did not record them), or one that holds no node yet (no log, no
/// snapshot: a first start that failed) — which the caller then records with [`record`]
/// once the rest of its start has passed its checks, so that a refused start records
/// nothing. Called at every start, before anything else reads or writes the directory.
///
/// Errors (nothing is changed by any of them): `InvalidInput` naming each setting that
/// differs from the recorded one, or for a settings file of a later build; `InvalidData` for a settings file that is damaged (it is
/// never rewritten); I/O errors naming the path. Cost: one small read.
pub fn check_dir(dir: &Path, config: &ServiceConfig) -> io::Result<bool> {
    let Some(recorded) = read_dir(dir)? else {
        return Ok(false);
    };
    let diff = config.differences(&recorded, "in this start", "recorded");
    if diff.is_empty() {
        return Ok(true);
    }
    if !["raft.log", "snapshot.bin"]
        .iter()
        .any(|f| dir.join(f).exists())
    {
        // Nothing was decided under the recorded settings yet: these replace them.
        return Ok(false);
    }
    let table_sizes_only = config.core == recorded.core;
    Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        format!(
            "{} was made with other service settings ({}): refusing to start (nothing was \
             changed). Start it with the settings it records; every node of a cluster runs \
             with the same ones. {}",
            dir.display(),
            diff.join("; "),
            if table_sizes_only {
                "To change the table sizes, back the state up and restore it into a new \
                 cluster with the new ones (`snapshot save`, `snapshot restore`)"
            } else {
                "Lock-delay and the watcher and name limits are kept with the state for its \
                 whole life (a backup restores with them too)"
            }
        ),
    ))
}

/// The settings `dir` records, `None` when it records none.
///
/// Errors: `InvalidData` for a damaged settings file (saying what is wrong and what to
/// do); `InvalidInput` for one a later build wrote (its checksummed header names a later
/// version); I/O errors naming the path, `FileTooLarge` for one over [`MAX_FILE`] bytes among
/// them. Cost: one small read.
pub fn read_dir(dir: &Path) -> io::Result<Option<ServiceConfig>> {
    let path = dir.join(FILE);
    let bytes = match crate::disk::read_capped(&path, MAX_FILE) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io::Error::new(e.kind(), format!("{}: {e}", path.display()))),
    };
    if let Some(v) = std::str::from_utf8(&bytes).ok().and_then(later_version) {
        // Not damaged: a later build's, which still reads this directory.
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} is of version {v}, written by a later build (this build reads version \
                 1); refusing to start (nothing was changed): run the build that wrote it",
                path.display()
            ),
        ));
    }
    std::str::from_utf8(&bytes)
        .map_err(|_| "not text".to_string())
        .and_then(decode)
        .map(Some)
        .map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{} is damaged ({e}); nothing was changed: put back a copy, or remove it \
                     and start with the settings the cluster was made with (they are recorded \
                     again)",
                    path.display()
                ),
            )
        })
}

/// What a data directory says about the settings its state was made with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Made {
    /// The settings it records (`None`: a directory of an earlier build, or no node).
    pub recorded: Option<ServiceConfig>,
    /// The core settings its state was made with: the recorded ones, else those its
    /// snapshot carries (`None`: neither).
    pub core: Option<fencelock::Config>,
}

/// What `dir` says about the settings its state was made with (see [`Made`]): what
/// `force-new-cluster` reads from a survivor.
///
/// Errors: a damaged settings file or snapshot (`InvalidData`, naming it); I/O errors
/// naming the path. Cost: one small read, and a snapshot file's read and checksum when
/// no settings are recorded.
pub fn made_with(dir: &Path) -> io::Result<Made> {
    let recorded = read_dir(dir)?;
    let core = match recorded {
        Some(r) => Some(r.core),
        None => crate::state_machine::snapshot_core(&dir.join("snapshot.bin"))?,
    };
    Ok(Made { recorded, core })
}

/// Writes `config` as `dir`'s settings file (atomically: a private temporary file, fsync,
/// rename, fsync of the directory), creating `dir` if needed. Errors: I/O errors naming the
/// path. Cost: one small write and two fsyncs.
pub fn record(dir: &Path, config: &ServiceConfig) -> io::Result<()> {
    crate::disk::create_private_dir(dir)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", dir.display())))?;
    let tmp = dir.join("settings.tmp");
    let named = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", tmp.display()));
    {
        let mut f = crate::disk::create_private_file(&tmp).map_err(named)?;
        f.write_all(encode(config).as_bytes()).map_err(named)?;
        f.sync_all().map_err(named)?;
    }
    fs::rename(&tmp, dir.join(FILE)).map_err(named)?;
    crate::state_machine::sync_dir(dir)
}

/// The outbound side of the peer check: a Raft network that sends this node's settings with
/// every request it makes, for the peer to compare with its own, and notes each answer in
/// them ([`PeerSettings::refused_by`], [`PeerSettings::served_by`]).
/// [`crate::node::Node::start`] gives them, set, before the first request.
pub trait CarrySettings {
    /// Sends `peers.ours()` with every request from now on. Cost: O(1).
    fn carry(&mut self, peers: Arc<PeerSettings>);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> ServiceConfig {
        ServiceConfig {
            sessions: 100,
            locks: 200,
            claims: 300,
            core: fencelock::Config {
                lock_delay: 500,
                max_watchers: 2,
                max_name_len: 40,
            },
        }
    }

    fn dir(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!(
            "fencelock-settings-{name}-{}-{:?}",
            std::process::id(),
            std::time::SystemTime::now()
        ));
        let _ = fs::remove_dir_all(&d);
        d
    }

    /// Each setting that differs is named by its flag with both values; equal settings
    /// have no differences.
    #[test]
    fn differences_name_each_setting_that_differs() {
        let a = ServiceConfig::default();
        assert!(a.differences(&a, "here", "there").is_empty());
        assert_eq!(
            a.differences(&small(), "here", "there"),
            [
                "--sessions 16384 here, 100 there",
                "--locks 16384 here, 200 there",
                "--claims 32768 here, 300 there",
                "--lock-delay-ms 0 here, 500 there",
                "--max-watchers 4 here, 2 there",
                "the name limit 64 here, 40 there",
            ]
        );
        let one = ServiceConfig {
            claims: 7,
            ..ServiceConfig::default()
        };
        assert_eq!(
            a.differences(&one, "a", "b"),
            ["--claims 32768 a, 7 b"],
            "only what differs"
        );
    }

    /// A settings file reads back as written, and is readable text naming the flags.
    #[test]
    fn a_settings_file_round_trips() {
        for c in [ServiceConfig::default(), small()] {
            let text = encode(&c);
            assert_eq!(decode(&text), Ok(c));
            assert!(
                text.starts_with("fencelock-node settings 1\nsessions "),
                "{text}"
            );
        }
        assert!(encode(&small()).contains("\nlock-delay-ms 500\n"));
    }

    /// A settings file over [`MAX_FILE`] bytes is refused by its size, naming it; the
    /// largest a real one can be is far under the cap.
    #[test]
    fn a_settings_file_over_its_cap_is_refused() {
        let d = dir("cap");
        record(&d, &ServiceConfig::default()).unwrap();
        assert!((fs::metadata(d.join(FILE)).unwrap().len()) < MAX_FILE / 64);
        fs::OpenOptions::new()
            .write(true)
            .open(d.join(FILE))
            .unwrap()
            .set_len(MAX_FILE + 1)
            .unwrap();
        let e = read_dir(&d).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::FileTooLarge, "{e}");
        assert!(
            e.to_string().contains(&d.join(FILE).display().to_string()),
            "{e}"
        );
        fs::remove_dir_all(&d).unwrap();
    }

    /// Every change of a single byte, a cut at every length and lines added are refused:
    /// the checksum and the strict format leave no damaged file read as settings.
    #[test]
    fn a_damaged_settings_file_is_refused() {
        let text = encode(&small());
        let bytes = text.as_bytes();
        for i in 0..bytes.len() {
            for flip in [0x01u8, 0x20, 0x80] {
                let mut b = bytes.to_vec();
                b[i] ^= flip;
                if let Ok(t) = std::str::from_utf8(&b) {
                    assert!(decode(t).is_err(), "byte {i} ^ {flip:#x} read as settings");
                }
            }
        }
        for n in 0..text.len() {
            assert!(decode(&text[..n]).is_err(), "cut at {n} read as settings");
        }
        assert!(decode(&format!("{text}extra 1\n")).is_err());
        // A body whose checksum is right but whose format is not is refused too.
        let body = "fencelock-node settings 1\nsessions 1\n";
        let forged = format!("{body}crc32 {:08x}\n", crc32fast::hash(body.as_bytes()));
        assert!(decode(&forged).unwrap_err().contains("locks"), "{forged}");
    }

    /// A new directory records the settings it is started with; a later start with the
    /// same ones passes; one with others is refused, naming each difference, and leaves
    /// the file as it was.
    #[test]
    fn a_directory_keeps_the_settings_it_was_made_with() {
        let d = dir("keeps");
        assert!(
            !check_dir(&d, &small()).unwrap(),
            "a new directory records none"
        );
        assert_eq!(read_dir(&d).unwrap(), None, "nothing written by the check");
        record(&d, &small()).unwrap();
        assert_eq!(read_dir(&d).unwrap(), Some(small()));
        fs::write(d.join("raft.log"), b"a node lives here").unwrap();
        assert!(check_dir(&d, &small()).unwrap(), "the same settings pass");
        let before = fs::read(d.join(FILE)).unwrap();
        let other = ServiceConfig {
            sessions: 101,
            core: fencelock::Config {
                lock_delay: 0,
                ..small().core
            },
            ..small()
        };
        let e = check_dir(&d, &other).expect_err("other settings are refused");
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        let m = e.to_string();
        assert!(
            m.contains("--sessions 101 in this start, 100 recorded"),
            "{m}"
        );
        assert!(
            m.contains("--lock-delay-ms 0 in this start, 500 recorded"),
            "{m}"
        );
        assert!(!m.contains("--locks"), "{m}");
        assert_eq!(fs::read(d.join(FILE)).unwrap(), before, "nothing changed");
        let _ = fs::remove_dir_all(&d);
    }

    /// A directory that holds no node yet (no log, no snapshot) takes the settings of the
    /// next start: nothing was decided under the old ones.
    #[test]
    fn a_directory_without_a_node_takes_new_settings() {
        let d = dir("empty");
        record(&d, &small()).unwrap();
        let other = ServiceConfig::default();
        assert!(
            !check_dir(&d, &other).unwrap(),
            "no node yet: to be recorded anew"
        );
        fs::write(d.join("snapshot.bin"), b"a node lives here").unwrap();
        assert!(
            check_dir(&d, &other).is_err(),
            "with a snapshot the record stands"
        );
        let _ = fs::remove_dir_all(&d);
    }

    /// Only settings a node could have started with are read: a table of 0 rows, one past
    /// the row limit, or a core config the core refuses (a name limit of 0) are refused
    /// even under a right checksum, and so are the other spellings of a right file (CRLF
    /// line ends, a leading zero, a sign).
    #[test]
    fn a_settings_file_holds_only_settings_a_node_runs_with() {
        let sealed = |body: &str| format!("{body}crc32 {:08x}\n", crc32fast::hash(body.as_bytes()));
        let good = encode(&small());
        let body = &good[..good.rfind("crc32").unwrap()];
        assert_eq!(decode(&sealed(body)), Ok(small()));
        for (from, to) in [
            ("sessions 100", "sessions 0"),
            ("sessions 100", "sessions 4294967295"),
            ("max-name-len 40", "max-name-len 0"),
            ("sessions 100", "sessions 0100"),
            ("locks 200", "locks +200"),
        ] {
            let bad = body.replacen(from, to, 1);
            assert!(decode(&sealed(&bad)).is_err(), "{to} read as settings");
        }
        assert!(
            decode(&sealed(&body.replace('\n', "\r\n"))).is_err(),
            "CRLF read"
        );
    }

    /// A damaged settings file stops a start with `InvalidData` and is never rewritten.
    #[test]
    fn a_damaged_settings_file_stops_a_start_and_stays() {
        let d = dir("damaged");
        record(&d, &small()).unwrap();
        fs::write(d.join("raft.log"), b"a node lives here").unwrap();
        let mut b = fs::read(d.join(FILE)).unwrap();
        let at = b.len() / 2;
        b[at] ^= 1;
        fs::write(d.join(FILE), &b).unwrap();
        let e = check_dir(&d, &small()).expect_err("damaged");
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(e.to_string().contains("is damaged"), "{e}");
        assert_eq!(fs::read(d.join(FILE)).unwrap(), b, "left as it was");
        let _ = fs::remove_dir_all(&d);
    }

    /// A settings file a later build wrote (checksummed, its header naming a later
    /// version) stops a start as a later build's (`InvalidInput`), not as damage, and is
    /// never rewritten; one of version 1 with a bad checksum is still damage.
    #[test]
    fn a_settings_file_of_a_later_build_stops_a_start_and_stays() {
        let d = dir("later");
        fs::create_dir_all(&d).unwrap();
        let good = encode(&small());
        let body = good[..good.rfind("crc32").unwrap()].replacen(
            "settings 1\n",
            "settings 2\nlease-ms 40\n",
            1,
        );
        let later = format!("{body}crc32 {:08x}\n", crc32fast::hash(body.as_bytes()));
        fs::write(d.join(FILE), &later).unwrap();
        let e = check_dir(&d, &small()).expect_err("later");
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
        assert!(
            e.to_string()
                .contains("version 2, written by a later build"),
            "{e}"
        );
        assert_eq!(
            fs::read_to_string(d.join(FILE)).unwrap(),
            later,
            "left as it was"
        );
        let unsealed = later.replacen("lease-ms 40", "lease-ms 41", 1);
        fs::write(d.join(FILE), &unsealed).unwrap();
        let e = check_dir(&d, &small()).expect_err("damaged");
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
        let _ = fs::remove_dir_all(&d);
    }

    /// A request carrying this node's settings is admitted; one carrying others is refused
    /// with this node's settings as the answer, and counted; before the node set its
    /// settings, every request is refused.
    #[test]
    fn peers_are_admitted_only_with_equal_settings() {
        let p = PeerSettings::default();
        assert_eq!(p.admit(Some(2), &small()), Err(None), "not started");
        p.set(small());
        assert_eq!(p.admit(Some(2), &small()), Ok(()));
        assert_eq!(p.refused.get(), 0);
        let other = ServiceConfig::default();
        assert_eq!(p.admit(Some(2), &other), Err(Some(small())));
        assert_eq!(p.admit(None, &other), Err(Some(small())));
        assert_eq!(p.refused.get(), 2);
        p.set(other);
        assert_eq!(p.ours(), Some(small()), "set once");
    }

    /// A refusal by a peer is noted with its reason until that peer serves a request (or
    /// for [`REFUSAL_KEPT`] after it last came).
    #[test]
    fn a_peers_refusal_is_kept_until_it_serves_again() {
        let p = PeerSettings::default();
        p.set(small());
        assert_eq!(p.refusal_by(3), None);
        let e = p.refused_by(3, Some(&ServiceConfig::default()));
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        let why = p.refusal_by(3).expect("noted");
        assert!(why.contains("node 3 refuses"), "{why}");
        assert!(why.contains("--sessions 100 here, 16384 there"), "{why}");
        assert_eq!(p.refusal_by(2), None, "only the refusing node");
        p.served_by(3);
        assert_eq!(p.refusal_by(3), None);
    }
}
