#!/usr/bin/env bash
# node --test over the given test files, as every layer runs its JS tests: the files must
# exist, and the run passes only if node's summary counts tests (more than 0), none
# failed, none was skipped or left as a todo, and node exited 0. node's runner itself
# exits 0 when no file matched or a test was skipped: a skipped test is not a passed one,
# and a run of nothing checks nothing. The output is shown as it comes.
set -euo pipefail
[ "$#" -gt 0 ] || { echo "node-test: no test files given" >&2; exit 1; }
for f in "$@"; do
  [ -f "$f" ] || { echo "node-test: $f: no such test file" >&2; exit 1; }
done
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
# The TAP reporter, whose summary lines are read below: node 23 and later default to
# another even when the output is not a terminal.
node --test --test-reporter=tap "$@" 2>&1 | tee "$log" || status=$?
count() { sed -n "s/^# $1 \([0-9][0-9]*\)\$/\1/p" "$log" | tail -n 1; }
tests=$(count tests) pass=$(count pass) fail=$(count fail) skipped=$(count skipped) todo=$(count todo)
cancelled=$(count cancelled)
if [ "$status" != 0 ] || [ -z "$tests" ] || [ "$tests" = 0 ] || [ "${fail:-1}" != 0 ] ||
  [ "${skipped:-1}" != 0 ] || [ "${todo:-1}" != 0 ] || [ "${cancelled:-1}" != 0 ] ||
  [ "$pass" != "$tests" ]; then
  echo "node-test: FAILED ($*): exit $status; tests ${tests:-?}, pass ${pass:-?}, fail ${fail:-?}, skipped ${skipped:-?}, todo ${todo:-?}, cancelled ${cancelled:-?}" >&2
  exit 1
fi
echo "node-test: $tests tests passed ($*)"
