"""Fair sharing and modes without a server: what each API sends (GROUP, WEIGHT, GROUPLIMIT,
MODE, in the contract's order), what it reads back, and every option checked before
anything is sent."""
import pytest

import redis_unique
import redis_unique.asyncio as aio
from redis_unique import GroupWaiters, Lock, RWLock, Semaphore
from redis_unique import _protocol as p
from redis_unique.celery import UniqueOptions, UniqueTask


class Recorder:
    """A redis-py stand-in that records each command and answers a token."""

    def __init__(self):
        self.sent = []

    def execute_command(self, *args):
        self.sent.append([str(a) for a in args])
        if args[0] == "UNIQUE.UNLOCK":
            return 1
        return 7

    def __getattr__(self, name):  # the module-version check reads the server's modules
        raise AttributeError(name)


@pytest.fixture()
def rec(monkeypatch):
    from redis_unique import _version

    monkeypatch.setattr(_version, "check", lambda redis: None)
    return Recorder()


def test_lock_args_put_the_group_options_between_rate_and_wait():
    argv = p.lock_args("k", "j", limit=10, ttl=1, rate=(5, 1), group="acme", weight=3, group_limit=2,
                       mode="EXCLUSIVE", wait=2)
    assert [str(a) for a in argv] == ["UNIQUE.LOCK", "k", "j", "LIMIT", "10", "TTL", "1000", "RATE", "5", "PER",
                                      "1000", "GROUP", "acme", "WEIGHT", "3", "GROUPLIMIT", "2", "MODE",
                                      "exclusive", "WAIT", "2000"]
    assert p.lock_args("k", "j", mode="shared") == ("UNIQUE.LOCK", "k", "j", "MODE", "shared")
    assert p.lock_args("k", "j", group=b"\x00\xff") == ("UNIQUE.LOCK", "k", "j", "GROUP", b"\x00\xff")


@pytest.mark.parametrize("kwargs, error", [
    (dict(weight=2), "weight needs a group"),
    (dict(group_limit=1), "group_limit needs a group"),
    (dict(group=""), "1 to 1024 bytes"),
    (dict(group="é" * 513), "1 to 1024 bytes"),
    (dict(group="g", weight=0), "weight must be an integer from 1 to 1000"),
    (dict(group="g", weight=1001), "weight must be"),
    (dict(group="g", weight=True), "weight must be"),
    (dict(group="g", group_limit=0), "group_limit must be an integer from 1 to 2147483647"),
    (dict(group="g", group_limit=2 ** 31), "group_limit must be"),
    (dict(group="g", group_limit=1.5), "group_limit must be"),
    (dict(mode="read"), "mode must be 'shared' or 'exclusive'"),
    (dict(mode=1), "mode must be"),
])
def test_group_options_are_checked_before_sending(kwargs, error):
    with pytest.raises(ValueError, match=error):
        p.lock_args("k", "j", **kwargs)


def test_a_group_is_text_or_bytes():
    with pytest.raises(TypeError, match="group must be a str or bytes"):
        p.lock_args("k", "j", group=7)
    assert p.lock_args("k", "j", group="g" * 1024)[-1] == "g" * 1024


def test_the_client_sends_the_group_options_and_asks_waiters_by_group(rec):
    c = redis_unique.Client(rec)
    assert c.lock("k", "j", limit=4, group="acme", weight=2, group_limit=3, mode="shared", wait=1) == 7
    assert rec.sent[-1] == ["UNIQUE.LOCK", "k", "j", "LIMIT", "4", "GROUP", "acme", "WEIGHT", "2", "GROUPLIMIT",
                            "3", "MODE", "shared", "WAIT", "1000"]
    rec.execute_command = lambda *a: rec.sent.append(list(a)) or [
        [b"group", None, b"waiting", 1, b"holding", 2], {b"group": b"acme", b"waiting": 3, b"holding": 0}]
    assert c.waiters("k", groups=True) == [GroupWaiters(None, 1, 2), GroupWaiters("acme", 3, 0)]
    assert rec.sent[-1] == ["UNIQUE.WAITERS", "k", "GROUPS"]
    rec.execute_command = lambda *a: rec.sent.append(list(a)) or 5
    assert c.waiters("k") == 5 and rec.sent[-1] == ["UNIQUE.WAITERS", "k"]


def test_the_pipeline_sends_the_group_options():
    queued = []

    class Pipe:
        def execute_command(self, *args):
            queued.append([str(a) for a in args])

    calls = redis_unique.client.PipelineCalls(Pipe())
    calls.lock("k", "j", group="g", group_limit=1)
    assert queued == [["UNIQUE.LOCK", "k", "j", "GROUP", "g", "GROUPLIMIT", "1"]]


