#!/usr/bin/env bash
# Tests the packages as a user gets them, each installed into a fresh temporary directory
# and used from there, away from the checkout:
#   Python  `make wheel`, a new virtual environment, `pip install` of the wheel (no index:
#           nothing but the wheel), the README's hello.py run from another directory with
#           no FENCELOCK_LIB or PYTHONPATH (the library comes from inside the wheel);
#   C       `make install PREFIX=<temp>` (and a DESTDIR staging install), the README's
#           hello.c built with nothing but `pkg-config --cflags --libs fencelock`, linked
#           to the versioned shared library through its soname, run from another directory;
#           the conformance runner (ffi/tests/c/vectors.c) linked the same way, replaying
#           every vector, gate vector and the precedence table through the installed build;
#   JS      `npm pack wasm/pkg`, `npm install` of the tarball into a new project (offline),
#           the package README's example imported as an ES module, a CommonJS require, and
#           the browser build chosen by the "browser" export condition, and the small
#           module (fencelock/lite) in node and under the "browser" condition;
#   bundler the tarball installed into another new project (no vite of its own), with the
#           page in wasm/tests/bundler/ (index.html, main.js: the GC-pause story through
#           fencelock and fencelock/lite) and wasm/README.md's vite.config.js;
#           wasm/tests/bundler/check.mjs runs the vite of tools/ on it: `vite build`, served
#           by python3 -m http.server; the dev server with no config (which pre-bundles the
#           package); the dev server with the config (which does not). Each, in headless
#           Chromium, must show main.js's exact result, load both .wasm files as
#           application/wasm, and log no error or warning.
# Needs what scripts/setup.sh installs (python3-venv, pkg-config, the wasm toolchain,
# tools/: vite, playwright-core; Chromium).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
step() { printf '\n--- packages: %s\n' "$*"; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fencelock-packages.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
unset FENCELOCK_LIB PYTHONPATH

# block FILE LANG FIRST: the fenced LANG block of FILE whose first line starts with FIRST.
block() {
  python3 - "$@" <<'PY'
import sys
path, lang, first = sys.argv[1:4]
lines, out, on = open(path, encoding="utf-8").read().split("\n"), None, False
for i, line in enumerate(lines):
    if not on and line.strip() == "```" + lang and lines[i + 1].startswith(first):
        on, out = True, []
    elif on and line.strip() == "```":
        break
    elif on:
        out.append(line)
if out is None:
    sys.exit(f"{path}: no {lang} block starting with {first!r}")
print("\n".join(out))
PY
}

step "Python: make wheel, pip install it into a fresh venv, run README.md's hello.py elsewhere"
wheel=$(make --no-print-directory wheel | tail -n 1)
echo "built $(basename "$wheel")"
python3 -m venv "$tmp/venv"
"$tmp/venv/bin/pip" install -q --no-index --disable-pip-version-check "$wheel"
mkdir "$tmp/py"
block README.md python "# hello.py" >"$tmp/py/hello.py"
out=$(cd "$tmp/py" && "$tmp/venv/bin/python" hello.py)
echo "$out"
grep -qx 'refused: stale: token 1 is lower than the highest seen, token 2' <<<"$out" ||
  { echo "hello.py: A's stale write was not refused" >&2; exit 1; }
grep -qx "GrantedEvent(kind='granted', session=2, lock='ledger', mode='exclusive', token=2)" <<<"$out" ||
  { echo "hello.py: B was not granted token 2" >&2; exit 1; }
(cd "$tmp" && VENV="$tmp/venv" "$tmp/venv/bin/python" -c '
import os, fencelock
here = os.path.dirname(fencelock.__file__)
assert here.startswith(os.environ["VENV"]), here
assert os.path.dirname(fencelock._lib._name) == here, fencelock._lib._name
assert os.path.exists(os.path.join(here, "py.typed"))
print("the library and py.typed came with the wheel:", os.path.relpath(fencelock._lib._name, os.environ["VENV"]))')

step "C: make install PREFIX=<temp>, README.md's hello.c built with pkg-config only, run elsewhere"
prefix="$tmp/prefix"
make --no-print-directory install PREFIX="$prefix"
soname=$(readelf -d "$prefix/lib/libfencelock.so" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[ -n "$soname" ] && [ -L "$prefix/lib/$soname" ] && [ -f "$prefix/lib/libfencelock.a" ] &&
  [ -f "$prefix/include/fencelock.h" ] || { echo "the installed tree is incomplete" >&2; exit 1; }
echo "soname $soname -> $(readlink "$prefix/lib/$soname")"
mkdir "$tmp/c"
block README.md c "/* hello.c" >"$tmp/c/hello.c"
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
flags=$(pkg-config --cflags --libs fencelock)
echo "pkg-config --cflags --libs fencelock: $flags"
# shellcheck disable=SC2086 # the flags are words
(cd "$tmp/c" && cc hello.c $flags -o hello)
unset PKG_CONFIG_PATH
linked=$(cd "$tmp" && LD_LIBRARY_PATH="$prefix/lib" ldd "$tmp/c/hello")
grep -q "$soname => $prefix/lib/$soname" <<<"$linked" ||
  { echo "hello is not linked to $soname in the prefix:" >&2; echo "$linked" >&2; exit 1; }
out=$(cd "$tmp" && LD_LIBRARY_PATH="$prefix/lib" "$tmp/c/hello")
echo "$out"
[ "$out" = "session 2 holds jobs/reindex, token 2" ] || { echo "unexpected hello output" >&2; exit 1; }
# The installed library (release, LTO: what users link) replays the conformance vectors,
# the gate vectors and the precedence table too; scripts/test-ffi.sh replays them against
# the debug build.
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
# shellcheck disable=SC2086 # the flags are words
cc -std=c11 -Wall -Wextra -Werror ffi/tests/c/vectors.c $(pkg-config --cflags --libs fencelock) -o "$tmp/c/vectors"
unset PKG_CONFIG_PATH
(cd "$tmp" && LD_LIBRARY_PATH="$prefix/lib" "$tmp/c/vectors" "$repo"/tests/vectors/*.vec \
  "$repo"/wasm/tests/vectors/*.vec "$repo"/tests/vectors/gate/*.vec "$repo/tests/vectors/precedence.calls")
# A packager's staging install: the files under DESTDIR, the pkg-config file naming PREFIX.
make --no-print-directory install PREFIX=/opt/fencelock DESTDIR="$tmp/stage" >/dev/null
grep -qx 'prefix=/opt/fencelock' "$tmp/stage/opt/fencelock/lib/pkgconfig/fencelock.pc" &&
  [ -L "$tmp/stage/opt/fencelock/lib/$soname" ] ||
  { echo "DESTDIR staging install is wrong" >&2; exit 1; }
echo "DESTDIR staging install: files under DESTDIR, fencelock.pc names PREFIX"

step "JS: npm pack wasm/pkg, npm install the tarball into a fresh project, ESM / CommonJS / browser / lite"
scripts/build-wasm.sh >/dev/null
tgz=$(cd "$tmp" && npm pack "$repo/wasm/pkg" --silent | tail -n 1)
echo "packed $tgz"
mkdir "$tmp/js"
printf '{ "name": "try-fencelock", "version": "1.0.0", "private": true }\n' >"$tmp/js/package.json"
(cd "$tmp/js" && npm install --offline --no-audit --no-fund --loglevel=error "$tmp/$tgz")
block wasm/npm/README.md js "import init" >"$tmp/js/readme.mjs"
out=$(cd "$tmp/js" && node readme.mjs)
echo "ESM (the package README's example): $out"
[ "$out" = "{ kind: 'granted', mode: 'exclusive', token: 1 }" ] || { echo "unexpected ESM output" >&2; exit 1; }
cat >"$tmp/js/cjs.cjs" <<'JS'
const { LockService, FenceGate } = require('fencelock');
const svc = new LockService({ sessions: 2, locks: 2, claims: 2 });
const a = svc.openSession(0, 10).reply.session;
const gate = new FenceGate(2);
gate.admit('ledger', svc.acquire(0, a, 'ledger', { mode: 'exclusive', wait: 'none' }).reply.token);
try { gate.admit('ledger', 0); } catch (e) { console.log(require.resolve('fencelock').split('node_modules/')[1], e.code); }
JS
out=$(cd "$tmp/js" && node cjs.cjs)
echo "CommonJS: $out"
[ "$out" = "fencelock/node/fencelock_wasm.js zero_token" ] || { echo "unexpected CommonJS output" >&2; exit 1; }
cat >"$tmp/js/browser.mjs" <<'JS'
// Resolved with the "browser" condition, as a bundler for the web does: the web build,
// which needs init() with the .wasm (here its bytes; a browser fetches it by URL).
import { readFileSync } from 'node:fs';
const url = import.meta.resolve('fencelock');
const { default: init, LockService } = await import('fencelock');
await init({ module_or_path: readFileSync(new URL('fencelock_wasm_bg.wasm', url)) });
const svc = new LockService({ sessions: 1, locks: 1, claims: 1 });
console.log(url.split('node_modules/')[1], svc.openSession(0, 5).reply.kind);
JS
out=$(cd "$tmp/js" && node --conditions=browser browser.mjs)
echo "browser condition: $out"
[ "$out" = "fencelock/web/fencelock_wasm.js opened" ] || { echo "unexpected browser-build output" >&2; exit 1; }
cat >"$tmp/js/lite.mjs" <<'JS'
// The small module, as a user imports it: fencelock/lite (node: compiled on import; the
// browser condition: the web build, its .wasm given to init()).
import { readFileSync } from 'node:fs';
const url = import.meta.resolve('fencelock/lite');
const { default: init, LiteService } = await import('fencelock/lite');
if (url.includes('/web/')) await init({ module_or_path: readFileSync(new URL('fencelock_lite_bg.wasm', url)) });
else await init();
const svc = new LiteService({ sessions: 1, locks: 1, claims: 1 });
svc.openSession(0, 5);
console.log(url.split('node_modules/')[1], svc.acquire(0, svc.replyValue(), 'ledger'), svc.replyValue());
JS
out=$(cd "$tmp/js" && node lite.mjs)
echo "fencelock/lite in node: $out"
[ "$out" = "fencelock/lite/node/index.mjs 3 1" ] || { echo "unexpected fencelock/lite output" >&2; exit 1; }
out=$(cd "$tmp/js" && node --conditions=browser lite.mjs)
echo "fencelock/lite, browser condition: $out"
[ "$out" = "fencelock/lite/web/index.js 3 1" ] || { echo "unexpected fencelock/lite browser output" >&2; exit 1; }
(cd "$tmp/js" && node -e '
const fs = require("fs"); const path = require("path");
const dir = path.dirname(require.resolve("fencelock/package.json"));
const pkg = require("fencelock/package.json");
const types = [pkg.types, ...JSON.stringify(pkg.exports).match(/[^"]+\.d\.m?ts/g)];
for (const t of types) if (!fs.existsSync(path.join(dir, t))) throw new Error("missing " + t);
console.log("types present:", [...new Set(types)].join(", "));')

step "bundler: wasm/tests/bundler/ in a fresh project with the tarball, vite build and dev server, headless Chromium"
mkdir "$tmp/web"
printf '{ "name": "try-fencelock-web", "version": "1.0.0", "private": true, "type": "module" }\n' >"$tmp/web/package.json"
(cd "$tmp/web" && npm install --offline --no-audit --no-fund --loglevel=error "$tmp/$tgz")
cp wasm/tests/bundler/index.html wasm/tests/bundler/main.js "$tmp/web/"
block wasm/README.md js "// vite.config.js" >"$tmp/web/vite.config.js"
node wasm/tests/bundler/check.mjs "$tmp/web"
echo "packages: all passed"
