#!/usr/bin/env bash
# The fence layer end to end: a three-node cluster on loopback, two workers under
# `fencelock lock` writing through the PostgreSQL fence, the first stopped with SIGSTOP
# past its lease, and PostgreSQL refusing its late write (fence/tests/e2e.rs). The rest of
# the fence tests (gate vectors on every fence, the race) run in `make test-rust`
# (`cargo test -p fencelock-fence`). Needs initdb/pg_ctl (scripts/setup.sh installs
# Debian's postgresql). About 5 s once built.
set -euo pipefail
cd "$(dirname "$0")/.."
step() { printf -- '--- %s\n' "$*"; }

step "server binaries for the end-to-end test"
cargo build -q -p fencelock-server --bins
step "fencelock-fence end to end (cluster + PostgreSQL + SIGSTOP)"
# The test is #[ignore]d (it needs the server binaries and PostgreSQL): a run that
# selected nothing would pass, so the one test must be seen passing.
e2e_log=$(mktemp)
trap 'rm -f "$e2e_log"' EXIT
cargo test -q -p fencelock-fence --test e2e -- --ignored --nocapture 2>&1 | tee "$e2e_log"
grep -q 'test result: ok\. 1 passed' "$e2e_log" || { echo "test-fence: the end-to-end test did not run" >&2; exit 1; }
