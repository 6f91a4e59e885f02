"""The synchronous client: one method per UNIQUE.* command."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Callable, Dict, List, Literal, Mapping, Optional, Sequence, TypeVar, Union, overload

from redis.exceptions import ResponseError

from . import _functions
from . import _protocol as p
from . import _multi as m
from . import _version
from ._protocol import GroupWaiters, Holder, JidT, KeyT
from .errors import translate

_P = TypeVar("_P", bound="PipelineCalls")

__all__ = ["Client", "Pipeline"]


class Client:
    """redis-unique over a redis-py client (``redis.Redis``, any settings,
    ``decode_responses`` on or off, RESP2 or RESP3).

    Seconds are floats everywhere (``ttl``, ``wait``); the module gets whole
    milliseconds, rounded up. A ``wait`` blocks the connection on the server
    (UNIQUE.LOCK ... WAIT): give the redis-py client a ``socket_timeout`` longer
    than the longest wait, or none.
    """

    def __init__(self, redis: Any) -> None:
        if isinstance(redis, Client):
            redis = redis.redis
        self.redis = redis

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> "Client":
        import redis as redis_py

        return cls(redis_py.Redis.from_url(url, **kwargs))

    def _call(self, *args: Any) -> Any:
        try:
            # the module, or the Functions library where it is absent (_functions.py)
            return _functions.execute(self.redis, args)
        except ResponseError as exc:
            raise translate(exc) from exc

    def lock(self, key: KeyT, jid: JidT, *, limit: Optional[int] = None, ttl: Optional[float] = None,
             pxat: Union[datetime, int, None] = None, type: Optional[str] = None,
             owner: Optional[str] = None, meta: Optional[Mapping[str, Any]] = None,
             rate: Optional[p.RateT] = None, group: Optional[Union[str, bytes]] = None,
             weight: Optional[int] = None, group_limit: Optional[int] = None, mode: Optional[str] = None,
             wait: Optional[float] = None) -> Optional[int]:
        """UNIQUE.LOCK: the fencing token on a grant or a renewal, None when denied
        (after waiting up to ``wait`` seconds, when given). ``rate``: a
        :class:`Rate` (or ``(limit, per_seconds[, burst])``) a new grant also needs.

        ``group`` (a tenant's name) shares the key's ``limit`` fairly: a freed slot goes
        to the waiting group holding the fewest slots for its ``weight`` (1 to 1000,
        default 1). ``group_limit``: a grant also needs fewer than that many holders of
        the group. ``mode``: ``"shared"`` (readers, up to ``limit``) or ``"exclusive"``
        (a writer, alone); a renewal keeps both unless told."""
        return p.parse_token(self._call(*p.lock_args(
            key, jid, limit=limit, ttl=ttl, pxat=pxat, type=type, owner=owner, meta=meta, rate=rate,
            group=group, weight=weight, group_limit=group_limit, mode=mode, wait=wait)))

    def lock_all(self, keys: Sequence[KeyT], jid: JidT, *, limits: Optional[Sequence[int]] = None,
                 rates: Optional[m.RatesT] = None, ttl: Optional[float] = None,
                 pxat: Union[datetime, int, None] = None, type: Optional[str] = None,
                 owner: Optional[str] = None, meta: Optional[Mapping[str, Any]] = None,
                 wait: Optional[float] = None) -> Optional[List[int]]:
        """UNIQUE.LOCKALL: a hold on every key or on none, for one ``jid``. The fencing
        tokens in key order on a grant or a renewal, None when refused (after waiting up
        to ``wait`` seconds for every key to have room at once, when given).

        ``limits``: one per key, in key order (default 1 each; 0: no limit). ``rates``: a
        dict ``{key: Rate}`` (or a list in key order, None for a key without one), spent
        only when the whole grant succeeds. 1 to 64 keys, each once; in a cluster they
        need one hash tag (``{api}:tenant:acme``, ``{api}:global``)."""
        return m.parse_tokens(self._call(*m.lock_all_args(
            keys, jid, limits=limits, rates=rates, ttl=ttl, pxat=pxat, type=type, owner=owner, meta=meta,
            wait=wait)))

    def unlock_all(self, keys: Sequence[KeyT], jid: JidT, tokens: Optional[Sequence[int]] = None) -> int:
        """UNIQUE.UNLOCKALL: releases ``jid``'s holds on the keys; the number released. With
        ``tokens`` (one per key, as ``lock_all`` returned them), a key is released only when
        its hold has that token."""
        return int(self._call(*m.unlock_all_args(keys, jid, tokens)))

    def rate(self, key: KeyT) -> Optional[p.RateState]:
        """UNIQUE.RATE: the key's rate state (what ``lock(..., rate=...)`` spent),
        None when it has none."""
        return p.parse_rate(self._call("UNIQUE.RATE", key))

    def unlock(self, key: KeyT, jid: JidT, token: Optional[int] = None) -> bool:
        """UNIQUE.UNLOCK: True when ``jid`` held the lock and was removed. With ``token`` (the
        one ``lock`` returned), a fenced unlock: only the hold of that token is removed, so a
        late unlock never frees a newer hold of the same jid."""
        return bool(self._call(*p.unlock_args(key, jid, token)))

    def holders(self, key: KeyT) -> List[Holder]:
        """UNIQUE.LOCKEDBY WITHMETA: the live holders, oldest grant first."""
        return p.parse_holders(self._call("UNIQUE.LOCKEDBY", key, "WITHMETA"))

    def locked_by(self, key: KeyT) -> List[Any]:
        """UNIQUE.LOCKEDBY: the jids of the live holders, oldest grant first."""
        return list(self._call("UNIQUE.LOCKEDBY", key))

    @overload
    def waiters(self, key: KeyT, groups: Literal[False] = False) -> int: ...

    @overload
    def waiters(self, key: KeyT, groups: Literal[True]) -> List[GroupWaiters]: ...

    def waiters(self, key: KeyT, groups: bool = False) -> Union[int, List[GroupWaiters]]:
        """UNIQUE.WAITERS: how many clients wait (``lock(..., wait=...)``) for a
        slot of ``key``; with ``groups=True``, a :class:`GroupWaiters` per group that
        waits or holds (``group`` None first, for those without a group, then by name)."""
        if groups:
            return p.parse_group_waiters(self._call("UNIQUE.WAITERS", key, "GROUPS"))
        return int(self._call("UNIQUE.WAITERS", key))

    def reap(self, owner: Optional[str] = None, count: int = 1000) -> int:
        """UNIQUE.REAP from cursor 0 to the end of the iteration, ``count`` keys
        a call: the number of holders removed (expired ones, and with ``owner``
        every holder of that owner)."""
        cursor: Any = 0
        removed = 0
        while True:
            cursor, n = self._call(*p.reap_args(cursor, owner, count))
            removed += int(n)
            if p.cursor_done(cursor):
                return removed

    def metrics(self, minutes: Optional[int] = None) -> Dict[str, Any]:
        """UNIQUE.METRICS (FORMAT json) as a dict: locks, holders, total, types."""
        return p.parse_metrics(self._call(*p.metrics_args(minutes)))

    def reset_metrics(self) -> None:
        self._call("UNIQUE.METRICS", "RESET")

    def pipeline(self, transaction: bool = False) -> "Pipeline":
        """Queues lock/unlock calls and sends them in one round trip."""
        if _functions.backend(self.redis) == "module":
            _version.check(self.redis)
        return Pipeline(self.redis.pipeline(transaction=transaction), self.redis)


class PipelineCalls:
    """The calls a pipeline queues, each with the parser of its reply; the
    sync :class:`Pipeline` and the asyncio one differ only in ``execute``."""

    def __init__(self, pipe: Any, redis: Any = None) -> None:
        self._pipe = pipe
        self._redis = redis
        self._parsers: List[Callable[[Any], Any]] = []

    def _send(self, *args: Any) -> None:
        if self._redis is not None:
            args = _functions.pipeline_args(self._redis, args)
        self._pipe.execute_command(*args)

    def lock(self: _P, key: KeyT, jid: JidT, **kwargs: Any) -> _P:
        self._send(*p.lock_args(key, jid, **kwargs))
        self._parsers.append(p.parse_token)
        return self

    def unlock(self: _P, key: KeyT, jid: JidT, token: Optional[int] = None) -> _P:
        self._send(*p.unlock_args(key, jid, token))
        self._parsers.append(bool)
        return self

    def lock_all(self: _P, keys: Sequence[KeyT], jid: JidT, **kwargs: Any) -> _P:
        self._send(*m.lock_all_args(keys, jid, **kwargs))
        self._parsers.append(m.parse_tokens)
        return self

    def unlock_all(self: _P, keys: Sequence[KeyT], jid: JidT, tokens: Optional[Sequence[int]] = None) -> _P:
        self._send(*m.unlock_all_args(keys, jid, tokens))
        self._parsers.append(int)
        return self

    def holders(self: _P, key: KeyT) -> _P:
        self._send("UNIQUE.LOCKEDBY", key, "WITHMETA")
        self._parsers.append(p.parse_holders)
        return self


class Pipeline(PipelineCalls):
    """A batch of UNIQUE.* calls (WAIT is ignored inside a transaction).
    ``execute()`` returns the parsed reply of each call, in order."""

    def execute(self) -> List[Any]:
        parsers, self._parsers = self._parsers, []
        try:
            replies = self._pipe.execute()
        except ResponseError as exc:
            raise translate(exc) from exc
        return [parse(r) for parse, r in zip(parsers, replies)]

    def __len__(self) -> int:
        return len(self._parsers)

    def __enter__(self) -> "Pipeline":
        return self

    def __exit__(self, *exc: Any) -> None:
        self._pipe.reset()
