#!/usr/bin/env bash
# Browser tests of the demo: makes sure the wasm core is built and copied to web-demo/pkg/,
# runs the recording format's node tests (web-demo/tests/recording.test.mjs, no browser), then
# serves web-demo/ with scripts/demo.sh on a free port on 127.0.0.1 (and checks that it refuses
# a bad port and a port in use in one line), runs web-demo/tests/demo.test.mjs with node's
# test runner (headless Debian Chromium via tools/node_modules/playwright-core), then
# web-demo/tests/export.test.mjs: a real three-node cluster (scripts/cluster.sh, the server's
# debug binaries, built here if missing) runs an incident, `fencelock export` writes it, and the
# page replays it. It lives here, not in test-server.sh, because it needs the browser and the
# wasm build as well as the server binaries; it stops the server. Screenshots land in
# web-demo/test-output/.
set -euo pipefail
cd "$(dirname "$0")/.."

[ -x /usr/bin/chromium ] || { echo "test-demo: /usr/bin/chromium missing: run scripts/setup.sh" >&2; exit 1; }
[ -d tools/node_modules/playwright-core ] || { echo "test-demo: playwright-core missing: run scripts/setup.sh" >&2; exit 1; }
# The browser is Debian's (not pinned with playwright-core): said, so a failure after a
# browser upgrade can be told from one in the page.
echo "test-demo: $(/usr/bin/chromium --version 2>/dev/null || echo 'chromium (version unknown)'), playwright-core $(node -p 'require("./tools/node_modules/playwright-core/package.json").version')"
scripts/demo-pkg.sh

# The static server is scripts/demo.sh itself (the one `make demo` runs), on port 0: it binds
# a port the system picks and prints the URL once bound, so no other process can take the
# port between a choice and the bind (and be tested in its place). Its wasm step finds the
# package built above.
work=$(mktemp -d)
log=$work/server.log
scripts/demo.sh 0 >"$log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null || true; rm -rf "$work"' EXIT
# Up to 120 s: demo.sh asks cargo first, and a loaded machine can be slow to start Python.
url=
for _ in $(seq 2400); do
  url=$(sed -n 's|^fencelock demo: \(http://127\.0\.0\.1:[0-9][0-9]*/\) .*|\1|p' "$log")
  [ -n "$url" ] && break
  kill -0 "$server" 2>/dev/null || break
  sleep 0.05
done
[ -n "$url" ] || { cat "$log" >&2; echo "test-demo: scripts/demo.sh 0 did not start a server" >&2; exit 1; }
port=${url#http://127.0.0.1:}
port=${port%/}
[ "$port" != 0 ] || { echo "test-demo: scripts/demo.sh 0 printed port 0, not the port it got" >&2; exit 1; }

# demo.sh's refusals: a port that is not one (a word, a negative number, one above 65535) and
# a port in use each end in its one-line message and a non-zero exit — no traceback, and no
# server left running.
refused() { # expected-text, then the command
  local want=$1 out rc=0
  shift
  out=$(timeout 120 "$@" 2>&1) || rc=$?
  if [ "$rc" = 0 ] || [ "$rc" = 124 ] || grep -q Traceback <<<"$out" ||
    ! tail -n 1 <<<"$out" | grep -qx "fencelock demo: cannot serve on 127\.0\.0\.1:.*: $want; choose another port: make demo PORT=8081"; then
    echo "test-demo: $* (exit $rc) should refuse in one line ($want):" >&2
    echo "$out" >&2
    exit 1
  fi
}
for bad in abc -1 65536 70000 99999999999999999999 8080x; do
  refused 'not a port (a port is a whole number from 0 to 65535)' scripts/demo.sh "$bad"
  refused 'not a port (a port is a whole number from 0 to 65535)' env PORT="$bad" scripts/demo.sh
done
refused 'Address already in use' scripts/demo.sh "$port"
echo "[test-demo] scripts/demo.sh refuses a bad port and a port in use in one line"
echo "[test-demo] serving web-demo on $url (scripts/demo.sh 0)"
scripts/node-test.sh web-demo/tests/recording.test.mjs
DEMO_URL="$url" scripts/node-test.sh web-demo/tests/demo.test.mjs
cargo build -q -p fencelock-server --bins
bindir="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/debug"
DEMO_URL="$url" FENCELOCK_BIN="$bindir" scripts/node-test.sh web-demo/tests/export.test.mjs
