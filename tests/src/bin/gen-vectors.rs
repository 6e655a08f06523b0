//! Rewrites `tests/vectors/*.vec` from the scenario definitions.
//! Run: `cargo run -p fencelock-tests --bin gen-vectors`.

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
}
