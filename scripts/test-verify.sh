#!/usr/bin/env bash
# Verification layer (tests/ and fuzz/): runs, in an optimised build,
#   * the conformance vectors (native runner; freshness; coverage) and the C, wasm and
#     bare-metal runners over the same files when those layers are built (test-ffi,
#     test-wasm and test-bare-metal build them),
#   * the error-precedence table (tests/vectors/precedence.calls), typed and through frames,
#   * the deterministic simulation: 10 000 seeds x 1 000 steps (SIM_SEEDS, SIM_STEPS),
#   * stateright model checking (fence on: tokens rise, no stale write; fence off: the GC pause found),
#   * model-based tests against the reference model (PROPTEST_CASES, default 2 000),
#   * determinism, keepers vs hosts that tick late or never, atomic errors for every error
#     kind, fuzz regressions, the fault-injection tests,
#   * each fuzz target for VERIFY_FUZZ_SECONDS (default 20) seconds: the core's frames,
#     snapshots and input sequences, the C ABI, and what a server node reads from peers,
#     clients and files (frames, snapshots, log entries applied),
# and prints the figures tests/README.md quotes ("verification figures" block), failing
# when one with a floor in tests/figure-floors.txt falls below it (scripts/figure-floors.sh).
#
#   scripts/test-verify.sh          what `make test` runs (a few minutes), at its own sizes:
#                                   FENCELOCK_SEED, SIM_SEEDS, SIM_STEPS, SIM_FIRST_SEED
#                                   and PROPTEST_CASES in the environment are ignored (said)
#   scripts/test-verify.sh soak     a longer soak: 200 000 fresh seeds (SIM_SEEDS), seeds
#                                   10 000 onwards, and 300 s per fuzz target
# A failing seed is printed with the command that replays it (SEED=<n> ... replay_seed).
set -euo pipefail
cd "$(dirname "$0")/.."

