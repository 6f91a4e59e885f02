"""Unique tasks for Celery 5, on redis-unique.

    from redis_unique.celery import UniqueTask

    app = Celery("proj", broker="redis://...", task_cls=UniqueTask)   # or base=UniqueTask per task

    @app.task(unique={"lock": "until_executed", "ttl": 3600, "on_conflict": "skip"})
    def sync_user(user_id): ...

Options of ``unique`` (a dict; ``True`` means every default):

- ``lock``: ``until_executed`` (default), ``until_executing``, ``while_executing``,
  ``until_and_while_executing``, ``until_expired``.
- ``ttl``: seconds, the lease of the lock taken when the task is sent (and the
  whole life of an ``until_expired`` lock). Default 3600.
- ``run_ttl``: seconds, the lease of the lock held while the task runs, renewed
  every third of ``run_ttl`` by the worker: a killed worker's lock frees within it.
  Default 60.
- ``key``: ``callable(args, kwargs)`` giving what makes two calls the same (a
  string is used as is, anything else is hashed as JSON; ``None`` from the
  callable means "not unique"), or ``None`` (default): every argument, bound
  to the task's signature with its defaults (``f(1)`` and ``f(x=1)`` are the
  same call).
- ``on_conflict``: ``skip`` (default), ``raise`` or ``retry``, or a dict
  ``{"client": ..., "server": ...}``. Client side (sending): ``skip`` returns the
  AsyncResult of the task that holds the lock, ``raise`` raises
  :class:`~redis_unique.DuplicateTask`, ``retry`` waits for the lock up to
  ``wait`` seconds (default 5) and then raises. Server side (running):
  ``skip`` returns None without running, ``raise`` fails the task with
  DuplicateTask, ``retry`` retries it (``self.retry``, ``retry_countdown``
  seconds, default 1, within the task's ``max_retries``).
- ``wait``: seconds to wait natively for the lock before the conflict policy.
- ``limit``: how many calls with the same key hold the lock at once (default 1):
  with a ``key`` that gives one string for many calls, "at most 10 of these run
  at once".

Fair sharing of that limit among tenants, as task options beside ``unique``:

- ``lock_group``: the call's group (a tenant's name): a string, or
  ``callable(args, kwargs)`` giving one (``None``: this call has no group). A freed
  slot goes to the waiting group holding the fewest slots for its weight.
- ``lock_group_limit``: at most this many holders of one group (an int, or a
  callable of the call like ``lock_group``).
- ``lock_group_weight``: the group's weight, 1 to 1000 (default 1; an int or a
  callable).

    @app.task(unique={"lock": "while_executing", "key": lambda a, k: "partner-api",
                      "limit": 10, "wait": 600},
              lock_group=lambda args, kwargs: args[0], lock_group_limit=4)
    def call_partner(tenant, payload): ...

Several limits at once (per tenant and in total, say), as task options beside ``unique``
with a lock held while the task runs (``while_executing`` or ``until_and_while_executing``):

- ``lock_limits``: ``{key: limit}`` (0: no limit), or ``callable(args, kwargs)`` giving one
  (None or ``{}``: this call has none). When the task starts, its run lock and every one of
  these keys are taken in one grant, every key or none, waiting up to ``wait`` seconds for
  all of them to have room at once (holding nothing meanwhile); renewed as one every third of
  ``run_ttl``; released when it ends. A call whose ``key`` gives None takes only the limits.
  When a limit has no room, ``on_conflict`` applies on the server side (``raise`` and
  ``retry`` with :class:`~redis_unique.LockNotAcquired`).
- ``lock_rates``: ``{key: Rate}`` for some of those keys (or a callable giving it), spent
  only when the whole grant succeeds.

    @app.task(unique={"lock": "while_executing", "key": lambda a, k: None, "wait": 600},
              lock_limits=lambda args, kwargs: {"{api}:tenant:%s" % args[0]: 2, "{api}:global": 10},
              lock_rates={"{api}:global": Rate(50, per=1)})
    def call_api(tenant, payload): ...

In a cluster every key of one grant needs one hash tag (``{api}``), the run lock's too (a
``key`` callable giving ``"{api}..."``). Not with ``lock_group``: a grant of several keys has
no fair sharing among groups. A ``lock_limits`` naming the run lock itself
(``unique:<task name>:<digest>:run``) with another limit than ``unique``'s ``limit`` raises
``ValueError`` (a key has one limit), at ``apply_async`` and when the task starts.

Lock keys are ``unique:<task name>:<digest>`` (``...:run`` for the lock held
while running); the job id of a holder is the Celery task id; the OWNER of a
lock held by a worker is ``<node name>:<pid of the worker's main process>``,
the ``hostname`` and ``pid`` of that worker's events.

The Redis that holds the locks: ``app.conf.unique_redis_url``, else the broker
when it is Redis.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Tuple, Union

import redis as redis_py
from celery import Task, signals
from celery.exceptions import Reject, Retry

from ._multi import check_task_limits, rates_of, run_lock_and_limits, task_limits
from ._protocol import LOCK_TYPES, TASK_GROUP_OPTIONS, check_task_group, task_group
from .client import Client
from .errors import DuplicateTask, LockLost, LockNotAcquired
from .lock import Lock
from .multilock import MultiLock

__all__ = ["UniqueTask", "UniqueOptions", "unique_client", "worker_owner", "reap_worker", "monitor_workers"]

log = logging.getLogger("redis_unique.celery")

CLIENT_SIDE = ("until_executed", "until_executing", "until_and_while_executing", "until_expired")
SERVER_SIDE = ("while_executing", "until_and_while_executing")
POLICIES = ("skip", "raise", "retry")
# The lock types whose run lock several keys with their limits may join.
LIMITS_LOCKS = ("while_executing", "until_and_while_executing")
TASK_OPTIONS = TASK_GROUP_OPTIONS + ("lock_limits", "lock_rates")

_worker_pid: Optional[int] = None
_clients: Dict[Tuple[int, str], Client] = {}
_clients_lock = threading.Lock()


@signals.worker_init.connect
def _remember_worker_pid(**_: Any) -> None:
    # Sent in the worker's main process before the pool forks: children inherit it.
    global _worker_pid
    _worker_pid = os.getpid()


def worker_owner(hostname: Optional[str] = None) -> str:
    """The OWNER of the locks this worker holds: node name and main pid."""
    return "%s:%d" % (hostname or "celery@%s" % socket.gethostname(), _worker_pid or os.getpid())


def unique_client(app: Any) -> Client:
    """The redis_unique Client of an app (one per process and URL)."""
    url = app.conf.get("unique_redis_url") or app.conf.broker_url or ""
    if not url.startswith(("redis://", "rediss://", "unix://")):
        raise RuntimeError("redis_unique.celery needs a Redis: set app.conf.unique_redis_url "
                           "(the broker is %r)" % (url,))
    ident = (os.getpid(), url)
    with _clients_lock:
        client = _clients.get(ident)
        if client is None:
            client = _clients[ident] = Client(redis_py.Redis.from_url(url))
        return client


@dataclass(frozen=True)
class UniqueOptions:
    lock: str = "until_executed"
    ttl: float = 3600.0
    run_ttl: float = 60.0
    key: Optional[Callable[[Any, Any], Any]] = None
    client_conflict: str = "skip"
    server_conflict: str = "skip"
    wait: Optional[float] = None
    retry_countdown: float = 1.0
    limit: int = 1
    # Each a value or a callable(args, kwargs) giving it.
    group: Any = None
    group_limit: Any = None
    group_weight: Any = None
    # Several keys with their limits (and rates), taken with the run lock in one grant: each
    # a dict or a callable(args, kwargs) giving one.
    limits: Any = None
    rates: Any = None

    @classmethod
    def parse(cls, value: Union[bool, Dict[str, Any], None],
              groups: Optional[Dict[str, Any]] = None) -> Optional["UniqueOptions"]:
        groups = {k: v for k, v in (groups or {}).items() if v is not None}
        limits, rates = groups.pop("lock_limits", None), groups.pop("lock_rates", None)
        if not value and (limits is not None or rates is not None):
            raise ValueError("lock_limits and lock_rates need the unique option (with a lock held while the "
                             "task runs: while_executing or until_and_while_executing)")
        if not value:
            if groups:
                raise ValueError("%s needs the unique option (the lock whose limit the groups share)"
                                 % ", ".join(sorted(groups)))
            return None
        if value is True:
            value = {}
        if not isinstance(value, dict):
            raise TypeError("unique must be True or a dict of options, not %r" % (value,))
        known = {"lock", "ttl", "run_ttl", "key", "on_conflict", "wait", "retry_countdown", "limit"}
        unknown = set(value) - known
        if unknown:
            raise ValueError("unknown unique option(s): %s" % ", ".join(sorted(unknown)))
        lock = value.get("lock", "until_executed")
        if lock not in LOCK_TYPES:
            raise ValueError("unique lock must be one of %s, not %r" % (", ".join(LOCK_TYPES), lock))
        conflict = value.get("on_conflict", "skip")
        if isinstance(conflict, str):
            client_c = server_c = conflict
        else:
            client_c, server_c = conflict.get("client", "skip"), conflict.get("server", "skip")
        for c in (client_c, server_c):
            if c not in POLICIES:
                raise ValueError("on_conflict must be one of %s, not %r" % (", ".join(POLICIES), c))
        limit = value.get("limit", 1)
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError("unique limit must be an integer >= 1, not %r" % (limit,))
        group = groups.get("lock_group")
        group_limit, weight = groups.get("lock_group_limit"), groups.get("lock_group_weight")
        check_task_group(group, group_limit, weight)
        check_task_limits(limits, rates)
        if limits is not None:
            if lock not in LIMITS_LOCKS:
                raise ValueError("lock_limits are taken when the task starts and held while it runs: the unique "
                                 "lock must be %s, not %r" % (" or ".join(LIMITS_LOCKS), lock))
            if group is not None:
                raise ValueError("lock_limits and lock_group cannot go together: a grant of several keys has "
                                 "no fair sharing among groups")
        return cls(lock=lock, ttl=float(value.get("ttl", 3600)), run_ttl=float(value.get("run_ttl", 60)),
                   key=value.get("key"), client_conflict=client_c, server_conflict=server_c,
                   wait=value.get("wait"), retry_countdown=float(value.get("retry_countdown", 1)), limit=limit,
                   group=group, group_limit=group_limit, group_weight=weight, limits=limits, rates=rates)


def _task_option(task: Any, name: str) -> Any:
    """A task option as given: a function given as ``lock_group=`` became a class attribute,
    which plain attribute access would bind to the task as a method."""
    value = inspect.getattr_static(task, name, None)
    return value.__func__ if isinstance(value, staticmethod) else value


def _digest(value: Any) -> str:
    if isinstance(value, str):
        return value
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=repr)
    return hashlib.sha1(text.encode()).hexdigest()


class UniqueTask(Task):
    """A Task that honours the ``unique`` option (see the module's doc)."""

    abstract = True
    unique: Union[bool, Dict[str, Any], None] = None
    # Fair sharing of the lock's limit (see the module's doc): task options, as ``unique``.
    lock_group: Any = None
    lock_group_limit: Any = None
    lock_group_weight: Any = None
    # Several keys with their limits, taken with the run lock in one grant (see the module's doc).
    lock_limits: Any = None
    lock_rates: Any = None

    # -- configuration -----------------------------------------------------

    def unique_options(self) -> Optional[UniqueOptions]:
        given = (self.unique,) + tuple(_task_option(self, name) for name in TASK_OPTIONS)
        cached = self.__dict__.get("_unique_parsed")
        if cached is None or any(a is not b for a, b in zip(cached[0], given)):
            cached = (given, UniqueOptions.parse(self.unique, dict(zip(TASK_OPTIONS, given[1:]))))
            self.__dict__["_unique_parsed"] = cached
        return cached[1]

    def unique_group(self, args: Any = None, kwargs: Any = None) -> Dict[str, Any]:
        """The group options of a call (``group``, ``group_limit``, ``weight``), as sent
        with each of its locks: {} without ``lock_group`` (or when it gives None)."""
        opts = self.unique_options()
        if opts is None:
            return {}
        return task_group(opts.group, opts.group_limit, opts.group_weight, args, kwargs)

    def unique_limits(self, args: Any = None, kwargs: Any = None) -> Optional[Dict[str, Any]]:
        """The keys, limits and rates of a call (``{"keys", "limits", "rates"}``), taken with
        its run lock in one grant: None without ``lock_limits`` (or when it gives none)."""
        opts = self.unique_options()
        if opts is None or opts.limits is None:
            return None
        return task_limits(opts.limits, opts.rates, args, kwargs, extra=1)

    def unique_key(self, args: Any = None, kwargs: Any = None) -> Optional[str]:
        """The lock key of a call, or None when the call is not unique."""
        opts = self.unique_options()
        if opts is None:
            return None
        args, kwargs = list(args or ()), dict(kwargs or {})
        if opts.key is not None:
            part = opts.key(args, kwargs)
        else:
            # The call bound to the task's signature, defaults applied: f(1) and
            # f(x=1) are the same call, as in celery-once and celery-singleton.
            try:
                bound = inspect.signature(self.run).bind(*args, **kwargs)
                bound.apply_defaults()
                part = dict(bound.arguments)
                part.pop("self", None)
            except (TypeError, ValueError):
                part = [args, kwargs]
        if part is None:
            return None
        return "unique:%s:%s" % (self.name, _digest(part))

    @property
    def unique_client(self) -> Client:
        return unique_client(self.app)

    def unique_holders(self, *args: Any, **kwargs: Any) -> list:
        """Who holds the lock of this call (sent and running)."""
        key = self.unique_key(args, kwargs)
        if key is None:
            return []
        return self.unique_client.holders(key) + self.unique_client.holders(key + ":run")

    def unique_clear(self, *args: Any, **kwargs: Any) -> int:
        """Removes the locks of this call, whoever holds them (like celery-once's
        clear_lock): the number of keys deleted."""
        key = self.unique_key(args, kwargs)
        return 0 if key is None else int(self.unique_client.redis.delete(key, key + ":run"))

    # -- client side ---------------------------------------------------------

    def apply_async(self, args: Any = None, kwargs: Any = None, task_id: Optional[str] = None,
                    producer: Any = None, link: Any = None, link_error: Any = None, shadow: Any = None,
                    **options: Any) -> Any:
        opts = self.unique_options()
        retrying = task_id is not None and task_id == self.request.id and not self.request.called_directly
        if opts is not None and opts.limits is not None and not retrying:
            # A conflict with the run lock's limit refused at the call, not in the worker.
            limits = self.unique_limits(args, kwargs)
            if limits is not None:
                run = self.unique_key(args, kwargs)
                run_lock_and_limits(None if run is None else run + ":run", opts.limit, limits)
        key = None if opts is None or opts.lock not in CLIENT_SIDE or retrying else self.unique_key(args, kwargs)
        if key is None:
            return super().apply_async(args, kwargs, task_id=task_id, producer=producer, link=link,
                                       link_error=link_error, shadow=shadow, **options)
        from celery.utils import uuid

        task_id = task_id or uuid()
        client = self.unique_client
        wait = opts.wait
        if wait is None and opts.client_conflict == "retry":
            wait = 5.0
        meta = {"task": self.name, "queue": options.get("queue")}
        group = self.unique_group(args, kwargs)
        for _ in range(3):
            token = client.lock(key, task_id, limit=None if opts.limit == 1 else opts.limit, ttl=opts.ttl, type=opts.lock, meta=meta, wait=wait,
                                **group)
            if token is not None:
                break
            holders = client.locked_by(key)
            if holders:
                existing = holders[0].decode() if isinstance(holders[0], bytes) else holders[0]
                if opts.client_conflict == "skip":
                    log.info("unique task %s%r already sent as %s: skipped", self.name, tuple(args or ()), existing)
                    return self.AsyncResult(existing)
                raise DuplicateTask("task %s is already sent with the same arguments (%s)" % (self.name, existing),
                                    key, existing)
        else:
            raise DuplicateTask("task %s: lock %s is contended" % (self.name, key), key)
        try:
            return super().apply_async(args, kwargs, task_id=task_id, producer=producer, link=link,
                                       link_error=link_error, shadow=shadow, **options)
        except BaseException:
            client.unlock(key, task_id, token=token)  # this call's own hold, not a later one
            raise

    # -- worker side -----------------------------------------------------------

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        opts = self.unique_options()
        req = self.request
        if opts is None or req.called_directly or not req.id:
            return super().__call__(*args, **kwargs)
        key = self.unique_key(args, kwargs)
        limits = self.unique_limits(args, kwargs)
        if key is None and limits is None:
            return super().__call__(*args, **kwargs)
        client = self.unique_client
        owner = worker_owner(req.hostname)
        kind = opts.lock
        group = self.unique_group(args, kwargs)
        if limits is not None:
            return self._run_limited(key, limits, opts, args, kwargs)

        if kind == "until_expired":
            return super().__call__(*args, **kwargs)
        if kind == "until_executing":
            client.unlock(key, req.id)
            return super().__call__(*args, **kwargs)
        if kind == "until_executed":
            # The worker takes over the lease: short, renewed, with its OWNER.
            hold = Lock(client, key, ttl=opts.run_ttl, limit=opts.limit, jid=req.id, owner=owner, type=kind,
                        on_lost=self._lost_reporter(), **group)
            try:
                hold.acquire()
            except LockNotAcquired:
                log.warning("unique task %s[%s]: its lock %s was taken by another after its lease ran out",
                            self.name, req.id, key)
                hold = None
            return self._run_holding(hold, key, opts, args, kwargs, keep_on_retry=True)

        # while_executing, until_and_while_executing: a lock around the run.
        hold = Lock(client, key + ":run", ttl=opts.run_ttl, limit=opts.limit, jid=req.id, owner=owner,
                    type="while_executing", wait=opts.wait, on_lost=self._lost_reporter(), **group)
        try:
            hold.acquire()
        except LockNotAcquired:
            return self._server_conflict(key, opts, args)
        if kind == "until_and_while_executing":
            client.unlock(key, req.id)
        return self._run_holding(hold, key, opts, args, kwargs, keep_on_retry=False)

    def _run_limited(self, key: Optional[str], limits: Dict[str, Any], opts: UniqueOptions, args: Any,
                     kwargs: Any) -> Any:
        """while_executing and until_and_while_executing with ``lock_limits``: the run lock
        (when the call is unique) and every limit's key in one grant, renewed as one."""
        req = self.request
        locks = run_lock_and_limits(None if key is None else key + ":run", opts.limit, limits)
        hold = MultiLock(self.unique_client, locks, ttl=opts.run_ttl, jid=req.id, owner=worker_owner(req.hostname),
                         type="while_executing", wait=opts.wait, rates=rates_of(limits) or None,
                         on_lost=self._lost_reporter())
        try:
            hold.acquire()
        except LockNotAcquired:
            return self._server_conflict(key, opts, args, limits=limits["keys"])
        if opts.lock == "until_and_while_executing" and key is not None:
            self.unique_client.unlock(key, req.id)
        return self._run_holding(hold, key or "", opts, args, kwargs, keep_on_retry=False)  # type: ignore[arg-type]

    def _lost_reporter(self) -> Callable[[LockLost], None]:
        """Tells at once, in the worker's log, that the running task lost its lock."""
        name, task_id = self.name, self.request.id

        def report(lost: LockLost) -> None:
            log.error("unique task %s[%s] lost its lock while running: %s", name, task_id, lost)

        return report

    def _run_holding(self, hold: Optional[Lock], key: str, opts: UniqueOptions, args: Any, kwargs: Any,
                     keep_on_retry: bool) -> Any:
        keep = False
        try:
            return super().__call__(*args, **kwargs)
        except Retry:
            keep = keep_on_retry
            raise
        except Reject as exc:
            keep = keep_on_retry and bool(exc.requeue)
            raise
        finally:
            if hold is not None:
                if keep:
                    # Waiting for the retry: back to the lease of a sent task. The retry is
                    # already sent and may have run and released meanwhile (countdown 0,
                    # another worker): then this LOCK is a new grant, not a renewal of the
                    # held token, and is given up at once instead of lasting its lease.
                    held = hold.token
                    hold.detach()
                    took = self.unique_client.lock(hold.key, hold.jid, ttl=opts.ttl)
                    if took is not None and took != held:
                        self.unique_client.unlock(hold.key, hold.jid, token=took)
                else:
                    try:
                        hold.release()
                    except LockLost:
                        pass  # told when it was lost

    def _server_conflict(self, key: Optional[str], opts: UniqueOptions, args: Any,
                         limits: Optional[list] = None) -> Any:
        req = self.request
        holders = [] if key is None else self.unique_client.locked_by(key + ":run")
        existing = holders[0].decode() if holders and isinstance(holders[0], bytes) else None
        policy = opts.server_conflict
        keep_sent_lock = opts.lock == "until_and_while_executing" and policy == "retry"
        if opts.lock == "until_and_while_executing" and not keep_sent_lock and key is not None:
            self.unique_client.unlock(key, req.id)
        if limits is not None and (existing is None or len(holders) < opts.limit):
            # Not a duplicate: one of the limits had no room (the grant waited up to ``wait``).
            exc: LockNotAcquired = LockNotAcquired(
                "task %s: its limits (%s) had no room for it" % (self.name, ", ".join(limits)), limits[0])
            if policy == "skip":
                log.info("unique task %s[%s]: its limits had no room: skipped", self.name, req.id)
                return None
        else:
            if policy == "skip":
                log.info("unique task %s[%s]: %s is running: skipped", self.name, req.id, existing)
                return None
            exc = DuplicateTask("task %s is already running with the same arguments (%s)" % (self.name, existing),
                                "%s:run" % key, existing)
        if policy == "raise":
            raise exc
        try:
            raise self.retry(countdown=opts.retry_countdown, exc=exc)
        except LockNotAcquired:
            # max_retries reached: the task fails for good and frees its sent lock.
            if keep_sent_lock and key is not None:
                self.unique_client.unlock(key, req.id)
            raise


@signals.task_revoked.connect
def _release_on_revoke(sender: Any = None, request: Any = None, **_: Any) -> None:
    task = sender
    if not isinstance(task, UniqueTask) or request is None:
        return
    opts = task.unique_options()
    if opts is None or opts.lock == "until_expired":
        return
    try:
        key = task.unique_key(getattr(request, "args", None), getattr(request, "kwargs", None))
        if key is not None:
            task.unique_client.unlock(key, request.id)
            task.unique_client.unlock(key + ":run", request.id)
        limits = task.unique_limits(getattr(request, "args", None), getattr(request, "kwargs", None))
        if limits is not None:
            task.unique_client.unlock_all(limits["keys"], request.id)
    except Exception:  # noqa: BLE001 - a signal handler must not break the worker
        log.exception("redis_unique: releasing the locks of revoked task %s failed", request.id)


# -- dead workers ------------------------------------------------------------

def reap_worker(app: Any, hostname: str, pid: int) -> int:
    """Frees every lock held by the worker ``hostname`` (node name) with main
    process ``pid``: run it when that worker is known dead."""
    return unique_client(app).reap(owner="%s:%d" % (hostname, int(pid)))


def monitor_workers(app: Any, stop: Optional[threading.Event] = None, interval: float = 1.0,
                    on_reap: Optional[Callable[[str, int, int], None]] = None) -> None:
    """Listens to the workers' events (workers started with ``-E`` or
    ``worker_send_task_events``) and frees the locks of each worker that goes
    offline: at once on ``worker-offline`` (a clean shutdown), and when its
    heartbeats stop (a killed worker, ``kill -9``, a lost machine). Blocks until
    ``stop`` is set; run it in a thread of a monitor process or a beat node."""
    state = app.events.State()
    reaped: set = set()

    def reap(hostname: str, pid: int) -> None:
        if (hostname, pid) in reaped:
            return
        reaped.add((hostname, pid))
        n = reap_worker(app, hostname, pid)
        log.info("redis_unique: worker %s (pid %d) is gone: freed %d lock(s)", hostname, pid, n)
        if on_reap is not None:
            on_reap(hostname, pid, n)

    def on_event(event: Dict[str, Any]) -> None:
        state.event(event)
        if event.get("type") == "worker-offline" and event.get("pid"):
            reap(event["hostname"], int(event["pid"]))

    def reap_the_silent() -> None:
        for worker in list(state.workers.values()):
            if worker.pid and worker.heartbeats and not worker.alive:
                reap(worker.hostname, int(worker.pid))

    stop = stop or threading.Event()
    while not stop.is_set():
        conn = app.connection_for_read()
        errors = tuple(conn.connection_errors) + (OSError, ConnectionError)
        try:
            with conn:
                recv = app.events.Receiver(conn, handlers={"*": on_event})
                # One consumer for as long as the connection lasts. Events are PUBLISHed: a
                # consumer opened for each wait (as Receiver.capture does) misses those sent
                # between two, a dead worker's last heartbeat among them; and capture returns
                # only after a whole second without any event, which a busy cluster never has,
                # so the silent workers would never be looked for.
                with recv.consumer_context(wakeup=False) as (events, _, _):
                    looked = time.monotonic()
                    while not stop.is_set():
                        try:
                            events.drain_events(timeout=interval)
                        except (socket.timeout, TimeoutError):
                            pass
                        if time.monotonic() - looked >= interval:
                            looked = time.monotonic()
                            reap_the_silent()
        except errors as exc:  # the broker went away: try again
            log.warning("redis_unique: event monitor reconnecting: %s", exc)
            stop.wait(interval)
