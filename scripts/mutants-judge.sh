#!/usr/bin/env bash
# cargo-mutants over the judging code (`just mutants-judge PART [--shard k/n] [cargo-mutants args]`):
# each PART is some files and the tests that judge them, run per mutant:
#
#   model        model/src (guards, steps, properties, trace validation): the model crate's fast
#                tests (semantics, with the fingerprints of small bounds, and trace; the lib has no
#                unit tests, and weak_spots' ablations are among the fingerprints' bounds); its
#                exhaustive checks (explore, paths, transitions: minutes each) are not run per mutant.
#   model-core   model/src/enabled.rs, step/ and properties.rs alone, with the same tests.
#   check        harness/src/check: the harness's unit tests (the checkers' verdicts on recorded histories).
#   db           harness/src/db/team_schema.rs and privileges.rs: the harness's unit tests; their real
#                judges are cli's team_schema and privilege_audit binaries (PostgreSQL, minutes), not run here.
#   conformance  conformance/src: its judge is cli's worker_contract (deviant workers, PostgreSQL, ~10 min
#                a mutant): run it only sharded and with time to spare.
#   p_api        scenarios/src/p_api: scenarios' unit tests; the probes' judges are the P-api rows of the
#                matrix on a broken team function (cli's team_schema binary).
#
# The outcome per mutant is kept in a run folder, reports/<UTC time>-mutants-judge-<part>[-k-of-n]/
# (cargo-mutants' mutants.out/: caught.txt, missed.txt, timeout.txt, unviable.txt, outcomes.json),
# with summary.txt. A missed mutant not listed in mutants/judge_equivalents.toml (one reason each) fails
# the run, and so does a listed one that was caught (a wrong entry cannot hide). Extra arguments go to
# cargo mutants (e.g. --in-diff FILE, used by scripts/mutants-judge-diff.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
part="${1:?usage: mutants-judge.sh PART [--shard k/n] [cargo-mutants args] (PART: model, model-core, check, db, conformance, p_api)}"
shift
files=()
tests=()
case "$part" in
  model) files=(-f 'model/src/**/*.rs'); pkg=fenceproof-model; tests=(--test semantics --test trace) ;;
  model-core) files=(-f model/src/enabled.rs -f 'model/src/step/*.rs' -f model/src/properties.rs); pkg=fenceproof-model
    tests=(--test semantics --test trace) ;;
  check) files=(-f 'harness/src/check/**/*.rs'); pkg=fenceproof-harness; tests=(--lib) ;;
  db) files=(-f harness/src/db/team_schema.rs -f harness/src/db/privileges.rs); pkg=fenceproof-harness; tests=(--lib) ;;
  conformance) files=(-f 'conformance/src/**/*.rs'); pkg=fenceproof-cli; tests=(--test worker_contract) ;;
  p_api) files=(-f 'scenarios/src/p_api/**/*.rs'); pkg=fenceproof-scenarios; tests=(--lib) ;;
  *) echo "mutants-judge: no part named $part" >&2; exit 2 ;;
esac
shard=""
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --shard) shard="$2"; args+=(--shard "$2"); shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
name="$(date -u +%Y%m%dT%H%M%SZ)-mutants-judge-$part${shard:+-${shard/\//-of-}}"
dir="${FENCEPROOF_MUTANTS_DIR:-reports}/$name"
mkdir -p "$dir"
echo "mutants-judge: $part${shard:+ shard $shard} -> $dir" >&2
t0=$SECONDS
set +e
cargo mutants --no-shuffle --timeout "${FENCEPROOF_MUTANT_TIMEOUT:-60}" "${files[@]}" --test-package "$pkg" \
  -o "$dir" "${args[@]}" -- "${tests[@]}" > "$dir/cargo-mutants.log" 2>&1
rc=$?
set -e
# cargo-mutants: 0 all caught, 2 some missed, 3 some timed out, 4 the baseline failed; others are errors.
case $rc in 0|2|3) ;; *) tail -20 "$dir/cargo-mutants.log" >&2; echo "mutants-judge: cargo mutants failed ($rc)" >&2; exit 1 ;; esac
python3 scripts/mutants-judge-verdict.py "$dir/mutants.out" mutants/judge_equivalents.toml $((SECONDS - t0)) | tee "$dir/summary.txt"
exit "${PIPESTATUS[0]}"
