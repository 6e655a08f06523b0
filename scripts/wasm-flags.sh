# Sourced by scripts/build-wasm.sh (the shipped module) and scripts/wasm-floor.sh (the size
# floor make bench measures): how a wasm module of this project is built, in one place.
# Run from the repository root; needs tools/node_modules (wasm-opt).
#
#   wasm_cargo_build PACKAGE   the release build for wasm32-unknown-unknown
#   wasm_opt FILE              wasm-opt's passes, in place
#
# Size over speed for the release build of a wasm crate (the lock rules are cheap; the bundle is
# what a browser downloads). "z" since the crate is no_std on wasm32: 135.7 KB raw / 52.4 KB
# gzip after wasm-opt, against 144.7 / 55.1 with "s" (measured on the same sources). Only the wasm32 build sees these
# settings; the workspace's release profile is unchanged for every other build. The price
# (callgrind, wasm/README.md): about 1.1x the instructions of "s" for an acquire + release from
# JS, 1.50x for a snapshot restore + encode.
# The core crate alone ("fencelock") at "s": its acquire and release are the hot path of the
# typed fast path, and "s" takes an acquire + release by interned id from about 5 700 to
# 4 600 instructions under node (measured with the core as it was then) for 0.6 KB raw / 1.5 KB gzipped
# (opt-level 2 or 3 there: 4 100, for 11 KB raw). Measured in wasm/README.md.
# The panic locations the compiler keeps (a trap never prints them) name dependencies by
# their path in the cargo registry: written relative to its source folder, they take less
# room and the module no longer depends on where the builder's cargo home is. A prefix, not
# a folder list, so the flags (and the build) are the same before the registry exists.
# The wasm-opt of tools/ (binaryen from npm; Debian's older one makes modules that crash).
WASM_OPT=tools/node_modules/.bin/wasm-opt

wasm_cargo_build() {
  local rustflags="[\"--remap-path-prefix=${CARGO_HOME:-$HOME/.cargo}/registry/src/=\"]"
  CARGO_PROFILE_RELEASE_OPT_LEVEL=z CARGO_PROFILE_RELEASE_PANIC=abort \
    cargo build --release --target wasm32-unknown-unknown -p "$1" --quiet \
    --config 'profile.release.package.fencelock.opt-level="s"' \
    --config "target.wasm32-unknown-unknown.rustflags=$rustflags"
}

wasm_opt() {
  # --strip-target-features: the features section is for linkers, no engine reads it.
  "$WASM_OPT" -Oz --converge --strip-debug --strip-producers \
    --strip-target-features --enable-bulk-memory --enable-nontrapping-float-to-int \
    --enable-sign-ext --enable-mutable-globals --enable-reference-types --enable-multivalue \
    "$1" -o "$1"
}
