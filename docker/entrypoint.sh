#!/bin/sh
# fenceproof's local PostgreSQL image: the same contract as the official image's entrypoint, for
# what the harness and testcontainers use. POSTGRES_USER / POSTGRES_PASSWORD / POSTGRES_DB,
# POSTGRES_INITDB_ARGS and POSTGRES_HOST_AUTH_METHOD; a first start initializes $PGDATA with a temporary server (its log on
# stdout, as the official image does), then the real server runs in the foreground (log on stderr)
# with the container's arguments as server options.
set -e
: "${PGDATA:=/var/lib/postgresql/data}"
: "${POSTGRES_USER:=postgres}"
: "${POSTGRES_DB:=$POSTGRES_USER}"
BIN=/usr/lib/postgresql/15/bin
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  pwfile=/tmp/pwfile
  printf '%s\n' "${POSTGRES_PASSWORD:-postgres}" > "$pwfile"
  "$BIN/initdb" -D "$PGDATA" -U "$POSTGRES_USER" --pwfile="$pwfile" -E UTF8 --locale=C --auth-local=trust --auth-host=scram-sha-256 $POSTGRES_INITDB_ARGS > /dev/null
  : > "$pwfile"
  method="${POSTGRES_HOST_AUTH_METHOD:-scram-sha-256}"
  printf 'host all all all %s\nhost replication all all %s\n' "$method" "$method" >> "$PGDATA/pg_hba.conf"
  "$BIN/pg_ctl" -D "$PGDATA" -o "-c listen_addresses='' -k /tmp" -w start -l /dev/stdout
  if [ "$POSTGRES_DB" != "postgres" ]; then
    "$BIN/psql" -h /tmp -U "$POSTGRES_USER" -d postgres -qc "CREATE DATABASE \"$POSTGRES_DB\"" 2>/dev/null || true
  fi
  "$BIN/pg_ctl" -D "$PGDATA" -m fast -w stop > /dev/null
fi
# The database clock fault: FP_FAKETIME is the clock's first setting (an offset such as +0, or an
# absolute time); the harness rewrites /tmp/faketime with `docker exec` to move it.
if [ -n "${FP_FAKETIME:-}" ]; then
  lib=/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1
  if [ ! -e "$lib" ]; then
    echo "fenceproof image: FP_FAKETIME is set but this image has no libfaketime; rebuild it with just pg-image" >&2
    exit 1
  fi
  printf '%s\n' "$FP_FAKETIME" > /tmp/faketime
  export LD_PRELOAD="$lib" FAKETIME_TIMESTAMP_FILE=/tmp/faketime FAKETIME_NO_CACHE=1 FAKETIME_DONT_FAKE_MONOTONIC=1
fi
exec "$BIN/postgres" -D "$PGDATA" -c listen_addresses='*' -k /tmp "$@"
