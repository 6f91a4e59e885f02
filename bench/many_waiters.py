"""What a release costs the server when many clients wait on its key: N clients
blocked on one key of LIMIT 1 (`UNIQUE.LOCK k cN LIMIT 1 TTL 600000 WAIT
600000`), then releases that each hand the slot to the oldest waiter (whose
holder queues again: N wait at every release); reported as the server's CPU
time per release (INFO commandstats' usec of UNIQUE.UNLOCK, which includes
serving the queue), for each N of MANY_WAITERS_SIZES (default "1 100 1000
10000"), on REDIS_SERVER (default: the redis-server on the PATH).

    python3 bench/many_waiters.py [module.so]   (default: bench.py's, the profile-guided build)

MANY_WAITERS_GROUPS: each N of it, the waiters spread over N GROUPs (GROUPLIMIT 1
each; 0: no GROUP), for fair serving's pass over many tenants (default "0 1000")."""

import os
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402

SIZES = [int(n) for n in os.environ.get("MANY_WAITERS_SIZES", "1 100 1000 10000").split()]
GROUP_COUNTS = [int(n) for n in os.environ.get("MANY_WAITERS_GROUPS", "0 1000").split()]
RELEASES = 200


def unlock_usec(server):
    line = server.info("commandstats").get("cmdstat_unique.unlock", "")
    fields = dict(f.split("=") for f in line.split(",") if "=" in f)
    return int(fields.get("usec", 0)), int(fields.get("calls", 0))


def waiting(server):
    return int(server.info("unique").get("unique_waiting", 0))


def measure(server, n, groups=0, before_releases=None):
    """Server CPU µs per release with `n` waiting (dealt round into `groups`
    GROUPs, if any): each release hands the slot to the oldest waiter, and
    the client that held it queues again, so that `n` wait at every release."""
    server.conn.call("FLUSHALL", "SYNC")

    def lock_args(jid, group):
        args = ["UNIQUE.LOCK", "k", jid, "LIMIT", 1, "TTL", 600_000]
        if groups:
            args += ["GROUP", "g%d" % group, "GROUPLIMIT", 1]
        return args + ["WAIT", 600_000]

    conns = [bench.Conn(server.port) for _ in range(n + 1)]
    holder = 0
    assert isinstance(conns[0].call(*lock_args("c0", 0)[:-2]), int)
    for i in range(1, n + 1):
        conns[i].send(*lock_args("c%d" % i, i % max(groups, 1)))
    wait_for_waiters(server, n)
    server.conn.call("CONFIG", "RESETSTAT")
    if before_releases:
        before_releases()
    queue = list(range(1, n + 1))  # who waits, oldest first
    for _ in range(RELEASES):
        assert server.conn.call("UNIQUE.UNLOCK", "k", "c%d" % holder) == 1
        served = queue.pop(0)
        token = conns[served].read()
        assert isinstance(token, int), token
        conns[holder].send(*lock_args("c%d" % holder, holder % max(groups, 1)))
        queue.append(holder)
        holder = served
        wait_for_waiters(server, n)
    if before_releases:
        before_releases()
    usec, calls = unlock_usec(server)
    for c in conns:
        c.sock.close()
    return usec / calls


def wait_for_waiters(server, n):
    deadline = time.time() + 120
    while waiting(server) < n:
        if time.time() > deadline:
            raise SystemExit("only %d of %d waiters blocked" % (waiting(server), n))


def main():
    if len(sys.argv) > 1:
        bench.MODULE = os.path.abspath(sys.argv[1])
    bench.SERVER_BINARY = os.environ.get("REDIS_SERVER", bench.SERVER_BINARY)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, max(SIZES) + 1000)), hard))
    server = bench.Server()
    try:
        server.conn.call("CONFIG", "SET", "maxclients", max(SIZES) + 100)
        for groups in GROUP_COUNTS:
            for n in SIZES:
                print("%8s waiters%s: %.1f µs of server CPU per release" % (
                    format(n, ","), " in %d groups" % groups if groups else "", measure(server, n, groups)),
                    flush=True)
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
