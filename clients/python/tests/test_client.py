import socket
import threading
import time
from datetime import datetime, timedelta, timezone

import pytest
import redis

import redis_unique
from redis_unique import Client, CommandError, ModuleNotLoaded, UniqueError, _functions

from conftest import Server, wait_for


def waiting(r: redis.Redis) -> int:
    return int(r.info("unique")["unique_waiting"])


def raw_error(port: int, *args: bytes) -> bytes:
    """The first line of the server's reply, as sent (redis-py strips some codes)."""
    payload = b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(payload)
        return s.recv(65536).split(b"\r\n", 1)[0]


def test_lock_grants_denies_renews_and_tokens_increase(r):
    c = Client(r)
    t1 = c.lock("k", "a", ttl=60)
    assert isinstance(t1, int) and t1 > 0
    assert c.lock("k", "b", ttl=60) is None
    assert c.lock("k", "a", ttl=120) == t1  # renewal: same token
    t2 = c.lock("k2", "a")
    assert t2 > t1
    assert c.locked_by("k") == [b"a"]


def test_holders_fields(r):
    c = Client(r)
    before = datetime.now(timezone.utc) - timedelta(seconds=1)
    token = c.lock("job:1", "jid-1", ttl=30, type="until_executed", owner="host:42", meta={"class": "Sync", "args": [1, "x"]})
    c.lock("job:1", "jid-2", limit=0)
    sent = time.time()
    h1, h2 = c.holders("job:1")
    got = time.time()
    assert isinstance(h1, redis_unique.Holder)
    assert (h1.jid, h1.token, h1.type, h1.owner, h1.meta) == ("jid-1", token, "until_executed", "host:42",
                                                                {"class": "Sync", "args": [1, "x"]})
    assert h1.acquired_at.tzinfo is not None and h1.acquired_at >= before
    # The time left as the server read it during the call, bounded from the lease's end: a pause
    # of the test before the call shrinks it (a second's pause broke 29 < ttl), not these bounds.
    assert 0 < h1.ttl <= 30
    assert h1.expires_at_ms - got * 1000 - 2 <= h1.ttl * 1000 <= h1.expires_at_ms - sent * 1000 + 2
    assert timedelta(seconds=29) < h1.expires_at - h1.acquired_at <= timedelta(seconds=30)
    assert (h2.jid, h2.type, h2.owner, h2.meta, h2.ttl, h2.expires_at) == ("jid-2", "lock", None, None, None, None)
    with pytest.raises(Exception):
        h1.jid = "x"  # frozen
    assert c.holders("nothing") == []


@pytest.mark.parametrize("kwargs", [{"protocol": 3}, {"decode_responses": True}, {"protocol": 3, "decode_responses": True}])
def test_holders_same_over_resp3_and_decoded_replies(server, r, kwargs):
    c = Client(r)
    c.lock("k", "jid-1", ttl=30, owner="o", meta={"a": 1})
    c.lock("k", "jid-2", limit=0, type="while_executing")
    other = Client(server.client(**kwargs))
    strip = lambda hs: [(h.jid, h.token, h.acquired_at, h.expires_at, h.type, h.owner, h.meta) for h in hs]
    assert strip(other.holders("k")) == strip(c.holders("k"))
    assert other.metrics()["holders"] == 2


def test_unlock_limit_and_counting(r):
    c = Client(r)
    assert c.lock("sem", "a", limit=2)
    assert c.lock("sem", "b", limit=2)
    assert c.lock("sem", "c", limit=2) is None
    assert c.unlock("sem", "a") is True
    assert c.unlock("sem", "a") is False
    assert c.lock("sem", "c", limit=2)
    for jid in ("b", "c"):
        assert c.unlock("sem", jid)
    assert r.exists("sem") == 0
    for i in range(5):
        assert c.lock("count", "j%d" % i, limit=0)
    assert len(c.holders("count")) == 5


def test_pxat_and_argument_checks(r):
    c = Client(r)
    at = datetime.now(timezone.utc) + timedelta(seconds=100)
    c.lock("k", "a", pxat=at)
    (h,) = c.holders("k")
    assert abs((h.expires_at - at).total_seconds()) < 0.002
    with pytest.raises(ValueError):
        c.lock("k", "a", ttl=0)
    with pytest.raises(ValueError):
        c.lock("k", "a", ttl=1, pxat=at)
    with pytest.raises(ValueError):
        c.lock("k", "a", pxat=datetime.now())  # naive
    with pytest.raises(CommandError) as e:
        c.lock("k", "b", pxat=datetime.now(timezone.utc) - timedelta(seconds=10))
    assert e.value.code == "ERR" and "invalid expire time" in str(e.value)


def test_numeric_pxat_is_unix_milliseconds_as_in_redis_py(r):
    c = Client(r)
    at_ms = int(time.time() * 1000) + 100_000
    c.lock("pxat:ms", "a", pxat=at_ms)
    (h,) = c.holders("pxat:ms")
    assert h.expires_at_ms == at_ms
    assert abs(h.expires_at.timestamp() * 1000 - at_ms) < 1
    # redis-py's own pxat means the same
    r.set("pxat:plain", "x", pxat=at_ms)
    assert abs(r.pexpiretime("pxat:plain") - h.expires_at_ms) <= 0
    with pytest.raises(TypeError):
        c.lock("pxat:ms", "a", pxat=time.time() + 100)  # seconds as a float: refused, not guessed


