#!/usr/bin/env python3
"""`make test-partition`: fencing tokens through a real network partition.

Each server, Sentinel and group of workers has its own loopback address
(127.0.0.x, every outgoing connection bound to it: `bind-source-addr`), and the
partition is a set of iptables rules in a chain of this run's own, dropping
every packet between the two sides. The rules are removed on every exit
(normal, failure, Ctrl-C, SIGTERM), and at start-up any chain a killed run
left behind is removed first.

Setups:
- sentinel: a primary, two replicas, three Sentinels (quorum 2,
  down-after-milliseconds 1000);
- cluster: a Redis Cluster of three primaries, each with a replica
  (cluster-node-timeout 1000).

Configurations: the default one; `min-replicas-to-write 1` with
`min-replicas-max-lag 1`; and the default one with `WAIT 1 100` after each
LOCK (a grant no replica acknowledged is given back, unused).

Eight workers in two groups take `UNIQUE.LOCK k jid LIMIT 1 TTL 2000` on three
hot keys (in one slot, owned by the primary that is cut off), write twice to a
fenced resource (a separate server on its own address that accepts a write
only with a token at least the highest it accepted for that key) and release.
Then the partition: the primary, one Sentinel (sentinel setup) and one group
of workers are cut off from the replicas, the other Sentinels or nodes and the
other group; both groups still reach the resource. After the heal the run
waits for the old primary to be a replica again, with LOCKEDBY and DEBUG
DIGEST equal on every server of the shard.

The goal, checked for every run: no stale write accepted and no token granted
by two servers on one key. The run fails otherwise (exit status 1).

Usage: tests/partition/run.py [--setups sentinel,cluster]
  [--configs default,min-replicas,wait] [--partition-seconds 12]
Environment: REDIS_SERVER (redis-server), REDIS_SENTINEL (redis-sentinel),
REDIS_UNIQUE_MODULE (target/release/libredis_unique.so).
"""

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SERVER = os.environ.get("REDIS_SERVER") or "redis-server"
SENTINEL = os.environ.get("REDIS_SENTINEL") or "redis-sentinel"
MODULE = os.environ.get("REDIS_UNIQUE_MODULE") or os.path.join(
    ROOT, "target/release/libredis_unique.so")
CHAIN_PREFIX = "UNIQPART"
TTL_MS = 2000
WORKERS = 8
PATIENCE = 90.0  # seconds any wait for a state may take on 2 busy cores


# ---------------------------------------------------------------------------
# A small RESP client: redis-py cannot bind the source address of its
# connections, and the partition is drawn by address.
# ---------------------------------------------------------------------------

class ReplyError(Exception):
    pass


