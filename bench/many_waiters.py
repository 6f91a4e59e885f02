"""What a release costs the server when many clients wait on its key: N clients
blocked on one key of LIMIT 1 (`UNIQUE.LOCK k cN LIMIT 1 TTL 600000 WAIT
600000`), then releases that each hand the slot to the oldest waiter (whose
holder queues again: N wait at every release); reported as the server's CPU
time per release (INFO commandstats' usec of UNIQUE.UNLOCK, which includes
serving the queue), for each N of MANY_WAITERS_SIZES (default "1 100 1000
10000"), on REDIS_SERVER (default: the redis-server on the PATH). Then, on
that key, what a LOCK arriving from a new group costs (denied: the key is
full). With groups, at the largest N, five more: a release on a key of LIMIT
30 (30 holders, each of its own group: the layout of a few holders, which a
pass asks how much each waiting group holds), a LOCK of a new group on a key
of LIMIT 0 whose waiting groups each hold their GROUPLIMIT (granted: it asks
every waiting group), a release on that key, which frees its own group's
slot (the pass passes over the groups at their GROUPLIMIT), a release on a
full key of LIMIT 5 where a client waits in each of that many groups beside one
of no LIMIT at its GROUPLIMIT, and a REAP that
frees 100 slots of a key of LIMIT 100, served in one pass (usec of
UNIQUE.REAP). Then, at the largest N, a release of one of 100 readers (MODE
shared) holding a key that a writer (MODE exclusive) waits on, with N readers
waiting behind it, and a release on a full key reserved for a UNIQUE.LOCKALL
waiting (for another key), with N clients waiting behind it. Last, how late a
waiter is served
when a lease ends on a key of MANY_WAITERS_HOLDERS (default 100,000) holders in
as many groups (ms, as its client sees it).

    python3 bench/many_waiters.py [module.so]   (default: bench.py's, the profile-guided build)

MANY_WAITERS_GROUPS: each N of it, the waiters spread over N GROUPs (GROUPLIMIT 1
each; 0: no GROUP), for fair serving's pass over many tenants (default "0 1000").

MANY_WAITERS_CALLGRIND=1: instead, the server under callgrind, and for each N and
groups the instructions the module's commands run per release cycle (the UNLOCK
that serves a waiter, with its pass, and the LOCK that queues its client again;
100 cycles), and with groups, those of a LOCK of a new group past the groups at
their GROUPLIMIT (100 of them): the steady figures on a shared machine, where the
µs move by a third from run to run. Dumps in target/many-waiters/callgrind/."""

import glob
import os
import re
import resource
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402
import floor  # noqa: E402

SIZES = [int(n) for n in os.environ.get("MANY_WAITERS_SIZES", "1 100 1000 10000").split()]
GROUP_COUNTS = [int(n) for n in os.environ.get("MANY_WAITERS_GROUPS", "0 1000").split()]
RELEASES = 200
HOLDERS = int(os.environ.get("MANY_WAITERS_HOLDERS", "100000"))


def waiting(server):
    return int(server.info("unique").get("unique_waiting", 0))


def command_usec(server, command):
    line = server.info("commandstats").get("cmdstat_" + command, "")
    fields = dict(f.split("=") for f in line.split(",") if "=" in f)
    return int(fields.get("usec", 0)), int(fields.get("calls", 0))


def per_call(server, command, calls, expect):
    """Server CPU µs per call of `command`: `calls` (argument lists) run
    after RESETSTAT, each reply checked by `expect`."""
    server.conn.call("CONFIG", "RESETSTAT")
    for args in calls:
        reply = server.conn.call(*args)
        if not expect(reply):
            raise SystemExit("%s: unexpected reply %r" % (" ".join(map(str, args)), reply))
    usec, n = command_usec(server, command)
    return usec / max(n, 1)


def blocked(server, n, lock_args):
    """`n` clients blocked, each on its `lock_args(i)`."""
    conns = [bench.Conn(server.port) for _ in range(n)]
    for i, c in enumerate(conns):
        c.send(*lock_args(i))
    wait_for_waiters(server, n)
    return conns


