//! Arbitrary bytes as a server node's Raft log file (`raft.log`) at start: groups of
//! records whose checksums hold (a checksum detects damage, it does not authenticate: the
//! file is whatever could write the data directory made it), then damage anywhere. The
//! file is opened as a node opens it (`LogStore::open`), and as `force-new-cluster
//! --accept-data-loss` does (`open_accepting_loss`).
//!
//! Layout: a byte (bit 0: also open accepting loss) and a group count (at most 16), then
//! each group's payload with a 16-bit length (records, `len: u32 LE | postcard`, or
//! anything: a checksummed group that does not decode is refused, not skipped), then the
//! rest as damage: 16-bit positions (modulo the file's length) and bytes to xor there.
//!
//! Nothing panics, and:
//! - the same bytes open the same way twice (the same log read, or the same refusal);
//! - a log that opens opens again, from the file as a start that passed its checks left
//!   it (a torn tail zeroed; the rewrite of an older version, under a salt drawn anew,
//!   is left out), to the same log: recovery is idempotent;
//! - a log that opens opens accepting loss too, to the same log (accepting loss only
//!   cuts what the strict open refuses).
#![no_main]

use fencelock_server::fuzzing::{self, LogRead};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let [flags, count, rest @ ..] = data else {
        return;
    };
    let mut rest = rest;
    let mut payloads = Vec::new();
    for _ in 0..(*count % 17) {
        let Some((len, tail)) = rest.split_first_chunk::<2>() else {
            break;
        };
        let len = u16::from_le_bytes(*len) as usize;
        let Some(p) = tail.get(..len) else {
            break;
        };
        payloads.push(p);
        rest = &tail[len..];
    }
    let mut file = fuzzing::log_file(&payloads);
    for d in rest.chunks_exact(3) {
        let at = u16::from_le_bytes([d[0], d[1]]) as usize % file.len();
        file[at] ^= d[2];
    }
    let dir = std::env::temp_dir().join(format!("fencelock-fuzz-log-{}", std::process::id()));
    let first = fuzzing::open_log(&dir, &file, false);
    let again = fuzzing::open_log(&dir, &file, false);
    match (&first, &again) {
        (Ok((a, fa)), Ok((b, fb))) => {
            assert_eq!(a, b, "the same file opened to two logs");
            assert!(fa == fb, "the same file was left two ways");
        }
        (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
        _ => panic!("the same file opened once and was refused once: {first:?} / {again:?}"),
    }
    if let Ok((read, left)) = first {
        let (reopened, _) = fuzzing::open_log(&dir, &left, false)
            .unwrap_or_else(|e| panic!("a log that opened is refused the next time: {e}"));
        assert_eq!(reopened, read, "a reopened log reads otherwise");
        if flags & 1 != 0 {
            let (lossy, _) = fuzzing::open_log(&dir, &file, true)
                .unwrap_or_else(|e| panic!("a log that opens is refused accepting loss: {e}"));
            assert_eq!(
                LogRead { cut: None, ..lossy },
                read,
                "accepting loss read another log"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
});