class Conn:
    def __init__(self, host, port, source=None, timeout=0.5):
        self.addr = (host, port)
        self.sock = socket.create_connection(
            (host, port), timeout=timeout,
            source_address=(source, 0) if source else None)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def call(self, *args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        self.sock.sendall(b"".join(out))
        return self._read()

    def _line(self):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        while len(self.buf) < n + 2:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def _read(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise ReplyError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self._exact(n)
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self._read() for _ in range(n)]
        raise ConnectionError("bad reply %r" % line)


def call(addr, *args, timeout=2.0):
    c = Conn(*addr, timeout=timeout)
    try:
        return c.call(*args)
    finally:
        c.close()


def call_replica(addr, *args):
    """`args` on a connection that may read a cluster replica (READONLY)."""
    c = Conn(*addr, timeout=2.0)
    try:
        try:
            c.call("READONLY")
        except ReplyError:
            pass  # not a cluster
        return c.call(*args)
    finally:
        c.close()


def try_call(addr, *args, timeout=2.0):
    try:
        return call(addr, *args, timeout=timeout)
    except (OSError, ConnectionError, ReplyError) as e:
        return e


def wait_until(what, condition, limit=PATIENCE):
    start = time.monotonic()
    while True:
        try:
            if condition():
                return time.monotonic() - start
        except (OSError, ConnectionError, ReplyError):
            pass
        if time.monotonic() - start > limit:
            raise RuntimeError("timed out after %.0f s waiting for %s" % (limit, what))
        time.sleep(0.02)


def info(addr, section):
    text = call(addr, "INFO", section).decode()
    return dict(l.split(":", 1) for l in text.splitlines() if ":" in l)


# ---------------------------------------------------------------------------
# The partition: iptables rules in a chain of this run's own.
# ---------------------------------------------------------------------------

class Partition:
    def __init__(self):
        self.chain = "%s%d" % (CHAIN_PREFIX, os.getpid())
        self.active = False

    @staticmethod
    def ipt(*args, check=True):
        return subprocess.run(["iptables", "-w", *args], check=check,
                              capture_output=True, text=True)

    @classmethod
    def remove_leftovers(cls):
        """Chains of earlier runs killed before their cleanup."""
        listed = cls.ipt("-S", check=False).stdout
        for line in listed.splitlines():
            if line.startswith("-A INPUT") and "-j " + CHAIN_PREFIX in line:
                cls.ipt(*line.replace("-A", "-D", 1).split(), check=False)
        for line in listed.splitlines():
            if line.startswith("-N " + CHAIN_PREFIX):
                name = line.split()[1]
                cls.ipt("-F", name, check=False)
                cls.ipt("-X", name, check=False)

    def cut(self, side_a, side_b):
        self.ipt("-N", self.chain)
        self.active = True
        for a in side_a:
            for b in side_b:
                self.ipt("-A", self.chain, "-s", a, "-d", b, "-j", "DROP")
                self.ipt("-A", self.chain, "-s", b, "-d", a, "-j", "DROP")
        self.ipt("-I", "INPUT", "1", "-j", self.chain)

    def heal(self):
        if not self.active:
            return
        self.ipt("-D", "INPUT", "-j", self.chain, check=False)
        self.ipt("-F", self.chain, check=False)
        self.ipt("-X", self.chain, check=False)
        self.active = False


PARTITIONS = []


def heal_all(*_):
    for p in PARTITIONS:
        p.heal()


# ---------------------------------------------------------------------------
# Processes
# ---------------------------------------------------------------------------

def free_port(ip):
    while True:
        s = socket.socket()
        try:
            s.bind((ip, 0))
            port = s.getsockname()[1]
        finally:
            s.close()
        if port < 55000:  # room for a cluster bus port (+10000)
            bus = socket.socket()
            try:
                bus.bind((ip, port + 10000))
                return port
            except OSError:
                continue
            finally:
                bus.close()


class Procs:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="unique-partition-")
        self.children = []

    def spawn(self, name, argv):
        log = open(os.path.join(self.dir, name + ".log"), "w")
        child = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=self.dir)
        self.children.append(child)
        return child

    def server(self, ip, extra=(), cluster=False):
        port = free_port(ip)
        d = os.path.join(self.dir, "%s-%d" % (ip, port))
        os.makedirs(d)
        argv = [SERVER, "--port", str(port), "--bind", ip, "--bind-source-addr", ip,
                "--dir", d, "--save", "", "--appendonly", "no", "--protected-mode", "no",
                "--enable-debug-command", "yes",
                "--loadmodule", MODULE, "--repl-diskless-sync", "yes",
                "--repl-diskless-sync-delay", "0", "--repl-timeout", "5",
                "--logfile", os.path.join(d, "redis.log"), *extra]
        if cluster:
            argv += ["--cluster-enabled", "yes", "--cluster-config-file",
                     os.path.join(d, "nodes.conf"), "--cluster-node-timeout", "1000"]
        self.spawn("server-%s-%d" % (ip, port), argv)
        addr = (ip, port)
        wait_until("the server on %s:%d" % addr, lambda: call(addr, "PING") == "PONG")
        return addr

    def sentinel(self, ip, primary):
        port = free_port(ip)
        conf = os.path.join(self.dir, "sentinel-%s-%d.conf" % (ip, port))
        with open(conf, "w") as f:
            f.write("port %d\nbind %s\nbind-source-addr %s\ndir %s\nprotected-mode no\n"
                    "logfile %s\n"
                    "sentinel monitor m %s %d 2\n"
                    "sentinel down-after-milliseconds m 1000\n"
                    "sentinel failover-timeout m 10000\n"
                    "sentinel parallel-syncs m 2\n" % (
                        port, ip, ip, self.dir, conf + ".log", primary[0], primary[1]))
        self.spawn("sentinel-%s-%d" % (ip, port), [SENTINEL, conf])
        addr = (ip, port)
        wait_until("the sentinel on %s:%d" % addr, lambda: call(addr, "PING") == "PONG")
        return addr

    def stop(self, keep):
        for c in self.children:
            c.kill()
        for c in self.children:
            c.wait()
        if not keep:
            shutil.rmtree(self.dir, ignore_errors=True)


