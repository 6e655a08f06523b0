//! Rewrites `tests/vectors/*.vec` from the scenario definitions, and the gate vectors in
//! `tests/vectors/gate/*.vec`.
//! Run: `cargo run -p fencelock-tests --bin gen-vectors`.

use fencelock_tests::gate_vectors;

fn main() {
    let dir = fencelock_tests::vectors::vectors_dir();
    std::fs::create_dir_all(&dir).expect("create vectors dir");
    for sc in fencelock_tests::vectors::scenarios() {
        let text = match fencelock_tests::vectors::render(&sc) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("gen-vectors: {e}");
                std::process::exit(1);
            }
        };
        let path = dir.join(format!("{}.vec", sc.name));
        std::fs::write(&path, text).expect("write vector");
        println!("wrote {}", path.display());
    }
    let dir = gate_vectors::gate_vectors_dir();
    std::fs::create_dir_all(&dir).expect("create gate vectors dir");
    for sc in gate_vectors::gate_scenarios() {
        let text = gate_vectors::render_gate(&sc).unwrap_or_else(|e| {
            eprintln!("gen-vectors: {e}");
            std::process::exit(1);
        });
        let path = dir.join(format!("{}.vec", sc.name));
        std::fs::write(&path, text).expect("write gate vector");
        println!("wrote {}", path.display());
    }
}
