//! Writes the seed corpus of the server's fuzz targets (`fuzz/corpus/server_frames`,
//! `fuzz/corpus/server_state`, `fuzz/corpus/server_log`): well-formed frames and entries as this build writes
//! them, so that the fuzzers start from inputs that get past decoding. Files are named by
//! a hash of their bytes, so a rerun is idempotent; with `--check` nothing is written and
//! the run fails, naming them, if any are missing.
//!
//! `cargo run -p fencelock-server --features fuzzing --example fuzz_seeds [-- --check]`

use std::path::{Path, PathBuf};

use fencelock::{Input, Label, LockName, Mode, SessionId, Tick, Wait};
use fencelock_server::auth::{OpenKey, Principal, SessionSecret};
use fencelock_server::frame;
use fencelock_server::fuzzing::{self, Replica};
use fencelock_server::protocol::{ClientFrame, Request, ServerFrame, WaitSpec};
use fencelock_server::state_machine::ServiceConfig;
use fencelock_server::types::{Cmd, Op, STAMPED_AT_APPLY};

fn main() {
    let check = std::env::args().nth(1).as_deref() == Some("--check");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus");
    let mut missing = Vec::new();
    let mut put = |target: &str, bytes: Vec<u8>| {
        let path: PathBuf = root.join(target).join(format!("{:016x}", fnv(&bytes)));
        if check {
            if std::fs::read(&path).ok().as_deref() != Some(&bytes[..]) {
                missing.push(path);
            }
        } else {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, bytes).unwrap();
        }
    };

    let entries = entries();
    // server_frames: a selector byte, then the frame.
    let (calls, answers) = fuzzing::peer_seeds(&entries);
    for c in calls {
        put("server_frames", [&[0u8][..], &c].concat());
    }
    for a in answers {
        put("server_frames", [&[1u8][..], &a].concat());
    }
    for (id, req) in requests().into_iter().enumerate() {
        let f = frame::encode(&ClientFrame { id: id as u64, req }).unwrap();
        put("server_frames", [&[2u8][..], &f].concat());
    }
    for f in [
        ServerFrame::Malformed("bad".into()),
        ServerFrame::Reply {
            id: 3,
            result: Ok(fencelock_server::protocol::Reply::Authenticated),
        },
    ] {
        put(
            "server_frames",
            [&[3u8][..], &frame::encode(&f).unwrap()].concat(),
        );
    }

    // server_state: flags, [snapshot], entries (each with a 16-bit length).
    let encoded: Vec<Vec<u8>> = entries
        .iter()
        .map(|c| postcard::to_allocvec(c).unwrap())
        .collect();
    let log = |from: usize| -> Vec<u8> {
        encoded[from..]
            .iter()
            .flat_map(|e| [&(e.len() as u16).to_le_bytes()[..], e].concat())
            .collect()
    };
    // Bits 3 to 7: the entry after which the second replica is restored (0 and 2).
    for flags in [0u8, 4, 2 << 3] {
        put("server_state", [&[flags][..], &log(0)].concat());
    }
    // A replica after the first half of the entries, as a whole backup file (flags 3) and
    // as its data alone (flags 1), then the rest of the entries.
    let config = ServiceConfig {
        sessions: 8,
        locks: 8,
        claims: 16,
        core: Default::default(),
    };
    let mut r = Replica::new(config);
    let half = entries.len() / 2;
    for (i, c) in entries[..half].iter().enumerate() {
        r.apply(i as u64 + 1, c.clone());
    }
    let file = r.backup().unwrap();
    let data = fuzzing::snapshot_data(&file).unwrap();
    for (flags, snap) in [(3u8, &file), (1 | 1 << 3, &data)] {
        let mut seed = vec![flags];
        seed.extend_from_slice(&(snap.len() as u16).to_le_bytes());
        seed.extend_from_slice(snap);
        seed.extend(log(half));
        put("server_state", seed);
    }

    // server_log: flags, a group count, the groups' payloads (16-bit lengths), damage
    // (16-bit position, xor byte): whole, and with a byte of the last group flipped.
    let payloads = fuzzing::log_seed_payloads(&entries);
    let mut seed = vec![1u8, payloads.len() as u8];
    for p in &payloads {
        seed.extend_from_slice(&(p.len() as u16).to_le_bytes());
        seed.extend_from_slice(p);
    }
    put("server_log", seed.clone());
    let last = fuzzing::log_file(&payloads.iter().map(Vec::as_slice).collect::<Vec<_>>()).len() - 3;
    seed.extend_from_slice(&(last as u16).to_le_bytes());
    seed.push(0x10);
    put("server_log", seed);

    if check && !missing.is_empty() {
        eprintln!(
            "fuzz corpus: {} server seeds missing (run `cargo run -p fencelock-server \
             --features fuzzing --example fuzz_seeds` and commit fuzz/corpus):",
            missing.len()
        );
        for m in &missing {
            eprintln!("  {}", m.display());
        }
        std::process::exit(1);
    }
}

