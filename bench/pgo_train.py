#!/usr/bin/env python3
"""The workload that trains the profile-guided build (scripts/pgo.sh).

Runs on a primary with one replica (so that the replica applies every effect,
as `unique.apply`), both loading the instrumented module given as the first
argument, on each server binary given after it (Redis 7.0 reads the clock
where Redis 7.2 and later and Valkey share their command time: the profile
should see both); each process writes its counts when it shuts down cleanly.

What the profile learns is which code runs and which way its branches go.
Code that never runs in training is laid out as cold (out of the way, built
for size), so every command and every option runs here, from a few hundred
times (METRICS) to tens of thousands; the shapes that dominate real use (a
grant on a fresh key, its release, a renewal, a denial) run most, as they do
in a job system. The
numbers are far below a benchmark's: a profile needs proportions, not time.

    python3 bench/pgo_train.py path/to/instrumented.so redis-server [path/to/valkey-server ...]
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402
import many_waiters  # noqa: E402

TTL = 600_000
META = bench.MODULE_META
UUID = "8f14e45f-ceea-467a-9575-1f5e0e0c1b2d"

# (requests, arguments): `{}` is loadgen's sequence number (a fresh key, jid or
# holder per request); `--and` alternates two commands (a grant and its release).
SHAPES = [
    # The common lock: grant on a fresh key, then its release; renewals; denials.
    (60_000, ["UNIQUE.LOCK", "pgo:lock:{}", "job", "TTL", TTL]),
    (60_000, ["UNIQUE.LOCK", "pgo:pair:{}", "job", "TTL", TTL, "--and", "UNIQUE.UNLOCK", "pgo:pair:{}", "job"]),
    (40_000, ["UNIQUE.UNLOCK", "pgo:lock:{}", "job"]),
    (20_000, ["UNIQUE.UNLOCK", "pgo:none:{}", "job"]),
    (20_000, ["UNIQUE.LOCK", "pgo:hot", "job", "TTL", TTL]),
    (20_000, ["UNIQUE.LOCK", "pgo:hot", "other:{}", "TTL", TTL]),
    # The Sidekiq shape: its jid (24 hex digits, kept packed), a type, an owner and
    # metadata; renewed with the same metadata.
    (30_000, ["UNIQUE.LOCK", "pgo:meta:{}", "a1b2c3d4e5f6{}", "TTL", TTL, "TYPE", "until_executed",
              "OWNER", "host-1:42", "META", META]),
    (10_000, ["UNIQUE.LOCK", "pgo:meta:{}", "a1b2c3d4e5f6{}", "TTL", TTL, "TYPE", "until_executed",
              "OWNER", "host-1:42", "META", META]),
    (10_000, ["UNIQUE.LOCK", "pgo:pxat:{}", "job", "PXAT", 4_000_000_000_000]),
    # Semaphores and counted locks: one key of many holders.
    (30_000, ["UNIQUE.LOCK", "pgo:many", "job:{}", "LIMIT", 0, "TTL", TTL]),
    (30_000, ["UNIQUE.LOCK", "pgo:many", "g:{}", "LIMIT", 0, "TTL", TTL, "--and", "UNIQUE.UNLOCK", "pgo:many", "g:{}"]),
    (20_000, ["UNIQUE.LOCK", "pgo:many", "job:{}", "LIMIT", 0, "TTL", TTL], {"cycle": 30_000}),
    (20_000, ["UNIQUE.LOCK", "pgo:many", "new:{}", "LIMIT", 100, "TTL", TTL]),
    # A semaphore's holder as redis-semaphore names it: a UUID (kept packed).
    (20_000, ["UNIQUE.LOCK", "pgo:sem:{}", UUID, "LIMIT", 5, "TTL", TTL, "--and", "UNIQUE.UNLOCK", "pgo:sem:{}", UUID]),
    # Rates, alone and beside a limit; a key that refuses.
    (20_000, ["UNIQUE.LOCK", "pgo:rate:{}", "job", "LIMIT", 0, "TTL", TTL, "RATE", 100, "PER", 1000]),
    (10_000, ["UNIQUE.LOCK", "pgo:ratehot", "job:{}", "LIMIT", 0, "TTL", TTL, "RATE", 1, "PER", 3_600_000]),
    (5_000, ["UNIQUE.LOCK", "pgo:rateb:{}", "job", "LIMIT", 2, "TTL", TTL, "RATE", 10, "PER", 1000, "BURST", 5]),
    (5_000, ["UNIQUE.RATE", "pgo:rate:{}"]),
    # Fair sharing and modes.
    (10_000, ["UNIQUE.LOCK", "pgo:fair", "job:{}", "LIMIT", 1000000, "GROUP", "tenant-{}", "GROUPLIMIT", 3,
              "TTL", TTL, "--and", "UNIQUE.UNLOCK", "pgo:fair", "job:{}"]),
    (5_000, ["UNIQUE.LOCK", "pgo:fairw:{}", "job", "LIMIT", 10, "GROUP", "acme", "WEIGHT", 2, "TTL", TTL]),
    (10_000, ["UNIQUE.LOCK", "pgo:rw:{}", "reader", "MODE", "shared", "LIMIT", 10, "TTL", TTL,
              "--and", "UNIQUE.LOCK", "pgo:rw:{}", "writer", "MODE", "exclusive", "TTL", TTL]),
    # Several keys at once.
    (10_000, ["UNIQUE.LOCKALL", 2, "{pgo}:a:{}", "{pgo}:b:{}", "job", "LIMIT", 1, 5, "TTL", TTL,
              "--and", "UNIQUE.UNLOCKALL", 2, "{pgo}:a:{}", "{pgo}:b:{}", "job"]),
    (5_000, ["UNIQUE.LOCKALL", 3, "{pgo}:c:{}", "{pgo}:d:{}", "{pgo}:e:{}", "job", "RATE", 1, 10, "PER", 1000,
             "GROUP", 2, "acme", "MODE", 3, "shared", "TTL", TTL]),
    # Reads.
    (10_000, ["UNIQUE.LOCKEDBY", "pgo:meta:{}"]),
    (5_000, ["UNIQUE.LOCKEDBY", "pgo:meta:{}", "WITHMETA"]),
    (1_000, ["UNIQUE.LOCKEDBY", "pgo:many", "CURSOR", 0, "COUNT", 100]),
    (2_000, ["UNIQUE.WAITERS", "pgo:fair", "GROUPS"]),
    (500, ["UNIQUE.METRICS"]),
    (200, ["UNIQUE.METRICS", "FORMAT", "prometheus"]),
    (2_000, ["UNIQUE.REAP", 0, "COUNT", 100, "OWNER", "host-1:42"]),
]


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    bench.MODULE = os.path.abspath(sys.argv[1])
    for binary in sys.argv[2:]:
        bench.SERVER_BINARY = binary
        train()


def train():
    primary = bench.Server()
    replica = bench.Server(primary=primary)
    try:
        for requests, args, *own in SHAPES:
            bench.load(primary, args, 16, requests, clients=8, **(own[0] if own else {}))
        # Blocking acquires served by a release (WAIT): one key, two clients.
        bench.handoff(primary, handoffs=2_000)
        # Fair sharing's passes: 200 clients waiting in 50 groups, released
        # one by one, and LOCKs arriving at the key (it flushes the keys).
        many_waiters.measure(primary, 200, groups=50)
        # Leases of 1 ms, left to end: the reaper and Redis's expiry remove them.
        bench.load(primary, ["UNIQUE.LOCK", "pgo:short:{}", "job", "TTL", 1], 16, 5_000, clients=4)
        deadline = time.time() + 30
        while primary.conn.call("EXISTS", "pgo:short:%012d" % 4_999) and time.time() < deadline:
            time.sleep(0.05)
        primary.conn.call("WAIT", 1, 60_000)
        for server in (replica, primary):
            server.conn.send("SHUTDOWN", "NOSAVE")
            server.proc.wait(timeout=60)
    finally:
        for server in (replica, primary):
            if server.proc.poll() is None:
                server.stop()


if __name__ == "__main__":
    main()
