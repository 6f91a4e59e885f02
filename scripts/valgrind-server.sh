#!/bin/sh
# Builds, once, a redis-server whose every allocation goes through glibc's
# malloc (MALLOC=libc), so that valgrind sees Redis's heap as well as the
# module's (Debian's redis-server uses jemalloc, which valgrind does not see
# into). Prints the path of the binary. Source: ../shared/servers (Redis 7.2.6).
# Cached in $SERVERS_CACHE (default ~/.cache/redis-unique-servers). 2-4 minutes.
set -eu
name=redis-7.2.6
tarball=${REDIS_SOURCE:-$(cd "$(dirname "$0")/../.." && pwd)/shared/servers/$name.tar.gz}
[ -f "$tarball" ] || tarball=/work/shared/servers/$name.tar.gz
cache=${SERVERS_CACHE:-$HOME/.cache/redis-unique-servers}
dir=$cache/$name-libc
bin=$dir/src/redis-server
[ -x "$bin" ] && { echo "$bin"; exit 0; }
[ -f "$tarball" ] || { echo "no Redis source at $tarball" >&2; exit 1; }
mkdir -p "$cache"
rm -rf "$dir" "$dir.tmp"
mkdir -p "$dir.tmp"
tar -xzf "$tarball" -C "$dir.tmp" --strip-components=1
make -C "$dir.tmp" -j"$(nproc)" MALLOC=libc BUILD_TLS=no OPTIMIZATION=-O1 >"$dir.build.log" 2>&1 \
    || { tail -20 "$dir.build.log" >&2; exit 1; }
mv "$dir.tmp" "$dir"
echo "$bin"
