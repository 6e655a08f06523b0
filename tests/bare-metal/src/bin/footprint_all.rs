//! The core's API, both sides of the wire, behind the thinnest program, to measure the
//! flash it takes on a Cortex-M4F (`scripts/test-bare-metal.sh`: this program's flash less
//! `footprint_base`'s): input frames decoded and handled (every input kind) and encoded
//! again, replies and events encoded and decoded, the queries, `raise_revision`, a
//! snapshot written and restored (plain and keyed), a `FenceGate` admitting, snapshotting
//! and restoring, a `SessionKeeper`. Its inputs are bytes the compiler cannot see through
//! and every result is consumed, so nothing is left out; its panic handler does not
//! format, as a firmware's need not.

#![no_std]
#![no_main]

use core::hint::black_box;

use cortex_m_rt::entry;
use cortex_m_semihosting::debug;
use fencelock::{
    ArrayStorage, Config, FenceGate, GateRow, Input, LockService, NameKey, Output, Reply,
    SessionId, SessionKeeper, Token, MAX_FRAME_LEN,
};

type Service = LockService<ArrayStorage<4, 4, 8>>;

#[entry]
fn main() -> ! {
    let bytes: &[u8] = black_box(&[0u8; 64]);
    let mut frame = [0u8; MAX_FRAME_LEN];
    if let Ok(mut svc) = Service::new(ArrayStorage::new(), black_box(Config::default())) {
        // Frames: a length byte, then the frame.
        let mut rest = bytes;
        while let Some((&n, tail)) = rest.split_first() {
            let (input, tail) = tail.split_at(usize::from(n).min(tail.len()));
            rest = tail;
            let mut sink = |o: Output| {
                if let Ok(n) = o.to_frame(&mut frame) {
                    black_box(Output::from_frame(&frame[..n]).is_ok());
                }
            };
            if let Ok(reply) = svc.handle_frame(input, &mut sink) {
                let mut out = [0u8; MAX_FRAME_LEN];
                if let Ok(n) = reply.to_frame(&mut out) {
                    black_box(Reply::from_frame(&out[..n]).is_ok());
                }
            }
            // A client's side: an input encoded.
            if let Ok(i) = Input::from_frame(black_box(input)) {
                let mut out = [0u8; MAX_FRAME_LEN];
                black_box(i.to_frame(&mut out).is_ok());
            }
        }
        let _ = black_box(svc.raise_revision(black_box(9)));
        let name = core::str::from_utf8(&bytes[..4]).unwrap_or("");
        black_box((svc.usage(), svc.poll_timeout(), svc.revision()));
        black_box(svc.session(SessionId(black_box(1))));
        black_box(svc.sessions().count() + svc.locks().count() + svc.holders(name).count());
        black_box((svc.waiters(name).count(), svc.permits(name)));
        let mut snapshot = [0u8; 2048];
        if let Ok(n) = svc.snapshot(&mut snapshot) {
            let restored = Service::restore(ArrayStorage::new(), black_box(&snapshot[..n]));
            black_box(restored.is_ok());
            let key = NameKey::from_bytes(black_box([1; 16]));
            let keyed = Service::restore_keyed(ArrayStorage::new(), &snapshot[..n], key);
            black_box(keyed.is_ok());
        }
    }
    if let Ok(mut gate) = FenceGate::new([GateRow::EMPTY; 4]) {
        let name = core::str::from_utf8(&bytes[..8]).unwrap_or("");
        let _ = black_box(gate.admit(name, Token(black_box(7))));
        let mut snapshot = [0u8; 512];
        if let Ok(n) = gate.snapshot(&mut snapshot) {
            let restored = FenceGate::restore([GateRow::EMPTY; 4], black_box(&snapshot[..n]));
            black_box(restored.is_ok());
        }
    }
    if let Ok(mut keeper) = SessionKeeper::new(black_box(30), black_box(10), black_box(5)) {
        let now = black_box(3);
        let _ = keeper.keep_alive_sent(now);
        let _ = keeper.keep_alive_acked(now);
        black_box((keeper.may_act(now), keeper.poll_timeout(now)));
    }
    debug::exit(debug::EXIT_SUCCESS);
    #[allow(clippy::empty_loop)]
    loop {}
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    debug::exit(debug::EXIT_FAILURE);
    #[allow(clippy::empty_loop)]
    loop {}
}
