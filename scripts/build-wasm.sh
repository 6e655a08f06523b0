#!/usr/bin/env bash
# Builds the wasm package: wasm/pkg/web (ES module, for the browser demo) and
# wasm/pkg/node (CommonJS, for node and the tests, with an ES-module face), each run
# through wasm-opt -Oz; wasm/pkg itself is the npm package "fencelock" (package.json from
# wasm/npm: exports for node as ESM and CommonJS and for the browser), and
# prints the bundle size (with UPDATE_DOCS=1 also written into wasm/README.md between the size markers).
#
# Needs (scripts/setup.sh installs them): the wasm32-unknown-unknown target, the
# wasm-bindgen CLI at exactly Cargo.lock's wasm-bindgen version, and tools/node_modules
# (binaryen's wasm-opt from npm; Debian's older wasm-opt produces modules that crash).
# Idempotent: cargo is incremental, and bindgen/wasm-opt are skipped when the compiled
# module and the tools are unchanged since the last run.
set -euo pipefail
# This script's own path, before the cd (a user runs it as fencelock/scripts/build-wasm.sh).
self="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
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
# what a browser downloads). "z" since the crate is no_std on wasm32: 135.7 KB raw / 52.4 KB
# gzip after wasm-opt, against 144.7 / 55.1 with "s" (measured on the same sources). Only the wasm32 build sees these
# settings; the workspace's release profile is unchanged for every other build. The price
# (callgrind, wasm/README.md): about 1.1x the instructions of "s" for an acquire + release from
# JS, 1.50x for a snapshot restore + encode.
# The core crate alone ("fencelock") at "s": its acquire and release are the hot path of the
# typed fast path, and "s" takes an acquire + release by interned id from about 5 700 to
# 4 600 instructions under node (measured with the core as it was then) for 0.6 KB raw / 1.5 KB gzipped
# (opt-level 2 or 3 there: 4 100, for 11 KB raw). Measured in wasm/README.md.
# The panic locations the compiler keeps (a trap never prints them) name dependencies by
# their path in the cargo registry: written relative to its source folder, they take less
# room and the module no longer depends on where the builder's cargo home is. A prefix, not
# a folder list, so the flags (and the build) are the same before the registry exists.
rustflags="[\"--remap-path-prefix=${CARGO_HOME:-$HOME/.cargo}/registry/src/=\"]"
log "cargo build --release --target wasm32-unknown-unknown -p fencelock-wasm"
CARGO_PROFILE_RELEASE_OPT_LEVEL=z CARGO_PROFILE_RELEASE_PANIC=abort \
  cargo build --release --target wasm32-unknown-unknown -p fencelock-wasm --quiet \
  --config 'profile.release.package.fencelock.opt-level="s"' \
  --config "target.wasm32-unknown-unknown.rustflags=$rustflags"
raw="$target_dir/wasm32-unknown-unknown/release/fencelock_wasm.wasm"

stamp_want="$(sha256sum "$raw" | cut -d' ' -f1) wb=$want_wb opt=$("$WASM_OPT" --version | tr -d '\n') script=$(sha256sum "$self" | cut -d' ' -f1)"
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
    # --strip-target-features: the features section is for linkers, no engine reads it.
    "$WASM_OPT" -Oz --converge --strip-debug --strip-producers --strip-target-features --enable-bulk-memory \
      --enable-nontrapping-float-to-int --enable-sign-ext --enable-mutable-globals \
      --enable-reference-types --enable-multivalue \
      "$tmp/$t/fencelock_wasm_bg.wasm" -o "$tmp/$t/fencelock_wasm_bg.wasm"
  done
  # An ES-module face for node over the CommonJS build, naming every export of it (read
  # from the module itself, so it cannot fall behind), and a no-op default `init` so code
  # written for the browser build (`await init()`) runs unchanged in node.
  node -e '
    const path = require("path"); const fs = require("fs"); const dir = process.argv[1];
    const names = Object.keys(require(path.resolve(dir, "fencelock_wasm.js"))).sort();
    const mjs = [
      "// Generated by scripts/build-wasm.sh: the node build as an ES module.",
      "import { createRequire } from \"node:module\";",
      "const m = createRequire(import.meta.url)(\"./fencelock_wasm.js\");",
      ...names.map((n) => `export const ${n} = m.${n};`),
      "/** Nothing to load in node (the module is compiled synchronously); kept so browser code runs as is. */",
      "export default async function init() {}",
      "",
    ].join("\n");
    fs.writeFileSync(path.join(dir, "fencelock_wasm.mjs"), mjs);
    fs.writeFileSync(path.join(dir, "fencelock_wasm.d.mts"), [
      "export * from \"./fencelock_wasm.js\";",
      "/** Nothing to load in node; kept so browser code (`await init()`) runs as is. */",
      "export default function init(): Promise<void>;",
      "",
    ].join("\n"));' "$tmp/node"
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

# The npm package around both builds: wasm/npm/package.json (its version must be the
# crate's), its README and the licences, so `npm pack wasm/pkg` makes the tarball.
crate_version=$(cargo metadata --format-version 1 --no-deps |
  node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).packages.find(p=>p.name==="fencelock-wasm").version))')
npm_version=$(node -p 'require("./wasm/npm/package.json").version')
if [ "$npm_version" != "$crate_version" ]; then
  echo "wasm/npm/package.json has version $npm_version, the crate $crate_version" >&2
  exit 1
fi
for f in wasm/npm/package.json wasm/npm/README.md LICENSE-MIT LICENSE-APACHE; do
  cp "$f" "wasm/pkg/.$(basename "$f").new" && mv "wasm/pkg/.$(basename "$f").new" "wasm/pkg/$(basename "$f")"
done

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
