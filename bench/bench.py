#!/usr/bin/env python3
"""make bench: redis-unique side by side with SET NX PX and with the Lua design.

Starts its own redis-server with the module (no persistence), runs
redis-benchmark for each contender, alternating contenders round by round and
reporting medians (these machines are shared and noisy: ratios matter more
than absolute figures), measures memory per lock, scaling, the reaper and the
blocking handoff, prints a table and writes bench/results/latest.json.

Environment: BENCH_ROUNDS (default 3), BENCH_REQUESTS (default 200000).
Needs only python3, redis-server and redis-benchmark (redis-tools).
"""

import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODULE = os.path.join(ROOT, "target", "release", "libredis_unique.so")
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
REQUESTS = int(os.environ.get("BENCH_REQUESTS", "200000"))
CLIENTS = 50
KEYSPACE = 1_000_000
POPULATED = 200_000

# The same information on both sides (see bench/README.md).
LUA_JSON = ('{"worker":"SyncUserJob","queue":"default","limit":1,"timeout":0,"ttl":60,'
            '"type":"until_executed","lock_args":[12345],"time":1700000000.123,"at":null}')
MODULE_META = '{"worker":"SyncUserJob","queue":"default","lock_args":[12345],"at":null}'


# ---- a minimal RESP client --------------------------------------------------

def encode(*args):
    parts = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(parts)


class Conn:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def _line(self):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("server closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        while len(self.buf) < n + 2:
            self.buf += self.sock.recv(1 << 20)
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def read(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            return RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self._exact(n)
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        raise ValueError("unexpected reply %r" % line)

    def send(self, *args):
        self.sock.sendall(encode(*args))

    def call(self, *args):
        self.send(*args)
        reply = self.read()
        if isinstance(reply, RuntimeError):
            raise reply
        return reply

    def pipeline(self, commands, batch=10_000):
        """Runs many commands, `batch` in flight at a time."""
        for start in range(0, len(commands), batch):
            chunk = commands[start:start + batch]
            self.sock.sendall(b"".join(encode(*c) for c in chunk))
            for _ in chunk:
                reply = self.read()
                if isinstance(reply, RuntimeError):
                    raise reply


# ---- the server ----------------------------------------------------------------

class Server:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="redis-unique-bench-")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir,
             "--save", "", "--appendonly", "no", "--logfile", "redis.log",
             "--enable-debug-command", "yes",
             "--loadmodule", MODULE],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 10
        while True:
            try:
                self.conn = Conn(self.port)
                self.conn.call("PING")
                break
            except (OSError, ConnectionError):
                if time.time() > deadline:
                    raise SystemExit("redis-server did not start; see %s/redis.log" % self.dir)
                time.sleep(0.05)

    def info(self, section):
        text = self.conn.call("INFO", section).decode()
        return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)

    def stop(self):
        self.proc.kill()
        self.proc.wait()


def benchmark(server, args, pipeline, requests=REQUESTS, keyspace=KEYSPACE, clients=CLIENTS):
    """One redis-benchmark run: requests per second, p50 and p99 in ms."""
    out = subprocess.run(
        ["redis-benchmark", "-p", str(server.port), "-n", str(requests), "-c", str(clients),
         "-P", str(pipeline), "-r", str(keyspace), "--csv", *map(str, args)],
        capture_output=True, text=True, check=True).stdout
    row = [line for line in out.splitlines() if line and not line.startswith('"test"')][-1]
    # The test name may hold quotes and commas (JSON): the 7 numbers are last.
    fields = [f.strip('"') for f in row.rsplit(",", 7)]
    return {"rps": float(fields[1]), "p50_ms": float(fields[4]), "p99_ms": float(fields[6])}


def median_of(runs):
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def compare(server, contenders, pipeline, prepare=None, **kw):
    """Alternates the contenders, ROUNDS times; the median run of each."""
    runs = {name: [] for name in contenders}
    for _ in range(ROUNDS):
        for name, args in contenders.items():
            server.conn.call("FLUSHALL")
            if prepare:
                prepare(server, name)
            runs[name].append(benchmark(server, args, pipeline, **kw))
    return {name: median_of(r) for name, r in runs.items()}


# ---- the contenders ---------------------------------------------------------

def lua_shas(server):
    shas = {}
    for name in ("lock", "unlock"):
        with open(os.path.join(ROOT, "bench", "lua", name + ".lua")) as f:
            shas[name] = server.conn.call("SCRIPT", "LOAD", f.read()).decode()
    return shas


