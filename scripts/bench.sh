#!/usr/bin/env bash
# make bench: every benchmark of the core and its bindings in one run, then BENCHMARKS.md.
#   1. criterion: benches/benches/core.rs (native core + std baselines) and
#      benches/benches/ffi.rs (the same operations through the C ABI);
#   2. the goal pairs again, interleaved (bench-pairs: fastest batch of each side, the
#      estimate least disturbed by other jobs on a shared machine);
#      memory figures (bench-memory) and, if valgrind is installed, instructions per
#      operation under callgrind (bench-ops at two repetition counts, difference divided;
#      the C-ABI workload also from a C host, ffi/tests/c/ops.c, if gcc is installed);
#   3. the wasm build (scripts/build-wasm.sh): its bundle size, then the package under
#      node (benches/js/bench.mjs) and, with valgrind, instructions per acquire + release
#      (benches/js/instructions.cjs at two round counts); the size floor of a module
#      (scripts/wasm-floor.sh: benches/wasm-floor built as the shipped module); Python through ctypes, a call per
#      input against a batch (benches/py/batch.py);
#   4. benches/report.py writes BENCHMARKS.md from those results.
#
# Knobs (environment): BENCH_MEASURE_SECS (criterion measurement time per benchmark,
# default 2), BENCH_WARMUP_SECS (default 0.5), BENCH_SAMPLES (default 20),
# BENCH_FILTER (a criterion filter regex; default all), BENCH_JS_SECS (default 1),
# BENCH_PAIRS_ROUNDS (interleaved goal pairs, default 200), BENCH_WASM_ROUNDS (the two
# round counts of the wasm instruction count, default "56 206"), BENCH_WASM=0 /
# BENCH_CALLGRIND=0 to skip those parts (the report then says "not measured" for what
# they measure), BENCH_OUT (default BENCHMARKS.md; with BENCH_FILTER, the partial report goes
# to bench-report/BENCHMARKS.partial.md in the target dir unless BENCH_OUT says where).
# With the defaults the whole run takes about 10 minutes on 2 cores (plus a cold
# release build, ~1–3 min, and a cold build of the wasm floor, ~1 min).
set -euo pipefail
cd "$(dirname "$0")/.."
log() { printf '[bench %s] %s\n' "$(date -u +%T)" "$*"; }

MEASURE=${BENCH_MEASURE_SECS:-2}
WARMUP=${BENCH_WARMUP_SECS:-0.5}
SAMPLES=${BENCH_SAMPLES:-20}
FILTER=${BENCH_FILTER:-}
# A filtered run measures some rows only: its report goes beside the results, not over
# the run of record, unless BENCH_OUT says where.
if [ -n "$FILTER" ]; then
  OUT=${BENCH_OUT:-}
else
  OUT=${BENCH_OUT:-BENCHMARKS.md}
fi

target=$(cargo metadata --format-version 1 --no-deps |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
side="$target/bench-report"
rm -rf "$side" "$target/criterion" # the report reads this run's results only
mkdir -p "$side"
[ -n "$OUT" ] || OUT="$side/BENCHMARKS.partial.md"

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
  "commit": sh("git", "rev-parse", "--short", "HEAD") + (" + uncommitted changes in the code measured (core, ffi, wasm, benches, scripts, Cargo.toml, Cargo.lock)" if sh("git", "status", "--porcelain", "--untracked-files=no", "--", "core", "ffi", "wasm", "benches", "scripts", "Cargo.toml", "Cargo.lock", ":!*.md") else ""),
}, open(sys.argv[1], "w"), indent=1)
EOF

# The workloads' own unit tests first (each does what its name says: every acquire
# granted, every hand-off a grant, the sizes as labelled), in the optimised build the
# timings use: a tree where they fail is not measured.
log "the workloads' unit tests (cargo test --release -p fencelock-bench --lib)"
cargo test --release --quiet -p fencelock-bench --lib

log "criterion: benches core + ffi (measurement ${MEASURE}s, warm-up ${WARMUP}s, ${SAMPLES} samples)"
# shellcheck disable=SC2086
cargo bench -p fencelock-bench --bench core --bench ffi -- \
  --warm-up-time "$WARMUP" --measurement-time "$MEASURE" --sample-size "$SAMPLES" --noplot $FILTER

# The helper binaries, built with the benches in the build (so with the features the
# criterion build unified: the same core, and no rebuild of it on the next run).
cargo build --release --quiet -p fencelock-bench --bins --benches
bin="$target/release"

