"""Unique jobs through real RQ workers on the test Redis."""

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from rq import Queue, Retry, Worker

from redis_unique import Client, DuplicateTask, Rate
from redis_unique.rq import enqueue_unique, unique_key

from conftest import wait_for

HERE = Path(__file__).resolve().parent
DB = 3


def start_worker(server, url, name, queues, burst=False):
    log = open(Path(server.dir, "rq-%s.log" % name), "w")
    args = [sys.executable, "-m", "rq.cli", "worker", "-u", url, "-n", name,
            "--job-class", "redis_unique.rq.UniqueJob", *queues]
    if burst:
        args.append("--burst")
    proc = subprocess.Popen(args, cwd=str(HERE), env=dict(os.environ, PYTHONPATH=str(HERE)),
                            stdout=log, stderr=subprocess.STDOUT)
    proc.log = log
    return proc


def stop(proc):
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    proc.log.close()


@pytest.fixture(scope="module")
def rq_env(server):
    url = "redis://127.0.0.1:%d/%d" % (server.port, DB)
    os.environ["RQ_TEST_URL"] = url
    sys.path.insert(0, str(HERE))
    import rq_jobs

    conn = server.client(db=DB)
    workers = [start_worker(server, url, "rqw%d-%s" % (i, uuid.uuid4().hex[:6]), ["default"]) for i in (1, 2)]
    try:
        wait_for(lambda: len(Worker.all(connection=conn)) >= 2, interval=0.1, message="2 RQ workers")
        yield rq_jobs, url, conn
    finally:
        for w in workers:
            stop(w)


@pytest.fixture()
def rqe(rq_env, server):
    jobs, url, conn = rq_env
    return jobs, url, conn, Client(conn), Queue("default", connection=conn)


def tag():
    return uuid.uuid4().hex[:12]


def runs(r, t):
    return [x.decode() for x in r.lrange("runs:" + t, 0, -1)]


def finished(job, status="finished"):
    wait_for(lambda: job.get_status(refresh=True) == status, message="job %s %s" % (job.id, status))


def test_until_executed_skip_raise_and_release(rqe):
    jobs, url, r, c, q = rqe
    t = tag()
    first = enqueue_unique(q, jobs.gated, t)
    assert enqueue_unique(q, jobs.gated, t).id == first.id  # skip: the job that holds the lock
    with pytest.raises(DuplicateTask) as e:
        enqueue_unique(q, jobs.gated, t, on_conflict="raise")
    assert e.value.existing == first.id
    key = unique_key(jobs.gated, [t], {})
    (h,) = c.holders(key)
    assert (h.jid, h.type, h.meta["func"]) == (first.id, "until_executed", "rq_jobs.gated")
    wait_for(lambda: runs(r, t) == [first.id], message="the run")
    r.rpush("gate:" + t, 1)
    finished(first)
    assert first.return_value() == t
    wait_for(lambda: c.holders(key) == [], message="the release")
    second = enqueue_unique(q, jobs.gated, t)
    assert second.id != first.id
    r.rpush("gate:" + t, 1)
    finished(second)


def test_until_executed_kept_across_a_retry_and_freed_on_final_failure(rqe):
    jobs, url, r, c, q = rqe
    t = tag()
    job = enqueue_unique(q, jobs.gated, t, fail=True, retry=Retry(max=1))
    key = unique_key(jobs.gated, [t], {"fail": True})
    wait_for(lambda: len(runs(r, t)) == 1, message="the first run")
    r.rpush("gate:" + t, 1)
    wait_for(lambda: len(runs(r, t)) == 2, message="the retry")
    assert [h.jid for h in c.holders(key)] == [job.id]  # still held while retried
    r.rpush("gate:" + t, 1)
    finished(job, "failed")
    wait_for(lambda: c.holders(key) == [], message="the release on final failure")


def test_until_executing_and_until_and_while_executing_with_the_unique_job_class(rqe, server):
    jobs, url, r, c, q = rqe
    later = Queue("later-%s" % tag(), connection=r)
    t = tag()
    a = enqueue_unique(later, jobs.gated, t, lock="until_executing")
    key = unique_key(jobs.gated, [t], {})
    assert [h.jid for h in c.holders(key)] == [a.id]
    assert enqueue_unique(later, jobs.gated, t, lock="until_executing").id == a.id
    r.rpush("gate:" + t, 1)
    w = start_worker(server, url, "burst-%s" % tag(), [later.name], burst=True)
    try:
        finished(a)
        assert runs(r, t) == [a.id]
        assert c.holders(key) == []
        # until_and_while_executing: freed at start, a lock around the run.
        t2 = tag()
        b = enqueue_unique(q, jobs.gated, t2, lock="until_and_while_executing")
        key2 = unique_key(jobs.gated, [t2], {})
        wait_for(lambda: runs(r, t2) == [b.id], message="the run")
        assert c.holders(key2) == []
        (h,) = c.holders(key2 + ":run")
        assert (h.jid, h.owner) == (b.id, r.get("owner:" + t2).decode())
        dup = enqueue_unique(q, jobs.gated, t2, lock="until_and_while_executing")
        assert dup.id != b.id
        finished(dup)  # conflict at run time: skipped
        assert dup.return_value() is None and runs(r, t2) == [b.id]
        r.rpush("gate:" + t2, 1)
        finished(b)
        wait_for(lambda: c.holders(key2 + ":run") == [], message="the release")
    finally:
        w.wait(30)
        w.log.close()


