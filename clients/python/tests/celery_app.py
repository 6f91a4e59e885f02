"""The Celery app of the tests: a real worker process imports it (-A celery_app).

CELERY_TEST_URL: the test Redis (broker, result backend and locks)."""

import os

import redis
from celery import Celery

from redis_unique import Client
from redis_unique.celery import UniqueTask, worker_owner

URL = os.environ["CELERY_TEST_URL"]
app = Celery("celery_app", broker=URL, backend=URL, task_cls=UniqueTask)
app.conf.update(
    task_default_queue="celery",
    worker_prefetch_multiplier=1,
    task_acks_late=False,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)
r = redis.Redis.from_url(URL)


def body(self, tag, fail=False):
    """Records the run and its lock holders, then waits for the test to open the gate."""
    # The owner first: a test that sees the run reads the owner next.
    r.set("owner:" + tag, worker_owner(self.request.hostname))
    r.rpush("runs:" + tag, self.request.id)
    # Longer than any wait of the tests (conftest's PATIENCE, 60 s): a test slowed down
    # between seeing the run and opening the gate still finds the run waiting.
    if not r.blpop(["gate:" + tag], timeout=120):
        raise RuntimeError("gate never opened")
    if fail:
        raise ValueError("failed on purpose")
    return tag


def task(name, **unique):
    return app.task(name=name, bind=True, unique=unique)(body)


ue_skip = task("ue_skip", lock="until_executed")
ue_raise = task("ue_raise", lock="until_executed", on_conflict="raise")
ue_keyed = task("ue_keyed", lock="until_executed", key=lambda args, kwargs: "by-tag:" + args[0])
uing = task("uing", lock="until_executing")
we_skip = task("we_skip", lock="while_executing")
we_raise = task("we_raise", lock="while_executing", on_conflict="raise")
we_retry = task("we_retry", lock="while_executing", on_conflict="retry", retry_countdown=0.1)
uawe = task("uawe", lock="until_and_while_executing")
expiring = task("expiring", lock="until_expired", ttl=1)


@app.task(name="ue_flaky", bind=True, unique={"lock": "until_executed"}, autoretry_for=(ValueError,),
          max_retries=1, default_retry_delay=0)
def ue_flaky(self, tag):
    r.rpush("runs:" + tag, self.request.id)
    r.rpush("holders:" + tag, len(Client(r).locked_by(ue_flaky.unique_key([tag], {}))))
    raise ValueError("always fails")


@app.task(name="ue_released_then_retried", bind=True, unique={"lock": "until_executed"})
def ue_released_then_retried(self, tag):
    """Leaves what a retry that ran and finished first leaves (no hold), then retries in
    an hour: the lock kept for that retry must not be taken back."""
    Client(r).unlock(ue_released_then_retried.unique_key([tag], {}), self.request.id)
    raise self.retry(countdown=3600)


# The rate test: every call to one partner API holds a slot of "at most 3 at
# once and 50 a second", taken inside the task with the limiter API.
RATED_KEY = "api:partner"


@app.task(name="rated_call", bind=True)
def rated_call(self, i):
    import json
    import time

    from redis_unique import Rate, Semaphore

    with Semaphore(r, RATED_KEY, 3, ttl=30, wait=120, rate=Rate(50, per=1.0)) as held:
        started, token = time.time(), held.token
        # The call to the partner: 20 to 60 ms, so that both limits bind in
        # turn (3 slots of 40 ms on average would allow 75 a second).
        time.sleep(0.02 + (i % 5) * 0.01)
        ended = time.time()
    r.rpush("rated:runs", json.dumps({"i": i, "start": started, "end": ended, "token": token}))


# The fairness test: tenants of unequal job lengths share one limit of FAIR_LIMIT running
# calls, at most FAIR_GROUP_LIMIT per tenant, tenant "a" weighing 2. Each worker process
# waits natively (WAIT) for its slot, so the server serves the tenants' waiting calls.
FAIR_LIMIT, FAIR_GROUP_LIMIT, FAIR_WEIGHTS = 8, 5, {"a": 2, "b": 1, "c": 1}


