# fenceproof recipes. Set up once with `bash scripts/setup.sh`, then `just verify`.

set shell := ["bash", "-euo", "pipefail", "-c"]

# Show the recipes.
default:
    @just --list

# Install what is needed (just, PostgreSQL binaries, the postgres user) and build.
setup:
    bash scripts/setup.sh

# One feature set serves `just verify`, `just test` and `cargo test`: the tests' dev-dependencies
# would otherwise change some dependencies' features and compile every crate a second time.
# Build every crate (harness, worker, fake tools) and their tests, with one feature set.
build:
    cargo build --workspace --all-targets --quiet

# Install fenceproof, its worker and its fake tools side by side (release build; e.g. `just install --root /opt/fp`).
install *ARGS:
    for p in cli worker-bin fake-tools; do cargo install --locked --quiet --path "$p" --target-dir target/install {{ARGS}}; done

# Run the experiments against a throwaway PostgreSQL and print the matrix (e.g. `just verify --only B,C`).
verify *ARGS: build
    FENCEPROOF_PROGRAM="just verify" ./target/debug/fenceproof verify {{ARGS}}

# The reference worker never contains a mutant; the dependencies are shared with the normal build.
# Build the mutant worker (target/debug/fenceproof-worker-mutant) beside the reference one.
build-mutants:
    cargo build --quiet --workspace --features fenceproof-worker/mutants --bin fenceproof-worker-mutant

# A FAIL is the suite's; it stops at the first run that fails (e.g. `just precision 10`).
# The precision set: legal variants of the Python example through the whole matrix, N times.
precision N="1": build
    for i in $(seq 1 {{N}}); do echo "precision set: run $i of {{N}}"; cargo test -q -p fenceproof-cli --test precision_set -- --include-ignored --test-threads 1; done

# The load is stress-ng --cpu 4×cores (busy shells without stress-ng); no ERROR either.
# The loaded-machine test: the matrix 3 times under 4×cores of CPU load, verdicts unchanged.
loaded: build
    cargo test -q -p fenceproof-cli --test loaded_machine -- --include-ignored --nocapture

# Run every experiment against every mutant and print the kill matrix (non-zero if one survives).
mutants *ARGS: build build-mutants
    ./target/debug/fenceproof mutants named --worker-bin target/debug/fenceproof-worker-mutant {{ARGS}}

# `--cases 40` plays the same cases on any machine; `--budget-s 60` bounds each mutant's search.
# The randomized schedules alone against every named mutant; the kill matrix they reach.
schedules-mutants *ARGS: build build-mutants
    ./target/debug/fenceproof schedules against-mutants --worker-bin target/debug/fenceproof-worker-mutant {{ARGS}}

# The schedules' acceptance on named mutants: found, shrunk to at most 8 operations, 10 replays alike.
schedules-check *MUTANTS: build build-mutants
    bash scripts/schedules-check.sh {{MUTANTS}}

# With the reference worker (e.g. `--shard 1/4`, `--first-kill`); `fenceproof merge` joins shards.
# Generated mutants of the fenced fp_* functions through the experiments; their kill matrix.
mutants-sql *ARGS: build build-mutants
    ./target/debug/fenceproof mutants sql {{ARGS}}

# cargo-mutants over the judging code, one part at a time (model, model-core, check, db, conformance,
# p_api; scripts/mutants-judge.sh says which tests judge each), sharded like the other long searches
# (e.g. `just mutants-judge model --shard 0/4`); the outcome per mutant in reports/<run>/mutants.out,
# a survivor not in mutants/judge_equivalents.toml fails.
# cargo-mutants over the judging code (a part, sharded); a survivor not listed as equivalent fails.
mutants-judge PART *ARGS:
    bash scripts/mutants-judge.sh {{PART}} {{ARGS}}

# cargo-mutants on the judging code a change touches (its diff against main, --in-diff); a survivor
# not listed as equivalent fails (CI's examples/ci job; e.g. `just mutants-judge-diff origin/main`).
# cargo-mutants on the judging code a change touches (its diff against BASE).
mutants-judge-diff BASE="main":
    bash scripts/mutants-judge-diff.sh {{BASE}}

# The spec's rules, each with the checks that judge it and the experiments that exercise it.
rules: build
    ./target/debug/fenceproof rules

# Rewrite the docs' tables and counts generated from the code (`just docs --check` lists the stale ones).
docs *ARGS: build
    ./target/debug/fenceproof docs {{ARGS}}

