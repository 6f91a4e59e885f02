"""Fair sharing and shared/exclusive modes against a real server: group limits, the
group and mode a holder shows, WAITERS by group, and RWLock (a writer excludes
readers, readers share, a queued writer blocks new readers, the readers queued behind
it are served together), sync and asyncio, renewed like any lock."""
import asyncio
import threading

import pytest
import redis.asyncio as aioredis

import redis_unique.asyncio as aio
from redis_unique import Client, GroupWaiters, LockNotAcquired, RWLock, Semaphore, UniqueError

from conftest import wait_for


class Waiting:
    """``acquire()`` of a lock in a thread of its own (a blocking WAIT), held until
    ``release()``; ``error`` is what acquiring or releasing raised. Made through the
    ``waiting`` fixture, which releases what a failed test left."""

    def __init__(self, lock):
        self.lock = lock
        self.held = threading.Event()
        self.done = threading.Event()
        self.error = None
        self._go = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        try:
            self.lock.acquire()
        except Exception as exc:  # noqa: BLE001 - the test reads it
            self.error = exc
            self.done.set()
            return
        self.held.set()
        self._go.wait(60)
        try:
            self.lock.release()
        except Exception as exc:  # noqa: BLE001 - the test reads it
            self.error = exc
        self.done.set()

    def release(self):
        self._go.set()
        assert self.done.wait(60), "the waiting lock never finished"
        assert self.error is None, self.error


@pytest.fixture()
def waiting():
    """Waiting(lock) for a test; at its end, every one still waiting or holding lets go (a
    test that failed must not leave holders for the next one)."""
    made = []

    def make(lock):
        made.append(Waiting(lock))
        return made[-1]

    yield make
    for w in made:
        w._go.set()
    for w in made:
        if not w.done.wait(1):  # still waiting in the server: its connection cut wakes it up
            w.lock.client.redis.connection_pool.disconnect()
        w.thread.join(60)


def test_group_limit_caps_one_group_and_leaves_the_others_the_key(r):
    c = Client(r)
    a1 = Semaphore(r, "api", 4, ttl=30, group="acme", group_limit=2)
    a2 = Semaphore(r, "api", 4, ttl=30, group="acme", group_limit=2)
    a1.acquire()
    a2.acquire()
    with pytest.raises(LockNotAcquired):
        Semaphore(r, "api", 4, ttl=30, group="acme", group_limit=2).acquire()
    with Semaphore(r, "api", 4, ttl=30, group="globex", group_limit=2, weight=3) as b:
        held = {h.jid: h for h in c.holders("api")}
        assert {j: (h.group, h.mode) for j, h in held.items()} == {
            a1.jid: ("acme", None), a2.jid: ("acme", None), b.jid: ("globex", None)}
    a1.release()
    with Semaphore(r, "api", 4, ttl=30, group="acme", group_limit=2):  # under its limit again
        pass
    a2.release()
    assert c.holders("api") == []


def test_a_client_lock_without_group_reads_nil_group_and_mode(r):
    c = Client(r)
    c.lock("k", "plain", limit=3, ttl=30)
    c.lock("k", "reader", limit=3, ttl=30, group="g", mode="shared")
    holders = {h.jid: (h.group, h.mode) for h in c.holders("k")}
    assert holders == {"plain": (None, None), "reader": ("g", "shared")}
    assert c.waiters("k", groups=True) == [GroupWaiters(None, 0, 1), GroupWaiters("g", 0, 1)]
    assert c.waiters("missing", groups=True) == []


def test_waiters_by_group_counts_who_waits_and_who_holds(r, server, waiting):
    c = Client(r)
    for i in range(2):
        assert c.lock("q", "hold-a%d" % i, limit=2, ttl=30, group="a")
    queued = [waiting(Semaphore(server.client(), "q", 2, ttl=30, wait=60, group=g)) for g in ("b", "b", "c")]
    plain = waiting(Semaphore(server.client(), "q", 2, ttl=30, wait=60))
    wait_for(lambda: c.waiters("q") == 4, message="four waiters")
    assert c.waiters("q", groups=True) == [GroupWaiters(None, 1, 0), GroupWaiters("a", 0, 2),
                                           GroupWaiters("b", 2, 0), GroupWaiters("c", 1, 0)]
    for i in range(2):
        c.unlock("q", "hold-a%d" % i)
    everyone = queued + [plain]
    wait_for(lambda: sum(w.held.is_set() for w in everyone) == 2, message="two served")
    served = [w for w in everyone if w.held.is_set()]
    for w in served:
        w.release()
    for w in everyone:
        if w not in served:
            assert w.held.wait(60), "the others served in turn"
            w.release()
    assert c.waiters("q", groups=True) == []


