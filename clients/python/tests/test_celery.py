"""Unique tasks through a real Celery worker (prefork, 2 processes) on the test Redis."""

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from redis_unique import Client, DuplicateTask

from conftest import CELERY_DB as DB, HERE, celery_worker, wait_for



@pytest.fixture(scope="module")
def celery_env(server):
    with celery_worker(server, "w1", "celery", 2) as env:
        yield env


@pytest.fixture()
def cel(celery_env, server):
    mod, worker = celery_env
    return mod, worker, Client(server.client(db=DB)), server.client(db=DB)


def tag():
    return uuid.uuid4().hex[:12]


def runs(r, t):
    return [x.decode() for x in r.lrange("runs:" + t, 0, -1)]


def open_gate(r, t, n=1):
    r.rpush("gate:" + t, *([1] * n))


def test_until_executed_skip_returns_the_sent_task_and_frees_on_success(cel):
    mod, worker, c, r = cel
    t = tag()
    first = mod.ue_skip.delay(t)
    second = mod.ue_skip.delay(t)
    assert second.id == first.id  # skipped: the AsyncResult of the task that holds the lock
    wait_for(lambda: runs(r, t) == [first.id], message="the first run")
    (h,) = c.holders(mod.ue_skip.unique_key([t], {}))
    # Running: the worker took the lock over with its OWNER (node name, main pid) and a short lease.
    assert (h.jid, h.type, h.owner) == (first.id, "until_executed", "%s:%d" % (h.owner.split(":")[0], worker.pid))
    assert h.owner == r.get("owner:" + t).decode() and h.owner.startswith("w1@")
    assert h.ttl <= 60
    assert mod.ue_skip.delay(t).id == first.id
    open_gate(r, t)
    assert first.get(timeout=30) == t
    wait_for(lambda: c.holders(mod.ue_skip.unique_key([t], {})) == [], message="the release")
    third = mod.ue_skip.delay(t)
    assert third.id != first.id
    open_gate(r, t)
    assert third.get(timeout=30) == t
    assert runs(r, t) == [first.id, third.id]


def test_until_executed_raise_and_custom_key(cel):
    mod, worker, c, r = cel
    t = tag()
    first = mod.ue_raise.delay(t)
    with pytest.raises(DuplicateTask) as e:
        mod.ue_raise.delay(t)
    assert e.value.existing == first.id
    with pytest.raises(DuplicateTask):
        mod.ue_raise.delay(tag=t, fail=False)  # the same call, bound to the signature
    other = mod.ue_raise.delay(t + "-other")  # other arguments: another lock
    open_gate(r, t)
    open_gate(r, t + "-other")
    assert first.get(timeout=30) == t and other.get(timeout=30) == t + "-other"
    # key=callable: only the first argument counts.
    k1 = mod.ue_keyed.apply_async((t,), {"fail": False})
    k2 = mod.ue_keyed.apply_async((t,), {"fail": True})
    assert k1.id == k2.id and mod.ue_keyed.unique_key([t], {}).endswith(":by-tag:" + t)
    open_gate(r, t)
    k1.get(timeout=30)


def test_a_retry_does_not_take_back_a_lock_released_before_it_was_kept(cel):
    mod, worker, c, r = cel
    t = tag()
    res = mod.ue_released_then_retried.delay(t)
    # RETRY is stored after the run's lock was kept (or given up) for the retry.
    wait_for(lambda: res.state == "RETRY", message="the retry")
    assert c.holders(mod.ue_released_then_retried.unique_key([t], {})) == []
    res.revoke()  # the retry, an hour away, is not run


