"""MultiLock: a hold on several keys taken in one atomic grant (UNIQUE.LOCKALL), each key
with its own limit and rate, renewed as one while held."""

from __future__ import annotations

import time
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from . import _multi as m
from ._refresh import OnLost, RefreshLoop
from .client import Client
from .errors import LockLost, LockNotAcquired, UniqueError
from .lock import LockState

__all__ = ["MultiLock"]


class MultiRefreshLoop(RefreshLoop):
    """The one renewal loop over the hold of several keys: ``UNIQUE.LOCKALL n keys... jid TTL
    <lease ms>`` every third of the lease; kept only when every key answers with its held
    token. nil means one key's hold had ended (the server refuses a partial renewal on
    purpose): lost. New tokens mean every hold had ended and the call took new ones: given up
    (UNLOCKALL), then lost. No answer: tried again, as for one key."""

    refused = ("one key's hold had ended (its lease ran out, or it was reaped, unlocked or deleted), and a "
               "renewal of several keys keeps every one or none")

    def __init__(self, client: Any, keys: Sequence[Any], jid: Any, tokens: Sequence[int], lease_ms: int, *,
                 sent_at: float, on_lost: Optional[OnLost] = None, name: str = "multilock") -> None:
        super().__init__(client, tuple(keys), jid, list(tokens), lease_ms,  # type: ignore[arg-type]
                         sent_at=sent_at, on_lost=on_lost, name=name)

    def update(self, **changes: Any) -> None:
        raise UniqueError("a renewal of several keys sends only the lease: TYPE, OWNER and META stay as granted")

    def _renewal_args(self, changes: Dict[str, Any]) -> Tuple[Any, ...]:
        return m.renewal_all_args(self.key, self.jid, self.lease_ms)

    def _outcome(self, reply: Any) -> str:
        return m.renewal_all_outcome(self.token, reply)  # type: ignore[arg-type]

    def _took_hold(self, reply: Any) -> bool:
        return m.parse_tokens(reply) is not None

    def _unlock_call(self, reply: Any) -> Any:
        return self.client.unlock_all(self.key, self.jid, tokens=m.parse_tokens(reply))

    def _refused_call(self) -> Any:
        # The server refuses a partial renewal: the keys still held would stay this job's
        # until their leases end. Released now, by their tokens, so that a key taken again
        # meanwhile (by this jid elsewhere, a retried job) is not freed.
        return self.client.unlock_all(self.key, self.jid, tokens=self.token)


def _split(locks: Any) -> Tuple[List[Any], Optional[List[int]]]:
    """``{key: limit}`` or a list of keys (limit 1 each): the keys and the limits to send."""
    if isinstance(locks, Mapping):
        return list(locks), [m.check_limit(n, "the limit of %r" % (k,)) for k, n in locks.items()]
    return m.check_keys(locks), None


class MultiLockState(LockState):
    """What the thread-renewed :class:`MultiLock` and the task-renewed asyncio one share."""

    def __init__(self, client: Any, locks: Any, *, ttl: float, wait: Optional[float], rates: Optional[m.RatesT],
                 owner: Optional[str], meta: Optional[Mapping[str, Any]], renew: bool, jid: Optional[str],
                 type: Optional[str], on_lost: Optional[OnLost]) -> None:
        keys, limits = _split(locks)
        super().__init__(client, tuple(keys), ttl=ttl, wait=wait, limit=1, owner=owner, meta=meta,  # type: ignore[arg-type]
                         renew=renew, jid=jid, type=type, on_lost=on_lost)
        self.keys = keys
        self.limits = limits
        self.rates = rates
        # Every mistake at construction, not at the first acquire.
        m.lock_all_args(keys, self.jid, **self._lock_args())

    def _lock_args(self) -> Dict[str, Any]:
        return dict(limits=self.limits, rates=self.rates, ttl=self.ttl, type=self.type, owner=self.owner,
                    meta=self.meta, wait=self.wait)

    @property
    def tokens(self) -> Optional[Dict[Any, int]]:
        """The fencing token of each key, ``{key: token}`` in key order; None when not held."""
        return None if self.token is None else dict(zip(self.keys, self.token))  # type: ignore[arg-type]

    def _granted(self, tokens: Optional[List[int]], sent_at: float) -> RefreshLoop:  # type: ignore[override]
        if tokens is None:
            raise LockNotAcquired("%r: not every key has room%s" % (
                self.key, "" if self.wait is None else " after waiting %gs" % self.wait), self.key)  # type: ignore[arg-type]
        self.token = tokens  # type: ignore[assignment]
        self._lost = None
        # A WAIT is spent before the grant: the lease starts when the reply comes, at the latest.
        self._refresh = MultiRefreshLoop(self.client, self.keys, self.jid, tokens, self.lease_ms,
                                         sent_at=sent_at if self.wait is None else time.monotonic(),
                                         on_lost=self.on_lost)
        return self._refresh

    def update(self, **changes: Any) -> None:
        raise UniqueError("a MultiLock's renewal sends only the lease: TYPE, OWNER and META stay as granted")

    def _released(self, removed: Any) -> None:
        # UNLOCKALL's count: every key released, or the hold was lost on some.
        super()._released(removed is not False and int(removed) == len(self.keys))


