#!/usr/bin/env bash
# The fence layer: every fence (in-process gate, SQLite, a real PostgreSQL server started
# in a temp dir) replays the gate vectors and survives the race, then the end-to-end test:
# a three-node cluster, two workers under `fencelock lock`, the first stopped with SIGSTOP
# past its lease, and PostgreSQL refusing its late write. Needs initdb/pg_ctl
# (scripts/setup.sh installs Debian's postgresql). About 15 s once built.
set -euo pipefail
cd "$(dirname "$0")/.."
step() { printf -- '--- %s\n' "$*"; }

step "server binaries for the end-to-end test"
cargo build -q -p fencelock-server --bins
step "fencelock-fence: conformance, race, end to end"
cargo test -q -p fencelock-fence -- --include-ignored --nocapture
