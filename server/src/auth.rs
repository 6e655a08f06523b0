//! Who may act: a session's credential (only the client that opened a session acts for
//! it), and the bearer tokens that say which client may do what.
//!
//! # Session ownership
//!
//! Session ids are small sequential numbers that any reader sees (`holder` prints them), so
//! an id proves nothing. When a node opens a session it draws a [`SessionSecret`] — 128 bits
//! from the operating system's random source (`getrandom`) — puts it into the log entry
//! that opens the session, and answers it to the client. The replicated state machine
//! remembers each open session's secret ([`Owners`], in every replica and in snapshots,
//! like the open idempotency keys) and applies an input naming a session — keep-alive,
//! close, acquire, release, cancel, watch, unwatch — only when the request carried that
//! secret; otherwise
//! it refuses it ([`crate::types::OpError::NotOwner`]) before the core sees it, and nothing
//! changes. Attaching a connection to a session's pushes needs the secret too. The core
//! stays deterministic: the randomness is the leader's, and it reaches every replica
//! through the log.
//!
//! The check is done where the input is applied, not where it arrives, so every replica
//! decides it the same way at the same log position, and a newly elected leader that has
//! not yet applied an open cannot be fooled either way.
//!
//! Secrets are compared in constant time. They are kept in the clear in the state machine
//! (a retried open — same idempotency key — must be answered with the secret the first
//! attempt drew, which the retrying node never saw), so the log and snapshot files hold
//! credentials: protect a node's data directory like its private key.
//!
//! # Open keys are per principal
//!
//! Because a retried open is answered with a credential, an idempotency key would be a
//! credential of its own if any client could present it. So a key is scoped to the
//! [`Principal`] that used it — the connection's bearer token (named in the log by the
//! token's SHA-256, never the token), or, on a node without tokens, every client alike
//! ([`Principal::Anyone`]: such a node cannot tell its clients apart). The principal
//! travels in the open's log entry ([`crate::types::Op::OpenCounted`]) like the secret, so every
//! replica decides a retry the same way. The same key from another principal is not
//! refused but opens a session of its own: a refusal would tell a client that someone else
//! uses the key (an oracle) and let it block another's open by taking its key first.

use std::collections::BTreeMap;
use std::fmt;

use fencelock::{Output, SessionId};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::protocol::{ClientError, Request};

/// A session's credential: 128 random bits. `Debug` does not print it.
#[derive(Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionSecret(pub [u8; 16]);

impl fmt::Debug for SessionSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SessionSecret(..)")
    }
}

/// An open's idempotency key: 128 random bits chosen by the client
/// ([`crate::protocol::Request::Open`]). While its session is open, a retry with the key
/// (from the same principal) is answered with the session's credential, so the key is
/// kept as secret as the credential: `Debug` does not print it (a log entry's or a
/// request's debug output, in openraft's logs or a trace, shows `OpenKey(..)`). The wire
/// form is the bare `u128`'s.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct OpenKey(pub u128);

impl fmt::Debug for OpenKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("OpenKey(..)")
    }
}

/// An error drawing random bytes from the operating system.
#[derive(Debug)]
pub struct RandomError(String);

impl fmt::Display for RandomError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the operating system's random source failed: {}", self.0)
    }
}

impl std::error::Error for RandomError {}

/// 16 bytes from the operating system's random source.
///
/// Errors: [`RandomError`] if the source fails (no `getrandom(2)`, no `/dev/urandom`).
/// Cost: one system call.
pub fn random_bytes() -> Result<[u8; 16], RandomError> {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).map_err(|e| RandomError(e.to_string()))?;
    Ok(b)
}

impl SessionSecret {
    /// A fresh secret from the operating system's random source.
    ///
    /// Errors: [`RandomError`]. Cost: one system call.
    pub fn random() -> Result<SessionSecret, RandomError> {
        random_bytes().map(SessionSecret)
    }

    /// Compares in time independent of where the two differ. Cost: O(16).
    pub fn matches(&self, other: &SessionSecret) -> bool {
        ct_eq(&self.0, &other.0)
    }
}

/// Constant-time equality of two byte strings of the same length (false, at once, for
/// different lengths: lengths are not secret here). Cost: O(len).
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// The secret of every open session, in the replicated state (see the module docs), and
/// the principal that opened it when its open recorded one for counting
/// ([`crate::types::Op::OpenCounted`]; opens of earlier builds did not), counted per
/// principal for the session quota (`--max-sessions-per-token`): the same on every
/// replica, since only the log decides it. Entries are removed when their session closes
/// or expires.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Owners {
    by_session: BTreeMap<SessionId, SessionSecret>,
    /// The principal of each session whose open recorded one (not
    /// [`Principal::Unrecorded`]).
    principal: BTreeMap<SessionId, Principal>,
    /// How many open sessions each principal of `principal` has (no zero entries).
    per_principal: BTreeMap<Principal, usize>,
}

impl Owners {
    /// True if `secret` is `session`'s. False for a session with no recorded secret.
    /// Cost: O(log n), the comparison in constant time.
    pub fn is_owner(&self, session: SessionId, secret: &SessionSecret) -> bool {
        self.by_session
            .get(&session)
            .is_some_and(|s| s.matches(secret))
    }

    /// The secret of `session`, if open (to answer a retried open). Cost: O(log n).
    pub(crate) fn get(&self, session: SessionId) -> Option<SessionSecret> {
        self.by_session.get(&session).copied()
    }

    /// How many sessions have a recorded secret. Cost: O(1).
    pub fn len(&self) -> usize {
        self.by_session.len()
    }

    /// True when none has. Cost: O(1).
    pub fn is_empty(&self) -> bool {
        self.by_session.is_empty()
    }

