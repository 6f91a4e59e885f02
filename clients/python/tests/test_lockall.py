"""Several keys in one grant against a real server: every key or none through lock_all and
MultiLock (sync and asyncio), waiting for every key at once, and the renewal of a multi-key
hold kept, and lost when one key's hold ends (UNLOCK or REAP of one key); renewals that send
the lease only; a cut link restored within the lease (kept) or not (lost when it ends)."""
import asyncio
import threading

import pytest
import redis.asyncio as aioredis

from redis_unique import Client, LockLost, LockNotAcquired, MultiLock, Rate
from redis_unique import asyncio as aio

from conftest import wait_for

TENANT, GLOBAL = "{api}:tenant:acme", "{api}:global"


def test_every_key_or_none(r):
    c = Client(r)
    # The global key is full: the grant takes nothing, not even the tenant's slot or its rate.
    assert c.lock(GLOBAL, "other", limit=1, ttl=30) is not None
    assert c.lock_all([TENANT, GLOBAL], "job-1", limits=[2, 1], rates={TENANT: Rate(1, per=60)}, ttl=30) is None
    assert c.holders(TENANT) == [] and c.rate(TENANT) is None
    assert c.unlock(GLOBAL, "other")
    tokens = c.lock_all([TENANT, GLOBAL], "job-1", limits=[2, 1], rates={TENANT: Rate(1, per=60)}, ttl=30,
                        type="while_executing", owner="w:1", meta={"job": 1})
    assert isinstance(tokens, list) and len(tokens) == 2
    for key, token in zip((TENANT, GLOBAL), tokens):
        (h,) = c.holders(key)
        assert (h.jid, h.token, h.type, h.owner, h.meta) == ("job-1", token, "while_executing", "w:1", {"job": 1})
    assert c.rate(TENANT).remaining == 0  # spent once, by the whole grant
    # The same jid again renews every key: the same tokens.
    assert c.lock_all([TENANT, GLOBAL], "job-1", ttl=60) == tokens
    # Another job: the tenant has room (2) and its rate none: refused whole.
    assert c.lock_all([TENANT, GLOBAL], "job-2", limits=[2, 0], rates={TENANT: Rate(1, per=60)}) is None
    assert c.locked_by(TENANT) == [b"job-1"] and c.locked_by(GLOBAL) == [b"job-1"]
    # A plain UNLOCK frees one key early; UNLOCKALL counts what it released.
    assert c.unlock(GLOBAL, "job-1")
    assert c.unlock_all([TENANT, GLOBAL], "job-1") == 1
    assert c.unlock_all([TENANT, GLOBAL], "job-1") == 0


def test_limits_per_key(r):
    c = Client(r)
    granted = [c.lock_all([TENANT, GLOBAL], "j%d" % i, limits=[2, 3], ttl=30) for i in range(3)]
    assert [g is not None for g in granted] == [True, True, False]  # the tenant's 2
    assert c.lock_all(["{api}:tenant:other", GLOBAL], "k1", limits=[2, 3], ttl=30) is not None
    assert c.lock_all(["{api}:tenant:other", GLOBAL], "k2", limits=[2, 3], ttl=30) is None  # the global 3
    assert len(c.holders(GLOBAL)) == 3 and len(c.holders("{api}:tenant:other")) == 1


def test_a_waiter_is_granted_every_key_at_once(server, r):
    c = Client(r)
    c.lock("{w}:b", "holder", ttl=30)
    waiting = Client(server.client())
    got = []
    t = threading.Thread(target=lambda: got.append(waiting.lock_all(["{w}:a", "{w}:b"], "waiter", ttl=30, wait=60)))
    t.start()
    try:
        wait_for(lambda: c.waiters("{w}:b") == 1, message="the multi-key waiter queued")
        # It holds nothing while it waits.
        assert c.holders("{w}:a") == []
        assert c.unlock("{w}:b", "holder")
    finally:
        t.join(60)
    (tokens,) = got
    assert [h.jid for h in c.holders("{w}:a")] == ["waiter"] and [h.jid for h in c.holders("{w}:b")] == ["waiter"]
    assert [c.holders(k)[0].token for k in ("{w}:a", "{w}:b")] == tokens


def test_pipeline_and_resp3(server):
    conn = server.client(protocol=3, decode_responses=True)
    c = Client(conn)
    tokens, released = c.pipeline().lock_all(["{p}:a", "{p}:b"], "j", limits=[1, 2]).unlock_all(
        ["{p}:a", "{p}:b"], "j").execute()
    assert len(tokens) == 2 and all(isinstance(t, int) for t in tokens) and released == 2
    conn.close()


