#!/usr/bin/env bash
# Mutation testing of the core (make mutants; long, not part of make test): cargo-mutants
# changes the core's code one small way at a time (an operator swapped, a function's body
# replaced by a default, a condition negated), runs the core's tests against each change,
# and reports every change that no test noticed ("missed"). A missed mutant is a rule the
# tests do not pin down, or a change that does not alter behaviour (an equivalent mutant);
# the ones judged equivalent are listed, each with its reason, in .cargo/mutants.toml.
#
#   MUTANTS_FILES  the files to mutate (default: every file of core/src)
#   MUTANTS_RE     only the mutants whose name matches this regex (e.g. a function name)
#   MUTANTS_JOBS   mutants built and tested at once (default 2; each a copy of the tree)
#   MUTANTS_OUT    where the report goes (default target/mutants: mutants.out/missed.txt…)
#
# About 5 s a mutant on two cores (each rebuilds the core and its 22 test binaries), so
# the whole crate (~1,350 mutants) is a run of about two hours: name files or a regex for less.
# Exit status: 0 when every mutant was caught, unviable (does not build) or timed out (a
# change the tests did not let finish: counted as caught, and said); 1 when one was missed.
set -euo pipefail
cd "$(dirname "$0")/.."
MUTANTS_VERSION=27.1.0
if [ "$(cargo mutants --version 2>/dev/null | awk '{print $2}')" != "$MUTANTS_VERSION" ]; then
  echo "== cargo install cargo-mutants $MUTANTS_VERSION (a few minutes, once)"
  cargo install cargo-mutants --version "$MUTANTS_VERSION" --locked --quiet
fi
# Each job builds in its own copy of the tree, under its own target directory; a shared
# CARGO_TARGET_DIR would have parallel jobs overwrite each other's build. A job rebuilds
# the same tree once per mutant, so incremental compilation (off in the workspace's
# profile, whose test builds are made once) and no line tables make each rebuild about
# 2.5 times faster; the copies are removed at the end.
unset CARGO_TARGET_DIR
export CARGO_PROFILE_DEV_INCREMENTAL=true CARGO_PROFILE_DEV_DEBUG=false
read -r -d '' -a files <<<"${MUTANTS_FILES:-$(echo core/src/*.rs)}" || true
args=()
for f in "${files[@]}"; do args+=(--file "$f"); done
[ -n "${MUTANTS_RE:-}" ] && args+=(--re "$MUTANTS_RE")
out="${MUTANTS_OUT:-target/mutants}"
# No counts of an earlier run may be read as this one's.
rm -rf "$out/mutants.out" "$out/mutants.out.old"
mkdir -p "$out"
set +e
cargo mutants --package fencelock "${args[@]}" --jobs "${MUTANTS_JOBS:-2}" --output "$out"
rc=$?
set -e
d="$out/mutants.out"
count() { if [ -f "$d/$1.txt" ]; then wc -l <"$d/$1.txt"; else echo 0; fi; }
echo "MUTANTS files=${#files[@]} caught=$(count caught) missed=$(count missed) timeout=$(count timeout) unviable=$(count unviable) report=$d"
# (cargo-mutants exits 3 for a timeout even when mutants were also missed: judge by the
# counts, not by its status alone.)
missed=$(count missed)
case $rc in
  0 | 2 | 3) ;;
  *) echo "MUTANTS cargo-mutants failed (exit $rc): $d/log"; exit 1 ;;
esac
# A file or regex that matched no mutant tested nothing: that is no pass.
if [ $(($(count caught) + missed + $(count timeout) + $(count unviable))) -eq 0 ]; then
  echo "MUTANTS no mutant matched MUTANTS_FILES / MUTANTS_RE: nothing was tested"
  exit 1
fi
if [ "$missed" -gt 0 ]; then
  echo "MUTANTS missed (no test noticed these changes):"
  cat "$d/missed.txt"
  exit 1
fi
[ "$(count timeout)" -eq 0 ] || echo "MUTANTS timeouts counted as caught: $d/timeout.txt"
