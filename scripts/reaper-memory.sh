#!/bin/bash
# Watches used_memory while the background reaper walks idle locks (issue 10):
#   scripts/reaper-memory.sh [module.so] [port] [minutes]
# loads the module with its defaults (reap-interval 100, reap-batch 100: about
# 1,000 keys a second), takes 100,000 locks with a 10-hour lease, then prints
# used_memory and the keys the reaper examined once a minute. A build that
# leaks the names it scans grows by ~32 bytes per key examined; a good one is flat.
set -euo pipefail
so=${1:-$(cd "$(dirname "$0")/.." && pwd)/target/release/libredis_unique.so}
port=${2:-7101}
minutes=${3:-10}
dir=$(mktemp -d)
redis-server --port "$port" --dir "$dir" --save "" --appendonly no --loadmodule "$so" \
    --daemonize yes --logfile "$dir/redis.log"
trap 'redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true' EXIT
for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
for i in $(seq 0 99999); do echo "UNIQUE.LOCK idle:$i j TTL 36000000"; done |
    redis-cli -p "$port" --pipe >/dev/null
field() { redis-cli -p "$port" info "$1" | tr -d '\r' | grep "^$2:" | cut -d: -f2; }
echo "locks: $(field unique unique_locks)"
for m in $(seq 0 "$minutes"); do
    echo "t=${m}min used_memory:$(field memory used_memory) keys_scanned:$(field unique unique_reaper_keys_scanned)"
    [ "$m" -lt "$minutes" ] && sleep 60
done
