#!/usr/bin/env bash
# The core on a microcontroller. tests/bare-metal replays every conformance vector
# (tests/vectors/*.vec), every seeded random log (wasm/tests/vectors/*.vec) and every gate
# vector (tests/vectors/gate/*.vec) byte for byte, with the core built for
# thumbv7em-none-eabihf without alloc, and runs in QEMU's model of a Cortex-M4F board
# (mps2-an386), reporting through semihosting:
#   1. its format and lints;
#   2. the release profile (as firmware ships it: opt-level s, LTO) and the dev profile
#      (the core's debug assertions on): each must pass every file, and the counts it
#      prints must be the files' own (their `in`, `out`, `reply`, … lines);
#      It also prints the core's deepest stack for one input, snapshot and restore on the
#      device; above the ceilings below the step fails (a microcontroller's stack is a few
#      KB, and a change that makes a call much deeper should be seen, not shipped).
#   3. the flash the core's API adds to a program (src/bin/footprint_all.rs less
#      footprint_base.rs), with a ceiling;
#   4. the program built over copies of the files with one byte changed (a reply, an
#      event, a snapshot, a seeded log's revision, a gate's highest token) must fail,
#      naming that file and line (so a pass above means something).
# Needs qemu-system-arm and the thumbv7em-none-eabihf target (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
log() { printf '[bare-metal] %s\n' "$*"; }
# The program embeds the directories these name (build.rs): never the caller's.
unset BARE_METAL_VECTORS BARE_METAL_SEEDED

