#!/usr/bin/env bash
# Server tests that are part of `make test` beyond `cargo test --workspace` (which already
# runs the in-process three-node cluster tests): the black-box test with three real node
# processes on 127.0.0.1-3 as deployed (TLS on the client ports, mutual TLS between the
# nodes, bearer tokens), kill -9 of the leader and SIGSTOP/SIGCONT of a client, checked
# for stale writes and linearizability; then a CLI smoke test against a real cluster. First
# it checks that server/bench (its own crate: etcd-client needs protoc) still builds, so the
# etcd comparison cannot rot unnoticed between `make bench-cluster` runs.
# Everything listens on loopback only; every loop is bounded.
set -euo pipefail
cd "$(dirname "$0")/.."
step() { printf -- '--- %s\n' "$*"; }

step "server/bench (the etcd comparison of make bench-cluster) still builds"
cargo check -q --manifest-path server/bench/Cargo.toml --locked

step "black-box: 3 node processes (TLS, mutual TLS, tokens), kill -9 leader + restart, SIGSTOP a client (${BLACKBOX_SECONDS:-30} s)"
BLACKBOX_TEST=blackbox_kill9_sigstop_linearizable
log=$(mktemp)
if ! cargo test -q -p fencelock-server --test blackbox -- --ignored --nocapture --exact "$BLACKBOX_TEST" >"$log" 2>&1; then
  cat "$log"; rm -f "$log"; echo "black-box test FAILED"; exit 1
fi
# a renamed test would otherwise select nothing and "pass"
grep -q 'test result: ok\. 1 passed' "$log" || { cat "$log"; rm -f "$log"; echo "black-box test $BLACKBOX_TEST did not run"; exit 1; }
grep -E 'black-box:|kill -9|SIGSTOP' "$log" || true
rm -f "$log"

step "CLI against a real cluster (scripts/cluster.sh, detached, on spare ports)"
tdir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
dir=$(mktemp -d "${TMPDIR:-/tmp}/fencelock-clitest.XXXXXX")
# Set before the cluster starts: one that does not come up (cluster.sh stops its own
# nodes) still has its logs shown and its directory (TLS keys, the admin token) removed.
# On a failure the nodes' logs are shown before the directory goes: they are what a CI
# log can be read by.
cleanup() {
  local rc=$?
  [ -f "$dir/pids" ] && { xargs -r kill <"$dir/pids" 2>/dev/null || true; }
  if [ "$rc" != 0 ]; then
    for f in "$dir"/n*.log; do
      [ -f "$f" ] || continue
      echo "--- $(basename "$f"), its last 40 lines:"
      tail -n 40 "$f"
    done
  fi
  rm -rf "$dir"
}
trap cleanup EXIT
# a base port whose eight ports (BASE+i and BASE+100+i on 127.0.0.i, i = 1..4; node 4 joins later) are free (bounded tries),
# all below Linux's ephemeral range (32768-60999) so an outgoing connection cannot take one
base=$(python3 - <<'PY'
import random, socket
for _ in range(50):
    b = random.randrange(20000, 31800)
    socks = []
    try:
        for i in (1, 2, 3, 4):  # node i listens on 127.0.0.i
            for p in (b + i, b + 100 + i):
                s = socket.socket(); s.bind((f"127.0.0.{i}", p)); socks.append(s)
        print(b); break
    except OSError:
        pass
    finally:
        for s in socks: s.close()
PY
)
[ -n "$base" ] || { echo "no free loopback ports"; exit 1; }
CLUSTER_DIR=$dir CLUSTER_DETACH=1 CLUSTER_BASE_PORT=$base CLUSTER_PROFILE=debug scripts/cluster.sh >/dev/null
export FENCELOCK_CLUSTER="127.0.0.1:$((base + 1)),127.0.0.2:$((base + 2)),127.0.0.3:$((base + 3))"
export FENCELOCK_AUTH_TOKEN_FILE="$dir/admin.token" FENCELOCK_TLS_CA="$dir/tls/ca.pem"
fl="$tdir/debug/fencelock"
# TLS and tokens are on (cluster.sh): without the token the cluster refuses (exit 1), with a
# clear message.
set +e; err=$(env -u FENCELOCK_AUTH_TOKEN_FILE -u FENCELOCK_AUTH_TOKEN "$fl" holder smoke 2>&1); rc=$?; set -e
[ "$rc" = 1 ] && grep -q 'no valid token' <<<"$err" || { echo "a client without a token got rc=$rc: $err"; exit 1; }
out=$("$fl" lock smoke -- sh -c 'echo "token=$FENCELOCK_TOKEN"')
grep -q '^token=[1-9]' <<<"$out" || { echo "lock did not run the command with a token: $out"; exit 1; }
# a held lock shows in holder; a second try-lock is refused (exit 2) while it is held
# (the holder runs a long sleep and is stopped after the checks, so slowness cannot free it early)
"$fl" lock held -- sleep 120 2>/dev/null &
holder_pid=$!
for _ in $(seq 1 100); do [ -n "$("$fl" holder held)" ] && break; sleep 0.1; done
[ -n "$("$fl" holder held)" ] || { echo "holder shows nothing"; exit 1; }
set +e; "$fl" lock held --try -- true 2>/dev/null; rc=$?; set -e
[ "$rc" = 2 ] || { echo "try-lock on a held lock exited $rc, expected 2"; exit 1; }
kill -TERM "$holder_pid" # the CLI stops the command, releases and exits 143 (128 + SIGTERM)
set +e; wait "$holder_pid"; set -e
for _ in $(seq 1 100); do [ -z "$("$fl" holder held)" ] && break; sleep 0.1; done
[ -z "$("$fl" holder held)" ] || { echo "lock still held after the CLI was stopped"; exit 1; }
# elect keeps running while it leads; stop it as soon as it prints its epoch (at most ~10 s)
elog="$dir/elect.out"
"$fl" elect smoke-election >"$elog" 2>/dev/null &
elect_pid=$!
for _ in $(seq 1 100); do grep -q '^epoch [1-9]' "$elog" && break; sleep 0.1; done
kill "$elect_pid" 2>/dev/null || true
set +e; wait "$elect_pid"; set -e
grep -q '^epoch [1-9]' "$elog" || { echo "elect printed: $(cat "$elog")"; exit 1; }
# The client library's example (server/examples/hold_lock.rs, whose `main` the top-level
# README shows: checked to be the same text) holds a lock with its token and lets it go.
python3 - <<'PY' || exit 1
import re, sys
readme = open("README.md").read()
m = re.search(r"<!-- excerpt: [^\n]*server/examples/hold_lock\.rs[^\n]*-->\n```rust\n(.*?)```\n", readme, re.S)
example = open("server/examples/hold_lock.rs").read()
if not m or not example.endswith(m.group(1)):
    sys.exit("README.md's client example is not the end of server/examples/hold_lock.rs")
