//! Puts `memory.x` where the linker finds it, and embeds every conformance vector file
//! (`tests/vectors/*.vec`, `tests/vectors/gate/*.vec`) and every seeded random log
//! (`wasm/tests/vectors/*.vec`), each list sorted by name, in the program: a file added
//! there is replayed here with no change to this crate. `BARE_METAL_VECTORS` and
//! `BARE_METAL_SEEDED` name other directories in place of `tests/vectors` and
//! `wasm/tests/vectors` (laid out the same way); the test script uses them to show that a
//! changed byte fails the run.

use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

fn vec_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "vec"))
        .collect();
    files.sort();
    files
}

/// The directory the environment variable `var` names, else `default`; must exist.
fn directory(var: &str, default: PathBuf) -> PathBuf {
    println!("cargo:rerun-if-env-changed={var}");
    let dir = env::var_os(var).map_or(default, PathBuf::from);
    dir.canonicalize()
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
}

fn list(out: &mut String, name: &str, files: &[PathBuf]) {
    writeln!(out, "const {name}: &[(&str, &str)] = &[").unwrap();
    for f in files {
        let file = f.file_name().unwrap().to_string_lossy();
        writeln!(out, "    ({file:?}, include_str!({:?})),", f.display()).unwrap();
        println!("cargo:rerun-if-changed={}", f.display());
    }
    writeln!(out, "];").unwrap();
}

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").unwrap());
    fs::copy("memory.x", out.join("memory.x")).unwrap();
    println!("cargo:rustc-link-search={}", out.display());
    println!("cargo:rerun-if-changed=memory.x");
    // cortex-m-rt's linker script (which includes memory.x); from here rather than from
    // rustflags, which a RUSTFLAGS in the environment would replace.
    println!("cargo:rustc-link-arg-bins=-Tlink.x");

    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap());
    let dir = directory("BARE_METAL_VECTORS", manifest.join("../vectors"));
    let seeded = directory(
        "BARE_METAL_SEEDED",
        manifest.join("../../wasm/tests/vectors"),
    );
    for d in [&dir, &dir.join("gate"), &seeded] {
        println!("cargo:rerun-if-changed={}", d.display());
    }
    let mut src = String::new();
    list(&mut src, "VECTORS", &vec_files(&dir));
    list(&mut src, "GATE_VECTORS", &vec_files(&dir.join("gate")));
    list(&mut src, "SEEDED", &vec_files(&seeded));
    fs::write(out.join("vectors.rs"), src).unwrap();
}