@pytest.mark.parametrize("name", ["we_skip", "we_raise"])
def test_while_executing_decorator(rqe, name):
    jobs, url, r, c, q = rqe
    func = getattr(jobs, name)
    t = tag()
    first = q.enqueue(func, t)
    wait_for(lambda: runs(r, t) == [first.id], message="the first run")
    key = unique_key(func, [t], {}) + ":run"
    (h,) = c.holders(key)
    assert (h.jid, h.type, h.owner) == (first.id, "while_executing", r.get("owner:" + t).decode())
    second = q.enqueue(func, t)
    if name == "we_skip":
        finished(second)
        assert second.return_value() is None
    else:
        finished(second, "failed")
        assert "DuplicateTask" in second.latest_result().exc_string
    assert runs(r, t) == [first.id]
    r.rpush("gate:" + t, 1)
    finished(first)
    assert c.holders(key) == []


def test_lock_group_options_reach_the_running_jobs_lock(rqe):
    jobs, url, r, c, q = rqe
    t = tag()
    job = enqueue_unique(q, jobs.gated, t, lock="while_executing", lock_limit=3, lock_group_limit=2,
                         lock_group=lambda args, kwargs: "tenant-" + args[0][:4], lock_group_weight=3)
    wait_for(lambda: runs(r, t) == [job.id], message="the run")
    key = unique_key(jobs.gated, [t], {}) + ":run"
    (h,) = c.holders(key)
    assert (h.jid, h.type, h.group, h.mode) == (job.id, "while_executing", "tenant-" + t[:4], None)
    r.rpush("gate:" + t, 1)
    finished(job)
    # The decorator: one key for every call, its group from the call.
    t2 = tag()
    job2 = q.enqueue(jobs.grouped, t2)
    wait_for(lambda: runs(r, t2) == [job2.id], message="the decorated run")
    (h,) = c.holders(unique_key(jobs.grouped, [t2], {}, lambda a, k: "shared") + ":run")
    assert (h.jid, h.group) == (job2.id, "tenant-" + t2[:4])
    r.rpush("gate:" + t2, 1)
    finished(job2)


@pytest.mark.module_only("lock_limits hold several keys in one grant (UNIQUE.LOCKALL)")
def test_lock_limits_through_real_workers(rqe):
    jobs, url, r, c, q = rqe
    x, y = "{rq}:x:" + tag(), "{rq}:y:" + tag()
    t1, t2 = tag(), tag()
    first = enqueue_unique(q, jobs.gated, t1, lock="while_executing", lock_limits={x: 1, y: 0},
                           lock_rates={y: Rate(100, per=1)}, on_conflict="raise")
    wait_for(lambda: runs(r, t1) == [first.id], message="the run")
    run_key = unique_key(jobs.gated, [t1], {}) + ":run"
    # The run lock and both limits: one grant, one owner, one job.
    held = [c.holders(k) for k in (run_key, x, y)]
    assert all(len(h) == 1 and (h[0].jid, h[0].owner) == (first.id, held[0][0].owner) for h in held), held
    assert c.rate(y).limit == 100
    # Another call: x has no room. It fails (raise) and takes nothing, not even y.
    second = enqueue_unique(q, jobs.gated, t2, lock="while_executing", lock_limits={x: 1, y: 0},
                            on_conflict="raise")
    finished(second, "failed")
    assert "LockNotAcquired" in second.latest_result().exc_string
    assert [h.jid for h in c.holders(y)] == [first.id] and runs(r, t2) == []
    r.rpush("gate:" + t1, 1)
    finished(first)
    assert c.holders(run_key) == [] and c.holders(x) == [] and c.holders(y) == []


@pytest.mark.module_only("lock_limits hold several keys in one grant (UNIQUE.LOCKALL)")
def test_the_decorators_limits(rqe):
    jobs, url, r, c, q = rqe
    t = tag()
    job = q.enqueue(jobs.limited, t)
    wait_for(lambda: runs(r, t) == [job.id], message="the decorated run")
    tenant = "{rq}:tenant:" + t[:4]
    assert [h.jid for h in c.holders(tenant)] == [job.id] and [h.jid for h in c.holders("{rq}:global")] == [job.id]
    r.rpush("gate:" + t, 1)
    finished(job)
    assert c.holders(tenant) == [] and c.holders("{rq}:global") == []
