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
. scripts/wasm-flags.sh # WASM_OPT, and the build's settings (below)
if [ ! -x "$WASM_OPT" ]; then
  echo "$WASM_OPT missing: run scripts/setup.sh (npm ci in tools/)" >&2
  exit 1
fi

target_dir=$(cargo metadata --format-version 1 --no-deps |
  node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).target_directory))')

# The build's settings (opt-levels, panic, path remapping, wasm-opt's passes) are
# scripts/wasm-flags.sh's, shared with the size floor make bench measures
# (scripts/wasm-floor.sh), so the two modules are built alike.
log "cargo build --release --target wasm32-unknown-unknown -p fencelock-wasm"
wasm_cargo_build fencelock-wasm
raw="$target_dir/wasm32-unknown-unknown/release/fencelock_wasm.wasm"
# The small module (wasm/lite: the lock rules with numbers in and out), the package's
# "fencelock/lite", under its JS class (wasm/lite/js).
log "cargo build --release --target wasm32-unknown-unknown -p fencelock-wasm-lite"
wasm_cargo_build fencelock-wasm-lite
lite_raw="$target_dir/wasm32-unknown-unknown/release/fencelock_lite.wasm"

stamp_want="$(sha256sum "$raw" "$lite_raw" wasm/js/* wasm/lite/js/* | sha256sum | cut -d' ' -f1) wb=$want_wb opt=$("$WASM_OPT" --version | tr -d '\n') script=$(cat "$self" scripts/wasm-flags.sh | sha256sum | cut -d' ' -f1)"
stamp=wasm/pkg/.stamp
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$stamp_want" ] &&
  [ -f wasm/pkg/web/fencelock_wasm_bg.wasm ] && [ -f wasm/pkg/node/fencelock_wasm_bg.wasm ] &&
  [ -f wasm/pkg/lite/web/fencelock_lite_bg.wasm ] && [ -f wasm/pkg/lite/node/fencelock_lite_bg.wasm ] &&
  [ -f wasm/pkg/lite/web/index.js ] && [ -f wasm/pkg/lite/node/index.mjs ] &&
  [ -f wasm/pkg/lite/web/index.d.ts ] && [ -f wasm/pkg/lite/node/index.d.mts ]; then
  log "wasm/pkg is up to date"
  # Checked against the sources now: a source edit that left the module's bytes as they
  # were (a comment) does not make the package look older than its sources to
  # scripts/test-verify.sh, which judges by file times.
  touch wasm/pkg/node/package.json
else
  # Build into a scratch dir and swap it in, so a concurrent reader (a test run, the demo
  # server) never sees a half-written package.
  tmp=$(mktemp -d wasm/.pkg-new.XXXXXX)
  trap 'rm -rf "$tmp"' EXIT
  # bind RAW NAME DIR: wasm-bindgen's web and node builds of RAW into $tmp/DIR/{web,node},
  # each .wasm through wasm-opt.
  bind() {
    local t bt
    for t in web node; do
      [ "$t" = node ] && bt=nodejs || bt=web
      log "wasm-bindgen --target $bt -> wasm/pkg/$3$t"
      wasm-bindgen --target "$bt" --out-dir "$tmp/$3$t" "$1"
      log "wasm-opt -Oz wasm/pkg/$3$t/$2_bg.wasm"
      wasm_opt "$tmp/$3$t/$2_bg.wasm"
    done
  }
  bind "$raw" fencelock_wasm ""
  # The fast path's numbers, judged in JS before the call reaches wasm (wasm/js/numbers.js
  # says why); appended to both builds, where the generated classes are in scope.
  # Its comments stay in the source: the shipped copy has one line pointing there.
  for t in web node; do
    {
      printf '\n// Appended by scripts/build-wasm.sh from wasm/js/numbers.js (its comments say why).\n'
      grep -v '^[[:space:]]*//' wasm/js/numbers.js
      printf '\n// Appended by scripts/build-wasm.sh from wasm/js/guard.js (its comments say why).\n'
      grep -v '^[[:space:]]*//' wasm/js/guard.js
    } >>"$tmp/$t/fencelock_wasm.js"
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
  # The small module, for the web and for node, each with the JS class bound to it.
  bind "$lite_raw" fencelock_lite lite/
  # The class writes lock names into the module's memory (wasm/lite/js/lite.js), so each
  # glue gives it the memory: an import of it in the module itself would cost about 1 KB.
  printf '\n// Appended by scripts/build-wasm.sh: the memory, for the class'"'"'s name buffer.\nexport function wasmMemory() { return wasm.memory; }\n' >>"$tmp/lite/web/fencelock_lite.js"
  printf '\n// Appended by scripts/build-wasm.sh: the memory, for the class'"'"'s name buffer.\nexports.wasmMemory = function wasmMemory() { return wasm.memory; };\n' >>"$tmp/lite/node/fencelock_lite.js"
  # The class is an ES module: lite.mjs beside the node build (a CommonJS folder).
  cp wasm/lite/js/lite.js "$tmp/lite/web/lite.js"
  cp wasm/lite/js/lite.js "$tmp/lite/node/lite.mjs"
  cat >"$tmp/lite/web/index.js" <<'JS'
