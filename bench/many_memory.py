"""Bytes per holder of one key: the used_memory delta over the key as it grows
from one holder to N (LIMIT 0, TTL, no OWNER or META), on the redis-server on
the PATH, for each N of MANY_MEMORY_SIZES (default "1000 5000 20000 70000
100000"), once the load's clients are gone; beside it, the same members in a
sorted set (redis-semaphore's layout).

    python3 bench/many_memory.py [module.so]   (default: the release build)

MANY_MEMORY_JIDS: the jids' shape, `short` (16 bytes, the default), `sidekiq`
(24 hex digits) or `uuid` (36 bytes: Celery's and redis-semaphore's ids).
MANY_MEMORY_OWNER: an OWNER every holder is granted with (default none), for
what a holder with an owner costs beside one without."""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402

SIZES = [int(n) for n in os.environ.get("MANY_MEMORY_SIZES", "1000 5000 20000 70000 100000").split()]
# Each shape's jid of sequence number `{}` (12 digits, as bench/loadgen.rs
# writes them).
JIDS = {
    "short": "jid-{}",
    "sidekiq": "a1b2c3d4e5f6{}",
    "uuid": "8f14e45f-ceea-467a-9575-{}",
}


def main():
    if len(sys.argv) > 1:
        bench.MODULE = os.path.abspath(sys.argv[1])
    jid = JIDS[os.environ.get("MANY_MEMORY_JIDS", "short")]
    first = 10**11
    lock = ["UNIQUE.LOCK", "many", jid, "LIMIT", 0, "TTL", 600_000]
    if os.environ.get("MANY_MEMORY_OWNER"):
        lock += ["OWNER", os.environ["MANY_MEMORY_OWNER"]]
    zset = ["ZADD", "many", 1_700_000_000_000, jid]
    server = bench.Server()
    try:
        # A fresh server's first fill also grows about 25 KB of the server's
        # own, once, whatever it fills (a sorted set too): 25 bytes a holder
        # of a 1,000-holder key that are no holder's. It is thrown away.
        for args in (lock, zset):
            per_holder(server, args, min(SIZES), first)
        for n in SIZES:
            module, zset_bytes = (per_holder(server, args, n, first) for args in (lock, zset))
            print("%8s holders: %.1f bytes a holder (sorted set: %.1f)"
                  % (format(n, ","), module, zset_bytes), flush=True)
    finally:
        server.stop()


def per_holder(server, args, n, first):
    server.conn.call("FLUSHALL", "SYNC")
    server.conn.call(*[a.format("%012d" % first) if isinstance(a, str) else a for a in args])
    before = int(server.info("memory")["used_memory"])
    bench.fill(server, args, n - 1, start=first + 1)
    # The load's clients gone, their buffers freed.
    deadline = time.time() + 10
    while int(server.info("clients")["connected_clients"]) > 1 and time.time() < deadline:
        time.sleep(0.05)
    return (int(server.info("memory")["used_memory"]) - before) / (n - 1)


if __name__ == "__main__":
    sys.exit(main())
