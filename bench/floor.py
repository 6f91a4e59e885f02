#!/usr/bin/env python3
"""make bench-floor (part of make bench): UNIQUE.LOCK and UNIQUE.UNLOCK against
the floor (bench/floor/floor.c: the least a lock module command can do) and
against SET NX PX / DEL, per server, in two figures:

- throughput: bench/loadgen.rs, 50 clients, pipeline 16, grants on fresh keys
  and releases of held keys, the contenders alternated round by round
  (medians of FLOOR_ROUNDS, default 3; the machine is shared: the load is
  printed with the figures); then one client without pipelining (labels
  ending in " p1"), where the round trip sets the pace and a command's cost
  shows only as its share of it;
- instructions per request: the server under valgrind --tool=callgrind,
  FLOOR_CG_REQUESTS (default 20,000) requests at pipeline 16, counted from a
  zeroed counter (callgrind_control -z) to a dump (-d): everything the server
  executes for them, event loop included, the module's background reaper
  off (see `instructions`). The steady figure on a shared
  machine. The dumps stay in target/floor/callgrind/<server>/ for
  callgrind_annotate. With FLOOR_CACHE=1, also each request's misses of
  the L1 instruction cache as callgrind simulates it (read only those from
  such a run: simulating the caches slows the server down again, so its
  timers fall thicker on each request and add to every count).

The floor is compiled per server against that server's redismodule.h (Debian's
Redis 7.0.15 installs none: the 7.2.6 source's header, using only the 7.0
module API). Servers: FLOOR_SERVERS (default "redis-7.0.15 redis-8.0.6
valkey-9.1.2"; redis-7.0.15 is the redis-server on the PATH, the others are
built by ../shared/servers/build.sh, SERVERS_DIR to change). Every contender
holds the jid "job"; FLOOR_JID names another (a Sidekiq jid, a UUID: what job
systems send). FLOOR_RENEWALS=1 counts a renewal with META too. Writes
bench/results/floor.json (floor-jid.json with FLOOR_JID).
"""

import glob
import json
import os
import subprocess
import sys
import tarfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402

ROOT = bench.ROOT
OUT = os.path.join(ROOT, "target", "floor")
CACHE = os.path.expanduser("~/.cache/redis-unique-servers")
ROUNDS = int(os.environ.get("FLOOR_ROUNDS", "3"))
CG_REQUESTS = int(os.environ.get("FLOOR_CG_REQUESTS", "20000"))
# FLOOR_CACHE=1: callgrind also simulates the caches (the host's sizes; here a
# 32 KB L1 instruction cache) and the report gives each request's misses of
# the L1 instruction cache: code that does not fit in it is fetched again.
CACHE_SIM = os.environ.get("FLOOR_CACHE") == "1"
SERVERS = os.environ.get("FLOOR_SERVERS", "redis-7.0.15 redis-8.0.6 valkey-9.1.2").split()


class Server(bench.Server):
    def flush(self):
        # SYNC: Valkey frees a plain FLUSHALL lazily, in a thread whose work
        # would fall on the next measured run.
        self.conn.call("FLUSHALL", "SYNC")


def binary_and_header(name):
    """The server binary of `name` and the directory of its redismodule.h."""
    if name == "redis-7.0.15":
        include = os.path.join(OUT, "include-7.2.6")
        if not os.path.exists(os.path.join(include, "redismodule.h")):
            os.makedirs(include, exist_ok=True)
            with tarfile.open(os.path.join(bench.SERVERS_DIR, "redis-7.2.6.tar.gz")) as tar:
                member = tar.getmember("redis-7.2.6/src/redismodule.h")
                with open(os.path.join(include, "redismodule.h"), "wb") as f:
                    f.write(tar.extractfile(member).read())
        return "redis-server", include
    built = bench.built_server(name)
    return built, os.path.dirname(built)


def build_floor(name, include):
    so = os.path.join(OUT, name, "floor.so")
    os.makedirs(os.path.dirname(so), exist_ok=True)
    subprocess.run(["cc", "-O2", "-g", "-fPIC", "-shared", "-std=c11", "-Wall", "-Wextra", "-Werror",
                    "-I", include, "-o", so, os.path.join(ROOT, "bench", "floor", "floor.c")],
                   check=True)
    return so


