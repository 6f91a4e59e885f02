#!/usr/bin/env python3
"""make bench: redis-unique side by side with SET NX PX and with the Lua design.

Starts its own redis-server with the module (no persistence), drives it with
bench/loadgen.rs (target/release/examples/loadgen: many connections,
pipelining, and a sequence number in each key so that every grant is on a
fresh key and every release finds its lock), alternating contenders round by
round and reporting medians (these machines are shared and noisy: ratios
matter more than absolute figures). Every contender starts from the same
keyspace (FLUSHALL, then the same number of keys when it releases or reads),
so keyspace growth and rehashing fall on all alike. A rate-limited LOCK runs against
redis-cell's GCRA in Lua (bench/lua/gcra.lua). Then the same LOCK/UNLOCK
vs SET NX PX/DEL comparison on a primary with one replica and AOF (appendfsync
everysec), memory per lock, scaling, the reaper and the blocking handoff; it
prints a table and writes bench/results/latest.json.

Environment: BENCH_MODULE (the module measured; default the profile-guided build of
make build-pgo), BENCH_ROUNDS (default 5), BENCH_REQUESTS (default 200000; half
that without pipelining, where the round trip sets the pace),
BENCH_SCALE=1 (make bench-scale: only the scale test, with 10,000,000 locks
present against 1,000, written to bench/results/scale.json), BENCH_SERVERS (a
space-separated list of the servers `make test-compat` builds, e.g.
"redis-7.2.6 redis-8.0.6 valkey-8.0.1 valkey-9.1.2", or "all": after the full
run on the redis-server on the PATH, the throughput and memory comparisons on
each of them too, a table per server, in bench/results/servers.json; the
servers are built once by ../shared/servers/build.sh, SERVERS_DIR to change).
Needs python3, redis-server and the loadgen example (make bench builds it).
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
# The module measured: the profile-guided build that make dist ships (make build-pgo);
# BENCH_MODULE=target/release/libredis_unique.so measures the plain release build.
MODULE = os.path.abspath(os.environ.get("BENCH_MODULE") or os.path.join(
    ROOT, "target", "pgo", "libredis_unique.so"))
LOADGEN = os.path.join(ROOT, "target", "release", "examples", "loadgen")
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "5"))
# The server binary every Server starts: Debian's by default, each of
# BENCH_SERVERS in turn.
SERVER_BINARY = "redis-server"
COMPAT_SERVERS = ["redis-7.2.6", "redis-8.0.6", "valkey-8.0.1", "valkey-9.1.2"]
SERVERS_DIR = os.environ.get("SERVERS_DIR", os.path.join(ROOT, "..", "shared", "servers"))


def built_server(name):
    """The path of server `name` (redis-8.0.6, valkey-9.1.2, ...), built from SERVERS_DIR
    first if it is not cached, under the lock the CI's and the test suites' builds take."""
    out = subprocess.run([os.path.join(ROOT, "scripts", "locked-build"), name],
                         env={**os.environ, "SERVERS_DIR": SERVERS_DIR},
                         capture_output=True, text=True, check=True).stdout
    return out.strip().splitlines()[-1]

REQUESTS = int(os.environ.get("BENCH_REQUESTS", "200000"))
CLIENTS = 50
POPULATED = 200_000

# The same information on both sides: the Lua design's JSON holds the lock's type,
# limit, TTL and time, which the module keeps natively (TYPE, LIMIT, the lease and its
# acquired_at), so the module's META carries only the rest.
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
    """A redis-server with the module: no persistence, or AOF (appendfsync
    everysec) when `aof`; a replica of `primary` when given."""

    def __init__(self, aof=False, primary=None, modules=(), wrapper=()):
        self.dir = tempfile.mkdtemp(prefix="redis-unique-bench-")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        args = [*wrapper, SERVER_BINARY, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir,
                "--save", "", "--logfile", "redis.log", "--enable-debug-command", "yes",
                "--loadmodule", MODULE]
        for module in modules:  # more modules (the floor of bench/floor.py)
            args += ["--loadmodule", module]
        if aof:
            # No automatic rewrite: a fork in the middle of one contender's run
            # would fall on it alone.
            args += ["--appendonly", "yes", "--appendfsync", "everysec",
                     "--auto-aof-rewrite-percentage", "0"]
        else:
            args += ["--appendonly", "no"]
        if primary:
            args += ["--replicaof", "127.0.0.1", str(primary.port)]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # A server under valgrind (bench/floor.py) takes longer to start.
        deadline = time.time() + (60 if wrapper else 10)
        while True:
            try:
                self.conn = Conn(self.port)
                self.conn.call("PING")
                break
            except (OSError, ConnectionError):
                if time.time() > deadline:
                    raise SystemExit("redis-server did not start; see %s/redis.log" % self.dir)
                time.sleep(0.05)
        if primary:
            while self.info("replication").get("master_link_status") != "up":
                if time.time() > deadline:
                    raise SystemExit("the replica did not connect; see %s/redis.log" % self.dir)
                time.sleep(0.05)

    def info(self, section):
        text = self.conn.call("INFO", section).decode()
        return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)

    def flush(self):
        """An empty keyspace, on the replica too when there is one. SYNC: Valkey frees a
        plain FLUSHALL on a background thread, which would run beside the next measurement."""
        self.conn.call("FLUSHALL", "SYNC")
        if self.replicas():
            self.conn.call("WAIT", 1, 10_000)

    def replicas(self):
        return int(self.info("replication").get("connected_slaves", 0))

    def stop(self):
        self.proc.kill()
        self.proc.wait()


# ---- load -----------------------------------------------------------------------

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    """CPU time of process `pid`'s main thread so far (the one that runs
    commands), in nanoseconds from the scheduler where the kernel keeps them:
    the user + system times of /proc/PID/stat count clock ticks, 10 ms each,
    a tenth of a 100,000-request run's time."""
    try:
        with open("/proc/%d/schedstat" % pid) as f:
            return int(f.read().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        pass
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def load(server, args, pipeline, requests, start=0, clients=CLIENTS, cycle=0):
    """One loadgen run; `{}` in `args` is the request's sequence number, from
    `start`. Requests per second, p50 and p99 in ms, the server's CPU time per
    request in µs (steadier than throughput on a shared machine: other
    processes take turns on the cores, not cycles from each request) and the
    replies by kind."""
    cpu_before = cpu_seconds(server.proc.pid)
    out = subprocess.run(
        [LOADGEN, "--port", str(server.port), "--clients", str(clients), "--pipeline", str(pipeline),
         "--requests", str(requests), "--from", str(start), "--cycle", str(cycle), "--", *map(str, args)],
        capture_output=True, text=True, check=True).stdout
    result = json.loads(out)
    result["cpu_us"] = round((cpu_seconds(server.proc.pid) - cpu_before) * 1e6 / requests, 3)
    if result["replies"]["error"]:
        raise SystemExit("%s: %d errors, the first: %s" % (
            " ".join(map(str, args)), result["replies"]["error"], result["first_error"]))
    return result


def fill(server, args, n, start=0):
    """Runs `args` for `n` sequence numbers, fast and unmeasured."""
    if n:
        load(server, args, 64, n, start=start, clients=8)


def requests_for(pipeline):
    # Without pipelining the round trip sets the pace: half the requests.
    return REQUESTS if pipeline > 1 else REQUESTS // 2


def median_of(runs):
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


# What every reply of a run must be, so that the run did what it claims.
def grants(r):  # a token, "OK" or a jid: never a null (denied)
    return r["null"] == 0 and r["zero"] == 0


def releases(r):  # every release found its lock
    return r["zero"] == 0 and r["null"] == 0


def anything(r):
    return True


def ab_builds(usage):
    """The two builds and the number of pairs an A/B script was given
    (`A.so B.so [pairs]`, 5 pairs by default); `usage` when they are not."""
    if len(sys.argv) < 3:
        raise SystemExit(usage)
    return sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 5


def alternate(a, b, pairs, run):
    """`run(module)` for build `a` and build `b` in turn, `pairs` times each,
    the order reversed every other pair so that neither always goes first on
    a machine whose speed drifts: yields (module, what run returned)."""
    for i in range(pairs):
        for module in (a, b) if i % 2 == 0 else (b, a):
            yield module, run(module)


def compare(server, contenders, pipeline, **kw):
    """Alternates the contenders, ROUNDS times, the order reversed every other
    round; the median run of each. A contender is (args, prepare, check) and
    maybe a dict of its own `load` arguments: `prepare(server, n)` builds the
    keyspace it starts from after a FLUSHALL, `check(replies)` that each
    request did what is measured."""
    runs = {name: [] for name in contenders}
    n = requests_for(pipeline)
    for round_ in range(ROUNDS):
        order = list(contenders.items())
        for name, (args, prepare, check, *own) in (order if round_ % 2 == 0 else order[::-1]):
            server.flush()
            if prepare:
                prepare(server, n)
            # A contender's own `load` arguments, if it has any, over the shared ones.
            r = load(server, args, pipeline, n, **{**kw, **(own[0] if own else {})})
            if not check(r["replies"]):
                raise SystemExit("%s did not do what is measured: %s" % (name, r["replies"]))
            runs[name].append({k: r[k] for k in ("rps", "p50_ms", "p99_ms", "cpu_us")})
    return {name: median_of(r) for name, r in runs.items()}


# ---- the contenders ---------------------------------------------------------

def lua_shas(server):
    shas = {}
    for name in ("lock", "unlock", "gcra"):
        with open(os.path.join(ROOT, "bench", "lua", name + ".lua")) as f:
            shas[name] = server.conn.call("SCRIPT", "LOAD", f.read()).decode()
    return shas


def lua_shas_named(server, name):
    with open(os.path.join(ROOT, "bench", "lua", name + ".lua")) as f:
        return server.conn.call("SCRIPT", "LOAD", f.read()).decode()


def lua_lock(sha, now, key="uniquejobs:{}:LOCKED", jid="job", limit=1, digest="{}", ttl=60_000):
    return ["EVALSHA", sha, 2, key, "uniquejobs:digests", jid, limit, LUA_JSON, now, digest, ttl]


def held(args):
    """A `prepare` that makes the n locks (or keys) that the measured run
    releases or reads, one per sequence number."""
    def prepare(server, n):
        fill(server, args(server), n)
    return prepare


def module_locks(server):
    return ["UNIQUE.LOCK", "lock:{}", "job", "TTL", 600_000]


def string_keys(server):
    return ["SET", "str:{}", "job", "PX", 600_000]


def lua_locks(server):
    return lua_lock(lua_shas(server)["lock"], int(time.time() * 1000), ttl=600_000)


def load_scripts(server, n):
    lua_shas(server)


def lock_vs_set(lock="UNIQUE.LOCK", set_="SET"):
    return {
        lock: (["UNIQUE.LOCK", "lock:{}", "job", "TTL", 60000], None, grants),
        set_: (["SET", "str:{}", "job", "NX", "PX", 60000], None, grants),
    }


def unlock_vs_del():
    return {
        "UNIQUE.UNLOCK": (["UNIQUE.UNLOCK", "lock:{}", "job"], held(module_locks), releases),
        "DEL": (["DEL", "str:{}"], held(string_keys), releases),
    }


def throughput(server):
    shas = lua_shas(server)
    now = int(time.time() * 1000)
    results = {}
    for p in (1, 16):
        results["lock_vs_set", p] = compare(server, lock_vs_set("UNIQUE.LOCK", "SET NX PX"), p)
        results["unlock_vs_del", p] = compare(server, unlock_vs_del(), p)
        results["lock_vs_lua", p] = compare(server, {
            "UNIQUE.LOCK META": (["UNIQUE.LOCK", "lock:{}", "job", "TTL", 60000, "TYPE", "until_executed",
                                  "META", MODULE_META], None, grants),
            "Lua lock": (lua_lock(shas["lock"], now), load_scripts, grants),
        }, p)
        results["unlock_vs_lua", p] = compare(server, {
            "UNIQUE.UNLOCK": (["UNIQUE.UNLOCK", "lock:{}", "job"], held(module_locks), releases),
            "Lua unlock": (["EVALSHA", shas["unlock"], 2, "uniquejobs:{}:LOCKED", "uniquejobs:digests",
                            "job", "{}"], held(lua_locks), releases),
        }, p)
        # A rate-limited grant (a holder and the key's GCRA state, one call)
        # against the rate alone in Lua, on fresh keys (every call allowed),
        # then on one key that refuses every call after the first.
        results["rate_vs_gcra", p] = compare(server, {
            "UNIQUE.LOCK RATE": (["UNIQUE.LOCK", "rate:{}", "job", "LIMIT", 0, "TTL", 60000,
                                  "RATE", 100, "PER", 1000], None, grants),
            "Lua GCRA": (["EVALSHA", shas["gcra"], 1, "gcra:{}", 0, 100, 1000, 1], load_scripts,
                         lambda r: r["zero"] == 0),
        }, p)
        results["rate_denied_vs_gcra", p] = compare(server, {
            "UNIQUE.LOCK RATE": (["UNIQUE.LOCK", "rate:hot", "job:{}", "LIMIT", 0, "TTL", 60000,
                                  "RATE", 1, "PER", 3_600_000], None, anything),
            "Lua GCRA": (["EVALSHA", shas["gcra"], 1, "gcra:hot", 0, 1, 3_600_000, 1], load_scripts,
                         anything),
        }, p)
        results["lockedby_vs_hkeys", p] = compare(server, {
            "UNIQUE.LOCKEDBY": (["UNIQUE.LOCKEDBY", "lock:{}"], held(module_locks), anything),
            "HKEYS": (["HKEYS", "uniquejobs:{}:LOCKED"], held(lua_locks), anything),
        }, p)
    return results


def replica_aof():
    """LOCK/UNLOCK against SET NX PX/DEL on a primary with AOF (appendfsync
    everysec) and one replica: the module's effect replication against SET's
    own propagation."""
    primary = Server(aof=True)
    replica = Server(primary=primary)
    try:
        results = {}
        for p in (1, 16):
            results["lock_vs_set", p] = compare(primary, lock_vs_set("UNIQUE.LOCK", "SET NX PX"), p)
            results["unlock_vs_del", p] = compare(primary, unlock_vs_del(), p)
        # The replica kept up: it holds what the primary holds.
        primary.conn.call("WAIT", 1, 10_000)
        deadline = time.time() + 10
        while primary.conn.call("DBSIZE") != replica.conn.call("DBSIZE") and time.time() < deadline:
            time.sleep(0.1)
        sizes = (primary.conn.call("DBSIZE"), replica.conn.call("DBSIZE"))
        if sizes[0] != sizes[1]:
            raise SystemExit("primary and replica differ: %s keys vs %s" % sizes)
        return results
    finally:
        replica.stop()
        primary.stop()


def contention(server):
    shas = lua_shas(server)
    now = int(time.time() * 1000)
    return compare(server, {
        "UNIQUE.LOCK LIMIT 1": (["UNIQUE.LOCK", "hot", "job:{}", "LIMIT", 1, "TTL", 60000], None, anything),
        "UNIQUE.LOCK LIMIT 10": (["UNIQUE.LOCK", "hot", "job:{}", "LIMIT", 10, "TTL", 60000], None, anything),
        "Lua lock LIMIT 1": (lua_lock(shas["lock"], now, key="hot", jid="job:{}", digest="hot"),
                             load_scripts, anything),
    }, 1)


def memory(server):
    n = POPULATED
    layouts = {
        "module, no META": lambda s: ("UNIQUE.LOCK", "lock:{}", "jid-{}", "TTL", 600_000),
        "module, same information as Lua": lambda s: (
            "UNIQUE.LOCK", "lock:{}", "jid-{}", "TTL", 600_000, "TYPE", "until_executed",
            "META", MODULE_META),
        "module, the Lua JSON as META": lambda s: (
            "UNIQUE.LOCK", "lock:{}", "jid-{}", "TTL", 600_000, "TYPE", "until_executed",
            "META", LUA_JSON),
        "Lua layout": lambda s: lua_lock(lua_shas(s)["lock"], int(time.time() * 1000), jid="jid-{}",
                                         ttl=600_000),
        "SET key jid PX": lambda s: ("SET", "str:{}", "jid-{}", "PX", 600_000),
        # What job systems send (`{}` is 12 digits): Sidekiq's 24 hex digits,
        # a UUID (Celery, redis-semaphore), kept packed in the lock.
        "module, a Sidekiq jid": lambda s: ("UNIQUE.LOCK", "lock:{}", "a1b2c3d4e5f6{}", "TTL", 600_000),
        "module, a UUID": lambda s: (
            "UNIQUE.LOCK", "lock:{}", "8f14e45f-ceea-467a-9575-{}", "TTL", 600_000),
        "SET key jid PX, a Sidekiq jid": lambda s: ("SET", "str:{}", "a1b2c3d4e5f6{}", "PX", 600_000),
    }
    out = {}
    for name, make in layouts.items():
        server.flush()
        args = make(server)
        before = int(server.info("memory")["used_memory"])
        fill(server, args, n)
        after = int(server.info("memory")["used_memory"])
        out[name] = round((after - before) / n, 1)
    server.flush()
    return out


# MANY_SIZES / MANY_COMMANDS narrow `make bench-many` to some sizes or commands.
HOLDER_SIZES = tuple(int(n) for n in os.environ.get("MANY_SIZES", "1 100 1000 10000 100000").split())
MANY_COMMANDS = os.environ.get("MANY_COMMANDS", "").split()  # none named: every one


def many_holders(server, sizes=HOLDER_SIZES, native=True):
    """One key of N holders (LIMIT 0, a lease that outlasts the run), against
    redis-semaphore's sorted set in Lua (ZREMRANGEBYSCORE, ZSCORE or ZCARD,
    ZADD, PEXPIRE; release is ZREM) holding the same N, for each N of `sizes`
    (pipeline 16): renewals of the N holders in scrambled order, a grant of a
    fresh jid alternating with its release (the key stays at N: a pair is two
    requests) and denials of fresh jids at LIMIT N. Every reply is checked:
    a renewal renews, a grant grants, a release releases, a denial denies.
    Beside each N > 1 the same command runs on a one-holder key in the same
    rounds, so that the ratio between them is not one of two moments of a
    shared machine. With `native`, beside each renewal, what Redis's own hash
    keeps at N of what it does with one field: HSET of an existing field in
    the same scrambled order (a hash table of N fields against a listpack of
    one), the least an update of one of N entries in one key can cost."""
    acquire, refresh = (lua_shas_named(server, name) for name in ("semaphore_acquire",
                                                                   "semaphore_refresh"))
    now, ttl, big = int(time.time() * 1000), 600_000, 1 << 40

    def module_key(n):
        def prepare(server, _):
            fill(server, ["UNIQUE.LOCK", "many", "job:{}", "LIMIT", 0, "TTL", ttl], n)
        return prepare

    def sorted_set(n):
        def prepare(server, _):
            lua_shas_named(server, "semaphore_acquire")
            lua_shas_named(server, "semaphore_refresh")
            fill(server, ["EVALSHA", acquire, 1, "sem", big, "job:{}", ttl, now], n)
        return prepare

    ones = lambda r: r["int"] == sum(r.values())
    # A renewal cycles through the key's holders: `cycle` N, 1 on the one-holder key.
    commands = {
        "renewal": lambda n: {
            "UNIQUE.LOCK": (["UNIQUE.LOCK", "many", "job:{}", "LIMIT", 0, "TTL", ttl],
                            module_key(n), lambda r: r["null"] == 0 and r["error"] == 0,
                            {"cycle": n}),
            "sorted set": (["EVALSHA", refresh, 1, "sem", big, "job:{}", ttl, now],
                           sorted_set(n), ones, {"cycle": n}),
        },
        "grant+release": lambda n: {
            "UNIQUE.LOCK/UNLOCK": (["UNIQUE.LOCK", "many", "g:{}", "LIMIT", 0, "TTL", ttl, "--and",
                                    "UNIQUE.UNLOCK", "many", "g:{}"], module_key(n),
                                   lambda r: r["null"] == 0 and r["zero"] == 0),
            "sorted set": (["EVALSHA", acquire, 1, "sem", big, "g:{}", ttl, now, "--and",
                            "ZREM", "sem", "g:{}"], sorted_set(n), lambda r: r["zero"] == 0),
        },
        "denial": lambda n: {
            "UNIQUE.LOCK": (["UNIQUE.LOCK", "many", "new:{}", "LIMIT", n, "TTL", ttl], module_key(n),
                            lambda r: r["null"] == sum(r.values())),
            "sorted set": (["EVALSHA", acquire, 1, "sem", n, "new:{}", ttl, now], sorted_set(n),
                           lambda r: r["zero"] == sum(r.values())),
        },
    }
    unknown = [op for op in MANY_COMMANDS if op not in commands]
    if unknown:
        raise SystemExit("MANY_COMMANDS: unknown %s (the commands: %s)" % (
            " ".join(unknown), " ".join(commands)))
    out = {}
    for n in sizes:
        out[n] = {}
        for op in MANY_COMMANDS or commands:
            contenders = commands[op](n)
            if n != 1:
                # The module's contender (the first) again, on a one-holder key.
                contenders[ONE_HOLDER] = next(iter(commands[op](1).values()))
            if native and op == "renewal":
                contenders[HASH] = hset(n)
                if n != 1:
                    contenders[HASH_ONE] = hset(1)
            out[n][op] = compare(server, contenders, 16)
    return out


ONE_HOLDER = "one holder"
HASH, HASH_ONE = "hash", "hash of one field"


def hset(n):
    """HSET of the fields of a hash of `n`, in scrambled order (`many_holders`)."""
    def prepare(server, _):
        fill(server, ["HSET", "h", "job:{}", "v"], n)
    return ["HSET", "h", "job:{}", "v"], prepare, lambda r: r["zero"] == sum(r.values()), {"cycle": n}


def print_many_holders(many):
    print("holders on one key (pipeline 16; req/s and the server's CPU µs per request; x1: "
          "against the same command on a one-holder key, zset: against the sorted set, each by "
          "req/s and by CPU µs, the steadier on a shared machine; hash x1: HSET of one of N "
          "fields against a hash of one field, by CPU µs, beside renewal):")
    print("%-8s %-14s %11s %6s %11s %6s %6s %6s %6s %6s %7s" % (
        "holders", "command", "module", "µs", "sorted set", "µs", "x1", "x1 µs", "zset", "zs µs",
        "hash x1"))
    rows = []
    for n, ops in sorted(many.items()):
        for op, res in ops.items():
            (_, m), (_, z) = list(res.items())[:2]
            # The one-holder key measured in the same rounds (itself at N = 1).
            m1 = res.get(ONE_HOLDER, m)
            row = {"holders": n, "command": op, "module": m, "sorted_set": z,
                   "vs_one_holder": ratio(m["rps"], m1["rps"]), "vs_sorted_set": ratio(m["rps"], z["rps"]),
                   "vs_one_holder_cpu": ratio(m1["cpu_us"], m["cpu_us"]),
                   "vs_sorted_set_cpu": ratio(z["cpu_us"], m["cpu_us"])}
            if HASH in res:
                # What Redis's own hash keeps at N, in the same rounds.
                h = res[HASH]
                h1 = res.get(HASH_ONE, h)
                row.update({"hash": h, "hash_one_field": h1,
                            "hash_vs_one_field": ratio(h["rps"], h1["rps"]),
                            "hash_vs_one_field_cpu": ratio(h1["cpu_us"], h["cpu_us"])})
            rows.append(row)
            # (A ratio is None when a run took less CPU than the clock counts.)
            x = ["%5.2fx" % r if r is not None else "    -" for r in (
                row["vs_one_holder"], row["vs_one_holder_cpu"], row["vs_sorted_set"], row["vs_sorted_set_cpu"],
                row.get("hash_vs_one_field_cpu"))]
            print("%-8s %-14s %11.0f %6.2f %11.0f %6.2f %s %s %s %s %7s" % (
                format(n, ","), op, m["rps"], m["cpu_us"], z["rps"], z["cpu_us"], *x))
    return rows


def wait_rehashed(server, limit=10.0):
    """Waits until the main dict of db 0 is not rehashing (DEBUG HTSTATS)."""
    deadline = time.time() + limit
    while b"rehashing target" in server.conn.call("DEBUG", "HTSTATS", 0) and time.time() < deadline:
        time.sleep(0.05)


def scaling(sizes):
    """LOCK/UNLOCK throughput (pipeline 16) and bytes per lock with `sizes`
    other locks present, SET NX PX/DEL in the same conditions as the
    reference. One server per size, each built once (locks without META, a
    lease long enough to outlast the test) and left to finish rehashing; then,
    round by round, on each server in turn (the order of the servers and of
    the module and the reference alternating), fresh keys are granted and
    those same keys released, so that the machine's noise falls on every size
    alike."""
    n = REQUESTS
    servers = {}
    try:
        for others in sizes:
            server = servers[others] = Server()
            before = int(server.info("memory")["used_memory"])
            fill(server, ["UNIQUE.LOCK", "other:{}", "job", "TTL", 3_600_000], others)
            server.bytes_per_lock = (int(server.info("memory")["used_memory"]) - before) / others
            wait_rehashed(server, limit=60)
        pairs = [(("lock_rps", ["UNIQUE.LOCK", "s:{}", "job", "TTL", 60000], grants),
                  ("unlock_rps", ["UNIQUE.UNLOCK", "s:{}", "job"], releases)),
                 (("set_rps", ["SET", "t:{}", "job", "NX", "PX", 60000], grants),
                  ("del_rps", ["DEL", "t:{}"], releases))]
        rows = {others: [] for others in sizes}
        for round_ in range(ROUNDS):
            # Fresh keys each round: a new range of sequence numbers.
            start = round_ * n
            for others in (sizes if round_ % 2 == 0 else sizes[::-1]):
                server, row = servers[others], {}
                for pair in (pairs if round_ % 2 == 0 else pairs[::-1]):
                    for name, args, check in pair:
                        r = load(server, args, 16, n, start=start)
                        if not check(r["replies"]):
                            raise SystemExit("scaling %s: %s" % (name, r["replies"]))
                        row[name] = r["rps"]
                rows[others].append(row)
        return {others: dict(median_of(rows[others]),
                             bytes_per_lock=round(servers[others].bytes_per_lock, 1))
                for others in sizes}
    finally:
        for server in servers.values():
            server.stop()


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

def ratio(a, b):
    return round(a / b, 2) if b else None


def table(tp):
    rows = []
    for (test, p), res in sorted(tp.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        (n1, r1), (n2, r2) = list(res.items())
        rows.append((test, p, n1, r1, n2, r2, ratio(r1["rps"], r2["rps"])))
    print("%-18s %3s  %-18s %10s %8s  %-14s %10s %8s  %6s" % (
        "comparison", "P", "module", "req/s", "p99 ms", "other", "req/s", "p99 ms", "ratio"))
    for test, p, n1, r1, n2, r2, x in rows:
        print("%-18s %3d  %-18s %10.0f %8.3f  %-14s %10.0f %8.3f  %5.2fx" % (
            test, p, n1, r1["rps"], r1["p99_ms"], n2, r2["rps"], r2["p99_ms"], x))
    return [{"comparison": t, "pipeline": p, n1: r1, n2: r2, "ratio": x}
            for t, p, n1, r1, n2, r2, x in rows]


def print_scaling(scale):
    (few, a), (many, b) = sorted(scale.items())
    print("scaling (pipeline 16, fresh keys granted then released), %s vs %s other locks present:"
          % (format(few, ","), format(many, ",")))
    for name, label in (("lock_rps", "UNIQUE.LOCK"), ("unlock_rps", "UNIQUE.UNLOCK"),
                        ("set_rps", "SET NX PX (reference)"), ("del_rps", "DEL (reference)")):
        print("  %-22s %10.0f -> %10.0f req/s (%.2fx)" % (label, a[name], b[name], ratio(b[name], a[name])))
    print("  %-22s %10.1f -> %10.1f bytes (%.2fx)" % (
        "bytes per lock", a["bytes_per_lock"], b["bytes_per_lock"],
        ratio(b["bytes_per_lock"], a["bytes_per_lock"])))


def write(name, result, started):
    result = dict({"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}, **result)
    result["seconds"] = round(time.time() - started, 1)
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    path = os.path.join(ROOT, "bench", "results", name)
    with open(path, "w") as f:
        json.dump(result, f, indent=2)
    print("\nwritten to %s in %.0f s" % (os.path.relpath(path, ROOT), result["seconds"]))


def machine(server):
    return {"cpus": os.cpu_count(), "platform": platform.platform(),
            "redis": server_name(server), "cpu": cpu_model()}


def server_name(server):
    info = server.info("server")
    if info.get("server_name") == "valkey":
        return "Valkey " + info.get("valkey_version", "?")
    return "Redis " + info["redis_version"]


def summary(tp, mem):
    """The figures the goals are about, from one server's throughput and memory."""
    def r(test, p):
        (_, a), (_, b) = list(tp[test, p].items())
        return ratio(a["rps"], b["rps"])
    return {
        "rate_vs_gcra_p16": r("rate_vs_gcra", 16), "rate_vs_gcra_p1": r("rate_vs_gcra", 1),
        "lock_vs_set_p16": r("lock_vs_set", 16), "lock_vs_set_p1": r("lock_vs_set", 1),
        "unlock_vs_del_p16": r("unlock_vs_del", 16), "unlock_vs_del_p1": r("unlock_vs_del", 1),
        "lock_meta_vs_lua_p16": r("lock_vs_lua", 16), "lock_meta_vs_lua_p1": r("lock_vs_lua", 1),
        "bytes_with_meta_vs_lua": ratio(mem["module, same information as Lua"], mem["Lua layout"]),
        "lock_rps_p16": tp["lock_vs_set", 16]["UNIQUE.LOCK"]["rps"],
        "set_rps_p16": tp["lock_vs_set", 16]["SET NX PX"]["rps"],
        "unlock_rps_p16": tp["unlock_vs_del", 16]["UNIQUE.UNLOCK"]["rps"],
        "del_rps_p16": tp["unlock_vs_del", 16]["DEL"]["rps"],
    }


def bench_servers(names):
    """Throughput and memory on each server of `names` (built when missing)."""
    global SERVER_BINARY
    out = {}
    for name in names:
        SERVER_BINARY = built_server(name)
        server = Server()
        try:
            label = server_name(server)
            print("\n== %s (%s)" % (label, SERVER_BINARY))
            tp = throughput(server)
            mem = memory(server)
        finally:
            server.stop()
        table(tp)
        out[label] = {"throughput": [{"comparison": t, "pipeline": p, **res}
                                     for (t, p), res in sorted(tp.items())],
                      "memory_bytes_per_lock": mem, "summary": summary(tp, mem)}
    return out


def print_summaries(per_server):
    print("\nper server (ratios of requests/s; memory: bytes per lock with the Lua design's "
          "information against the Lua layout):")
    print("%-16s %10s %10s %10s %10s %10s %10s %8s" % (
        "server", "LOCK/SET16", "LOCK/SET1", "UNLK/DEL16", "UNLK/DEL1", "META/Lua16", "META/Lua1",
        "memory"))
    for label, res in per_server.items():
        s = res["summary"]
        print("%-16s %9.2fx %9.2fx %9.2fx %9.2fx %9.2fx %9.2fx %7.2fx" % (
            label, s["lock_vs_set_p16"], s["lock_vs_set_p1"], s["unlock_vs_del_p16"],
            s["unlock_vs_del_p1"], s["lock_meta_vs_lua_p16"], s["lock_meta_vs_lua_p1"],
            s["bytes_with_meta_vs_lua"]))


def require_builds():
    """Stops with what to run when the module or the load generator is not built."""
    for path, how in ((MODULE, "make build-pgo (or BENCH_MODULE=path/to/module.so)"),
                      (LOADGEN, "make loadgen")):
        if not os.path.exists(path):
            raise SystemExit("build %s first: %s" % (os.path.relpath(path, ROOT), how))


def main():
    require_builds()
    started = time.time()
    settings = {"rounds": ROUNDS, "requests": REQUESTS, "requests_unpipelined": requests_for(1),
                "clients": CLIENTS}
    if os.environ.get("BENCH_MANY"):
        return many_only(settings, started)
    if os.environ.get("BENCH_MEMORY"):
        return memory_only()
    if os.environ.get("BENCH_SCALE"):
        server = Server()
        try:
            print("redis-unique scale benchmark: %d rounds, %d requests (medians)" % (ROUNDS, REQUESTS))
            scale = scaling((1_000, 10_000_000))
            host = machine(server)
        finally:
            server.stop()
        print_scaling(scale)
        write("scale.json", {"machine": host, "settings": settings,
                             "scaling": {str(k): v for k, v in scale.items()}}, started)
        return
    server = Server()
    try:
        print("redis-unique benchmark: %d rounds, %d requests, %d clients (medians)" % (ROUNDS, REQUESTS, CLIENTS))
        tp = throughput(server)
        hot = contention(server)
        mem = memory(server)
        scale = scaling((1_000, 1_000_000))
        reap = reaper(server)
        hand = handoff(server)
        many = many_holders(server)
        host = machine(server)
    finally:
        server.stop()
    repl = replica_aof()

    print()
    rows = table(tp)
    print("\nwith one replica and AOF (appendfsync everysec):")
    repl_rows = table(repl)
    print()
    print("contention (one key, pipeline 1):")
    for name, r in hot.items():
        print("  %-22s %10.0f req/s  p50 %.3f ms  p99 %.3f ms" % (name, r["rps"], r["p50_ms"], r["p99_ms"]))
    print()
    print_memory(mem)
    print()
    print_scaling(scale)
    print("reaper tick (batch 100, all expired): p50 %(p50)s us, max %(max)s us" % reap["reaper_tick_usec"])
    print("UNIQUE.REAP 0 COUNT 100 (all expired): p50 %(p50)s us, max %(max)s us" % reap["reap_count_100_usec"])
    print("blocking handoff (UNLOCK to the waiter's reply): p50 %(p50_us)s us, p99 %(p99_us)s us "
          "over %(handoffs)d handoffs" % hand)
    print()
    many_rows = print_many_holders(many)
    servers = os.environ.get("BENCH_SERVERS", "").split()
    if servers:
        per_server = {host["redis"]: {"summary": summary(tp, mem)}}
        per_server.update(bench_servers(COMPAT_SERVERS if servers == ["all"] else servers))
        print_summaries(per_server)
        write("servers.json", {"machine": dict(host, redis=None), "settings": settings,
                               "servers": per_server}, started)
    write("latest.json", {
        "machine": host,
        "settings": settings,
        "throughput": rows,
        "replica_aof": repl_rows,
        "contention": hot,
        "memory_bytes_per_lock": mem,
        "scaling": {str(k): v for k, v in scale.items()},
        "reaper": reap,
        "handoff": hand,
        "many_holders": many_rows,
    }, started)


def print_memory(mem, server=""):
    print("memory per lock (%d locks, used_memory delta)%s:" % (POPULATED, server))
    for name, b in mem.items():
        print("  %-34s %7.1f bytes" % (name, b))


def memory_only():
    """BENCH_MEMORY=1: only the bytes per lock of each layout, on the
    redis-server on the PATH (nothing written: the figures of a full run are
    in latest.json)."""
    server = Server()
    try:
        print_memory(memory(server), ", " + server_name(server))
    finally:
        server.stop()


def many_only(settings, started):
    """make bench-many: only the many-holder comparison, on the redis-server
    on the PATH and on each of BENCH_SERVERS (bench/results/many.json)."""
    global SERVER_BINARY
    servers = os.environ.get("BENCH_SERVERS", "").split()
    binaries = [SERVER_BINARY] + [
        built_server(name) for name in (COMPAT_SERVERS if servers == ["all"] else servers)]
    out, host = {}, None
    for binary in binaries:
        SERVER_BINARY = binary
        server = Server()
        try:
            label = server_name(server)
            host = host or machine(server)
            print("\n== %s (%s): %d rounds, %d requests (medians); load average %s" % (
                label, binary, ROUNDS, REQUESTS, " ".join("%.1f" % l for l in os.getloadavg())))
            many = many_holders(server)
        finally:
            server.stop()
        out[label] = print_many_holders(many)
    write("many.json", {"machine": dict(host, redis=None), "settings": settings,
                        "load_average": os.getloadavg(), "servers": out}, started)


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
