"""Several keys with their limits as a Celery task option (``lock_limits``, ``lock_rates``):
the options checked as the others are, and through real Celery worker processes the run lock
and the limits taken in one grant; the load test: tenants' calls under a per-tenant and a
global limit together, sampled on the server, neither limit exceeded, no deadlock, every job
run. (RQ's ``lock_limits`` and decorator: tests/test_rq.py.)"""
import uuid
from pathlib import Path

import pytest
from celery import Celery

from redis_unique import Client, DuplicateTask, LockNotAcquired, Rate
from redis_unique.celery import UniqueOptions, UniqueTask
from redis_unique.rq import enqueue_unique, while_executing

from conftest import CELERY_DB, celery_workers, wait_for

WE = {"lock": "while_executing"}


@pytest.mark.parametrize("unique,options,error", [
    (None, {"lock_limits": {"a": 1}}, ValueError),  # needs the unique option
    ({"lock": "until_executed"}, {"lock_limits": {"a": 1}}, ValueError),  # not held while running
    ({"lock": "until_expired"}, {"lock_limits": {"a": 1}}, ValueError),
    (WE, {"lock_limits": ["a"]}, TypeError),
    (WE, {"lock_limits": {"a": -1}}, ValueError),
    (WE, {"lock_limits": {"a": 1.5}}, ValueError),
    (WE, {"lock_limits": {"a": 1, b"a": 2}}, ValueError),
    (WE, {"lock_limits": {1: 1}}, TypeError),
    (WE, {"lock_rates": {"a": Rate(1)}}, ValueError),  # rates without limits
    (WE, {"lock_limits": {"a": 1}, "lock_rates": {"b": Rate(1)}}, ValueError),
    (WE, {"lock_limits": {"a": 1}, "lock_rates": {"a": Rate(0)}}, ValueError),
    (WE, {"lock_limits": {"a": 1}, "lock_rates": "a"}, TypeError),
    (WE, {"lock_limits": {"a": 1}, "lock_group": "acme"}, ValueError),  # no fair sharing on several keys
])
def test_celery_options_are_checked_when_parsed(unique, options, error):
    with pytest.raises(error):
        UniqueOptions.parse(unique, options)


def test_celery_options_per_call():
    app = Celery("limits-args", task_cls=UniqueTask)

    @app.task(name="per_call", unique={"lock": "until_and_while_executing"},
              lock_limits=lambda args, kwargs: None if args[0] == "free" else {"{x}:t:" + args[0]: 2, "{x}:all": 0},
              lock_rates=lambda args, kwargs: {"{x}:all": Rate(10, per=1)})
    def per_call(tenant):
        pass

    assert per_call.unique_limits(["acme"], {}) == {
        "keys": ["{x}:t:acme", "{x}:all"], "limits": [2, 0], "rates": {"{x}:all": [10, 1, 0]}}
    assert per_call.unique_limits(["free"], {}) is None

    @app.task(name="too_many", unique=WE, lock_limits=lambda args, kwargs: {"k%d" % i: 1 for i in range(64)})
    def too_many():
        pass

    with pytest.raises(ValueError, match="at most 63"):
        too_many.unique_limits([], {})  # 64 beside the run lock


def test_rq_options_are_checked_before_enqueueing():
    for kwargs, error in [
        (dict(lock_limits={"a": 1}), ValueError),  # until_executed by default: not held while running
        (dict(lock="while_executing", lock_limits={"a": 1}, lock_group="acme"), ValueError),
        (dict(lock="while_executing", lock_limits={"a": -1}), ValueError),
        (dict(lock="while_executing", lock_rates={"a": Rate(1)}), ValueError),
        (dict(lock="while_executing", lock_limits="a"), TypeError),
    ]:
        with pytest.raises(error):
            enqueue_unique(None, print, 1, **kwargs)  # no queue: refused before
    with pytest.raises(ValueError):
        while_executing(limits={"a": 1}, group="acme")
    with pytest.raises(ValueError):
        while_executing(rates={"a": Rate(1)})


def tag():
    return uuid.uuid4().hex[:12]


