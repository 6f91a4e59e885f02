"""The fenced unlock (``unlock(..., token=)``, ``unlock_all(..., tokens=)``) against a real
server: an old token frees nothing of a newer hold of the same jid; a Lock releases by its own
token and gives up a hold a late renewal took by that hold's token; a MultiLock whose renewal is
refused releases the keys it still holds at once. And ``lock_limits`` naming the task's own run
lock with another limit is refused (Celery and RQ)."""

import pytest
from celery import Celery
from rq import Queue

from redis_unique import Client, Lock, LockLost, MultiLock
from redis_unique._multi import run_lock_and_limits
from redis_unique.celery import UniqueTask
from redis_unique.rq import enqueue_unique

from conftest import wait_for


def unlocks_sent(r, key):
    """The UNIQUE.UNLOCK/UNLOCKALL calls naming ``key`` the server logged (SLOWLOG at 0 µs)."""
    sent = []
    for e in reversed(r.slowlog_get(1024)):
        words = e["command"].split(b" ") if isinstance(e["command"], bytes) else e["command"].split(" ")
        words = [w.decode() if isinstance(w, bytes) else w for w in words]
        if words[0] in ("UNIQUE.UNLOCK", "UNIQUE.UNLOCKALL") and key in words:
            sent.append(words)
    return sent


@pytest.fixture()
def slowlog(r):
    old = r.config_get("slowlog-*")
    r.config_set("slowlog-log-slower-than", 0)
    r.config_set("slowlog-max-len", 1024)
    r.slowlog_reset()
    yield r
    r.config_set("slowlog-log-slower-than", old["slowlog-log-slower-than"])
    r.config_set("slowlog-max-len", old["slowlog-max-len"])


def test_an_old_token_frees_nothing_of_the_same_jids_new_hold(r):
    c = Client(r)
    old = c.lock("fenced:k", "job-4", ttl=60)
    assert c.unlock("fenced:k", "job-4")
    new = c.lock("fenced:k", "job-4", ttl=60)  # the same jid again: a retried job
    assert new > old
    assert c.unlock("fenced:k", "job-4", token=old) is False
    assert [h.token for h in c.holders("fenced:k")] == [new]
    assert c.pipeline().unlock("fenced:k", "job-4", token=old).unlock("fenced:k", "job-4", token=new).execute() \
        == [False, True]
    assert c.holders("fenced:k") == []
    for bad in (0, -1, 2**63, "1", 1.0, True):
        with pytest.raises(ValueError, match="fencing token"):
            c.unlock("fenced:k", "job-4", token=bad)


def test_unlock_all_releases_each_key_whose_hold_has_its_token(r):
    c = Client(r)
    keys = ["{fenced}:a", "{fenced}:b"]
    first = c.lock_all(keys, "j", ttl=60)
    assert c.unlock("{fenced}:b", "j")
    b = c.lock("{fenced}:b", "j", ttl=60)
    assert c.unlock_all(keys, "j", tokens=first) == 1  # a released, b's newer hold kept
    assert [h.token for h in c.holders("{fenced}:b")] == [b]
    with pytest.raises(ValueError, match="one per key"):
        c.unlock_all(keys, "j", tokens=[b])
    assert c.unlock_all(["{fenced}:b"], "j", tokens=[b]) == 1


def test_a_lock_releases_by_its_own_token(slowlog):
    r = slowlog
    with Lock(r, "fenced:own", ttl=30) as lock:
        token = lock.token
    assert unlocks_sent(r, "fenced:own") == [["UNIQUE.UNLOCK", "fenced:own", lock.jid, "TOKEN", str(token)]]


def test_a_late_renewal_gives_up_its_new_hold_by_that_holds_token(slowlog):
    r = slowlog
    c = Client(r)
    lost = []
    lock = Lock(r, "fenced:late", ttl=1, on_lost=lost.append)
    lock.acquire()
    r.delete("fenced:late")  # nobody holds it: the next renewal is a new grant
    wait_for(lambda: lost, timeout=30, message="the loss to be told")
    wait_for(lambda: unlocks_sent(r, "fenced:late"), timeout=30, message="the new hold given up")
    ((*argv, new),) = unlocks_sent(r, "fenced:late")
    assert argv == ["UNIQUE.UNLOCK", "fenced:late", lock.jid, "TOKEN"] and int(new) > lock.token
    assert c.holders("fenced:late") == []
    with pytest.raises(LockLost):
        lock.release()


def test_a_refused_multi_key_renewal_releases_the_other_keys_at_once(slowlog):
    r = slowlog
    c = Client(r)
    lost = []
    hold = MultiLock(r, ["{fm}:a", "{fm}:b"], ttl=1.5, on_lost=lost.append)
    tokens = list(hold.acquire().values())
    try:
        assert c.unlock("{fm}:a", hold.jid)  # one key's hold ends: the next renewal is refused
        wait_for(lambda: lost, timeout=30, message="the refusal told")
        # Still inside the job (nothing released by the user): b is free already, long before
        # its lease would have ended, released by its grant's token.
        wait_for(lambda: c.holders("{fm}:b") == [], timeout=30, message="the other key released")
        assert ["UNIQUE.UNLOCKALL", "2", "{fm}:a", "{fm}:b", hold.jid, "TOKEN", *map(str, tokens)] \
            in unlocks_sent(r, "{fm}:b")
    finally:
        with pytest.raises(LockLost):
            hold.release()


def test_lock_limits_naming_the_run_lock_with_another_limit_is_refused():
    assert run_lock_and_limits("k:run", 2, {"keys": ["k:run", "t"], "limits": [2, 5]}) == {"k:run": 2, "t": 5}
    assert run_lock_and_limits(None, 2, {"keys": ["k:run"], "limits": [7]}) == {"k:run": 7}
    with pytest.raises(ValueError, match="the task's own run lock, with a limit of 7 where the unique option's "
                                         "limit is 2"):
        run_lock_and_limits("k:run", 2, {"keys": [b"k:run"], "limits": [7]})

    app = Celery("fenced-limits", task_cls=UniqueTask)

    @app.task(name="own_run", unique={"lock": "while_executing", "key": lambda a, k: "{api}:x", "limit": 2},
              lock_limits={"unique:own_run:{api}:x:run": 5, "{api}:all": 10})
    def own_run():
        pass

    # Refused at the call, before anything is sent (no broker is reached).
    with pytest.raises(ValueError, match="own run lock"):
        own_run.apply_async()


def test_rq_lock_limits_naming_the_run_lock_with_another_limit_is_refused(r):
    q = Queue("fenced", connection=r)
    with pytest.raises(ValueError, match="own run lock"):
        enqueue_unique(q, "nowhere.work", "x", lock="while_executing", lock_key=lambda a, k: "{api}:y", lock_limit=3,
                       lock_limits={"unique:nowhere.work:{api}:y:run": 1})
    assert q.count == 0
