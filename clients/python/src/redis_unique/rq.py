"""Unique jobs for RQ, on redis-unique: the same lock types as the Celery part.

    from redis_unique.rq import enqueue_unique, while_executing

    job = enqueue_unique(queue, sync_user, 42, lock="until_executed", lock_ttl=3600)   # a Job

    @while_executing(ttl=60, on_conflict="skip")
    def export(account): ...

- ``until_executed`` (default): locked when enqueued, freed when the job
  succeeds or fails for good (a failure that RQ retries keeps it); works with
  any worker (it uses the job's success and failure callbacks, so it cannot be
  combined with callbacks of your own).
- ``until_expired``: locked when enqueued, held until its ``lock_ttl`` runs out.
- ``until_executing``, ``while_executing``, ``until_and_while_executing`` act
  when the job starts: run the workers with ``--job-class
  redis_unique.rq.UniqueJob`` (``Worker(..., job_class=UniqueJob)``).
- the :func:`while_executing` decorator holds a lock around the function
  itself and works with any worker.

``lock_key``: ``callable(args, kwargs)`` or None for every argument, as in the
Celery part; lock keys are ``unique:<module.function>:<digest>`` and
``...:run`` for the lock held while running. Holders' jids are RQ job ids; the
OWNER of a running job's lock is the worker's name (unique per worker
process): ``Client(redis).reap(owner=worker_name)`` frees a dead worker's locks.

``on_conflict``: when enqueuing, ``skip`` (default) returns the Job that holds
the lock (None if it is gone from Redis), ``raise`` raises
:class:`~redis_unique.DuplicateTask`, ``retry`` waits up to ``lock_wait`` seconds
(default 5) and then raises (``lock_wait`` waits before any policy). When running, ``skip`` returns None without
running, ``raise`` fails the job with DuplicateTask, ``retry`` fails it too, so
that the job's RQ ``Retry`` policy runs it again.

Several limits at once (per tenant and in total): ``lock_limits`` (``{key: limit}``, 0 for
no limit, or ``callable(args, kwargs)`` giving one, computed when enqueued) and
``lock_rates`` (``{key: Rate}``), with ``lock="while_executing"`` or
``"until_and_while_executing"`` (workers with ``UniqueJob``): when the job starts, its run
lock and every one of these keys are taken in one grant, every key or none, waiting up to
``lock_wait`` for all of them at once; renewed as one; released when it ends. A
``lock_key`` giving None takes only the limits. No room: ``on_conflict`` (``raise`` and
``retry`` with :class:`~redis_unique.LockNotAcquired`). The decorator takes ``limits`` and
``rates``, the same, computed at each call. Not with a group. Limits naming the run lock
itself (``unique:<func>:<digest>:run``) with another limit than ``lock_limit`` raise
``ValueError`` (a key has one limit), at ``enqueue_unique`` and when the job starts.

``lock_limit``: how many calls with the same key hold the lock at once (default
1). Fair sharing of that limit among tenants: ``lock_group`` (a string, or
``callable(args, kwargs)`` giving one; None: no group), ``lock_group_limit`` (at
most this many holders of one group) and ``lock_group_weight`` (1 to 1000), each
a value or a callable of the call; a freed slot goes to the waiting group holding
the fewest slots for its weight. The decorator takes ``limit``, ``group``,
``group_limit`` and ``weight``, the same.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import socket
import uuid
from typing import Any, Callable, Optional, TypeVar

from rq import get_current_job
from rq.job import Callback, Job

from ._multi import check_task_limits, rates_of, run_lock_and_limits, task_limits
from ._protocol import LOCK_TYPES, check_task_group, task_group
from .client import Client
from .errors import DuplicateTask, LockLost, LockNotAcquired
from .lock import Lock
from .multilock import MultiLock

__all__ = ["enqueue_unique", "while_executing", "UniqueJob", "unique_key"]

log = logging.getLogger("redis_unique.rq")
META = "redis_unique"
# The lock types whose run lock several keys with their limits may join.
LIMITS_LOCKS = ("while_executing", "until_and_while_executing")
F = TypeVar("F", bound=Callable[..., Any])


def _func_name(func: Any) -> str:
    if isinstance(func, str):
        return func
    return "%s.%s" % (func.__module__, func.__qualname__)


def unique_key(func: Any, args: Any = (), kwargs: Any = None,
               key: Optional[Callable[[Any, Any], Any]] = None) -> Optional[str]:
    """The lock key of a call (None: the key callable said "not unique")."""
    args, kwargs = list(args or ()), dict(kwargs or {})
    part = key(args, kwargs) if key is not None else [args, kwargs]
    if part is None:
        return None
    if not isinstance(part, str):
        text = json.dumps(part, sort_keys=True, separators=(",", ":"), default=repr)
        part = hashlib.sha1(text.encode()).hexdigest()
    return "unique:%s:%s" % (_func_name(func), part)


def _owner(job: Job) -> str:
    return getattr(job, "worker_name", None) or "%s:%d" % (socket.gethostname(), os.getppid())


def _policies(on_conflict: Any) -> tuple:
    if isinstance(on_conflict, str):
        client = server = on_conflict
    else:
        client, server = on_conflict.get("client", "skip"), on_conflict.get("server", "skip")
    for p in (client, server):
        if p not in ("skip", "raise", "retry"):
            raise ValueError("on_conflict must be skip, raise or retry, not %r" % (p,))
    return client, server


def enqueue_unique(queue: Any, func: Any, *args: Any, lock: str = "until_executed", lock_ttl: float = 3600,
                   lock_run_ttl: float = 60, lock_key: Optional[Callable[[Any, Any], Any]] = None,
                   on_conflict: Any = "skip", lock_wait: Optional[float] = None, lock_limit: int = 1,
                   lock_group: Any = None, lock_group_limit: Any = None, lock_group_weight: Any = None,
                   lock_limits: Any = None, lock_rates: Any = None, **kwargs: Any) -> Optional[Job]:
    """``queue.enqueue(func, *args, **kwargs)`` unless the same call holds the
    lock. ``lock_ttl``: the lease of the lock taken when enqueued (seconds);
    ``lock_run_ttl``: the lease of the lock held while running, renewed every
    third of it; ``lock_key``: what makes two calls the same; ``lock_wait``:
    seconds to wait for the lock before the conflict policy; ``lock_limit``: how
    many calls with the same key hold it at once; ``lock_group``,
    ``lock_group_limit``, ``lock_group_weight``: fair sharing of that limit (see
    the module's doc); ``lock_limits`` (``{key: limit}`` or a callable of the call giving
    one) and ``lock_rates`` (``{key: Rate}``): several keys taken with the run lock in one
    grant (see the module's doc). Options of RQ (``job_id``, ``meta``, ``retry``, ``job_timeout``...)
    pass through; ``kwargs`` are the function's otherwise, as with enqueue."""
    if lock not in LOCK_TYPES:
        raise ValueError("lock must be one of %s, not %r" % (", ".join(LOCK_TYPES), lock))
    client_policy, server_policy = _policies(on_conflict)
    _check_limit(lock_limit, "lock_limit")
    check_task_group(lock_group, lock_group_limit, lock_group_weight)
    _check_limits_with(lock, lock_group, lock_limits, lock_rates, ("lock_limits", "lock_rates"), "lock_group")
    fkwargs = dict(kwargs.pop("kwargs", None) or {})
    options = {k: kwargs.pop(k) for k in list(kwargs) if k in _RQ_OPTIONS}
    fkwargs.update(kwargs)
    k = unique_key(func, args, fkwargs, lock_key)
    group = task_group(lock_group, lock_group_limit, lock_group_weight, args, fkwargs)
    # Computed now, as the key: the worker takes what the call was enqueued with.
    limits = task_limits(lock_limits, lock_rates, args, fkwargs, ("lock_limits", "lock_rates"), extra=1)
    if limits is not None:  # a conflict with the run lock's limit refused now, not in the worker
        run_lock_and_limits(None if k is None else k + ":run", lock_limit, limits)
    wait = lock_wait
    if k is None and limits is None:
        return queue.enqueue(func, args=args, kwargs=fkwargs, **options)
    client = Client(queue.connection)
    job_id = options.setdefault("job_id", str(uuid.uuid4()))
    options["meta"] = dict(options.get("meta") or {}, **{META: {
        "key": k, "lock": lock, "ttl": lock_ttl, "run_ttl": lock_run_ttl, "on_conflict": server_policy, "wait": wait,
        "limit": lock_limit, **group, **({} if limits is None else {"limits": limits})}})
    if lock == "until_executed":
        if options.get("on_success") or options.get("on_failure"):
            raise ValueError("until_executed frees its lock in the job's callbacks: no on_success/on_failure")
        options["on_success"] = Callback(_release_on_success)
        options["on_failure"] = Callback(_release_on_failure)
    if lock != "while_executing" and k is not None:
        if wait is None and client_policy == "retry":
            wait = 5.0
        token = client.lock(k, job_id, limit=None if lock_limit == 1 else lock_limit, ttl=lock_ttl, type=lock,
                            wait=wait, meta={"func": _func_name(func), "queue": queue.name}, **group)
        if token is None:
            holders = client.locked_by(k)
            existing = holders[0].decode() if holders and isinstance(holders[0], bytes) else None
            if client_policy == "skip":
                log.info("unique job %s already enqueued as %s: skipped", k, existing)
                if existing is None:
                    return None
                try:
                    return Job.fetch(existing, connection=queue.connection)
                except Exception:  # noqa: BLE001 - gone from Redis (result expired)
                    return None
            raise DuplicateTask("%s is already enqueued with the same arguments (%s)" % (_func_name(func), existing),
                                k, existing)
    try:
        return queue.enqueue(func, args=args, kwargs=fkwargs, **options)
    except BaseException:
        if lock != "while_executing" and k is not None:
            client.unlock(k, job_id, token=token)  # this call's own hold, not a later one
        raise


def _check_limits_with(lock: Optional[str], group: Any, limits: Any, rates: Any, names: Any, group_name: str) -> None:
    check_task_limits(limits, rates, names)
    if limits is None:
        return
    if lock is not None and lock not in LIMITS_LOCKS:
        raise ValueError("%s are taken when the job starts and held while it runs: lock must be %s, not %r"
                         % (names[0], " or ".join(LIMITS_LOCKS), lock))
    if group is not None:
        raise ValueError("%s and %s cannot go together: a grant of several keys has no fair sharing among groups"
                         % (names[0], group_name))


def _limited_hold(client: Client, run_key: Optional[str], run_limit: int, limits: Any, **kwargs: Any) -> MultiLock:
    """The run lock (when the call is unique) and every limit's key, one grant."""
    locks = run_lock_and_limits(run_key, run_limit, limits)
    return MultiLock(client, locks, type="while_executing", rates=rates_of(limits) or None, **kwargs)


def _limits_conflict(policy: str, run_key: Optional[str], run_limit: int, limits: Any, client: Client) -> None:
    """A grant refused: a duplicate when the run lock is full, else no room in a limit."""
    if run_key is not None and len(client.locked_by(run_key)) >= run_limit:
        return _conflict(policy, run_key, client)
    if policy == "skip":
        log.info("unique job: its limits (%s) had no room: skipped", ", ".join(limits["keys"]))
        return None
    raise LockNotAcquired("its limits (%s) had no room" % ", ".join(limits["keys"]), limits["keys"][0])


def _check_limit(limit: Any, name: str) -> None:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError("%s must be an integer >= 1, not %r" % (name, limit))


def _group_of(info: Any) -> Any:
    """The group options stored in a job's meta at enqueue."""
    return {name: info[name] for name in ("group", "group_limit", "weight") if info.get(name) is not None}


_RQ_OPTIONS = {"job_timeout", "description", "result_ttl", "ttl", "failure_ttl", "depends_on", "job_id",
               "at_front", "meta", "retry", "repeat", "on_success", "on_failure", "on_stopped", "pipeline",
               "rate_limit", "unique", "group_id", "webhooks"}


def _release_on_success(job: Job, connection: Any, result: Any, *_: Any) -> None:
    info = job.meta.get(META) or {}
    if info.get("key"):
        Client(connection).unlock(info["key"], job.id)


def _release_on_failure(job: Job, connection: Any, *exc_info: Any) -> None:
    info = job.meta.get(META) or {}
    if not info.get("key"):
        return
    if job.retries_left:  # RQ runs it again: keep the lock
        return
    Client(connection).unlock(info["key"], job.id)


def _conflict(policy: str, key: str, client: Client) -> None:
    holders = client.locked_by(key)
    existing = holders[0].decode() if holders and isinstance(holders[0], bytes) else None
    if policy == "skip":
        log.info("unique job: %s is running (%s): skipped", key, existing)
        return None
    raise DuplicateTask("%s is running (%s)" % (key, existing), key, existing)


class UniqueJob(Job):
    """The job class of workers that run ``until_executing``, ``while_executing``
    and ``until_and_while_executing`` jobs of :func:`enqueue_unique`."""

    def perform(self) -> Any:
        info = self.meta.get(META) or {}
        kind = info.get("lock")
        if kind not in ("until_executing", "while_executing", "until_and_while_executing"):
            return super().perform()
        client = Client(self.connection)
        k = info["key"]
        if info.get("limits") is not None:
            return self._perform_limited(client, k, kind, info)
        if kind == "until_executing":
            client.unlock(k, self.id)
            return super().perform()
        hold = Lock(client, k + ":run", ttl=info.get("run_ttl") or 60, limit=info.get("limit") or 1, jid=self.id,
                    owner=_owner(self), type="while_executing", wait=info.get("wait"),
                    on_lost=_lost_reporter(self.id), **_group_of(info))
        try:
            hold.acquire()
        except LockNotAcquired:
            policy = info.get("on_conflict", "skip")
            if kind == "until_and_while_executing" and not (policy == "retry" and self.retries_left):
                client.unlock(k, self.id)
            return _conflict(policy, k + ":run", client)
        if kind == "until_and_while_executing":
            client.unlock(k, self.id)
        try:
            return super().perform()
        finally:
            try:
                hold.release()
            except LockLost:
                pass  # told when it was lost


    def _perform_limited(self, client: Client, k: Optional[str], kind: str, info: Any) -> Any:
        run_key = None if k is None else k + ":run"
        hold = _limited_hold(client, run_key, info.get("limit") or 1, info["limits"], ttl=info.get("run_ttl") or 60,
                             jid=self.id, owner=_owner(self), wait=info.get("wait"), on_lost=_lost_reporter(self.id))
        try:
            hold.acquire()
        except LockNotAcquired:
            policy = info.get("on_conflict", "skip")
            if kind == "until_and_while_executing" and k is not None and \
                    not (policy == "retry" and self.retries_left):
                client.unlock(k, self.id)
            return _limits_conflict(policy, run_key, info.get("limit") or 1, info["limits"], client)
        if kind == "until_and_while_executing" and k is not None:
            client.unlock(k, self.id)
        try:
            return super().perform()
        finally:
            try:
                hold.release()
            except LockLost:
                pass  # told when it was lost


def _lost_reporter(job_id: str) -> Callable[[LockLost], None]:
    """Tells at once, in the worker's log, that the running job lost its lock."""

    def report(lost: LockLost) -> None:
        log.error("unique job %s lost its lock while running: %s", job_id, lost)

    return report


def while_executing(key: Optional[Callable[[Any, Any], Any]] = None, *, ttl: float = 60,
                    on_conflict: str = "skip", wait: Optional[float] = None, limit: int = 1, group: Any = None,
                    group_limit: Any = None, weight: Any = None, limits: Any = None,
                    rates: Any = None) -> Callable[[F], F]:
    """A job function that runs once at a time per ``key`` (every argument by
    default; ``limit`` at a time): a lock on ``unique:<module.function>:<digest>:run``
    around the call, renewed every third of ``ttl``, OWNER the worker's name. Called
    outside a job, the function just runs. ``group`` (a string or ``callable(args,
    kwargs)``), ``group_limit`` and ``weight`` share the limit fairly among tenants. ``limits``
    (``{key: limit}`` or a callable of the call giving one) and ``rates`` (``{key: Rate}``):
    several keys taken with the lock in one grant, every key or none."""
    _policies(on_conflict)
    _check_limit(limit, "limit")
    check_task_group(group, group_limit, weight, names=("group", "group_limit", "weight"))
    _check_limits_with(None, group, limits, rates, ("limits", "rates"), "group")

    def decorate(func: F) -> F:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            job = get_current_job()
            k = unique_key(func, args, kwargs, key)
            found = None if job is None else task_limits(limits, rates, args, kwargs, ("limits", "rates"), extra=1)
            if job is None or (k is None and found is None):
                return func(*args, **kwargs)
            client = Client(job.connection)
            run_key = None if k is None else k + ":run"
            hold: Any
            if found is not None:
                hold = _limited_hold(client, run_key, limit, found, ttl=ttl, jid=job.id, owner=_owner(job), wait=wait,
                                     on_lost=_lost_reporter(job.id))
            else:
                hold = Lock(client, run_key, ttl=ttl, limit=limit, jid=job.id, owner=_owner(job),
                            type="while_executing", wait=wait, on_lost=_lost_reporter(job.id),
                            **task_group(group, group_limit, weight, args, kwargs))
            try:
                hold.acquire()
            except LockNotAcquired:
                if found is not None:
                    return _limits_conflict(on_conflict, run_key, limit, found, client)
                return _conflict(on_conflict, run_key, client)
            try:
                return func(*args, **kwargs)
            finally:
                try:
                    hold.release()
                except LockLost:
                    pass  # told when it was lost

        return wrapper  # type: ignore[return-value]

    return decorate
