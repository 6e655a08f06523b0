#!/usr/bin/env bash
# Serves the browser demo (web-demo/) on 127.0.0.1. Builds the wasm core first when its
# package is missing or older than the sources, and copies it into web-demo/pkg/ (gitignored).
# Usage: scripts/demo.sh [PORT]   (make demo PORT=8080)
set -euo pipefail
cd "$(dirname "$0")/.."
PORT="${1:-${PORT:-8080}}"

scripts/demo-pkg.sh

echo "fencelock demo: http://127.0.0.1:${PORT}/   (Ctrl-C to stop)"
exec python3 -m http.server "$PORT" --bind 127.0.0.1 --directory web-demo
