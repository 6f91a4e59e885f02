"""Tenants take turns at one slot, with real Celery workers: a key of LIMIT 1 (one export
at a time) held by the test while calls queue in a known order, each call confirmed waiting
in the server before the next is sent, then freed; each call records its name when it runs
(celery_app.turn_job: lock_group the tenant, its name's first letter; fifo_job: the same
calls without a group, served in arrival order). Two shapes:

- one tenant's backlog queued first: A1 A2 A3 B1 B2 C1 run A1 B1 C1 A2 B2 A3 with groups,
  in arrival order without;
- short jobs: six of tenant A, then one of B, each 0.05 s: B runs second with groups (the
  next turn), seventh in arrival order.
"""
import uuid

import pytest

from redis_unique import Client

from conftest import CELERY_DB, celery_workers, wait_for

SHAPES = {
    "a backlog queued first": (["A1", "A2", "A3", "B1", "B2", "C1"], 0.2,
                               ["A1", "B1", "C1", "A2", "B2", "A3"]),
    "short jobs": (["A1", "A2", "A3", "A4", "A5", "A6", "B1"], 0.05,
                   ["A1", "B1", "A2", "A3", "A4", "A5", "A6"]),
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_tenants_take_turns_at_one_slot_through_real_celery_workers(server, shape):
    calls, seconds, in_turns = SHAPES[shape]
    queue = "turns-" + uuid.uuid4().hex[:6]
    # A process for every call: each blocks in the server's queue while the slot is held.
    with celery_workers(server, [(queue, queue, len(calls))]) as (mod, _):
        r = server.client(db=CELERY_DB)
        c = Client(r)
        for task, expected in ((mod.turn_job, in_turns), (mod.fifo_job, calls)):
            key = "turns:%s:%s" % (task.name, uuid.uuid4().hex[:6])
            run_key = task.unique_key([key, "", 0], {}) + ":run"
            assert c.lock(run_key, "gate", limit=1) is not None
            for n, name in enumerate(calls, 1):
                task.apply_async((key, name, seconds), queue=queue)
                wait_for(lambda: c.waiters(run_key) == n, timeout=60, message="%s to wait" % name)
            assert c.unlock(run_key, "gate")
            wait_for(lambda: r.llen(key + ":ran") == len(calls), timeout=60, message="every call to run")
            ran = [x.decode() for x in r.lrange(key + ":ran", 0, -1)]
            assert ran == expected, "%s, %s: %r" % (shape, task.name, ran)
            wait_for(lambda: c.holders(run_key) == [] and c.waiters(run_key) == 0, message="the slot freed")
