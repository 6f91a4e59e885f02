"""redis_unique over ``redis.asyncio``: the same Client, Lock and Semaphore, awaited."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any, Dict, List, Literal, Mapping, Optional, Sequence, Union, overload

from redis.exceptions import ResponseError

from . import _functions
from . import _protocol as p
from . import _multi as m
from . import _version
from ._protocol import GroupWaiters, Holder, JidT, KeyT
from .client import PipelineCalls
from ._refresh import OnLost
from .errors import LockLost, translate
from .lock import _DEFAULT, LockState, RWLockBase, _semaphore_limit
from .multilock import MultiLockState

__all__ = ["Client", "Pipeline", "Lock", "Semaphore", "RWLock", "MultiLock", "GroupWaiters"]


class Client:
    """redis-unique over a ``redis.asyncio.Redis``; see :class:`redis_unique.Client`."""

    def __init__(self, redis: Any) -> None:
        if isinstance(redis, Client):
            redis = redis.redis
        self.redis = redis

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> "Client":
        import redis.asyncio as aioredis

        return cls(aioredis.Redis.from_url(url, **kwargs))

    async def _call(self, *args: Any) -> Any:
        try:
            # the module, or the Functions library where it is absent (_functions.py)
            return await _functions.execute_async(self.redis, args)
        except ResponseError as exc:
            raise translate(exc) from exc

    async def lock(self, key: KeyT, jid: JidT, *, limit: Optional[int] = None, ttl: Optional[float] = None,
                   pxat: Union[datetime, int, None] = None, type: Optional[str] = None,
                   owner: Optional[str] = None, meta: Optional[Mapping[str, Any]] = None,
                   rate: Optional[p.RateT] = None, group: Optional[Union[str, bytes]] = None,
                   weight: Optional[int] = None, group_limit: Optional[int] = None, mode: Optional[str] = None,
                   wait: Optional[float] = None) -> Optional[int]:
        return p.parse_token(await self._call(*p.lock_args(
            key, jid, limit=limit, ttl=ttl, pxat=pxat, type=type, owner=owner, meta=meta, rate=rate,
            group=group, weight=weight, group_limit=group_limit, mode=mode, wait=wait)))

    async def lock_all(self, keys: Sequence[KeyT], jid: JidT, *, limits: Optional[Sequence[int]] = None,
                       rates: Optional[m.RatesT] = None, ttl: Optional[float] = None,
                       pxat: Union[datetime, int, None] = None, type: Optional[str] = None,
                       owner: Optional[str] = None, meta: Optional[Mapping[str, Any]] = None,
                       wait: Optional[float] = None) -> Optional[List[int]]:
        return m.parse_tokens(await self._call(*m.lock_all_args(
            keys, jid, limits=limits, rates=rates, ttl=ttl, pxat=pxat, type=type, owner=owner, meta=meta,
            wait=wait)))

    async def unlock_all(self, keys: Sequence[KeyT], jid: JidT, tokens: Optional[Sequence[int]] = None) -> int:
        return int(await self._call(*m.unlock_all_args(keys, jid, tokens)))

    async def rate(self, key: KeyT) -> Optional[p.RateState]:
        return p.parse_rate(await self._call("UNIQUE.RATE", key))

    async def unlock(self, key: KeyT, jid: JidT, token: Optional[int] = None) -> bool:
        return bool(await self._call(*p.unlock_args(key, jid, token)))

    async def holders(self, key: KeyT) -> List[Holder]:
        return p.parse_holders(await self._call("UNIQUE.LOCKEDBY", key, "WITHMETA"))

    async def locked_by(self, key: KeyT) -> List[Any]:
        return list(await self._call("UNIQUE.LOCKEDBY", key))

    @overload
    async def waiters(self, key: KeyT, groups: Literal[False] = False) -> int: ...

    @overload
    async def waiters(self, key: KeyT, groups: Literal[True]) -> List[GroupWaiters]: ...

    async def waiters(self, key: KeyT, groups: bool = False) -> Union[int, List[GroupWaiters]]:
        if groups:
            return p.parse_group_waiters(await self._call("UNIQUE.WAITERS", key, "GROUPS"))
        return int(await self._call("UNIQUE.WAITERS", key))

    async def reap(self, owner: Optional[str] = None, count: int = 1000) -> int:
        cursor: Any = 0
        removed = 0
        while True:
            cursor, n = await self._call(*p.reap_args(cursor, owner, count))
            removed += int(n)
            if p.cursor_done(cursor):
                return removed

    async def metrics(self, minutes: Optional[int] = None) -> Dict[str, Any]:
        return p.parse_metrics(await self._call(*p.metrics_args(minutes)))

    async def reset_metrics(self) -> None:
        await self._call("UNIQUE.METRICS", "RESET")

    def pipeline(self, transaction: bool = False) -> "Pipeline":
        pipe = Pipeline(self.redis.pipeline(transaction=transaction))
        pipe._redis = self.redis
        return pipe


class Pipeline(PipelineCalls):
    _redis: Any = None
    _queued: Optional[List[Any]] = None

    def _send(self, *args: Any) -> None:
        # sent at execute(), once the backend is known
        if self._queued is None:
            self._queued = []
        self._queued.append(args)

    async def execute(self) -> List[Any]:
        queued, self._queued = self._queued or [], None
        functions = self._redis is not None and await _functions.backend_async(self._redis) == "functions"
        if self._redis is not None and not functions:
            await _version.check_async(self._redis)
        for args in queued:
            self._pipe.execute_command(*(_functions.fcall_args(self._redis, args) if functions else args))
        parsers, self._parsers = self._parsers, []
        try:
            replies = await self._pipe.execute()
        except ResponseError as exc:
            raise translate(exc) from exc
        return [parse(r) for parse, r in zip(parsers, replies)]


class Lock(LockState):
    """``async with Lock(redis, key, ttl=...)``: see :class:`redis_unique.Lock`;
    the renewal runs as an asyncio task on the running loop (``on_lost`` is
    called from it)."""

    def __init__(self, redis: Any, key: str, *, ttl: float, wait: Optional[float] = None, limit: int = 1,
                 owner: Optional[str] = None, meta: Optional[Mapping[str, Any]] = None, renew: bool = True,
                 jid: Optional[str] = None, type: Optional[str] = None, rate: Optional[p.RateT] = None,
                 on_lost: Optional[OnLost] = None, group: Optional[Union[str, bytes]] = None,
                 weight: Optional[int] = None, group_limit: Optional[int] = None,
                 mode: Optional[str] = None) -> None:
        super().__init__(Client(redis), key, ttl=ttl, wait=wait, limit=limit, owner=owner, meta=meta,
                         renew=renew, jid=jid, type=type, rate=rate, on_lost=on_lost, group=group,
                         weight=weight, group_limit=group_limit, mode=mode)

    async def acquire(self) -> int:
        self._ensure_free()
        sent_at = time.monotonic()
        refresh = self._granted(await self.client.lock(self.key, self.jid, **self._lock_args()), sent_at)
        if self.renew:
            refresh.start_task()
        return self.token  # type: ignore[return-value]

    async def release(self) -> None:
        """Stops renewing and releases. Raises LockLost if the lock was lost."""
        if self._refresh is not None:
            await self._refresh.stop_task()
        if self.token is None:
            return
        try:
            removed = self._error() is None and await self.client.unlock(self.key, self.jid, token=self.token)
        except BaseException:
            self.token = None
            raise
        self._released(removed)

    async def detach(self) -> None:
        """Stops renewing and forgets the hold without releasing it: the lease
        then ends it, unless someone renews it under the same jid."""
        if self._refresh is not None:
            await self._refresh.stop_task()
        self.token = None

    async def downgrade(self) -> bool:
        """See :meth:`redis_unique.Lock.downgrade`."""
        return self._mode_changed("shared", await self._change(self._mode_change("shared")))

    async def upgrade(self) -> bool:
        """See :meth:`redis_unique.Lock.upgrade`: never waits."""
        return self._mode_changed("exclusive", await self._change(self._mode_change("exclusive")))

    async def _change(self, args: Any) -> Any:
        reply = await self.client._call(*args)
        got = p.parse_token(reply)
        if got not in (None, self.token):
            await self.client.unlock(self.key, self.jid, token=got)  # a new hold, not this lock's: given up
        return reply

    async def __aenter__(self) -> "Lock":
        await self.acquire()
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            await self.release()
        except LockLost:
            if exc_type is None:
                raise
            self._exit_lost(exc_type)


class Semaphore(Lock):
    """``async with Semaphore(redis, key, limit, ttl=...)``: see :class:`redis_unique.Semaphore`
    (``group=``, ``group_limit=``, ``weight=`` share the limit fairly)."""

    def __init__(self, redis: Any, key: str, limit: int, *, ttl: float, **kwargs: Any) -> None:
        _semaphore_limit(limit)
        super().__init__(redis, key, ttl=ttl, limit=limit, **kwargs)


class RWLock(RWLockBase):
    """``async with rw.read():`` / ``async with rw.write():``: see :class:`redis_unique.RWLock`;
    each hold is an asyncio :class:`Lock` renewed by a task."""

    _lock_class = Lock

    def read(self, *, wait: Any = _DEFAULT) -> Lock:
        """A shared hold, one of up to ``limit``."""
        return self._hold("shared", wait)

    def write(self, *, wait: Any = _DEFAULT) -> Lock:
        """An exclusive hold: no reader, no other writer."""
        return self._hold("exclusive", wait)


class MultiLock(MultiLockState):
    """``async with MultiLock(redis, {key: limit, ...}, ttl=..., wait=...)``: every key or
    none in one grant; see :class:`redis_unique.MultiLock`. The renewal of every key runs as
    one asyncio task on the running loop (``on_lost`` is called from it)."""

    def __init__(self, redis: Any, locks: Any, *, ttl: float, wait: Optional[float] = None,
                 rates: Optional[m.RatesT] = None, owner: Optional[str] = None,
                 meta: Optional[Mapping[str, Any]] = None, renew: bool = True, jid: Optional[str] = None,
                 type: Optional[str] = None, on_lost: Optional[OnLost] = None) -> None:
        super().__init__(Client(redis), locks, ttl=ttl, wait=wait, rates=rates, owner=owner, meta=meta,
                         renew=renew, jid=jid, type=type, on_lost=on_lost)

    async def acquire(self) -> Dict[Any, int]:
        self._ensure_free()
        sent_at = time.monotonic()
        refresh = self._granted(await self.client.lock_all(self.keys, self.jid, **self._lock_args()), sent_at)
        if self.renew:
            refresh.start_task()
        return self.tokens  # type: ignore[return-value]

    async def release(self) -> None:
        """Stops renewing and releases every key. Raises LockLost if the hold was lost."""
        if self._refresh is not None:
            await self._refresh.stop_task()
        if self.token is None:
            return
        if self._error() is not None:
            # Lost on one key, the others are still this job's until their leases end: freed now.
            try:
                await self.client.unlock_all(self.keys, self.jid, tokens=self.token)
            except Exception:  # noqa: BLE001 - best effort: the leases end them anyway
                pass
            self._released(False)
            return
        try:
            removed = await self.client.unlock_all(self.keys, self.jid, tokens=self.token)
        except BaseException:
            self.token = None
            raise
        self._released(removed)

    async def detach(self) -> None:
        if self._refresh is not None:
            await self._refresh.stop_task()
        self.token = None

    async def __aenter__(self) -> "MultiLock":
        await self.acquire()
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            await self.release()
        except LockLost:
            if exc_type is None:
                raise
            self._exit_lost(exc_type)
