#!/usr/bin/env bash
# The randomized schedules' own acceptance, on named mutants: the search finds each one, the
# failure shrinks to at most 8 operations, and ten replays of the saved schedule give the same
# verdict. Needs the mutant worker (`just build-mutants`).
set -euo pipefail
cd "$(dirname "$0")/.."
reports=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] || rm -rf "$reports"' EXIT
bin=target/debug/fenceproof
mut=target/debug/fenceproof-worker-mutant
for m in "$@"; do
  set +e
  "$bin" schedules run --worker-bin "$mut" --mutant "$m" --seed 0x2a --cases 40 --reports-dir "$reports/$m" >"$reports/$m.out" 2>&1
  code=$?
  set -e
  if [ "$code" -ne 1 ]; then
    echo "schedules-check: the search did not find $m (exit $code)"; tail -20 "$reports/$m.out"; exit 1
  fi
  file=$(ls "$reports/$m"/*/schedule-failure.json | head -1)
  n=$(python3 -c 'import json, sys; print(len(json.load(open(sys.argv[1]))))' "$file")
  if [ "$n" -gt 8 ]; then
    echo "schedules-check: $m shrank only to $n operations"; cat "$file"; exit 1
  fi
  set +e
  "$bin" schedules run --replay "$file" --worker-bin "$mut" --mutant "$m" --repeat 10 --reports-dir "$reports/$m-replay" >"$reports/$m.replay" 2>&1
  code=$?
  set -e
  if [ "$code" -ne 1 ] || ! grep -q "10 replays, the same verdict each time" "$reports/$m.replay"; then
    echo "schedules-check: the replays of $m did not all FAIL alike (exit $code)"; tail -15 "$reports/$m.replay"; exit 1
  fi
  echo "schedules-check: $m found, shrunk to $n operation(s), 10 replays give the same FAIL"
done
