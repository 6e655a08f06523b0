#!/usr/bin/env bash
# Installs what `make test` (scripts/setup.sh) or `make demo` (scripts/setup.sh demo) needs
# and is missing. Idempotent: every step checks first, so a second run takes seconds.
# Pinned versions live here, in Cargo.lock and in tools/package-lock.json.
set -euo pipefail
cd "$(dirname "$0")/.."

# "demo": only the wasm build (target, wasm-bindgen, wasm-opt); "all": everything the tests use.
MODE=${1:-all}
case "$MODE" in all | demo) ;; *) echo "usage: scripts/setup.sh [all|demo]" >&2; exit 2 ;; esac
tests() { [ "$MODE" = all ]; }

WANT_TARGETS="wasm32-unknown-unknown"
tests && WANT_TARGETS="$WANT_TARGETS thumbv7em-none-eabihf"
CBINDGEN_VERSION=0.29.2
CARGO_FUZZ_VERSION=0.13.1

log() { printf '[setup] %s\n' "$*"; }

# node: the demo's build needs 20 or newer, the tests' bundler check (the pinned vite) 20.19
# or newer within 20, or 22.12 or newer. Said now rather than 20 minutes into make test.
node_ok=$(node -e '
  const [a, b] = process.versions.node.split(".").map(Number);
  const tests = process.argv[1] === "all";
  console.log(a < 20 ? "no" : !tests ? "yes" : (a === 20 && b >= 19) || (a === 22 && b >= 12) || a > 22 ? "yes" : "no");
' "$MODE" 2>/dev/null || echo missing)
if [ "$node_ok" != yes ]; then
  if tests; then want="20.19 or newer within 20, or 22.12 or newer"; else want="20 or newer"; fi
  echo "[setup] node $(node --version 2>/dev/null || echo '(not found)'): $MODE needs node $want" >&2
  exit 1
fi
# npm installs the tools below (Debian's nodejs package comes without it); the Python
# wheel build (scripts/build_wheel.py, in the package tests) reads TOML with tomllib,
# Python 3.11 or newer. Said now rather than minutes into make test.
command -v npm >/dev/null 2>&1 || { echo "[setup] npm not found: $MODE needs npm (with node)" >&2; exit 1; }
if tests && ! python3 -c 'import tomllib' 2>/dev/null; then
  echo "[setup] python3 $(python3 -c 'import platform; print(platform.python_version())' 2>/dev/null || echo '(not found)'): the tests need Python 3.11 or newer" >&2
  exit 1
fi

# rustfmt and clippy on the default (stable) toolchain, for the lint step of test-all.sh.
need_comp=()
if tests; then
  cargo fmt --version >/dev/null 2>&1 || need_comp+=(rustfmt)
  cargo clippy --version >/dev/null 2>&1 || need_comp+=(clippy)
fi
if [ ${#need_comp[@]} -gt 0 ]; then
  log "rustup component add ${need_comp[*]}"
  rustup component add "${need_comp[@]}"
fi

# Rust targets (wasm for the browser/node build, a bare-metal one to prove no_std).
installed=$(rustup target list --installed)
for t in $WANT_TARGETS; do
  grep -qx "$t" <<<"$installed" || { log "rustup target add $t"; rustup target add "$t"; }
done

# wasm-bindgen CLI at exactly the version Cargo.lock resolved (the CLI and the crate must match).
want_wb=$(awk '/^name = "wasm-bindgen"$/{getline; gsub(/version = |"/,""); print; exit}' Cargo.lock 2>/dev/null || true)
if [ -n "${want_wb:-}" ]; then
  have_wb=$(wasm-bindgen --version 2>/dev/null | awk '{print $2}' || true)
  if [ "$have_wb" != "$want_wb" ]; then
    log "cargo install wasm-bindgen-cli $want_wb (a few minutes, once)"
    # no --locked: its lock file names a crate version the registry no longer has
    cargo install wasm-bindgen-cli --version "$want_wb" --quiet
  fi
fi

if tests; then
  # cbindgen, to regenerate and check the C header.
  if [ "$(cbindgen --version 2>/dev/null | awk '{print $2}')" != "$CBINDGEN_VERSION" ]; then
    log "cargo install cbindgen $CBINDGEN_VERSION"
    cargo install cbindgen --version "$CBINDGEN_VERSION" --locked --quiet
  fi

  # cargo-fuzz + nightly pieces for the fuzz smoke run and Miri.
  if [ "$(cargo fuzz --version 2>/dev/null | awk '{print $2}')" != "$CARGO_FUZZ_VERSION" ]; then
    log "cargo install cargo-fuzz $CARGO_FUZZ_VERSION"
    cargo install cargo-fuzz --version "$CARGO_FUZZ_VERSION" --locked --force --quiet
  fi
  # The nightly toolchain itself first: `component add` does not install a missing one,
  # and whether `cargo +nightly` installs it on demand depends on rustup's version and
  # RUSTUP_AUTO_INSTALL.
  # (Asked of the toolchain itself: a dated nightly in `rustup toolchain list` is not the
  # `nightly` that `cargo +nightly` runs.)
  if ! rustup run nightly rustc --version >/dev/null 2>&1; then
    log "rustup toolchain install nightly (minimal)"
    rustup toolchain install nightly --profile minimal
  fi
  # Both halves: Miri builds its own standard library from rust-src, so miri alone passes
  # `miri --version` and then fails the first `cargo miri test`.
  if ! cargo +nightly miri --version >/dev/null 2>&1 ||
    ! rustup component list --toolchain nightly --installed 2>/dev/null | grep -q '^rust-src'; then
    log "rustup component add miri rust-src (nightly)"
    rustup component add miri rust-src --toolchain nightly
  fi

  # Debian packages: a real browser for the demo tests, valgrind for the C test, protoc
  # for building the etcd comparison (server/bench, checked by make test), PostgreSQL;
  # for the package tests (scripts/test-packages.sh) virtual environments (Debian's
  # python3 has no ensurepip without python3-venv), pkg-config, readelf/strip (binutils), g++;
  # prlimit (util-linux) for the server's open-file-limit test.
  need_apt=()
  # An earlier run cut off inside apt-get (Ctrl-C) leaves packages unpacked but not
  # configured: their programs exist, so the checks below pass, and every later apt-get
  # refuses to run until dpkg finishes them. Finished here first.
  if [ -n "$(dpkg --audit 2>/dev/null)" ]; then
    log "dpkg --configure -a (an earlier install was cut off)"
    DEBIAN_FRONTEND=noninteractive dpkg --configure -a
  fi
  # (The tests start /usr/bin/chromium: a chromium elsewhere on PATH is not the one.)
  [ -x /usr/bin/chromium ] || need_apt+=(chromium)
  command -v valgrind >/dev/null 2>&1 || need_apt+=(valgrind)
  command -v protoc >/dev/null 2>&1 || need_apt+=(protobuf-compiler)
  probe=$(mktemp -d)
  python3 -m venv "$probe/venv" >/dev/null 2>&1 || need_apt+=(python3-venv)
  rm -rf "$probe"
  command -v pkg-config >/dev/null 2>&1 || need_apt+=(pkg-config)
  command -v readelf >/dev/null 2>&1 || need_apt+=(binutils)
  # g++: the C ABI's header is checked to compile as C++ too (scripts/test-ffi.sh).
  command -v g++ >/dev/null 2>&1 || need_apt+=(g++)
  # prlimit runs a node under a lowered open-file limit (server/tests/limits.rs).
  command -v prlimit >/dev/null 2>&1 || need_apt+=(util-linux)
  # A real PostgreSQL server for the fence tests (they start their own in a temp dir).
  # Debian keeps initdb and pg_ctl in /usr/lib/postgresql/VERSION/bin, not on PATH.
  have_pg() {
    command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1 && return 0
    for d in /usr/lib/postgresql/*/bin; do
      [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && return 0
    done
    return 1
  }
  have_pg || need_apt+=(postgresql)
  if [ ${#need_apt[@]} -gt 0 ]; then
    log "apt-get install ${need_apt[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${need_apt[@]}" >/dev/null
  fi
  # QEMU's Arm system emulator, to run the core built for a Cortex-M4
  # (scripts/test-bare-metal.sh); alone, without the display, firmware and network
  # packages it recommends.
  if ! command -v qemu-system-arm >/dev/null 2>&1; then
    log "apt-get install --no-install-recommends qemu-system-arm"
    export DEBIAN_FRONTEND=noninteractive
    [ ${#need_apt[@]} -gt 0 ] || apt-get update -qq
    apt-get install -y -qq --no-install-recommends qemu-system-arm >/dev/null
  fi
fi # tests

# npm tools, pinned in tools/package-lock.json: binaryen for wasm-opt (the build: a
# dependency), and for the tests only (devDependencies) playwright-core to drive
# Chromium, typescript's tsc to type-check the package's declarations and vite to bundle a
# page that uses the package. The demo installs the first alone.
# A stamp of the lock file they were installed from (and whether the test tools came
# too) makes a changed pin reach a checkout that already has node_modules.
lock_sum=$(sha256sum tools/package-lock.json | awk '{print $1}')
stamp=tools/node_modules/.installed-from
installed=$(cat "$stamp" 2>/dev/null || true)
if tests; then
  if [ "$installed" != "all $lock_sum" ] || [ ! -x tools/node_modules/.bin/wasm-opt ] ||
    [ ! -d tools/node_modules/playwright-core ] || [ ! -x tools/node_modules/.bin/tsc ] ||
    [ ! -x tools/node_modules/.bin/vite ]; then
    log "npm ci in tools/"
    (cd tools && npm ci --no-audit --no-fund --loglevel=error)
    echo "all $lock_sum" >"$stamp"
  fi
elif [ "$installed" != "all $lock_sum" ] && [ "$installed" != "build $lock_sum" ] ||
  [ ! -x tools/node_modules/.bin/wasm-opt ]; then
  log "npm ci --omit=dev in tools/ (wasm-opt)"
  (cd tools && npm ci --omit=dev --no-audit --no-fund --loglevel=error)
  echo "build $lock_sum" >"$stamp"
fi
log "ok"
