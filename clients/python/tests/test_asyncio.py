"""The asyncio flavour, run with asyncio.run (no plugin)."""

import asyncio

import pytest
import redis.asyncio as aioredis

from redis_unique import LockLost, LockNotAcquired, ModuleNotLoaded, _functions
from redis_unique.asyncio import Client, Lock, Semaphore

from conftest import Server


def run(coro):
    return asyncio.run(coro)


def test_client_commands(server, r):
    async def main():
        conn = aioredis.Redis(host="127.0.0.1", port=server.port)
        c = Client(conn)
        t = await c.lock("a", "j1", ttl=30, owner="w:1", meta={"x": 1}, type="until_executed")
        assert isinstance(t, int)
        assert await c.lock("a", "j2") is None
        (h,) = await c.holders("a")
        assert (h.jid, h.token, h.owner, h.meta, h.type) == ("j1", t, "w:1", {"x": 1}, "until_executed")
        assert await c.locked_by("a") == [b"j1"]
        assert await c.waiters("a") == 0
        assert await c.reap(owner="w:1") == 1
        assert await c.unlock("a", "j1") is False
        pipe = c.pipeline()
        pipe.lock("b", "j", ttl=1).unlock("b", "j")
        res = await pipe.execute()
        assert isinstance(res[0], int) and res[1] is True
        m = await c.metrics()
        assert m["total"]["acquired"] == 2 and m["total"]["reaped"] == 1
        await conn.aclose()

    run(main())


def test_async_lock_renews_past_three_ttls_and_hands_over(server, r):
    async def main():
        conn = aioredis.Redis(host="127.0.0.1", port=server.port)
        c = Client(conn)
        # Renewed every third of the lease: a lease of 1.5 s is kept through a stall of the
        # loaded machine of up to a second, where one of 300 ms ended after 200 ms.
        ttl = 1.5
        order = []
        async with Lock(conn, "res", ttl=ttl) as lock:
            with pytest.raises(LockNotAcquired):
                await Lock(conn, "res", ttl=ttl).acquire()

            async def waiter():
                async with Lock(aioredis.Redis(host="127.0.0.1", port=server.port), "res", ttl=ttl, wait=30) as other:
                    order.append(("waiter", other.token))

            task = asyncio.ensure_future(waiter())
            while lock.renewals < 9:  # three leases' worth, bounded by the loop below
                await asyncio.sleep(0.05)
            (h,) = await c.holders("res")
            assert h.token == lock.token and not lock.lost
            order.append(("holder", lock.token))
        await asyncio.wait_for(task, 20)
        assert [o[0] for o in order] == ["holder", "waiter"] and order[1][1] > order[0][1]
        assert (await c.metrics())["total"]["expired"] == 0
        await conn.aclose()

    run(asyncio.wait_for(main(), 60))


def test_async_lock_lost_and_semaphore(server, r):
    async def main():
        conn = aioredis.Redis(host="127.0.0.1", port=server.port)
        with pytest.raises(LockLost):
            async with Lock(conn, "gone", ttl=0.3) as lock:
                await conn.delete("gone")
                while not lock.lost:
                    await asyncio.sleep(0.02)
        assert await Client(conn).holders("gone") == []
        async with Semaphore(conn, "s", 2, ttl=5), Semaphore(conn, "s", 2, ttl=5):
            with pytest.raises(LockNotAcquired):
                await Semaphore(conn, "s", 2, ttl=5).acquire()
        assert await conn.exists("s") == 0
        await conn.aclose()

    run(asyncio.wait_for(main(), 30))


def test_async_module_not_loaded():
    plain = Server(module=None)

    async def main():
        conn = aioredis.Redis(host="127.0.0.1", port=plain.port)
        with pytest.raises(ModuleNotLoaded):
            await Client(conn).lock("k", "a")
        await conn.aclose()

    _functions.set_backend("module")
    try:
        run(main())
    finally:
        _functions.set_backend(None)
        plain.stop()