log "interleaved pairs: fencelock vs baseline, fastest batch of each"
"$bin/bench-pairs" "${BENCH_PAIRS_ROUNDS:-200}" >"$side/pairs.json"

log "memory figures"
"$bin/bench-memory" >"$side/memory.json"

skip() { # part reason: the report says "not measured (reason)" for what that part measures
  printf '%s' "$2" >"$side/skipped-$1.txt"
  log "$1: skipped ($2)"
}

callgrind=1
if [ "${BENCH_CALLGRIND:-1}" = 0 ]; then
  callgrind=0
  skip callgrind "BENCH_CALLGRIND=0"
elif ! command -v valgrind >/dev/null 2>&1; then
  callgrind=0
  skip callgrind "valgrind not installed"
fi

if [ "$callgrind" = 1 ]; then
  log "callgrind: instructions per operation"
  ops="$bin/bench-ops"
  # Only the measured function (`fencelock_bench::<Workload>::run`, and what it calls) is
  # counted; each workload runs at two repetition counts and the difference is divided by
  # the operations added, which cancels the setup and the first, cold repetition (as
  # scripts/bench-ffi-ops.sh does). The cache and branch simulation give D1 misses and
  # mispredicts per op.
  # The simulated last-level cache is the cache /proc/cpuinfo reports, rounded down to a
  # power of two (valgrind simulates no other size) and at most 32 MiB (a VM may report
  # its host's shared cache, hundreds of MB, as if it were one core's); valgrind's own
  # guess when /proc/cpuinfo says nothing. The size used is in the report.
  ll_kb=$(sed -n 's/^cache size[[:space:]]*:[[:space:]]*\([0-9]*\) KB.*/\1/p' /proc/cpuinfo | head -n 1)
  ll_opt=()
  if [ -n "$ll_kb" ] && [ "$ll_kb" -ge 64 ]; then
    p=64
    while [ $((p * 2)) -le "$ll_kb" ] && [ $((p * 2)) -le 32768 ]; do p=$((p * 2)); done
    ll_kb=$p
    ll_opt=("--LL=$((ll_kb * 1024)),16,64")
  else
    ll_kb=0
  fi
  counts() { # program toggle args... -> "ir d1 ll bm" of the toggled functions, or "failed"
    local prog=$1 toggle=$2 out
    shift 2
    # A run that failed (the program panicked, valgrind could not run it) or counted
    # nothing is no count: "failed", said on stderr, never a 0 that a ratio would take as
    # a real (and met) figure.
    if ! out=$(valgrind --tool=callgrind --cache-sim=yes --branch-sim=yes "${ll_opt[@]}" \
      --toggle-collect="$toggle" --callgrind-out-file=/dev/null "$prog" "$@" 2>&1); then
      log "callgrind: $prog $* failed: $(tail -n 3 <<<"$out" | tr '\n' ' ')" >&2
      echo failed
      return
    fi
    python3 -c '
import re, sys
t = sys.stdin.read()
def n(label):
    m = re.search(label + r":\s+([\d,]+)", t)
    return int(m.group(1).replace(",", "")) if m else None
v = [n(r"I\s+refs"), n(r"D1\s+misses"), n(r"LLd\s+misses"), n("Mispredicts")]
print("failed" if None in v or v[0] == 0 else " ".join(map(str, v)))
' <<<"$out"
  }
  per_op() { # workload size lo hi ops_per_rep [program toggle] -> {"ir":..,"d1":..,"ll":..,"bm":..} per op
    local prog=${6:-$ops} toggle=${7:-fencelock_bench::*::run} a b
    a=$(counts "$prog" "$toggle" "$1" "$2" "$3")
    b=$(counts "$prog" "$toggle" "$1" "$2" "$4")
    # A failed run, or a count that did not grow with the repetitions (the toggled
    # function no longer found), is reported as an error: the report says "no callgrind
    # count" for it.
    python3 -c '
import sys
if "failed" in (sys.argv[1], sys.argv[2]):
    print("{\"error\": \"a callgrind run failed\"}")
    sys.exit()
a = [int(x) for x in sys.argv[1].split()]
b = [int(x) for x in sys.argv[2].split()]
ops = (int(sys.argv[4]) - int(sys.argv[3])) * int(sys.argv[5])
per = [(y - x) / ops for x, y in zip(a, b)]
if per[0] <= 0:
    print("{\"error\": \"the count did not grow with the repetitions\"}")
else:
    print("{\"ir\": %.1f, \"d1\": %.2f, \"ll\": %.2f, \"bm\": %.2f}" % tuple(per))
' "$a" "$b" "$3" "$4" "$5"
  }
  # Repetitions: about 2k operations at the low count and three times that at the high one.
  reps() { echo $(((2048 + $1 - 1) / $1)); }
  {
    echo "{"
    for n in 16 1024 16384; do
      lo=$(reps "$n")
      echo "\"uncontended/$n\": $(per_op uncontended "$n" "$lo" $((3 * lo)) "$n"),"
      echo "\"map_string/$n\": $(per_op map_string "$n" "$lo" $((3 * lo)) "$n"),"
      echo "\"map_str/$n\": $(per_op map_str "$n" "$lo" $((3 * lo)) "$n"),"
    done
    echo "\"cabi_uncontended/1024\": $(per_op cabi_uncontended 1024 2 6 1024),"
    echo "\"handoff\": $(per_op handoff 1024 2 6 1024),"
    echo "\"map_handoff\": $(per_op map_handoff 1024 2 6 1024),"
    echo "\"tick_idle/16384\": $(per_op tick_idle 16384 100000 200000 1),"
    for n in 1024 65536; do
      echo "\"keep_alive/$n\": $(per_op keep_alive "$n" 100000 200000 1),"
      echo "\"keep_alive_shuffled/$n\": $(per_op keep_alive_shuffled "$n" 100000 200000 1),"
    done
    # The same C-ABI workload from a C host (ffi/tests/c/ops.c, linked against the
    # release static library), as ffi/README.md measures it with scripts/bench-ffi-ops.sh.
    # The library is built in a target dir of its own: built in the bench's, it would
    # replace the rlib the criterion benches link, and the next run would rebuild that.
    clib="$target/c-host"
    if command -v gcc >/dev/null 2>&1 &&
      CARGO_TARGET_DIR="$clib" cargo build --release --quiet -p fencelock-ffi >&2 &&
      mkdir -p "$side/c" && gcc -std=c11 -O2 -Iffi/include ffi/tests/c/ops.c \
      "$clib/release/libfencelock.a" -lpthread -ldl -lm -o "$side/c/ops"; then
      echo "\"c_host_uncontended/1024\": $(per_op uncontended_pending 1024 2 6 1024 "$side/c/ops" run_uncontended_pending),"
      # ... and 64 inputs per fencelock_service_submit call (information beside the goal).
      echo "\"c_host_batch/1024\": $(per_op uncontended_batch 1024 2 6 1024 "$side/c/ops" run_uncontended_batch),"
    elif command -v gcc >/dev/null 2>&1; then
      skip c-host "the C host (ffi/tests/c/ops.c) did not build" >&2
    else
      skip c-host "gcc not installed" >&2
    fi
    echo "\"ll_kb\": $ll_kb"
    echo "}"
  } >"$side/callgrind.json"
