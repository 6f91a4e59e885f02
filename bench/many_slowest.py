"""The slowest commands of one key that grows to N holders, then churns:
what no throughput figure shows, a command that pays alone for the key's
growth (a table taken over, a vector copied) while every other client waits.

A fresh server per run, `SLOWLOG` at SLOWEST_US (default 100 µs): N grants
of fresh jids on one key (LIMIT 0, 4 clients, pipeline 16), then 2N
requests that each release a holder and grant it again (one client); then
MEMORY USAGE of the key and its UNLINK. For each run: how many commands
took longer, and the slowest five, in µs; what MEMORY USAGE and UNLINK
took.
Several builds are alternated run by run (the machine's other tenants
move a single run's slowest by milliseconds: compare the runs, not one).

    python3 bench/many_slowest.py [A.so [B.so ...]]   (default: the release build)

SLOWEST_N: N (default 100,000); SLOWEST_RUNS: runs of each build (default 3);
SLOWEST_META=1: each holder with a META (kept apart from its slot);
SLOWEST_SERVER: a server of ../shared/servers (redis-8.0.6, valkey-9.1.2, ...;
default the redis-server on the PATH)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402

N = int(os.environ.get("SLOWEST_N", "100000"))
RUNS = int(os.environ.get("SLOWEST_RUNS", "3"))
OVER_US = int(os.environ.get("SLOWEST_US", "100"))
TTL = 600_000
META = ["META", '{"worker":"SyncUserJob","queue":"default"}'] if os.environ.get(
    "SLOWEST_META") == "1" else []


def slowest(server):
    """The commands over OVER_US since the last call, slowest first (µs)."""
    entries = server.conn.call("SLOWLOG", "GET", -1)
    server.conn.call("SLOWLOG", "RESET")
    return sorted((e[2] for e in entries), reverse=True)


def run(module):
    bench.MODULE = module
    server = bench.Server()
    try:
        server.conn.call("CONFIG", "SET", "slowlog-log-slower-than", OVER_US)
        server.conn.call("CONFIG", "SET", "slowlog-max-len", 100_000)
        server.conn.call("SLOWLOG", "RESET")
        grow = bench.load(server, ["UNIQUE.LOCK", "many", "job:{}", "LIMIT", 0, "TTL", TTL, *META],
                          16, N, clients=4)
        if not bench.grants(grow["replies"]):
            raise SystemExit("a grant was denied: %s" % grow["replies"])
        grown = slowest(server)
        churn = bench.load(server, ["UNIQUE.UNLOCK", "many", "job:{}", "--and",
                                    "UNIQUE.LOCK", "many", "job:{}", "LIMIT", 0, "TTL", TTL, *META],
                           16, 2 * N, clients=1)
        if churn["replies"]["zero"] or churn["replies"]["null"]:
            raise SystemExit("a release or a grant failed: %s" % churn["replies"])
        churned = slowest(server)
        # Every command logged now: what sizing and dropping the key take.
        server.conn.call("CONFIG", "SET", "slowlog-log-slower-than", 0)
        server.conn.call("SLOWLOG", "RESET")
        server.conn.call("MEMORY", "USAGE", "many")
        if server.conn.call("UNLINK", "many") != 1:
            raise SystemExit("UNLINK found no key")
        took = {e[3][0].decode().upper(): e[2] for e in server.conn.call("SLOWLOG", "GET", -1)}
        return grown, churned, took.get("MEMORY"), took.get("UNLINK")
    finally:
        server.stop()


def main():
    if os.environ.get("SLOWEST_SERVER"):
        bench.SERVER_BINARY = bench.built_server(os.environ["SLOWEST_SERVER"])
    modules = [os.path.abspath(m) for m in sys.argv[1:]] or [
        os.path.join(bench.ROOT, "target", "release", "libredis_unique.so")]
    print("%s: one key growing to %s holders, then %s releases and grants again: commands "
          "over %d µs, the slowest five (µs)" % (os.path.basename(bench.SERVER_BINARY),
                                                  format(N, ","), format(2 * N, ","), OVER_US))
    for i in range(RUNS):
        for module in modules if i % 2 == 0 else modules[::-1]:
            grown, churned, memory_usage, unlink = run(module)
            print("%-24s growing: %3d, %-28s churning: %3d, %-28s MEMORY USAGE %s, UNLINK %s" % (
                os.path.basename(module), len(grown), grown[:5], len(churned), churned[:5],
                memory_usage, unlink), flush=True)


if __name__ == "__main__":
    sys.exit(main())