command -v qemu-system-arm >/dev/null 2>&1 || {
  echo "qemu-system-arm is missing: scripts/setup.sh installs it (Debian package qemu-system-arm)" >&2
  exit 1
}
target=$(cargo metadata --format-version 1 --no-deps |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
# Its own workspace (it builds for the bare-metal target only), beside the main one's.
export CARGO_TARGET_DIR="$target/bare-metal"

# What the files hold, as the program must count it.
count() { local word=$1; shift; cat "$@" | { grep -c "^$word " || true; }; }
vec=(tests/vectors/*.vec)
seeded=(wasm/tests/vectors/*.vec)
gate=(tests/vectors/gate/*.vec)
want="thumbv7em vectors: ${#vec[@]} files, $(count in "${vec[@]}") inputs, $(count out "${vec[@]}") events, \
$(count reply "${vec[@]}") replies, $(count err "${vec[@]}") errors, $(count snapshot "${vec[@]}") snapshots; \
seeded logs: ${#seeded[@]} files, $(count in "${seeded[@]}") inputs, $(count out "${seeded[@]}") events, \
$(count raise "${seeded[@]}") revision raises, $(count snapshot "${seeded[@]}") snapshots; \
gate: ${#gate[@]} files, $(count in "${gate[@]}") admits, $(count err "${gate[@]}") refusals, \
$(count highest "${gate[@]}") highest; "
polls=$(count poll "${vec[@]}" "${seeded[@]}")

cd tests/bare-metal
log "format and lints"
cargo fmt -- --check
cargo clippy --locked --quiet -- -D warnings

# Build (no time limit), then one QEMU run: a hung program is stopped (a pass takes well
# under a second).
run() {
  cargo build --locked --quiet --bin fencelock-bare-metal "$@"
  timeout 60 cargo run --locked --quiet --bin fencelock-bare-metal "$@"
}

# Ceilings, in bytes, on the core's deepest stack (this build measured 2 908 / 676 / 1 620
# in the release profile and 2 596 / 780 / 2 212 in the dev profile): about a third above
# the larger for an input and a restore, about twice for a snapshot (its call is short).
STACK_INPUT_MAX=4096
STACK_SNAPSHOT_MAX=1536
STACK_RESTORE_MAX=3072

for profile in release dev; do
  flag=()
  [ "$profile" = release ] && flag=(--release)
  log "$profile profile under qemu-system-arm -machine mps2-an386"
  out=$(run "${flag[@]}") || { echo "$out"; log "FAILED ($profile)"; exit 1; }
  echo "$out"
  grep -qF "$want" <<<"$out" || { log "expected the files' counts: '$want…'"; exit 1; }
  grep -qF "; 4 stretched length prefixes refused as on 64 bits; $polls polls" <<<"$out" ||
    { log "expected 4 stretched length prefixes refused and every poll line checked"; exit 1; }
  read -r input snapshot restore < <(sed -nE \
    "s/.*deepest stack: ([0-9]+) B for an input, ([0-9]+) B for a snapshot, ([0-9]+) B for a restore.*/\1 \2 \3/p" <<<"$out") || true
  [ -n "${restore:-}" ] || { log "no stack figures in its output"; exit 1; }
  if [ "$input" -gt $STACK_INPUT_MAX ] || [ "$snapshot" -gt $STACK_SNAPSHOT_MAX ] ||
    [ "$restore" -gt $STACK_RESTORE_MAX ]; then
    log "FAILED: the core's stack ($input / $snapshot / $restore B) is over its ceilings" \
      "($STACK_INPUT_MAX / $STACK_SNAPSHOT_MAX / $STACK_RESTORE_MAX B)"
    exit 1
  fi
done

# The core's flash: src/bin/footprint_all.rs (its API on both sides of the wire: every
# input frame decoded, handled and encoded, replies and events encoded and decoded, the
# queries, snapshot and restore, the gate, the keeper) less src/bin/footprint_base.rs (the
# same program without the core), release profile; both must run. Flash is every allocated
# section stored in the image (.vector_table, .text, .rodata, .data's initial values); the
# difference also holds a few helpers most firmware has anyway (memcpy, 64-bit division).
# The ceiling is about a fifth above this build's 65 176 B. (The QEMU command line is
# .cargo/config.toml's runner.)
FLASH_CORE_MAX=80000
log "the core's flash (release profile)"
cargo build --locked --quiet --release --bins
bins="$CARGO_TARGET_DIR/thumbv7em-none-eabihf/release"
for b in footprint_base footprint_all; do
  timeout 60 qemu-system-arm -machine mps2-an386 -cpu cortex-m4 -nographic -monitor none \
    -serial none -semihosting-config enable=on,target=native -kernel "$bins/$b" ||
    { log "FAILED: $b did not run to its end"; exit 1; }
done
flash=$(python3 - "$bins/footprint_base" "$bins/footprint_all" <<'EOF'
import struct, sys
def flash(path):
    d = open(path, "rb").read()
    if d[:4] != b"\x7fELF" or d[4] != 1 or d[5] != 1:
        sys.exit(f"{path}: not a 32-bit little-endian ELF")
    shoff, = struct.unpack_from("<I", d, 0x20)
    shentsize, shnum = struct.unpack_from("<HH", d, 0x2E)
    total = 0
    for i in range(shnum):
        _, typ, flags, _, _, size = struct.unpack_from("<IIIIII", d, shoff + i * shentsize)
        if flags & 2 and typ != 8:  # SHF_ALLOC and not SHT_NOBITS: stored in the image
            total += size
    return total
base, whole = (flash(p) for p in sys.argv[1:])
print(base, whole, whole - base)
EOF
)
read -r base whole core <<<"$flash"
log "the core's API takes $core B of flash ($whole B with it, $base B without)"
[ "$core" -le $FLASH_CORE_MAX ] || { log "FAILED: over its ceiling of $FLASH_CORE_MAX B"; exit 1; }

log "a changed byte must fail the run"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
# mutant DIRECTIVE WHAT SET: copies of the vectors and seeded logs with the last DIRECTIVE
# line of the last file of SET (vectors, gate or seeded) that has one changed in its last
# digit; the dev build over them must fail with `FAIL <file> line <n>: WHAT`.
mutant() {
  local directive=$1 what=$2 set=$3 dir file line
  rm -rf "$scratch/vectors" "$scratch/seeded"
  cp -r ../vectors "$scratch/vectors"
  cp -r ../../wasm/tests/vectors "$scratch/seeded"
  case "$set" in
    vectors) dir="$scratch/vectors" ;;
    gate) dir="$scratch/vectors/gate" ;;
    seeded) dir="$scratch/seeded" ;;
  esac
  file=$(cd "$dir" && grep -l "^$directive " *.vec | tail -1) ||
    { log "no $set file has a $directive line"; exit 1; }
  line=$(grep -n "^$directive " "$dir/$file" | tail -1 | cut -d: -f1)
  python3 - "$dir/$file" "$line" <<'EOF'
import sys
path, n = sys.argv[1], int(sys.argv[2])
lines = open(path).read().split("\n")
last = lines[n - 1][-1]
lines[n - 1] = lines[n - 1][:-1] + ("1" if last == "0" else "0")
open(path, "w").write("\n".join(lines))
EOF
  if out=$(BARE_METAL_VECTORS="$scratch/vectors" BARE_METAL_SEEDED="$scratch/seeded" run 2>&1); then
    echo "$out"
    log "FAILED: the changed $directive line of $file (line $line) passed"
    exit 1
  fi
  grep -qF "FAIL $file line $line: $what" <<<"$out" || {
    echo "$out"
    log "FAILED: expected 'FAIL $file line $line: $what'"
    exit 1
  }
  log "refused as it should be: $(grep -F FAIL <<<"$out")"
}
mutant reply "reply differs" vectors
mutant out "event differs" vectors
mutant snapshot "snapshot differs" vectors
mutant revision "another revision, or an error" seeded
mutant poll "poll_timeout differs" seeded
mutant highest "another highest token" gate
log "ok"
