#!/usr/bin/env bash
# Tests the C ABI (ffi/): the header is current, a C program runs the GC-pause story and
# every bad-input case against the static and the shared library under valgrind, a C
# runner replays the conformance vectors through frames and the error-precedence table
# through the typed functions (and must reject tampered ones), the callgrind harness runs
# each workload once, Python embeds the library
# with ctypes, and Miri checks the extern functions called from Rust.
# Builds into ${CARGO_TARGET_DIR:-target} (cargo metadata reports whichever is in force).
# Needs what scripts/setup.sh installs (cbindgen, valgrind, nightly miri).
set -euo pipefail
cd "$(dirname "$0")/.."
step() { printf '\n--- ffi: %s\n' "$*"; }

target=$(cargo metadata --format-version 1 --no-deps |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
lib="$target/debug"
work="$target/ffi-test"
mkdir -p "$work"

step "build libfencelock.a and libfencelock.so"
cargo build -q -p fencelock-ffi
ls -l "$lib/libfencelock.a" "$lib/libfencelock.so" | awk '{print $5, $9}'

step "header is current (cbindgen 0.29.2)"
(cd ffi && cbindgen --config cbindgen.toml --crate fencelock-ffi --quiet) > "$work/fencelock.h"
if ! diff -u ffi/include/fencelock.h "$work/fencelock.h"; then
  echo "ffi/include/fencelock.h is stale: cd ffi && cbindgen --config cbindgen.toml --crate fencelock-ffi --output include/fencelock.h" >&2
  exit 1
fi
echo "ffi/include/fencelock.h matches the source"

# A check left out is not a check passed: g++ and pkg-config are setup's to install.
for tool in g++ pkg-config; do
  command -v "$tool" >/dev/null 2>&1 || { echo "test-ffi: $tool missing: run scripts/setup.sh" >&2; exit 1; }
done
printf '#include "fencelock.h"\nint main() { fencelock_service_free(nullptr); return FENCELOCK_RESULT_OK; }\n' > "$work/cpp.cpp"
g++ -std=c++17 -Wall -Wextra -Werror -Iffi/include "$work/cpp.cpp" "$lib/libfencelock.a" -lpthread -ldl -lm -o "$work/cpp"
"$work/cpp" # under set -e: a failing run stops the script
echo "the header compiles and links as C++ too"

PYTEST_VERSION=9.2.0
CFLAGS=(-std=c11 -Wall -Wextra -Werror -g -Iffi/include)
VALGRIND=(valgrind -q --error-exitcode=1 --leak-check=full)

step "C story test, static library, under valgrind"
gcc "${CFLAGS[@]}" ffi/tests/c/story.c "$lib/libfencelock.a" -lpthread -ldl -lm -o "$work/story-static"
"${VALGRIND[@]}" "$work/story-static"

step "C story test, shared library (linked through pkg-config), under valgrind"
prefix="$work/prefix"
mkdir -p "$prefix/lib" "$prefix/include"
cp "$lib/libfencelock.so" "$lib/libfencelock.a" "$prefix/lib/"
# Programs record the library's soname (ffi/build.rs), so the loader looks for that name.
soname=$(readelf -d "$lib/libfencelock.so" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[ -n "$soname" ] || { echo "libfencelock.so has no soname" >&2; exit 1; }
ln -sfn libfencelock.so "$prefix/lib/$soname"
cp ffi/include/fencelock.h "$prefix/include/"
version=$(cargo metadata --format-version 1 --no-deps |
  python3 -c 'import json,sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"]=="fencelock-ffi"))')
mkdir -p "$prefix/lib/pkgconfig"
sed -e "s|@PREFIX@|$prefix|" -e "s|@VERSION@|$version|" ffi/fencelock.pc.in > "$prefix/lib/pkgconfig/fencelock.pc"
read -r -a PC <<<"$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs fencelock)"
gcc -std=c11 -Wall -Wextra -Werror -g ffi/tests/c/story.c "${PC[@]}" -Wl,-rpath,"$prefix/lib" -o "$work/story-shared"
# Capture first: `ldd | grep -q` under pipefail fails at random (grep exits early, ldd gets SIGPIPE).
linked=$(ldd "$work/story-shared")
grep -q "$prefix/lib/libfencelock.so" <<<"$linked" || { echo "not linked to the shared library" >&2; exit 1; }
"${VALGRIND[@]}" "$work/story-shared"

step "the README's embedding example compiles and runs"
# The first c block only (later ones are fragments marked as excerpts).
awk '/^```c$/{if (!done) on=1; next} /^```$/{if (on) done=1; on=0} on' ffi/README.md > "$work/readme_example.c"
gcc "${CFLAGS[@]}" "$work/readme_example.c" "$lib/libfencelock.a" -lpthread -ldl -lm -o "$work/readme_example"
got=$("${VALGRIND[@]}" "$work/readme_example")
echo "$got"
[ "$got" = "session 1 holds jobs/reindex, token 1" ] || { echo "unexpected README example output" >&2; exit 1; }

step "the callgrind harness (tests/c/ops.c, scripts/bench-ffi-ops.sh) runs every workload, under valgrind"
gcc "${CFLAGS[@]}" ffi/tests/c/ops.c "$lib/libfencelock.a" -lpthread -ldl -lm -o "$work/ops"
for w in uncontended_poll uncontended_drain uncontended_pending uncontended_batch handoff_poll handoff_drain handoff_pending handoff_batch; do
  "${VALGRIND[@]}" "$work/ops" "$w" 16 2
done
echo "ops: 8 workloads ran"

step "C conformance runner over tests/vectors and wasm/tests/vectors (*.vec by frames, raise by the typed call, precedence.calls by typed calls), under valgrind"
gcc "${CFLAGS[@]}" ffi/tests/c/vectors.c "$lib/libfencelock.a" -lpthread -ldl -lm -o "$work/vectors"
shopt -s nullglob
vectors=(tests/vectors/*.vec)
if [ ${#vectors[@]} -eq 0 ]; then
  echo "no conformance vectors in tests/vectors (cargo run -p fencelock-tests --bin gen-vectors)" >&2
  exit 1
fi
# The native determinism logs (wasm/tests/native_vector.rs): the second one carries the
# newer inputs and raise_revision steps, checked here against the native core too.
vectors+=(wasm/tests/vectors/*.vec)
calls=tests/vectors/precedence.calls
[ -f "$calls" ] || { echo "no $calls" >&2; exit 1; }
# The gate vectors (what every fence answers) through the C gate.
gates=(tests/vectors/gate/*.vec)
[ ${#gates[@]} -gt 0 ] || { echo "no gate vectors in tests/vectors/gate" >&2; exit 1; }
count() { local word=$1; shift; cat "$@" | { grep -c "^$word " || true; }; }
gate_want="gate files: $(count in "${gates[@]}") admits, $(count err "${gates[@]}") refusals, $(count highest "${gates[@]}") highest"
# Every line of the service vectors replayed, as the files count them.
vec_want="$((${#vectors[@]} + ${#gates[@]} + 1)) files, $(count in "${vectors[@]}") inputs, \
$(count out "${vectors[@]}") events, $(count reply "${vectors[@]}") replies, \
$(count snapshot "${vectors[@]}") snapshots, $(count poll "${vectors[@]}") polls, \
$(count raise "${vectors[@]}") revision raises"
out=$("${VALGRIND[@]}" "$work/vectors" "${vectors[@]}" "${gates[@]}" "$calls") || { echo "$out"; exit 1; }
echo "$out"
grep -qF "$gate_want" <<<"$out" || { echo "expected the gate files' counts: $gate_want" >&2; exit 1; }
grep -qF "$vec_want" <<<"$out" || { echo "expected the vector files' counts: $vec_want" >&2; exit 1; }

step "C conformance runner again, every service and gate keyed (fencelock_service_set_name_key, fencelock_gate_set_name_key): the same answers"
out=$("$work/vectors" --keyed "${vectors[@]}" "${gates[@]}" "$calls") || { echo "$out"; exit 1; }
echo "$out"
grep -qF "$gate_want" <<<"$out" || { echo "expected the gate files' counts: $gate_want" >&2; exit 1; }
grep -qF "$vec_want" <<<"$out" || { echo "expected the vector files' counts: $vec_want" >&2; exit 1; }

step "the runner rejects tampered vectors and calls"
python3 - "$work" "$calls" "${vectors[@]}" <<'PY'
import sys
work, calls, files = sys.argv[1], sys.argv[2], sys.argv[3:]
lines = [l.rstrip("\n") for f in files for l in open(f)]
def first(prefix):
    return next(i for i, l in enumerate(lines) if l.startswith(prefix) and len(l) > len(prefix) + 1)
def flip(line):  # change the last hex digit / digit
    head, last = line[:-1], line[-1]
    return head + ("1" if last != "1" else "2")
# Every tampered file is the whole (accepted) set with one change, so the change is what
# the runner must catch.
cases = {"untampered": lines}
i = first("out "); cases["changed-output"] = lines[:i] + [flip(lines[i])] + lines[i + 1:]
i = first("out "); cases["missing-output"] = lines[:i] + lines[i + 1:]
i = first("out "); cases["extra-output"] = lines[:i + 1] + [lines[i]] + lines[i + 1:]
i = first("reply "); cases["changed-reply"] = lines[:i] + [flip(lines[i])] + lines[i + 1:]
i = first("reply "); cases["missing-reply"] = lines[:i] + lines[i + 1:]
i = first("err "); cases["changed-error"] = lines[:i] + [flip(lines[i])] + lines[i + 1:]
i = first("err "); cases["error-for-reply"] = lines[:i] + ["reply 02"] + lines[i + 1:]
i = first("snapshot "); cases["changed-snapshot"] = lines[:i] + [flip(lines[i])] + lines[i + 1:]
i = first("revision "); cases["changed-revision"] = lines[:i] + [flip(lines[i])] + lines[i + 1:]
i = first("revision "); cases["missing-revision"] = lines[:i] + lines[i + 1:]
for name, body in cases.items():
    with open(f"{work}/tampered-{name}.vec", "w") as f:
        f.write("\n".join(body) + "\n")
rows = [l.rstrip("\n") for l in open(calls)]
def change(old, new):
    i = next(i for i, l in enumerate(rows) if l.endswith(old))
    return rows[:i] + [rows[i][: -len(old)] + new] + rows[i + 1:]
for name, body in {"untampered": rows, "changed-kind": change("-> ok granted", "-> ok busy"),
                   "changed-code": change("-> err 101", "-> err 102")}.items():
    with open(f"{work}/tampered-{name}.calls", "w") as f:
        f.write("\n".join(body) + "\n")
PY
mkdir -p "$work/gate"
python3 - "$work/gate" "${gates[@]}" <<'PY'
import sys
work, files = sys.argv[1], sys.argv[2:]
# (each file's config line starts a new gate, so the files can run as one)
lines = [l.rstrip("\n") for f in files for l in open(f)]
def first(prefix):
    return next(i for i, l in enumerate(lines) if l.startswith(prefix))
def flip(line):
    head, last = line[:-1], line[-1]
    return head + ("1" if last != "1" else "2")
cases = {"untampered": lines}
i = first("highest "); cases["changed-highest"] = lines[:i] + [flip(lines[i])] + lines[i + 1:]
i = first("err 401 highest="); cases["changed-stale-highest"] = lines[:i] + [flip(lines[i])] + lines[i + 1:]
i = first("err 402"); cases["changed-refusal"] = lines[:i] + ["err 401"] + lines[i + 1:]
i = first("err "); cases["missing-refusal"] = lines[:i] + lines[i + 1:]
i = first("in "); cases["refusal-for-an-admit"] = lines[:i + 1] + ["err 401"] + lines[i + 1:]
for name, body in cases.items():
    with open(f"{work}/tampered-{name}.vec", "w") as f:
        f.write("\n".join(body) + "\n")
PY
# rejects FILE...: the runner accepts each untampered FILE and rejects every other.
rejects() {
  local t
  for t in "$@"; do
    case "$t" in
      *untampered*)
        "$work/vectors" "$t" >/dev/null || { echo "the runner refused ${t#"$work"/}" >&2; exit 1; } ;;
      *)
        if "$work/vectors" "$t" >/dev/null 2>&1; then
          echo "the runner accepted ${t#"$work"/}" >&2
          exit 1
        fi
        echo "rejected ${t#"$work"/}" ;;
    esac
  done
}
rejects "$work"/gate/tampered-*.vec "$work"/tampered-*.vec "$work"/tampered-*.calls

step "Python package: pytest (ffi/python/tests) and the example, against the debug library"
# A virtual environment of our own for pytest (pinned), made once per target directory.
venv="$work/venv"
if [ ! -x "$venv/bin/pytest" ] || [ "$("$venv/bin/pytest" --version 2>&1)" != "pytest $PYTEST_VERSION" ]; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "pytest==$PYTEST_VERSION"
fi
export PYTHONDONTWRITEBYTECODE=1 FENCELOCK_LIB="$lib/libfencelock.so"
# A warning pytest raises for an exception in a thread is an error: a thread's failure
# must fail the test it belongs to.
pyout=$(PYTHONPATH=ffi/python "$venv/bin/python" -m pytest -q -p no:cacheprovider -rs \
  -W error::pytest.PytestUnhandledThreadExceptionWarning ffi/python/tests 2>&1) ||
  { echo "$pyout"; exit 1; }
tail -n 1 <<<"$pyout"
# A skipped test is not a passed one, nor is an expected failure (xfail) or an unexpected
# pass of one (xpass), nor a test left out (deselected).
if grep -qiE "skipped|xfailed|xpassed|deselected" <<<"$pyout"; then echo "$pyout" >&2; echo "python tests were skipped, xfailed, xpassed or deselected" >&2; exit 1; fi
example=$(cd "$work" && PYTHONPATH="$OLDPWD/ffi/python" python3 "$OLDPWD/ffi/python/example.py")
echo "$example"
[ "$(tail -n 1 <<<"$example" | cut -c1-12)" = "refused: 401" ] || { echo "example.py: A's stale write was not refused" >&2; exit 1; }
unset FENCELOCK_LIB

step "Rust tests of the extern functions under Miri"
if ! cargo +nightly miri test -p fencelock-ffi >"$work/miri.log" 2>&1; then
  cat "$work/miri.log"
  exit 1
fi
grep -E "^test |^test result" "$work/miri.log"
# Under Miri a run of nothing would pass too: the extern functions' tests must have run.
miri_passed=$(sed -n 's/^test result: ok\. \([0-9][0-9]*\) passed.*/\1/p' "$work/miri.log" | awk '{s+=$1} END {print s+0}')
[ "$miri_passed" -ge 20 ] || { echo "test-ffi: only $miri_passed tests ran under Miri" >&2; exit 1; }
echo "ffi: all passed"