PY
cargo build -q -p fencelock-server --example hold_lock
out=$("$tdir/debug/examples/hold_lock")
grep -q '^writing as the holder of jobs/reindex, token [1-9]' <<<"$out" || { echo "hold_lock printed: $out"; exit 1; }
[ -z "$("$fl" holder jobs/reindex)" ] || { echo "hold_lock left jobs/reindex held"; exit 1; }
# status over TLS with a token: every node's row ready, the leader's quorum confirmed (exit 0)
st=$("$fl" status) || { echo "status failed on a healthy cluster: $st"; exit 1; }
grep -q '^cluster: leader [1-3], term [0-9]*, quorum confirmed' <<<"$st" && [ "$(grep -c ' yes ' <<<"$st")" = 3 ] ||
  { echo "status on a healthy cluster: $st"; exit 1; }
# Membership: start a fourth node, add it as a learner, make voters 1,2,4 (3 is removed),
# stop node 3, and the cluster still serves, with the hold taken before the change.
"$fl" lock kept -- sleep 120 2>/dev/null &
kept_pid=$!
for _ in $(seq 1 100); do [ -n "$("$fl" holder kept)" ] && break; sleep 0.1; done
kept_before=$("$fl" holder kept)
[ -n "$kept_before" ] || { echo "kept lock never held"; exit 1; }
# Node 4 names the members (one of them adds it): before it knows a membership it serves
# Raft requests from the nodes its --peer list names and no other certificate of the CA.
peers4=()
for i in 1 2 3 4; do peers4+=(--peer "$i=127.0.0.$i:$((base + 100 + i))/127.0.0.$i:$((base + i))"); done
"$tdir/debug/fencelock-node" --id 4 --dir "$dir/n4" --tokens "$dir/tokens" \
  --tls-ca "$dir/tls/ca.pem" --tls-cert "$dir/tls/node-4.pem" --tls-key "$dir/tls/node-4.key" \
  "${peers4[@]}" >>"$dir/n4.log" 2>&1 &
echo $! >>"$dir/pids"
disown # killed with the others at the end; no job notice
"$fl" add-learner 4 "127.0.0.4:$((base + 104))" "127.0.0.4:$((base + 4))"
"$fl" set-voters 1,2,4
members=$("$fl" members)
[ "$(grep -c '^voter' <<<"$members")" = 3 ] && grep -q '^voter 4 ' <<<"$members" && ! grep -q '^voter 3 ' <<<"$members" ||
  { echo "members after the change: $members"; exit 1; }
kill -9 "$(sed -n 3p "$dir/pids")"
# Node 3 is gone: off the list, so that the kill of the others below does not fail on a
# process already reaped (kill exits 1 for it, and xargs then 123).
sed -i 3d "$dir/pids"
export FENCELOCK_CLUSTER="127.0.0.1:$((base + 1)),127.0.0.2:$((base + 2)),127.0.0.4:$((base + 4))"
[ "$("$fl" holder kept)" = "$kept_before" ] || { echo "hold changed across the membership change: $("$fl" holder kept)"; exit 1; }
kill -TERM "$kept_pid"; set +e; wait "$kept_pid"; set -e
# When the cluster becomes unreachable, the lease stops being safe after ttl - margin and
# `lock` must stop the command (SIGTERM) and exit 3 — long before the command would end.
"$fl" --ttl-ms 1500 lock doomed -- sleep 30 2>/dev/null &
doomed=$!
for _ in $(seq 1 50); do [ -n "$("$fl" holder doomed)" ] && break; sleep 0.1; done
[ -n "$("$fl" holder doomed)" ] || { echo "doomed lock never held"; exit 1; }
xargs -r kill -9 <"$dir/pids"
start=$SECONDS
set +e; wait "$doomed"; rc=$?; set -e
took=$((SECONDS - start))
[ "$rc" = 3 ] || { echo "lock exited $rc after losing the cluster, expected 3"; exit 1; }
[ "$took" -le 10 ] || { echo "lock took ${took}s to stop the command"; exit 1; }
echo "CLI ok: lock/holder/try-lock/elect/status/members/add-learner/set-voters; command stopped ${took}s after the cluster vanished (exit 3)"