# ---------------------------------------------------------------------------
# The fenced resource: a separate server on its own address.
# ---------------------------------------------------------------------------

class Resource:
    """Accepts `W key token grant` only when token >= the highest it accepted
    for key; logs every write with the grant it came from."""

    def __init__(self, ip):
        self.lock = threading.Lock()
        self.highest = {}
        self.log = []  # (key, grant, accepted)
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((ip, 0))
        self.sock.listen(64)
        self.addr = self.sock.getsockname()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        f = c.makefile("rwb")
        try:
            for line in f:
                _, key, token, grant = line.split()
                key, token, grant = key.decode(), int(token), int(grant)
                with self.lock:
                    ok = token >= self.highest.get(key, 0)
                    if ok:
                        self.highest[key] = token
                    self.log.append((key, grant, ok))
                f.write(b"OK\n" if ok else b"NO\n")
                f.flush()
        except (OSError, ValueError):
            pass
        finally:
            c.close()


class ResourceClient:
    def __init__(self, addr, source):
        self.sock = socket.create_connection(addr, timeout=5, source_address=(source, 0))
        self.f = self.sock.makefile("rwb")

    def write(self, key, token, grant):
        self.f.write(b"W %s %d %d\n" % (key.encode(), token, grant))
        self.f.flush()
        return self.f.readline() == b"OK\n"


# ---------------------------------------------------------------------------
# Workers
# ---------------------------------------------------------------------------

class Run:
    def __init__(self, keys, wait_replicas):
        self.keys = keys
        self.wait_replicas = wait_replicas
        self.lock = threading.Lock()
        self.grants = []  # dicts: id, server, key, token, start, end
        self.given_back = 0
        self.errors = {}
        self.stop = threading.Event()

    def grant(self, **g):
        with self.lock:
            g["id"] = len(self.grants)
            self.grants.append(g)
            return g

    def error(self, e):
        name = str(e).split()[0] if str(e) else type(e).__name__
        with self.lock:
            self.errors[name] = self.errors.get(name, 0) + 1


def worker(run, n, source, find_primary, resource_addr):
    res = ResourceClient(resource_addr, source)
    conn = None
    i = 0
    while not run.stop.is_set():
        key = run.keys[(n + i) % len(run.keys)]
        i += 1
        jid = "w%d-%d" % (n, i)
        try:
            if conn is None:
                addr = find_primary(key)
                if addr is None:
                    time.sleep(0.05)
                    continue
                conn = Conn(*addr, source=source, timeout=0.5)
            start = time.monotonic()
            token = conn.call("UNIQUE.LOCK", key, jid, "LIMIT", 1, "TTL", TTL_MS)
            if token is None:
                time.sleep(0.005)
                continue
            if run.wait_replicas:
                acked = conn.call("WAIT", 1, 100)
                if acked < 1:
                    conn.call("UNIQUE.UNLOCK", key, jid)
                    with run.lock:
                        run.given_back += 1
                    continue
            g = run.grant(server=conn.addr, key=key, token=token, start=start,
                          end=start + TTL_MS / 1000.0)
            for _ in range(2):
                res.write(key, token, g["id"])
            try:
                conn.call("UNIQUE.UNLOCK", key, jid)
                g["end"] = min(g["end"], time.monotonic())
            except (OSError, ConnectionError):
                raise
        except ReplyError as e:
            run.error(e)
            moved = str(e).startswith("MOVED")
            if conn is not None and not moved:
                time.sleep(0.05)
            if moved or not str(e).startswith("NOREPLICAS"):
                if conn is not None:
                    conn.close()
                conn = None
        except (OSError, ConnectionError) as e:
            run.error(e)
            if conn is not None:
                conn.close()
            conn = None
            time.sleep(0.05)


