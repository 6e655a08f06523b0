//! Arbitrary bytes as a replica's state and the log entries it applies, as a server node
//! meets them: a snapshot (a peer's `InstallSnapshot` data, or a `snapshot.bin` / backup
//! file), then committed entries, each a batch of ops as the leader proposed them
//! (`fencelock_server::types::Cmd`). The snapshot is decoded and checked as a node does
//! before it installs one, the entries applied as the node's apply does.
//!
//! Layout: a flags byte (bit 0: start from a snapshot; bit 1: the snapshot's bytes are a
//! whole file, header and checksum as given, else they are the data, put in a file with a
//! correct checksum — a checksum detects damage, it does not authenticate; bit 2: a
//! lock-delay of 3 ms; bits 3 to 7: after how many entries the second replica is restored
//! from the first's backup), then for a snapshot a 16-bit length and its bytes, then
//! entries, each a 16-bit length and the postcard bytes of a `Cmd` (bytes that do not
//! decode are not an entry: the log store refuses them before the apply).
//!
//! Nothing panics, and:
//! - a state's backup (where the second replica is restored, and at the end) is
//!   a file that passes the restore checks (once an entry was applied: one taken before is
//!   refused, by design) and restores to a state whose backup is the same bytes (one
//!   state, one encoding);
//! - a replica restored from another's backup, fed the same entries, answers each request
//!   as the other does and ends in the same state, byte for byte: the snapshot holds
//!   everything the apply reads (the core, the open keys, the credentials and
//!   principals), and neither replica's random lock-name key changes an answer or a
//!   byte.
#![no_main]

use fencelock::Config;
use fencelock_server::fuzzing::{self, Replica};
use fencelock_server::state_machine::ServiceConfig;
use fencelock_server::types::{Cmd, RAFT_NUMBER_BOUND};
use libfuzzer_sys::fuzz_target;

/// At most this many entries per input: the property is per entry, and each costs a
/// backup at the end only.
const MAX_ENTRIES: usize = 64;

fuzz_target!(|data: &[u8]| {
    let Some((&flags, mut rest)) = data.split_first() else {
        return;
    };
    let config = ServiceConfig {
        sessions: 8,
        locks: 8,
        claims: 16,
        core: Config {
            lock_delay: if flags & 4 != 0 { 3 } else { 0 },
            ..Config::default()
        },
    };
    let mut a = if flags & 1 != 0 {
        let Some(snapshot) = take(&mut rest) else {
            return;
        };
        let file = if flags & 2 != 0 {
            snapshot.to_vec()
        } else {
            fuzzing::snapshot_file_of(snapshot.to_vec())
        };
        match Replica::from_snapshot_file(config, &file) {
            Ok(r) => r,
            Err(_) => return,
        }
    } else {
        Replica::new(config)
    };
    let split = (flags >> 3) as usize;
    let mut b = None;
    let mut applied = 0;
    loop {
        if applied == split && b.is_none() {
            b = Some(round_trip(config, &a.backup().expect("a state backs up")));
        }
        let Some(bytes) = take(&mut rest) else {
            break;
        };
        if applied == MAX_ENTRIES {
            break;
        }
        let Ok(cmd) = postcard::from_bytes::<Cmd>(bytes) else {
            continue;
        };
        let index = a.last_index() + 1;
        if index >= RAFT_NUMBER_BOUND {
            // No node appends past the bound (nor restores a snapshot at it).
            break;
        }
        let answered = a.apply(index, cmd.clone());
        if let Some(b) = &mut b {
            assert_eq!(
                b.apply(index, cmd),
                answered,
                "a replica restored from a backup answered otherwise"
            );
        }
        applied += 1;
    }
    // Fewer entries than the split: restored at the end.
    let b = b.unwrap_or_else(|| round_trip(config, &a.backup().expect("a state backs up")));
    let after_a = a.backup().expect("a state backs up");
    let after_b = b.backup().expect("a state backs up");
    assert!(
        after_a == after_b,
        "a replica restored from a backup, fed the same entries, ended elsewhere"
    );
    round_trip(config, &after_a);
});

/// The next 16-bit-length-prefixed part of `rest`, if whole.
fn take<'a>(rest: &mut &'a [u8]) -> Option<&'a [u8]> {
    let (len, tail) = rest.split_first_chunk::<2>()?;
    let len = u16::from_le_bytes(*len) as usize;
    let part = tail.get(..len)?;
    *rest = &tail[len..];
    Some(part)
}

/// The replica `backup` restores to, checked: a backup passes the restore checks (when it
/// was taken after an entry was applied: one taken before is refused, by design) and its
/// state's backup is the same bytes.
fn round_trip(config: ServiceConfig, backup: &[u8]) -> Replica {
    let r = Replica::from_snapshot_file(config, backup)
        .unwrap_or_else(|e| panic!("a backup does not restore: {e}"));
    if r.last_index() > 0 {
        fencelock_server::state_machine::check_backup(backup)
            .unwrap_or_else(|e| panic!("a backup fails its checks: {e}"));
    }
    assert!(
        r.backup().expect("a state backs up") == backup,
        "a restored backup backs up to other bytes"
    );
    r
}
