//! Gives the shared library an ELF soname, so programs linked against it record
//! `libfencelock.so.<ABI>` and an installed `libfencelock.so.<version>` (with the
//! `libfencelock.so.<ABI>` link `make install` makes) serves them until the ABI breaks.
//! Before 1.0 every minor release may break it (the changelog lists each break), so the
//! ABI number is `0.<minor>`; from 1.0 on it is the major version.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if os != "linux" {
        return; // other platforms name libraries their own way; nothing to set
    }
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").unwrap_or_default();
    let minor = std::env::var("CARGO_PKG_VERSION_MINOR").unwrap_or_default();
    let abi = if major == "0" {
        format!("0.{minor}")
    } else {
        major
    };
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libfencelock.so.{abi}");
}
