#!/usr/bin/env bash
# Serves the browser demo (web-demo/) on 127.0.0.1. Builds the wasm core first when its
# inputs changed (scripts/build-wasm.sh's stamp), and copies it into web-demo/pkg/
# (gitignored). PORT=0 serves on a port the system picks, and prints that one.
# Usage: scripts/demo.sh [PORT]   (make demo PORT=8080)
set -euo pipefail
cd "$(dirname "$0")/.."
PORT="${1:-${PORT:-8080}}"

# Every way of not serving ends in this one line and a non-zero exit, never a traceback.
cannot() {
  echo "fencelock demo: cannot serve on 127.0.0.1:$PORT: $1; choose another port: make demo PORT=8081" >&2
  exit 1
}
# A port is a whole number from 0 to 65535, checked before the build (Python's int() stops
# with a traceback on a word, and bind() on a number out of range).
notport="not a port (a port is a whole number from 0 to 65535)"
[[ "$PORT" =~ ^[0-9]+$ ]] || cannot "$notport"
digits="${PORT#"${PORT%%[!0]*}"}" # without leading zeros
{ [ "${#digits}" -le 5 ] && [ "$((10#0$digits))" -le 65535 ]; } || cannot "$notport"

scripts/demo-pkg.sh

# The URL is printed once the port is bound, so a port in use says so instead of a URL
# that serves nothing.
exec python3 - "$((10#0$digits))" "$PORT" <<'PY'
import functools, http.server, sys
port = int(sys.argv[1])
handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory="web-demo")
try:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
except (OSError, OverflowError) as e:
    why = getattr(e, "strerror", None) or str(e)
    sys.exit(f"fencelock demo: cannot serve on 127.0.0.1:{sys.argv[2]}: {why}; "
             f"choose another port: make demo PORT=8081")
print(f"fencelock demo: http://127.0.0.1:{server.server_address[1]}/   (Ctrl-C to stop)",
      flush=True)
try:
    server.serve_forever()
except KeyboardInterrupt:
    pass
PY
