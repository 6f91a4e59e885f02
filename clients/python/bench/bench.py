#!/usr/bin/env python3
"""make bench-python: lock+unlock pairs per second through redis-py, one thread.

Contenders, on the same server in the same run, interleaved pair by pair
(batch by batch when pipelined) so that the noise of a shared machine falls
on every contender alike; the median of BENCH_ROUNDS rounds (default 3) of
BENCH_PAIRS pairs (3000) or BENCH_PIPE_PAIRS pipelined pairs (20000):

- ``redis_unique.Client``: ``lock(key, jid, ttl=60, type="until_executed",
  meta={...})`` then ``unlock(key, jid)``: 2 round trips a pair;
- raw ``execute_command("UNIQUE.LOCK", ...)``: the same commands without the
  package, to show what the package's own Python costs;
- the Lua design of ``bench/lua/`` with EVALSHA and its metrics writes: the
  lock script, an HINCRBY of the per-minute metrics hash (as the v9 locksmith
  records every acquisition and release), the unlock script and another
  HINCRBY: 4 round trips a pair;
- the Lua design without metrics writes (2 round trips), for reference.

Each both unpipelined and pipelined (BENCH_PIPELINE pairs a batch, default 100).
Then the renewal overhead of ``Lock``: BENCH_LOCKS locks (default 100) held
with ttl=1 s for a few seconds: renewals per second per held lock, the
client's CPU per renewal and the server's time per renewal call.

Writes clients/python/bench/results/latest.json. Needs the built module
(REDIS_UNIQUE_MODULE, default target/release/libredis_unique.so) and
redis-server (REDIS_SERVER).
"""

from __future__ import annotations

import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis

from redis_unique import Client, Lock

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
MODULE = os.environ.get("REDIS_UNIQUE_MODULE", str(ROOT / "target" / "release" / "libredis_unique.so"))
SERVER = os.environ.get("REDIS_SERVER", "redis-server")
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
PAIRS = int(os.environ.get("BENCH_PAIRS", "3000"))
PIPE_PAIRS = int(os.environ.get("BENCH_PIPE_PAIRS", "20000"))
PIPELINE = int(os.environ.get("BENCH_PIPELINE", "100"))
LOCKS = int(os.environ.get("BENCH_LOCKS", "100"))
RENEW_SECONDS = float(os.environ.get("BENCH_RENEW_SECONDS", "4"))

# The same information on both sides, as in bench/bench.py.
META = {"worker": "SyncUserJob", "queue": "default", "lock_args": [12345], "at": None}


def lua_json(now: float) -> str:
    return json.dumps({"worker": "SyncUserJob", "queue": "default", "limit": 1, "timeout": 0, "ttl": 60,
                       "type": "until_executed", "lock_args": [12345], "time": now, "at": None},
                      separators=(",", ":"))


