//! The health of a node's data directory: a full disk stalls writes instead of failing them.
//!
//! openraft 0.9 treats every storage error as fatal: the Raft core stops and the node
//! answers `Unavailable` until it is restarted. A full disk (`ENOSPC`, `EDQUOT`) is not a
//! reason to die: space usually comes back. So the node's writes (log groups, snapshot
//! files; a snapshot's on a blocking thread, [`DiskHealth::retry_blocking`]) go through
//! [`DiskHealth::retry`], which on a full disk logs an error (at most
//! every [`WARN_EVERY`]), marks the disk full, and retries every [`RETRY_EVERY`] until the
//! write succeeds — the write is repeated at the same offset, so a partial one is simply
//! overwritten. Meanwhile, for a write of the log, the node's Raft core waits (a leader
//! stops heartbeating, so the others elect a new one) and [`DiskHealth::is_stalled`] makes
//! the node refuse client writes at once; the file of a snapshot the node builds holds up
//! nothing else (openraft builds snapshots beside its core, and the log still has room: it
//! is not compacted meanwhile), so client writes go on — refusing them would stop the whole
//! cluster without a failover, and keep-alives refused while the leader's clock runs would
//! expire sessions whose clients never lost the quorum. Either way `/readyz` fails
//! ([`DiskHealth::is_full`]). Each write that waits counts for itself, so one writer's
//! success never hides another's wait. A background probe ([`DiskHealth::probe`], every second)
//! catches a full disk before a write needs the space — the log is preallocated, so it
//! can still take entries for a while: the node is then unready ([`DiskHealth::is_full`])
//! but keeps working, since refusing writes on a leader whose log still has room would stop
//! the whole cluster without a failover (openraft 0.9 has no way to step down) — and the
//! probe notices when space returns. Any other I/O error is returned as before.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;

/// How often a stalled write is retried.
pub const RETRY_EVERY: Duration = Duration::from_millis(200);
/// A full disk is logged at most this often (as an error).
pub const WARN_EVERY: Duration = Duration::from_secs(5);
/// How long a health check waits for a disk probe ([`DiskHealth::probe_shared`]) before it
/// reports the disk as hanging: less than a client's default reply timeout (5 s), so a
/// `Status` request on a hung disk is answered, not timed out — while no log write is
/// hung: those run inline on the node's one runtime thread, and one that hangs in its
/// `fdatasync` stops the whole node (server/README.md, "Disk probes").
pub const PROBE_WAIT: Duration = Duration::from_secs(3);

/// What a write that waits for space in [`DiskHealth::retry`] holds up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Writer {
    /// A write of the log (an append, the vote, a truncation, a purge): the Raft core
    /// waits on it, so the node refuses client writes meanwhile.
    Log,
    /// A snapshot file: written beside the Raft core, which goes on meanwhile.
    Snapshot,
}

/// Shared by the log store, the state machine and the node's health checks.
#[derive(Debug)]
pub struct DiskHealth {
    dir: PathBuf,
    /// Log writes waiting for space now.
    log_waiting: AtomicUsize,
    /// Snapshot writes waiting for space now.
    snapshot_waiting: AtomicUsize,
    probe_failed: AtomicBool,
    errors: Counter,
    probes: AtomicU64,
    last_warn: Mutex<Option<Instant>>,
    /// When the last [`DiskHealth::probe_shared`] probe ended, and its outcome; held while
    /// one runs (by the task that runs it, not by the caller that started it), so at most
    /// one runs at a time.
    shared: std::sync::Arc<tokio::sync::Mutex<Option<SharedProbe>>>,
    /// Test only: each probe sleeps this many milliseconds first (a slow disk).
    #[cfg(test)]
    slow_ms: AtomicU64,
    /// Test only: probes begun (counted before that sleep).
    #[cfg(test)]
    begun: AtomicU64,
}

