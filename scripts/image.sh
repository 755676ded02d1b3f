#!/usr/bin/env bash
# Build the fenceproof image for CI from this machine's own packages, with no registry (as
# scripts/pg-image.sh builds the PostgreSQL one): fenceproof, its worker and its fake tools (from
# BIN_DIR), the migrations, PostgreSQL 15, libfaketime, redis-server, a shell and the few tools the
# harness runs, with every shared library they load (found with ldd), in one root file system that
# `docker import` turns into an image. It runs as an unprivileged user; a CI job mounts its worker:
#   docker run --rm -v "$PWD:/src" -w /src fenceproof/fenceproof:latest verify --worker-bin /src/my-worker
# Usage: scripts/image.sh [BIN_DIR] [tag]   (defaults: target/release, fenceproof/fenceproof:latest)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bins="${1:-$here/target/release}"
tag="${2:-fenceproof/fenceproof:latest}"
pg=/usr/lib/postgresql/15
command -v docker >/dev/null || { echo "image: docker is not installed" >&2; exit 1; }
docker info >/dev/null 2>&1 || { echo "image: no Docker daemon answers (is the socket there?)" >&2; exit 1; }
[ -x "$pg/bin/postgres" ] || { echo "image: $pg/bin/postgres not found (apt-get install postgresql-15)" >&2; exit 1; }
for b in fenceproof fenceproof-worker fenceproof-fake-tools; do
  [ -x "$bins/$b" ] || { echo "image: $bins/$b not found (cargo build --release --workspace)" >&2; exit 1; }
done
root=$(mktemp -d /tmp/fenceproof-image.XXXXXX)
trap 'rm -rf "$root"' EXIT
# A merged-/usr layout, as Debian's: /bin, /lib and /lib64 point into /usr.
mkdir -p "$root"/{tmp,etc,home/fenceproof,usr/bin,usr/lib,usr/lib64,usr/share/fenceproof,usr/local/bin}
ln -s usr/bin "$root/bin"; ln -s usr/lib "$root/lib"; ln -s usr/lib64 "$root/lib64"
chmod 1777 "$root/tmp"
copy() { # copy a file or tree to the same (resolved) path inside the root file system
  local real; real=$(readlink -f "$1")
  mkdir -p "$root$(dirname "$real")"
  cp -a "$real" "$root$real"
}
for p in "$pg" /usr/share/postgresql/15 /usr/share/zoneinfo; do copy "$p"; done
programs=""
for t in sh cp mv rm timeout redis-server; do
  p=$(command -v "$t") || { echo "image: $t not found" >&2; exit 1; }
  cp -L "$p" "$root/usr/bin/$t"; programs="$programs $p"
done
# libfaketime, for the database clock fault (K, W-clock): the harness preloads it under the server.
faketime=/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1
if [ -e "$faketime" ]; then copy "$faketime"; programs="$programs $faketime"
else echo "image: $faketime not found (apt-get install libfaketime): the image gets no clock fault" >&2; fi
for b in fenceproof fenceproof-worker fenceproof-fake-tools; do
  install -m 0755 "$bins/$b" "$root/usr/local/bin/$b"; programs="$programs $bins/$b"
done
cp -a "$here/migrations" "$root/usr/share/fenceproof/migrations"
# Every shared library the copied programs and modules load, at the same path.
for f in "$pg"/bin/* "$pg"/lib/*.so $programs; do
  ldd "$f" 2>/dev/null | awk '/=>/ { print $3 } /^\t\/.*ld-linux/ { print $1 }' || true
done | sort -u | while read -r lib; do
  if [ -n "$lib" ] && [ -e "$lib" ]; then
    copy "$lib"
    [ -e "$root$lib" ] || { mkdir -p "$root$(dirname "$lib")"; cp -L "$lib" "$root$lib"; }
  fi
done
printf 'root:x:0:0:root:/root:/bin/sh\npostgres:x:999:999:PostgreSQL:/var/lib/postgresql:/bin/sh\nfenceproof:x:1000:1000:fenceproof:/home/fenceproof:/bin/sh\n' > "$root/etc/passwd"
printf 'root:x:0:\npostgres:x:999:\nfenceproof:x:1000:\n' > "$root/etc/group"
chown -R 1000:1000 "$root/home/fenceproof"
tar -C "$root" -c . | docker import \
  --change 'USER 1000' \
  --change 'WORKDIR /home/fenceproof' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'ENV TZ=UTC' \
  --change 'ENV HOME=/home/fenceproof' \
  --change 'ENV PATH=/usr/local/bin:/usr/lib/postgresql/15/bin:/usr/bin:/bin' \
  --change 'ENTRYPOINT ["/usr/local/bin/fenceproof"]' \
  - "$tag" >/dev/null
echo "image: built $tag from $bins ($(docker image inspect -f '{{.Size}}' "$tag" | awk '{ printf "%.0f MB", $1 / 1e6 }'))"
