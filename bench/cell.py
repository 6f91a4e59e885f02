#!/usr/bin/env python3
"""make bench-cell (part of make bench): UNIQUE.LOCK ... RATE against
redis-cell 0.5.0 (brandur's GCRA module, CL.THROTTLE), side by side in one
server, in the two figures of bench/floor.py:

- throughput: bench/loadgen.rs, 50 clients, pipelined 16 and unpipelined, the
  contenders alternated round by round (medians of CELL_ROUNDS, default 3; the
  machine is shared: the load is printed with the figures);
- instructions per request: the server under callgrind, CELL_CG_REQUESTS
  (default 20,000) requests at pipeline 16, from a zeroed counter to a dump
  (dumps in target/redis-cell/callgrind/ for callgrind_annotate).

The contenders: on fresh keys, `UNIQUE.LOCK k job LIMIT 0 TTL 60000 RATE 100
PER 1000` against `CL.THROTTLE k 0 100 1` (100 a second, no burst), with the
plain `UNIQUE.LOCK k job TTL 60000` beside them (what RATE adds to a grant);
on one hot key that denies, `UNIQUE.LOCK hot job:n LIMIT 0 TTL 60000 RATE 1
PER 3600000` against `CL.THROTTLE hot 0 1 3600`.

redis-cell is built from its v0.5.0 tag (the crate registry only has 0.2.2):
the git directory REDIS_CELL_GIT (default the mirror of brandur/redis-cell)
is archived into target/redis-cell/src and built there with cargo, once
(the .so is kept). When it cannot be built, the comparison is skipped with
the reason. Writes bench/results/cell.json.
"""

import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402
import floor  # noqa: E402

ROOT = bench.ROOT
OUT = os.path.join(ROOT, "target", "redis-cell")
TAG = "v0.5.0"
CELL_GIT = os.environ.get("REDIS_CELL_GIT", "/work/.mirror/brandur+redis-cell/repo")
ROUNDS = int(os.environ.get("CELL_ROUNDS", "3"))
CG_REQUESTS = int(os.environ.get("CELL_CG_REQUESTS", "20000"))

RATE = ["LIMIT", 0, "TTL", 60000, "RATE", 100, "PER", 1000]
FRESH = {
    "UNIQUE.LOCK RATE": (["UNIQUE.LOCK", "rate:{}", "job", *RATE], None, bench.grants),
    "CL.THROTTLE": (["CL.THROTTLE", "cell:{}", 0, 100, 1], None, bench.grants),
    "UNIQUE.LOCK": (["UNIQUE.LOCK", "lock:{}", "job", "TTL", 60000], None, bench.grants),
}
HOT = {
    "UNIQUE.LOCK RATE hot": (["UNIQUE.LOCK", "rate:hot", "job:{}", "LIMIT", 0, "TTL", 60000,
                              "RATE", 1, "PER", 3_600_000], None, bench.anything),
    "CL.THROTTLE hot": (["CL.THROTTLE", "cell:hot", 0, 1, 3600], None, bench.anything),
}


def build_cell():
    """The redis-cell module, built once; `None` and the reason when it cannot be."""
    so = os.path.join(OUT, "release", "libredis_cell.so")
    if os.path.exists(so):
        return so, None
    src = os.path.join(OUT, "src")
    try:
        if not os.path.exists(os.path.join(src, "Cargo.toml")):
            os.makedirs(src, exist_ok=True)
            archive = subprocess.run(["git", "--git-dir", CELL_GIT, "archive", TAG],
                                     capture_output=True, check=True).stdout
            subprocess.run(["tar", "-x", "-C", src], input=archive, check=True)
        subprocess.run(["cargo", "build", "--release", "--lib", "--locked", "--target-dir", OUT],
                       cwd=src, capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        detail = getattr(e, "stderr", None) or ""
        if isinstance(detail, bytes):
            detail = detail.decode(errors="replace")
        return None, "%s%s" % (e, (": " + detail.strip().splitlines()[-1]) if detail.strip() else "")
    return (so, None) if os.path.exists(so) else (None, "cargo built no %s" % so)


def throughput(cell_so):
    bench.ROUNDS = ROUNDS
    server = floor.Server(modules=[cell_so])
    try:
        out = {}
        for pipeline in (16, 1):
            for name, contenders in (("fresh", FRESH), ("hot", HOT)):
                for label, r in bench.compare(server, contenders, pipeline).items():
                    out["%s p%d" % (label, pipeline)] = r
        return out
    finally:
        server.stop()


def main():
    bench.require_builds()
    cell_so, why = build_cell()
    if not cell_so:
        print("bench-cell: skipped, redis-cell %s could not be built from %s (%s)" % (TAG, CELL_GIT, why))
        return 0
    started = time.time()
    floor.CG_REQUESTS = CG_REQUESTS
    res = {"server": bench.SERVER_BINARY, "load_before": floor.loadavg()}
    which = os.environ.get("CELL_ONLY", "both")  # both, instructions or throughput
    if which in ("both", "instructions"):
        res["instructions"] = floor.instructions("redis-cell", cell_so, (FRESH, HOT), OUT)
    if which in ("both", "throughput"):
        res["throughput"] = throughput(cell_so)
    res["load_after"] = floor.loadavg()
    report(res)
    path = os.path.join(ROOT, "bench", "results", "cell.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump({"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                   "machine": {"cpus": os.cpu_count(), "platform": bench.platform.platform(),
                               "cpu": bench.cpu_model()},
                   "redis_cell": TAG, "rounds": ROUNDS, "callgrind_requests": CG_REQUESTS,
                   "clients": bench.CLIENTS, **res, "seconds": round(time.time() - started, 1)},
                  f, indent=2)
    print("\nwritten to %s" % os.path.relpath(path, ROOT))
    return 0


def report(res):
    ins, tp = res.get("instructions", {}), res.get("throughput", {})
    print("\n== UNIQUE.LOCK RATE vs redis-cell %s (%s; load average %s -> %s)" % (
        TAG, res["server"], res["load_before"], res["load_after"]))
    print("%-22s %10s %10s %12s" % ("", "req/s p16", "req/s p1", "instr/req"))
    for label in (*FRESH, *HOT):
        p16, p1 = tp.get(label + " p16", {}).get("rps"), tp.get(label + " p1", {}).get("rps")
        print("%-22s %10s %10s %12s" % (label, "%.0f" % p16 if p16 else "-",
                                        "%.0f" % p1 if p1 else "-", ins.get(label, "-")))

    def ratio(a, b, key):
        x, y = tp.get(a + key, {}).get("rps"), tp.get(b + key, {}).get("rps")
        return "%.2fx" % (x / y) if x and y else "-"
    for a, b in (("UNIQUE.LOCK RATE", "CL.THROTTLE"), ("UNIQUE.LOCK RATE hot", "CL.THROTTLE hot")):
        ir = "%.2fx" % (ins[a] / ins[b]) if a in ins and b in ins else "-"
        print("%s / %s: throughput p16 %s, p1 %s; instructions %s" % (
            a, b, ratio(a, b, " p16"), ratio(a, b, " p1"), ir))
    if "UNIQUE.LOCK RATE" in ins and "UNIQUE.LOCK" in ins:
        print("UNIQUE.LOCK RATE / UNIQUE.LOCK: instructions %.2fx"
              % (ins["UNIQUE.LOCK RATE"] / ins["UNIQUE.LOCK"]))


if __name__ == "__main__":
    sys.exit(main())