def populate(server, name, n=POPULATED):
    """Every key the unlock/read benchmarks draw (0..n-1) holds a lock."""
    shas = lua_shas(server)
    now = int(time.time() * 1000)
    if name in ("UNIQUE.UNLOCK", "UNIQUE.LOCKEDBY"):
        cmds = [("UNIQUE.LOCK", "lock:%012d" % i, "job", "TTL", 600_000) for i in range(n)]
    elif name == "DEL":
        cmds = [("SET", "str:%012d" % i, "job", "PX", 600_000) for i in range(n)]
    else:  # the Lua layout
        cmds = [("EVALSHA", shas["lock"], 2, "uniquejobs:%012d:LOCKED" % i, "uniquejobs:digests",
                 "job", 1, LUA_JSON, now, "%012d" % i, 600_000) for i in range(n)]
    server.conn.pipeline(cmds)


def throughput(server):
    shas = lua_shas(server)
    now = int(time.time() * 1000)
    key = "lock:__rand_int__"
    results = {}
    for p in (1, 16):
        results["lock_vs_set", p] = compare(server, {
            "UNIQUE.LOCK": ["UNIQUE.LOCK", key, "job", "TTL", 60000],
            "SET NX PX": ["SET", "str:__rand_int__", "job", "NX", "PX", 60000],
        }, p)
        results["unlock_vs_del", p] = compare(server, {
            "UNIQUE.UNLOCK": ["UNIQUE.UNLOCK", key, "job"],
            "DEL": ["DEL", "str:__rand_int__"],
        }, p, prepare=populate, keyspace=POPULATED)
        lua = lua_shas(server)
        results["lock_vs_lua", p] = compare(server, {
            "UNIQUE.LOCK META": ["UNIQUE.LOCK", key, "job", "TTL", 60000, "TYPE", "until_executed",
                                 "META", MODULE_META],
            "Lua lock": ["EVALSHA", lua["lock"], 2, "uniquejobs:__rand_int__:LOCKED", "uniquejobs:digests",
                         "job", 1, LUA_JSON, now, "__rand_int__", 60000],
        }, p, prepare=lambda s, n: lua_shas(s))
        results["unlock_vs_lua", p] = compare(server, {
            "UNIQUE.UNLOCK": ["UNIQUE.UNLOCK", key, "job"],
            "Lua unlock": ["EVALSHA", shas["unlock"], 2, "uniquejobs:__rand_int__:LOCKED",
                           "uniquejobs:digests", "job", "__rand_int__"],
        }, p, prepare=lambda s, n: populate(s, n), keyspace=POPULATED)
        results["lockedby_vs_hkeys", p] = compare(server, {
            "UNIQUE.LOCKEDBY": ["UNIQUE.LOCKEDBY", key],
            "HKEYS": ["HKEYS", "uniquejobs:__rand_int__:LOCKED"],
        }, p, prepare=lambda s, n: populate(s, n), keyspace=POPULATED)
    return results


def contention(server):
    shas = lua_shas(server)
    now = int(time.time() * 1000)
    return compare(server, {
        "UNIQUE.LOCK LIMIT 1": ["UNIQUE.LOCK", "hot", "job:__rand_int__", "LIMIT", 1, "TTL", 60000],
        "UNIQUE.LOCK LIMIT 10": ["UNIQUE.LOCK", "hot", "job:__rand_int__", "LIMIT", 10, "TTL", 60000],
        "Lua lock LIMIT 1": ["EVALSHA", shas["lock"], 2, "hot", "uniquejobs:digests", "job:__rand_int__",
                             1, LUA_JSON, now, "hot", 60000],
    }, 1, prepare=lambda s, n: lua_shas(s))


def memory(server):
    shas = lua_shas(server)
    now = int(time.time() * 1000)
    n = POPULATED
    layouts = {
        "module, no META": lambda i: ("UNIQUE.LOCK", "lock:%012d" % i, "jid-%012d" % i, "TTL", 600_000),
        "module, same information as Lua": lambda i: (
            "UNIQUE.LOCK", "lock:%012d" % i, "jid-%012d" % i, "TTL", 600_000, "TYPE", "until_executed",
            "META", MODULE_META),
        "module, the Lua JSON as META": lambda i: (
            "UNIQUE.LOCK", "lock:%012d" % i, "jid-%012d" % i, "TTL", 600_000, "TYPE", "until_executed",
            "META", LUA_JSON),
        "Lua layout": lambda i: (
            "EVALSHA", shas["lock"], 2, "uniquejobs:%012d:LOCKED" % i, "uniquejobs:digests",
            "jid-%012d" % i, 1, LUA_JSON, now, "%012d" % i, 600_000),
        "SET key jid PX": lambda i: ("SET", "str:%012d" % i, "jid-%012d" % i, "PX", 600_000),
    }
    out = {}
    for name, make in layouts.items():
        server.conn.call("FLUSHALL")
        shas = lua_shas(server)
        before = int(server.info("memory")["used_memory"])
        server.conn.pipeline([make(i) for i in range(n)])
        after = int(server.info("memory")["used_memory"])
        out[name] = round((after - before) / n, 1)
    server.conn.call("FLUSHALL")
    return out