class MultiLock(MultiLockState):
    """Holds several keys for the duration of a ``with`` block, taken in one atomic grant::

        with MultiLock(r, {"{api}:tenant:acme": 2, "{api}:global": 10}, ttl=30, wait=60) as hold:
            call_api(fence=hold.tokens["{api}:global"])

    ``locks``: ``{key: limit}`` (0: no limit), or a list of keys (limit 1 each). Every key
    is taken, or none: a waiter holds nothing while it waits (``wait`` seconds, natively),
    so two MultiLocks naming keys in different orders cannot deadlock, and a refused grant
    leaves nothing half-taken. ``rates``: ``{key: Rate}``, spent only when the whole grant
    succeeds. In a cluster the keys need one hash tag (``{api}:...``).

    While held, a daemon thread renews every key's lease in one call every third of
    ``ttl``; the lock is lost when one key's hold ends (a REAP, an UNLOCK of that key, the
    end of its lease): told as a :class:`Lock`'s loss (``.lost``, a warning, ``on_lost``,
    and :class:`LockLost` when the block ends). ``tokens``: ``{key: token}``.
    """

    def __init__(self, redis: Any, locks: Any, *, ttl: float, wait: Optional[float] = None,
                 rates: Optional[m.RatesT] = None, owner: Optional[str] = None,
                 meta: Optional[Mapping[str, Any]] = None, renew: bool = True, jid: Optional[str] = None,
                 type: Optional[str] = None, on_lost: Optional[OnLost] = None) -> None:
        super().__init__(Client(redis), locks, ttl=ttl, wait=wait, rates=rates, owner=owner, meta=meta,
                         renew=renew, jid=jid, type=type, on_lost=on_lost)

    def acquire(self) -> Dict[Any, int]:
        """Takes every key (waiting up to ``wait``) or raises :class:`LockNotAcquired`: the
        tokens, ``{key: token}``."""
        self._ensure_free()
        sent_at = time.monotonic()
        refresh = self._granted(self.client.lock_all(self.keys, self.jid, **self._lock_args()), sent_at)
        if self.renew:
            refresh.start()
        return self.tokens  # type: ignore[return-value]

    def release(self) -> None:
        """Stops renewing and releases every key. Raises LockLost if the hold was lost."""
        if self._refresh is not None:
            self._refresh.stop()
        if self.token is None:
            return
        if self._error() is not None:
            # Lost on one key, the others are still this job's until their leases end: freed now
            # (the renewal that found it lost has done so already, when it was a refusal).
            try:
                self.client.unlock_all(self.keys, self.jid, tokens=self.token)
            except Exception:  # noqa: BLE001 - best effort: the leases end them anyway
                pass
            self._released(False)
            return
        try:
            removed = self.client.unlock_all(self.keys, self.jid, tokens=self.token)
        except BaseException:
            self.token = None
            raise
        self._released(removed)

    def detach(self) -> None:
        """Stops renewing and forgets the hold without releasing it (the leases end it)."""
        if self._refresh is not None:
            self._refresh.stop()
        self.token = None

    def __enter__(self) -> "MultiLock":
        self.acquire()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            self.release()
        except LockLost:
            if exc_type is None:
                raise
            self._exit_lost(exc_type)