    /// How many open sessions `principal` opened (0 for [`Principal::Unrecorded`], whose
    /// sessions are not told apart). Cost: O(log principals).
    pub fn sessions_of(&self, principal: Principal) -> usize {
        self.per_principal.get(&principal).copied().unwrap_or(0)
    }

    /// The principal that opened `session`, if its open recorded one. Cost: O(log n).
    pub fn principal_of(&self, session: SessionId) -> Option<Principal> {
        self.principal.get(&session).copied()
    }

    /// The sessions with a recorded secret (every session an open entry made: each records
    /// its secret; a snapshot restored without one's, damaged or forged, leaves that
    /// session out) and ids above `after`, in id order, each with the principal that opened it
    /// ([`Principal::Unrecorded`] when its open recorded none). Cost: O(log n) to start,
    /// then O(log n) per item.
    pub fn after(&self, after: SessionId) -> impl Iterator<Item = (SessionId, Principal)> + '_ {
        use std::ops::Bound::{Excluded, Unbounded};
        self.by_session
            .range((Excluded(after), Unbounded))
            .map(|(s, _)| (*s, self.principal_of(*s).unwrap_or(Principal::Unrecorded)))
    }

    /// Whether `principal` may make requests naming `session` (with its credential): false
    /// only when the session's open recorded a token principal and `principal` is another
    /// token's. A session opened on a node without tokens ([`Principal::Anyone`]) or by an
    /// earlier build ([`Principal::Unrecorded`]) answers to whoever holds its credential, and
    /// every client of a node without tokens is [`Principal::Anyone`]. Cost: O(log n).
    pub fn answers_to(&self, session: SessionId, principal: Principal) -> bool {
        match (self.principal.get(&session), principal) {
            (Some(Principal::Token(opener)), Principal::Token(caller)) => *opener == caller,
            _ => true,
        }
    }

    /// Records an opened session's secret and the principal that opened it. Cost: O(log n).
    pub(crate) fn insert(
        &mut self,
        session: SessionId,
        secret: SessionSecret,
        principal: Principal,
    ) {
        self.forget(session);
        self.by_session.insert(session, secret);
        if principal != Principal::Unrecorded {
            self.principal.insert(session, principal);
            *self.per_principal.entry(principal).or_default() += 1;
        }
    }

    pub(crate) fn forget(&mut self, session: SessionId) {
        self.by_session.remove(&session);
        if let Some(p) = self.principal.remove(&session) {
            if let Some(n) = self.per_principal.get_mut(&p) {
                *n -= 1;
                if *n == 0 {
                    self.per_principal.remove(&p);
                }
            }
        }
    }

    /// Forgets the secret of every session `outs` reports expired.
    pub(crate) fn forget_expired(&mut self, outs: &[Output]) {
        for o in outs {
            if let Output::SessionExpired { session } = o {
                self.forget(*session);
            }
        }
    }

    pub(crate) fn to_vec(&self) -> Vec<(u64, SessionSecret)> {
        self.by_session.iter().map(|(s, k)| (s.0, *k)).collect()
    }

    /// The recorded principals as a snapshot keeps them, in session order.
    pub(crate) fn principals_vec(&self) -> Vec<(u64, Principal)> {
        self.principal.iter().map(|(s, p)| (s.0, *p)).collect()
    }

    /// The owners of a snapshot: each session's secret, and the principals recorded
    /// (checked first by the snapshot's list checks: each session once, each with a
    /// secret, none [`Principal::Unrecorded`]).
    pub(crate) fn from_vecs(
        secrets: Vec<(u64, SessionSecret)>,
        principals: Vec<(u64, Principal)>,
    ) -> Owners {
        let mut o = Owners {
            by_session: secrets
                .into_iter()
                .map(|(s, k)| (SessionId(s), k))
                .collect(),
            ..Owners::default()
        };
        for (s, p) in principals {
            if p != Principal::Unrecorded && o.principal.insert(SessionId(s), p).is_none() {
                *o.per_principal.entry(p).or_default() += 1;
            }
        }
        o
    }
}

/// Who asked, as far as open idempotency keys are concerned: a key is remembered for
/// the principal whose open used it, and a retried open with that key returns the session
/// (and its credential) only to the same principal. Another principal presenting the same
/// key opens a session of its own. It travels in the log entry that opens a session
/// ([`crate::types::Op::OpenCounted`], [`crate::types::Op::OpenAs`]), so every replica
/// scopes keys the same way.
///
/// The raw bearer token is never stored: a token principal is named by the SHA-256 of its
/// token, the very hash its lines in the tokens file hold (so an operator can tell which
/// team's it is, and a reader of the log learns no credential).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Principal {
    /// Opens from log entries of earlier versions ([`crate::types::Op::Open`],
    /// [`crate::types::Op::OpenLabeled`]), which recorded no principal: their keys are
    /// answered only to opens of that form, never to an [`Principal::Anyone`] or
    /// [`Principal::Token`] one. Also what [`Owners`] records for the sessions of those
    /// entries and of [`crate::types::Op::OpenAs`] (earlier builds of this version, whose
    /// keys are scoped to their principal): counted for nobody.
    Unrecorded,
    /// Every client of a node without tokens (plain TCP on loopback, or TLS with
    /// `--insecure-no-tokens`): such a node cannot tell its clients apart, so they are
    /// one principal and share one key space.
    Anyone,
    /// The clients presenting one bearer token: the SHA-256 of the token.
    Token([u8; 32]),
}

impl Principal {
    /// The principal of the clients presenting `token`. Cost: one SHA-256 of the token.
    pub fn token(token: &str) -> Principal {
        Principal::Token(Sha256::digest(token.as_bytes()).into())
    }

