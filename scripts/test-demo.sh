#!/usr/bin/env bash
# Browser tests of the demo: makes sure the wasm core is built and copied to web-demo/pkg/,
# runs the recording format's node tests (web-demo/tests/recording.test.mjs, no browser), then
# serves web-demo/ on a free port on 127.0.0.1, runs web-demo/tests/demo.test.mjs with node's
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

# The static server binds port 0 itself and reports the port it got, so no other process
# can take the port between a choice and the bind (and be tested in its place).
work=$(mktemp -d)
log=$work/server.log
python3 -u - "$work/port" >"$log" 2>&1 <<'PY' &
import functools, http.server, os, sys
handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory="web-demo")
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
tmp = sys.argv[1] + ".tmp"
with open(tmp, "w") as f:
    f.write(str(server.server_address[1]))
os.replace(tmp, sys.argv[1])
server.serve_forever()
PY
server=$!
trap 'kill "$server" 2>/dev/null || true; rm -rf "$work"' EXIT
# Up to 20 s: a loaded machine can be slow to start Python.
for _ in $(seq 400); do
  [ -s "$work/port" ] && break
  kill -0 "$server" 2>/dev/null || { cat "$log" >&2; echo "test-demo: the static server did not start" >&2; exit 1; }
  sleep 0.05
done
[ -s "$work/port" ] || { cat "$log" >&2; echo "test-demo: the static server did not start" >&2; exit 1; }
port=$(cat "$work/port")
echo "[test-demo] serving web-demo on http://127.0.0.1:$port/"
scripts/node-test.sh web-demo/tests/recording.test.mjs
DEMO_URL="http://127.0.0.1:$port/" scripts/node-test.sh web-demo/tests/demo.test.mjs
cargo build -q -p fencelock-server --bins
bindir="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/debug"
DEMO_URL="http://127.0.0.1:$port/" FENCELOCK_BIN="$bindir" scripts/node-test.sh web-demo/tests/export.test.mjs