def wait_rehashed(server, limit=10.0):
    """Waits until the main dict of db 0 is not rehashing (DEBUG HTSTATS)."""
    deadline = time.time() + limit
    while b"rehashing target" in server.conn.call("DEBUG", "HTSTATS", 0) and time.time() < deadline:
        time.sleep(0.05)


def scaling(server):
    """LOCK/UNLOCK throughput with few and with many other locks present, and
    SET NX PX/DEL in the same conditions as the reference. Each measurement
    follows an unmeasured pass that grows the keyspace to its size and lets
    Redis finish rehashing, so that no contender pays for a dict resize; the
    order of the contenders alternates round by round."""
    tests = [("lock_rps", ["UNIQUE.LOCK", "s:__rand_int__", "job", "TTL", 60000]),
             ("unlock_rps", ["UNIQUE.UNLOCK", "s:__rand_int__", "job"]),
             ("set_rps", ["SET", "t:__rand_int__", "job", "NX", "PX", 60000]),
             ("del_rps", ["DEL", "t:__rand_int__"])]
    runs = {1_000: [], 1_000_000: []}
    for round_ in range(ROUNDS):
        for others in runs:
            server.conn.call("FLUSHALL")
            server.conn.pipeline([("UNIQUE.LOCK", "other:%d" % i, "job") for i in range(others)])
            for _, args in tests:
                benchmark(server, args, 16, keyspace=100_000)
            wait_rehashed(server)
            row = {}
            for name, args in (tests if round_ % 2 == 0 else tests[2:] + tests[:2]):
                row[name] = benchmark(server, args, 16, keyspace=100_000)["rps"]
            runs[others].append(row)
    server.conn.call("FLUSHALL")
    return {others: median_of(r) for others, r in runs.items()}


def reaper(server):
    """The cost of a background tick and of UNIQUE.REAP 0 COUNT 100, with
    100,000 locks that each have one expired holder (the worst case: every key
    examined has something to remove)."""
    server.conn.call("CONFIG", "SET", "unique.reap-interval", 0)
    n = 100_000
    cmds = []
    for i in range(n):
        cmds.append(("UNIQUE.LOCK", "r:%d" % i, "live", "LIMIT", 0))
        cmds.append(("UNIQUE.LOCK", "r:%d" % i, "dead", "LIMIT", 0, "TTL", 1))
    server.conn.pipeline(cmds)
    time.sleep(0.05)
    server.conn.call("CONFIG", "SET", "slowlog-log-slower-than", 0)
    server.conn.call("CONFIG", "SET", "slowlog-max-len", 100_000)
    server.conn.call("SLOWLOG", "RESET")
    cursor = b"0"
    for _ in range(100):
        cursor = server.conn.call("UNIQUE.REAP", cursor, "COUNT", 100)[0]
    entries = server.conn.call("SLOWLOG", "GET", 100_000)
    reap = sorted(e[2] for e in entries if e[3][0].upper() == b"UNIQUE.REAP")
    server.conn.call("CONFIG", "SET", "slowlog-log-slower-than", 10_000)
    ticks = []
    server.conn.call("CONFIG", "SET", "unique.reap-interval", 100)
    last = None
    while len(ticks) < 30:
        time.sleep(0.1)
        now = int(server.info("unique")["unique_reaper_last_tick_usec"])
        if now != last:
            ticks.append(now)
            last = now
    server.conn.call("CONFIG", "SET", "unique.reap-interval", 100)
    server.conn.call("FLUSHALL")
    return {
        "reap_count_100_usec": {"p50": statistics.median(reap), "max": reap[-1], "calls": len(reap)},
        "reaper_tick_usec": {"p50": statistics.median(ticks), "max": max(ticks), "ticks": len(ticks)},
    }


