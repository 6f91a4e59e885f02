"""The renewal rule of clients/conformance (README "Renewal") against a real server: a
lease shorter than the job kept alive, with renewals that send only the lease; a renewal
refused after a REAP and another holder, reported as lost at once; the connection cut
mid-job and restored before the lease ends (kept) and after (lost)."""

import asyncio
import time

import pytest
import redis
import redis.asyncio as aioredis

from redis_unique import Client, Lock, LockLost, Semaphore
from redis_unique import asyncio as aio

from conftest import wait_for


def renewals_sent(r, key):
    """The UNIQUE.LOCK calls on ``key`` the server logged (every command: SLOWLOG at 0 µs)."""
    entries = r.slowlog_get(1024)
    return [[a.decode() for a in e["command"].split(b" ")] if isinstance(e["command"], bytes) else
            e["command"].split(" ") for e in reversed(entries)
            if (e["command"].split(b" ") if isinstance(e["command"], bytes) else e["command"].split(" "))[:2]
            in ([b"UNIQUE.LOCK", key.encode()], ["UNIQUE.LOCK", key])]


@pytest.fixture()
def slowlog(r):
    old = r.config_get("slowlog-*")
    r.config_set("slowlog-log-slower-than", 0)
    r.config_set("slowlog-max-len", 1024)
    r.slowlog_reset()
    yield r
    r.config_set("slowlog-log-slower-than", old["slowlog-log-slower-than"])
    r.config_set("slowlog-max-len", old["slowlog-max-len"])


def test_a_lease_shorter_than_the_job_is_kept_and_renewals_send_the_lease_only(slowlog):
    r = slowlog
    c = Client(r)
    lost = []
    # Renewed every third of the lease: 1.2 s is kept through a stall of the loaded machine
    # of 800 ms, where one of 600 ms ended after 400 ms.
    ttl = 1.2
    with Semaphore(r, "renew:kept", 3, ttl=ttl, owner="w-1", meta={"job": 1}, type="while_executing",
                   rate=(100, 1), on_lost=lost.append) as lock:
        start = time.monotonic()
        wait_for(lambda: lock.renewals >= 6 and time.monotonic() - start > 3 * ttl, timeout=30,
                 message="three leases of renewals")
        (h,) = c.holders("renew:kept")
        assert (h.token, h.owner, h.meta, h.type) == (lock.token, "w-1", {"job": 1}, "while_executing")
        lock.update(meta={"job": 1, "progress": 50})
        wait_for(lambda: c.holders("renew:kept")[0].meta == {"job": 1, "progress": 50}, timeout=10,
                 message="the changed META sent by a renewal")
        before = lock.renewals
        wait_for(lambda: lock.renewals >= before + 2, timeout=10, message="two more renewals")
    assert lost == [] and not lock.lost
    sent = renewals_sent(r, "renew:kept")
    grant, renewals = sent[0], sent[1:]
    assert grant[:5] == ["UNIQUE.LOCK", "renew:kept", lock.jid, "LIMIT", "3"]
    bare = ["UNIQUE.LOCK", "renew:kept", lock.jid, "TTL", "1200"]
    with_meta = bare + ["META", '{"job":1,"progress":50}']
    assert len(renewals) >= 8 and renewals.count(with_meta) == 1
    assert all(a in (bare, with_meta) for a in renewals), renewals
    total = c.metrics()["total"]
    assert (total["acquired"], total["expired"]) == (1, 0) and total["renewed"] >= 8


def test_a_renewal_refused_after_a_reap_is_lost_at_once(r):
    c = Client(r)
    lost = []
    with pytest.raises(LockLost, match="another holder"):
        # A lease of 3 s: the reap comes while it is held however late the loaded machine runs
        # the next line (a lease that ended first would be taken again by a late renewal).
        with Lock(r, "renew:reaped", ttl=3, owner="w-dead", on_lost=lost.append) as lock:
            assert c.reap(owner="w-dead") == 1
            other = c.lock("renew:reaped", "other", ttl=30)
            wait_for(lambda: lost, timeout=10, message="the loss to be told")
            assert lock.lost and len(lost) == 1 and isinstance(lost[0], LockLost)
            assert "renew:reaped" in repr(lock) and "lost" in repr(lock)
    (h,) = c.holders("renew:reaped")
    assert (h.jid, h.token) == ("other", other)  # the release took nothing from the new holder
    assert len(lost) == 1