def test_the_run_lock_and_the_limits_in_one_grant_through_a_real_worker(server):
    queue = "limited-" + tag()
    with celery_workers(server, [("lim-" + tag()[:6], queue, 5)]) as (mod, _):
        r = server.client(db=CELERY_DB)
        c = Client(r)
        few = "{limited}:few"
        tags = [tag() for _ in range(3)]
        running = [mod.limited_unique.apply_async((t,), queue=queue) for t in tags]
        wait_for(lambda: all(r.llen("runs:" + t) == 1 for t in tags), message="three runs")
        holders = c.holders(few)
        assert sorted(h.jid for h in holders) == sorted(x.id for x in running)
        for t, res in zip(tags, running):
            (run,) = c.holders(mod.limited_unique.unique_key([t], {}) + ":run")
            (limit,) = [h for h in holders if h.jid == res.id]
            assert (run.jid, run.owner, run.type) == (res.id, limit.owner, "while_executing")
        # A fourth call: the limit has no room; the same call again: a duplicate.
        fourth = mod.limited_unique.apply_async((tag(),), queue=queue)
        with pytest.raises(LockNotAcquired, match="had no room"):
            fourth.get(timeout=60)
        again = mod.limited_unique.apply_async((tags[0],), queue=queue)
        with pytest.raises(DuplicateTask):
            again.get(timeout=60)
        assert len(c.holders(few)) == 3  # neither refused call took anything
        for t in tags:
            r.rpush("gate:" + t, 1)
        assert [res.get(timeout=60) for res in running] == tags
        wait_for(lambda: c.holders(few) == [], message="the limits released")
        assert all(c.holders(mod.limited_unique.unique_key([t], {}) + ":run") == [] for t in tags)


def test_until_and_while_executing_frees_the_sent_lock_when_the_grant_is_taken_or_refused(server):
    queue = "limited-uawe-" + tag()
    with celery_workers(server, [("uawe-" + tag()[:6], queue, 2)]) as (mod, _):
        r = server.client(db=CELERY_DB)
        c = Client(r)
        task = mod.limited_uawe
        t1, t2 = tag(), tag()
        first = task.apply_async((t1,), queue=queue)
        wait_for(lambda: r.llen("runs:" + t1) == 1, message="the first run")
        assert c.holders(task.unique_key([t1], {})) == []  # the sent lock went as the grant came
        assert [h.jid for h in c.holders("{limited}:uawe")] == [first.id]
        second = task.apply_async((t2,), queue=queue)
        assert [h.jid for h in c.holders(task.unique_key([t2], {}))] == [second.id]  # sent
        with pytest.raises(LockNotAcquired, match="had no room"):
            second.get(timeout=60)
        # Refused: the sent lock freed, nothing of the grant taken.
        assert c.holders(task.unique_key([t2], {})) == []
        assert c.holders(task.unique_key([t2], {}) + ":run") == []
        r.rpush("gate:" + t1, 1)
        assert first.get(timeout=60) == t1
        assert c.holders("{limited}:uawe") == [] and c.holders(task.unique_key([t1], {}) + ":run") == []


def test_a_running_task_revoked_with_terminate_frees_its_whole_grant(server):
    queue = "limited-revoke-" + tag()
    with celery_workers(server, [("revoke-" + tag()[:6], queue, 2)]) as (mod, _):
        r = server.client(db=CELERY_DB)
        c = Client(r)
        t = tag()
        res = mod.limited_unique.apply_async((t,), queue=queue)
        wait_for(lambda: r.llen("runs:" + t) == 1, message="the run")
        run_key = mod.limited_unique.unique_key([t], {}) + ":run"
        assert [h.jid for h in c.holders("{limited}:few")] == [res.id] == [h.jid for h in c.holders(run_key)]
        mod.app.control.revoke(res.id, terminate=True, signal="SIGKILL")  # no finally in the child
        # The child is killed, so its own release never runs: the worker's revoke handler
        # frees the run lock and every limit's key at once, not left to the leases (60 s).
        wait_for(lambda: c.holders("{limited}:few") == [] and c.holders(run_key) == [], timeout=30,
                 message="the grant freed on revoke")