/// Creates `dir` and its missing parents private to this user (mode 0700): a data
/// directory holds session credentials (in the log and the snapshot). An existing
/// directory is left as it is. Each directory it creates is made durable in its parent (an
/// fsync of the parent): POSIX ties no fsync of a file inside a new directory to that
/// directory's own entry, so after a power loss a new data directory — the node's vote and
/// acknowledged entries in it — could be gone. Errors: the I/O error. Cost: one `mkdir` and
/// one parent fsync per component created.
pub fn create_private_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    // The components that do not exist yet, deepest first.
    let missing: Vec<&Path> = dir
        .ancestors()
        .take_while(|d| !d.as_os_str().is_empty() && fs::symlink_metadata(d).is_err())
        .collect();
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    for d in missing {
        match sync_parent_dir(d) {
            // A parent this user may enter and write but not read (a drop box, mode
            // 0733) cannot be opened to be fsynced: the directory is made all the same,
            // durable as the file system makes a new entry by itself (ext4 and XFS do,
            // through their journals).
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {}
            r => r?,
        }
    }
    Ok(())
}

/// The temporary file [`write_file_synced`] writes before the rename: the whole name plus
/// `.tmp`. Cost: a copy of the path.
fn temp_name(path: &Path) -> std::path::PathBuf {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    tmp.into()
}

/// Writes `bytes` to `path` whole or not at all: `path` with `.tmp` appended (made anew,
/// 0600: [`create_private_file`]), fsync, rename over `path`, fsync of the directory (so
/// the rename survives a crash). The temporary name is the whole name plus `.tmp`, so it
/// is never `path` itself and two files differing only in their extension do not share
/// one. Errors: I/O errors, naming the path. Cost: one write of `bytes` and two fsyncs.
pub fn write_file_synced(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write;
    let tmp = temp_name(path);
    let named = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", tmp.display()));
    {
        let mut f = create_private_file(&tmp).map_err(named)?;
        f.write_all(bytes).map_err(named)?;
        f.sync_all().map_err(named)?;
    }
    fs::rename(&tmp, path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    sync_parent_dir(path)
}

/// Creates `path` anew for writing, readable and writable by this user only (mode 0600,
/// whatever the umask): for the temporary files that are renamed over files holding
/// session credentials or an admin's export. A file already at `path` — one left by a
/// crash between its creation and the rename — is removed first, so its mode (say 0644),
/// owner or other links never pass to the file renamed into place.
/// Errors: the I/O error (a directory at `path` is not removed). Cost: an `unlink`, an
/// `open` and an `fchmod`.
pub fn create_private_file(path: &Path) -> io::Result<fs::File> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    // The umask may have taken bits from 0600 (0400 under umask 0277): exactly 0600.
    f.set_permissions(fs::Permissions::from_mode(0o600))?;
    Ok(f)
}