def test_lock_and_semaphore_send_their_group_with_the_grant_and_never_with_a_renewal(rec):
    sem = Semaphore(rec, "api", 10, ttl=30, group="acme", weight=2, group_limit=4, renew=False, jid="j1")
    assert sem.acquire() == 7
    assert rec.sent[-1] == ["UNIQUE.LOCK", "api", "j1", "LIMIT", "10", "TTL", "30000", "GROUP", "acme", "WEIGHT",
                            "2", "GROUPLIMIT", "4"]
    sem.release()
    # A renewal keeps the group and mode on the server: TTL only.
    assert p.renewal_args("api", "j1", 30000) == ("UNIQUE.LOCK", "api", "j1", "TTL", 30000)
    lock = Lock(rec, "m", ttl=5, group="acme", renew=False, jid="j2")
    lock.acquire()
    assert rec.sent[-1] == ["UNIQUE.LOCK", "m", "j2", "LIMIT", "1", "TTL", "5000", "GROUP", "acme"]
    lock.release()


@pytest.mark.parametrize("cls", [Lock, aio.Lock])
def test_a_locks_group_options_are_checked_when_it_is_made(cls):
    with pytest.raises(ValueError, match="group_limit needs a group"):
        cls(None, "k", ttl=1, group_limit=2)
    with pytest.raises(ValueError, match="weight must be"):
        cls(None, "k", ttl=1, group="g", weight=0)
    with pytest.raises(ValueError, match="mode must be"):
        cls(None, "k", ttl=1, mode="write")


@pytest.mark.parametrize("cls", [Semaphore, aio.Semaphore])
def test_a_semaphore_passes_its_group_options(cls):
    sem = cls(None, "k", 3, ttl=1, group="g", group_limit=2, weight=5)
    assert (sem.limit, sem.group, sem.group_limit, sem.weight, sem.mode) == (3, "g", 2, 5, None)
    with pytest.raises(ValueError, match="limit of 1 or more"):
        cls(None, "k", 0, ttl=1)


@pytest.mark.parametrize("cls, lock_cls", [(RWLock, Lock), (aio.RWLock, aio.Lock)])
def test_rwlock_gives_a_shared_read_and_an_exclusive_write_each_its_own(cls, lock_cls):
    rw = cls(None, "doc", ttl=30, limit=5, wait=2, owner="me", group="acme")
    r1, r2, w = rw.read(), rw.read(), rw.write(wait=None)
    assert all(type(h) is lock_cls for h in (r1, r2, w))
    assert (r1.mode, r1.limit, r1.ttl, r1.wait, r1.owner, r1.group) == ("shared", 5, 30.0, 2, "me", "acme")
    assert (w.mode, w.limit, w.wait) == ("exclusive", 5, None)
    assert len({r1.jid, r2.jid, w.jid}) == 3
    assert [str(a) for a in p.lock_args(r1.key, r1.jid, **r1._lock_args())] == [
        "UNIQUE.LOCK", "doc", r1.jid, "LIMIT", "5", "TTL", "30000", "OWNER", "me", "GROUP", "acme", "MODE", "shared",
        "WAIT", "2000"]


def test_a_change_of_mode_is_a_renewal_with_mode(rec):
    hold = RWLock(rec, "doc", ttl=30, limit=5, renew=False).write()
    hold.acquire()
    assert hold.downgrade() is True and hold.mode == "shared"
    assert rec.sent[-1] == ["UNIQUE.LOCK", "doc", hold.jid, "TTL", "30000", "MODE", "shared"]
    rec.execute_command = lambda *a: rec.sent.append([str(x) for x in a]) or None
    assert hold.upgrade() is False and hold.mode == "shared" and not hold.lost  # refused, unchanged
    assert rec.sent[-1][-2:] == ["MODE", "exclusive"]
    rec.execute_command = lambda *a: rec.sent.append([str(x) for x in a]) or (1 if a[0] == "UNIQUE.UNLOCK" else 8)
    assert hold.upgrade() is False and hold.lost  # another token: the hold had ended, the new one given up
    assert rec.sent[-1] == ["UNIQUE.UNLOCK", "doc", hold.jid, "TOKEN", "8"]  # the new hold's own token


@pytest.mark.parametrize("cls", [RWLock, aio.RWLock])
def test_rwlock_options_are_checked_when_it_is_made(cls):
    with pytest.raises(ValueError, match="limit of 1 or more"):
        cls(None, "k", ttl=1, limit=0)
    with pytest.raises(TypeError, match="RWLock sets mode itself"):
        cls(None, "k", ttl=1, limit=2, mode="shared")
    with pytest.raises(ValueError, match="ttl must be"):
        cls(None, "k", ttl=0, limit=2)
    with pytest.raises(ValueError, match="weight needs a group"):
        cls(None, "k", ttl=1, limit=2, weight=2)
    with pytest.raises(TypeError):
        cls(None, "k", ttl=1)  # limit: how many readers at once, always said


