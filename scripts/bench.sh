#!/usr/bin/env bash
# make bench: every benchmark of the core and its bindings in one run, then BENCHMARKS.md.
#   1. criterion: benches/benches/core.rs (native core + std baselines) and
#      benches/benches/ffi.rs (the same operations through the C ABI);
#   2. the goal pairs again, interleaved (bench-pairs: fastest batch of each side, the
#      estimate least disturbed by other jobs on a shared machine);
#      memory figures (bench-memory) and, if valgrind is installed, instructions per
#      operation under callgrind (bench-ops at two repetition counts, difference divided);
#   3. the wasm build under node (benches/js/bench.mjs), if wasm/pkg/node exists or
#      scripts/build-wasm.sh can build it;
#   4. benches/report.py writes BENCHMARKS.md from those results.
#
# Knobs (environment): BENCH_MEASURE_SECS (criterion measurement time per benchmark,
# default 2), BENCH_WARMUP_SECS (default 0.5), BENCH_SAMPLES (default 20),
# BENCH_FILTER (a criterion filter regex; default all), BENCH_JS_SECS (default 1),
# BENCH_PAIRS_ROUNDS (interleaved goal pairs, default 200), BENCH_WASM=0 /
# BENCH_CALLGRIND=0 to skip those parts, BENCH_OUT (default BENCHMARKS.md).
# With the defaults the whole run takes about 6–8 minutes on 2 cores (plus a cold
# release build, ~1–3 min).
set -euo pipefail
cd "$(dirname "$0")/.."
log() { printf '[bench] %s\n' "$*"; }

MEASURE=${BENCH_MEASURE_SECS:-2}
WARMUP=${BENCH_WARMUP_SECS:-0.5}
SAMPLES=${BENCH_SAMPLES:-20}
FILTER=${BENCH_FILTER:-}
OUT=${BENCH_OUT:-BENCHMARKS.md}

target=$(cargo metadata --format-version 1 --no-deps |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
side="$target/bench-report"
rm -rf "$side" "$target/criterion" # the report reads this run's results only
mkdir -p "$side"

nproc_=$(nproc)
python3 - "$side/meta.json" <<EOF
import json, os, platform, subprocess, sys, datetime
def sh(*c):
    try: return subprocess.run(c, capture_output=True, text=True).stdout.strip()
    except OSError: return "n/a"
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "n/a")
mhz = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("cpu MHz")), "")
cache = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("cache size")), "")
mem = next((l.split()[1] for l in open("/proc/meminfo") if l.startswith("MemTotal")), "0")
json.dump({
  "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
  "cpu": f"{cpu} ({mhz} MHz, {cache} cache per /proc/cpuinfo)",
  "nproc": "$nproc_",
  "mem": f"{int(mem) // 1024 // 1024} GiB",
  "rustc": sh("rustc", "-V"),
  "node": sh("node", "--version") or "n/a",
  "kernel": platform.release(),
  "load_before": " ".join(open("/proc/loadavg").read().split()[0:3]),
  "criterion": "warm-up ${WARMUP} s, measurement ${MEASURE} s, ${SAMPLES} samples per benchmark",
  "commit": sh("git", "rev-parse", "--short", "HEAD") + (" + uncommitted changes in core/ffi/wasm/benches" if sh("git", "status", "--porcelain", "--untracked-files=no", "--", "core", "ffi", "wasm", "benches") else ""),
}, open(sys.argv[1], "w"), indent=1)
EOF

log "criterion: benches core + ffi (measurement ${MEASURE}s, warm-up ${WARMUP}s, ${SAMPLES} samples)"
# shellcheck disable=SC2086
cargo bench -p fencelock-bench --bench core --bench ffi -- \
  --warm-up-time "$WARMUP" --measurement-time "$MEASURE" --sample-size "$SAMPLES" --noplot $FILTER

log "interleaved pairs: fencelock vs baseline, fastest batch of each"
cargo run --release --quiet -p fencelock-bench --bin bench-pairs -- "${BENCH_PAIRS_ROUNDS:-200}" >"$side/pairs.json"

log "memory figures"
cargo run --release --quiet -p fencelock-bench --bin bench-memory >"$side/memory.json"

if [ "${BENCH_CALLGRIND:-1}" != 0 ] && command -v valgrind >/dev/null 2>&1; then
  log "callgrind: instructions per operation"
  cargo build --release --quiet -p fencelock-bench --bin bench-ops
  ops="$target/release/bench-ops"
  # Only the measured function (`fencelock_bench::<Workload>::run`) is counted, so setup
  # is excluded; the cache and branch simulation give D1 misses and mispredicts per op.
  per_op() { # workload size reps ops_per_rep -> {"ir":..,"d1":..,"bm":..} per op
    valgrind --tool=callgrind --cache-sim=yes --branch-sim=yes \
      --toggle-collect='fencelock_bench::*::run' --callgrind-out-file=/dev/null \
      "$ops" "$1" "$2" "$3" 2>&1 | python3 -c '
import re, sys
t = sys.stdin.read()
def n(label):
    m = re.search(label + r":\s+([\d,]+)", t)
    return int(m.group(1).replace(",", "")) if m else 0
ops = int(sys.argv[1])
print("{\"ir\": %.1f, \"d1\": %.2f, \"bm\": %.2f}" % (n("I\s+refs") / ops, n("D1\s+misses") / ops, n("Mispredicts") / ops))
' $(($3 * $4))
  }
  {
    echo "{"
    echo "\"uncontended\": $(per_op uncontended 1024 8 1024),"
    echo "\"map_string\": $(per_op map_string 1024 8 1024),"
    echo "\"map_str\": $(per_op map_str 1024 8 1024),"
    echo "\"handoff\": $(per_op handoff 1024 8 1024),"
    echo "\"map_handoff\": $(per_op map_handoff 1024 8 1024),"
    echo "\"tick_idle\": $(per_op tick_idle 16384 100000 1),"
    echo "\"keep_alive\": $(per_op keep_alive 16384 100000 1)"
    echo "}"
  } >"$side/callgrind.json"
else
  log "callgrind: skipped (BENCH_CALLGRIND=0 or no valgrind)"
fi

if [ "${BENCH_WASM:-1}" != 0 ]; then
  # build-wasm.sh is incremental (a no-op when wasm/pkg matches the current sources), so
  # the bench measures the current core rather than a stale package.
  if [ -x scripts/build-wasm.sh ]; then
    log "scripts/build-wasm.sh (brings wasm/pkg up to date)"
    UPDATE_DOCS=1 scripts/build-wasm.sh >/dev/null || log "wasm build failed; measuring the existing wasm/pkg if any"
  fi
  if [ -f wasm/pkg/node/fencelock_wasm.js ]; then
    log "wasm under node: benches/js/bench.mjs"
    node benches/js/bench.mjs wasm/pkg/node >"$side/wasm.json"
  else
    log "wasm: no wasm/pkg/node, skipped"
  fi
fi

python3 - "$side/meta.json" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1]))
m["load_after"] = " ".join(open("/proc/loadavg").read().split()[0:3])
json.dump(m, open(sys.argv[1], "w"), indent=1)
EOF

python3 benches/report.py --target "$target" --out "$OUT"
log "done: $OUT"
