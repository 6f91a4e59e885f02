"""Instructions and cache misses per request on one key of N holders: the
redis-server on the PATH under valgrind --tool=callgrind --cache-sim=yes, the
commands of `make bench-many` (renewals of the N holders in scrambled order, a
grant of a fresh jid alternating with its release, denials at LIMIT N;
pipeline 16, 4 clients), each figure the difference between a run of R and
one of 2R requests on a freshly filled key (so that filling it and the run's
fixed costs drop out). The simulated last-level cache is 1 MB (--LL, an L2's
size): what a command reads across megabytes of holders shows there, which
the instruction count does not see. The dumps stay in
target/many-callgrind/ for callgrind_annotate.

    python3 bench/many_callgrind.py [module.so]   (default: the release build)

"grant+reap" is a grant of a fresh jid with OWNER w alternating with
`UNIQUE.REAP 0 COUNT 10 OWNER w`, on the key of N holders without an owner
(the only key in the database): what REAP costs within one key where a
single holder (or the few the clients interleave) has the owner.

MANY_CG_REQUESTS: R (default 20,000); MANY_CG_SIZES: the N (default
"1 1000 100000"); MANY_CG_COMMANDS: the commands measured (default all:
"renewal grant+release denial grant+reap")."""

import glob
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402
from floor import dump, totals, zero  # noqa: E402

OUT = os.path.join(bench.ROOT, "target", "many-callgrind")
R = int(os.environ.get("MANY_CG_REQUESTS", "20000"))
SIZES = [int(n) for n in os.environ.get("MANY_CG_SIZES", "1 1000 100000").split()]
TTL = 600_000
COMMANDS = os.environ.get("MANY_CG_COMMANDS", "renewal grant+release denial grant+reap").split()


def main():
    if len(sys.argv) > 1:
        bench.MODULE = os.path.abspath(sys.argv[1])
    bench.require_builds()
    os.makedirs(OUT, exist_ok=True)
    for old in glob.glob(os.path.join(OUT, "*")):
        os.remove(old)
    server = bench.Server(wrapper=[
        "valgrind", "--tool=callgrind", "--cache-sim=yes", "--LL=1048576,16,64", "--dump-instr=no",
        "--callgrind-out-file=%s/callgrind.out" % OUT])

    def measured(label, args, n, requests, cycle):
        server.conn.call("FLUSHALL", "SYNC")
        bench.fill(server, ["UNIQUE.LOCK", "many", "job:{}", "LIMIT", 0, "TTL", TTL], n)
        zero(server)
        replies = bench.load(server, args, 16, requests, clients=4, cycle=cycle)["replies"]
        keep = dump(server, OUT, os.path.join(
            OUT, "%s_%d_%d.out" % (label.replace("+", "_"), n, requests)))
        return totals(keep), replies

    print("holders  command        instructions  D1 misses  LL (1 MB) misses  (per request)")
    try:
        for n in SIZES:
            commands = {
                "renewal": (["UNIQUE.LOCK", "many", "job:{}", "LIMIT", 0, "TTL", TTL], n,
                            lambda r: r["null"] == 0 and r["error"] == 0),
                "grant+release": (["UNIQUE.LOCK", "many", "g:{}", "LIMIT", 0, "TTL", TTL, "--and",
                                   "UNIQUE.UNLOCK", "many", "g:{}"], 0,
                                  lambda r: r["null"] == 0 and r["zero"] == 0 and r["error"] == 0),
                "denial": (["UNIQUE.LOCK", "many", "new:{}", "LIMIT", n, "TTL", TTL], 0,
                           lambda r: r["null"] == sum(r.values())),
                "grant+reap": (["UNIQUE.LOCK", "many", "o:{}", "LIMIT", 0, "TTL", TTL, "OWNER", "w",
                                "--and", "UNIQUE.REAP", 0, "COUNT", 10, "OWNER", "w"], 0,
                               lambda r: r["null"] == 0 and r["error"] == 0),
            }
            for label, (args, cycle, check) in commands.items():
                if label not in COMMANDS:
                    continue
                runs = []
                for requests in (R, 2 * R):
                    t, replies = measured(label, args, n, requests, cycle)
                    if not check(replies):
                        raise SystemExit("%s did not do what is measured: %s" % (label, replies))
                    runs.append(t)
                a, b = runs
                per = {k: (b.get(k, 0) - a.get(k, 0)) / R for k in ("Ir", "D1mr", "D1mw", "DLmr", "DLmw")}
                print("%-8s %-14s %12.0f %10.1f %17.2f" % (
                    format(n, ","), label, per["Ir"], per["D1mr"] + per["D1mw"], per["DLmr"] + per["DLmw"]),
                    flush=True)
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
