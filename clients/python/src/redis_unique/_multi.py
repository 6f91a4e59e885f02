"""Several keys in one grant (UNIQUE.LOCKALL / UNIQUE.UNLOCKALL): command building, reply
parsing, the renewal rule's multi-key reading and the checks of the task options, shared by
the sync and asyncio clients, MultiLock, Celery and RQ."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from . import _protocol as p
from ._protocol import JidT, KeyT, RateT

MAX_KEYS = 64

# A rate per key: a mapping {key: Rate}, or a sequence in key order with None where a key has none.
RatesT = Union[Mapping[Any, Optional[RateT]], Sequence[Optional[RateT]]]


def _key_bytes(key: Any) -> bytes:
    if isinstance(key, str):
        return key.encode("utf-8")
    if isinstance(key, bytes):
        return key
    raise TypeError("a key must be a str or bytes, not %r" % (key,))


def check_keys(keys: Any) -> List[KeyT]:
    """The keys as a list: 1 to 64, each once (``"a"`` and ``b"a"`` are one key). The server
    refuses the same, but a mistake is told before anything is sent."""
    if isinstance(keys, (str, bytes)) or not isinstance(keys, Sequence):
        raise TypeError("keys must be a list of keys (str or bytes), not %r" % (keys,))
    keys = list(keys)
    if not 1 <= len(keys) <= MAX_KEYS:
        raise ValueError("give 1 to %d keys, not %d" % (MAX_KEYS, len(keys)))
    seen = set()
    for key in keys:
        raw = _key_bytes(key)
        if raw in seen:
            raise ValueError("key %r is given twice: each key once" % (key,))
        seen.add(raw)
    return keys


def check_limit(limit: Any, what: str = "limit") -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ValueError("%s must be an integer >= 0 (0: no limit), not %r" % (what, limit))
    return limit


def _rates_by_position(keys: List[KeyT], rates: Optional[RatesT]) -> List[Optional[RateT]]:
    if rates is None:
        return [None] * len(keys)
    if isinstance(rates, Mapping):
        index = {_key_bytes(k): i for i, k in enumerate(keys)}
        found: List[Optional[RateT]] = [None] * len(keys)
        for key, rate in rates.items():
            i = index.get(_key_bytes(key))
            if i is None:
                raise ValueError("rates names %r, which is not one of the keys" % (key,))
            found[i] = rate
        return found
    if isinstance(rates, (str, bytes)) or not isinstance(rates, Sequence):
        raise TypeError("rates must be a dict {key: Rate} or a list in key order (None: no rate), not %r"
                        % (rates,))
    rates = list(rates)
    if len(rates) != len(keys):
        raise ValueError("rates in key order must give one entry per key (None: no rate): %d keys, %d rates"
                         % (len(keys), len(rates)))
    return rates


def lock_all_args(keys: Sequence[KeyT], jid: JidT, *, limits: Optional[Sequence[int]] = None,
                  rates: Optional[RatesT] = None, ttl: Optional[float] = None,
                  pxat: Union[datetime, int, None] = None, type: Optional[str] = None,
                  owner: Optional[str] = None, meta: Optional[Mapping[str, Any]] = None,
                  wait: Optional[float] = None) -> Tuple[Any, ...]:
    """``UNIQUE.LOCKALL numkeys key... jid`` with the options in the reference's order: LIMIT
    (one per key, only when given), one RATE per key that has one (its position from 1),
    TTL|PXAT, TYPE, OWNER, META, WAIT."""
    keys = check_keys(keys)
    args: List[Any] = ["UNIQUE.LOCKALL", len(keys), *keys, jid]
    if limits is not None:
        if isinstance(limits, (str, bytes)) or not isinstance(limits, Sequence):
            raise TypeError("limits must be a list of integers, one per key, not %r" % (limits,))
        if len(limits) != len(keys):
            raise ValueError("limits must give one limit per key, in key order: %d keys, %d limits"
                             % (len(keys), len(limits)))
        args += ["LIMIT", *(check_limit(n) for n in limits)]
    for i, rate in enumerate(_rates_by_position(keys, rates), start=1):
        if rate is not None:
            args += ["RATE", i, *p.rate_args(rate)[1:]]
    if ttl is not None and pxat is not None:
        raise ValueError("give ttl or pxat, not both")
    if ttl is not None:
        args += ["TTL", p.seconds_to_ms(ttl, "ttl")]
    elif pxat is not None:
        args += ["PXAT", p.pxat_to_ms(pxat)]
    if type is not None:
        args += ["TYPE", type]
    if owner is not None:
        args += ["OWNER", owner]
    if meta is not None:
        args += ["META", meta if isinstance(meta, (str, bytes)) else
                 json.dumps(meta, separators=(",", ":"), default=str)]
    if wait is not None:
        args += ["WAIT", p.seconds_to_ms(wait, "wait")]
    return tuple(args)


def unlock_all_args(keys: Sequence[KeyT], jid: JidT, tokens: Optional[Sequence[int]] = None) -> Tuple[Any, ...]:
    """``UNIQUE.UNLOCKALL n keys... jid [TOKEN t...]``: with ``tokens`` (one per key, in key
    order, as ``lock_all`` returned them), a key is released only when its hold has its token."""
    keys = check_keys(keys)
    if tokens is None:
        return ("UNIQUE.UNLOCKALL", len(keys), *keys, jid)
    tokens = list(tokens)
    if len(tokens) != len(keys):
        raise ValueError("tokens: one per key, in key order (%d keys, %d tokens)" % (len(keys), len(tokens)))
    return ("UNIQUE.UNLOCKALL", len(keys), *keys, jid, "TOKEN", *(p.check_token(t) for t in tokens))


def parse_tokens(reply: Any) -> Optional[List[int]]:
    """LOCKALL's reply: the tokens in key order, None when refused or timed out."""
    return None if reply is None else [int(t) for t in reply]