# -- the replies ---------------------------------------------------------------------


def test_a_holder_reads_its_group_and_mode_on_resp2_and_resp3():
    base = [b"jid", b"j", b"token", 3, b"acquired_at", 1000, b"expires_at", -1, b"ttl", -1, b"type", b"t",
            b"owner", None, b"meta", None]
    h = p.parse_holder(base + [b"group", b"acme", b"mode", b"exclusive"])
    assert (h.group, h.mode) == ("acme", "exclusive")
    h = p.parse_holder({**dict(zip(base[::2], base[1::2])), b"group": None, b"mode": None})
    assert (h.group, h.mode) == (None, None)
    assert p.parse_holder(base).group is None  # a server before groups


# -- Celery and RQ options -------------------------------------------------------------


def test_celery_group_options_are_parsed_and_resolved_per_call():
    opts = UniqueOptions.parse({"lock": "while_executing", "limit": 4},
                               {"lock_group": lambda a, k: a[0], "lock_group_limit": 2,
                                "lock_group_weight": lambda a, k: 3 if a[0] == "big" else None})
    assert opts.limit == 4
    assert p.task_group(opts.group, opts.group_limit, opts.group_weight, ["big"], {}) == \
        {"group": "big", "group_limit": 2, "weight": 3}
    assert p.task_group(opts.group, opts.group_limit, opts.group_weight, ["small"], {}) == \
        {"group": "small", "group_limit": 2, "weight": None}
    # A call whose group comes out None has none (nor a group limit or weight).
    assert p.task_group(lambda a, k: None, 2, 3, [], {}) == {}


@pytest.mark.parametrize("unique, groups, error", [
    (None, {"lock_group": "acme"}, "lock_group needs the unique option"),
    (False, {"lock_group_limit": 2}, "lock_group_limit needs the unique option"),
    (True, {"lock_group_limit": 2}, "lock_group_limit needs lock_group"),
    (True, {"lock_group_weight": 2}, "lock_group_weight needs lock_group"),
    (True, {"lock_group": "acme", "lock_group_weight": 0}, "weight must be"),
    (True, {"lock_group": "", "lock_group_limit": 1}, "1 to 1024 bytes"),
    (True, {"lock_group": "acme", "lock_group_limit": "2"}, "group_limit must be"),
    ({"limit": 0}, {}, "unique limit must be an integer >= 1"),
    ({"limit": "3"}, {}, "unique limit must be"),
    ({"group": "acme"}, {}, "unknown unique option"),
])
def test_celery_group_options_are_never_ignored(unique, groups, error):
    with pytest.raises(ValueError, match=error):
        UniqueOptions.parse(unique, groups)


def test_celery_lock_group_must_be_text_or_a_callable():
    with pytest.raises(TypeError, match="lock_group must be a str or a callable"):
        UniqueOptions.parse(True, {"lock_group": 42})


def test_celery_task_options_reach_the_task(monkeypatch):
    from celery import Celery

    app = Celery("fair_args", broker="redis://127.0.0.1:1/0", task_cls=UniqueTask)

    @app.task(unique={"lock": "while_executing", "key": lambda a, k: "api", "limit": 3},
              lock_group=lambda args, kwargs: kwargs["tenant"], lock_group_limit=2, lock_group_weight=4)
    def call(tenant):
        return tenant

    assert call.unique_group([], {"tenant": "acme"}) == {"group": "acme", "group_limit": 2, "weight": 4}
    assert call.unique_options().limit == 3

    @app.task(lock_group="acme")
    def ungrouped():
        return None

    with pytest.raises(ValueError, match="lock_group needs the unique option"):
        ungrouped.unique_options()


def test_rq_group_options_are_checked_before_enqueueing():
    from redis_unique.rq import enqueue_unique, while_executing

    class Queue:
        connection = name = None

        def enqueue(self, *a, **k):
            raise AssertionError("enqueued despite a bad option")

    for kwargs, error in [(dict(lock_group_limit=2), "lock_group_limit needs lock_group"),
                          (dict(lock_group_weight=2), "lock_group_weight needs lock_group"),
                          (dict(lock_group="g", lock_group_weight=1001), "weight must be"),
                          (dict(lock_limit=0), "lock_limit must be an integer >= 1")]:
        with pytest.raises(ValueError, match=error):
            enqueue_unique(Queue(), print, 1, **kwargs)
    with pytest.raises(ValueError, match="weight needs group"):
        while_executing(weight=2)
    with pytest.raises(ValueError, match="limit must be an integer >= 1"):
        while_executing(limit=0)
    with pytest.raises(TypeError, match="group must be a str or a callable"):
        while_executing(group=1.5)
