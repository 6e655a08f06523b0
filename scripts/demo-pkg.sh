#!/usr/bin/env bash
# Makes web-demo/pkg/ hold the current wasm build (wasm/pkg/web): runs scripts/build-wasm.sh
# when the package is missing or a wasm/core source is newer, then copies it. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
src=wasm/pkg/web
stale=0
if [ ! -f "$src/fencelock_wasm_bg.wasm" ]; then
  stale=1
# What the build reads: the two crates and the core, the workspace manifest (its release
# profile) and lock file, the build's flags and scripts, and the JS it wraps.
elif [ -n "$(find core/src wasm/src wasm/args/src core/Cargo.toml wasm/Cargo.toml wasm/args/Cargo.toml Cargo.toml Cargo.lock scripts/wasm-flags.sh scripts/build-wasm.sh wasm/js -newer "$src/fencelock_wasm_bg.wasm" -print -quit 2>/dev/null)" ]; then
  stale=1
fi
if [ "$stale" = 1 ]; then
  echo "[demo] building the wasm core (scripts/build-wasm.sh)"
  scripts/build-wasm.sh
fi
mkdir -p web-demo/pkg
cp "$src"/fencelock_wasm.js "$src"/fencelock_wasm_bg.wasm "$src"/fencelock_wasm.d.ts web-demo/pkg/
