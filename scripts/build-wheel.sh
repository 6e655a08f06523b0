#!/usr/bin/env bash
# `make wheel`: builds the release C library and the Python wheel that bundles it, into
# ${CARGO_TARGET_DIR:-target}/wheels/. Needs only cargo and python3 (3.11+ for tomllib).
# Prints the wheel's path last.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p fencelock-ffi
meta=$(cargo metadata --format-version 1 --no-deps)
target=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])' <<<"$meta")
version=$(python3 -c 'import json,sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"]=="fencelock-ffi"))' <<<"$meta")
# The library without its debug sections (a wheel is downloaded and unpacked as is).
stage="$target/wheel-stage"
mkdir -p "$stage"
strip --strip-debug -o "$stage/libfencelock.so" "$target/release/libfencelock.so"
python3 scripts/build_wheel.py "$stage/libfencelock.so" "$target/wheels" "$version"
