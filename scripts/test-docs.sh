#!/usr/bin/env bash
# The documentation's promises, checked:
#   1. every code block of every README runs as a reader would paste it, or is marked an
#      excerpt that says where its runnable form is tested (scripts/readme_examples.py);
#   2. every figure quoted in more than one place agrees with its one source
#      (scripts/figures.py: row sizes, limits, error codes, wasm size, cluster benchmark);
#   3. every relative link in the markdown reaches a file and heading (scripts/doc_links.py).
# Needs what scripts/setup.sh installs: node and tools/ for the wasm build (the examples run
# scripts/build-wasm.sh themselves) and Chromium for the browser example.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "[test-docs] README examples"
python3 scripts/readme_examples.py
echo "[test-docs] quoted figures against their sources"
python3 scripts/figures.py --check
echo "[test-docs] relative links"
python3 scripts/doc_links.py
