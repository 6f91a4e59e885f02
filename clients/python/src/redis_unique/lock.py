"""Lock and Semaphore: context managers whose lease renews itself while held."""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any, Dict, Mapping, Optional, Union

from ._protocol import RateT, group_args, parse_token, renewal_args, seconds_to_ms
from ._refresh import OnLost, RefreshLoop
from .client import Client
from .errors import AlreadyAcquired, LockLost, LockNotAcquired, UniqueError

__all__ = ["Lock", "Semaphore", "RWLock"]

log = logging.getLogger("redis_unique")


class LockState:
    """What the thread-renewed :class:`Lock` and the task-renewed asyncio
    Lock share: their settings, the token of the hold, its :class:`RefreshLoop`,
    and the errors they raise."""

    def __init__(self, client: Any, key: str, *, ttl: float, wait: Optional[float], limit: int,
                 owner: Optional[str], meta: Optional[Mapping[str, Any]], renew: bool,
                 jid: Optional[str], type: Optional[str], rate: Optional[RateT] = None,
                 on_lost: Optional[OnLost] = None, group: Optional[Union[str, bytes]] = None,
                 weight: Optional[int] = None, group_limit: Optional[int] = None,
                 mode: Optional[str] = None) -> None:
        if not ttl or ttl <= 0:
            raise ValueError("ttl must be a positive number of seconds")
        if on_lost is not None and not callable(on_lost):
            raise TypeError("on_lost must be a callable taking the LockLost, not %r" % (on_lost,))
        self.client = client
        self.key = key
        self.ttl = float(ttl)
        self.lease_ms = seconds_to_ms(ttl, "ttl")
        self.wait = wait
        self.limit = limit
        self.owner = owner
        self.meta = meta
        self.renew = renew
        self.type = type
        # Spent by the grant only (renewals never spend the rate).
        self.rate = rate
        self.on_lost = on_lost
        # Told now rather than at the first acquire: a group's options, checked as sent.
        group_args(group, weight, group_limit, mode)
        # Sent with the grant; a renewal keeps them (the server keeps the holder's group and mode).
        self.group = group
        self.weight = weight
        self.group_limit = group_limit
        self.mode = mode
        self.jid = jid if jid is not None else uuid.uuid4().hex
        self.token: Optional[int] = None
        self._refresh: Optional[RefreshLoop] = None
        self._lost: Optional[LockLost] = None  # found at release, when nothing renewed

    @property
    def renewals(self) -> int:
        """How many renewals kept the hold since it was granted."""
        return 0 if self._refresh is None else self._refresh.renewals

    @property
    def lost(self) -> bool:
        """True once the hold was found gone (by a renewal, or at release)."""
        return self._lost is not None or (self._refresh is not None and self._refresh.lost is not None)

    @property
    def held(self) -> bool:
        return self.token is not None and not self.lost

    def _lock_args(self) -> Dict[str, Any]:
        return dict(limit=self.limit, ttl=self.ttl, type=self.type, owner=self.owner, meta=self.meta,
                    rate=self.rate, group=self.group, weight=self.weight, group_limit=self.group_limit,
                    mode=self.mode, wait=self.wait)

    def _granted(self, token: Optional[int], sent_at: float) -> RefreshLoop:
        if token is None:
            raise LockNotAcquired("%r is held by others%s" % (
                self.key, "" if self.wait is None else " after waiting %gs" % self.wait), self.key)
        self.token = token
        self._lost = None
        # A WAIT is spent before the grant: the lease starts when the reply comes, at the latest.
        self._refresh = RefreshLoop(self.client, self.key, self.jid, token, self.lease_ms,
                                    sent_at=sent_at if self.wait is None else time.monotonic(),
                                    on_lost=self.on_lost, name=type(self).__name__.lower())
        return self._refresh

    def update(self, *, type: Optional[str] = None, owner: Optional[str] = None,
               meta: Optional[Mapping[str, Any]] = None) -> None:
        """Changes the hold's TYPE, OWNER or META: sent with the next renewal (once)."""
        if self._refresh is None or self.token is None:
            raise UniqueError("%r is not held: nothing to update" % (self.key,))
        if not self.renew:
            raise UniqueError("%r is held with renew=False: no renewal would send the update" % (self.key,))
        self._refresh.update(type=type, owner=owner, meta=meta)
        self.type, self.owner, self.meta = type or self.type, owner or self.owner, \
            self.meta if meta is None else meta

    def _mode_change(self, mode: str) -> Any:
        """The LOCK that changes a held lock's mode: a renewal (TTL) with MODE."""
        if self.token is None or self.lost:
            raise UniqueError("%r is not held: no mode to change" % (self.key,))
        return renewal_args(self.key, self.jid, self.lease_ms) + ("MODE", mode)

    def _mode_changed(self, mode: str, reply: Any) -> bool:
        """True when the server changed the mode (the hold's own token back). nil: an upgrade
        refused (another holder), the hold unchanged; another token: the hold had ended and
        the call took a new one, not this lock's to keep."""
        token = parse_token(reply)
        if token == self.token:
            self.mode = mode
            return True
        if token is not None:
            self._lost = LockLost("lost the %s %r: its lease ran out before the change of mode, which took it "
                                  "again under another fencing token (given up)" % (type(self).__name__.lower(),
                                                                                     self.key), self.key)
        return False

    def _ensure_free(self) -> None:
        if self.token is not None and not self.lost:
            raise AlreadyAcquired("this lock object already holds %r: release it before acquiring again"
                                  % (self.key,), self.key)

    def _error(self) -> Optional[LockLost]:
        if self._refresh is not None and self._refresh.lost is not None:
            return self._refresh.lost
        return self._lost

    def check(self) -> None:
        """Raises LockLost if the hold was found gone."""
        error = self._error()
        if error is not None:
            raise error

    def _released(self, removed: bool) -> None:
        """After UNLOCK (or no UNLOCK when already lost): raises LockLost if it was lost."""
        self.token = None
        if not removed and self._error() is None:
            self._lost = LockLost("lost the %s %r: its lease ran out before the release"
                                  % (type(self).__name__.lower(), self.key), self.key)
            log.warning("redis-unique: %s", self._lost)
            if self.on_lost is not None:
                self.on_lost(self._lost)
        self.check()

    def _exit_lost(self, exc_type: Any) -> None:
        log.warning("redis-unique: %r was lost while the block raised %s", self.key, exc_type.__name__)

    def __repr__(self) -> str:
        if self.token is None:
            state = "lost" if self.lost else "not held"
        else:
            state = "lost" if self.lost else "held, %d renewals" % self.renewals
        return "<%s %r jid=%r token=%r ttl=%gs %s>" % (type(self).__qualname__, self.key, self.jid, self.token,
                                                     self.ttl, state)