class Server:
    def __init__(self) -> None:
        if not os.path.exists(MODULE):
            raise SystemExit("build the module first: cargo build --release --lib (%s)" % MODULE)
        self.dir = tempfile.mkdtemp(prefix="redis-unique-pybench-")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.proc = subprocess.Popen(
            [SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir, "--save", "",
             "--appendonly", "no", "--logfile", "redis.log", "--loadmodule", MODULE],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        r = redis.Redis(port=self.port)
        deadline = time.time() + 10
        while True:
            try:
                r.ping()
                break
            except redis.ConnectionError:
                if time.time() > deadline:
                    raise SystemExit("redis-server did not start; see %s/redis.log" % self.dir)
                time.sleep(0.05)

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


def contenders(r: redis.Redis):
    c = Client(r)
    with open(ROOT / "bench" / "lua" / "lock.lua") as f:
        lock_sha = r.script_load(f.read())
    with open(ROOT / "bench" / "lua" / "unlock.lua") as f:
        unlock_sha = r.script_load(f.read())
    meta_text = json.dumps(META, separators=(",", ":"))

    def metrics_key() -> str:
        return "uniquejobs:metrics|" + time.strftime("%y%m%d|%H:%M", time.gmtime())

    def client_pair(i: int) -> None:
        key, jid = "lock:%d" % i, "jid-%d" % i
        assert c.lock(key, jid, ttl=60, type="until_executed", meta=META) is not None
        assert c.unlock(key, jid)

    def client_pipe(start: int, n: int) -> None:
        p = c.pipeline()
        for i in range(start, start + n):
            key, jid = "lock:%d" % i, "jid-%d" % i
            p.lock(key, jid, ttl=60, type="until_executed", meta=META)
            p.unlock(key, jid)
        assert all(p.execute())

    def raw_pair(i: int) -> None:
        key, jid = "lock:%d" % i, "jid-%d" % i
        assert r.execute_command("UNIQUE.LOCK", key, jid, "TTL", 60000, "TYPE", "until_executed",
                                 "META", meta_text) is not None
        assert r.execute_command("UNIQUE.UNLOCK", key, jid) == 1

    def raw_pipe(start: int, n: int) -> None:
        p = r.pipeline(transaction=False)
        for i in range(start, start + n):
            key, jid = "lock:%d" % i, "jid-%d" % i
            p.execute_command("UNIQUE.LOCK", key, jid, "TTL", 60000, "TYPE", "until_executed", "META", meta_text)
            p.execute_command("UNIQUE.UNLOCK", key, jid)
        assert all(p.execute())

    def lua_args(i: int):
        digest = "%012d" % i
        return ("uniquejobs:%s:LOCKED" % digest, "uniquejobs:digests", "jid-%d" % i, digest)

    def lua_pair(i: int, metrics: bool = True) -> None:
        locked, digests, jid, digest = lua_args(i)
        now = time.time()
        assert r.evalsha(lock_sha, 2, locked, digests, jid, 1, lua_json(now), int(now * 1000), digest, 60000)
        if metrics:
            r.hincrby(metrics_key(), "until_executed|acquired", 1)
        assert r.evalsha(unlock_sha, 2, locked, digests, jid, digest) == 1
        if metrics:
            r.hincrby(metrics_key(), "until_executed|released", 1)

    def lua_pipe(start: int, n: int, metrics: bool = True) -> None:
        p = r.pipeline(transaction=False)
        for i in range(start, start + n):
            locked, digests, jid, digest = lua_args(i)
            now = time.time()
            p.evalsha(lock_sha, 2, locked, digests, jid, 1, lua_json(now), int(now * 1000), digest, 60000)
            if metrics:
                p.hincrby(metrics_key(), "until_executed|acquired", 1)
            p.evalsha(unlock_sha, 2, locked, digests, jid, digest)
            if metrics:
                p.hincrby(metrics_key(), "until_executed|released", 1)
        p.execute()

    return {
        "redis_unique.Client": (client_pair, client_pipe),
        "raw UNIQUE.* via redis-py": (raw_pair, raw_pipe),
        "Lua + metrics HINCRBY": (lua_pair, lua_pipe),
        "Lua, no metrics": (lambda i: lua_pair(i, False), lambda s, n: lua_pipe(s, n, False)),
    }


def throughput(r: redis.Redis):
    """Contenders interleaved pair by pair (batch by batch when pipelined), in
    alternating order, each call timed on its own: the noise of a shared
    machine falls on every contender alike. The median of ROUNDS rounds."""
    cs = contenders(r)
    names = list(cs)
    out = {}
    for pipelined in (False, True):
        for name in names:  # warm-up: scripts cached, connections open
            cs[name][0](10 ** 9)
        runs = {name: [] for name in names}
        for _ in range(ROUNDS):
            r.flushall()
            spent = dict.fromkeys(names, 0.0)
            steps = range(0, PIPE_PAIRS, PIPELINE) if pipelined else range(PAIRS)
            for n, i in enumerate(steps):
                for name in (names if n % 2 == 0 else names[::-1]):
                    pair, pipe = cs[name]
                    t0 = time.perf_counter()
                    if pipelined:
                        pipe(i, PIPELINE)
                    else:
                        pair(i)
                    spent[name] += time.perf_counter() - t0
            for name in names:
                runs[name].append((PIPE_PAIRS if pipelined else PAIRS) / spent[name])
        out["pipelined" if pipelined else "one by one"] = {n: round(statistics.median(v)) for n, v in runs.items()}
    return out


def renewal(server: Server):
    """LOCKS locks held with ttl=1 s (a renewal every 1/3 s each) for RENEW_SECONDS."""
    r = redis.Redis(port=server.port)
    r.flushall()
    r.config_resetstat()
    locks = [Lock(redis.Redis(port=server.port), "held:%d" % i, ttl=1.0) for i in range(LOCKS)]
    for lock in locks:
        lock.acquire()
    cpu0, t0 = time.process_time(), time.perf_counter()
    base = sum(lock.renewals for lock in locks)
    time.sleep(RENEW_SECONDS)
    renewals = sum(lock.renewals for lock in locks) - base
    cpu1, t1 = time.process_time(), time.perf_counter()
    lost = sum(lock.lost for lock in locks)
    stats = r.info("commandstats").get("cmdstat_unique.lock", {})
    for lock in locks:
        lock.release()
    elapsed = t1 - t0
    return {
        "locks": LOCKS,
        "seconds": round(elapsed, 2),
        "renewals_per_second_per_lock": round(renewals / elapsed / LOCKS, 2),
        "renewals_per_second_total": round(renewals / elapsed, 1),
        "client_cpu_us_per_renewal": round((cpu1 - cpu0) / max(renewals, 1) * 1e6, 1),
        "server_usec_per_lock_call": stats.get("usec_per_call"),
        "lost": lost,
    }


def main() -> int:
    server = Server()
    started = time.time()
    try:
        r = redis.Redis(port=server.port)
        tp = throughput(r)
        ren = renewal(server)
        version = r.info("server")["redis_version"]
    finally:
        server.stop()
    print("redis-unique Python client: lock+unlock pairs/s through redis-py %s, one thread, median of %d rounds"
          % (redis.__version__, ROUNDS))
    print("%-28s %14s %14s" % ("contender", "one by one", "pipelined/%d" % PIPELINE))
    for name in tp["one by one"]:
        print("%-28s %14d %14d" % (name, tp["one by one"][name], tp["pipelined"][name]))
    lua = "Lua + metrics HINCRBY"
    ratios = {mode: {n: round(v / tp[mode][lua], 2) for n, v in tp[mode].items()} for mode in tp}
    for mode in tp:
        print("%s: redis_unique.Client %.2fx the Lua design with its metrics writes, %.2fx the Lua design without"
              % (mode, ratios[mode]["redis_unique.Client"],
                 tp[mode]["redis_unique.Client"] / tp[mode]["Lua, no metrics"]))
    print("Lock renewal at ttl=1 s, %(locks)d locks held %(seconds)s s: %(renewals_per_second_per_lock)s "
          "renewals/s per lock (%(renewals_per_second_total)s in all), %(client_cpu_us_per_renewal)s us client "
          "CPU per renewal, %(server_usec_per_lock_call)s us server time per UNIQUE.LOCK, %(lost)d lost" % ren)
    result = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "redis": version,
                    "python": platform.python_version(), "redis-py": redis.__version__},
        "settings": {"rounds": ROUNDS, "pairs": PAIRS, "pipelined_pairs": PIPE_PAIRS, "pipeline": PIPELINE},
        "pairs_per_second": tp,
        "ratio_to_lua_with_metrics": ratios,
        "renewal": ren,
        "load_average_after": os.getloadavg(),
        "seconds": round(time.time() - started, 1),
    }
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    with open(out / "latest.json", "w") as f:
        json.dump(result, f, indent=2)
    print("written to %s in %.0f s" % ((out / "latest.json").relative_to(ROOT), result["seconds"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