def measure(server, n, groups=0, before_releases=None, releases=RELEASES):
    """Server CPU µs per release with `n` waiting (dealt round into `groups`
    GROUPs, if any): each release hands the slot to the oldest waiter, and
    the client that held it queues again, so that `n` wait at every release;
    then µs per LOCK of a new group arriving at the key (denied)."""
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
    for _ in range(releases):
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
    usec, calls = command_usec(server, "unique.unlock")
    # A LOCK of a new group, without WAIT: denied, the key being full.
    arriving = per_call(server, "unique.lock", (
        lock_args("new%d" % i, groups + i)[:-2] for i in range(RELEASES)), lambda r: r is None)
    close(server, conns)
    return usec / calls, arriving


def close(server, conns):
    for c in conns:
        c.sock.close()
    deadline = time.time() + 120
    while waiting(server) > 0:
        if time.time() > deadline:
            raise SystemExit("%d clients still wait after closing" % waiting(server))
        time.sleep(0.05)


def release_at_limit(server, n, groups, limit=30):
    """Server CPU µs per release on a key of LIMIT `limit`, held by `limit`
    holders of groups of their own, `n` waiting in `groups` groups
    (GROUPLIMIT 1): each release hands the slot to a waiter, and the client
    that held it queues again."""
    server.conn.call("FLUSHALL", "SYNC")

    def lock_args(i):
        group = i if i < limit else limit + i % groups
        return ["UNIQUE.LOCK", "k", "c%d" % i, "LIMIT", limit, "TTL", 600_000,
                "GROUP", "g%d" % group, "GROUPLIMIT", 1]
    conns = [bench.Conn(server.port) for _ in range(n + limit)]
    for i in range(limit):
        assert isinstance(conns[i].call(*lock_args(i)), int)
    for i in range(limit, n + limit):
        conns[i].send(*lock_args(i), "WAIT", 600_000)
    blocked_calls = set(range(limit, n + limit))  # whose reply is still to read
    wait_for_waiters(server, n)
    server.conn.call("CONFIG", "RESETSTAT")
    for _ in range(RELEASES):
        # The oldest holder goes; if it was a waiter, its token is read.
        jid = server.conn.call("UNIQUE.LOCKEDBY", "k")[0]
        i = int((jid.decode() if isinstance(jid, bytes) else jid)[1:])
        assert server.conn.call("UNIQUE.UNLOCK", "k", "c%d" % i) == 1
        if i in blocked_calls:
            assert isinstance(conns[i].read(), int)
        conns[i].send(*lock_args(i), "WAIT", 600_000)
        blocked_calls.add(i)
        wait_for_waiters(server, n)
    usec, calls = command_usec(server, "unique.unlock")
    close(server, conns)
    return usec / calls


def full_groups(server, n, groups, pxat=False):
    """A fresh key of LIMIT 0 whose `groups` groups each hold their GROUPLIMIT
    1 (holders hG), `n` clients waiting in them (wI; their leases given as a
    PXAT when `pxat`); returns the LOCK's arguments for a jid and group
    number, and the waiting connections."""
    server.conn.call("FLUSHALL", "SYNC")

    def lock_args(jid, group):
        return ["UNIQUE.LOCK", "k", jid, "LIMIT", 0, "TTL", 600_000, "GROUP", "g%d" % group,
                "GROUPLIMIT", 1]

    def waiter_args(i):
        args = lock_args("w%d" % i, i % groups) + ["WAIT", 600_000]
        if pxat:
            args[5:7] = ["PXAT", int(time.time() * 1000) + 600_000]
        return args
    for g in range(groups):
        assert isinstance(server.conn.call(*lock_args("h%d" % g, g)), int)
    conns = blocked(server, n, waiter_args)
    return lock_args, conns


def past_full_groups(server, n, groups, around=None, calls=RELEASES, pxat=False):
    """µs per LOCK of a new group granted on a key of LIMIT 0 whose `groups`
    groups each hold their GROUPLIMIT 1, `n` waiting in them (their leases
    given as a PXAT when `pxat`); with `around`, called just before the
    `calls` LOCKs and just after them, nothing."""
    lock_args, conns = full_groups(server, n, groups, pxat)
    new_groups = [lock_args("new%d" % i, groups + i) for i in range(calls)]
    us = None
    if around:
        around()
        for args in new_groups:
            assert isinstance(server.conn.call(*args), int)
        around()
    else:
        us = per_call(server, "unique.lock", new_groups, lambda r: isinstance(r, int))
    close(server, conns)
    return us