class Lock(LockState):
    """Holds ``key`` for the duration of a ``with`` block.

    ``ttl`` (seconds) is the lease: while held, a daemon thread renews it every
    third of it, so a process that dies frees the lock within ``ttl`` and one
    that lives keeps it as long as it needs. ``rate`` (a :class:`Rate`, or
    ``(limit, per_seconds[, burst])``) is spent by the grant, never by a renewal:
    with it a Semaphore is "at most 3 at once and 50 a second". Acquiring waits up to ``wait``
    seconds (natively, first come first served) and raises
    :class:`LockNotAcquired` when the lock is still taken. ``token`` is the
    fencing token of the grant.

    A renewal that the server refuses (another holder has the slot, after a REAP,
    a DEL or the end of the lease) loses the lock at once; one that gets no
    answer is tried again every tenth of the lease until the lease would have
    ended, and then the lock is lost. A loss is told at once: ``lost`` turns
    true, a warning is logged, and ``on_lost(LockLost)`` is called, once (from
    the renewal thread, or at release when only the release finds it gone);
    leaving the block then raises :class:`LockLost` (unless the block is already
    raising).

    ``group`` (a tenant's name) shares the key's ``limit`` fairly among groups: a
    freed slot goes to the waiting group that holds the fewest slots for its
    ``weight``; ``group_limit`` caps the holders of one group. ``mode``
    (``"shared"`` or ``"exclusive"``) is what :class:`RWLock` sends.
    """

    def __init__(self, redis: Any, key: str, *, ttl: float, wait: Optional[float] = None, limit: int = 1,
                 owner: Optional[str] = None, meta: Optional[Mapping[str, Any]] = None, renew: bool = True,
                 jid: Optional[str] = None, type: Optional[str] = None, rate: Optional[RateT] = None,
                 on_lost: Optional[OnLost] = None, group: Optional[Union[str, bytes]] = None,
                 weight: Optional[int] = None, group_limit: Optional[int] = None,
                 mode: Optional[str] = None) -> None:
        super().__init__(Client(redis), key, ttl=ttl, wait=wait, limit=limit, owner=owner, meta=meta,
                         renew=renew, jid=jid, type=type, rate=rate, on_lost=on_lost, group=group,
                         weight=weight, group_limit=group_limit, mode=mode)

    def acquire(self) -> int:
        self._ensure_free()
        sent_at = time.monotonic()
        refresh = self._granted(self.client.lock(self.key, self.jid, **self._lock_args()), sent_at)
        if self.renew:
            refresh.start()
        return self.token  # type: ignore[return-value]

    def release(self) -> None:
        """Stops renewing and releases. Raises LockLost if the lock was lost."""
        if self._refresh is not None:
            self._refresh.stop()
        if self.token is None:
            return
        try:
            removed = self._error() is None and self.client.unlock(self.key, self.jid, token=self.token)
        except BaseException:
            self.token = None
            raise
        self._released(removed)

    def detach(self) -> None:
        """Stops renewing and forgets the hold without releasing it: the lease
        then ends it, unless someone renews it under the same jid."""
        if self._refresh is not None:
            self._refresh.stop()
        self.token = None

    def downgrade(self) -> bool:
        """An exclusive hold (``RWLock.write()``) becomes shared at once, same token, and
        the readers waiting are served. True when done."""
        return self._mode_changed("shared", self._change(self._mode_change("shared")))

    def upgrade(self) -> bool:
        """A shared hold (``RWLock.read()``) becomes exclusive, same token, when it is the
        only holder: True. Otherwise False at once, the hold unchanged: an upgrade never
        waits (two readers waiting to upgrade would wait for each other forever)."""
        return self._mode_changed("exclusive", self._change(self._mode_change("exclusive")))

    def _change(self, args: Any) -> Any:
        reply = self.client._call(*args)
        got = parse_token(reply)
        if got not in (None, self.token):
            self.client.unlock(self.key, self.jid, token=got)  # a new hold, not this lock's: given up
        return reply

    def __enter__(self) -> "Lock":
        self.acquire()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            self.release()
        except LockLost:
            if exc_type is None:
                raise
            self._exit_lost(exc_type)