    /// A principal as [`Principal`]'s `Display` writes it: `sha256:` and 64 hex digits (the
    /// hash field of the token's lines in a tokens file), `anyone` or `unrecorded`.
    /// Cost: O(1).
    ///
    /// Errors: any other text, with a message saying what is expected.
    pub fn parse(text: &str) -> Result<Principal, String> {
        match text {
            "anyone" => Ok(Principal::Anyone),
            "unrecorded" => Ok(Principal::Unrecorded),
            _ => text
                .strip_prefix("sha256:")
                .and_then(hex32)
                .map(Principal::Token)
                .ok_or_else(|| {
                    format!(
                        "{text:?} is no owner: expected sha256: and 64 hex digits (the hash \
                         of the token's lines in the tokens file), anyone or unrecorded"
                    )
                }),
        }
    }
}

impl fmt::Display for Principal {
    /// `sha256:` and the whole hash in hex for a token (as its tokens-file lines hold it),
    /// `anyone`, `unrecorded`: what [`Principal::parse`] reads back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Principal::Unrecorded => f.write_str("unrecorded"),
            Principal::Anyone => f.write_str("anyone"),
            Principal::Token(h) => {
                f.write_str("sha256:")?;
                h.iter().try_for_each(|b| write!(f, "{b:02x}"))
            }
        }
    }
}

impl fmt::Debug for Principal {
    /// A token principal shows the first 8 hex digits of its hash (`Token(sha256:1a2b3c4d…)`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Principal::Unrecorded => f.write_str("Unrecorded"),
            Principal::Anyone => f.write_str("Anyone"),
            Principal::Token(h) => write!(
                f,
                "Token(sha256:{:02x}{:02x}{:02x}{:02x}…)",
                h[0], h[1], h[2], h[3]
            ),
        }
    }
}

/// What a token lets its bearer do, on the locks whose names start with a prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// Read a lock's holders and queue, a session's state (with the empty prefix only:
    /// sessions are read by id, which no prefix scopes) and the members.
    Read,
    /// [`Role::Read`], plus open, keep alive and close sessions, and acquire, release,
    /// cancel, watch and unwatch (and so campaign in and observe elections) on the locks of
    /// its prefix.
    Lock,
    /// Everything: [`Role::Lock`] on every lock, membership changes, releasing any
    /// session's hold ([`Request::ForceRelease`]) and closing any session
    /// ([`Request::ForceClose`]), listing every session with the principal that opened it
    /// ([`Request::Sessions`]), exporting the history ([`Request::Export`]:
    /// it names every lock and session), taking a backup ([`Request::Backup`]: it holds
    /// every session's credential). An admin line's prefix must be empty.
    Admin,
}

/// One grant: a role on the locks whose names start with `prefix` (empty: every lock).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    /// The role.
    pub role: Role,
    /// The lock-name prefix it applies to.
    pub prefix: String,
}

/// Everything one connection's token grants (the union of its lines in the tokens file).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Grants(pub Vec<Grant>);

impl Grants {
    /// Everything: what every client gets from a node run without a tokens file.
    pub fn all() -> Grants {
        Grants(vec![Grant {
            role: Role::Admin,
            prefix: String::new(),
        }])
    }

    /// Whether these grants include the admin role. Cost: O(grants).
    pub fn is_admin(&self) -> bool {
        self.0.iter().any(|g| g.role == Role::Admin)
    }

    fn allows(&self, role: Role, lock: Option<&str>) -> bool {
        self.0.iter().any(|g| {
            g.role == Role::Admin
                || (g.role >= role && lock.is_none_or(|l| l.starts_with(g.prefix.as_str())))
        })
    }

    /// Whether these grants allow `req`. Reads need [`Role::Read`] (on the lock's prefix
    /// for a lock's holders or queue; with the empty prefix, on every lock, for a
    /// session's state by id); session inputs need [`Role::Lock`] (on the lock's
    /// prefix for acquire, release, cancel); membership changes and forced releases need
    /// [`Role::Admin`]. Authenticating is always allowed. Cost: O(grants).
    ///
    /// Errors: [`ClientError::Forbidden`] naming what was missing; the request must then
    /// not be served.
    pub fn authorize(&self, req: &Request) -> Result<(), ClientError> {
        let (role, lock) = match req {
            Request::Authenticate { .. } => return Ok(()),
            Request::Holders { lock }
            | Request::Waiters { lock }
            | Request::Permits { lock }
            | Request::Hold { lock, .. } => (Role::Read, Some(lock)),
            // Ids are sequential and a session belongs to no lock prefix, so a session is
            // read only by a token that may read every lock.
            Request::Session { .. } => {
                if self.0.iter().any(|g| g.prefix.is_empty()) {
                    return Ok(());
                }
                return Err(ClientError::Forbidden(
                    "reading a session needs a grant on every lock (prefix *): a session \
                     is read by its id, which no prefix scopes"
                        .into(),
                ));
            }
            Request::Members | Request::Status => (Role::Read, None),
            Request::Open { .. }
            | Request::OpenLabeled { .. }
            | Request::KeepAlive { .. }
            | Request::Close { .. }
            | Request::Attach { .. } => (Role::Lock, None),
            Request::Acquire { lock, .. }
            | Request::Release { lock, .. }
            | Request::Cancel { lock, .. }
            | Request::Watch { lock, .. }
            | Request::Unwatch { lock, .. } => (Role::Lock, Some(lock)),
            Request::AddLearner { .. }
            | Request::SetVoters { .. }
            | Request::RemoveLearner { .. }
            | Request::ForceRelease { .. }
            | Request::ForceReleaseHold { .. }
            | Request::ForceClose { .. }
            | Request::Sessions { .. }
            | Request::Export { .. }
            | Request::Backup { .. } => (Role::Admin, None),
        };
        if self.allows(role, lock.map(String::as_str)) {
            return Ok(());
        }
        let what = match role {
            Role::Read => "read",
            Role::Lock => "lock",
            Role::Admin => "admin",
        };
        // The refusal names the lock only when it can be one: the name is the client's,
        // unchecked here, as long as its frame, and escaped it grows up to sixfold, so a
        // refusal repeating it whole would queue far more than the request sent.
        Err(ClientError::Forbidden(match lock {
            Some(l) if l.len() <= fencelock::MAX_NAME_LEN => {
                format!("this token has no {what} role on {l:?}")
            }
            Some(l) => format!(
                "this token has no {what} role on a name of {} bytes (no lock name is over {})",
                l.len(),
                fencelock::MAX_NAME_LEN
            ),
            None => format!("this token has no {what} role"),
        }))
    }
}