def release_past_full_groups(server, n, groups, releases=50, pxat=False, around=None,
                             newcomers=False):
    """µs per release of a holder on a key of LIMIT 0 whose `groups` groups
    each hold their GROUPLIMIT 1, `n` waiting in them (their leases given as
    a PXAT when `pxat`): each release frees its own group, whose waiter
    takes the slot; the others are passed over. With `around`, called just
    before the releases and just after them, nothing; with `newcomers` as
    well, each release is followed by a LOCK of a new group, which the
    groups at their GROUPLIMIT let pass."""
    _, conns = full_groups(server, n, groups, pxat)
    unlocks = [("UNIQUE.UNLOCK", "k", "h%d" % g) for g in range(min(releases, groups))]
    us = None
    if around:
        around()
        for i, args in enumerate(unlocks):
            assert server.conn.call(*args) == 1
            if newcomers:
                newcomer = ["LIMIT", 0, "GROUP", "new%d" % i, "GROUPLIMIT", 1, "TTL", 600_000]
                assert isinstance(server.conn.call("UNIQUE.LOCK", "k", "n%d" % i, *newcomer), int)
        around()
    else:
        us = per_call(server, "unique.unlock", unlocks, lambda r: r == 1)
    if waiting(server) != n - min(releases, groups):
        raise SystemExit("the releases served %d waiters" % (n - waiting(server)))
    close(server, conns)
    return us


def release_beside_unlimited(server, groups, releases=20):
    """µs per release on a key of LIMIT 5, full, with one client waiting in
    each of `groups` groups of LIMIT 5 and one of no LIMIT whose group holds
    its GROUPLIMIT 1: each release serves one tenant; the pass stops once
    the key is found full for the others, the tenant of no LIMIT passed
    over (it needs no denial of its own)."""
    server.conn.call("FLUSHALL", "SYNC")
    ttl = ["TTL", 600_000]
    unlimited = ["LIMIT", 0] + ttl + ["GROUP", "z", "GROUPLIMIT", 1]
    assert isinstance(server.conn.call("UNIQUE.LOCK", "k", "z0", *unlimited), int)
    for h in range(4):
        assert isinstance(server.conn.call("UNIQUE.LOCK", "k", "h%d" % h, "LIMIT", 5, *ttl), int)
    conns = blocked(server, 1, lambda _: ["UNIQUE.LOCK", "k", "zw"] + unlimited + ["WAIT", 600_000])
    conns += blocked(server, groups, lambda i: ["UNIQUE.LOCK", "k", "w%d" % i, "LIMIT", 5] + ttl + [
        "GROUP", "g%d" % i, "WAIT", 600_000])
    # The four holders, then the tenants served in turn.
    holders = ["h%d" % h for h in range(4)] + ["w%d" % i for i in range(releases - 4)]
    us = per_call(server, "unique.unlock", [("UNIQUE.UNLOCK", "k", h) for h in holders],
                  lambda r: r == 1)
    if waiting(server) != groups + 1 - releases:
        raise SystemExit("the releases served %d waiters" % (groups + 1 - waiting(server)))
    close(server, conns)
    return us


def release_behind_exclusive(server, n, readers=100, releases=90):
    """µs per release of one of `readers` readers (MODE shared) holding a key
    that a writer (MODE exclusive) waits on, with `n` readers waiting behind
    the writer: each release's pass finds the writer still denied and the
    readers behind it held back."""
    server.conn.call("FLUSHALL", "SYNC")

    def lock_args(jid, mode):
        return ["UNIQUE.LOCK", "k", jid, "LIMIT", 0, "MODE", mode, "TTL", 600_000]
    for r in range(readers):
        assert isinstance(server.conn.call(*lock_args("r%d" % r, "shared")), int)
    conns = blocked(server, 1, lambda _: lock_args("w", "exclusive") + ["WAIT", 600_000])
    conns += blocked(server, n, lambda i: lock_args("q%d" % i, "shared") + ["WAIT", 600_000])
    us = per_call(server, "unique.unlock",
                  [("UNIQUE.UNLOCK", "k", "r%d" % r) for r in range(releases)], lambda r: r == 1)
    if waiting(server) != n + 1:
        raise SystemExit("the releases served %d waiters" % (n + 1 - waiting(server)))
    close(server, conns)
    return us


