#!/usr/bin/env bash
# The size floor of a wasm module of fencelock, for make bench: benches/wasm-floor (the
# core's lock rules behind the thinnest binding; a measure, not a product) built exactly as
# the shipped module (scripts/wasm-flags.sh), bound for the web and for node, run once
# under node (a lock granted, queued, handed over), then measured as scripts/bench.sh
# measures the shipped bundle: raw and gzip -9 -n bytes of the .wasm after wasm-opt, the
# JS glue apart. Prints one JSON object; exits non-zero (printing nothing) if any step
# fails. Builds into ${CARGO_TARGET_DIR:-target}; needs what scripts/setup.sh installs.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/wasm-flags.sh
target=$(cargo metadata --format-version 1 --no-deps |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
out="$target/wasm-floor"
rm -rf "$out" && mkdir -p "$out"
wasm_cargo_build fencelock-wasm-floor >&2
raw="$target/wasm32-unknown-unknown/release/fencelock_wasm_floor.wasm"
for t in web nodejs; do
  wasm-bindgen --target "$t" --out-dir "$out/$t" "$raw" >&2
  wasm_opt "$out/$t/fencelock_wasm_floor_bg.wasm"
done
# It must run, or its size says nothing.
node -e '
const m = require(process.argv[1]);
const s = m.FloorService.create(2, 2, 4);
const check = (got, want, what) => { if (got !== want) throw new Error(`${what}: ${got}, want ${want}`); };
check(s.openSession(0, 10), 0, "open a"); const a = s.replyValue();
check(s.openSession(0, 10), 0, "open b"); const b = s.replyValue();
check(s.acquire(1, a, "l", 1, 0, 0, 1, 0), 3, "a granted");
check(s.acquire(1, b, "l", 1, 0, 0, 2, 0), 4, "b queued");
check(s.release(2, a, "l"), 6, "a released");
const names = []; const ev = s.takeEvents(names);
check(ev.length, 5, "one event"); check(ev[0], 1, "granted"); check(names[ev[4]], "l", "its lock");
check(s.tick(1), -205, "time went backwards");
' "$out/nodejs/fencelock_wasm_floor.js" >&2
f="$out/web/fencelock_wasm_floor_bg.wasm"
g="$out/web/fencelock_wasm_floor.js"
printf '{"raw": %d, "gzip9": %d, "glue_raw": %d, "glue_gzip9": %d}\n' \
  "$(wc -c <"$f")" "$(gzip -9 -n -c "$f" | wc -c)" "$(wc -c <"$g")" "$(gzip -9 -n -c "$g" | wc -c)"
