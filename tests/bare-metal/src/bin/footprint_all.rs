//! The core's whole API behind the thinnest program, to measure the flash it takes on a
//! Cortex-M4F (`scripts/test-bare-metal.sh`: this program's flash less `footprint_base`'s):
//! input frames decoded and handled (every input kind), replies and events encoded, a
//! snapshot written and restored, a `FenceGate` admitting, snapshotting and restoring, a
//! `SessionKeeper`. Its inputs are bytes the compiler cannot see through, so nothing is
//! left out; its panic handler does not format, as a firmware's need not.

#![no_std]
#![no_main]

use core::hint::black_box;

use cortex_m_rt::entry;
use cortex_m_semihosting::debug;
use fencelock::{
    ArrayStorage, Config, FenceGate, GateRow, LockService, Output, SessionKeeper, Token,
    MAX_FRAME_LEN,
};

type Service = LockService<ArrayStorage<4, 4, 8>>;

#[entry]
fn main() -> ! {
    let bytes: &[u8] = black_box(&[0u8; 64]);
    let mut frame = [0u8; MAX_FRAME_LEN];
    if let Ok(mut svc) = Service::new(ArrayStorage::new(), Config::default()) {
        // Frames: a length byte, then the frame.
        let mut rest = bytes;
        while let Some((&n, tail)) = rest.split_first() {
            let (input, tail) = tail.split_at(usize::from(n).min(tail.len()));
            rest = tail;
            let mut sink = |o: Output| {
                let _ = black_box(o.to_frame(&mut frame));
            };
            if let Ok(reply) = svc.handle_frame(input, &mut sink) {
                let mut out = [0u8; MAX_FRAME_LEN];
                let _ = black_box(reply.to_frame(&mut out));
            }
        }
        let mut snapshot = [0u8; 2048];
        if let Ok(n) = svc.snapshot(&mut snapshot) {
            let restored = Service::restore(ArrayStorage::new(), black_box(&snapshot[..n]));
            black_box(restored.is_ok());
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
