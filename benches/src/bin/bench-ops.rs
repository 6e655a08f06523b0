//! Runs one workload a given number of times, for instruction counts under callgrind
//! (`valgrind --tool=callgrind bench-ops <workload> <size> <reps>`): scripts/bench.sh runs
//! it at two repetition counts and divides the difference, which cancels the setup.
//!
//! Workloads: uncontended, map_string, map_str, cabi_uncontended (size = locks; the last
//! is `uncontended` through the C ABI with its outputs drained, `fencelock_bench::cabi`),
//! handoff, map_handoff (size = batch), tick_idle, keep_alive, keep_alive_shuffled (size =
//! sessions, a power of two for the shuffled one; reps = ticks or keep-alives).

use fencelock_bench::*;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 4 {
        eprintln!("usage: bench-ops <workload> <size> <reps>");
        std::process::exit(2);
    }
    let size: usize = args[2].parse().expect("size is a number");
    let reps: usize = args[3].parse().expect("reps is a number");
    match args[1].as_str() {
        "uncontended" => {
            let mut w = Uncontended::new(size);
            (0..reps).for_each(|_| w.run());
        }
        "cabi_uncontended" => {
            let mut w = cabi::CabiUncontended::new(size);
            (0..reps).for_each(|_| w.run());
        }
        "map_string" => {
            let mut w = MapOwned::new(size);
            (0..reps).for_each(|_| w.run());
        }
        "map_str" => {
            let names = names("lock", size);
            let mut w = MapBorrowed::new(&names);
            (0..reps).for_each(|_| w.run());
        }
        "handoff" => {
            let mut w = Handoff::new(size);
            for _ in 0..reps {
                w.prepare(size);
                w.run(size);
                w.finish();
            }
        }
        "map_handoff" => {
            let mut w = MapHandoff::new(size);
            for _ in 0..reps {
                w.prepare(size);
                w.run(size);
            }
        }
        "tick_idle" => TickIdle::new(size).run(reps),
        "keep_alive" => KeepAlive::new(size).run(reps),
        "keep_alive_shuffled" => KeepAlive::shuffled(size).run(reps),
        other => {
            eprintln!("unknown workload {other}");
            std::process::exit(2);
        }
    }
}