mode="${1:-test}"
target=$(cargo metadata --format-version 1 --no-deps |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
# What the figures say is what ran: a seed, step count or case count left in the
# environment (to replay one failure, say) would shrink the run with no figure showing it
# (one determinism seed instead of 60, its coverage checks off), so `make test` sets them.
if [ "$mode" = test ]; then
  for v in FENCELOCK_SEED SIM_STEPS SIM_FIRST_SEED PROPTEST_CASES PROPTEST_RNG_SEED SIM_SEEDS SEED SIM_HOST SIM_FAULT SIM_MODEL; do
    if [ -n "${!v:-}" ]; then
      echo "[verify] $v=${!v} in the environment: ignored (the full run's sizes are used)"
      unset "$v"
    fi
  done
fi
export PROPTEST_CASES="${PROPTEST_CASES:-2000}"
# The full sizes (a debug-assertion build would otherwise pick the quick ones).
export SIM_SEEDS="${SIM_SEEDS:-10000}" MODEL_CHECK_FULL=1 VERIFY_FULL=1
fuzz_seconds="${VERIFY_FUZZ_SECONDS:-20}"
if [ "$mode" = soak ]; then
  [ "$SIM_SEEDS" = 10000 ] && SIM_SEEDS=200000
  export SIM_FIRST_SEED="${SIM_FIRST_SEED:-10000}"
  fuzz_seconds="${VERIFY_FUZZ_SECONDS:-300}"
fi
log=$(mktemp)
trap 'rm -f "$log" "$log.wasm"' EXIT

echo "[verify] cargo test --profile verify -p fencelock-tests --features fault-injection (vectors, precedence, simulation, model checking, model-based, determinism, keepers, atomic errors, faults)"
if ! cargo test --profile verify -p fencelock-tests --features fault-injection -- --nocapture --test-threads 1 >"$log" 2>&1; then
  # The failure's context, or the log's tail when nothing matches (a compile error, a timeout);
  # `|| tail` keeps `set -o pipefail` from ending the script before anything is printed.
  { grep -E -A40 "panicked|simulation failed|FAILED" "$log" || tail -n 150 "$log"; } | head -n 200
  echo "[verify] FAILED (excerpt of the log above; a failing seed replays with the command it printed)"
  exit 1
fi
grep -oE "(SIM|MODELCHECK|KEEPERS) .*|replayed [0-9]+ vectors.*|precedence: .*|host [A-Za-z]+: .*|shrunk to [0-9]+ inputs|FAULT .*|fence off: .*" "$log" | sed 's/^/[verify] /'

# The seed corpus must hold every vector's frames and snapshots (a vector added without
# reseeding leaves the fuzzer to find its inputs again, or never).
python3 fuzz/make-corpus.py --check | sed 's/^/[verify] /'
# The server targets' seeds: frames and entries as this build writes them.
cargo run -q -p fencelock-server --features fuzzing --example fuzz_seeds -- --check
echo "[verify] fuzzing each target for ${fuzz_seconds}s"
# Captured for the figures below; on a failure (a crash, no executions) shown, then fatal.
if ! fuzz_out=$(FUZZ_SECONDS="$fuzz_seconds" scripts/fuzz.sh); then
  echo "$fuzz_out" | sed 's/^/[verify] /'
  echo "[verify] fuzzing FAILED" >&2
  exit 1
fi
echo "$fuzz_out" | sed 's/^/[verify] /'

# The same vector files through the other layers, when their artifacts exist.
vectors=(tests/vectors/*.vec)
layers="native"
# A runner built before its sources last changed (the core's or its binding's) replays old
# code: not counted as run. stale ARTIFACT DIR...
stale() { local a=$1; shift; [ -n "$(find "$@" -newer "$a" -print -quit)" ]; }
c_line=""
if [ -x "$target/ffi-test/vectors" ] && stale "$target/ffi-test/vectors" core/src ffi/src ffi/include ffi/tests/c; then
  echo "[verify] the C runner is older than its sources (scripts/test-ffi.sh rebuilds it)"
elif [ -x "$target/ffi-test/vectors" ]; then
  # The C runner reads the precedence table too (through the typed C functions).
  c_line=$("$target/ffi-test/vectors" "${vectors[@]}" tests/vectors/precedence.calls)
  echo "[verify] C ABI runner: $c_line"
  layers="$layers c"
fi
# The core built for a Cortex-M4F, in QEMU, once scripts/test-bare-metal.sh has built it:
# built again first (a no-op when nothing changed), since it embeds the vector files and
# the core of its last build.
bare="$target/bare-metal/thumbv7em-none-eabihf/release/fencelock-bare-metal"
if [ -x "$bare" ] && command -v qemu-system-arm >/dev/null 2>&1; then
  (cd tests/bare-metal && env -u BARE_METAL_VECTORS -u BARE_METAL_SEEDED \
    CARGO_TARGET_DIR="$target/bare-metal" cargo build --release --locked --quiet)
  bare_line=$(timeout 120 qemu-system-arm -machine mps2-an386 -cpu cortex-m4 -nographic \
    -monitor none -serial none -semihosting-config enable=on,target=native -kernel "$bare") || {
    echo "$bare_line"
    echo "[verify] bare-metal runner FAILED"
    exit 1
  }
  echo "[verify] bare-metal runner (thumbv7em in QEMU): $bare_line"
  grep -qF "thumbv7em vectors: ${#vectors[@]} files, " <<<"$bare_line" || {
    echo "[verify] the bare-metal runner was built over other vector files: run scripts/test-bare-metal.sh"
    exit 1
  }
  layers="$layers thumbv7em"
fi
if [ -f wasm/pkg/node/package.json ] && stale wasm/pkg/node/package.json core/src wasm/src wasm/js; then
  echo "[verify] the wasm package is older than its sources (scripts/test-wasm.sh rebuilds it)"
elif [ -f wasm/pkg/node/package.json ] && [ -f wasm/tests/conformance.test.mjs ]; then
  if scripts/node-test.sh wasm/tests/conformance.test.mjs >"$log.wasm" 2>&1; then
    echo "[verify] wasm runner (node): $(grep -E '^# (pass|fail)' "$log.wasm" | tr '\n' ' ')"
    layers="$layers wasm"
  else
    cat "$log.wasm"
    echo "[verify] wasm conformance runner FAILED"
    exit 1
  fi
  rm -f "$log.wasm"
fi

passed=$({ grep -Eo 'test result: ok\. [0-9]+ passed' "$log" || true; } | awk '{s+=$4} END {print s+0}')
failed=$({ grep -Eo '[0-9]+ failed' "$log" || true; } | awk '{s+=$1} END {print s+0}')
sim=$(grep -m1 -oE 'SIM seeds=.*' "$log" || true)
states=$({ grep -Eo 'fence=on states=[0-9]+' "$log" || true; } | awk -F= '{s+=$3} END {print s+0}')
configs=$(grep -c 'fence=on states=' "$log" || true)
cex=$(grep -m1 -Eo 'fence=off states=[0-9]+ depth=[0-9]+' "$log" || true)
inputs=$(grep -m1 -Eo 'replayed [0-9]+ vectors, [0-9]+ inputs' "$log" || true)
precedence=$(grep -m1 -Eo 'precedence: [0-9]+ rows, [0-9]+ refusals' "$log" | sed 's/precedence: //' || true)
keepers=$({ grep -Eo 'KEEPERS host ticks [A-Za-z]+: [0-9]+ seeds' "$log" || true; } | sed -E 's/KEEPERS host ticks ([A-Za-z]+): ([0-9]+) seeds/\1 \2/' | tr '\n' ';' | sed 's/;$//')
sim_failures=$(grep -Eo 'failures=[0-9]+' <<<"$sim" | cut -d= -f2 || true)
fuzz_lines=$(grep -E '^FUZZ target' <<<"$fuzz_out" || true)
fuzz_crashes=$({ grep -Eo 'crashes=[0-9]+' <<<"$fuzz_lines" || true; } | awk -F= '{s+=$2} END {print s+0}')
fuzz_targets=$(grep -c . <<<"$fuzz_lines" || true)
# Each fault-injection test fails unless its fault is caught, so with 0 failed tests every
# injected fault was detected; the figures below are counted from the FAULT lines.
fault_names=$(grep -oE 'FAULT [a-z-]+ caught' "$log" | awk '{print $2}' | sort -u || true)
faults=$(grep -c . <<<"$fault_names" || true)
detections=$(grep -c 'FAULT .* caught' "$log" || true)
by_sim=$(grep -c 'FAULT .* caught by the simulation' "$log" || true)
by_mc=$(grep -c 'FAULT .* caught by the model checker' "$log" || true)
nlayers=$(wc -w <<<"$layers")
# A runner left out is said, not just missing from the count; `make test` builds every
# layer first and sets VERIFY_ALL_LAYERS=1, so there a layer left out fails the run.
not_run=""
for l in c thumbv7em wasm; do
  grep -qw "$l" <<<"$layers" || not_run="$not_run $l"
done
for l in $not_run; do
  case $l in
    c) how="scripts/test-ffi.sh builds it" ;;
    thumbv7em) how="scripts/test-bare-metal.sh builds it; needs qemu-system-arm" ;;
    wasm) how="scripts/test-wasm.sh builds it" ;;
  esac
  echo "[verify] NOT RUN: the $l vector runner ($how)"
done
if [ -n "$not_run" ] && [ "${VERIFY_ALL_LAYERS:-}" = 1 ]; then
  echo "[verify] FAILED: every layer's runner must run here (VERIFY_ALL_LAYERS=1); not run:$not_run" >&2
  exit 1
fi
cat <<SUMMARY

=== verification figures ($(date -u +%Y-%m-%dT%H:%MZ), mode $mode) ===
simulation:      $(sed -E 's/.*seeds=([0-9]+) steps_per_seed=([0-9]+) first_seed=([0-9]+).*steps=([0-9]+) inputs=([0-9]+).*/\1 seeds x \2 steps from seed \3 (\4 steps, \5 inputs in all)/' <<<"$sim"), ${sim_failures:-?} failures
                 $(grep -Eo 'grants=[0-9]+ expiries=[0-9]+ waits=[0-9]+ pauses=[0-9]+' <<<"$sim") $(grep -Eo 'stale_writes_refused=[0-9]+' <<<"$sim")
model checking:  $states states explored over $configs fence-on configurations, tokens rise, no stale write; fence off: counterexample found ($cex)
fuzzing:         $(sed -E 's/FUZZ target=([a-z_]+) seconds=([0-9]+) executions=([0-9?]+).*/\1 \3/' <<<"$fuzz_lines" | tr '\n' ';' | sed 's/;/ executions; /g')$fuzz_crashes crashes over $fuzz_targets targets
vectors:         ${#vectors[@]} files ($inputs) replayed by $nlayers runners ($layers), each passed
precedence:      ${precedence:-?} (native: typed and through frames; the wasm runner above replays every row, the C runner every row but those with request=0, which C's typed calls take as no number: an advance there)
keepers:         no session lost while its SessionKeeper said safe, hosts ticking late / never (seeds: ${keepers:-?})
faults injected: $faults ($(tr '\n' ' ' <<<"$fault_names" | sed 's/ $//')), $detections detections ($by_sim by the simulation, $by_mc by the model checker)
tests:           $passed passed, $failed failed (fencelock-tests, optimised build; PROPTEST_CASES=$PROPTEST_CASES)
SUMMARY
# The figures must not shrink unnoticed: each counted one against its floor in
# tests/figure-floors.txt (the C runner's typed calls only when it ran; a runner left out
# is reported above, and fails a `make test`).
floor_args=("faults-injected=$faults" "fault-detections=$detections" "tests-passed=$passed"
  "fuzz-targets=$fuzz_targets" "model-configs=$configs")
if [ -n "$c_line" ]; then
  floor_args+=("c-typed-calls=$(grep -m1 -oE '[0-9]+ typed calls replayed' <<<"$c_line" | cut -d' ' -f1 || true)")
fi
if ! floor_out=$(scripts/figure-floors.sh "${floor_args[@]}"); then
  echo "$floor_out" | sed 's/^/[verify] /'
  echo "[verify] FAILED: a figure fell below its floor (tests/figure-floors.txt)" >&2
  exit 1
fi
echo "$floor_out" | sed 's/^/[verify] /'
[ "$failed" -eq 0 ]
