#!/usr/bin/env bash
# Installs the C library under PREFIX (default /usr/local), staged under DESTDIR if set
# (for packagers): include/fencelock.h, lib/libfencelock.a, the shared library as
# lib/libfencelock.so.<version> with the links lib/libfencelock.so.<soname ABI> and
# lib/libfencelock.so, and lib/pkgconfig/fencelock.pc. Builds the release library first.
#   make install PREFIX=$HOME/.local        # then: pkg-config --cflags --libs fencelock
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX=${PREFIX:-/usr/local}
DESTDIR=${DESTDIR:-}
case "$PREFIX" in /*) ;; *) echo "PREFIX must be an absolute path, not '$PREFIX'" >&2; exit 2 ;; esac

cargo build --release -q -p fencelock-ffi
meta=$(cargo metadata --format-version 1 --no-deps)
target=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])' <<<"$meta")
version=$(python3 -c 'import json,sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"]=="fencelock-ffi"))' <<<"$meta")
so="$target/release/libfencelock.so"
# The soname ffi/build.rs gave the library (one home for the ABI number).
soname=$(readelf -d "$so" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[ -n "$soname" ] || { echo "$so has no soname" >&2; exit 1; }

lib="$DESTDIR$PREFIX/lib"
inc="$DESTDIR$PREFIX/include"
install -d "$lib/pkgconfig" "$inc"
install -m 644 ffi/include/fencelock.h "$inc/fencelock.h"
install -m 644 "$target/release/libfencelock.a" "$lib/libfencelock.a"
install -m 755 "$so" "$lib/libfencelock.so.$version"
ln -sfn "libfencelock.so.$version" "$lib/$soname"
ln -sfn "$soname" "$lib/libfencelock.so"
sed -e "s|@PREFIX@|$PREFIX|" -e "s|@VERSION@|$version|" ffi/fencelock.pc.in >"$lib/pkgconfig/fencelock.pc"
chmod 644 "$lib/pkgconfig/fencelock.pc"
echo "installed fencelock $version ($soname) under $DESTDIR$PREFIX"
case "$PREFIX" in
/usr | /usr/local) ;;
*) # neither pkg-config nor the dynamic loader searches this prefix by default
  echo "to build against it: export PKG_CONFIG_PATH=$PREFIX/lib/pkgconfig, and link with -Wl,-rpath,$PREFIX/lib (or run with LD_LIBRARY_PATH=$PREFIX/lib)" ;;
esac
