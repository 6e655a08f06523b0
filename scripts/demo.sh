#!/usr/bin/env bash
# Until the browser demo lands: replays the GC-pause story in the terminal.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo run -q -p fencelock --example gc_pause --features alloc