def held(args):
    def prepare(server, n):
        bench.fill(server, args, n)
    return prepare


JID = os.environ.get("FLOOR_JID", "job")
LOCKS = {
    "UNIQUE.LOCK": (["UNIQUE.LOCK", "lock:{}", JID, "TTL", 600_000], None, bench.grants),
    "floor.lock": (["FLOOR.LOCK", "lock:{}", JID, 600_000], None, bench.grants),
    "SET NX PX": (["SET", "str:{}", JID, "NX", "PX", 600_000], None, bench.grants),
}
UNLOCKS = {
    "UNIQUE.UNLOCK": (["UNIQUE.UNLOCK", "lock:{}", JID],
                      held(["UNIQUE.LOCK", "lock:{}", JID, "TTL", 600_000]), bench.releases),
    "floor.unlock": (["FLOOR.UNLOCK", "lock:{}", JID],
                     held(["FLOOR.LOCK", "lock:{}", JID, 600_000]), bench.releases),
    "DEL": (["DEL", "str:{}"], held(["SET", "str:{}", JID, "PX", 600_000]), bench.releases),
}
# FLOOR_RENEWALS=1: also a job's heartbeat, a renewal of its held lock sending
# what it sent first (TYPE, OWNER, the README's META), counted in instructions.
RENEWAL = ["UNIQUE.LOCK", "lock:{}", JID, "TTL", 600_000, "TYPE", "until_executed",
           "OWNER", "host-1:42", "META", bench.MODULE_META]
RENEWALS = {"UNIQUE.LOCK renewal with META": (RENEWAL, held(RENEWAL), bench.grants)}


def throughput(floor_so):
    bench.ROUNDS = ROUNDS
    server = Server(modules=[floor_so])
    try:
        out = {}
        for contenders in (LOCKS, UNLOCKS):
            out.update(bench.compare(server, contenders, 16))
        for contenders in (LOCKS, UNLOCKS):
            for label, r in bench.compare(server, contenders, 1, clients=1).items():
                out[label + " p1"] = r
        return out
    finally:
        server.stop()


def totals(path):
    """Every event's total in a callgrind dump (Ir first)."""
    events = ["Ir"]
    with open(path) as f:
        for line in f:
            if line.startswith("events:"):
                events = line.split()[1:]
            if line.startswith(("summary:", "totals:")):
                return dict(zip(events, map(int, line.split()[1:])))
    raise SystemExit("no total in %s" % path)


def zero(server):
    """Zeroes the counters of `server`, which runs under callgrind."""
    subprocess.run(["callgrind_control", "-z", str(server.proc.pid)], check=True,
                   capture_output=True)


def dump(server, dumps, keep):
    """Dumps the counters of `server` (which runs under callgrind, its dumps
    going to the folder `dumps`) since the last zero into the file `keep`."""
    before = set(glob.glob(os.path.join(dumps, "callgrind.out*")))
    subprocess.run(["callgrind_control", "-d", str(server.proc.pid)], check=True,
                   capture_output=True)
    deadline = time.time() + 60
    while not (new := set(glob.glob(os.path.join(dumps, "callgrind.out*"))) - before):
        if time.time() > deadline:
            raise SystemExit("no callgrind dump for %s" % keep)
        time.sleep(0.1)
    (path,) = new
    time.sleep(0.3)  # let callgrind finish writing it
    os.rename(path, keep)
    return keep


