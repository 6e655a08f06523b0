#!/usr/bin/env bash
# Fails when a figure falls below its floor in tests/figure-floors.txt, the one record of
# the floors. scripts/test-verify.sh passes the figures it counted as NAME=VALUE:
#
#   scripts/figure-floors.sh faults-injected=8 fault-detections=10 c-typed-calls=88
#
# A figure without a floor, or one that is not a number (a line the caller could not
# read), fails too. A floor whose figure is not passed (its runner did not run, which
# test-verify.sh reports on its own) is named as not checked.
set -euo pipefail
cd "$(dirname "$0")/.."
floors=tests/figure-floors.txt
declare -A floor=() seen=()
while read -r name value _; do
  [[ -z "$name" || "$name" == \#* ]] && continue
  [[ "$value" =~ ^[0-9]+$ ]] || { echo "figure floors: $floors: '$name' has no floor" >&2; exit 1; }
  floor[$name]=$value
done <"$floors"
met=() below=()
for pair in "$@"; do
  name=${pair%%=*} value=${pair#*=}
  [ -n "${floor[$name]+set}" ] || { echo "figure floors: no floor for '$name' in $floors" >&2; exit 1; }
  seen[$name]=1
  if ! [[ "$value" =~ ^[0-9]+$ ]]; then
    below+=("$name is '$value', not a count (floor ${floor[$name]})")
  elif [ "$value" -lt "${floor[$name]}" ]; then
    below+=("$name is $value, below its floor ${floor[$name]}")
  else
    met+=("$name $value (floor ${floor[$name]})")
  fi
done
not_checked=()
for name in $(printf '%s\n' "${!floor[@]}" | sort); do
  [ -n "${seen[$name]+set}" ] || not_checked+=("$name")
done
if [ ${#met[@]} -gt 0 ]; then
  printf 'figure floors met: %s\n' "$(printf '%s; ' "${met[@]}" | sed 's/; $//')"
fi
if [ ${#not_checked[@]} -gt 0 ]; then
  echo "figure floors not checked (not counted in this run): ${not_checked[*]}"
fi
if [ ${#below[@]} -gt 0 ]; then
  printf 'figure floors: FAILED: %s\n' "${below[@]}"
  echo "figure floors: a figure shrank (or could not be read); if it was meant to shrink, lower its floor in $floors in the same change"
  exit 1
fi
