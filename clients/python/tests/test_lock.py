import os
import signal
import subprocess
import sys
import textwrap
import threading

import pytest

from redis_unique import AlreadyAcquired, Client, Lock, LockLost, LockNotAcquired, Semaphore

from conftest import wait_for


def server_ms(r) -> int:
    sec, usec = r.time()
    return sec * 1000 + usec // 1000


def test_lock_context_holds_and_releases(r):
    c = Client(r)
    with Lock(r, "res", ttl=30, owner="me", meta={"why": "test"}) as lock:
        (h,) = c.holders("res")
        assert (h.jid, h.token, h.owner, h.meta) == (lock.jid, lock.token, "me", {"why": "test"})
        with pytest.raises(LockNotAcquired):
            Lock(r, "res", ttl=30).acquire()
    assert c.holders("res") == [] and lock.token is None


def test_body_exception_propagates_and_releases(r):
    with pytest.raises(ZeroDivisionError):
        with Lock(r, "res", ttl=30):
            1 / 0
    assert r.exists("res") == 0


def test_lock_renews_itself_past_three_ttls(r):
    c = Client(r)
    # Renewed every third of the lease: 1.2 s is kept through a stall of the loaded machine
    # of 800 ms, where one of 300 ms ended after 200 ms.
    ttl = 1.2
    with Lock(r, "long", ttl=ttl) as lock:
        start = server_ms(r)
        # Bounded polling: well past three leases of server time while held.
        wait_for(lambda: server_ms(r) - start > 4 * ttl * 1000 and lock.renewals >= 9,
                 message="three leases of renewals")
        (h,) = c.holders("long")
        assert h.token == lock.token and not lock.lost
        assert (server_ms(r) - h.acquired_at.timestamp() * 1000) > 3 * ttl * 1000
        assert h.ttl <= ttl
    assert c.metrics()["total"]["renewed"] >= 9
    assert c.metrics()["total"]["expired"] == 0
    assert r.exists("long") == 0


def test_without_renewal_the_lease_runs_out_and_exit_raises_lock_lost(r):
    c = Client(r)
    with pytest.raises(LockLost):
        with Lock(r, "short", ttl=0.1, renew=False):
            wait_for(lambda: c.holders("short") == [], message="the lease to end")
    assert c.metrics()["total"]["unlock_missed"] == 1


def test_a_removed_lock_is_lost_and_not_taken_back(r):
    c = Client(r)
    with pytest.raises(LockLost):
        with Lock(r, "gone", ttl=0.3) as lock:
            r.delete("gone")
            wait_for(lambda: lock.lost, message="the renewal to notice")
            with pytest.raises(LockLost):
                lock.check()
    # The renewal that found it gone does not keep the new hold it got.
    assert c.holders("gone") == []


def test_semaphore(r):
    a, b = Semaphore(r, "sem", 2, ttl=30), Semaphore(r, "sem", 2, ttl=30)
    with a, b:
        with pytest.raises(LockNotAcquired):
            Semaphore(r, "sem", 2, ttl=30).acquire()
        assert len(Client(r).holders("sem")) == 2
    with Semaphore(r, "sem", 2, ttl=30):
        pass


def test_wait_hands_over_in_arrival_order(server, r):
    order = []
    holder = Lock(r, "q", ttl=30)
    holder.acquire()

    def take(name):
        with Lock(server.client(), "q", ttl=30, wait=30, jid=name):
            order.append(name)

    threads = []
    for i, name in enumerate(("w1", "w2", "w3")):
        t = threading.Thread(target=take, args=(name,))
        t.start()
        threads.append(t)
        wait_for(lambda: Client(r).waiters("q") == i + 1, message="waiter %s" % name)
    holder.release()
    for t in threads:
        t.join(20)
    assert order == ["w1", "w2", "w3"]


# A lease of 2 s renewed every third of it: the holder keeps it through a stall of the
# loaded machine until it is killed, and the waiter is served at most 2 s after the kill.
HOLDER = textwrap.dedent("""
    import sys, time, redis
    from redis_unique import Lock
    lock = Lock(redis.Redis(host="127.0.0.1", port=int(sys.argv[1])), "crash", ttl=2.0, jid="doomed")
    lock.acquire()
    print(lock.token, flush=True)
    while True:
        time.sleep(1)
""")


def test_kill_9_holder_lease_runs_out_and_waiter_is_served(server, r):
    c = Client(r)
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(server.port)], stdout=subprocess.PIPE, text=True)
    try:
        dead_token = int(proc.stdout.readline())
        # It renews: the hold outlives its first lease.
        wait_for(lambda: c.metrics()["total"]["renewed"] >= 3, message="renewals by the holder")
        got = {}

        def waiter():
            with Lock(server.client(), "crash", ttl=5, wait=30) as lock:
                got["token"] = lock.token
                got["holders"] = [h.jid for h in c.holders("crash")]

        t = threading.Thread(target=waiter)
        t.start()
        wait_for(lambda: Client(r).waiters("crash") == 1, message="the waiter to block")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        t.join(20)
        assert got["token"] > dead_token
        assert got["holders"] == [got["holders"][0]] and got["holders"][0] != "doomed"
        m = c.metrics()["total"]
        assert m["waited"] == 1 and m["expired"] == 1
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_second_acquire_raises_instead_of_a_second_renewal(r):
    lock = Lock(r, "twice", ttl=30)
    lock.acquire()
    threads = threading.active_count()
    with pytest.raises(AlreadyAcquired):
        lock.acquire()
    assert threading.active_count() == threads, "no second renewal thread"
    lock.release()
    lock.acquire()  # free again after a release
    lock.release()