/// One write counted as waiting for space, until dropped.
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn new(count: &'a AtomicUsize) -> Waiting<'a> {
        count.fetch_add(1, Ordering::Relaxed);
        Waiting(count)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The end and outcome of a shared probe (the error's kind and text).
type SharedProbe = (Instant, Result<(), (io::ErrorKind, String)>);

/// True for the errors a full disk or an exhausted quota gives.
pub fn is_full(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
    )
}

impl DiskHealth {
    /// Health of the data directory `dir`. Cost: O(1).
    pub fn new(dir: &Path) -> DiskHealth {
        DiskHealth {
            dir: dir.to_path_buf(),
            log_waiting: AtomicUsize::new(0),
            snapshot_waiting: AtomicUsize::new(0),
            probe_failed: AtomicBool::new(false),
            errors: Counter::default(),
            probes: AtomicU64::new(0),
            last_warn: Mutex::new(None),
            shared: std::sync::Arc::new(tokio::sync::Mutex::new(None)),
            #[cfg(test)]
            slow_ms: AtomicU64::new(0),
            #[cfg(test)]
            begun: AtomicU64::new(0),
        }
    }

    /// The data directory. Cost: O(1).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// True while a write of the log waits for space (the Raft core waits on it: client
    /// writes are refused). Cost: O(1).
    pub fn is_stalled(&self) -> bool {
        self.log_waiting.load(Ordering::Relaxed) > 0
    }

    /// True while any write waits for space (the log's or a snapshot's) or the last probe
    /// failed: the node is unready. Cost: O(1).
    pub fn is_full(&self) -> bool {
        self.is_stalled()
            || self.snapshot_waiting.load(Ordering::Relaxed) > 0
            || self.probe_failed.load(Ordering::Relaxed)
    }

    /// True while a snapshot's write waits for space. Cost: O(1).
    pub fn snapshot_stalled(&self) -> bool {
        self.snapshot_waiting.load(Ordering::Relaxed) > 0
    }

    /// Marks a snapshot write waiting for space (`true`) or no longer (tests).
    #[cfg(test)]
    pub(crate) fn set_snapshot_waiting(&self, waiting: bool) {
        let w = &self.snapshot_waiting;
        if waiting {
            w.fetch_add(1, Ordering::Relaxed);
        } else {
            w.fetch_sub(1, Ordering::Relaxed);
        }
    }

    fn waiting(&self, writer: Writer) -> &AtomicUsize {
        match writer {
            Writer::Log => &self.log_waiting,
            Writer::Snapshot => &self.snapshot_waiting,
        }
    }

    /// The count of write and probe failures (full disk or other), shared. Cost: O(1).
    pub fn errors(&self) -> Counter {
        self.errors.clone()
    }

    fn warn(&self, what: &str, e: &io::Error) {
        self.errors.inc();
        let mut last = self.last_warn.lock().unwrap_or_else(|p| p.into_inner());
        if last.is_none_or(|t| t.elapsed() >= WARN_EVERY) {
            *last = Some(Instant::now());
            tracing::error!(dir = %self.dir.display(), error = %e, "{what}: disk full; retried until space returns");
        }
    }

    /// Runs `f` until it succeeds or fails with something other than a full disk (see
    /// the module docs); `writer` says what the wait holds up, `what` names the write in
    /// the log. While it waits it counts as one waiting write of its kind
    /// ([`DiskHealth::is_stalled`], [`DiskHealth::is_full`]), until it ends — returns, or
    /// is dropped.
    ///
    /// Errors: `f`'s error when it is not a full disk. Cost: `f`, plus the wait for space.
    pub async fn retry<T>(
        &self,
        writer: Writer,
        what: &str,
        mut f: impl FnMut() -> io::Result<T>,
    ) -> io::Result<T> {
        self.retry_each(writer, what, || std::future::ready(f()))
            .await
    }

    /// [`DiskHealth::retry`] with each try of `f` on a blocking thread, for a long write
    /// and its fsyncs (a snapshot file): on the node's one runtime thread they would hold
    /// up every heartbeat, request and push until done. A try that has begun runs to its
    /// end even if this future is dropped meanwhile.
    ///
    /// Errors: as [`DiskHealth::retry`]; a try that panicked is an error (`Other`) naming
    /// `what`. Cost: `f` on another thread, plus the wait for space.
    pub async fn retry_blocking<T: Send + 'static>(
        &self,
        writer: Writer,
        what: &str,
        f: impl Fn() -> io::Result<T> + Send + Sync + 'static,
    ) -> io::Result<T> {
        let f = std::sync::Arc::new(f);
        self.retry_each(writer, what, || {
            let f = f.clone();
            async move {
                tokio::task::spawn_blocking(move || f())
                    .await
                    .unwrap_or_else(|e| Err(io::Error::other(format!("{what}: {e}"))))
            }
        })
        .await
    }

    /// The loop of [`DiskHealth::retry`], over tries that are futures.
    async fn retry_each<T, F: std::future::Future<Output = io::Result<T>>>(
        &self,
        writer: Writer,
        what: &str,
        mut f: impl FnMut() -> F,
    ) -> io::Result<T> {
        let mut waiting: Option<Waiting<'_>> = None;
        loop {
            match f().await {
                Ok(v) => {
                    if waiting.take().is_some() {
                        tracing::warn!(dir = %self.dir.display(), "{what}: the disk has room again; the write is done");
                    }
                    return Ok(v);
                }
                Err(e) if is_full(&e) => {
                    if waiting.is_none() {
                        waiting = Some(Waiting::new(self.waiting(writer)));
                    }
                    self.warn(what, &e);
                    tokio::time::sleep(RETRY_EVERY).await;
                }
                Err(e) => {
                    self.errors.inc();
                    tracing::error!(dir = %self.dir.display(), error = %e, "{what}: disk error");
                    return Err(e);
                }
            }
        }
    }

    /// How many probes ran (each one file written and fsynced). Cost: O(1).
    pub fn probes(&self) -> u64 {
        self.probes.load(Ordering::Relaxed)
    }

    /// [`DiskHealth::probe`] on a blocking thread, shared: callers that ask while a probe
    /// runs wait for the next one to end, and callers that find a probe ended after they
    /// asked take its outcome. So however many ask at once (a flood of `Status` requests
    /// or `/readyz` scrapes), at most one probe runs at a time — one file and one fsync in
    /// the data directory, beside the log's — and each caller's answer comes from a probe
    /// that ended after it asked.
    ///
    /// A caller waits at most `limit`. A probe runs on in a task of its own after its
    /// caller gave up, and holds the turn until it ends: on a hung disk, callers time out
    /// one after another while one probe waits, instead of each starting another.
    ///
    /// Errors: the probe's, as [`DiskHealth::probe`]; `TimedOut` when no probe that
    /// ended after the call did so within `limit` (a hung or very slow disk). Cost: at
    /// most one probe per caller, usually a share of one.
    pub async fn probe_shared(self: &std::sync::Arc<Self>, limit: Duration) -> io::Result<()> {
        let asked = Instant::now();
        let hung = || {
            io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "no probe of {} ended within {} ms: the disk may hang",
                    self.dir.display(),
                    limit.as_millis()
                ),
            )
        };
        let deadline = tokio::time::Instant::from_std(asked) + limit;
        let mut last = tokio::time::timeout_at(deadline, self.shared.clone().lock_owned())
            .await
            .map_err(|_| hung())?;
        if let Some((ended, r)) = &*last {
            if *ended >= asked {
                return r.clone().map_err(|(kind, m)| io::Error::new(kind, m));
            }
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        let d = self.clone();
        // The turn goes with the probe: a caller that stops waiting does not end it.
        tokio::spawn(async move {
            let r = tokio::task::spawn_blocking(move || d.probe())
                .await
                .unwrap_or_else(|e| Err(io::Error::other(e.to_string())));
            let kept = r
                .as_ref()
                .map(|_| ())
                .map_err(|e| (e.kind(), e.to_string()));
            *last = Some((Instant::now(), kept));
            let _ = tx.send(r);
        });
        match tokio::time::timeout_at(deadline, rx).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err(io::Error::other(
                "the disk probe's task ended without an answer",
            )),
            Err(_) => Err(hung()),
        }
    }

    /// Checks that the directory takes a write: writes, fsyncs and removes a small file
    /// (`.probe-N`, a new N each time, so concurrent probes do not collide). Records the outcome for [`DiskHealth::is_full`].
    /// Whatever is at that name first (a probe's file left by a crash, or something
    /// planted: a symbolic link, a FIFO) is removed, never opened, and the file is made
    /// new: so a link to `raft.log` is not followed (which would truncate the log) and a
    /// FIFO does not block the probe for good.
    ///
    /// Errors: the failed step's, naming the file. Cost: one small write and one fsync.
    pub fn probe(&self) -> io::Result<()> {
        #[cfg(test)]
        {
            self.begun.fetch_add(1, Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(self.slow_ms.load(Ordering::Relaxed)));
        }
        let n = self.probes.fetch_add(1, Ordering::Relaxed);
        let path = self.dir.join(format!(".probe-{n}"));
        let r = (|| {
            match fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
            let mut f = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)?;
            f.write_all(&[0u8; 4096])?;
            f.sync_all()?;
            fs::remove_file(&path)
        })();
        match r {
            Ok(()) => {
                if self.probe_failed.swap(false, Ordering::Relaxed) {
                    tracing::warn!(dir = %self.dir.display(), "disk probe succeeds again");
                }
                Ok(())
            }
            Err(e) => {
                let _ = fs::remove_file(&path);
                self.probe_failed.store(true, Ordering::Relaxed);
                self.warn("disk probe", &e);
                Err(io::Error::new(e.kind(), format!("{}: {e}", path.display())))
            }
        }
    }
}

