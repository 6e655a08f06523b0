//! Test support: a real PostgreSQL server in a temporary directory, temporary
//! directories, and the history check of the race tests.
#![allow(dead_code)] // each test file uses a part

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// A temporary directory, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        TempDir::new_in(&std::env::temp_dir(), tag)
    }

    pub fn new_in(base: &Path, tag: &str) -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let p = base.join(format!(
            "fencelock-{tag}-{}-{}-{nanos}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&p).expect("create temp dir");
        TempDir(p)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Where `initdb` and `pg_ctl` are: `FENCELOCK_PG_BIN`, else `PATH`, else the newest
/// `/usr/lib/postgresql/*/bin` (Debian does not put them on `PATH`).
pub fn pg_bin_dir() -> Result<PathBuf, String> {
    let has = |d: &Path| d.join("initdb").is_file() && d.join("pg_ctl").is_file();
    if let Some(d) = std::env::var_os("FENCELOCK_PG_BIN") {
        let d = PathBuf::from(d);
        return if has(&d) {
            Ok(d)
        } else {
            Err(format!(
                "FENCELOCK_PG_BIN={} has no initdb and pg_ctl",
                d.display()
            ))
        };
    }
    if let Some(path) = std::env::var_os("PATH") {
        for d in std::env::split_paths(&path) {
            if has(&d) {
                return Ok(d);
            }
        }
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v: u32 = e.file_name().to_str()?.parse().ok()?;
            let d = e.path().join("bin");
            has(&d).then_some((v, d))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, d)| d).ok_or_else(|| {
        "PostgreSQL server binaries (initdb, pg_ctl) not found on PATH, under \
         /usr/lib/postgresql/*/bin or in FENCELOCK_PG_BIN: run scripts/setup.sh, which \
         installs Debian's postgresql package"
            .to_string()
    })
}

fn run(cmd: &mut Command, what: &str) -> Result<Output, String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{what}: cannot run: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{what} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(out)
}

fn id(args: &[&str]) -> Option<u32> {
    let out = Command::new("id").args(args).output().ok()?;
    String::from_utf8(out.stdout).ok()?.trim().parse().ok()
}

/// A PostgreSQL server of its own: a cluster made by `initdb` in a temporary directory,
/// started with `pg_ctl`, listening only on a unix socket in that directory (no port to
/// collide with), stopped and removed on drop — also when a test fails. PostgreSQL refuses
/// to run as root: as root, the server runs as the `postgres` user (made by Debian's
/// package), else `nobody`, through `runuser`.
pub struct Postgres {
    dir: TempDir,
    bin: PathBuf,
    user: Option<String>,
    started: bool,
}

impl Postgres {
    /// Starts a server, or panics with the reason (the tests must not pass without one).
    pub fn start() -> Postgres {
        match Postgres::try_start() {
            Ok(p) => p,
            Err(e) => panic!("cannot start PostgreSQL for this test: {e}"),
        }
    }