def test_multilock_holds_every_key_and_frees_them(r):
    c = Client(r)
    with MultiLock(r, {TENANT: 2, GLOBAL: 10}, ttl=30, owner="w:1") as hold:
        assert list(hold.tokens) == [TENANT, GLOBAL]
        assert hold.tokens[GLOBAL] == c.holders(GLOBAL)[0].token
        assert hold.held and [h.jid for h in c.holders(TENANT)] == [hold.jid]
        # A second MultiLock on the keys in the other order: no deadlock, refused at once.
        with pytest.raises(LockNotAcquired, match="not every key has room"):
            MultiLock(r, {GLOBAL: 1, TENANT: 2}, ttl=30).acquire()
        assert len(c.holders(TENANT)) == 1
    assert c.holders(TENANT) == [] and c.holders(GLOBAL) == [] and not hold.lost


def test_multilock_waits(server, r):
    c = Client(r)
    c.lock("{w}:b", "holder", ttl=30)
    result = []

    def take():
        with MultiLock(server.client(), ["{w}:a", "{w}:b"], ttl=30, wait=60) as hold:
            result.append(hold.tokens)

    t = threading.Thread(target=take)
    t.start()
    try:
        wait_for(lambda: c.waiters("{w}:b") == 1, message="the MultiLock waiting")
        c.unlock("{w}:b", "holder")
    finally:
        t.join(60)
    assert len(result) == 1 and list(result[0]) == ["{w}:a", "{w}:b"]
    assert c.holders("{w}:a") == [] and c.holders("{w}:b") == []


# The lease of the holds that a test keeps by renewal (every third of it): long enough to be
# kept through a stall of 800 ms of the loaded machine, where one of 600 ms ended after 400 ms.
LEASE = 1.2


def test_renewal_keeps_every_key(r):
    c = Client(r)
    lost = []
    with MultiLock(r, {"{k}:a": 1, "{k}:b": 3}, ttl=LEASE, on_lost=lost.append) as hold:
        first = [c.holders(k)[0].expires_at_ms for k in ("{k}:a", "{k}:b")]
        wait_for(lambda: hold.renewals >= 4, timeout=30, message="four renewals")
        # Past the first lease: held only because the renewals moved every key's lease.
        wait_for(lambda: all(c.holders(k) and c.holders(k)[0].expires_at_ms > f + LEASE * 1000
                             for k, f in zip(("{k}:a", "{k}:b"), first)),
                 timeout=30, message="both leases moved past the first one's end")
        assert [c.holders(k)[0].token for k in ("{k}:a", "{k}:b")] == list(hold.tokens.values())
    assert lost == [] and not hold.lost


@pytest.mark.parametrize("how", ["unlock one key", "reap one key's ended lease"])
def test_renewal_is_lost_when_one_keys_hold_ends(r, how):
    c = Client(r)
    lost = []
    with pytest.raises(LockLost, match="one key's hold had ended"):
        with MultiLock(r, {"{l}:a": 1, "{l}:b": 1}, ttl=LEASE, owner="w:lost", on_lost=lost.append) as hold:
            wait_for(lambda: hold.renewals >= 1, timeout=30, message="a first renewal")
            if how == "unlock one key":
                assert c.unlock("{l}:a", hold.jid)
            else:
                # One key's lease cut short (a plain LOCK of the same jid moves it) and reaped
                # once ended: the other key is still held, so the renewal must be refused whole.
                assert c.lock("{l}:a", hold.jid, ttl=0.001) is not None
                wait_for(lambda: c.reap() >= 1 or not c.holders("{l}:a"), timeout=30,
                         message="the ended lease reaped")
            # The loss is marked on the lock, then told to on_lost: wait for the telling.
            wait_for(lambda: hold.lost and lost, timeout=30, message="the loss told by the next renewal")
            assert len(lost) == 1 and isinstance(lost[0], LockLost)
    # Leaving the block freed what was left.
    assert c.holders("{l}:a") == [] and c.holders("{l}:b") == []
    assert len(lost) == 1


def test_renewal_that_took_new_holds_gives_them_up(r):
    c = Client(r)
    lost = []
    with pytest.raises(LockLost, match="another fencing token"):
        with MultiLock(r, ["{n}:a", "{n}:b"], ttl=0.6, on_lost=lost.append) as hold:
            r.delete("{n}:a", "{n}:b")  # every hold gone: the next renewal is a new grant
            wait_for(lambda: hold.lost and lost, timeout=30, message="the loss told")
            wait_for(lambda: not c.holders("{n}:a") and not c.holders("{n}:b"), timeout=30,
                     message="the new holds given up")
    assert len(lost) == 1