class Semaphore(Lock):
    """A Lock that up to ``limit`` holders take at once (every user of the key
    should give the same limit). With ``group=`` (a tenant), ``group_limit=`` and
    ``weight=``, the limit is shared fairly among the groups that wait."""

    def __init__(self, redis: Any, key: str, limit: int, *, ttl: float, **kwargs: Any) -> None:
        _semaphore_limit(limit)
        super().__init__(redis, key, ttl=ttl, limit=limit, **kwargs)


def _semaphore_limit(limit: Any) -> None:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError("a semaphore needs a limit of 1 or more, not %r" % (limit,))


class RWLockBase:
    """What the sync and asyncio RWLock share: the settings of the key, and the
    ``read()`` / ``write()`` holds they make, each a new lock of its own (its own jid
    and renewal), so that one RWLock serves many threads or tasks."""

    _lock_class: Any = None

    def __init__(self, redis: Any, key: str, *, ttl: float, limit: int, wait: Optional[float] = None,
                 **kwargs: Any) -> None:
        _semaphore_limit(limit)
        for name in ("mode", "jid"):
            if name in kwargs:
                raise TypeError("RWLock sets %s itself: read() is shared, write() exclusive, each its own jid"
                                % name)
        self.redis = redis
        self.key = key
        self.ttl = ttl
        self.limit = limit
        self.wait = wait
        self.options = kwargs
        # Every mistake at construction, not at the first read() or write().
        self._lock_class(redis, key, ttl=ttl, limit=limit, wait=wait, mode="shared", **kwargs)

    def _hold(self, mode: str, wait: Any) -> Any:
        return self._lock_class(self.redis, self.key, ttl=self.ttl, limit=self.limit,
                                wait=self.wait if wait is _DEFAULT else wait, mode=mode, **self.options)

    def __repr__(self) -> str:
        return "<%s %r ttl=%gs limit=%d>" % (type(self).__qualname__, self.key, self.ttl, self.limit)


_DEFAULT: Any = object()


class RWLock(RWLockBase):
    """Readers share ``key`` (up to ``limit`` at once), a writer holds it alone::

        rw = RWLock(r, "doc:7", ttl=30, limit=10)
        with rw.read():       # MODE shared
            ...
        with rw.write():      # MODE exclusive
            ...

    The server serves them in order: a waiting writer blocks the readers that come
    after it, and the readers queued behind it are served together when it leaves,
    so neither side starves. ``read()`` and ``write()`` give a new :class:`Lock`
    each (``.token``, ``.lost``...), renewed like any Lock while held; ``wait``
    (seconds, per RWLock or per call) waits natively, else a taken lock raises
    :class:`LockNotAcquired`. Other keywords (``owner``, ``meta``, ``type``,
    ``on_lost``, ``group``...) go to every hold."""

    _lock_class = Lock

    def read(self, *, wait: Any = _DEFAULT) -> Lock:
        """A shared hold (``with rw.read() as hold:``), one of up to ``limit``."""
        return self._hold("shared", wait)

    def write(self, *, wait: Any = _DEFAULT) -> Lock:
        """An exclusive hold (``with rw.write() as hold:``): no reader, no other writer."""
        return self._hold("exclusive", wait)
