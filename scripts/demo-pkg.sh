#!/usr/bin/env bash
# Makes web-demo/pkg/ hold the current wasm build (wasm/pkg/web): runs scripts/build-wasm.sh
# (a no-op when its inputs are unchanged), then copies it. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
src=wasm/pkg/web
# build-wasm.sh decides by its own stamp (the raw modules' hash, the wasm-bindgen and
# wasm-opt versions, its scripts) and does nothing when that matches, so it is always
# asked: comparing source times here rebuilt for edits that leave the module as it was,
# and missed a new wasm-opt.
echo "[demo] the wasm core (scripts/build-wasm.sh: rebuilt only when its inputs changed)"
scripts/build-wasm.sh
mkdir -p web-demo/pkg
cp "$src"/fencelock_wasm.js "$src"/fencelock_wasm_bg.wasm "$src"/fencelock_wasm.d.ts web-demo/pkg/
