//! The flash a program takes without the core: `footprint_all` less this is what the
//! core adds (`scripts/test-bare-metal.sh` measures both). The same start-up, input bytes
//! the compiler cannot see through, exit and panic handler as `footprint_all`, and nothing
//! else.

#![no_std]
#![no_main]

use core::hint::black_box;

use cortex_m_rt::entry;
use cortex_m_semihosting::debug;

#[entry]
fn main() -> ! {
    let bytes: &[u8] = black_box(&[0u8; 64]);
    black_box(bytes);
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