    pub fn try_start() -> Result<Postgres, String> {
        let bin = pg_bin_dir()?;
        // Under /tmp, not $TMPDIR: the server's user must reach it, and the socket path
        // (dir + "/.s.PGSQL.5432") must stay under the kernel's 107 bytes.
        let dir = TempDir::new_in(Path::new("/tmp"), "pg");
        let user = if id(&["-u"]) == Some(0) {
            let name = if id(&["-u", "postgres"]).is_some() {
                "postgres"
            } else {
                "nobody"
            };
            let uid = id(&["-u", name]).ok_or(format!("no uid for {name}"))?;
            let gid = id(&["-g", name]).ok_or(format!("no gid for {name}"))?;
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid))
                .map_err(|e| format!("chown {}: {e}", dir.path().display()))?;
            Some(name.to_string())
        } else {
            None
        };
        let mut pg = Postgres {
            dir,
            bin,
            user,
            started: false,
        };
        let data = pg.data();
        let initdb = pg.bin.join("initdb");
        run(
            pg.cmd(&initdb)
                .arg("-D")
                .arg(&data)
                .args(["-U", "fencelock", "-A", "trust", "-E", "UTF8", "--locale=C"])
                .arg("--no-sync"),
            "initdb",
        )?;
        let opts = format!(
            "-c listen_addresses='' -k {} -c fsync=off -c max_connections=60",
            pg.dir.path().display()
        );
        let pg_ctl = pg.bin.join("pg_ctl");
        let log = pg.dir.path().join("server.log");
        pg.started = true; // from here on, drop tries to stop it
        run(
            pg.cmd(&pg_ctl)
                .arg("-D")
                .arg(&data)
                .arg("-l")
                .arg(&log)
                .args(["-w", "-t", "60", "-o", &opts, "start"]),
            "pg_ctl start",
        )
        .map_err(|e| {
            let log = std::fs::read_to_string(&log).unwrap_or_default();
            format!("{e}\nserver log:\n{log}")
        })?;
        Ok(pg)
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn cmd(&self, program: &Path) -> Command {
        let mut c = match &self.user {
            Some(u) => {
                // util-linux (essential in Debian); /usr/sbin may be missing from PATH.
                let runuser = ["/usr/sbin/runuser", "/sbin/runuser"]
                    .into_iter()
                    .find(|p| Path::new(p).is_file())
                    .unwrap_or("runuser");
                let mut c = Command::new(runuser);
                c.args(["-u", u, "--"]).arg(program);
                c
            }
            None => Command::new(program),
        };
        c.current_dir(self.dir.path());
        c
    }

    /// A libpq-style connection string for this server.
    pub fn url(&self) -> String {
        format!(
            "host={} user=fencelock dbname=postgres",
            self.dir.path().display()
        )
    }

    pub fn connect(&self) -> postgres::Client {
        postgres::Client::connect(&self.url(), postgres::NoTls)
            .unwrap_or_else(|e| panic!("connect to the test server: {e}"))
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        if self.started {
            let pg_ctl = self.bin.join("pg_ctl");
            let data = self.data();
            let _ = self
                .cmd(&pg_ctl)
                .arg("-D")
                .arg(&data)
                .args(["-m", "immediate", "-w", "-t", "30", "stop"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// One accepted write, as the protected data recorded it: its position in the data's own
/// order (commit order), the writer, and its token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Landed {
    pub seq: u64,
    pub writer: u64,
    pub token: u64,
}

/// What a writer saw: its token and whether the write landed (`Ok`) or was refused as
/// stale with the highest token then (`Err`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attempt {
    pub writer: u64,
    pub token: u64,
    pub result: Result<(), u64>,
}

/// The race test's check of a recorded history: in the data's order no write carries a
/// lower token than one before it, every write a writer saw accepted landed exactly once,
/// no refused one landed, every refusal named a higher token, and the fence's final highest
/// token is the last landed one.
pub fn check_history(
    landed: &[Landed],
    attempts: &[Attempt],
    final_highest: Option<u64>,
) -> Result<(), String> {
    let mut sorted = landed.to_vec();
    sorted.sort_by_key(|l| l.seq);
    for w in sorted.windows(2) {
        if w[0].seq == w[1].seq {
            return Err(format!("two writes at position {}", w[0].seq));
        }
        if w[1].token < w[0].token {
            return Err(format!(
                "write with token {} (writer {}) landed after token {} (writer {})",
                w[1].token, w[1].writer, w[0].token, w[0].writer
            ));
        }
    }
    let mut ok: Vec<(u64, u64)> = attempts
        .iter()
        .filter(|a| a.result.is_ok())
        .map(|a| (a.writer, a.token))
        .collect();
    let mut got: Vec<(u64, u64)> = sorted.iter().map(|l| (l.writer, l.token)).collect();
    ok.sort();
    got.sort();
    if ok != got {
        return Err(format!(
            "accepted writes {} != landed writes {}",
            ok.len(),
            got.len()
        ));
    }
    for a in attempts {
        if let Err(h) = a.result {
            if h <= a.token {
                return Err(format!(
                    "token {} refused as stale with highest {h}",
                    a.token
                ));
            }
        }
    }
    if final_highest != sorted.last().map(|l| l.token) {
        return Err(format!(
            "fence's final highest {final_highest:?} != last landed token {:?}",
            sorted.last().map(|l| l.token)
        ));
    }
    Ok(())
}