const S1: SessionSecret = SessionSecret([1; 16]);
const S2: SessionSecret = SessionSecret([2; 16]);

fn name(s: &str) -> LockName {
    LockName::new(s).unwrap()
}

fn owned(input: Input, secret: SessionSecret) -> Op {
    Op::Owned { input, secret }
}

/// Entries of this version (`Cmd::new`: a tick at each deadline) and, every other one, of
/// earlier builds (one step to their time), so that both rules are fuzzed:
/// two sessions (one labelled, one opened three times with the same key), a hold, a wait, a
/// watch, a release granting the waiter, a forced release, a tick, an expiry.
fn entries() -> Vec<Cmd> {
    let t = STAMPED_AT_APPLY;
    let (s1, s2) = (SessionId(1), SessionId(2));
    let open = |secret, key, label: Option<Label>| Op::OpenCounted {
        ttl: 50,
        key: Some(OpenKey(key)),
        secret,
        label,
        principal: Principal::Anyone,
    };
    let old = vec![
        Cmd {
            now: Some(1),
            ops: vec![
                open(S1, 7, None),
                open(S2, 8, Some(Label::new("worker-2").unwrap())),
                open(S1, 7, None),
            ],
        },
        Cmd {
            now: Some(2),
            ops: vec![
                owned(
                    Input::Acquire {
                        now: t,
                        session: s1,
                        lock: name("l"),
                        mode: Mode::Exclusive,
                        wait: Wait::None,
                        request: Some(1),
                    },
                    S1,
                ),
                owned(
                    Input::Acquire {
                        now: t,
                        session: s2,
                        lock: name("l"),
                        mode: Mode::Exclusive,
                        wait: Wait::Until(Tick(40)),
                        request: Some(1),
                    },
                    S2,
                ),
                owned(
                    Input::Watch {
                        now: t,
                        session: s2,
                        lock: name("m"),
                        request: Some(2),
                    },
                    S2,
                ),
            ],
        },
        Cmd {
            now: Some(3),
            ops: vec![
                owned(
                    Input::Release {
                        now: t,
                        session: s1,
                        lock: name("l"),
                        request: Some(2),
                    },
                    S1,
                ),
                // A retried open: in the corpus inputs that restore a snapshot, it comes
                // after the snapshot and is answered from the key the snapshot kept.
                open(S1, 7, None),
                Op::ForceRelease {
                    session: s2,
                    lock: name("l"),
                },
                Op::ForceClose { session: s2 },
                owned(
                    Input::KeepAlive {
                        now: t,
                        session: s1,
                        request: None,
                    },
                    S2, // not its credential: refused
                ),
            ],
        },
        Cmd {
            now: Some(4),
            ops: vec![
                owned(
                    Input::Acquire {
                        now: t,
                        session: s1,
                        lock: name("m"),
                        mode: Mode::Shared,
                        wait: Wait::Forever,
                        request: Some(3),
                    },
                    S1,
                ),
                Op::Input(Input::Tick { now: Tick(30) }),
            ],
        },
        Cmd {
            now: None,
            ops: vec![Op::Input(Input::Tick { now: Tick(90) })],
        },
    ];
    old.into_iter()
        .enumerate()
        .map(|(i, c)| {
            if i % 2 == 0 {
                Cmd::new(c.now, c.ops)
            } else {
                c
            }
        })
        .collect()
}

fn requests() -> Vec<Request> {
    vec![
        Request::Open {
            ttl_ms: 5000,
            key: Some(OpenKey(9)),
        },
        Request::Acquire {
            session: 1,
            secret: S1,
            lock: "jobs/a".into(),
            mode: Mode::Exclusive,
            wait: WaitSpec::ForMs(100),
            request: Some(1),
        },
        Request::Holders {
            lock: "jobs/a".into(),
        },
        Request::Authenticate { token: "t".into() },
        Request::SetVoters { voters: vec![1, 2] },
        Request::Session { session: 1 },
        Request::ForceReleaseHold {
            session: 1,
            lock: "other".into(),
            token: 4,
        },
        Request::ForceClose { session: 1 },
        Request::Sessions {
            after: 1,
            owner: Some(Principal::Anyone),
            limit: 10,
        },
        Request::Hold {
            lock: "jobs/a".into(),
            session: 1,
        },
    ]
}

/// FNV-1a, 64 bits: a file name per seed.
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100000001b3)
    })
}
