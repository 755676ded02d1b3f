#!/usr/bin/env bash
# Builds the Go example worker offline (GOPATH mode, Debian's pgx v4 and uuid packages) to
# target/go-worker/fenceproof-go-worker under the repository root, and prints that path.
# Needs: apt-get install golang-go golang-github-jackc-pgx-v4-dev golang-github-google-uuid-dev
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="$root/target/go-worker/fenceproof-go-worker"
mkdir -p "$(dirname "$out")"
export GO111MODULE=off
export GOPATH="$here:/usr/share/gocode"
export GOCACHE="${GOCACHE:-$root/target/go-worker/cache}"
export GOFLAGS=
cd "$here/src/fenceproof-go-worker"
go build -o "$out" . >&2
echo "$out"
