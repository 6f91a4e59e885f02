"""Lock and Semaphore: context managers whose lease renews itself while held."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import Any, Mapping, Optional

from redis.exceptions import ConnectionError, TimeoutError

from ._protocol import RateT
from .client import Client
from .errors import AlreadyAcquired, LockLost, LockNotAcquired, UniqueError

__all__ = ["Lock", "Semaphore"]

log = logging.getLogger("redis_unique")


class LockState:
    """What the thread-renewed :class:`Lock` and the task-renewed asyncio
    Lock share: their settings, the token of the hold, what a renewal found,
    and the errors they raise."""

    def __init__(self, client: Any, key: str, *, ttl: float, wait: Optional[float], limit: int,
                 owner: Optional[str], meta: Optional[Mapping[str, Any]], renew: bool,
                 jid: Optional[str], type: Optional[str], rate: Optional[RateT] = None) -> None:
        if not ttl or ttl <= 0:
            raise ValueError("ttl must be a positive number of seconds")
        self.client = client
        self.key = key
        self.ttl = float(ttl)
        self.wait = wait
        self.limit = limit
        self.owner = owner
        self.meta = meta
        self.renew = renew
        self.type = type
        # Spent by the grant only (renewals never spend the rate).
        self.rate = rate
        self.jid = jid if jid is not None else uuid.uuid4().hex
        self.token: Optional[int] = None
        self.renewals = 0
        self._lost: Optional[str] = None

    @property
    def lost(self) -> bool:
        """True once a renewal found the lock gone."""
        return self._lost is not None

    @property
    def held(self) -> bool:
        return self.token is not None and not self.lost

    def _not_acquired(self) -> LockNotAcquired:
        return LockNotAcquired("%r is held by others%s" % (
            self.key, "" if self.wait is None else " after waiting %gs" % self.wait), self.key)

    def _lose(self, why: str) -> None:
        self._lost = why
        log.warning("redis-unique: lost %r: %s", self.key, why)

    def _ensure_free(self) -> None:
        if self.token is not None and not self.lost:
            raise AlreadyAcquired("this lock object already holds %r: release it before acquiring again"
                                  % (self.key,), self.key)

    def check(self) -> None:
        """Raises LockLost if a renewal found the lock gone."""
        if self._lost is not None:
            raise LockLost("lost the lock %r: %s" % (self.key, self._lost), self.key)


class Lock(LockState):
    """Holds ``key`` for the duration of a ``with`` block.

    ``ttl`` (seconds) is the lease: while held, a daemon thread renews it every
    ``ttl / 3``, so a process that dies frees the lock within ``ttl`` and one
    that lives keeps it as long as it needs. ``rate`` (a :class:`Rate`, or
    ``(limit, per_seconds[, burst])``) is spent by the grant, never by a renewal:
    with it a Semaphore is "at most 3 at once and 50 a second". Acquiring waits up to ``wait``
    seconds (natively, first come first served) and raises
    :class:`LockNotAcquired` when the lock is still taken. ``token`` is the
    fencing token of the grant. Leaving the block stops renewing and releases;
    if a renewal found the lock gone (lease ran out, REAP, DEL), leaving raises
    :class:`LockLost` (unless the block is already raising). ``lost`` tells it
    earlier, from inside the block.
    """

    def __init__(self, redis: Any, key: str, *, ttl: float, wait: Optional[float] = None, limit: int = 1,
                 owner: Optional[str] = None, meta: Optional[Mapping[str, Any]] = None, renew: bool = True,
                 jid: Optional[str] = None, type: Optional[str] = None, rate: Optional[RateT] = None) -> None:
        super().__init__(Client(redis), key, ttl=ttl, wait=wait, limit=limit, owner=owner, meta=meta,
                         renew=renew, jid=jid, type=type, rate=rate)
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def acquire(self) -> int:
        self._ensure_free()
        token = self.client.lock(self.key, self.jid, limit=self.limit, ttl=self.ttl, type=self.type,
                                 owner=self.owner, meta=self.meta, rate=self.rate, wait=self.wait)
        if token is None:
            raise self._not_acquired()
        self.token = token
        self._lost = None
        self._stop.clear()
        if self.renew:
            self._thread = threading.Thread(target=self._renew_loop, name="redis-unique renew %s" % self.key,
                                            daemon=True)
            self._thread.start()
        return token

    def _renew_loop(self) -> None:
        interval = self.ttl / 3
        last_ok = time.monotonic()
        while not self._stop.wait(interval):
            try:
                token = self.client.lock(self.key, self.jid, limit=self.limit, ttl=self.ttl)
            except (ConnectionError, TimeoutError, OSError) as exc:
                if time.monotonic() - last_ok >= self.ttl:
                    self._lose("renewal failed for longer than the lease: %s" % exc)
                    return
                log.warning("redis-unique: renewing %r failed, will retry: %s", self.key, exc)
                continue
            except UniqueError as exc:
                self._lose("renewal refused: %s" % exc)
                return
            if token == self.token:
                self.renewals += 1
                last_ok = time.monotonic()
                continue
            if token is not None:
                # The hold had ended and this call took a new one: not ours to keep.
                try:
                    self.client.unlock(self.key, self.jid)
                except Exception:  # noqa: BLE001 - best effort, the lease ends it anyway
                    pass
            self._lose("the lease ran out or the lock was removed before a renewal")
            return

    def release(self) -> None:
        """Stops renewing and releases. Raises LockLost if the lock was lost."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        if self.token is None:
            return
        try:
            if self._lost is None and not self.client.unlock(self.key, self.jid):
                self._lost = "the lease ran out before the release"
        finally:
            self.token = None
        self.check()

    def detach(self) -> None:
        """Stops renewing and forgets the hold without releasing it: the lease
        then ends it, unless someone renews it under the same jid."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        self.token = None

    def __enter__(self) -> "Lock":
        self.acquire()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            self.release()
        except LockLost:
            if exc_type is None:
                raise
            log.warning("redis-unique: %r was lost while the block raised %s", self.key, exc_type.__name__)

    def __repr__(self) -> str:
        return "<%s %r jid=%r token=%r>" % (type(self).__name__, self.key, self.jid, self.token)


class Semaphore(Lock):
    """A Lock that up to ``limit`` holders take at once (every user of the key
    should give the same limit)."""

    def __init__(self, redis: Any, key: str, limit: int, *, ttl: float, **kwargs: Any) -> None:
        if limit < 1:
            raise ValueError("a semaphore needs a limit of 1 or more")
        super().__init__(redis, key, ttl=ttl, limit=limit, **kwargs)