// Generated by scripts/build-wasm.sh: fencelock/lite for the browser. `await init()`
// fetches and compiles fencelock_lite_bg.wasm before the first LiteService.
import init, * as raw from './fencelock_lite.js';
import { bind } from './lite.js';
export const { LiteService } = bind(raw);
export default init;
JS
  cat >"$tmp/lite/node/index.mjs" <<'JS'
// Generated by scripts/build-wasm.sh: fencelock/lite for node (an ES module; the module
// is compiled on import).
import { createRequire } from 'node:module';
import { bind } from './lite.mjs';
export const { LiteService } = bind(createRequire(import.meta.url)('./fencelock_lite.js'));
/** Nothing to load in node; kept so browser code (`await init()`) runs as is. */
export default async function init() {}
JS
  # The types: an ES module's in both builds (.d.mts in node's CommonJS folder).
  cp wasm/lite/js/lite.d.ts "$tmp/lite/web/index.d.ts"
  cp wasm/lite/js/lite.d.ts "$tmp/lite/node/index.d.mts"
  printf '{\n  "type": "module"\n}\n' >"$tmp/lite/web/package.json"
  printf '{\n  "type": "commonjs"\n}\n' >"$tmp/lite/node/package.json"
  # Module kinds for node and bundlers (wasm-bindgen writes no package.json itself).
  printf '{\n  "name": "fencelock-wasm",\n  "type": "module",\n  "main": "fencelock_wasm.js",\n  "types": "fencelock_wasm.d.ts"\n}\n' >"$tmp/web/package.json"
  printf '{\n  "name": "fencelock-wasm",\n  "type": "commonjs",\n  "main": "fencelock_wasm.js",\n  "types": "fencelock_wasm.d.ts"\n}\n' >"$tmp/node/package.json"
  mkdir -p wasm/pkg
  for t in web node lite; do
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
  printf '| **the small module** (`fencelock/lite`, wasm/pkg/lite/web) | | |\n'
  lw=wasm/pkg/lite/web/fencelock_lite_bg.wasm
  lj=(wasm/pkg/lite/web/fencelock_lite.js wasm/pkg/lite/web/lite.js wasm/pkg/lite/web/index.js)
  ljr=$(cat "${lj[@]}" | wc -c)
  ljg=$(($(gz "${lj[0]}") + $(gz "${lj[1]}") + $(gz "${lj[2]}")))
  printf '| `fencelock_lite_bg.wasm` | %d | %d |\n' "$(wc -c <"$lw")" "$(gz "$lw")"
  printf '| `fencelock_lite.js`, `lite.js`, `index.js` (glue and class) | %d | %d |\n' "$ljr" "$ljg"
  printf '| total | %d | %d |\n' "$(($(wc -c <"$lw") + ljr))" "$(($(gz "$lw") + ljg))"
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