fi

# From Python: one ctypes call per input against one submit per batch (benches/py/batch.py),
# over the release library built for the C host (in a target dir of its own, as above).
clib="$target/c-host"
if command -v python3 >/dev/null 2>&1 &&
  CARGO_TARGET_DIR="$clib" cargo build --release --quiet -p fencelock-ffi >&2; then
  log "benches/py/batch.py (Python: a call per input against a batch)"
  FENCELOCK_LIB="$clib/release/libfencelock.so" python3 benches/py/batch.py >"$side/python.json" ||
    rm -f "$side/python.json"
fi

if [ "${BENCH_WASM:-1}" != 0 ]; then
  # build-wasm.sh is incremental (a no-op when wasm/pkg matches the current sources), so
  # the bench measures the current core rather than a stale package.
  built=false
  if [ -x scripts/build-wasm.sh ]; then
    log "scripts/build-wasm.sh (brings wasm/pkg up to date)"
    if UPDATE_DOCS=1 scripts/build-wasm.sh >/dev/null; then
      built=true
    else
      log "wasm build failed; its sizes are reported as the existing wasm/pkg's, marked, and its speed is not measured"
    fi
  fi
  if [ "$built" != true ]; then
    skip wasm-build "the wasm build failed or did not run: wasm/pkg is not this run's build"
  fi
  # The floor: the core's lock rules behind the thinnest binding, built the same way.
  log "scripts/wasm-floor.sh (the size floor of a module)"
  if ! scripts/wasm-floor.sh >"$side/wasm-floor.json" 2>"$side/wasm-floor.log"; then
    rm -f "$side/wasm-floor.json"
    skip wasm-floor "scripts/wasm-floor.sh failed (its log: $side/wasm-floor.log)"
  fi
  # The bundle as the build made it: every .wasm of wasm/pkg/web (after wasm-opt), and the
  # JS glue for information; gzip -9 -n as scripts/build-wasm.sh measures it.
  if ls wasm/pkg/web/*.wasm >/dev/null 2>&1; then
    {
      echo "{\"built_this_run\": $built, \"files\": ["
      sep=""
      for f in wasm/pkg/web/*.wasm wasm/pkg/web/*.js; do
        [ -f "$f" ] || continue
        printf '%s{"file": "%s", "raw": %d, "gzip9": %d}\n' "$sep" "$f" "$(wc -c <"$f")" "$(gzip -9 -n -c "$f" | wc -c)"
        sep=","
      done
      # The small module (fencelock/lite), a separate download: reported on its own rows.
      echo "], \"lite\": ["
      sep=""
      for f in wasm/pkg/lite/web/*.wasm wasm/pkg/lite/web/*.js; do
        [ -f "$f" ] || continue
        printf '%s{"file": "%s", "raw": %d, "gzip9": %d}\n' "$sep" "$f" "$(wc -c <"$f")" "$(gzip -9 -n -c "$f" | wc -c)"
        sep=","
      done
      echo "]}"
    } >"$side/wasm-size.json"
  else
    skip wasm-size "no wasm/pkg/web (the wasm build failed)"
  fi
  if [ "$built" = true ] && [ -f wasm/pkg/node/fencelock_wasm.js ]; then
    log "wasm under node: benches/js/bench.mjs"
    node benches/js/bench.mjs wasm/pkg/node >"$side/wasm.json"
    if [ "$callgrind" = 1 ]; then
      # Instructions per acquire + release through node, as benches/js/instructions.cjs's
      # header says: the whole process at two round counts (1024 pairs a round), V8 on
      # one thread compiling the module up front, the difference divided by the pairs added.
      read -r lo hi <<<"${BENCH_WASM_ROUNDS:-56 206}"
      log "callgrind: wasm under node, rounds $lo -> $hi"
      wasm_ir() { # workload rounds -> "instructions pairs_per_round" of the whole process ("" if it failed)
        local out
        if out=$(valgrind --tool=callgrind --smc-check=all-non-file --callgrind-out-file=/dev/null \
          node --single-threaded --no-liftoff --no-wasm-tier-up \
          benches/js/instructions.cjs wasm/pkg/node "$1" "$2" 2>&1); then
          echo "$(sed -n 's/.*Collected : \([0-9]*\).*/\1/p' <<<"$out" | head -n 1) $(sed -n 's/^pairs_per_round=\([0-9]*\) .*/\1/p' <<<"$out" | head -n 1)"
        else
          log "callgrind: wasm workload $1 failed: $(tail -n 3 <<<"$out" | tr '\n' ' ')" >&2
        fi
      }
      {
        echo "{\"rounds\": [$lo, $hi],"
        for w in acqrel-id acqrel-fast acqrel acqrel-lite; do
          a=$(wasm_ir "$w" "$lo")
          b=$(wasm_ir "$w" "$hi")
          # A workload that failed (the small module missing, say), or whose count did not
          # grow, is null: "no wasm count" in the report, and the rest of the run goes on.
          printf '"%s": %s,\n' "$w" "$(python3 -c '
import sys
a, b, lo, hi = sys.argv[1].split(), sys.argv[2].split(), int(sys.argv[3]), int(sys.argv[4])
ok = len(a) == 2 and len(b) == 2 and a[1] == b[1] and int(b[0]) > int(a[0])
print(round((int(b[0]) - int(a[0])) / ((hi - lo) * int(a[1])), 1) if ok else "null")
' "$a" "$b" "$lo" "$hi")"
        done
        echo "\"pairs_per_round\": $(sed -n 's/^const PAIRS_PER_ROUND = \([0-9]*\);$/\1/p' benches/js/instructions.cjs)"
        echo "}"
      } >"$side/wasm-callgrind.json"
    fi
  elif [ "$built" = true ]; then
    skip wasm "no wasm/pkg/node (the wasm build failed)"
  fi
else
  skip wasm "BENCH_WASM=0"
fi

python3 - "$side/meta.json" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1]))
m["load_after"] = " ".join(open("/proc/loadavg").read().split()[0:3])
json.dump(m, open(sys.argv[1], "w"), indent=1)
EOF

python3 benches/report.py --target "$target" --out "$OUT"
log "done: $OUT"
