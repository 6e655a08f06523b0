#!/usr/bin/env bash
# The workspace's ignored tests must be exactly the ones tests/ignored-tests.txt names:
# each is run by a script of its own (or is a diagnostic), and a test newly marked
# #[ignore] would otherwise pass `make test` without running. Run after `cargo test
# --workspace` (make test-rust), whose builds it reuses.
set -euo pipefail
cd "$(dirname "$0")/.."
want=tests/ignored-tests.txt
err=$(mktemp)
trap 'rm -f "$err"' EXIT
# cargo's own messages are kept aside and shown only when the listing fails (a build
# error would otherwise end the run with no word of why).
if ! list=$(cargo test -q --workspace --all-features -- --ignored --list 2>"$err"); then
  echo "check-ignored: listing the ignored tests failed:" >&2
  cat "$err" >&2
  exit 1
fi
have=$(echo "$list" | sed -n 's/^\(.*\): test$/\1/p' | sort)
expected=$(grep -v '^#' "$want" | sed 's/[[:space:]]*#.*//' | grep -v '^$' | sort)
if [ "$have" != "$expected" ]; then
  echo "check-ignored: the ignored tests differ from $want:" >&2
  diff <(echo "$expected") <(echo "$have") >&2 || true
  exit 1
fi
echo "check-ignored: $(echo "$have" | grep -c .) ignored tests, each run elsewhere ($want)"