def instructions(name, floor_so, groups=(LOCKS, UNLOCKS), out_dir=OUT):
    """Instructions per request of each contender of `groups` (dicts of
    label: (args, prepare, check)), on a server with `floor_so` loaded too."""
    dumps = os.path.join(out_dir, "callgrind", name)
    os.makedirs(dumps, exist_ok=True)
    for old in glob.glob(os.path.join(dumps, "*")):
        os.remove(old)
    server = Server(modules=[floor_so], wrapper=[
        "valgrind", "--tool=callgrind", "--dump-instr=no",
        *(["--cache-sim=yes"] if CACHE_SIM else []),
        "--callgrind-out-file=%s/callgrind.out" % dumps])
    try:
        # The background reaper ticks on the clock (100 keys every 100 ms),
        # not per request: under callgrind, which runs the server some 50
        # times slower, its ticks would fall 50 times as thick on each request
        # (80 to 140 instructions of LOCK's, moving with the machine's speed,
        # where natively they are 2 or 3). Off while counting; its cost per
        # tick is in `make bench`'s reaper figures.
        server.conn.call("CONFIG", "SET", "unique.reap-interval", 0)
        out = {}
        for contenders in groups:
            for label, (args, prepare, check) in contenders.items():
                server.flush()
                if prepare:
                    prepare(server, CG_REQUESTS)
                zero(server)
                r = bench.load(server, args, 16, CG_REQUESTS)
                if not check(r["replies"]):
                    raise SystemExit("%s did not do what is measured: %s" % (label, r["replies"]))
                keep = dump(server, dumps,
                            os.path.join(dumps, label.replace(" ", "_").replace(".", "_") + ".out"))
                counted = totals(keep)
                out[label] = round(counted["Ir"] / CG_REQUESTS)
                if "I1mr" in counted:
                    out[label + " I1 misses"] = round(counted["I1mr"] / CG_REQUESTS, 1)
        return out
    finally:
        server.stop()


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def main():
    bench.require_builds()
    started = time.time()
    results = {}
    which = os.environ.get("FLOOR_ONLY", "both")  # both, instructions or throughput
    for name in SERVERS:
        binary, include = binary_and_header(name)
        bench.SERVER_BINARY = binary
        floor_so = build_floor(name, include)
        res = {"binary": binary, "load_before": loadavg()}
        if which in ("both", "instructions"):
            groups = (LOCKS, UNLOCKS) + ((RENEWALS,) if os.environ.get("FLOOR_RENEWALS") else ())
            res["instructions"] = instructions(name, floor_so, groups)
        if which in ("both", "throughput"):
            res["throughput"] = throughput(floor_so)
        res["load_after"] = loadavg()
        results[name] = res
        report(name, res)
    path = os.path.join(ROOT, "bench", "results", "floor.json" if JID == "job" else "floor-jid.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump({"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                   "machine": {"cpus": os.cpu_count(), "platform": bench.platform.platform(),
                               "cpu": bench.cpu_model()},
                   "jid": JID, "rounds": ROUNDS, "callgrind_requests": CG_REQUESTS,
                   "clients": bench.CLIENTS,
                   "pipeline": 16, "servers": results,
                   "seconds": round(time.time() - started, 1)}, f, indent=2)
    print("\nwritten to %s" % os.path.relpath(path, ROOT))


def report(name, res):
    ins, tp = res.get("instructions", {}), res.get("throughput", {})
    print("\n== %s (%s; load average %s -> %s)" % (name, res["binary"], res["load_before"],
                                                   res["load_after"]))
    print("%-14s %10s %8s %12s %8s %14s %8s %8s %10s" % (
        "", "req/s", "/floor", "instr/req", "/floor", "1 client p1", "/floor", "/ref",
        "I1 misses"))
    for mine, floor, ref in (("UNIQUE.LOCK", "floor.lock", "SET NX PX"),
                             ("UNIQUE.UNLOCK", "floor.unlock", "DEL")):
        for label in (mine, floor, ref):
            rps = tp.get(label, {}).get("rps")
            ir = ins.get(label)
            p1 = tp.get(label + " p1", {}).get("rps")
            i1 = ins.get(label + " I1 misses")
            print("%-14s %10s %8s %12s %8s %14s %8s %8s %10s" % (
                label, "%.0f" % rps if rps else "-",
                "%.2fx" % (rps / tp[floor]["rps"]) if rps and tp.get(floor) else "-",
                ir if ir else "-",
                "%.2fx" % (ir / ins[floor]) if ir and ins.get(floor) else "-",
                "%.0f" % p1 if p1 else "-",
                "%.2fx" % (p1 / tp[floor + " p1"]["rps"]) if p1 and tp.get(floor + " p1") else "-",
                "%.2fx" % (p1 / tp[ref + " p1"]["rps"]) if p1 and tp.get(ref + " p1") else "-",
                i1 if i1 is not None else "-"))
    for label in RENEWALS:
        if label in ins:
            print("%s: %s instructions a request" % (label, ins[label]))


if __name__ == "__main__":
    sys.exit(main())
