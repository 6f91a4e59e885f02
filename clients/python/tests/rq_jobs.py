"""The RQ jobs of the tests (real workers import this module). RQ_TEST_URL: the test Redis."""

import os

import redis
from rq import get_current_job

from redis_unique.rq import while_executing

r = redis.Redis.from_url(os.environ["RQ_TEST_URL"])


def gated(tag, fail=False):
    """Records the run, then waits for the test to open the gate."""
    job = get_current_job()
    # The owner first: a test that sees the run reads the owner next.
    r.set("owner:" + tag, job.worker_name)
    r.rpush("runs:" + tag, job.id)
    # Longer than any wait of the tests (conftest's PATIENCE, 60 s): a test slowed down
    # between seeing the run and opening the gate still finds the run waiting.
    if not r.blpop(["gate:" + tag], timeout=120):
        raise RuntimeError("gate never opened")
    if fail:
        raise ValueError("failed on purpose")
    return tag


@while_executing(on_conflict="skip")
def we_skip(tag):
    return gated(tag)


@while_executing(on_conflict="raise")
def we_raise(tag):
    return gated(tag)


@while_executing(lambda args, kwargs: "shared", limit=3, group=lambda args, kwargs: "tenant-" + args[0][:4],
                 group_limit=2, weight=3)
def grouped(tag):
    return gated(tag)


# Several keys in one grant: the call's tenant (2 at once) and every call (3 at once); a
# lock_key of None takes only the limits.
@while_executing(lambda args, kwargs: None, limits=lambda args, kwargs: {"{rq}:tenant:" + args[0][:4]: 2,
                                                                         "{rq}:global": 3}, on_conflict="raise")
def limited(tag):
    return gated(tag)
