#!/usr/bin/env bash
# Builds the wasm package: wasm/pkg/web (ES module, for the browser demo) and
# wasm/pkg/node (CommonJS, for node and the tests), each run through wasm-opt -Oz, and
# prints the bundle size (with UPDATE_DOCS=1 also written into wasm/README.md between the size markers).
#
# Needs (scripts/setup.sh installs them): the wasm32-unknown-unknown target, the
# wasm-bindgen CLI at exactly Cargo.lock's wasm-bindgen version, and tools/node_modules
# (binaryen's wasm-opt from npm; Debian's older wasm-opt produces modules that crash).
# Idempotent: cargo is incremental, and bindgen/wasm-opt are skipped when the compiled
# module and the tools are unchanged since the last run.
set -euo pipefail
cd "$(dirname "$0")/.."
log() { printf '[build-wasm] %s\n' "$*"; }

want_wb=$(awk '/^name = "wasm-bindgen"$/{getline; gsub(/version = |"/,""); print; exit}' Cargo.lock)
have_wb=$(wasm-bindgen --version 2>/dev/null | awk '{print $2}' || true)
if [ "$have_wb" != "$want_wb" ]; then
  echo "wasm-bindgen CLI is '${have_wb:-missing}', Cargo.lock wants $want_wb: run scripts/setup.sh" >&2
  exit 1
fi
WASM_OPT=tools/node_modules/.bin/wasm-opt
if [ ! -x "$WASM_OPT" ]; then
  echo "$WASM_OPT missing: run scripts/setup.sh (npm ci in tools/)" >&2
  exit 1
fi

target_dir=$(cargo metadata --format-version 1 --no-deps |
  node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).target_directory))')

# Size over speed for this crate's release build (the lock rules are cheap; the bundle is
# what a browser downloads; "s" compresses better than "z" here: 55.5 vs 58.6 KB gzipped).
# Only the wasm32 build sees these settings.
log "cargo build --release --target wasm32-unknown-unknown -p fencelock-wasm"
CARGO_PROFILE_RELEASE_OPT_LEVEL=s CARGO_PROFILE_RELEASE_PANIC=abort \
  cargo build --release --target wasm32-unknown-unknown -p fencelock-wasm --quiet
raw="$target_dir/wasm32-unknown-unknown/release/fencelock_wasm.wasm"

stamp_want="$(sha256sum "$raw" | cut -d' ' -f1) wb=$want_wb opt=$("$WASM_OPT" --version | tr -d '\n') script=$(sha256sum "$0" | cut -d' ' -f1)"
stamp=wasm/pkg/.stamp
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$stamp_want" ] &&
  [ -f wasm/pkg/web/fencelock_wasm_bg.wasm ] && [ -f wasm/pkg/node/fencelock_wasm_bg.wasm ]; then
  log "wasm/pkg is up to date"
else
  # Build into a scratch dir and swap it in, so a concurrent reader (a test run, the demo
  # server) never sees a half-written package.
  tmp=$(mktemp -d wasm/.pkg-new.XXXXXX)
  trap 'rm -rf "$tmp"' EXIT
  for t in web node; do
    [ "$t" = node ] && bt=nodejs || bt=web
    log "wasm-bindgen --target $bt -> wasm/pkg/$t"
    wasm-bindgen --target "$bt" --out-dir "$tmp/$t" "$raw"
    log "wasm-opt -Oz wasm/pkg/$t/fencelock_wasm_bg.wasm"
    "$WASM_OPT" -Oz --strip-debug --strip-producers --enable-bulk-memory \
      --enable-nontrapping-float-to-int --enable-sign-ext --enable-mutable-globals \
      --enable-reference-types --enable-multivalue \
      "$tmp/$t/fencelock_wasm_bg.wasm" -o "$tmp/$t/fencelock_wasm_bg.wasm"
  done
  # Module kinds for node and bundlers (wasm-bindgen writes no package.json itself).
  printf '{\n  "name": "fencelock-wasm",\n  "type": "module",\n  "main": "fencelock_wasm.js",\n  "types": "fencelock_wasm.d.ts"\n}\n' >"$tmp/web/package.json"
  printf '{\n  "name": "fencelock-wasm",\n  "type": "commonjs",\n  "main": "fencelock_wasm.js",\n  "types": "fencelock_wasm.d.ts"\n}\n' >"$tmp/node/package.json"
  mkdir -p wasm/pkg
  for t in web node; do
    rm -rf "wasm/pkg/$t.old"
    [ -d "wasm/pkg/$t" ] && mv "wasm/pkg/$t" "wasm/pkg/$t.old"
    mv "$tmp/$t" "wasm/pkg/$t"
    rm -rf "wasm/pkg/$t.old"
  done
  rmdir "$tmp"
  printf '%s' "$stamp_want" >"$stamp"
fi

# Bundle size: what a browser downloads for the web package.
gz() { gzip -9 -n -c "$1" | wc -c; }
w=wasm/pkg/web/fencelock_wasm_bg.wasm
j=wasm/pkg/web/fencelock_wasm.js
table=$(
  printf '| file (wasm/pkg/web) | raw bytes | gzip -9 bytes |\n|---|---:|---:|\n'
  printf '| `fencelock_wasm_bg.wasm` | %d | %d |\n' "$(wc -c <"$w")" "$(gz "$w")"
  printf '| `fencelock_wasm.js` (glue) | %d | %d |\n' "$(wc -c <"$j")" "$(gz "$j")"
  printf '| total | %d | %d |\n' "$(($(wc -c <"$w") + $(wc -c <"$j")))" "$(($(gz "$w") + $(gz "$j")))"
)
printf '%s\n' "$table"
readme=wasm/README.md
# Only on request: a user's `make demo` / `make test` must not rewrite tracked files.
if [ "${UPDATE_DOCS:-0}" = 1 ] && [ -f "$readme" ] && grep -q '<!-- size:begin -->' "$readme"; then
  TABLE="$table" node -e '
    const fs = require("fs"); const f = process.argv[1];
    const s = fs.readFileSync(f, "utf8");
    const out = s.replace(/<!-- size:begin -->[\s\S]*?<!-- size:end -->/,
      "<!-- size:begin -->\n" + process.env.TABLE + "\n<!-- size:end -->");
    if (out !== s) fs.writeFileSync(f, out);' "$readme"
fi