def test_a_waiter_held_back_by_its_groups_limit_does_not_block_another_group(r, server, waiting):
    c = Client(r)
    for i in range(2):
        c.lock("q", "a%d" % i, limit=3, ttl=30, group="a", group_limit=2)
    blocked = waiting(Semaphore(server.client(), "q", 3, ttl=30, wait=60, group="a", group_limit=2))
    wait_for(lambda: c.waiters("q") == 1, message="a's third request waiting")
    # The free slot goes to b at once: a's waiter waits for a's own holders only.
    with Semaphore(r, "q", 3, ttl=30, wait=30, group="b", group_limit=2) as b:
        assert sorted(h.group for h in c.holders("q")) == ["a", "a", "b"] and b.token
        assert not blocked.held.is_set()
    assert c.waiters("q", groups=True) == [GroupWaiters("a", 1, 2)]
    c.unlock("q", "a0")
    assert blocked.held.wait(60) and blocked.error is None
    blocked.release()


def test_readers_share_and_a_writer_holds_alone(r):
    c = Client(r)
    rw = RWLock(r, "doc", ttl=30, limit=3)
    with rw.read() as r1, rw.read() as r2:
        assert sorted((h.jid, h.mode) for h in c.holders("doc")) == sorted([(r1.jid, "shared"), (r2.jid, "shared")])
        with pytest.raises(LockNotAcquired):
            rw.write().acquire()
        with rw.read():
            with pytest.raises(LockNotAcquired):  # the limit counts readers
                rw.read().acquire()
    with rw.write() as w:
        assert [(h.jid, h.mode) for h in c.holders("doc")] == [(w.jid, "exclusive")]
        with pytest.raises(LockNotAcquired):
            rw.read().acquire()
        with pytest.raises(LockNotAcquired):
            rw.write().acquire()
    assert c.holders("doc") == []


def test_a_queued_writer_blocks_new_readers_and_the_readers_behind_it_are_served_together(r, server, waiting):
    c = Client(r)
    rw = RWLock(r, "doc", ttl=30, limit=5)
    first = rw.read()
    first.acquire()
    writer = waiting(RWLock(server.client(), "doc", ttl=30, limit=5, wait=60).write())
    wait_for(lambda: c.waiters("doc") == 1, message="the writer waiting")
    # A slot is free for a reader, but the writer came first.
    with pytest.raises(LockNotAcquired):
        rw.read().acquire()
    readers = [waiting(RWLock(server.client(), "doc", ttl=30, limit=5, wait=60).read()) for _ in range(2)]
    wait_for(lambda: c.waiters("doc") == 3, message="two readers queued behind the writer")
    first.release()
    assert writer.held.wait(60) and writer.error is None
    assert [h.mode for h in c.holders("doc")] == ["exclusive"]
    assert not any(x.held.is_set() for x in readers)
    writer.release()
    for x in readers:
        assert x.held.wait(60) and x.error is None
    # Both at once: served together when the writer left.
    assert sorted(h.mode for h in c.holders("doc")) == ["shared", "shared"]
    for x in readers:
        x.release()


def test_a_write_downgrades_and_a_sole_read_upgrades_never_waiting(r, server, waiting):
    c = Client(r)
    rw = RWLock(r, "doc", ttl=30, limit=5)
    w = rw.write()
    w.acquire()
    reader = waiting(RWLock(server.client(), "doc", ttl=30, limit=5, wait=60).read())
    wait_for(lambda: c.waiters("doc") == 1, message="a reader waiting")
    assert w.downgrade() is True and w.mode == "shared"
    assert reader.held.wait(60)  # served at once: the writer is a reader now
    assert sorted((h.mode, h.token == w.token) for h in c.holders("doc")) == [("shared", False), ("shared", True)]
    assert w.upgrade() is False and w.mode == "shared"  # another reader holds: at once, unchanged
    reader.release()
    assert w.upgrade() is True and w.mode == "exclusive"
    assert [(h.token, h.mode) for h in c.holders("doc")] == [(w.token, "exclusive")]
    with pytest.raises(LockNotAcquired):
        rw.read().acquire()
    w.release()
    with pytest.raises(UniqueError):
        w.upgrade()  # not held