/// An empty buffer with room for `len` bytes, or `OutOfMemory` when that much cannot be
/// had — a file far larger than the memory (sparse, or a wrong one) is refused with an
/// error naming its size instead of aborting the process, as a failed allocation does.
/// Cost: one allocation.
fn room_for(len: u64) -> io::Result<Vec<u8>> {
    let mut v = Vec::new();
    usize::try_from(len)
        .ok()
        .and_then(|n| v.try_reserve_exact(n).ok())
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::OutOfMemory,
                format!("a file of {len} bytes: no memory to read it into"),
            )
        })?;
    Ok(v)
}

/// Reads the whole file at `path` if it is at most `cap` bytes: the one way the server
/// reads a file it did not just write (tokens, TLS keys and certificates, the settings
/// file, snapshots and backups), so a wrong path (`/dev/zero`, a log named as a
/// certificate) or a damaged file is a clear error, not a node out of memory. A file
/// longer than `cap` is refused from its size before anything is read, and one that grows
/// past `cap` while read (or has no size, as a device) when the read passes it. Only a
/// regular file or a device is read: a FIFO or a socket (which could block the start
/// for ever) is refused. The file is opened without blocking and its type taken from the
/// open handle, so a FIFO put in the file's place at any moment is refused too, never
/// waited on.
///
/// Errors: the I/O error, its kind kept (`NotFound` included, so a caller can tell a
/// missing file); `FileTooLarge` past the cap, saying the size and the cap (the caller
/// names the file); `InvalidInput` for a FIFO or a socket; `OutOfMemory` when room for
/// the file's size cannot be had (`room_for`: a sparse or damaged file read under a
/// large cap). Cost: O(min(file, cap)) bytes read and held.
pub fn read_capped(path: &Path, cap: u64) -> io::Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let too_large = |len: u64| {
        io::Error::new(
            io::ErrorKind::FileTooLarge,
            format!("{len} bytes or more, over this file's limit of {cap} bytes"),
        )
    };
    // Non-blocking: opening a FIFO for reading would otherwise wait for a writer. (It
    // changes nothing for a regular file; a socket cannot be opened at all. A writer
    // already waiting on the FIFO is let through by this open, and sees it closed.)
    let not_a_file = || {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "a FIFO or a socket, not a file",
        )
    };
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
        .open(path)
        .map_err(|e| {
            let socket = fs::metadata(path).is_ok_and(|m| m.file_type().is_socket());
            if socket {
                not_a_file()
            } else {
                e
            }
        })?;
    let meta = file.metadata()?;
    let kind = meta.file_type();
    if kind.is_fifo() || kind.is_socket() {
        return Err(not_a_file());
    }
    let len = meta.len();
    if len > cap {
        return Err(too_large(len));
    }
    let mut bytes = room_for(len)?;
    file.take(cap.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > cap {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(bytes)
}

/// [`read_capped`] for a text file: `InvalidData` when it is not UTF-8. Errors and cost as
/// [`read_capped`]'s.
pub fn read_capped_text(path: &Path, cap: u64) -> io::Result<String> {
    String::from_utf8(read_capped(path, cap)?)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "not UTF-8 text"))
}

