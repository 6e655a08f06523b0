#!/usr/bin/env bash
# Serves the browser demo (web-demo/) on 127.0.0.1. Builds the wasm core first when its
# inputs changed (scripts/build-wasm.sh's stamp), and copies it into web-demo/pkg/
# (gitignored). PORT=0 serves on a port the system picks, and prints that one.
# Usage: scripts/demo.sh [PORT]   (make demo PORT=8080)
set -euo pipefail
cd "$(dirname "$0")/.."
PORT="${1:-${PORT:-8080}}"

scripts/demo-pkg.sh

# The URL is printed once the port is bound, so a port in use says so instead of a URL
# that serves nothing.
exec python3 - "$PORT" <<'PY'
import functools, http.server, sys
port = int(sys.argv[1])
handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory="web-demo")
try:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
except OSError as e:
    sys.exit(f"fencelock demo: cannot serve on 127.0.0.1:{port}: {e.strerror}; "
             f"choose another port: make demo PORT=8081")
print(f"fencelock demo: http://127.0.0.1:{server.server_address[1]}/   (Ctrl-C to stop)",
      flush=True)
try:
    server.serve_forever()
except KeyboardInterrupt:
    pass
PY
