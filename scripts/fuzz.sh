#!/usr/bin/env bash
# Fuzzes each cargo-fuzz target (fuzz/fuzz_targets) for FUZZ_SECONDS seconds (default 300;
# scripts/test-verify.sh runs each for ~20 s). The committed corpus in fuzz/corpus/<target>
# seeds every run and is never modified: new inputs go to a temporary directory, and a
# crash leaves its reproducer in fuzz/artifacts/<target>/ (replay it with
# `cargo +nightly fuzz run --features server <target> <file>`; c_abi: `--sanitizer address`
# and no feature). Prints one FUZZ line per target. The core's seeds come from the vectors
# (fuzz/make-corpus.py), the server's from the build (`cargo run -p fencelock-server
# --features fuzzing --example fuzz_seeds`).
# Needs nightly and cargo-fuzz (scripts/setup.sh installs them).
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZ_SECONDS="${FUZZ_SECONDS:-300}"
TARGETS="${FUZZ_TARGETS:-frame_decode snapshot_restore input_sequence c_abi server_frames server_state server_log}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# No sanitizer for the core's targets: the code under test is safe Rust
# (forbid(unsafe_code)), so ASan would only slow the search; panics and failed assertions
# are what they report. c_abi drives the C ABI, whose extern functions are `unsafe` code
# handling caller pointers: it runs under AddressSanitizer, built in a target directory of
# its own (fuzz/target/asan) so that neither build undoes the other. The server's targets
# (server_frames, server_state, server_log: what a node reads from peers, clients and its
# files) need the
# fuzz crate's `server` feature; the other targets in fuzz/target are built with it too,
# so that one set of dependencies serves them all.
root=$PWD
flags() { if [ "$1" = c_abi ]; then echo address; else echo none; fi; }
dir() { if [ "$1" = c_abi ]; then echo "$root/fuzz/target/asan"; else echo "$root/fuzz/target"; fi; }
features() { if [ "$1" = c_abi ]; then echo ""; else echo server; fi; }
for t in $TARGETS; do
  build=(env CARGO_TARGET_DIR="$(dir "$t")" cargo +nightly fuzz build --sanitizer "$(flags "$t")" --features "$(features "$t")" "$t")
  (cd fuzz && "${build[@]}" >/dev/null 2>&1) || (cd fuzz && "${build[@]}")
done
total=0
touch "$work/start" # reproducers written after this are this run's
for t in $TARGETS; do
  mkdir -p "$work/$t"
  log="$work/$t.log"
  # -timeout: an input that takes 10 s is a failure (a loop), not a wait of libFuzzer's
  # default 20 minutes.
  if ! (cd fuzz && CARGO_TARGET_DIR="$(dir "$t")" cargo +nightly fuzz run --sanitizer "$(flags "$t")" \
        --features "$(features "$t")" "$t" "$work/$t" "corpus/$t" -- -max_total_time="$FUZZ_SECONDS" -rss_limit_mb=2048 \
        -timeout=10 -print_final_stats=1) >"$log" 2>&1; then
    tail -n 60 "$log"
    echo "FUZZ target=$t FAILED (reproducer in fuzz/artifacts/$t/)"
    exit 1
  fi
  runs=$(awk '/^stat::number_of_executed_units:/ {print $2}' "$log" | tail -n1)
  runs=${runs:-$(grep -o 'Done [0-9]* runs' "$log" | awk '{print $2}' | tail -n1)}
  # A run that cannot say it executed anything fuzzed nothing: that is a failure, not 0.
  if ! [ "${runs:-0}" -gt 0 ] 2>/dev/null; then
    tail -n 20 "$log"
    echo "FUZZ target=$t FAILED: no executions recorded"
    exit 1
  fi
  corpus=$(ls "fuzz/corpus/$t" | wc -l)
  crashes=$(find "fuzz/artifacts/$t" -type f -newer "$work/start" 2>/dev/null | wc -l)
  echo "FUZZ target=$t seconds=$FUZZ_SECONDS executions=$runs seed_corpus=$corpus crashes=$crashes"
  [ "$crashes" = 0 ] || { echo "FUZZ target=$t FAILED (reproducer in fuzz/artifacts/$t/)"; exit 1; }
  total=$((total + runs))
done
echo "FUZZ total_executions=$total"