/// The bearer tokens a node accepts, read from a file (`fencelock-node --tokens FILE`).
///
/// The file holds only SHA-256 hashes of the tokens, one grant per line:
///
/// ```text
/// # ROLE   PREFIX        TOKEN HASH                       (a line starting with # is a comment)
/// admin    *             sha256:<64 hex digits>
/// lock     jobs/         sha256:<64 hex digits>   # and so is the rest from a field after the hash that starts with #
/// read     *             sha256:<64 hex digits>
/// ```
///
/// `ROLE` is `read`, `lock` or `admin`; `PREFIX` is the lock-name prefix (`*` for every
/// lock; `admin` takes only `*`). A token on several lines has all their grants. Make a
/// token and its hash with `t=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n');
/// printf %s "$t" | sha256sum`. A presented token is hashed and compared with every
/// line's hash in constant time.
#[derive(Clone, Debug, Default)]
pub struct Tokens {
    lines: Vec<([u8; 32], Grant)>,
}

/// How many more times [`Tokens::digest`] hashes its digest: each guess of the file's
/// tokens checked against a logged digest costs as many hashes.
pub const DIGEST_ROUNDS: u32 = 100_000;

/// At most this many lines in a tokens file (a limit, like every buffer's).
pub const MAX_TOKEN_LINES: usize = 10_000;
/// The longest token accepted, in bytes.
pub const MAX_TOKEN_LEN: usize = 1024;

/// The largest tokens file a node reads (16 MiB: room for [`MAX_TOKEN_LINES`] lines with
/// comments between). A larger one refuses the start, before it is read.
pub const MAX_TOKENS_FILE: u64 = 16 << 20;

/// The largest file a command-line tool reads its bearer token from (64 KiB; the token,
/// its first line, is at most [`MAX_TOKEN_LEN`] bytes).
pub const MAX_TOKEN_FILE: u64 = 64 << 10;

fn hex32(s: &str) -> Option<[u8; 32]> {
    // Hex digits only: `from_str_radix` also takes a leading `+` ("+a" is 10).
    if s.len() != 64 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

impl Tokens {
    /// Parses a tokens file's text (format above).
    ///
    /// Errors: a description naming the first bad line (unknown role, an admin line with
    /// a prefix, a hash that is not `sha256:` and 64 hex digits, too many lines); nothing
    /// is accepted from a file with a bad line. Cost: O(text).
    pub fn parse(text: &str) -> Result<Tokens, String> {
        let mut lines = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = |why: &str| format!("tokens file line {}: {why}", n + 1);
            let mut f: Vec<&str> = line.split_whitespace().collect();
            // A comment may follow a grant: a field after the third that starts with `#`
            // and everything after it (a prefix may hold `#`, so only there).
            if let Some(c) = f.iter().skip(3).position(|w| w.starts_with('#')) {
                f.truncate(3 + c);
            }
            let [role, prefix, hash] = f[..] else {
                return Err(bad("expected ROLE PREFIX sha256:HEX"));
            };
            let role = match role {
                "read" => Role::Read,
                "lock" => Role::Lock,
                "admin" => Role::Admin,
                _ => return Err(bad("role must be read, lock or admin")),
            };
            let prefix = if prefix == "*" { "" } else { prefix };
            if role == Role::Admin && !prefix.is_empty() {
                return Err(bad("an admin token applies to every lock: use *"));
            }
            let hash = hash
                .strip_prefix("sha256:")
                .and_then(hex32)
                .ok_or_else(|| bad("the hash must be sha256: and 64 hex digits"))?;
            if lines.len() == MAX_TOKEN_LINES {
                return Err(bad("too many lines"));
            }
            lines.push((
                hash,
                Grant {
                    role,
                    prefix: prefix.to_string(),
                },
            ));
        }
        Ok(Tokens { lines })
    }

    /// Reads and parses a tokens file.
    ///
    /// Errors: I/O errors, a file over [`MAX_TOKENS_FILE`] bytes, and [`Tokens::parse`]'s,
    /// described. Cost: O(file).
    pub fn load(path: &std::path::Path) -> Result<Tokens, String> {
        let text = crate::disk::read_capped_text(path, MAX_TOKENS_FILE)
            .map_err(|e| format!("tokens file {}: {e}", path.display()))?;
        Tokens::parse(&text)
    }

    /// A digest of what the file grants, the same for every file that grants the same:
    /// SHA-256 over its lines written canonically (`ROLE PREFIX sha256:HEX`, `*` for the
    /// empty prefix), sorted, duplicates once, then hashed again [`DIGEST_ROUNDS`] times;
    /// comments, blank lines, spacing and order do not change it. Nodes that serve the
    /// same clients should log the same one at start: every request is checked by the
    /// node that receives it. Shown as its first 16 hex digits. It confirms a guess of
    /// every token in the file together, so it is logged, not served: a file whose tokens
    /// are all guessable (not random) could be guessed offline from it, each guess slowed
    /// by the rounds. Cost: O(lines log lines) plus [`DIGEST_ROUNDS`] hashes (~20 ms).
    pub fn digest(&self) -> String {
        let mut lines: Vec<String> = self
            .lines
            .iter()
            .map(|(hash, g)| {
                let role = match g.role {
                    Role::Read => "read",
                    Role::Lock => "lock",
                    Role::Admin => "admin",
                };
                let prefix = if g.prefix.is_empty() { "*" } else { &g.prefix };
                let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
                format!("{role} {prefix} sha256:{hex}\n")
            })
            .collect();
        lines.sort();
        lines.dedup();
        let mut h = Sha256::new();
        for l in &lines {
            h.update(l.as_bytes());
        }
        let mut d: [u8; 32] = h.finalize().into();
        for _ in 0..DIGEST_ROUNDS {
            d = Sha256::digest(d).into();
        }
        d[..8].iter().map(|b| format!("{b:02x}")).collect()
    }

    /// How many lines it holds (comments and blank lines not counted). Cost: O(1).
    pub fn len(&self) -> usize {
        self.lines.len()
    }

    /// True when it holds no line (no token is accepted). Cost: O(1).
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// The grants of `token`: `None` if no line has its hash (or it is longer than
    /// [`MAX_TOKEN_LEN`]). Every line is compared, in constant time each, whatever
    /// matches. Cost: one SHA-256 of the token, O(lines).
    pub fn authenticate(&self, token: &str) -> Option<Grants> {
        if token.is_empty() || token.len() > MAX_TOKEN_LEN {
            return None;
        }
        let h: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let grants: Vec<Grant> = self
            .lines
            .iter()
            .filter(|(line, _)| ct_eq(line, &h))
            .map(|(_, g)| g.clone())
            .collect();
        (!grants.is_empty()).then_some(Grants(grants))
    }
}

