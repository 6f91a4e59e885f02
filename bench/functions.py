"""The Functions library against the module and the Lua designs of bench/lua, on the same
server in the same run: LOCK (a grant), a renewal, a denial and UNLOCK, one client,
pipelined in batches of 100 (requests a second) and one at a time (µs a call, median);
then the server's own time a call of each (INFO commandstats, usec_per_call: what a call
costs the server, without the client's share, on a machine that others share). The library
runs twice: with its counters (`unique:metrics`, declared on a server that is not a
cluster) and without them, as on a cluster, which is the same work as the designs'.
Then the same on one key of 1,000 holders (LIMIT 1000): a holder's renewal, a denial at the
limit, and a grant with its release beside 999 holders (pairs a second).
The server loads the module and the library (FUNCTION LOAD), so each design runs beside the
others. FUNCTIONS_BENCH_N sets the calls per cell (default 20000; the 1,000-holder cells run a
tenth of it, FUNCTIONS_BENCH_MANY_N).

    python3 bench/functions.py            (needs redis-py: clients/python/.venv/bin/python)
"""

from __future__ import annotations

import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "clients" / "python" / "src"))

import redis  # noqa: E402

from redis_unique._functions import METRICS_KEY, wake_key  # noqa: E402

N = int(os.environ.get("FUNCTIONS_BENCH_N", "20000"))
MANY_N = int(os.environ.get("FUNCTIONS_BENCH_MANY_N", str(max(N // 10, 100))))
HOLDERS = 1000
MODULE = os.environ.get("REDIS_UNIQUE_MODULE", str(ROOT / "target" / "release" / "libredis_unique.so"))
SERVER = os.environ.get("REDIS_SERVER", "redis-server")
LUA = ROOT / "bench" / "lua"


def start() -> tuple:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    d = tempfile.mkdtemp(prefix="redis-unique-fnbench-")
    proc = subprocess.Popen([SERVER, "--port", str(port), "--bind", "127.0.0.1", "--dir", d, "--save", "",
                             "--appendonly", "no", "--loadmodule", MODULE], stdout=subprocess.DEVNULL)
    r = redis.Redis(port=port)
    deadline = time.monotonic() + 60
    while True:
        try:
            r.ping()
            break
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    return proc, d, r


def designs(r: redis.Redis) -> dict:
    lock_sha = r.script_load((LUA / "lock.lua").read_text())
    unlock_sha = r.script_load((LUA / "unlock.lua").read_text())
    sem_sha = r.script_load((LUA / "semaphore_acquire.lua").read_text())
    refresh_sha = r.script_load((LUA / "semaphore_refresh.lua").read_text())

    def now() -> str:
        return str(int(time.time() * 1000))

    def lib(fn_name: str, key: str, *args):
        return ("FCALL", fn_name, 3, key, wake_key(key), METRICS_KEY) + args

    def bare(fn_name: str, key: str, *args):
        return ("FCALL", fn_name, 2, key, wake_key(key)) + args

    # Each design: `lock` (LIMIT 1), `unlock`, and for the 1,000-holder key `many` (a LOCK
    # with LIMIT n) and `renew` (a holder's renewal: the LOCK again, or the design's refresh).
    return {
        "module": {
            "lock": lambda k, j: ("UNIQUE.LOCK", k, j, "TTL", 60000),
            "unlock": lambda k, j: ("UNIQUE.UNLOCK", k, j),
            "many": lambda k, j, n: ("UNIQUE.LOCK", k, j, "LIMIT", n, "TTL", 60000),
        },
        "library": {
            "lock": lambda k, j: lib("unique_lock", k, j, "TTL", 60000),
            "unlock": lambda k, j: lib("unique_unlock", k, j),
            "many": lambda k, j, n: lib("unique_lock", k, j, "LIMIT", n, "TTL", 60000),
        },
        "library, no counters (as on a cluster)": {
            "lock": lambda k, j: bare("unique_lock", k, j, "TTL", 60000),
            "unlock": lambda k, j: bare("unique_unlock", k, j),
            "many": lambda k, j, n: bare("unique_lock", k, j, "LIMIT", n, "TTL", 60000),
        },
        "sidekiq-unique-jobs v9 (bench/lua)": {
            "lock": lambda k, j: ("EVALSHA", lock_sha, 2, k, "uniquejobs:digests", j, 1, "{}", now(), k, 60000),
            "unlock": lambda k, j: ("EVALSHA", unlock_sha, 2, k, "uniquejobs:digests", j, k),
            "many": lambda k, j, n: ("EVALSHA", lock_sha, 2, k, "uniquejobs:digests", j, n, "{}", now(), k, 60000),
        },
        "redis-semaphore sorted set (bench/lua)": {
            "lock": lambda k, j: ("EVALSHA", sem_sha, 1, k, 1, j, 60000, now()),
            "unlock": lambda k, j: ("ZREM", k, j),
            "many": lambda k, j, n: ("EVALSHA", sem_sha, 1, k, n, j, 60000, now()),
            "renew": lambda k, j, n: ("EVALSHA", refresh_sha, 1, k, n, j, 60000, now()),
        },
    }


# The commands the cells send; a script's own calls are counted apart (and inside its time).
OUTER = ("cmdstat_fcall", "cmdstat_evalsha", "cmdstat_unique.lock", "cmdstat_unique.unlock", "cmdstat_zrem")


def server_usec(r: redis.Redis) -> float:
    """µs the server spent a call sent since the last CONFIG RESETSTAT."""
    stats = r.info("commandstats")
    spent = sum(v["usec"] for k, v in stats.items() if k in OUTER)
    calls = sum(v["calls"] for k, v in stats.items() if k in OUTER)
    return spent / max(calls, 1)


def pipelined(r: redis.Redis, build, n: int, usec: list) -> float:
    r.config_resetstat()
    start = time.perf_counter()
    done = 0
    while done < n:
        pipe = r.pipeline(transaction=False)
        for i in range(done, min(done + 100, n)):
            pipe.execute_command(*build(i))
        pipe.execute()
        done += 100
    rate = n / (time.perf_counter() - start)
    usec.append(server_usec(r))
    return rate


def single(r: redis.Redis, build, n: int) -> float:
    times = []
    for i in range(n):
        t = time.perf_counter()
        r.execute_command(*build(i))
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6


def many_holders(r: redis.Redis, name: str, cmd: dict) -> tuple:
    """Renewal, denial at LIMIT and grant+release on one key of 1,000 holders."""
    r.flushall()
    key = "m:%s" % name[:3]
    many, unlock = cmd["many"], cmd["unlock"]
    renew = cmd.get("renew", many)
    pipe = r.pipeline(transaction=False)
    for i in range(HOLDERS):
        pipe.execute_command(*many(key, "j%d" % i, HOLDERS))
    pipe.execute()
    usec: list = []
    renewal = pipelined(r, lambda i: renew(key, "j%d" % (i % HOLDERS), HOLDERS), MANY_N, usec)
    denial = pipelined(r, lambda i: many(key, "other", HOLDERS), MANY_N, usec)
    r.execute_command(*unlock(key, "j%d" % (HOLDERS - 1)))
    pairs = pipelined(r, lambda i: unlock(key, "x") if i % 2 else many(key, "x", HOLDERS), 2 * MANY_N, usec) / 2
    return renewal, denial, pairs, usec


def main() -> None:
    proc, d, r = start()
    try:
        r.execute_command("FUNCTION", "LOAD", "REPLACE", (ROOT / "functions" / "redis_unique.lua").read_text())
        rows = []
        for name, cmd in designs(r).items():
            r.flushall()
            lock, unlock = cmd["lock"], cmd["unlock"]
            usec: list = []
            grant = pipelined(r, lambda i: lock("b:%s:%d" % (name[:3], i), "j"), N, usec)
            renew = pipelined(r, lambda i: lock("b:%s:%d" % (name[:3], i), "j"), N, usec)
            deny = pipelined(r, lambda i: lock("b:%s:%d" % (name[:3], i), "other"), N, usec)
            release = pipelined(r, lambda i: unlock("b:%s:%d" % (name[:3], i), "j"), N, usec)
            one = single(r, lambda i: lock("s:%s:%d" % (name[:3], i), "j"), min(N, 5000))
            rows.append((name, grant, renew, deny, release, one, usec))
        many_rows = [(name, *many_holders(r, name, cmd)) for name, cmd in designs(r).items()]
        version = r.info("server").get("redis_version")
        print("Redis %s, one client, %d calls a cell, pipelined by 100 (calls/s); one at a time (median µs)" % (version, N))
        print("| design | grant/s | renewal/s | denial/s | unlock/s | grant, one at a time (µs) |")
        print("| --- | ---: | ---: | ---: | ---: | ---: |")
        for name, *cells, _ in rows:
            print("| %s | %s |" % (name, " | ".join(("%.0f" % c) if i < 4 else ("%.1f" % c) for i, c in enumerate(cells))))
        print()
        print("The server's time a call (INFO commandstats usec_per_call, µs), pipelined")
        print("| design | grant | renewal | denial | unlock |")
        print("| --- | ---: | ---: | ---: | ---: |")
        for name, *_, usec in rows:
            print("| %s | %s |" % (name, " | ".join("%.1f" % u for u in usec)))
        print()
        print("One key of %d holders (LIMIT %d), %d calls a cell, pipelined by 100: calls/s, then the server's µs a call"
              % (HOLDERS, HOLDERS, MANY_N))
        print("| design | renewal/s | denial/s | grant+release beside %d (pairs/s) | µs renewal | µs denial | µs grant or release |"
              % (HOLDERS - 1))
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        for name, renewal, denial, pairs, usec in many_rows:
            print("| %s | %.0f | %.0f | %.0f | %s |" % (name, renewal, denial, pairs, " | ".join("%.1f" % u for u in usec)))
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
