"""The Functions library (functions/redis_unique.lua) on a real server started WITHOUT
the module: the behaviours of docs/commands.md it keeps, called through FCALL as the
clients call it (REDIS_SERVER picks the server: Redis 7.0 to 8, Valkey 8 and 9)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Iterator, List

import pytest
import redis

from redis_unique import _functions as fn

from conftest import Server, wait_for

ROOT = Path(__file__).resolve().parents[3]
SOURCE = ROOT / "functions" / "redis_unique.lua"


@pytest.fixture(scope="session")
def lib_server() -> Iterator[Server]:
    s = Server(module=None)
    conn = s.client()
    conn.execute_command("FUNCTION", "LOAD", "REPLACE", SOURCE.read_text())
    conn.close()
    yield s
    s.stop()


@pytest.fixture()
def lr(lib_server: Server) -> Iterator[redis.Redis]:
    conn = lib_server.client()
    conn.execute_command("FLUSHALL", "SYNC")
    yield conn
    conn.close()


def call(r: redis.Redis, command: str, key: Any, *args: Any) -> Any:
    """UNIQUE.<command> key args... through the library, as the clients send it."""
    name = command.lower()
    if name in ("lockedby", "rate", "waiters"):
        return r.execute_command("FCALL_RO", "unique_" + name, 1, key, *args)
    return r.execute_command("FCALL", "unique_" + name, 3, key, fn.wake_key(key), fn.METRICS_KEY, *args)


def error(r: redis.Redis, command: str, key: Any, *args: Any) -> str:
    with pytest.raises(redis.ResponseError) as exc:
        call(r, command, key, *args)
    return str(exc.value)


def now_ms(r: redis.Redis) -> int:
    sec, usec = r.time()
    return sec * 1000 + usec // 1000


def test_the_package_ships_the_library_as_it_is_in_functions():
    assert fn.LIBRARY_FILE.read_text() == SOURCE.read_text()
    assert fn.library_version() >= 1
    assert SOURCE.read_text().startswith("#!lua name=redis_unique\n")


def test_grant_denial_renewal_and_unlock(lr):
    t = call(lr, "lock", "sync:user:1", "job-a", "TTL", 3600000)
    assert t >= now_ms(lr) * 1000 - 5000 * 1000
    assert call(lr, "lock", "sync:user:1", "job-b", "TTL", 3600000) is None
    assert call(lr, "lock", "sync:user:1", "job-a", "TTL", 7200000) == t
    assert call(lr, "lockedby", "sync:user:1") == [b"job-a"]
    assert 3600000 < lr.pttl("sync:user:1") <= 7200000
    assert call(lr, "unlock", "sync:user:1", "job-b") == 0
    assert call(lr, "unlock", "sync:user:1", "job-a") == 1
    assert call(lr, "unlock", "sync:user:1", "job-a") == 0
    assert call(lr, "lockedby", "sync:user:1") == []
    # a lock with no live holder does not exist (its last token stays for the millisecond)
    wait_for(lambda: lr.exists("sync:user:1") == 0, message="the empty lock to go")


def test_errors_as_the_module_replies_them(lr):
    assert error(lr, "lock", "k", "j", 3600000) == \
        "syntax error: a number where an option name belongs (TTL ms? WAIT ms? LIMIT n?)"
    assert error(lr, "lock", "k", "j", "TTL", 0) == "invalid expire time in 'unique.lock' command"
    assert error(lr, "lock", "k", "j", "PXAT", now_ms(lr) - 1) == "invalid expire time in 'unique.lock' command"
    assert error(lr, "lock", "k", "j", "LIMIT", 1, "limit", 2) == "syntax error"
    assert error(lr, "lock", "k", "j", "TTL", 1, "PXAT", 2) == "syntax error"
    assert error(lr, "lock", "k", "j", "LIMIT") == "syntax error"
    assert error(lr, "lock", "k", "j", "LIMIT", "2147483648") == "value is not an integer or out of range"
    assert error(lr, "lock", "k", "j", "TTL", "1.5") == "value is not an integer or out of range"
    assert error(lr, "lock", "k", "j", "WAIT", 0).startswith("invalid wait time in 'unique.lock' command")
    assert error(lr, "lock", "k", "") == "jid must be 1 to 1024 bytes"
    assert error(lr, "lock", "k", "x" * 1025) == "jid must be 1 to 1024 bytes"
    assert error(lr, "lock", "k", "j", "TYPE", "no spaces") == "TYPE must be 1 to 64 characters of [A-Za-z0-9_:.-]"
    assert error(lr, "lock", "k", "j", "OWNER", "") == "OWNER must be 1 to 1024 bytes"
    assert error(lr, "lock", "k", "j", "META", "[]") == "META must be a JSON object"
    assert error(lr, "lock", "k", "j", "META", "{not json") == "META must be a JSON object"
    assert error(lr, "lock", "k", "j", "META", '{"k":"%s"}' % ("x" * 16384)) == \
        "META is larger than unique.max-meta-bytes (16384)"
    assert error(lr, "lock", "k", "j", "RATE", 0, "PER", 10).startswith("RATE n PER ms [BURST b] takes n from 1")
    assert error(lr, "lock", "k", "j", "RATE", 5).startswith("syntax error: RATE n needs PER ms")
    assert error(lr, "lock", "k", "j", "GROUPLIMIT", 2) == "syntax error: WEIGHT and GROUPLIMIT need GROUP name"
    assert error(lr, "lock", "k", "j", "MODE", "both") == "MODE must be shared or exclusive"
    assert error(lr, "lockedby", "k", "WITHMETA", "WITHMETA") == "syntax error"
    assert error(lr, "lockedby", "k", "CURSOR", "x") == "invalid cursor"
    lr.set("plain", "value")
    for command, args in (("lock", ("j",)), ("unlock", ("j",)), ("lockedby", ()), ("rate", ()),
                          ("waiters", ())):
        assert error(lr, command, "plain", *args).startswith("WRONGTYPE"), command
    # a failed call changes nothing
    assert lr.keys("k*") == []


def test_the_wake_list_must_be_the_locks_own(lr):
    with pytest.raises(redis.ResponseError, match="wake list"):
        lr.execute_command("FCALL", "unique_lock", 2, "k", "{x}:unique:w:k", "j")


@pytest.mark.parametrize("key", ["plain", "{user:1}:lock", "a{b", "a}b", "x{}y}z", "{}", "weird{a}b{c}"])
def test_the_wake_list_hashes_with_the_lock_key(lr, key):
    wake = fn.wake_key(key)
    assert fn.key_slot(wake) == fn.key_slot(key.encode())
    assert call(lr, "lock", key, "j", "TTL", 60000) is not None


def test_crc16_is_redis_clusters():
    # CRC16-CCITT (XMODEM) check value, and slots Redis Cluster documents
    assert fn._crc16(b"123456789") == 0x31C3
    assert fn.key_slot(b"foo") == 12182
    assert fn.key_slot(b"{user1000}.following") == fn.key_slot(b"{user1000}.followers")


def test_leases_end_and_the_key_expiry_follows_them(lr):
    call(lr, "lock", "lease", "a", "LIMIT", 2, "TTL", 150)
    call(lr, "lock", "lease", "b", "LIMIT", 2, "TTL", 60000)
    assert 59000 < lr.pttl("lease") <= 60000
    wait_for(lambda: call(lr, "lockedby", "lease") == [b"b"], message="a's lease to end")
    # the ended lease freed its slot
    assert call(lr, "lock", "lease", "c", "LIMIT", 2, "TTL", 60000) is not None
    call(lr, "lock", "lease", "d", "LIMIT", 0)
    assert lr.pttl("lease") == -1  # a holder without a lease: no key expiry
    call(lr, "lock", "short", "a", "TTL", 100)
    wait_for(lambda: lr.exists("short") == 0, message="Redis to expire the lock")


def test_tokens_rise_on_a_key_by_the_clock_rule(lr):
    seen = []
    for i in range(50):
        before = now_ms(lr)
        t = call(lr, "lock", "tok", "j%d" % i, "LIMIT", 0)
        assert t >= before * 1000
        seen.append(t)
        if i % 2:
            # delete and take again within the same millisecond: still above
            assert call(lr, "unlock", "tok", "j%d" % i) == 1
    assert seen == sorted(seen) and len(set(seen)) == len(seen)
    for jid in [b"j%d" % i for i in range(0, 50, 2)]:
        assert call(lr, "unlock", "tok", jid) == 1
    # the key is gone: the next grant is still above every token before
    assert call(lr, "lock", "tok", "again") > seen[-1]


def test_counting_lock_and_limit(lr):
    assert all(call(lr, "lock", "count", "j%d" % i, "LIMIT", 0) for i in range(5))
    assert call(lr, "lock", "count", "x", "LIMIT", 3) is None
    assert len(call(lr, "lockedby", "count")) == 5


def test_rate_as_documented(lr):
    key = "api:acme"
    assert call(lr, "lock", key, "job-1", "LIMIT", 3, "TTL", 60000, "RATE", 2, "PER", 1000) is not None
    assert call(lr, "lock", key, "job-2", "LIMIT", 3, "TTL", 60000, "RATE", 2, "PER", 1000) is None
    state = dict(zip(*[iter(call(lr, "rate", key))] * 2))
    assert state[b"limit"] == 2 and state[b"per"] == 1000 and state[b"burst"] == 0 and state[b"remaining"] == 0
    assert state[b"allowed_at"] == state[b"idle_at"] > now_ms(lr)
    # a renewal spends no rate
    assert call(lr, "lock", key, "job-1", "TTL", 60000, "RATE", 2, "PER", 1000) is not None
    wait_for(lambda: call(lr, "lock", key, "job-2", "LIMIT", 3, "TTL", 60000, "RATE", 2, "PER", 1000),
             message="the rate's next grant")
    assert call(lr, "rate", "nothing") is None


def test_rate_of_a_million_per_second_is_exact(lr):
    # a TAT in 1/1000000 ms units passes 2^53: kept as (ms, rest). One `now` (a ms)
    # allows 1 + BURST grants; the state never drifts from the clock.
    start = now_ms(lr)
    granted = sum(1 for i in range(40) if call(lr, "lock", "fast", "j%d" % i, "LIMIT", 0, "RATE", 1000000,
                                                 "PER", 1000, "BURST", 5) is not None)
    elapsed = now_ms(lr) - start + 1
    assert 6 <= granted <= 6 * elapsed
    state = dict(zip(*[iter(call(lr, "rate", "fast"))] * 2))
    assert state[b"limit"] == 1000000 and 0 <= state[b"remaining"] <= 6
    assert start <= state[b"idle_at"] <= now_ms(lr) + 1


def test_groups_as_documented(lr):
    key = "api:partner"
    args = ("LIMIT", 10, "GROUPLIMIT", 2, "TTL", 60000)
    assert call(lr, "lock", key, "job-1", "GROUP", "tenant-a", *args) is not None
    assert call(lr, "lock", key, "job-2", "GROUP", "tenant-a", *args) is not None
    assert call(lr, "lock", key, "job-3", "GROUP", "tenant-a", *args) is None
    assert call(lr, "lock", key, "job-4", "GROUP", "tenant-b", *args) is not None
    assert call(lr, "waiters", key, "GROUPS") == [
        [b"group", b"tenant-a", b"waiting", 0, b"holding", 2],
        [b"group", b"tenant-b", b"waiting", 0, b"holding", 1]]
    assert error(lr, "lock", key, "job-1", "GROUP", "tenant-b") == \
        "the jid already holds this lock for another GROUP (a renewal keeps its group)"


def test_modes_as_documented(lr):
    key = "report:7"
    assert call(lr, "lock", key, "reader-1", "LIMIT", 10, "MODE", "shared", "TTL", 60000)
    assert call(lr, "lock", key, "reader-2", "LIMIT", 10, "MODE", "shared", "TTL", 60000)
    assert call(lr, "lock", key, "writer-1", "MODE", "exclusive", "TTL", 60000) is None
    assert call(lr, "lock", key, "reader-1", "MODE", "exclusive") is None
    assert call(lr, "unlock", key, "reader-2") == 1
    assert call(lr, "lock", key, "reader-1", "MODE", "exclusive") is not None
    assert call(lr, "lock", key, "reader-3", "LIMIT", 10, "MODE", "shared") is None


def test_lockedby_withmeta_and_pages(lr):
    call(lr, "lock", "m", "j1", "TTL", 60000, "TYPE", "until_executed", "OWNER", "w1", "META", '{"a": 1}',
         "GROUP", "g", "MODE", "shared")
    [fields] = call(lr, "lockedby", "m", "WITHMETA")
    h = dict(zip(fields[::2], fields[1::2]))
    assert fields[::2] == [b"jid", b"token", b"acquired_at", b"expires_at", b"ttl", b"type", b"owner", b"meta",
                           b"group", b"mode"]
    assert h[b"jid"] == b"j1" and h[b"type"] == b"until_executed" and h[b"owner"] == b"w1"
    assert h[b"meta"] == b'{"a": 1}' and h[b"group"] == b"g" and h[b"mode"] == b"shared"
    assert 0 < h[b"ttl"] <= 60000 and h[b"expires_at"] - h[b"acquired_at"] == 60000
    # a hash past its listpack size is paged by HSCAN as the module pages a large lock
    before = lr.config_get("hash-max-listpack-entries")["hash-max-listpack-entries"]
    lr.config_set("hash-max-listpack-entries", 64)
    try:
        for i in range(300):
            call(lr, "lock", "many", "j%03d" % i, "LIMIT", 0)
    finally:
        lr.config_set("hash-max-listpack-entries", before)
    assert call(lr, "lockedby", "many")[:3] == [b"j000", b"j001", b"j002"]
    seen, cursor, pages = set(), b"0", 0
    while True:
        cursor, page = call(lr, "lockedby", "many", "CURSOR", cursor, "COUNT", 50)
        seen.update(page)
        pages += 1
        if cursor == b"0":
            break
    assert len(seen) == 300 and pages > 1
    # a small lock comes whole in one page
    assert call(lr, "lockedby", "m", "CURSOR", 0) == [b"0", [b"j1"]]


def test_metrics_count_what_the_library_did(lr):
    call(lr, "lock", "x", "j", "TYPE", "until_executed")
    call(lr, "lock", "x", "j")
    call(lr, "lock", "x", "k")
    call(lr, "unlock", "x", "j")
    call(lr, "unlock", "x", "j")
    reply = lr.execute_command("FCALL", "unique_metrics", 1, fn.METRICS_KEY)
    m = dict(zip(reply[::2], reply[1::2]))
    total = dict(zip(m[b"total"][::2], m[b"total"][1::2]))
    assert (total[b"acquired"], total[b"renewed"], total[b"denied"], total[b"released"],
            total[b"unlock_missed"]) == (1, 1, 1, 1, 1)
    assert lr.execute_command("FCALL", "unique_metrics", 1, fn.METRICS_KEY, "FORMAT", "json").startswith(
        b'{"holders":')
    assert lr.execute_command("FCALL", "unique_metrics", 1, fn.METRICS_KEY, "RESET") == b"OK"


# ---- WAIT: queued on the server, woken through the wake list ---------------------

def waiter(lib_server: Server, key: str, jid: str, out: List[Any], *args: Any) -> threading.Thread:
    def run() -> None:
        conn = lib_server.client()
        try:
            out.append((jid, fn.execute(conn, ["UNIQUE.LOCK", key, jid] + list(args))))
        finally:
            conn.close()
    t = threading.Thread(target=run)
    t.start()
    return t


@pytest.fixture()
def functions_backend():
    fn.set_backend("functions")
    yield
    fn.set_backend(None)


def test_waiters_are_served_in_arrival_order_on_release(lr, lib_server, functions_backend):
    assert call(lr, "lock", "q", "holder", "TTL", 60000)
    out: List[Any] = []
    threads = []
    for i in range(3):
        threads.append(waiter(lib_server, "q", "w%d" % i, out, "TTL", 60000, "WAIT", 30000))
        wait_for(lambda: call(lr, "waiters", "q") == i + 1, message="waiter %d to queue" % i)
    for i in range(3):
        holder = b"holder" if i == 0 else ("w%d" % (i - 1)).encode()
        assert call(lr, "unlock", "q", holder) == 1
        wait_for(lambda: len(out) == i + 1, message="waiter %d to be served" % i)
        assert out[i][0] == "w%d" % i and isinstance(out[i][1], int)
        assert call(lr, "lockedby", "q") == [("w%d" % i).encode()]
    for t in threads:
        t.join(30)


def test_a_lease_that_ends_with_no_call_serves_the_waiter(lr, lib_server, functions_backend):
    call(lr, "lock", "lapse", "holder", "TTL", 300)
    out: List[Any] = []
    t = waiter(lib_server, "lapse", "w", out, "TTL", 60000, "WAIT", 30000)
    t.join(30)
    assert out and out[0][1] is not None
    assert call(lr, "lockedby", "lapse") == [b"w"]


def test_a_waiter_that_times_out_leaves_the_queue(lr, lib_server, functions_backend):
    call(lr, "lock", "busy", "holder", "TTL", 60000)
    out: List[Any] = []
    waiter(lib_server, "busy", "w", out, "WAIT", 200).join(30)
    assert out == [("w", None)]
    assert call(lr, "waiters", "busy") == 0
    assert call(lr, "unlock", "busy", "holder") == 1
    assert call(lr, "lockedby", "busy") == []


def test_a_grant_that_raced_the_time_out_is_taken(lr):
    call(lr, "lock", "race", "holder", "TTL", 60000)
    seq, _ = call(lr, "lock", "race", "w", "TTL", 60000, "WAIT", 50)
    # the slot frees and is handed to the waiter before it asks again
    assert call(lr, "unlock", "race", "holder") == 1
    wait_for(lambda: now_ms(lr) > 0 and time.sleep(0.1) is None, message="the wait to run out")
    token = call(lr, "wait", "race", seq)
    assert isinstance(token, int)
    assert call(lr, "lockedby", "race") == [b"w"]
    assert lr.lpop(fn.wake_key("race")) in (None, str(seq).encode())


def test_a_newcomer_does_not_pass_the_waiters(lr):
    call(lr, "lock", "fifo", "holder", "LIMIT", 2, "TTL", 60000)
    call(lr, "lock", "fifo", "other", "LIMIT", 2, "TTL", 60000)
    call(lr, "lock", "fifo", "w", "LIMIT", 2, "TTL", 60000, "WAIT", 30000)
    assert call(lr, "unlock", "fifo", "holder") == 1
    # the freed slot went to the waiter, not to the newcomer
    assert call(lr, "lock", "fifo", "newcomer", "LIMIT", 2, "TTL", 60000) is None
    assert call(lr, "lockedby", "fifo") == [b"other", b"w"]


def test_a_wake_up_popped_by_a_waiter_not_granted_is_passed_on(lr, lib_server, functions_backend):
    # A waits first for LIMIT 1, B after it for LIMIT 3, on a key of two holders without a
    # lease: a release lets B in, not A. BLPOP wakes A (blocked longest); A passes the
    # wake-up on, so B is served at once, not when its block (30 s) runs out.
    call(lr, "lock", "hand", "h1", "LIMIT", 3)
    call(lr, "lock", "hand", "h2", "LIMIT", 3)
    out: List[Any] = []
    a = waiter(lib_server, "hand", "A", out, "LIMIT", 1, "WAIT", 60000)
    wait_for(lambda: call(lr, "waiters", "hand") == 1, message="A to queue")
    wait_for(lambda: any(c.get("cmd") == "blpop" for c in lr.client_list()), message="A to block")
    b = waiter(lib_server, "hand", "B", out, "LIMIT", 3, "WAIT", 60000)
    wait_for(lambda: call(lr, "waiters", "hand") == 2, message="B to queue")
    wait_for(lambda: sum(1 for c in lr.client_list() if c.get("cmd") == "blpop") == 2, message="B to block")
    started = time.monotonic()
    assert call(lr, "unlock", "hand", "h1") == 1
    b.join(60)
    assert [jid for jid, _ in out] == ["B"] and isinstance(out[0][1], int)
    assert time.monotonic() - started < 20, "B waited for its block to run out"
    assert call(lr, "waiters", "hand") == 1  # A still waits
    assert call(lr, "unlock", "hand", "h2") == 1 and call(lr, "unlock", "hand", "B") == 1
    a.join(60)
    assert [jid for jid, _ in out] == ["B", "A"]


def test_metrics_count_64_type_names_and_the_rest_under_other(lr):
    for i in range(70):
        assert call(lr, "lock", "typed:%d" % i, "j", "TYPE", "t%02d" % i, "TTL", 60000) is not None
    assert call(lr, "lock", "typed:69", "k", "TYPE", "t69") is None
    assert call(lr, "unlock", "typed:0", "j") == 1
    m = lr.execute_command("FCALL", "unique_metrics", 1, fn.METRICS_KEY)
    m = dict(zip(m[::2], m[1::2]))
    types = dict(zip(m[b"types"][::2], m[b"types"][1::2]))
    assert len(types) == 65 and b"t63" in types and b"t64" not in types
    other = dict(zip(types[b"other"][::2], types[b"other"][1::2]))
    assert other[b"acquired"] == 6 and other[b"denied"] == 1
    total = dict(zip(m[b"total"][::2], m[b"total"][1::2]))
    assert total[b"acquired"] == 70 and total[b"denied"] == 1 and total[b"released"] == 1
    assert m[b"holders"] == 69 and m[b"locks"] == 69