def test_seconds_become_milliseconds_rounded_up(r):
    # From the value to the microsecond, as in every client: 0.3 s is a 300 ms lease
    # (not the 301 of a bare ceil on floats), 0.0004 s is 1 ms (not 0).
    c = Client(r)
    # LOCK and HOLDERS in one transaction: the 300 ms lease cannot end between them however
    # late the second call would come on a loaded machine.
    token, holders = c.pipeline(transaction=True).lock("round", "a", ttl=0.3).holders("round").execute()
    (h,) = holders
    assert h.token == token
    c.unlock("round", "a")
    assert h.expires_at_ms - h.acquired_at_ms == 300
    from redis_unique._protocol import seconds_to_ms
    assert [seconds_to_ms(s, "ttl") for s in (0.0004, 0.3, 1.0001, 1e-9)] == [1, 300, 1001, 1]


def test_a_lease_past_year_9999_reads_back_without_raising(r):
    c = Client(r)
    far = 300_000_000_000_000  # about year 11,400
    c.lock("far", "a", pxat=far)
    (h,) = c.holders("far")
    assert h.expires_at_ms == far
    assert h.expires_at == datetime.max.replace(tzinfo=timezone.utc)
    assert h.ttl > 0


def test_error_codes_match_the_raw_replies(server, r):
    c = Client(r)
    r.set("string", "x")
    with pytest.raises(CommandError) as e:
        c.lock("string", "a")
    assert isinstance(e.value, redis.ResponseError) and isinstance(e.value, UniqueError)
    assert raw_error(server.port, b"UNIQUE.LOCK", b"string", b"a").startswith(b"-" + e.value.code.encode() + b" ")
    assert e.value.code == "WRONGTYPE"
    with pytest.raises(CommandError) as e:
        c.lock("k", "x" * 1025)
    assert raw_error(server.port, b"UNIQUE.LOCK", b"k", b"x" * 1025).startswith(b"-" + e.value.code.encode() + b" ")
    with pytest.raises(CommandError) as e:
        c.lock("k", "a", meta="[1,2]")  # not an object
    assert e.value.code == "ERR"
    assert r.exists("k") == 0


def test_module_not_loaded():
    # forced to the module (REDIS_UNIQUE_BACKEND=module); by default the client takes
    # the Functions library there (tests/test_functions_client.py)
    plain = Server(module=None)
    _functions.set_backend("module")
    try:
        c = Client(plain.client())
        with pytest.raises(ModuleNotLoaded) as e:
            c.lock("k", "a")
        assert "loadmodule" in str(e.value) and "MODULE LOAD" in str(e.value)
        with pytest.raises(ModuleNotLoaded):
            c.holders("k")
    finally:
        _functions.set_backend(None)
        plain.stop()


def test_wait_is_served_when_the_holder_unlocks(server, r):
    c = Client(r)
    c.lock("w", "holder")
    got = {}

    def waiter(name):
        got[name] = Client(server.client()).lock("w", name, wait=30)

    t1 = threading.Thread(target=waiter, args=("first",))
    t1.start()
    wait_for(lambda: waiting(r) == 1, message="first waiter")
    t2 = threading.Thread(target=waiter, args=("second",))
    t2.start()
    wait_for(lambda: waiting(r) == 2, message="second waiter")
    assert (c.waiters("w"), c.waiters("other")) == (2, 0)
    assert c.unlock("w", "holder")
    t1.join(10)
    assert isinstance(got["first"], int) and "second" not in got  # first come, first served
    assert c.unlock("w", "first")
    t2.join(10)
    assert got["second"] > got["first"]
    assert Client(r).lock("w", "late", wait=0.05) is None  # timed out: nil
    assert c.metrics()["total"]["timed_out"] == 1


def test_reap_by_owner_to_the_end_of_the_cursor(r):
    c = Client(r)
    for i in range(35):
        c.lock("dead:%d" % i, "j%d" % i, owner="worker-1:99", ttl=600)
        c.lock("live:%d" % i, "j%d" % i, owner="worker-2:7", ttl=600)
    assert c.reap(owner="worker-1:99", count=10) == 35
    assert r.keys("dead:*") == []
    assert len(r.keys("live:*")) == 35
    assert c.reap(owner="worker-1:99") == 0
    assert c.metrics()["total"]["reaped"] == 35


def test_metrics(r):
    c = Client(r)
    c.lock("m", "a", type="until_executed")
    c.lock("m", "b", type="until_executed")
    c.unlock("m", "a")
    c.unlock("m", "a")
    m = c.metrics()
    assert m["total"]["acquired"] == 1 and m["total"]["denied"] == 1
    assert m["total"]["released"] == 1 and m["total"]["unlock_missed"] == 1
    assert m["types"]["until_executed"]["acquired"] == 1
    # The current and the previous minute: the lock above may be in the one before a
    # minute's turn (MINUTES 1 alone would then read an empty bucket).
    assert c.metrics(minutes=2)["total"]["acquired"] == 1
    c.reset_metrics()
    assert c.metrics()["total"]["acquired"] == 0


def test_pipeline(r):
    c = Client(r)
    c.lock("p1", "other")
    pipe = c.pipeline()
    pipe.lock("p0", "a", ttl=10).lock("p1", "a").unlock("p0", "a").unlock("p1", "a").holders("p1")
    assert len(pipe) == 5
    t, denied, u1, u2, hs = pipe.execute()
    assert isinstance(t, int) and denied is None and u1 is True and u2 is False
    assert [h.jid for h in hs] == ["other"]
    with pytest.raises(CommandError):
        c.pipeline().lock("p2", "a", meta="nope").execute()