def test_final_failure_frees_but_a_retry_keeps_the_lock(cel):
    mod, worker, c, r = cel
    t = tag()
    res = mod.ue_flaky.delay(t)
    with pytest.raises(ValueError):
        res.get(timeout=30)
    assert runs(r, t) == [res.id, res.id]  # ran, retried under the same id, failed for good
    assert [int(x) for x in r.lrange("holders:" + t, 0, -1)] == [1, 1]  # held on both runs
    wait_for(lambda: c.holders(mod.ue_flaky.unique_key([t], {})) == [], message="the release on failure")
    t2 = tag()
    failing = mod.ue_skip.delay(t2, fail=True)
    open_gate(r, t2)
    with pytest.raises(ValueError):
        failing.get(timeout=30)
    wait_for(lambda: c.holders(mod.ue_skip.unique_key([t2], {"fail": True})) == [], message="the release")


def test_until_executing_frees_when_the_task_starts(cel):
    mod, worker, c, r = cel
    t = tag()
    first = mod.uing.apply_async((t,), queue="later")  # a queue the worker does not consume yet
    key = mod.uing.unique_key([t], {})
    assert [h.jid for h in c.holders(key)] == [first.id]
    assert mod.uing.apply_async((t,), queue="later").id == first.id
    mod.app.control.add_consumer("later", reply=True, destination=["w1@" + os.uname().nodename])
    try:
        wait_for(lambda: runs(r, t) == [first.id], message="the run")
        assert c.holders(key) == []  # released as it started
        second = mod.uing.delay(t)
        assert second.id != first.id
        open_gate(r, t, 2)
        assert first.get(timeout=30) == t and second.get(timeout=30) == t
    finally:
        mod.app.control.cancel_consumer("later", reply=True, destination=["w1@" + os.uname().nodename])


def test_revoke_frees_the_lock(cel):
    mod, worker, c, r = cel
    t = tag()
    res = mod.ue_skip.apply_async((t,), queue="later")
    key = mod.ue_skip.unique_key([t], {})
    assert [h.jid for h in c.holders(key)] == [res.id]
    mod.app.control.revoke(res.id)
    mod.app.control.add_consumer("later", reply=True, destination=["w1@" + os.uname().nodename])
    try:
        wait_for(lambda: c.holders(key) == [], message="the release on revoke")
        assert res.state == "REVOKED" and runs(r, t) == []
    finally:
        mod.app.control.cancel_consumer("later", reply=True, destination=["w1@" + os.uname().nodename])


@pytest.mark.parametrize("name", ["we_skip", "we_raise", "we_retry", "uawe"])
def test_while_executing_conflicts(cel, name):
    mod, worker, c, r = cel
    task = getattr(mod, name)
    t = tag()
    first = task.delay(t)
    wait_for(lambda: runs(r, t) == [first.id], message="the first run")
    key = task.unique_key([t], {})
    (h,) = c.holders(key + ":run")
    assert (h.jid, h.type) == (first.id, "while_executing")
    if name == "uawe":
        assert c.holders(key) == []  # the lock taken when sent is released as the run starts
    second = task.delay(t)
    assert second.id != first.id  # nothing held at send time for these types (uawe: freed at start)
    if name in ("we_skip", "uawe"):
        assert second.get(timeout=30) is None
        assert runs(r, t) == [first.id]
    elif name == "we_raise":
        with pytest.raises(DuplicateTask):
            second.get(timeout=30)
        assert second.state == "FAILURE"
    else:
        wait_for(lambda: second.state == "RETRY", message="a retry of the second")
        assert runs(r, t) == [first.id]
    open_gate(r, t, 2)
    assert first.get(timeout=30) == t
    if name == "we_retry":
        assert second.get(timeout=30) == t
        assert runs(r, t) == [first.id, second.id]
    wait_for(lambda: c.holders(key + ":run") == [] and c.holders(key) == [], message="every lock freed")