def test_a_running_task_that_loses_one_key_is_told_and_frees_the_rest(server):
    queue = "limited-lost-" + tag()
    name = "lost-" + tag()[:6]
    with celery_workers(server, [(name, queue, 2)]) as (mod, _):
        r = server.client(db=CELERY_DB)
        c = Client(r)
        t = tag()
        res = mod.limited_lost.apply_async((t,), queue=queue)
        wait_for(lambda: r.llen("runs:" + t) == 1, message="the run")
        run_key = mod.limited_lost.unique_key([t], {}) + ":run"
        assert [h.jid for h in c.holders(run_key)] == [res.id]
        assert c.unlock("{limited}:lost", res.id)  # one key of the grant, freed behind its back
        log = Path(server.dir, "celery-%s.log" % name)
        wait_for(lambda: "lost its lock while running" in log.read_text() and res.id in log.read_text(),
                 timeout=30, message="the loss in the worker's log")
        r.rpush("gate:" + t, 1)
        assert res.get(timeout=60) == t  # told, not failed: the job ran
        wait_for(lambda: c.holders(run_key) == [], message="the rest freed when it ended")


# The load test.
TENANTS = {"a": 30, "b": 20, "c": 20, "d": 10}  # jobs per tenant


def seconds(i):
    """Each job's work: 50 to 200 ms, so that slots free at uneven times."""
    return 0.05 + (i % 4) * 0.05


def test_per_tenant_and_global_limits_together_through_real_celery_workers(server):
    queue = "limited-load-" + tag()
    # 10 worker processes for a global limit of 5: calls wait in the server all along.
    specs = [("load%d-%s" % (i, tag()[:6]), queue, 5) for i in range(2)]
    with celery_workers(server, specs) as (mod, _):
        r = server.client(db=CELERY_DB)
        c = Client(r)
        r.delete("limited:done")
        tenant_keys = {t: "{limited}:tenant:" + t for t in TENANTS}
        global_key = "{limited}:global"
        expected = set()
        for i in range(max(TENANTS.values())):
            for tenant, jobs in TENANTS.items():
                if i < jobs:
                    mod.limited_job.apply_async((tenant, i, seconds(i)), queue=queue)
                    expected.add("%s:%d" % (tenant, i))

        samples = []
        keys = [global_key] + list(tenant_keys.values())

        def sample():
            # One snapshot of every key (MULTI): the holders of each, at one instant.
            pipe = r.pipeline(transaction=True)
            for key in keys:
                pipe.execute_command("UNIQUE.LOCKEDBY", key)
            held = dict(zip(keys, (set(x) for x in pipe.execute())))
            samples.append(held)
            return r.llen("limited:done") == len(expected)

        wait_for(sample, timeout=180, interval=0.01, message="every job to run")
        done = [x.decode() for x in r.lrange("limited:done", 0, -1)]
        assert sorted(done) == sorted(expected)  # every job, once

        over_global = [s for s in samples if len(s[global_key]) > mod.LIMITED_GLOBAL]
        over_tenant = [s for s in samples if any(len(s[k]) > mod.LIMITED_TENANT for k in tenant_keys.values())]
        assert not over_global and not over_tenant, (over_global[:3], over_tenant[:3])
        # Every key or none: at each instant the global key's holders are exactly the
        # tenants' holders (no call holds one without the other).
        half = [s for s in samples if s[global_key] != set().union(*(s[k] for k in tenant_keys.values()))]
        assert not half, half[:3]
        # The limits bound: the global limit was full, and a tenant at its limit.
        assert max(len(s[global_key]) for s in samples) == mod.LIMITED_GLOBAL
        assert max(len(s[k]) for s in samples for k in tenant_keys.values()) == mod.LIMITED_TENANT
        print("load: %d jobs, %d samples, global full in %d" % (
            len(expected), len(samples), sum(len(s[global_key]) == mod.LIMITED_GLOBAL for s in samples)))
        # The last jobs record their run before they leave: their release comes just after.
        wait_for(lambda: all(c.holders(key) == [] and c.waiters(key) == 0 for key in keys),
                 message="every slot released, nobody waiting")
