"""redis_unique over ``redis.asyncio``: the same Client, Lock and Semaphore, awaited."""

from __future__ import annotations

import asyncio as _asyncio
import logging
import time
from datetime import datetime
from typing import Any, Dict, List, Mapping, Optional, Union

from redis.exceptions import ConnectionError, ResponseError, TimeoutError

from . import _protocol as p
from . import _version
from ._protocol import Holder, JidT, KeyT
from .client import PipelineCalls
from .errors import LockLost, UniqueError, translate
from .lock import LockState

__all__ = ["Client", "Pipeline", "Lock", "Semaphore"]

log = logging.getLogger("redis_unique")


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
        await _version.check_async(self.redis)
        try:
            return await self.redis.execute_command(*args)
        except ResponseError as exc:
            raise translate(exc) from exc

    async def lock(self, key: KeyT, jid: JidT, *, limit: Optional[int] = None, ttl: Optional[float] = None,
                   pxat: Union[datetime, int, None] = None, type: Optional[str] = None,
                   owner: Optional[str] = None, meta: Optional[Mapping[str, Any]] = None,
                   rate: Optional[p.RateT] = None, wait: Optional[float] = None) -> Optional[int]:
        return p.parse_token(await self._call(*p.lock_args(
            key, jid, limit=limit, ttl=ttl, pxat=pxat, type=type, owner=owner, meta=meta, rate=rate,
            wait=wait)))

    async def rate(self, key: KeyT) -> Optional[p.RateState]:
        return p.parse_rate(await self._call("UNIQUE.RATE", key))

    async def unlock(self, key: KeyT, jid: JidT) -> bool:
        return bool(await self._call("UNIQUE.UNLOCK", key, jid))

    async def holders(self, key: KeyT) -> List[Holder]:
        return p.parse_holders(await self._call("UNIQUE.LOCKEDBY", key, "WITHMETA"))

    async def locked_by(self, key: KeyT) -> List[Any]:
        return list(await self._call("UNIQUE.LOCKEDBY", key))

    async def waiters(self, key: KeyT) -> int:
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

    async def execute(self) -> List[Any]:
        if self._redis is not None:
            await _version.check_async(self._redis)
        parsers, self._parsers = self._parsers, []
        try:
            replies = await self._pipe.execute()
        except ResponseError as exc:
            raise translate(exc) from exc
        return [parse(r) for parse, r in zip(parsers, replies)]


class Lock(LockState):
    """``async with Lock(redis, key, ttl=...)``: see :class:`redis_unique.Lock`;
    the renewal runs as an asyncio task on the running loop."""

    def __init__(self, redis: Any, key: str, *, ttl: float, wait: Optional[float] = None, limit: int = 1,
                 owner: Optional[str] = None, meta: Optional[Mapping[str, Any]] = None, renew: bool = True,
                 jid: Optional[str] = None, type: Optional[str] = None, rate: Optional[p.RateT] = None) -> None:
        super().__init__(Client(redis), key, ttl=ttl, wait=wait, limit=limit, owner=owner, meta=meta,
                         renew=renew, jid=jid, type=type, rate=rate)
        self._task: Optional["_asyncio.Task[None]"] = None

    async def acquire(self) -> int:
        self._ensure_free()
        token = await self.client.lock(self.key, self.jid, limit=self.limit, ttl=self.ttl, type=self.type,
                                       owner=self.owner, meta=self.meta, rate=self.rate, wait=self.wait)
        if token is None:
            raise self._not_acquired()
        self.token = token
        self._lost = None
        if self.renew:
            self._task = _asyncio.ensure_future(self._renew_loop())
        return token

    async def _renew_loop(self) -> None:
        interval = self.ttl / 3
        last_ok = time.monotonic()
        while True:
            await _asyncio.sleep(interval)
            try:
                token = await self.client.lock(self.key, self.jid, limit=self.limit, ttl=self.ttl)
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
                try:
                    await self.client.unlock(self.key, self.jid)
                except Exception:  # noqa: BLE001
                    pass
            self._lose("the lease ran out or the lock was removed before a renewal")
            return

    async def release(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except _asyncio.CancelledError:
                pass
        if self.token is None:
            return
        try:
            if self._lost is None and not await self.client.unlock(self.key, self.jid):
                self._lost = "the lease ran out before the release"
        finally:
            self.token = None
        self.check()

    async def __aenter__(self) -> "Lock":
        await self.acquire()
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            await self.release()
        except LockLost:
            if exc_type is None:
                raise
            log.warning("redis-unique: %r was lost while the block raised %s", self.key, exc_type.__name__)


class Semaphore(Lock):
    def __init__(self, redis: Any, key: str, limit: int, *, ttl: float, **kwargs: Any) -> None:
        if limit < 1:
            raise ValueError("a semaphore needs a limit of 1 or more")
        super().__init__(redis, key, ttl=ttl, limit=limit, **kwargs)
