#!/usr/bin/env bash
# cargo-mutants on the judging code a change touches (`just mutants-judge-diff [BASE]`, CI's job in
# examples/ci): the diff of the working tree against its merge base with BASE (default main), cut
# to the judging code's files, and for each part of scripts/mutants-judge.sh it touches, that part's
# mutants on the changed lines only (cargo mutants --in-diff), judged by that part's tests. A missed
# mutant not listed in mutants/judge_equivalents.toml fails; no judging code changed passes at once.
set -euo pipefail
cd "$(dirname "$0")/.."
base="${1:-main}"
from="$(git merge-base "$base" HEAD)"
diff="$(mktemp --suffix=.diff)"
trap 'rm -f "$diff"' EXIT
# part: the pathspecs of its files (as scripts/mutants-judge.sh mutates them).
declare -A parts=(
  [model]="model/src"
  [check]="harness/src/check"
  [db]="harness/src/db/team_schema.rs harness/src/db/privileges.rs"
  [conformance]="conformance/src"
  [p_api]="scenarios/src/p_api"
)
status=0
ran=0
for part in model check db conformance p_api; do
  # shellcheck disable=SC2086 # the pathspecs are words
  git diff "$from" -- ${parts[$part]} > "$diff"
  [ -s "$diff" ] || continue
  ran=1
  echo "mutants-judge-diff: $part changed since $(git rev-parse --short "$from") ($base)" >&2
  bash scripts/mutants-judge.sh "$part" --in-diff "$diff" || status=1
done
[ "$ran" = 1 ] || echo "mutants-judge-diff: no judging code changed since $(git rev-parse --short "$from") ($base)"
exit $status