/// The `sha256:HEX` line field for `token` (what a tokens file stores). Cost: O(token).
pub fn token_hash(token: &str) -> String {
    let h = Sha256::digest(token.as_bytes());
    let mut s = String::from("sha256:");
    for b in h {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// The bearer token the `fencelock` CLI presents (on its client connections only; no tool
/// sends one to a metrics port): the first line of `file` when one is given, else the environment's
/// `FENCELOCK_AUTH_TOKEN` (`None` when neither says one).
///
/// Errors: the file cannot be read or is over [`MAX_TOKEN_FILE`] bytes, or its first line
/// is empty (a message naming the file). Cost: one file read.
pub fn token_to_present(file: Option<&std::path::Path>) -> Result<Option<String>, String> {
    if let Some(path) = file {
        let text = crate::disk::read_capped_text(path, MAX_TOKEN_FILE)
            .map_err(|e| format!("auth token file {}: {e}", path.display()))?;
        let token = text.lines().next().unwrap_or("").trim().to_string();
        if token.is_empty() {
            return Err(format!("auth token file {} is empty", path.display()));
        }
        return Ok(Some(token));
    }
    Ok(std::env::var("FENCELOCK_AUTH_TOKEN")
        .ok()
        .filter(|t| !t.is_empty()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    /// A tokens file, or a token file, over its cap is refused by its size, naming it.
    #[test]
    fn token_files_over_their_caps_are_refused() {
        let d = std::env::temp_dir().join(format!("fencelock-tokcap-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        let (tokens, token) = (d.join("tokens"), d.join("token"));
        let line = format!("admin * {}\n", token_hash("t"));
        fs::write(&tokens, &line).unwrap();
        assert!(Tokens::load(&tokens).unwrap().authenticate("t").is_some());
        fs::File::create(&tokens)
            .unwrap()
            .set_len(MAX_TOKENS_FILE + 1)
            .unwrap();
        let e = Tokens::load(&tokens).unwrap_err();
        assert!(
            e.contains("over this file's limit") && e.contains("tokens"),
            "{e}"
        );
        fs::write(&token, "t\n").unwrap();
        assert_eq!(
            token_to_present(Some(&token)).unwrap().as_deref(),
            Some("t")
        );
        fs::File::create(&token)
            .unwrap()
            .set_len(MAX_TOKEN_FILE + 1)
            .unwrap();
        let e = token_to_present(Some(&token)).unwrap_err();
        assert!(
            e.contains("over this file's limit") && e.contains("token"),
            "{e}"
        );
        fs::remove_dir_all(&d).unwrap();
    }

    /// Each recorded principal's open sessions are counted, and a session ends its count
    /// however it ends (closed, expired); an unrecorded open counts for nobody, a session
    /// recorded again counts once, and a snapshot's lists rebuild the same counts.
    #[test]
    fn owners_count_each_principals_open_sessions() {
        let (a, b) = (Principal::token("a"), Principal::token("b"));
        let k = SessionSecret([7; 16]);
        let mut o = Owners::default();
        o.insert(SessionId(1), k, a);
        o.insert(SessionId(2), k, a);
        o.insert(SessionId(3), k, b);
        o.insert(SessionId(4), k, Principal::Unrecorded);
        o.insert(SessionId(2), k, a);
        assert_eq!((o.sessions_of(a), o.sessions_of(b)), (2, 1));
        assert_eq!(o.sessions_of(Principal::Unrecorded), 0);
        assert_eq!(o.principal_of(SessionId(3)), Some(b));
        assert_eq!(o.principal_of(SessionId(4)), None);
        let copy = Owners::from_vecs(o.to_vec(), o.principals_vec());
        assert_eq!(copy, o, "a snapshot's lists rebuild the same owners");
        o.forget(SessionId(1));
        o.forget_expired(&[Output::SessionExpired {
            session: SessionId(3),
        }]);
        assert_eq!((o.sessions_of(a), o.sessions_of(b)), (1, 0));
        o.forget(SessionId(2));
        o.forget(SessionId(2));
        assert_eq!(o.sessions_of(a), 0, "forgotten twice, counted down once");
        assert_eq!(o, {
            let mut only4 = Owners::default();
            only4.insert(SessionId(4), k, Principal::Unrecorded);
            only4
        });
    }

    #[test]
    fn secrets_are_random_compared_exactly_and_not_printed() {
        let a = SessionSecret::random().unwrap();
        let b = SessionSecret::random().unwrap();
        assert_ne!(a.0, b.0, "two draws of 128 bits differ");
        assert!(a.matches(&a));
        assert!(!a.matches(&b));
        let mut c = a;
        c.0[15] ^= 1;
        assert!(!a.matches(&c), "one bit differs");
        assert_eq!(format!("{a:?}"), "SessionSecret(..)");
        assert!(!ct_eq(b"ab", b"abc"));
    }

    /// A retry with an open's key is answered with the session's credential, so neither
    /// a client's request nor the log entry that carries the key prints it (openraft logs
    /// entries with `Debug`); on the wire it is the bare `u128`.
    #[test]
    fn open_keys_are_not_printed_and_encode_as_the_bare_number() {
        let key = 0x5eed_1234_5678_9abc_def0_1234_5678_9abcu128;
        let digits = [format!("{key}"), format!("{key:x}"), format!("{key:#x}")];
        let req = Request::Open {
            ttl_ms: 1_000,
            key: Some(OpenKey(key)),
        };
        let op = crate::types::Op::OpenCounted {
            ttl: 1_000,
            key: Some(OpenKey(key)),
            secret: SessionSecret([7; 16]),
            label: None,
            principal: Principal::Anyone,
        };
        let cmd = crate::types::Cmd {
            now: Some(1),
            ops: vec![op],
        };
        for shown in [format!("{req:?}"), format!("{cmd:?}"), format!("{cmd:#?}")] {
            assert!(shown.contains("OpenKey(..)"), "{shown}");
            for d in &digits {
                assert!(!shown.contains(d.as_str()), "{shown} shows the key");
            }
        }
        assert_eq!(
            postcard::to_allocvec(&OpenKey(key)).unwrap(),
            postcard::to_allocvec(&key).unwrap()
        );
    }

    /// A hash is 64 hex digits and nothing else: `+a` pairs (which `from_str_radix`
    /// would read as numbers) and other signs make the line malformed.
    #[test]
    fn a_hash_of_anything_but_hex_digits_is_refused() {
        let good = token_hash("ci");
        assert!(Tokens::parse(&format!("lock jobs/ {good}\n")).is_ok());
        let digits = good.trim_start_matches("sha256:");
        for bad in [
            "+a".repeat(32),
            format!("+{}", &digits[1..]),
            format!("-{}", &digits[1..]),
            format!("{} ", &digits[..63]),
        ] {
            assert_eq!(bad.len(), 64);
            assert!(
                Tokens::parse(&format!("lock jobs/ sha256:{bad}\n")).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn tokens_grant_roles_on_prefixes() {
        let text = format!(
            "# comment\n\nadmin * {}\nlock jobs/ {}\nread * {}\nread logs/ {}\n",
            token_hash("root"),
            token_hash("ci"),
            token_hash("viewer"),
            token_hash("ci"),
        );
        let t = Tokens::parse(&text).unwrap();
        assert!(t.authenticate("nobody").is_none());
        assert!(t.authenticate("").is_none());
        assert!(t.authenticate(&"x".repeat(MAX_TOKEN_LEN + 1)).is_none());
        let lock = |l: &str| Request::Release {
            session: 1,
            secret: SessionSecret([0; 16]),
            lock: l.into(),
            request: None,
        };
        let holders = |l: &str| Request::Holders { lock: l.into() };
        let members = Request::SetVoters { voters: vec![1] };
        let ci = t.authenticate("ci").unwrap();
        assert!(ci.authorize(&lock("jobs/x")).is_ok());
        assert!(ci.authorize(&lock("other/x")).is_err());
        assert!(
            ci.authorize(&holders("jobs/x")).is_ok(),
            "lock implies read"
        );
        assert!(ci.authorize(&holders("logs/x")).is_ok(), "its second line");
        assert!(ci.authorize(&holders("else")).is_err());
        assert!(matches!(
            ci.authorize(&members),
            Err(ClientError::Forbidden(_))
        ));
        let viewer = t.authenticate("viewer").unwrap();
        assert!(viewer.authorize(&holders("anything")).is_ok());
        assert!(viewer.authorize(&lock("jobs/x")).is_err());
        let open = Request::Open {
            ttl_ms: 1,
            key: None,
        };
        assert!(viewer.authorize(&open).is_err());
        // the history names every lock and session: admins only
        let export = Request::Export {
            from_index: None,
            to_index: None,
            from_time: None,
            to_time: None,
            skip: 0,
        };
        assert!(matches!(
            ci.authorize(&export),
            Err(ClientError::Forbidden(m)) if m == "this token has no admin role"
        ));
        assert!(viewer.authorize(&export).is_err());
        // a backup holds every session's credential: admins only
        let backup = Request::Backup {
            index: None,
            offset: 0,
            max_bytes: 0,
        };
        assert!(matches!(
            ci.authorize(&backup),
            Err(ClientError::Forbidden(m)) if m == "this token has no admin role"
        ));
        assert!(viewer.authorize(&backup).is_err());
        // the list of sessions names who opened each: admins only
        let sessions = Request::Sessions {
            after: 0,
            owner: None,
            limit: 0,
        };
        assert!(matches!(
            ci.authorize(&sessions),
            Err(ClientError::Forbidden(m)) if m == "this token has no admin role"
        ));
        assert!(viewer.authorize(&sessions).is_err());
        let root = t.authenticate("root").unwrap();
        assert!(root.authorize(&export).is_ok());
        assert!(root.authorize(&backup).is_ok());
        assert!(root.authorize(&sessions).is_ok());
        assert!(root.authorize(&members).is_ok());
        assert!(root.authorize(&lock("any")).is_ok());
        assert!(Grants::all().authorize(&members).is_ok());
        assert!(Grants::default().authorize(&holders("x")).is_err());
    }

    /// A principal is written as the tokens file names its token (`sha256:` and the whole
    /// hash), `anyone` or `unrecorded`, and read back from exactly that; other text is
    /// refused with what is expected.
    #[test]
    fn a_principal_reads_back_what_it_writes_as_the_tokens_file_names_it() {
        let token = Principal::token("ci");
        assert_eq!(token.to_string(), token_hash("ci"));
        for p in [token, Principal::Anyone, Principal::Unrecorded] {
            assert_eq!(Principal::parse(&p.to_string()), Ok(p));
        }
        assert_eq!(Principal::Anyone.to_string(), "anyone");
        assert_eq!(Principal::Unrecorded.to_string(), "unrecorded");
        let hex = token_hash("ci");
        for bad in [
            "",
            "Anyone",
            &hex[..hex.len() - 1],
            &hex["sha256:".len()..],
            &format!("{hex}0"),
            &hex.replace("sha256:", "sha1:"),
        ] {
            let e = Principal::parse(bad).unwrap_err();
            assert!(e.contains("64 hex digits"), "{bad}: {e}");
        }
    }

    /// A session is read by id, and ids are sequential: only a grant on every lock (the
    /// empty prefix) reads one; prefixed grants, whatever their role, do not.
    #[test]
    fn a_session_is_read_only_with_a_grant_on_every_lock() {
        let text = format!(
            "admin * {}\nlock jobs/ {}\nread logs/ {}\nread * {}\nlock * {}\n",
            token_hash("root"),
            token_hash("ci"),
            token_hash("logs"),
            token_hash("viewer"),
            token_hash("all-locks"),
        );
        let t = Tokens::parse(&text).unwrap();
        let session = Request::Session { session: 1 };
        for token in ["root", "viewer", "all-locks"] {
            let g = t.authenticate(token).unwrap();
            assert!(g.authorize(&session).is_ok(), "{token}");
        }
        for token in ["ci", "logs"] {
            let g = t.authenticate(token).unwrap();
            assert!(
                matches!(g.authorize(&session), Err(ClientError::Forbidden(m)) if m.contains("prefix *")),
                "{token}"
            );
            // What the prefix does scope stays readable.
            let mine = if token == "ci" { "jobs/x" } else { "logs/x" };
            assert!(g.authorize(&Request::Holders { lock: mine.into() }).is_ok());
        }
        assert!(Grants::default().authorize(&session).is_err());
    }

    /// Watching and observing are session requests on a lock: the lock role on the
    /// lock's prefix; a labelled open is an open; a semaphore's permits and a session's
    /// hold of a lock are reads.
    #[test]
    fn watches_need_the_lock_role_on_the_prefix_and_permits_and_holds_the_read_role() {
        let h = token_hash("ci");
        let t = Tokens::parse(&format!("lock jobs/ {h}\nread * {}\n", token_hash("v"))).unwrap();
        let watch = |l: &str| Request::Watch {
            session: 1,
            secret: SessionSecret([0; 16]),
            lock: l.into(),
            request: Some(1),
        };
        let unwatch = |l: &str| Request::Unwatch {
            session: 1,
            secret: SessionSecret([0; 16]),
            lock: l.into(),
            request: Some(1),
        };
        let permits = |l: &str| Request::Permits { lock: l.into() };
        let open = Request::OpenLabeled {
            ttl_ms: 1,
            key: None,
            label: "x".into(),
        };
        let ci = t.authenticate("ci").unwrap();
        assert!(ci.authorize(&watch("jobs/x")).is_ok());
        assert!(ci.authorize(&unwatch("jobs/x")).is_ok());
        assert!(matches!(
            ci.authorize(&watch("other/x")),
            Err(ClientError::Forbidden(m)) if m == "this token has no lock role on \"other/x\""
        ));
        assert!(ci.authorize(&unwatch("other/x")).is_err());
        // A name longer than any lock's is not repeated: its refusal stays small, however
        // long the frame and however much escaping would grow it.
        let long = "\u{1}".repeat(60_000);
        match ci.authorize(&watch(&long)) {
            Err(ClientError::Forbidden(m)) => assert_eq!(
                m,
                "this token has no lock role on a name of 60000 bytes (no lock name is over 64)"
            ),
            other => panic!("{other:?}"),
        }
        let edge = "\u{1}".repeat(fencelock::MAX_NAME_LEN);
        match ci.authorize(&watch(&edge)) {
            Err(ClientError::Forbidden(m)) => assert!(m.len() < 400, "{m}"),
            other => panic!("{other:?}"),
        }
        assert!(ci.authorize(&open).is_ok());
        assert!(ci.authorize(&permits("jobs/x")).is_ok());
        // A session's hold of a lock is a read of the lock, on its prefix.
        let hold = |l: &str| Request::Hold {
            lock: l.into(),
            session: 1,
        };
        assert!(ci.authorize(&hold("jobs/x")).is_ok());
        assert!(ci.authorize(&hold("other/x")).is_err());
        let viewer = t.authenticate("v").unwrap();
        assert!(viewer.authorize(&watch("jobs/x")).is_err());
        assert!(viewer.authorize(&open).is_err());
        assert!(viewer.authorize(&permits("anything")).is_ok());
        assert!(viewer.authorize(&hold("anything")).is_ok());
    }

    /// The digest names what a tokens file grants: comments, spacing, order and repeated
    /// lines do not change it; a line's role, prefix or hash, or one line more or less,
    /// does.
    #[test]
    fn the_tokens_digest_follows_the_grants_not_the_text() {
        let (a, b) = (token_hash("a"), token_hash("b"));
        let digest = |text: &str| Tokens::parse(text).unwrap().digest();
        let base = digest(&format!("admin * {a}\nlock jobs/ {b}\n"));
        assert_eq!(base.len(), 16);
        for same in [
            format!("# ops\n\nlock   jobs/ {b}\n  admin * {a}\n"),
            format!("admin * {a}\nlock jobs/ {b}\nadmin * {a}\n"),
        ] {
            assert_eq!(digest(&same), base, "{same}");
        }
        for other in [
            format!("admin * {a}\nread jobs/ {b}\n"),
            format!("admin * {a}\nlock job/ {b}\n"),
            format!("admin * {a}\nlock jobs/ {a}\n"),
            format!("admin * {a}\n"),
            format!("admin * {a}\nlock jobs/ {b}\nread * {b}\n"),
            String::new(),
        ] {
            assert_ne!(digest(&other), base, "{other}");
        }
    }

    #[test]
    fn bad_tokens_files_are_refused_whole() {
        let h = token_hash("t");
        for bad in [
            format!("write * {h}"),
            format!("admin jobs/ {h}"),
            "lock * sha256:abcd".to_string(),
            format!("lock * {}", &h[7..]),
            format!("lock * {h} extra"),
            format!("lock * {h} extra # a comment after a fourth field"),
            "lock *".to_string(),
            format!("lock * sha256:{}", "zz".repeat(32)),
        ] {
            let text = format!("read * {h}\n{bad}\n");
            let e = Tokens::parse(&text).unwrap_err();
            assert!(e.contains("line 2"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_comment_may_follow_a_grant_and_a_prefix_may_hold_a_hash_sign() {
        // The README's example: a comment after each grant's hash.
        let text = format!(
            "admin  *      {}   # membership, everything\nlock   jobs/  {} #open/acquire on jobs/*\nlock   #tmp/  {}\n",
            token_hash("root"),
            token_hash("ci"),
            token_hash("tmp"),
        );
        let t = Tokens::parse(&text).unwrap();
        let release = |l: &str| Request::Release {
            session: 1,
            secret: SessionSecret([0; 16]),
            lock: l.into(),
            request: None,
        };
        let ci = t.authenticate("ci").unwrap();
        assert!(ci.authorize(&release("jobs/x")).is_ok());
        assert!(ci.authorize(&release("other/x")).is_err());
        // `#tmp/` is the prefix (second field), not a comment.
        let tmp = t.authenticate("tmp").unwrap();
        assert!(tmp.authorize(&release("#tmp/x")).is_ok());
        assert!(tmp.authorize(&release("jobs/x")).is_err());
        assert!(t.authenticate("root").is_some());
        // The comment changes no grant: the digest is that of the same file without it.
        let bare = format!(
            "admin * {}\nlock jobs/ {}\nlock #tmp/ {}\n",
            token_hash("root"),
            token_hash("ci"),
            token_hash("tmp"),
        );
        assert_eq!(t.digest(), Tokens::parse(&bare).unwrap().digest());
    }

    #[test]
    fn a_session_opened_with_a_token_answers_to_that_token_only() {
        let mut o = Owners::default();
        let s = SessionSecret([7; 16]);
        let (jobs, other) = (Principal::token("jobs"), Principal::token("other"));
        o.insert(SessionId(1), s, jobs);
        o.insert(SessionId(2), s, Principal::Anyone);
        o.insert(SessionId(3), s, Principal::Unrecorded);
        assert!(o.answers_to(SessionId(1), jobs));
        assert!(!o.answers_to(SessionId(1), other), "another token");
        // A node without tokens cannot tell its clients apart: they are one principal.
        assert!(o.answers_to(SessionId(1), Principal::Anyone));
        // Opened without a token, or by an earlier build: the credential alone decides.
        for s in [2, 3] {
            assert!(o.answers_to(SessionId(s), jobs) && o.answers_to(SessionId(s), other));
        }
        o.forget(SessionId(1));
        assert!(o.answers_to(SessionId(1), other), "ended: nobody's");
    }

    #[test]
    fn owners_know_only_open_sessions() {
        let mut o = Owners::default();
        let s = SessionSecret([7; 16]);
        o.insert(SessionId(1), s, Principal::Anyone);
        assert!(o.is_owner(SessionId(1), &s));
        assert!(!o.is_owner(SessionId(2), &s), "unknown session");
        assert!(!o.is_owner(SessionId(1), &SessionSecret([0; 16])));
        o.forget_expired(&[Output::SessionExpired {
            session: SessionId(1),
        }]);
        assert!(o.is_empty());
        let back = Owners::from_vecs(vec![(3, s)], vec![]);
        assert_eq!(back.to_vec(), vec![(3, s)]);
    }
}