@pytest.mark.module_only("the background reaper counts the ended lease as expired")
def test_until_expired_holds_after_success_until_its_lease(cel):
    mod, worker, c, r = cel
    t = tag()
    before = c.metrics()["types"].get("until_expired", {"expired": 0, "released": 0})
    first = mod.expiring.delay(t)
    open_gate(r, t)
    assert first.get(timeout=30) == t
    key = mod.expiring.unique_key([t], {})
    # Not released on success: held until its lease ran out and the module removed it.
    wait_for(lambda: c.metrics()["types"]["until_expired"]["expired"] == before["expired"] + 1,
             message="the lease to end")
    assert c.holders(key) == []
    assert c.metrics()["types"]["until_expired"]["released"] == before["released"] == 0
    second = mod.expiring.delay(t)
    assert second.id != first.id
    open_gate(r, t)
    assert second.get(timeout=30) == t


def test_monitor_frees_the_locks_of_a_killed_worker(cel, server):
    """kill -9 of a whole worker (main process and pool): the event monitor sees
    its heartbeats stop and reaps its OWNER, long before the 60 s run leases."""
    import signal
    import threading

    from redis_unique.celery import monitor_workers

    mod, _, c, r = cel
    reaped = []
    stop = threading.Event()
    monitor = threading.Thread(target=monitor_workers, args=(mod.app,),
                               kwargs={"stop": stop, "interval": 0.3, "on_reap": lambda *a: reaped.append(a)},
                               daemon=True)
    # Events go out by PUBLISH: the monitor hears only those sent after it subscribed. It must
    # hear an event of the doomed worker, which may be killed before its second heartbeat, so
    # that worker starts only once the monitor's pattern subscription is there.
    patterns = r.pubsub_numpat()
    monitor.start()
    wait_for(lambda: r.pubsub_numpat() > patterns, message="the monitor to subscribe to the events")
    # A busy cluster: another node's events never stop (ten a second), so the monitor never
    # sees a second without one and must still look for the silent workers.
    def chatter():
        with mod.app.connection_for_write() as conn:
            sender = mod.app.events.Dispatcher(conn, hostname="chatty@%s" % tag(), enabled=True)
            while not stop.wait(0.1):
                sender.send("worker-heartbeat", freq=2.0, active=0, processed=0)
    chatty = threading.Thread(target=chatter, daemon=True)
    chatty.start()
    queue = "doomed-%s" % tag()
    log = open(Path(server.dir, "celery-doomed.log"), "w")
    doomed = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "celery_app", "worker", "-P", "prefork", "-c", "2", "-Q", queue,
         "-n", "doomed@%h", "-E", "--without-gossip", "--without-mingle", "-l", "info"],
        cwd=str(HERE), env=dict(os.environ), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        t1, t2 = tag(), tag()
        a = mod.ue_skip.apply_async((t1,), queue=queue)
        b = mod.we_skip.apply_async((t2,), queue=queue)
        wait_for(lambda: runs(r, t1) and runs(r, t2), message="both tasks running")
        owner = "doomed@%s:%d" % (os.uname().nodename, doomed.pid)
        held = c.holders(mod.ue_skip.unique_key([t1], {})) + c.holders(mod.we_skip.unique_key([t2], {}) + ":run")
        assert [(h.jid, h.owner) for h in held] == [(a.id, owner), (b.id, owner)]
        assert all(h.ttl <= 60 for h in held)
        os.killpg(doomed.pid, signal.SIGKILL)
        doomed.wait()
        # Only the doomed worker's reap is judged: on a loaded machine, a heartbeat of the
        # module's live worker coming late may get it reaped too (it holds nothing then).
        dead = ("doomed@%s" % os.uname().nodename, doomed.pid)
        wait_for(lambda: [x for x in reaped if x[:2] == dead], interval=0.1,
                 message="the monitor to reap the dead worker")
        assert [x for x in reaped if x[:2] == dead] == [dead + (2,)]
        assert c.holders(mod.ue_skip.unique_key([t1], {})) == []
        assert c.holders(mod.we_skip.unique_key([t2], {}) + ":run") == []
    finally:
        stop.set()
        if doomed.poll() is None:
            os.killpg(doomed.pid, signal.SIGKILL)
            doomed.wait()
        log.close()
        monitor.join(10)
        chatty.join(10)
