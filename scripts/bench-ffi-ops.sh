#!/usr/bin/env bash
# Instructions per operation through the C ABI, under callgrind: ffi/tests/c/ops.c (a C
# host: each input, its reply read, its events drained) against the release static
# library, each workload with the old drain (poll_output until DONE) and the new one
# (one drain_events call; or only when the reply's `pending` says events are queued; or
# 64 inputs per fencelock_service_submit call, drained when the batch left events),
# beside the same workload on the core directly (bench-ops).
# Only the measured functions are counted; two repetition counts are run and the
# difference divided, which cancels setup. Instruction counts do not move with machine
# load. Prints a Markdown table (ffi/README.md keeps the latest one).
# Builds into ${CARGO_TARGET_DIR:-target}; needs valgrind and gcc.
set -euo pipefail
cd "$(dirname "$0")/.."
target=$(cargo metadata --format-version 1 --no-deps |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
work="$target/ffi-ops"
mkdir -p "$work"
cargo build --release --quiet -p fencelock-ffi
cargo build --release --quiet -p fencelock-bench --bin bench-ops
gcc -std=c11 -O2 -Wall -Wextra -Werror -Iffi/include ffi/tests/c/ops.c \
  "$target/release/libfencelock.a" -lpthread -ldl -lm -o "$work/ops"

SIZE=${OPS_SIZE:-1024}
LO=${OPS_LO:-2} HI=${OPS_HI:-6}
irefs() { # toggle program args... -> instructions counted inside the toggled functions
  local toggle=$1; shift
  valgrind --tool=callgrind --toggle-collect="$toggle" --callgrind-out-file=/dev/null "$@" 2>&1 |
    sed -n 's/.*Collected : \([0-9]*\).*/\1/p; s/.*I\s*refs:\s*\([0-9,]*\).*/\1/p' | tr -d , | head -n 1
}
per_op() { # toggle program workload -> instructions per operation (HI - LO reps)
  local lo hi
  lo=$(irefs "$1" "$2" "$3" "$SIZE" "$LO")
  hi=$(irefs "$1" "$2" "$3" "$SIZE" "$HI")
  python3 -c "print(round(($hi - $lo) / (($HI - $LO) * $SIZE), 1))"
}
native_u=$(per_op 'fencelock_bench::*::run' "$target/release/bench-ops" uncontended)
native_h=$(per_op 'fencelock_bench::*::run' "$target/release/bench-ops" handoff)
poll_u=$(per_op 'run_uncontended_poll' "$work/ops" uncontended_poll)
drain_u=$(per_op 'run_uncontended_drain' "$work/ops" uncontended_drain)
poll_h=$(per_op 'run_handoff_poll' "$work/ops" handoff_poll)
drain_h=$(per_op 'run_handoff_drain' "$work/ops" handoff_drain)
pend_u=$(per_op 'run_uncontended_pending' "$work/ops" uncontended_pending)
pend_h=$(per_op 'run_handoff_pending' "$work/ops" handoff_pending)
batch_u=$(per_op 'run_uncontended_batch' "$work/ops" uncontended_batch)
batch_h=$(per_op 'run_handoff_batch' "$work/ops" handoff_batch)
ratio() { python3 -c "print('%.2f×' % ($1 / $2))"; }
cat <<TABLE
| instructions per operation ($SIZE locks / waiters) | core, native | C ABI, poll_output until DONE | C ABI, drain_events after each input | C ABI, drain_events when reply.pending > 0 | C ABI, 64 inputs per submit |
|---|---|---|---|---|---|
| acquire + release, uncontended | $native_u | $poll_u ($(ratio "$poll_u" "$native_u")) | $drain_u ($(ratio "$drain_u" "$native_u")) | $pend_u ($(ratio "$pend_u" "$native_u")) | $batch_u ($(ratio "$batch_u" "$native_u")) |
| hand-off (release granting the next waiter) | $native_h | $poll_h ($(ratio "$poll_h" "$native_h")) | $drain_h ($(ratio "$drain_h" "$native_h")) | $pend_h ($(ratio "$pend_h" "$native_h")) | $batch_h ($(ratio "$batch_h" "$native_h")) |
TABLE