def test_asyncio_client_and_multilock(server, r):
    async def main():
        conn = aioredis.Redis(host="127.0.0.1", port=server.port)
        c = aio.Client(conn)
        tokens = await c.lock_all(["{a}:x", "{a}:y"], "j", limits=[1, 2], rates=[None, Rate(10, per=1)], ttl=30)
        assert len(tokens) == 2
        assert await c.lock_all(["{a}:y", "{a}:x"], "k") is None  # x is full
        assert await c.unlock_all(["{a}:x", "{a}:y"], "j") == 2
        tokens, n = await c.pipeline().lock_all(["{a}:x"], "p").unlock_all(["{a}:x"], "p").execute()
        assert len(tokens) == 1 and n == 1

        lost = []
        async with aio.MultiLock(conn, {"{a}:x": 1, "{a}:y": 2}, ttl=LEASE, on_lost=lost.append) as hold:
            while hold.renewals < 3:
                await asyncio.sleep(0.05)
            assert [h.token for h in await c.holders("{a}:y")] == [hold.tokens["{a}:y"]]
        assert lost == [] and await c.holders("{a}:x") == []

        with pytest.raises(LockLost):
            async with aio.MultiLock(conn, ["{a}:x", "{a}:y"], ttl=0.6, on_lost=lost.append) as hold:
                await c.unlock("{a}:y", hold.jid)
                while not hold.lost:
                    await asyncio.sleep(0.05)
        assert len(lost) == 1 and await c.holders("{a}:x") == []
        await conn.aclose()

    asyncio.run(asyncio.wait_for(main(), 60))


def test_renewals_send_the_lease_only(r):
    c = Client(r)
    old = r.config_get("slowlog-*")
    r.config_set("slowlog-log-slower-than", 0)
    r.config_set("slowlog-max-len", 1024)
    r.slowlog_reset()
    try:
        with MultiLock(r, {"{s}:a": 2, "{s}:b": 0}, ttl=LEASE, owner="w:1", meta={"job": 1}, type="while_executing",
                       rates={"{s}:b": Rate(1, per=60)}) as hold:
            wait_for(lambda: hold.renewals >= 3, timeout=30, message="three renewals")
            grant_tokens = list(hold.tokens.values())
            # The grant spent the one grant a minute; renewals spend nothing, so they go on.
            assert c.rate("{s}:b").remaining == 0 and not hold.lost
        sent = [[x.decode() if isinstance(x, bytes) else x for x in e["command"].split(b" " if isinstance(
            e["command"], bytes) else " ")] for e in reversed(r.slowlog_get(1024))]
    finally:
        r.config_set("slowlog-log-slower-than", old["slowlog-log-slower-than"])
        r.config_set("slowlog-max-len", old["slowlog-max-len"])
    calls = [a for a in sent if a[0] == "UNIQUE.LOCKALL"]
    grant, renewals = calls[0], calls[1:]
    assert grant[:9] == ["UNIQUE.LOCKALL", "2", "{s}:a", "{s}:b", hold.jid, "LIMIT", "2", "0", "RATE"]
    assert len(renewals) >= 3
    bare = ["UNIQUE.LOCKALL", "2", "{s}:a", "{s}:b", hold.jid, "TTL", str(int(LEASE * 1000))]
    assert all(a == bare for a in renewals), renewals
    tokens = [str(t) for t in grant_tokens]
    assert ["UNIQUE.UNLOCKALL", "2", "{s}:a", "{s}:b", hold.jid, "TOKEN", *tokens] in sent  # by its own tokens
    assert c.holders("{s}:a") == []


def test_a_cut_link_restored_within_the_lease_keeps_every_key_and_one_down_past_it_loses(r, proxy):
    import redis

    c = Client(r)
    lost = []
    via = redis.Redis(host="127.0.0.1", port=proxy.port)
    with MultiLock(via, ["{c}:a", "{c}:b"], ttl=3, on_lost=lost.append) as hold:
        wait_for(lambda: hold.renewals >= 1, timeout=10, message="a first renewal")
        proxy.cut()
        wait_for(lambda: proxy.refused >= 1, timeout=10, message="a renewal to meet the cut link")
        proxy.restore()
        before = hold.renewals
        wait_for(lambda: hold.renewals > before, timeout=10, message="a renewal after the link is back")
        assert [c.holders(k)[0].token for k in ("{c}:a", "{c}:b")] == list(hold.tokens.values())
    assert lost == [] and c.holders("{c}:a") == []

    hold = MultiLock(via, ["{c}:a", "{c}:b"], ttl=1.2, on_lost=lost.append)
    hold.acquire()
    wait_for(lambda: hold.renewals >= 1, timeout=10, message="a first renewal")
    proxy.cut()
    wait_for(lambda: lost, timeout=15, message="the loss told when the lease ends")
    wait_for(lambda: not c.holders("{c}:a") and not c.holders("{c}:b"), timeout=10, message="the leases ended")
    proxy.restore()
    with pytest.raises(LockLost, match="before the lease ended"):
        hold.release()
    assert len(lost) == 1
    via.close()
