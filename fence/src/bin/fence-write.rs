//! `fencelock-fence-write`: a worker that writes one row to PostgreSQL through a
//! [`PgFence`], with the token `fencelock lock` gave it.
//!
//! ```text
//! fencelock lock ledger -- fencelock-fence-write --pg 'host=/run/postgresql user=app' \
//!     --note 'nightly close' [--resource ledger] [--delay-ms 2000] [--wait-for PATH]
//! ```
//!
//! Reads the token from `FENCELOCK_TOKEN` and the resource from `--resource`, else
//! `FENCELOCK_LOCK` (both set by `fencelock lock`). Connects, prints
//! `ready pid=P token=T resource="R"` (the name quoted and escaped as a Rust string
//! literal, so no name can print a line of its own), waits `--delay-ms` and then until
//! `--wait-for`'s path exists (at most a minute; both stand for the work before the
//! write, the window a pause hits), then inserts `(resource, token, note)` into the table
//! `fencelock_demo` (made if missing) through the fence, in one transaction with the
//! token's admission. Prints `written token=T` and exits 0, or `refused token=T highest=H`
//! and exits 4 when the fence refuses a stale token; 2 for bad arguments or environment
//! (token 0 or above `i64::MAX`, an empty or over-long resource, a semaphore's permits in
//! `FENCELOCK_PERMITS` included: judged before the database is touched), 1 when the
//! database fails.

use std::io::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use fencelock::Token;
use fencelock_fence::{Fence, FenceError, PgFence};

struct Args {
    pg: String,
    resource: String,
    note: String,
    delay: Duration,
    wait_for: Option<std::path::PathBuf>,
}

const USAGE: &str =
    "usage: fencelock-fence-write --pg CONNINFO --note TEXT [--resource NAME] [--delay-ms N] [--wait-for PATH]
  token from FENCELOCK_TOKEN; resource from --resource or FENCELOCK_LOCK";

/// `name`'s value, `None` when unset; a value that is not UTF-8 is a bad environment,
/// not an unset one (a `FENCELOCK_PERMITS` of any bytes must still refuse).
fn env(name: &str) -> Result<Option<String>, String> {
    match std::env::var(name) {
        Ok(v) => Ok(Some(v)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(v)) => Err(format!("{name}={v:?} is not UTF-8")),
    }
}