def test_a_renewal_after_the_lease_gives_up_the_new_grant(r):
    c = Client(r)
    lost = []
    lock = Lock(r, "renew:late", ttl=1, on_lost=lost.append)
    lock.acquire()
    r.delete("renew:late")  # nobody holds it: the next renewal would be a new grant
    wait_for(lambda: lost, timeout=10, message="the loss to be told")
    assert "another fencing token" in str(lost[0])
    wait_for(lambda: c.holders("renew:late") == [], timeout=10, message="the new grant given up")
    with pytest.raises(LockLost):
        lock.release()


def test_a_connection_restored_before_the_lease_ends_keeps_the_lock(r, proxy):
    c = Client(r)
    lost = []
    via = redis.Redis(host="127.0.0.1", port=proxy.port)
    with Lock(via, "renew:blip", ttl=3, on_lost=lost.append) as lock:
        wait_for(lambda: lock.renewals >= 1, timeout=10, message="a first renewal")
        proxy.cut()
        wait_for(lambda: proxy.refused >= 1, timeout=10, message="a renewal to meet the cut link")
        proxy.restore()
        before = lock.renewals
        wait_for(lambda: lock.renewals > before, timeout=10, message="a renewal after the link is back")
        (h,) = c.holders("renew:blip")
        assert h.token == lock.token and not lock.lost
    assert lost == [] and c.holders("renew:blip") == []
    via.close()


def test_a_connection_down_past_the_lease_loses_the_lock_when_the_lease_ends(r, proxy):
    c = Client(r)
    lost = []
    via = redis.Redis(host="127.0.0.1", port=proxy.port)
    ttl = 1.2
    told_at = []
    lock = Lock(via, "renew:down", ttl=ttl, on_lost=lambda e: (told_at.append(time.monotonic()), lost.append(e)))
    asked_at = time.monotonic()
    lock.acquire()
    wait_for(lambda: lock.renewals >= 1, timeout=10, message="a first renewal")
    proxy.cut()
    wait_for(lambda: lost, timeout=15, message="the loss to be told")
    # Not before the lease could have ended. The grant was sent after asked_at and each kept
    # renewal at least a third of the lease after the one before, so the last one kept was
    # sent no sooner than asked_at + renewals * ttl / 3, and its lease runs a whole ttl from
    # there; every try since met the cut link. (Measured from the cut instead, a renewal
    # thread or a test thread that the loaded machine ran late would move the bound.)
    earliest = asked_at + lock.renewals * ttl / 3 + ttl
    assert told_at[0] >= earliest - 0.05, (told_at[0] - earliest, lock.renewals)
    assert proxy.refused >= 1 and lock.lost
    wait_for(lambda: c.holders("renew:down") == [], timeout=10, message="the server's lease to end")
    proxy.restore()
    with pytest.raises(LockLost, match="before the lease ended"):
        lock.release()
    assert len(lost) == 1
    via.close()


def test_asyncio_lock_follows_the_same_rule(server, r, proxy):
    c = Client(r)

    async def main():
        lost = []
        via = aioredis.Redis(host="127.0.0.1", port=proxy.port)
        # kept through a cut link restored within the lease
        async with aio.Lock(via, "renew:aio", ttl=3, on_lost=lost.append) as lock:
            while lock.renewals < 1:
                await asyncio.sleep(0.01)
            proxy.cut()
            deadline = time.monotonic() + 10
            while proxy.refused < 1 and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            proxy.restore()
            before = lock.renewals
            deadline = time.monotonic() + 10
            while lock.renewals <= before and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            assert lock.renewals > before and not lock.lost and lost == []
            assert "held" in repr(lock) and "renew:aio" in repr(lock)
        # refused after a REAP and another holder: lost at once, raised at the release
        with pytest.raises(LockLost):
            # 3 s: still held when the reap comes, however late the loaded machine runs it.
            async with aio.Lock(via, "renew:aio", ttl=3, owner="w-aio", on_lost=lost.append) as lock:
                assert c.reap(owner="w-aio") == 1
                c.lock("renew:aio", "other", ttl=30)
                deadline = time.monotonic() + 10
                while not lost and time.monotonic() < deadline:
                    await asyncio.sleep(0.01)
                assert len(lost) == 1 and lock.lost
        # detach: stops renewing, keeps the hold for its lease
        lock = aio.Lock(via, "renew:aio-detach", ttl=30)
        token = await lock.acquire()
        await lock.detach()
        assert lock.token is None and "not held" in repr(lock)
        assert [h.token for h in c.holders("renew:aio-detach")] == [token]
        await via.aclose()

    asyncio.run(main())
