#!/usr/bin/env bash
# Runs every test of every layer, in dependency order. Stops at the first failure.
set -euo pipefail
cd "$(dirname "$0")/.."
step() { printf '\n=== %s ===\n' "$*"; }

step "format and lints"
make --no-print-directory lint
step "Rust tests (core and workspace)"
make --no-print-directory test-rust
step "bare metal (thumbv7em-none-eabihf): the no_std build, and the vectors replayed on a Cortex-M4 in QEMU"
make --no-print-directory test-nostd
# partitions: the short form of the partition test (each fault once, ~80 s; the long,
# randomised form is `make test-partitions`).
for layer in ffi wasm docs packages demo verify server fence partitions; do
  if [ -x "scripts/test-$layer.sh" ]; then
    step "$layer"
    "scripts/test-$layer.sh"
  fi
done
step "all tests passed"