fn parse() -> Result<(Args, Token), String> {
    let mut pg = None;
    let mut resource = None;
    let mut note = None;
    let mut delay_ms = 0u64;
    let mut wait_for = None;
    // (`args()` panics on an argument that is not UTF-8: a bad argument is exit 2.)
    let mut it = std::env::args_os().skip(1).map(|a| {
        a.into_string()
            .map_err(|a| format!("argument {a:?} is not UTF-8"))
    });
    while let Some(a) = it.next() {
        let a = a?;
        let mut val = || {
            it.next()
                .unwrap_or_else(|| Err(format!("{a} needs a value")))
        };
        match a.as_str() {
            "--pg" => pg = Some(val()?),
            "--resource" => resource = Some(val()?),
            "--note" => note = Some(val()?),
            "--wait-for" => wait_for = Some(val()?.into()),
            "--delay-ms" => {
                delay_ms = val()?
                    .parse()
                    .map_err(|_| "--delay-ms needs a number of milliseconds".to_string())?
            }
            _ => return Err(format!("unknown argument {a:?}")),
        }
    }
    // A fence admits one holder's token at a time: under a semaphore's permits
    // (`fencelock lock --permits`) a holder whose hold is good would be refused as stale
    // once another permit holder wrote (fence/README.md, "Exclusive holders only").
    if let Some(permits) = env("FENCELOCK_PERMITS")? {
        return Err(format!(
            "FENCELOCK_PERMITS={permits:?}: a fence serves exclusive holders only; run me \
             under `fencelock lock NAME --` without --permits"
        ));
    }
    let token = env("FENCELOCK_TOKEN")?
        .ok_or("FENCELOCK_TOKEN is not set: run me under `fencelock lock NAME --`")?;
    let token = Token(
        token
            .parse()
            .map_err(|_| format!("FENCELOCK_TOKEN={token:?} is not a number"))?,
    );
    Ok((
        Args {
            pg: pg.ok_or("--pg is required")?,
            // (FENCELOCK_LOCK read only when --resource is not given.)
            resource: match resource {
                Some(r) => r,
                None => env("FENCELOCK_LOCK")?.ok_or("--resource or FENCELOCK_LOCK is required")?,
            },
            note: note.ok_or("--note is required")?,
            delay: Duration::from_millis(delay_ms),
            wait_for,
        },
        token,
    ))
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn main() -> ExitCode {
    let (args, token) = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("fencelock-fence-write: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    // What the fence would refuse without reading the database is refused before it is
    // touched: a bad argument, not a failure.
    if let Err(e) = fencelock_fence::check_sql_input(&args.resource, token) {
        eprintln!("fencelock-fence-write: {e}\n{USAGE}");
        return ExitCode::from(2);
    }
    let fail = |what: &str, e: &dyn std::error::Error| {
        let mut msg = e.to_string();
        let mut next = e.source();
        while let Some(s) = next {
            if !msg.contains(&s.to_string()) {
                msg = format!("{msg}: {s}");
            }
            next = s.source();
        }
        eprintln!("fencelock-fence-write: {what}: {msg}");
        ExitCode::from(1)
    };
    let client = match postgres::Client::connect(&args.pg, postgres::NoTls) {
        Ok(c) => c,
        Err(e) => return fail("connect", &e),
    };
    let mut fence = match PgFence::new(client) {
        Ok(f) => f,
        Err(e) => return fail("set up the fence", &e),
    };
    if let Err(e) = fence.client().batch_execute(
        // A key of its own ("fl-demo" in ASCII), not a small number an application
        // may hold for its own ends, which would block the worker before `ready`.
        "BEGIN; SELECT pg_advisory_xact_lock(28829389838183791);
         CREATE TABLE IF NOT EXISTS fencelock_demo (resource text NOT NULL, token bigint NOT NULL, note text NOT NULL);
         COMMIT;",
    ) {
        return fail("create fencelock_demo", &e);
    }
    // The resource as a quoted, escaped string: a name may hold any UTF-8, a newline
    // included, and printed raw it could forge a `written` line of its own.
    say(&format!(
        "ready pid={} token={} resource={:?}",
        std::process::id(),
        token.0,
        args.resource
    ));
    std::thread::sleep(args.delay);
    if let Some(path) = &args.wait_for {
        let since = std::time::Instant::now();
        while !path.exists() {
            if since.elapsed() > Duration::from_secs(60) {
                eprintln!(
                    "fencelock-fence-write: {} did not appear within a minute",
                    path.display()
                );
                return ExitCode::from(1);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    let r = fence.write(&args.resource, token, |tx| {
        tx.execute(
            "INSERT INTO fencelock_demo (resource, token, note) VALUES ($1, $2, $3)",
            &[&args.resource, &(token.0 as i64), &args.note],
        )
    });
    match r {
        Ok(_) => {
            say(&format!("written token={}", token.0));
            ExitCode::SUCCESS
        }
        Err(e) => match (e.stale_highest(), &e) {
            (Some(h), _) => {
                say(&format!("refused token={} highest={}", token.0, h.0));
                ExitCode::from(4)
            }
            // Judged above already; kept so no refusal is ever reported as a failure.
            (None, FenceError::Refused(_) | FenceError::TokenOutOfRange(_)) => {
                eprintln!("fencelock-fence-write: {e}\n{USAGE}");
                ExitCode::from(2)
            }
            (None, _) => fail("fenced write", &e),
        },
    }
}