def release_behind_multi_key(server, n, holders=100, releases=90):
    """µs per release of one of `holders` holders of a full key of LIMIT
    `holders` + 1 that a UNIQUE.LOCKALL waits on (with a key held by
    another: it is not served), with `n` clients waiting behind it: the key
    is reserved for the LOCKALL, so each release's pass tries none of them."""
    server.conn.call("FLUSHALL", "SYNC")
    limit = holders + 1

    def lock_args(jid):
        return ["UNIQUE.LOCK", "{t}k", jid, "LIMIT", limit, "TTL", 600_000]
    for h in range(limit):
        assert isinstance(server.conn.call(*lock_args("h%d" % h)), int)
    assert isinstance(server.conn.call("UNIQUE.LOCK", "{t}other", "x", "TTL", 600_000), int)
    conns = blocked(server, 1, lambda _: ["UNIQUE.LOCKALL", 2, "{t}k", "{t}other", "m", "LIMIT",
                                          2 * limit, 1, "TTL", 600_000, "WAIT", 600_000])
    conns += blocked(server, n, lambda i: lock_args("q%d" % i) + ["WAIT", 600_000])
    us = per_call(server, "unique.unlock",
                  [("UNIQUE.UNLOCK", "{t}k", "h%d" % h) for h in range(releases)],
                  lambda r: r == 1)
    if waiting(server) != n + 1:
        raise SystemExit("the releases served %d waiters" % (n + 1 - waiting(server)))
    close(server, conns)
    return us


