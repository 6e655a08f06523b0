#!/usr/bin/env bash
# Starts a local three-node fencelock cluster on 127.0.0.1, .2 and .3 (TLS, mutual TLS
# between nodes, an admin token) and prints how to use it.
#   scripts/cluster.sh            foreground; Ctrl-C stops the nodes
#   CLUSTER_DETACH=1 scripts/cluster.sh   leave them running (pids in $CLUSTER_DIR/pids)
#   CLUSTER_DIR=/path             data directory (default: a fresh temp dir)
#   CLUSTER_BASE_PORT=7100        client ports BASE+1..3, raft ports BASE+101..103
#   CLUSTER_PROFILE=release       or debug (faster to build; used by scripts/test-server.sh)
#   CLUSTER_PLAINTEXT=1           plain TCP, no tokens (local development; make bench-cluster)
# Clients need a token: the script makes an admin token ($CLUSTER_DIR/admin.token) and the
# nodes' tokens file ($CLUSTER_DIR/tokens, hashes only; add lines for read/lock tokens).
set -euo pipefail
cd "$(dirname "$0")/.."
base=${CLUSTER_BASE_PORT:-7100}
dir=${CLUSTER_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/fencelock-cluster.XXXXXX")}
mkdir -p "$dir"
profile=${CLUSTER_PROFILE:-release}
if [ "$profile" = release ]; then
  cargo build --release -q -p fencelock-server --bins
else
  cargo build -q -p fencelock-server --bins
fi
tdir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
bin="$tdir/$profile"
# An admin token for this cluster (kept in $dir, mode 0600); the nodes get only its hash.
umask 077
if [ ! -s "$dir/admin.token" ]; then
  python3 -c 'import secrets; print(secrets.token_hex(32))' >"$dir/admin.token"
fi
if [ ! -s "$dir/tokens" ]; then
  printf 'admin * sha256:%s\n' "$(tr -d '\n' <"$dir/admin.token" | sha256sum | cut -d' ' -f1)" >"$dir/tokens"
fi
umask 022
export FENCELOCK_AUTH_TOKEN_FILE="$dir/admin.token"
# A development CA and node certificates (node 4 is a spare, for adding a node): TLS on the
# client ports, mutual TLS between the nodes. Each node on its own loopback address.
# CLUSTER_PLAINTEXT=1: plain TCP and no tokens instead (local development, benchmarks).
if [ "${CLUSTER_PLAINTEXT:-0}" = 1 ]; then
  export FENCELOCK_INSECURE_PLAINTEXT=true
else
  if [ ! -s "$dir/tls/ca.pem" ]; then
    "$bin/fencelock-certs" --dir "$dir/tls" --node 1=127.0.0.1 --node 2=127.0.0.2 --node 3=127.0.0.3 --node 4=127.0.0.4
  fi
  export FENCELOCK_TLS_CA="$dir/tls/ca.pem"
fi
peers=()
for i in 1 2 3; do
  peers+=(--peer "$i=127.0.0.$i:$((base + 100 + i))/127.0.0.$i:$((base + i))")
done
pids=()
stop() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
for i in 1 2 3; do
  init=(); [ "$i" = 1 ] && init=(--init)
  if [ "${CLUSTER_PLAINTEXT:-0}" = 1 ]; then
    security=(--insecure-plaintext)
  else
    security=(--tokens "$dir/tokens" --tls-ca "$dir/tls/ca.pem"
      --tls-cert "$dir/tls/node-$i.pem" --tls-key "$dir/tls/node-$i.key")
  fi
  cmd=("$bin/fencelock-node" --id "$i" --dir "$dir/n$i" "${security[@]}" "${peers[@]}")
  # Its command line to restart it with (no --init: the cluster exists by then).
  printf '%q ' "${cmd[@]}" >"$dir/n$i.cmd"; printf '>>%q 2>&1 &\n' "$dir/n$i.log" >>"$dir/n$i.cmd"
  "${cmd[@]}" "${init[@]}" >>"$dir/n$i.log" 2>&1 &
  pids+=($!)
done
printf '%s\n' "${pids[@]}" >"$dir/pids"
cluster="127.0.0.1:$((base + 1)),127.0.0.2:$((base + 2)),127.0.0.3:$((base + 3))"
# Wait (bounded) until the cluster answers a linearizable read.
ok=0
for _ in $(seq 1 100); do
  if FENCELOCK_CLUSTER=$cluster timeout 5 "$bin/fencelock" holder probe >/dev/null 2>&1; then ok=1; break; fi
  sleep 0.1
done
if [ "$ok" != 1 ]; then echo "cluster did not come up; logs in $dir" >&2; stop; exit 1; fi
if [ "${CLUSTER_PLAINTEXT:-0}" = 1 ]; then
  secure_hint="export FENCELOCK_INSECURE_PLAINTEXT=true   # plain TCP, no tokens checked (CLUSTER_PLAINTEXT=1)"
else
  secure_hint="export FENCELOCK_TLS_CA=$dir/tls/ca.pem   # the cluster CA: TLS to the nodes"
fi
cat <<USAGE
fencelock cluster up: nodes 1-3 (pids ${pids[*]}), data and logs in $dir
  client addresses: $cluster   (raft: 127.0.0.N:$((base + 101))-$((base + 103)))

  export FENCELOCK_CLUSTER=$cluster PATH=$bin:\$PATH
  export FENCELOCK_AUTH_TOKEN_FILE=$dir/admin.token   # the admin token (add more to $dir/tokens)
  $secure_hint
  fencelock lock jobs/reindex -- sh -c 'echo "token \$FENCELOCK_TOKEN"; sleep 5'
  fencelock holder jobs/reindex        # SESSION MODE TOKEN [LABEL]
  fencelock queue jobs/reindex         # waiters, head first
  fencelock elect scheduler            # prints "epoch N" when elected; Ctrl-C resigns
  kill -9 <a node pid>; then restart it: sh $dir/nN.cmd (its command line, for node N)
  fencelock members                    # replace a node: start it with the members' --peer entries
                                       # and its own, then add-learner ID RAFT CLIENT, set-voters 1,2,4
USAGE
if [ "${CLUSTER_DETACH:-0}" = 1 ]; then exit 0; fi
trap 'stop; exit 0' INT TERM
echo "Ctrl-C stops the cluster."
wait