def handoff(server, handoffs=2000):
    """UNLOCK to the waiter's reply: one client holds, the other waits; the
    holder unlocks and the clock stops when the waiter's token arrives. Then
    they swap."""
    a, b, watch = Conn(server.port), Conn(server.port), Conn(server.port)
    a.call("UNIQUE.LOCK", "handoff", "a")
    holder, waiter, names = a, b, {id(a): "a", id(b): "b"}
    lat = []
    for _ in range(handoffs):
        waiter.send("UNIQUE.LOCK", "handoff", names[id(waiter)], "WAIT", 10_000)
        while int(watch.call("INFO", "unique").decode().split("unique_waiting:")[1].split()[0]) < 1:
            pass
        start = time.perf_counter()
        holder.send("UNIQUE.UNLOCK", "handoff", names[id(holder)])
        token = waiter.read()
        lat.append((time.perf_counter() - start) * 1e6)
        assert isinstance(token, int), token
        assert holder.read() == 1
        holder, waiter = waiter, holder
    lat.sort()
    return {"handoffs": handoffs, "p50_us": round(lat[len(lat) // 2], 1),
            "p99_us": round(lat[int(len(lat) * 0.99)], 1)}


# ---- report -------------------------------------------------------------------

def main():
    if not os.path.exists(MODULE):
        raise SystemExit("build the module first: make build")
    started = time.time()
    server = Server()
    try:
        print("redis-unique benchmark: %d rounds, %d requests, %d clients (medians)" % (ROUNDS, REQUESTS, CLIENTS))
        tp = throughput(server)
        hot = contention(server)
        mem = memory(server)
        scale = scaling(server)
        reap = reaper(server)
        hand = handoff(server)
        version = server.info("server")["redis_version"]
    finally:
        server.stop()

    def ratio(a, b):
        return round(a / b, 2) if b else None

    rows = []
    for (test, p), res in sorted(tp.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        (n1, r1), (n2, r2) = list(res.items())
        rows.append((test, p, n1, r1, n2, r2, ratio(r1["rps"], r2["rps"])))
    print()
    print("%-18s %3s  %-18s %10s %8s  %-14s %10s %8s  %6s" % (
        "comparison", "P", "module", "req/s", "p99 ms", "other", "req/s", "p99 ms", "ratio"))
    for test, p, n1, r1, n2, r2, x in rows:
        print("%-18s %3d  %-18s %10.0f %8.3f  %-14s %10.0f %8.3f  %5.2fx" % (
            test, p, n1, r1["rps"], r1["p99_ms"], n2, r2["rps"], r2["p99_ms"], x))
    print()
    print("contention (one key, pipeline 1):")
    for name, r in hot.items():
        print("  %-22s %10.0f req/s  p50 %.3f ms  p99 %.3f ms" % (name, r["rps"], r["p50_ms"], r["p99_ms"]))
    print()
    print("memory per lock (%d locks, used_memory delta):" % POPULATED)
    for name, b in mem.items():
        print("  %-34s %7.1f bytes" % (name, b))
    print()
    few, many = scale[1_000], scale[1_000_000]
    print("scaling (pipeline 16), from 1,000 to 1,000,000 other locks:")
    for name, label in (("lock_rps", "UNIQUE.LOCK"), ("unlock_rps", "UNIQUE.UNLOCK"),
                        ("set_rps", "SET NX PX (reference)"), ("del_rps", "DEL (reference)")):
        print("  %-22s %10.0f -> %10.0f req/s (%.2fx)" % (
            label, few[name], many[name], ratio(many[name], few[name])))
    print("reaper tick (batch 100, all expired): p50 %(p50)s us, max %(max)s us" % reap["reaper_tick_usec"])
    print("UNIQUE.REAP 0 COUNT 100 (all expired): p50 %(p50)s us, max %(max)s us" % reap["reap_count_100_usec"])
    print("blocking handoff (UNLOCK to the waiter's reply): p50 %(p50_us)s us, p99 %(p99_us)s us "
          "over %(handoffs)d handoffs" % hand)

    result = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "redis": version,
                    "cpu": cpu_model()},
        "settings": {"rounds": ROUNDS, "requests": REQUESTS, "clients": CLIENTS, "keyspace": KEYSPACE},
        "throughput": [{"comparison": t, "pipeline": p, n1: r1, n2: r2, "ratio": x}
                       for t, p, n1, r1, n2, r2, x in rows],
        "contention": hot,
        "memory_bytes_per_lock": mem,
        "scaling": {str(k): v for k, v in scale.items()},
        "reaper": reap,
        "handoff": hand,
        "seconds": round(time.time() - started, 1),
    }
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    path = os.path.join(ROOT, "bench", "results", "latest.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=2)
    print("\nwritten to %s in %.0f s" % (os.path.relpath(path, ROOT), result["seconds"]))


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


if __name__ == "__main__":
    sys.exit(main())
