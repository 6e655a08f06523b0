#!/usr/bin/env bash
# The partition test (server/tests/partitions.rs): three fencelock-node processes whose every
# Raft link runs through a fault-injecting proxy, five contending workers, a probe and a
# linearizable reader; faults: the followers' answers to the leader lost, the leader cut off
# plus a one-way link, a follower cut off and returning, the leader cut off, a bridge,
# kill -9 of the leader / a follower / a cut-off leader. Checks safety (fences, tokens,
# linearizability, reads), that no session expires, a leader within a bound after every
# fault and no write gap when a cut-off follower returns.
#
# `make test` runs the short form (each fault once, ~80 s, plus an optimised build). `make test-partitions` adds a
# seeded random schedule: PARTITION_SECONDS (default there 480) more seconds of faults;
# PARTITION_SEED replays one schedule; PARTITION_ONLY=Bridge,DeafLeader runs just those.
# Everything listens on 127.0.0.1 only; every wait is bounded.
set -euo pipefail
cd "$(dirname "$0")/.."
TEST=partitions_keep_sessions_and_leaders
secs=${PARTITION_SECONDS:-0}
printf -- '--- partitions: fixed schedule%s\n' "$([ "$secs" -gt 0 ] && echo " + ${secs} s of random faults" || true)"
log=$(mktemp)
# Optimised binaries: the bounds are about the protocol's timing (election timeouts, ~1 s),
# not about how slowly unoptimized code runs on a shared 2-core machine. The profile is
# the workspace's `verify` (Cargo.toml: optimised, no LTO, debug assertions and overflow checks on):
# the release profile's fat LTO would cost minutes of build for nothing the test measures.
if ! PARTITION_SECONDS=$secs cargo test --profile verify -q -p fencelock-server --test partitions -- --ignored --nocapture --exact "$TEST" >"$log" 2>&1; then
  cat "$log"; rm -f "$log"; echo "partition test FAILED"; exit 1
fi
# a renamed test would otherwise select nothing and "pass"
grep -q 'test result: ok\. 1 passed' "$log" || { cat "$log"; rm -f "$log"; echo "partition test $TEST did not run"; exit 1; }
grep -E '^\[|^partitions:' "$log" || true
rm -f "$log"
