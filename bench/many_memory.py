"""Bytes per holder of one key: the used_memory delta over the key as it grows
from one holder to N (LIMIT 0, TTL, 16-byte jids, no OWNER or META), on the
redis-server on the PATH, for each N of MANY_MEMORY_SIZES (default "1000 5000
20000 70000 100000"), once the load's clients are gone.

    python3 bench/many_memory.py [module.so]   (default: the release build)

MANY_MEMORY_OWNER: an OWNER every holder is granted with (default none), for
what a holder with an owner costs beside one without."""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402

SIZES = [int(n) for n in os.environ.get("MANY_MEMORY_SIZES", "1000 5000 20000 70000 100000").split()]


def main():
    if len(sys.argv) > 1:
        bench.MODULE = os.path.abspath(sys.argv[1])
    lock = ["UNIQUE.LOCK", "many", None, "LIMIT", 0, "TTL", 600_000]
    if os.environ.get("MANY_MEMORY_OWNER"):
        lock += ["OWNER", os.environ["MANY_MEMORY_OWNER"]]
    first = 10**14  # "j" and 15 digits: 16-byte jids
    server = bench.Server()
    try:
        for n in SIZES:
            server.conn.call("FLUSHALL", "SYNC")
            server.conn.call(*lock[:2], "j%d" % first, *lock[3:])
            before = int(server.info("memory")["used_memory"])
            bench.fill(server, lock[:2] + ["j{}"] + lock[3:], n - 1, start=first + 1)
            # The load's clients gone, their buffers freed.
            deadline = time.time() + 10
            while int(server.info("clients")["connected_clients"]) > 1 and time.time() < deadline:
                time.sleep(0.05)
            after = int(server.info("memory")["used_memory"])
            print("%8s holders: %.1f bytes a holder" % (format(n, ","), (after - before) / (n - 1)),
                  flush=True)
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