def test_rwlock_holds_are_renewed_and_keep_their_mode(r):
    c = Client(r)
    # Renewed every third of the lease: 1.2 s is kept through a stall of the loaded machine
    # of 800 ms, where one of 300 ms ended after 200 ms.
    rw = RWLock(r, "doc", ttl=1.2, limit=2)
    with rw.read() as hold:
        wait_for(lambda: hold.renewals >= 3, message="three renewals")
        (h,) = c.holders("doc")
        assert (h.jid, h.token, h.mode) == (hold.jid, hold.token, "shared") and not hold.lost
    with rw.write() as hold:
        wait_for(lambda: hold.renewals >= 3, message="three renewals")
        (h,) = c.holders("doc")
        assert (h.token, h.mode) == (hold.token, "exclusive")
    assert c.holders("doc") == []


def test_asyncio_rwlock(server, r):
    c = Client(r)

    async def main():
        ar = aioredis.Redis(host="127.0.0.1", port=server.port)
        # Long enough to be kept through a stall of the loaded machine (renewed every 400 ms).
        rw = aio.RWLock(ar, "adoc", ttl=1.2, limit=2)
        async with rw.read() as r1, rw.read() as r2:
            assert sorted(h.mode for h in c.holders("adoc")) == ["shared", "shared"]
            with pytest.raises(LockNotAcquired):
                await rw.write().acquire()
            with pytest.raises(LockNotAcquired):
                await rw.read().acquire()
            while r1.renewals < 2 or r2.renewals < 2:
                await asyncio.sleep(0.05)
        async with rw.write(wait=30) as w:
            assert [(h.token, h.mode) for h in c.holders("adoc")] == [(w.token, "exclusive")]
            with pytest.raises(LockNotAcquired):
                await rw.read().acquire()
            assert await w.downgrade() is True
            async with rw.read() as other:
                assert sorted(h.mode for h in c.holders("adoc")) == ["shared", "shared"]
                assert await other.upgrade() is False
            assert await w.upgrade() is True and w.mode == "exclusive"
        sem = aio.Semaphore(ar, "asem", 3, ttl=30, group="acme", group_limit=1)
        async with sem:
            with pytest.raises(LockNotAcquired):
                await aio.Semaphore(ar, "asem", 3, ttl=30, group="acme", group_limit=1).acquire()
            assert await aio.Client(ar).waiters("asem", groups=True) == [GroupWaiters("acme", 0, 1)]
        await ar.aclose()

    asyncio.run(asyncio.wait_for(main(), 120))
    assert c.holders("adoc") == [] and c.holders("asem") == []


def test_a_freed_slot_goes_to_the_waiting_group_that_holds_the_fewest(r, server, waiting):
    c = Client(r)
    for i in range(2):
        c.lock("q", "a%d" % i, limit=2, ttl=30, group="a")
    # In arrival order: two of a, then one of b.
    first = [waiting(Semaphore(server.client(), "q", 2, ttl=30, wait=60, group="a")) for _ in range(2)]
    wait_for(lambda: c.waiters("q") == 2, message="a's two waiting")
    b = waiting(Semaphore(server.client(), "q", 2, ttl=30, wait=60, group="b"))
    wait_for(lambda: c.waiters("q") == 3, message="b waiting")
    # a still holds 1, b none: b is served, though a's waiters came first.
    c.unlock("q", "a0")
    assert b.held.wait(60)
    assert sorted(h.group for h in c.holders("q")) == ["a", "b"]
    assert not any(w.held.is_set() for w in first)
    c.unlock("q", "a1")
    wait_for(lambda: sum(w.held.is_set() for w in first) == 1, message="then a")
    b.release()
    for w in first:
        assert w.held.wait(60), "everyone served in the end"
        w.release()


def test_a_weight_counts_the_slots_a_group_holds_for_less(r, server, waiting):
    c = Client(r)
    c.lock("q", "b0", limit=3, ttl=30, group="b")
    c.lock("q", "c0", limit=3, ttl=30, group="c", weight=2)
    c.lock("q", "x", limit=3, ttl=30)
    b = waiting(Semaphore(server.client(), "q", 3, ttl=30, wait=60, group="b"))
    wait_for(lambda: c.waiters("q") == 1, message="b waiting")
    heavy = waiting(Semaphore(server.client(), "q", 3, ttl=30, wait=60, group="c", weight=2))
    wait_for(lambda: c.waiters("q") == 2, message="c waiting")
    # Each holds one slot, but c's weighs 2: one slot is half of c's share, all of b's.
    c.unlock("q", "x")
    assert heavy.held.wait(60)
    assert not b.held.is_set()
    c.unlock("q", "b0")
    assert b.held.wait(60)
    heavy.release()
    b.release()
