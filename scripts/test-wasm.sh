#!/usr/bin/env bash
# Builds the wasm package (scripts/build-wasm.sh) and runs its JS tests under node's
# built-in test runner against the built node package: wasm/tests/*.test.mjs (every
# input and query, the GC-pause story, every bad-input case, garbage that must never
# trap, the .d.ts types, and every conformance vector incl. the native determinism one).
# The native side of the determinism test runs in `cargo test` (wasm/tests/native_vector.rs).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build-wasm.sh
echo "[test-wasm] node --test wasm/tests/"
node --test wasm/tests/
# The wasm benchmark (make bench) drives the same package: run each workload briefly so an
# API change that breaks it fails here, not on the next benchmark run.
echo "[test-wasm] benches/js/bench.mjs (each workload once, briefly)"
BENCH_JS_SECS=0.02 node benches/js/bench.mjs >/dev/null