/// Fsyncs the directory holding `path` (the current directory for a bare file name), so
/// a rename that put `path` in place survives a crash. Errors: the I/O error, naming the
/// directory. Cost: one `open` and one `fsync`.
pub fn sync_parent_dir(path: &Path) -> io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    crate::state_machine::sync_dir(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The room a file's read takes is asked for, never demanded: a size no allocation
    /// can give is `OutOfMemory`, naming the size, where a plain allocation would abort
    /// the process; a size it can give is given in full.
    #[test]
    fn room_for_a_file_too_large_for_memory_is_an_error() {
        let e = room_for(u64::MAX).expect_err("reserved");
        assert_eq!(e.kind(), io::ErrorKind::OutOfMemory);
        assert!(e.to_string().contains(&u64::MAX.to_string()), "{e}");
        let v = room_for(4096).unwrap();
        assert!(v.is_empty() && v.capacity() >= 4096);
    }

    /// A file written whole goes through a temporary name that is never its own (a backup
    /// saved as `x.tmp` was removed before the new one was written) nor another file's (two
    /// saves to `nightly.fl` and `nightly.bin` shared `nightly.tmp`).
    #[test]
    fn a_file_written_whole_goes_through_a_name_of_its_own() {
        let dir = std::env::temp_dir().join(format!("fl-synced-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        create_private_dir(&dir.join("a/b")).unwrap();
        for name in ["backup.tmp", "nightly.fl", "nightly.bin", "plain"] {
            let path = dir.join("a/b").join(name);
            let tmp = temp_name(&path);
            assert_ne!(tmp, path);
            assert_eq!(tmp.parent(), path.parent());
            fs::write(&path, b"old").unwrap();
            write_file_synced(&path, name.as_bytes()).unwrap();
            assert_eq!(fs::read(&path).unwrap(), name.as_bytes());
            assert!(!tmp.exists(), "{}", tmp.display());
        }
        assert_ne!(
            temp_name(&dir.join("nightly.fl")),
            temp_name(&dir.join("nightly.bin"))
        );
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_file_over_its_cap_is_refused_by_its_size_or_as_it_is_read() {
        let dir = std::env::temp_dir().join(format!("fl-capped-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let f = dir.join("f");
        fs::write(&f, b"0123456789").unwrap();
        assert_eq!(read_capped(&f, 10).unwrap(), b"0123456789", "at the cap");
        let e = read_capped(&f, 9).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::FileTooLarge, "{e}");
        assert!(e.to_string().contains("limit of 9 bytes"), "{e}");
        // A FIFO is refused, never waited on (opening it to read blocks until a writer
        // comes; it is opened without blocking and its type read from the handle).
        let fifo = dir.join("fifo");
        assert!(std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
        assert_eq!(
            read_capped(&fifo, 10).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        // So is a socket (which cannot be opened at all).
        let socket = dir.join("socket");
        let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        assert_eq!(
            read_capped(&socket, 10).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        // A device has no size: refused when the read passes the cap.
        let e = read_capped(Path::new("/dev/zero"), 1 << 16).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::FileTooLarge, "{e}");
        assert_eq!(
            read_capped(&dir.join("missing"), 10).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
        fs::write(&f, [0xff, 0xfe]).unwrap();
        assert_eq!(
            read_capped_text(&f, 10).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
        fs::remove_dir_all(&dir).unwrap();
    }

    /// The directory of a path, a bare file name's included (the current one), is found
    /// (and its sync succeeds: whether it reached the disk, no test here can see); a
    /// missing one is an error naming it.
    #[test]
    fn a_paths_directory_is_found_and_a_missing_one_named() {
        let dir = std::env::temp_dir().join(format!("fl-syncparent-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        sync_parent_dir(&dir.join("backup.bin")).unwrap();
        sync_parent_dir(Path::new("backup.bin")).unwrap();
        let missing = dir.join("gone").join("backup.bin");
        let e = sync_parent_dir(&missing).unwrap_err();
        assert!(e.to_string().contains("gone"), "{e}");
        fs::remove_dir_all(&dir).unwrap();
    }
    use std::sync::Arc;

    /// A write that fails with a full disk until `room` is set.
    fn gated(room: &Arc<AtomicBool>) -> impl FnMut() -> io::Result<()> {
        let room = room.clone();
        move || {
            if room.load(Ordering::Relaxed) {
                Ok(())
            } else {
                Err(io::Error::from(io::ErrorKind::StorageFull))
            }
        }
    }

    /// A write retried on a blocking thread leaves the runtime's one thread free while it
    /// runs (the node's runtime has one): here the write waits for a signal that only a
    /// task on that thread sends. Run inline, it would wait out its bound and fail. A full
    /// disk is still retried, and the write's own error returned.
    #[tokio::test(flavor = "current_thread")]
    async fn a_blocking_write_leaves_the_runtime_free_and_is_retried_on_a_full_disk() {
        let dir = std::env::temp_dir().join(format!("fl-disk-blocking-{}", std::process::id()));
        let d = Arc::new(DiskHealth::new(&dir));
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let rx = Mutex::new(rx);
        let tries = Arc::new(AtomicUsize::new(0));
        let write = {
            let (d, tries) = (d.clone(), tries.clone());
            tokio::spawn(async move {
                d.retry_blocking(Writer::Snapshot, "snapshot", move || {
                    let rx = rx.lock().unwrap_or_else(|p| p.into_inner());
                    rx.recv_timeout(Duration::from_secs(10))
                        .map_err(|_| io::Error::other("the signal never came"))?;
                    match tries.fetch_add(1, Ordering::Relaxed) {
                        0 => Err(io::Error::from(io::ErrorKind::StorageFull)),
                        _ => Ok(7),
                    }
                })
                .await
            })
        };
        // The first try waits for this task, which runs only while the thread is free.
        tokio::time::sleep(Duration::from_millis(20)).await;
        tx.send(()).unwrap();
        until(|| d.is_full()).await;
        tx.send(()).unwrap();
        assert_eq!(write.await.unwrap().unwrap(), 7);
        assert_eq!(tries.load(Ordering::Relaxed), 2);
        assert!(!d.is_full());
        let failing = d.retry_blocking(Writer::Snapshot, "snapshot", || {
            Err::<(), _>(io::Error::other("bad sector"))
        });
        assert_eq!(failing.await.unwrap_err().to_string(), "bad sector");
    }

    /// Waits (bounded) until `cond` holds.
    async fn until(cond: impl Fn() -> bool) {
        for _ in 0..500 {
            if cond() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("never");
    }

    /// A snapshot write that waits for space makes the node unready but does not stall
    /// it (client writes go on: the log has room); a log write does. Each waiting write
    /// counts for itself: one's success leaves the other's wait seen, and a wait that is
    /// dropped (its future cancelled) stops counting.
    #[tokio::test]
    async fn each_waiting_write_counts_and_only_the_logs_stall_the_node() {
        let dir = std::env::temp_dir().join(format!("fl-disk-waits-{}", std::process::id()));
        let d = Arc::new(DiskHealth::new(&dir));
        let (snap_room, log_room) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        let snapshot = {
            let (d, mut f) = (d.clone(), gated(&snap_room));
            tokio::spawn(async move { d.retry(Writer::Snapshot, "snapshot", &mut f).await })
        };
        until(|| d.is_full()).await;
        assert!(
            !d.is_stalled(),
            "a snapshot's wait holds up no client write"
        );
        let log = {
            let (d, mut f) = (d.clone(), gated(&log_room));
            tokio::spawn(async move { d.retry(Writer::Log, "append", &mut f).await })
        };
        until(|| d.is_stalled()).await;
        log_room.store(true, Ordering::Relaxed);
        log.await.unwrap().unwrap();
        assert!(!d.is_stalled());
        assert!(
            d.is_full(),
            "the snapshot still waits: its wait is not cleared by the log's success"
        );
        snapshot.abort();
        let _ = snapshot.await;
        assert!(!d.is_full(), "a cancelled wait stops counting");
        // A second log write waiting beside the first: done one at a time.
        log_room.store(false, Ordering::Relaxed);
        let (a, b) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        let waits: Vec<_> = [&a, &b]
            .into_iter()
            .map(|room| {
                let (d, mut f) = (d.clone(), gated(room));
                tokio::spawn(async move { d.retry(Writer::Log, "append", &mut f).await })
            })
            .collect();
        until(|| d.log_waiting.load(Ordering::Relaxed) == 2).await;
        a.store(true, Ordering::Relaxed);
        until(|| d.log_waiting.load(Ordering::Relaxed) == 1).await;
        assert!(d.is_stalled(), "the other log write still waits");
        b.store(true, Ordering::Relaxed);
        for w in waits {
            w.await.unwrap().unwrap();
        }
        assert!(!d.is_stalled() && !d.is_full());
    }

    /// A probe's name already taken — by a symbolic link to a file of the node's, or by a
    /// FIFO — is removed, not opened: the link's target keeps its bytes, and the probe
    /// neither blocks on the FIFO nor fails.
    #[test]
    fn a_probe_never_opens_what_is_at_its_name() {
        let dir = std::env::temp_dir().join(format!("fl-probe-planted-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let victim = dir.join("raft.log");
        fs::write(&victim, b"the node's log").unwrap();
        std::os::unix::fs::symlink(&victim, dir.join(".probe-0")).unwrap();
        nix::unistd::mkfifo(&dir.join(".probe-1"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        let d = DiskHealth::new(&dir);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let r = (d.probe(), d.probe());
            let _ = tx.send(r);
        });
        let (first, second) = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("a probe blocked on what was at its name");
        first.unwrap();
        second.unwrap();
        assert_eq!(fs::read(&victim).unwrap(), b"the node's log");
        assert!(!dir.join(".probe-0").exists() && !dir.join(".probe-1").exists());
        let _ = fs::remove_dir_all(&dir);
    }

    /// However many ask at once, one probe runs for all of them (a current-thread runtime
    /// polls every caller before the first probe's end is seen); one asking afterwards
    /// gets a probe of its own.
    #[tokio::test]
    async fn concurrent_shared_probes_run_one_probe() {
        let dir = std::env::temp_dir().join(format!(
            "fencelock-disk-unit-shared-{}-{:?}",
            std::process::id(),
            Instant::now()
        ));
        fs::create_dir_all(&dir).unwrap();
        let d = Arc::new(DiskHealth::new(&dir));
        let asks: Vec<_> = (0..64)
            .map(|_| {
                let d = d.clone();
                tokio::spawn(async move { d.probe_shared(PROBE_WAIT).await })
            })
            .collect();
        for a in asks {
            a.await.unwrap().unwrap();
        }
        assert_eq!(d.probes(), 1, "64 callers at once, one probe");
        d.probe_shared(PROBE_WAIT).await.unwrap();
        assert_eq!(d.probes(), 2, "a later caller gets a probe of its own");
        let _ = fs::remove_dir_all(&dir);
    }

    /// On a disk that hangs, a caller gets `TimedOut` after its limit, and the probe it
    /// started runs on holding the turn: callers that come meanwhile time out too
    /// without starting another probe. Once it ends, a caller gets an answer again.
    #[tokio::test]
    async fn a_probe_that_hangs_times_its_callers_out_and_keeps_its_turn() {
        let dir = std::env::temp_dir().join(format!(
            "fencelock-disk-unit-hang-{}-{:?}",
            std::process::id(),
            Instant::now()
        ));
        fs::create_dir_all(&dir).unwrap();
        let d = Arc::new(DiskHealth::new(&dir));
        d.slow_ms.store(2000, Ordering::Relaxed);
        let short = Duration::from_millis(100);
        let first = d.probe_shared(short).await.unwrap_err();
        assert_eq!(first.kind(), io::ErrorKind::TimedOut, "{first}");
        assert!(first.to_string().contains("may hang"), "{first}");
        // (Its probe has begun, and sleeps on: a hung disk.)
        let until = Instant::now() + Duration::from_secs(30);
        while d.begun.load(Ordering::Relaxed) == 0 && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let second = d.probe_shared(short).await.unwrap_err();
        assert_eq!(second.kind(), io::ErrorKind::TimedOut, "{second}");
        // The first probe, still sleeping, holds the turn: the second caller found it
        // taken instead of beginning a probe of its own.
        assert_eq!(d.begun.load(Ordering::Relaxed), 1, "a second probe began");
        d.slow_ms.store(0, Ordering::Relaxed);
        // A generous limit: this caller waits for the first probe, which ends after it
        // asked, and takes its outcome; a caller after that gets a probe of its own.
        d.probe_shared(Duration::from_secs(30)).await.unwrap();
        assert_eq!(d.begun.load(Ordering::Relaxed), 1);
        d.probe_shared(Duration::from_secs(30)).await.unwrap();
        assert_eq!(d.begun.load(Ordering::Relaxed), 2);
        let _ = fs::remove_dir_all(&dir);
    }

    /// A temporary file left by a crash (world-readable, holding old bytes) is not reused:
    /// the file made in its place is new, 0600, and holds only what is written to it.
    #[test]
    fn a_leftover_temporary_file_passes_on_neither_its_mode_nor_its_bytes() {
        use std::io::Write;
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!(
            "fencelock-disk-unit-leftover-{}-{:?}",
            std::process::id(),
            Instant::now()
        ));
        fs::create_dir_all(&dir).unwrap();
        let tmp = dir.join("x.tmp");
        fs::write(&tmp, b"left over by a crash, longer than what follows").unwrap();
        fs::set_permissions(&tmp, fs::Permissions::from_mode(0o644)).unwrap();
        // Another name for the leftover: had it been reused, this would change too.
        fs::hard_link(&tmp, dir.join("link")).unwrap();
        {
            let mut f = create_private_file(&tmp).unwrap();
            f.write_all(b"new").unwrap();
        }
        let m = fs::metadata(&tmp).unwrap();
        assert_eq!(m.permissions().mode() & 0o777, 0o600);
        assert_eq!(fs::read(&tmp).unwrap(), b"new");
        assert_eq!(
            fs::read(dir.join("link")).unwrap(),
            b"left over by a crash, longer than what follows",
            "the leftover file was reused"
        );
        fs::rename(&tmp, dir.join("x")).unwrap();
        let m = fs::metadata(dir.join("x")).unwrap();
        assert_eq!(m.permissions().mode() & 0o777, 0o600);
        let _ = fs::remove_dir_all(&dir);
    }
}
