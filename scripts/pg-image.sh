#!/usr/bin/env bash
# Build a local PostgreSQL image from this machine's own PostgreSQL 15 packages, with no registry:
# the binaries, the libraries they load (found with ldd), the shared data, a shell and the
# entrypoint are copied into a root file system, which `docker import` turns into an image.
# Usage: scripts/pg-image.sh [tag]   (default fenceproof/postgres:15)
set -euo pipefail
tag="${1:-fenceproof/postgres:15}"
pg=/usr/lib/postgresql/15
command -v docker >/dev/null || { echo "pg-image: docker is not installed" >&2; exit 1; }
docker info >/dev/null 2>&1 || { echo "pg-image: no Docker daemon answers (is the socket there?)" >&2; exit 1; }
[ -x "$pg/bin/postgres" ] || { echo "pg-image: $pg/bin/postgres not found (apt-get install postgresql-15)" >&2; exit 1; }
root=$(mktemp -d /tmp/fenceproof-pg-image.XXXXXX)
trap 'rm -rf "$root"' EXIT
# A merged-/usr layout, as Debian's: /bin, /lib and /lib64 point into /usr.
mkdir -p "$root"/{tmp,etc,var/lib/postgresql,usr/bin,usr/lib,usr/lib64,usr/share,usr/local/bin}
ln -s usr/bin "$root/bin"; ln -s usr/lib "$root/lib"; ln -s usr/lib64 "$root/lib64"
chmod 1777 "$root/tmp"
copy() { # copy a file or tree to the same (resolved) path inside the root file system
  local real; real=$(readlink -f "$1")
  mkdir -p "$root$(dirname "$real")"
  cp -a "$real" "$root$real"
}
for p in "$pg" /usr/share/postgresql/15 /usr/share/zoneinfo; do copy "$p"; done
cp -L /bin/sh "$root/usr/bin/sh"
# libfaketime, for the database clock fault (experiments K, P-api-clock, W-clock): the entrypoint
# preloads it under the server when FP_FAKETIME is set.
faketime=/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1
extra=""
if [ -e "$faketime" ]; then copy "$faketime"; extra="$faketime"; for u in mv; do cp -L "$(command -v $u)" "$root/usr/bin/$u"; extra="$extra $(command -v $u)"; done
else echo "pg-image: $faketime not found (apt-get install libfaketime): the image gets no clock fault" >&2; fi
# Every shared library the copied programs and modules load, at the same path.
for f in "$pg"/bin/* "$pg"/lib/*.so /bin/sh $extra; do
  ldd "$f" 2>/dev/null | awk '/=>/ { print $3 } /^\t\/.*ld-linux/ { print $1 }' || true
done | sort -u | while read -r lib; do
  if [ -n "$lib" ] && [ -e "$lib" ]; then
    copy "$lib"
    # the loader looks the library up by the path ldd printed, which may be a symlinked one
    [ -e "$root$lib" ] || { mkdir -p "$root$(dirname "$lib")"; cp -L "$lib" "$root$lib"; }
  fi
done
printf 'root:x:0:0:root:/root:/bin/sh\npostgres:x:999:999:PostgreSQL:/var/lib/postgresql:/bin/sh\n' > "$root/etc/passwd"
printf 'root:x:0:\npostgres:x:999:\n' > "$root/etc/group"
install -m 0755 "$(dirname "$0")/../docker/entrypoint.sh" "$root/usr/local/bin/docker-entrypoint.sh"
chown -R 999:999 "$root/var/lib/postgresql"
tar -C "$root" -c . | docker import \
  --change 'USER 999' \
  --change 'ENV PGDATA=/var/lib/postgresql/data' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'ENV TZ=UTC' \
  --change 'ENV PATH=/usr/lib/postgresql/15/bin:/usr/local/bin:/usr/bin:/bin' \
  --change 'EXPOSE 5432' \
  --change 'ENTRYPOINT ["/usr/local/bin/docker-entrypoint.sh"]' \
  - "$tag" >/dev/null
echo "pg-image: built $tag ($(docker image inspect -f '{{.Size}}' "$tag" | awk '{ printf "%.0f MB", $1 / 1e6 }'))"