# Random operation schedules against the reference worker (e.g. `just schedules --cases 50 --seed 0x2a`).
schedules *ARGS: build
    ./target/debug/fenceproof schedules run {{ARGS}}

# The matrix on every PostgreSQL this machine has (15 from Debian, 17 and 18 from .pg/), one column each.
verify-versions *ARGS: build
    ./target/debug/fenceproof verify-versions {{ARGS}}

# Screenshot the newest run's index.html with Debian's headless chromium (apt-get install chromium-headless-shell).
report-screenshot:
    #!/usr/bin/env bash
    set -euo pipefail
    b=$(command -v chromium-headless-shell || command -v chromium || true)
    [ -n "$b" ] || { echo "report-screenshot: install chromium-headless-shell (or chromium)" >&2; exit 1; }
    "$b" --no-sandbox --headless --disable-gpu --hide-scrollbars --window-size=1200,1600 --screenshot="$PWD/reports/latest/screenshot.png" "file://$PWD/reports/latest/index.html" 2>/dev/null
    echo "reports/latest/screenshot.png"

# Each phase also runs pgbench; SVG plots beside bench.md (e.g. `just bench --duration 5`).
# Load benchmarks (release build): renewal, claim and protected commit beside raw PostgreSQL.
bench *ARGS:
    cargo build --release --quiet -p fenceproof-cli
    ./target/release/fenceproof bench {{ARGS}}

# criterion micro-benchmarks of the hot pure functions (digest, operation_id, history checking).
microbench:
    cargo bench -p fenceproof-protocol -p fenceproof-harness -- --warm-up-time 1 --measurement-time 2

# Build a local PostgreSQL 15 image (fenceproof/postgres:15) from this machine's packages, with no registry.
pg-image:
    bash scripts/pg-image.sh

# The image for CI: release fenceproof, worker, fake tools, migrations and PostgreSQL 15, offline.
image TAG="fenceproof/fenceproof:latest":
    cargo build --release --quiet --workspace --bins
    bash scripts/image.sh target/release {{TAG}}

# The matrix with PostgreSQL in a Docker container (the image from `just pg-image`).
verify-container *ARGS: build pg-image
    ./target/debug/fenceproof verify --backend container --pg-image fenceproof/postgres:15 {{ARGS}}

# List the experiments.
list: build
    ./target/debug/fenceproof list

# `--lanes .ci/lanes` adds CI's lanes; `cargo test --workspace` runs the same tests one by one.
# The test suite, its binaries side by side as the cores allow (logs in target/test-logs/).
test *ARGS: build
    python3 scripts/test-pool.py {{ARGS}}

# Formatting and lints: the Rust code (clippy, every warning denied), then everything else (lint-rest).
lint: && lint-rest
    cargo clippy --workspace --all-targets --quiet -- -D warnings

# CI runs clippy inside its build (.ci/run) and this recipe as a lane.
# Every lint but clippy: formatting, import cycles, Python, Go, JSON Schemas.
lint-rest:
    cargo fmt --all -- --check
    python3 scripts/import-cycles.py
    python3 -m pyflakes examples/python-worker/*.py cli/tests/variants/*.py audit/adapters/*.py scripts/*.py
    GO111MODULE=off GOPATH="$PWD/examples/go-worker:/usr/share/gocode" go vet fpkit protocol fenceproof-go-worker
    ! gofmt -l examples/go-worker/src cli/tests/variants/go | grep .
    check-jsonschema --check-metaschema contract/worker-protocol.v2.schema.json
    check-jsonschema --builtin-schema vendor.github-workflows examples/ci/github-actions.yml
    check-jsonschema --builtin-schema vendor.gitlab-ci examples/ci/gitlab-ci.yml

# The table in reports/<run>/audit.md and index.html (e.g. `just audit --library chancy`).
# Audit real job queues with the stale-worker faults, the reference protocol as the control.
audit *ARGS: build
    ./target/debug/fenceproof audit {{ARGS}}

# The worker contract, command by command, against a worker (`just conformance --worker-bin PATH`).
conformance *ARGS: build
    ./target/debug/fenceproof conformance {{ARGS}}

# Remove old run folders, keeping the newest five.
clean-reports:
    ls -1dt reports/2*/ 2>/dev/null | tail -n +6 | xargs -r rm -rf