# ---------------------------------------------------------------------------
# Setups
# ---------------------------------------------------------------------------

def crc16(data):
    crc = 0
    for b in data:
        crc ^= b << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc


def slot(key):
    s = key.find("{")
    if s >= 0:
        e = key.find("}", s + 1)
        if e > s + 1:
            key = key[s + 1:e]
    return crc16(key.encode()) % 16384


def sentinel_setup(procs, extra):
    p = procs.server("127.0.0.11", extra)
    r1 = procs.server("127.0.0.12", extra + ["--replicaof", p[0], str(p[1])])
    r2 = procs.server("127.0.0.13", extra + ["--replicaof", p[0], str(p[1])])
    for r in (r1, r2):
        wait_until("a replica in sync", lambda: info(r, "replication")
                   .get("master_link_status") == "up")
    sentinels = [procs.sentinel(ip, p) for ip in ("127.0.0.14", "127.0.0.15", "127.0.0.16")]
    for s in sentinels:
        wait_until("the sentinels and replicas known", lambda: (
            int(dict(zip(*[iter(call(s, "SENTINEL", "MASTER", "m"))] * 2))[b"num-other-sentinels"]) == 2
            and int(dict(zip(*[iter(call(s, "SENTINEL", "MASTER", "m"))] * 2))[b"num-slaves"]) == 2))

    def finder(sentinel_addrs):
        def find(_key):
            for s in sentinel_addrs:
                r = try_call(s, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", "m", timeout=0.3)
                if isinstance(r, list):
                    return (r[0].decode(), int(r[1]))
            return None
        return find

    def promoted():
        r = call(sentinels[1], "SENTINEL", "GET-MASTER-ADDR-BY-NAME", "m")
        addr = (r[0].decode(), int(r[1]))
        return addr if addr != p else None

    return dict(
        old=p, shard=[p, r1, r2], keys=["hot:1", "hot:2", "hot:3"],
        side_a=["127.0.0.11", "127.0.0.14", "127.0.0.17"],
        side_b=["127.0.0.12", "127.0.0.13", "127.0.0.15", "127.0.0.16", "127.0.0.18"],
        find_a=finder([sentinels[0]]), find_b=finder(sentinels[1:]),
        promoted=promoted)


def cluster_setup(procs, extra):
    ips = ["127.0.0.21", "127.0.0.22", "127.0.0.23", "127.0.0.24", "127.0.0.25", "127.0.0.26"]
    nodes = [procs.server(ip, extra, cluster=True) for ip in ips]
    primaries, replicas = nodes[:3], nodes[3:]
    for n in nodes[1:]:
        call(n, "CLUSTER", "MEET", nodes[0][0], nodes[0][1])
    ranges = [(0, 5460), (5461, 10922), (10923, 16383)]
    for n, (a, b) in zip(primaries, ranges):
        call(n, "CLUSTER", "ADDSLOTSRANGE", a, b)
    ids = [call(n, "CLUSTER", "MYID").decode() for n in primaries]
    for r, pid in zip(replicas, ids):
        wait_until("the node known", lambda: pid.encode() in call(r, "CLUSTER", "NODES"))
        call(r, "CLUSTER", "REPLICATE", pid)
    for n in nodes:
        wait_until("the cluster ok", lambda: info(n, "cluster").get("cluster_state") == "ok"
                   if False else b"cluster_state:ok" in call(n, "CLUSTER", "INFO"))
    for r in replicas:
        wait_until("a replica in sync", lambda: info(r, "replication")
                   .get("master_link_status") == "up")
    # Three hot keys in a slot of the first primary.
    keys = []
    tag = 0
    while len(keys) < 3:
        k = "{t%d}hot" % tag
        if slot(k) <= 5460:
            keys.append(k)
        tag += 1
    keys = [keys[0], keys[0] + ":2", keys[0] + ":3"]
    old, heir = primaries[0], replicas[0]

    def finder(reachable):
        state = {"i": 0}

        def find(key):
            s = slot(key)
            for _ in range(len(reachable)):
                n = reachable[state["i"] % len(reachable)]
                state["i"] += 1
                r = try_call(n, "CLUSTER", "SLOTS", timeout=0.3)
                if isinstance(r, list):
                    for entry in r:
                        if entry[0] <= s <= entry[1]:
                            return (entry[2][0].decode(), int(entry[2][1]))
            return None
        return find

    def promoted():
        role = info(heir, "replication").get("role")
        return heir if role == "master" else None

    return dict(
        old=old, shard=[old, heir], keys=keys,
        side_a=["127.0.0.21", "127.0.0.17"],
        side_b=ips[1:] + ["127.0.0.18"],
        find_a=finder([old]), find_b=finder(nodes[1:]),
        promoted=promoted)


# ---------------------------------------------------------------------------
# One run
# ---------------------------------------------------------------------------

def one_run(setup_name, config, seconds, keep):
    extra = []
    if config == "min-replicas":
        extra = ["--min-replicas-to-write", "1", "--min-replicas-max-lag", "1"]
    procs = Procs()
    partition = Partition()
    PARTITIONS.append(partition)
    try:
        s = (sentinel_setup if setup_name == "sentinel" else cluster_setup)(procs, extra)
        run = Run(s["keys"], wait_replicas=(config == "wait"))
        resource = Resource("127.0.0.19")
        threads = []
        for n in range(WORKERS):
            a = n < WORKERS // 2
            t = threading.Thread(target=worker, daemon=True, args=(
                run, n, "127.0.0.17" if a else "127.0.0.18",
                s["find_a"] if a else s["find_b"], resource.addr))
            t.start()
            threads.append(t)
        wait_until("the first grants", lambda: len(run.grants) > 50)
        time.sleep(2)  # traffic before the cut
        t_cut = time.monotonic()
        partition.cut(s["side_a"], s["side_b"])
        t_promoted = None
        new = None
        while time.monotonic() - t_cut < seconds:
            if new is None:
                try:
                    new = s["promoted"]()
                except (OSError, ConnectionError, ReplyError):
                    new = None
                if new is not None:
                    t_promoted = time.monotonic()
            time.sleep(0.01)
        partition.heal()
        t_heal = time.monotonic()
        if new is None:
            wait_until("a promotion", lambda: s["promoted"]() is not None)
            new = s["promoted"]()
            t_promoted = time.monotonic()
        time.sleep(2)  # traffic after the heal
        run.stop.set()
        for t in threads:
            t.join(10)
        old = s["old"]

        def settled():
            r = info(old, "replication")
            return (r.get("role") == "slave" and r.get("master_link_status") == "up"
                    and r.get("master_host") == new[0]
                    and int(r.get("master_port", 0)) == new[1])
        wait_until("the old primary a replica of the new one", settled)
        shard = s["shard"]
        lockedby = {}

        def equal():
            digests = {call(n, "DEBUG", "DIGEST") for n in shard}
            lockedby.clear()
            for k in s["keys"]:
                lockedby[k] = {repr(call_replica(n, "UNIQUE.LOCKEDBY", k)) for n in shard}
            return len(digests) == 1 and all(len(v) == 1 for v in lockedby.values())
        try:
            wait_until("LOCKEDBY and DIGEST equal on every server", equal)
        except RuntimeError:
            for n in shard:
                r = info(n, "replication")
                print("   ", n, r.get("role"), r.get("master_host"), r.get("master_port"),
                      r.get("master_link_status"), call(n, "DEBUG", "DIGEST"),
                      call(n, "DBSIZE"), lockedby)
            raise
        return report(setup_name, config, run, resource, old, new, t_cut, t_promoted, t_heal)
    finally:
        partition.heal()
        procs.stop(keep)


def report(setup_name, config, run, resource, old, new, t_cut, t_promoted, t_heal):
    grants = run.grants
    by_id = {g["id"]: g for g in grants}
    old_after = [g for g in grants if g["server"] == old and g["start"] > t_promoted]
    old_all = [g for g in grants if g["server"] == old and g["start"] > t_cut]
    last_old = max((g["start"] for g in old_all), default=t_cut)
    # Holds of one key overlapping in time, on two servers.
    overlapping = 0
    for key in run.keys:
        gs = sorted((g for g in grants if g["key"] == key), key=lambda g: g["start"])
        for i, g in enumerate(gs):
            for h in gs[i + 1:]:
                if h["start"] >= g["end"]:
                    break
                if h["server"] != g["server"]:
                    overlapping += 1
    # Stale writes accepted: from a grant of the old primary, after the
    # resource accepted a write from a grant of the new one (per key).
    stale_accepted = stale_refused = 0
    seen_new = set()
    for key, gid, ok in resource.log:
        g = by_id.get(gid)
        if g is None:
            continue
        if g["server"] != old:
            if ok:
                seen_new.add(key)
        elif key in seen_new:
            if ok:
                stale_accepted += 1
            else:
                stale_refused += 1
    # One token granted on one key by two servers.
    servers_of = {}
    for g in grants:
        servers_of.setdefault((g["key"], g["token"]), set()).add(g["server"])
    equal_tokens = sum(1 for v in servers_of.values() if len(v) > 1)
    new_grants = [g for g in grants if g["server"] == new]
    lowest_new = min((g["token"] for g in new_grants), default=None)
    highest_old = max((g["token"] for g in old_all), default=None)
    row = dict(
        setup=setup_name, config=config, grants=len(grants),
        promoted_after=t_promoted - t_cut,
        old_granted_for=(last_old - t_cut) if old_all else 0.0,
        old_after_promotion=len(old_after),
        overlapping=overlapping, stale_accepted=stale_accepted,
        stale_refused=stale_refused, equal_tokens=equal_tokens,
        given_back=run.given_back,
        lowest_new=lowest_new, highest_old=highest_old,
        errors=run.errors)
    print("  %(setup)s / %(config)s: %(grants)d grants; promoted %(promoted_after).1f s "
          "after the cut; the old primary granted for %(old_granted_for).1f s after the cut, "
          "%(old_after_promotion)d times after the promotion; %(overlapping)d overlapping "
          "holds; stale writes accepted %(stale_accepted)d (refused %(stale_refused)d); "
          "equal tokens %(equal_tokens)d; given back (WAIT) %(given_back)d" % row)
    print("    lowest new token %s, highest old token %s; errors seen %s" % (
        lowest_new, highest_old, dict(sorted(run.errors.items()))))
    print("    final state: old primary a replica of the new one, LOCKEDBY and DIGEST equal")
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--setups", default="sentinel,cluster")
    ap.add_argument("--configs", default="default,min-replicas,wait")
    ap.add_argument("--partition-seconds", type=float, default=12.0)
    ap.add_argument("--keep", action="store_true", help="keep the servers' directories")
    args = ap.parse_args()
    if os.geteuid() != 0 or shutil.which("iptables") is None:
        sys.exit("test-partition needs root and iptables (scripts/deps.sh installs it)")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    Partition.remove_leftovers()
    rows = []
    failed = []
    try:
        for setup_name in args.setups.split(","):
            for config in args.configs.split(","):
                print("== %s, %s, a %.0f s partition" % (setup_name, config, args.partition_seconds),
                      flush=True)
                row = one_run(setup_name, config, args.partition_seconds, args.keep)
                rows.append(row)
                if row["stale_accepted"] or row["equal_tokens"]:
                    failed.append("%s/%s" % (setup_name, config))
                sys.stdout.flush()
    finally:
        heal_all()
    print("\n| setup / configuration | grants | promoted after the cut | old primary granted "
          "for | its grants after the promotion | overlapping holds | stale writes accepted "
          "(refused) | equal tokens | given back by WAIT |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print("| %s / %s | %d | %.1f s | %.1f s | %d | %d | **%d** (%d) | **%d** | %s |" % (
            r["setup"], r["config"], r["grants"], r["promoted_after"], r["old_granted_for"],
            r["old_after_promotion"], r["overlapping"], r["stale_accepted"],
            r["stale_refused"], r["equal_tokens"],
            r["given_back"] if r["config"] == "wait" else "-"))
    if failed:
        print("FAILED: stale writes accepted or equal tokens in %s" % ", ".join(failed))
        sys.exit(1)
    print("test-partition passed: 0 stale writes accepted, 0 equal tokens in every run")


if __name__ == "__main__":
    main()