# Renewal: the same rule as a single key's (clients/conformance README "Renewal"), read over
# the tokens of every key.

def renewal_all_args(keys: Sequence[KeyT], jid: JidT, lease_ms: int) -> Tuple[Any, ...]:
    """Every third of the lease: ``UNIQUE.LOCKALL n keys... jid TTL <lease ms>``, nothing else."""
    return ("UNIQUE.LOCKALL", len(keys), *keys, jid, "TTL", lease_ms)


def renewal_all_outcome(tokens: Sequence[int], reply: Any) -> str:
    """``kept`` when every key answers with its held token; ``lost`` for nil (one key's hold
    had ended: the server refuses a partial renewal); ``lost_unlock`` for other tokens (every
    hold had ended and the call took new ones, which must be given up)."""
    got = parse_tokens(reply)
    if got == list(tokens):
        return "kept"
    return "lost" if got is None else "lost_unlock"


# Task options (Celery and RQ): several keys and their limits, each call's own.

def check_task_limits(limits: Any, rates: Any, names: Tuple[str, str] = ("lock_limits", "lock_rates")) -> None:
    """A task's limits (a dict {key: limit} or a callable(args, kwargs) giving one) and rates
    (a dict {key: Rate} or a callable giving one): what is given as a value is checked now,
    a callable's result at each call."""
    if limits is None:
        if rates is not None:
            raise ValueError("%s needs %s (the keys whose rates they are)" % (names[1], names[0]))
        return
    if not callable(limits) and not isinstance(limits, Mapping):
        raise TypeError("%s must be a dict {key: limit} or a callable(args, kwargs) giving one, not %r"
                        % (names[0], limits))
    if rates is not None and not callable(rates) and not isinstance(rates, Mapping):
        raise TypeError("%s must be a dict {key: Rate} or a callable(args, kwargs) giving one, not %r"
                        % (names[1], rates))
    if isinstance(limits, Mapping):
        task_limits(limits, None if callable(rates) else rates, (), {}, names)


def task_limits(limits: Any, rates: Any, args: Any, kwargs: Any,
                names: Tuple[str, str] = ("lock_limits", "lock_rates"),
                extra: int = 0) -> Optional[Dict[str, Any]]:
    """One call's limits: ``{"keys": [...], "limits": [...], "rates": {key: (limit, per, burst)}}``
    (plain data, for a job's meta), or None when the call has none (no option, or the callable
    gave None or an empty dict). ``extra``: keys that join the grant beside these (a unique
    lock's), counted against the 64."""
    def value(option: Any) -> Any:
        return option(list(args or ()), dict(kwargs or {})) if callable(option) else option

    found = value(limits)
    if not found:
        return None
    if not isinstance(found, Mapping):
        raise TypeError("%s must give a dict {key: limit}, not %r" % (names[0], found))
    keys = list(found)
    check_keys(keys)
    if len(keys) + extra > MAX_KEYS:
        raise ValueError("%s gives %d keys: at most %d with the task's own lock" % (names[0], len(keys),
                                                                                  MAX_KEYS - extra))
    for key in keys:
        check_limit(found[key], "%s[%r]" % (names[0], key))
    plain_rates: Dict[str, Any] = {}
    for key, rate in (value(rates) or {}).items():
        if rate is None:
            continue
        if not isinstance(rate, p.Rate):
            rate = p.Rate(*rate)
        p.rate_args(rate)  # checked now
        if _key_bytes(key) not in {_key_bytes(k) for k in keys}:
            raise ValueError("%s names %r, which is not one of the keys of %s" % (names[1], key, names[0]))
        plain_rates[_text(key)] = [rate.limit, rate.per, rate.burst]
    return {"keys": [_text(k) for k in keys], "limits": [found[k] for k in keys], "rates": plain_rates}


def _text(key: Any) -> str:
    return key.decode("utf-8") if isinstance(key, bytes) else key


def rates_of(found: Mapping[str, Any]) -> Dict[str, p.Rate]:
    """The Rates of :func:`task_limits`'s plain data."""
    return {k: p.Rate(*v) for k, v in (found.get("rates") or {}).items()}


def run_lock_and_limits(run_key: Optional[KeyT], run_limit: int, limits: Mapping[str, Any],
                        name: str = "lock_limits") -> Dict[Any, int]:
    """The keys of a task's one grant, ``{key: limit}``: its run lock (when the call is unique)
    with the unique option's limit, then the keys of ``limits`` (``task_limits``'s form). A key
    is held with one limit, so ``limits`` naming the run lock's own key with another limit is
    refused: neither limit is dropped without a word. With the same limit, it is one key."""
    locks: Dict[Any, int] = {} if run_key is None else {run_key: run_limit}
    run = None if run_key is None else _key_bytes(run_key)
    for key, limit in zip(limits["keys"], limits["limits"]):
        if run is not None and _key_bytes(key) == run:
            if limit != run_limit:
                raise ValueError(
                    "%s names %r, the task's own run lock, with a limit of %d where the unique option's limit "
                    "is %d: a key has one limit, so give it as the unique option's limit, or name another key"
                    % (name, _text(key), limit, run_limit))
            continue
        locks[key] = limit
    return locks