def many_slots(server, n, groups, slots=100, rounds=3):
    """µs of a REAP that frees `slots` slots of a key of LIMIT `slots`, whose
    `n` waiters in `groups` groups are then served in one pass (the median
    of `rounds`)."""
    return sorted(many_slots_once(server, n, groups, slots) for _ in range(rounds))[rounds // 2]


def many_slots_once(server, n, groups, slots):
    server.conn.call("FLUSHALL", "SYNC")

    def lock_args(jid, group):
        return ["UNIQUE.LOCK", "k", jid, "LIMIT", slots, "TTL", 600_000, "GROUP", "g%d" % group,
                "GROUPLIMIT", 1]
    for h in range(slots):
        assert isinstance(server.conn.call(*lock_args("h%d" % h, groups + h), "OWNER", "w"), int)
    conns = blocked(server, n, lambda i: lock_args("w%d" % i, i % groups) + ["WAIT", 600_000])
    us = per_call(server, "unique.reap", [("UNIQUE.REAP", 0, "OWNER", "w")],
                  lambda r: r[1] == slots)
    if waiting(server) != n - slots:
        raise SystemExit("the REAP served %d waiters, not %d" % (n - waiting(server), slots))
    close(server, conns)
    return us


def lease_end_past_groups(server, holders=HOLDERS, lease_ms=200, rounds=3):
    """ms from the end of a lease to the grant of the waiter it frees, on a
    key of `holders` holders in as many groups (LIMIT 0): the waiter waits
    for its group's GROUPLIMIT 1, which the lease holds, and is served by the
    wake-up timer armed for that lease, whose pass asks every waiting group's
    holders while the lease is not pruned yet (the median of `rounds`; the
    end of the lease taken from when it was asked for, so an upper bound)."""
    server.conn.call("FLUSHALL", "SYNC")

    def lock_args(jid, group, *more):
        return ["UNIQUE.LOCK", "k", jid, "LIMIT", 0, "TTL", 600_000, "GROUP", group] + list(more)
    server.conn.pipeline([lock_args("h%d" % i, "g%d" % i) for i in range(1, holders)])
    waiter = bench.Conn(server.port)
    late = []
    for _ in range(rounds):
        asked = time.time()
        short = ["UNIQUE.LOCK", "k", "short", "LIMIT", 0, "TTL", lease_ms, "GROUP", "g0"]
        assert isinstance(server.conn.call(*short), int)
        waiter.send(*lock_args("w", "g0", "GROUPLIMIT", 1, "WAIT", 60_000))
        reply = waiter.read()
        late.append((time.time() - asked) * 1000 - lease_ms)
        assert isinstance(reply, int), reply
        assert server.conn.call("UNIQUE.UNLOCK", "k", "w") == 1
    close(server, [waiter])
    return sorted(late)[rounds // 2]


def wait_for_waiters(server, n):
    deadline = time.time() + 120
    while waiting(server) < n:
        if time.time() > deadline:
            raise SystemExit("only %d of %d waiters blocked" % (waiting(server), n))


def callgrind_cycles(n, groups, cycles=100):
    """Instructions the module's commands run per release cycle of
    `measure`, the server under callgrind."""
    return callgrind_count("n%d-groups%d" % (n, groups), n, cycles, lambda server, around: measure(
        server, n, groups, around, releases=cycles))


def callgrind_past_full_groups(n, groups, calls=100):
    """Instructions the module's commands run per LOCK of
    `past_full_groups`, the server under callgrind."""
    return callgrind_count("n%d-groups%d-past-full" % (n, groups), n, calls,
                           lambda server, around: past_full_groups(server, n, groups, around, calls))


def callgrind_release_past_full_groups(n, groups, releases=50):
    """Instructions the module's commands run per release of
    `release_past_full_groups`, the server under callgrind."""
    return callgrind_count("n%d-groups%d-release-past-full" % (n, groups), n, releases,
                           lambda server, around: release_past_full_groups(
                               server, n, groups, releases, around=around))


def callgrind_release_and_newcomer(n, groups, releases=50):
    """Instructions the module's commands run per release of
    `release_past_full_groups` followed by a LOCK of a new group that the
    groups at their GROUPLIMIT let pass, the server under callgrind."""
    return callgrind_count("n%d-groups%d-release-and-newcomer" % (n, groups), n, releases,
                           lambda server, around: release_past_full_groups(
                               server, n, groups, releases, around=around, newcomers=True))


def callgrind_count(label, n, count, run):
    """What the module's commands run between the two calls of `around` in
    `run(server, around)`, per one of `count`, the server under callgrind
    (room for `n` clients): the inclusive cost of the module's command
    entry point, so that the INFO polls between, whose number moves with
    the timing, count nothing. Dumps in target/many-waiters/callgrind/."""
    dumps = os.path.join(bench.ROOT, "target", "many-waiters", "callgrind")
    os.makedirs(dumps, exist_ok=True)
    for old in glob.glob(os.path.join(dumps, "callgrind.out*")):
        os.remove(old)
    server = bench.Server(wrapper=["valgrind", "--tool=callgrind", "--dump-instr=no",
                                   "--callgrind-out-file=%s/callgrind.out" % dumps])
    keep = os.path.join(dumps, label + ".out")
    started = []

    def zero_then_dump():
        if not started:
            started.append(True)
            return floor.zero(server)
        floor.dump(server, dumps, keep)

    try:
        server.conn.call("CONFIG", "SET", "maxclients", n + 100)
        # The reaper ticks on the clock, which callgrind slows 50 times.
        server.conn.call("CONFIG", "SET", "unique.reap-interval", 0)
        run(server, zero_then_dump)
    finally:
        server.stop()
    out = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", keep],
                         capture_output=True, text=True, check=True).stdout
    entry = sum(int(m.group(1).replace(",", "")) for m in re.finditer(
        r"^\s*([\d,]+) \([ \d.]+%\)\s+\S*redis_unique::ffi::entry::entry_point\b", out, re.M))
    if not entry:
        raise SystemExit("the module's entry point is not in %s" % keep)
    return entry / count


def main():
    if len(sys.argv) > 1:
        bench.MODULE = os.path.abspath(sys.argv[1])
    bench.SERVER_BINARY = os.environ.get("REDIS_SERVER", bench.SERVER_BINARY)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, max(SIZES) + 1000)), hard))
    if os.environ.get("MANY_WAITERS_CALLGRIND"):
        for groups in GROUP_COUNTS:
            in_groups = " in %d groups" % groups if groups else ""
            for n in SIZES:
                print("%8s waiters%s: %.0f instructions of the module's commands per release cycle" % (
                    format(n, ","), in_groups, callgrind_cycles(n, groups)), flush=True)
            if groups and max(SIZES) >= groups:
                n = max(SIZES)
                print("%8s waiters%s at their GROUPLIMIT: %.0f instructions per LOCK of a new group" % (
                    format(n, ","), in_groups, callgrind_past_full_groups(n, groups)), flush=True)
                print("%8s waiters%s at their GROUPLIMIT: %.0f instructions per release of one of "
                      "them" % (format(n, ","), in_groups,
                                callgrind_release_past_full_groups(n, groups, releases=200)),
                      flush=True)
                print("%8s waiters%s at their GROUPLIMIT: %.0f instructions per release of one of "
                      "them and LOCK of a new group" % (
                          format(n, ","), in_groups,
                          callgrind_release_and_newcomer(n, groups, releases=200)), flush=True)
        return
    server = bench.Server()
    try:
        server.conn.call("CONFIG", "SET", "maxclients", max(SIZES) + 100)
        for groups in GROUP_COUNTS:
            in_groups = " in %d groups" % groups if groups else ""
            for n in SIZES:
                release, arriving = measure(server, n, groups)
                print("%8s waiters%s: %.1f µs of server CPU per release, %.1f per LOCK arriving" % (
                    format(n, ","), in_groups, release, arriving), flush=True)
            if groups and max(SIZES) >= groups:
                n = max(SIZES)
                print("%8s waiters%s, LIMIT 30: %.1f µs of server CPU per release" % (
                    format(n, ","), in_groups, release_at_limit(server, n, groups)), flush=True)
                print("%8s waiters%s at their GROUPLIMIT: %.1f µs per LOCK of a new group" % (
                    format(n, ","), in_groups, past_full_groups(server, n, groups)), flush=True)
                print("%8s waiters%s at their GROUPLIMIT, their leases given as a PXAT: %.1f µs per "
                      "LOCK of a new group" % (format(n, ","), in_groups,
                                               past_full_groups(server, n, groups, pxat=True)),
                      flush=True)
                print("%8s waiters%s at their GROUPLIMIT: %.1f µs per release of one of them" % (
                    format(n, ","), in_groups, release_past_full_groups(server, n, groups)),
                      flush=True)
                print("%8s waiters%s at their GROUPLIMIT, their leases given as a PXAT: %.1f µs "
                      "per release of one of them" % (
                          format(n, ","), in_groups,
                          release_past_full_groups(server, n, groups, pxat=True)), flush=True)
                print("%8s waiters in as many groups of LIMIT 5, beside one of no LIMIT at its "
                      "GROUPLIMIT: %.1f µs per release" % (
                          format(groups, ","), release_beside_unlimited(server, groups)), flush=True)
                # One slot per group at most (GROUPLIMIT 1).
                slots = min(100, groups)
                print("%8s waiters%s: %.1f µs for a REAP serving %d of them in one pass (median of 3)" % (
                    format(n, ","), in_groups, many_slots(server, n, groups, slots), slots), flush=True)
        n = max(SIZES)
        print("%8s readers waiting behind a writer: %.1f µs of server CPU per release of one "
              "of the readers holding" % (format(n, ","), release_behind_exclusive(server, n)),
              flush=True)
        print("%8s clients waiting behind a LOCKALL the key is reserved for: %.1f µs of server "
              "CPU per release" % (format(n, ","), release_behind_multi_key(server, n)), flush=True)
        print("a waiter served when a lease ends on a key of %s holders in as many groups: "
              "%.1f ms after the lease (median of 3)" % (
                  format(HOLDERS, ","), lease_end_past_groups(server)), flush=True)
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
