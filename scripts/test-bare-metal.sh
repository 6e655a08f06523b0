#!/usr/bin/env bash
# The core on a microcontroller. tests/bare-metal replays every conformance vector
# (tests/vectors/*.vec), every seeded random log (wasm/tests/vectors/*.vec) and every gate
# vector (tests/vectors/gate/*.vec) byte for byte, with the core built for
# thumbv7em-none-eabihf without alloc, and runs in QEMU's model of a Cortex-M4F board
# (mps2-an386), reporting through semihosting:
#   1. its format and lints;
#   2. the release profile (as firmware ships it: opt-level s, LTO) and the dev profile
#      (the core's debug assertions on), each must pass every file, and its counts must
#      name every file on disk;
#   3. the program built over a copy of the vectors with one reply byte changed must fail,
#      naming that file and line (so a pass above means something).
# Needs qemu-system-arm and the thumbv7em-none-eabihf target (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
log() { printf '[bare-metal] %s\n' "$*"; }

command -v qemu-system-arm >/dev/null 2>&1 || {
  echo "qemu-system-arm is missing: scripts/setup.sh installs it (Debian package qemu-system-arm)" >&2
  exit 1
}
target=$(cargo metadata --format-version 1 --no-deps |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
# Its own workspace (it builds for the bare-metal target only), beside the main one's.
export CARGO_TARGET_DIR="$target/bare-metal"
n_vectors=$(ls tests/vectors/*.vec | wc -l)
n_seeded=$(ls wasm/tests/vectors/*.vec | wc -l)
n_gate=$(ls tests/vectors/gate/*.vec | wc -l)

cd tests/bare-metal
log "format and lints"
cargo fmt -- --check
cargo clippy --locked --quiet -- -D warnings

# One QEMU run; a hung program is stopped (a pass takes well under a second).
run() { timeout 300 cargo run --locked --quiet "$@"; }

for profile in release dev; do
  flag=()
  [ "$profile" = release ] && flag=(--release)
  log "$profile profile under qemu-system-arm -machine mps2-an386"
  out=$(run "${flag[@]}") || { echo "$out"; log "FAILED ($profile)"; exit 1; }
  echo "$out"
  want="thumbv7em vectors: $n_vectors files, "
  grep -qF "$want" <<<"$out" || { log "expected '$want…'"; exit 1; }
  grep -qF "seeded logs: $n_seeded files, " <<<"$out" || { log "expected $n_seeded seeded logs"; exit 1; }
  grep -qF "gate: $n_gate files, " <<<"$out" || { log "expected $n_gate gate files"; exit 1; }
done

log "a changed byte must fail the run"
mutant=$(mktemp -d)
trap 'rm -rf "$mutant"' EXIT
cp -r ../vectors/. "$mutant/"
file=$(cd "$mutant" && ls *.vec | tail -1)
# The last reply line of the last file, its last hex digit changed.
line=$(grep -n '^reply ' "$mutant/$file" | tail -1 | cut -d: -f1)
python3 - "$mutant/$file" "$line" <<'EOF'
import sys
path, n = sys.argv[1], int(sys.argv[2])
lines = open(path).read().split("\n")
last = lines[n - 1][-1]
lines[n - 1] = lines[n - 1][:-1] + ("1" if last == "0" else "0")
open(path, "w").write("\n".join(lines))
EOF
if out=$(BARE_METAL_VECTORS="$mutant" run 2>&1); then
  echo "$out"
  log "FAILED: the changed reply on $file line $line passed"
  exit 1
fi
grep -qF "FAIL $file line $line: reply differs" <<<"$out" || {
  echo "$out"
  log "FAILED: expected 'FAIL $file line $line: reply differs'"
  exit 1
}
log "refused as it should be: $(grep -F FAIL <<<"$out")"
log "ok"