@app.task(name="fair_job", bind=True,
          unique={"lock": "while_executing", "key": lambda args, kwargs: "fair", "limit": FAIR_LIMIT, "wait": 120,
                  "run_ttl": 30},
          lock_group=lambda args, kwargs: args[0], lock_group_limit=FAIR_GROUP_LIMIT,
          lock_group_weight=lambda args, kwargs: FAIR_WEIGHTS[args[0]])
def fair_job(self, tenant, i, seconds):
    import time

    time.sleep(seconds)  # the job's work: its length is what the tenants differ in
    r.rpush("fair:done", "%s:%d" % (tenant, i))


# The multi-key load test: each call holds a slot of its tenant (at most LIMITED_TENANT at
# once) and of the whole service (at most LIMITED_GLOBAL), both taken in one grant while it
# runs, with the keys named in either order (even calls tenant first, odd calls global first):
# a grant of several keys holds nothing while it waits, so no order deadlocks.
LIMITED_TENANT, LIMITED_GLOBAL = 2, 5


def limited_keys(args, kwargs):
    tenant, i = args[0], args[1]
    keys = [("{limited}:tenant:" + tenant, LIMITED_TENANT), ("{limited}:global", LIMITED_GLOBAL)]
    return dict(keys if i % 2 == 0 else keys[::-1])


@app.task(name="limited_job", bind=True,
          unique={"lock": "while_executing", "key": lambda args, kwargs: None, "wait": 120, "run_ttl": 30,
                  "on_conflict": "raise"},
          lock_limits=limited_keys)
def limited_job(self, tenant, i, seconds):
    import time

    time.sleep(seconds)  # the job's work, while it holds both slots
    r.rpush("limited:done", "%s:%d" % (tenant, i))


# The run lock and the limits in one grant: one call per argument at a time, three of them
# at most in all.
@app.task(name="limited_unique", bind=True,
          unique={"lock": "while_executing", "on_conflict": "raise"},
          lock_limits={"{limited}:few": 3})
def limited_unique(self, tag, fail=False):
    return body(self, tag, fail)


# A short lease, renewed every second: the loss of one limit's key is told soon, and the lease
# is kept through a stall of the loaded machine of up to 2 s.
@app.task(name="limited_lost", bind=True,
          unique={"lock": "while_executing", "run_ttl": 3, "on_conflict": "raise"},
          lock_limits={"{limited}:lost": 1})
def limited_lost(self, tag, fail=False):
    return body(self, tag, fail)


# until_and_while_executing with a limit: the lock taken when sent goes when the run's grant
# (run lock and limit together) is taken or refused.
@app.task(name="limited_uawe", bind=True,
          unique={"lock": "until_and_while_executing", "on_conflict": "raise"},
          lock_limits={"{limited}:uawe": 1})
def limited_uawe(self, tag, fail=False):
    return body(self, tag, fail)


# The turns test: one slot at a time (LIMIT 1) on the key args[0], tenants taking turns at it
# (turn_job: lock_group the tenant) or the same calls in arrival order (fifo_job: no group).
# Each records its name when it runs, before its slot frees: the order of the grants.
def _take_a_turn(key, name, seconds):
    import time

    time.sleep(seconds)
    r.rpush(key + ":ran", name)


@app.task(name="turn_job",
          unique={"lock": "while_executing", "key": lambda args, kwargs: args[0], "limit": 1, "wait": 120,
                  "run_ttl": 30},
          lock_group=lambda args, kwargs: args[1][:1])
def turn_job(key, name, seconds):
    _take_a_turn(key, name, seconds)


@app.task(name="fifo_job",
          unique={"lock": "while_executing", "key": lambda args, kwargs: args[0], "limit": 1, "wait": 120,
                  "run_ttl": 30})
def fifo_job(key, name, seconds):
    _take_a_turn(key, name, seconds)
