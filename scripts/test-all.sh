#!/usr/bin/env bash
# Runs every test of every layer, in dependency order. Stops at the first failure.
set -euo pipefail
cd "$(dirname "$0")/.."
step() { printf '\n=== %s ===\n' "$*"; }

step "format and lints"
make --no-print-directory lint
step "Rust tests (core and workspace)"
make --no-print-directory test-rust
step "no_std build for a bare-metal target (thumbv7em-none-eabihf)"
make --no-print-directory test-nostd
# The partition test (scripts/test-partitions.sh) runs by `make test-partitions` for now: it
# joins this list once its short form has a record of passing on an otherwise idle machine.
for layer in ffi wasm docs packages demo verify server fence; do
  if [ -x "scripts/test-$layer.sh" ]; then
    step "$layer"
    "scripts/test-$layer.sh"
  fi
done
step "all tests passed"
