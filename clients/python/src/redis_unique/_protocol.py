"""Command building and reply parsing shared by the sync and asyncio clients."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

KeyT = Union[str, bytes]
JidT = Union[str, bytes]

LOCK_TYPES = ("until_executed", "until_executing", "while_executing",
              "until_and_while_executing", "until_expired")


@dataclass(frozen=True)
class Holder:
    """One live holder of a lock, as UNIQUE.LOCKEDBY WITHMETA reports it."""

    jid: str
    token: int
    acquired_at: datetime
    expires_at: Optional[datetime]
    ttl: Optional[float]  # seconds left, None when the hold has no lease
    type: str
    owner: Optional[str]
    meta: Optional[Dict[str, Any]]
    # The same times as unix milliseconds, exactly as the server holds them (a
    # lease may end past year 9999, where expires_at stops at datetime.max).
    acquired_at_ms: int = 0
    expires_at_ms: Optional[int] = None
    # The fair-sharing group the hold was taken in (None without GROUP), and its mode
    # ("shared" or "exclusive"; None when taken without MODE).
    group: Optional[str] = None
    mode: Optional[str] = None


@dataclass(frozen=True)
class GroupWaiters:
    """One group of a key, as UNIQUE.WAITERS key GROUPS reports it: how many of its
    requests wait for a slot and how many of its holders hold one now. ``group`` is
    None for the requests and holds taken without a group."""

    group: Optional[str]
    waiting: int
    holding: int


@dataclass(frozen=True)
class Rate:
    """A rate beside the lock's limit (``UNIQUE.LOCK ... RATE``): at most ``limit``
    grants every ``per`` seconds, evenly spaced, plus ``burst`` at once. Only new
    grants spend it; renewals never do."""

    limit: int
    per: float = 1.0
    burst: int = 0


RateT = Union[Rate, Tuple[int, float], Tuple[int, float, int]]


@dataclass(frozen=True)
class RateState:
    """A key's rate state, as UNIQUE.RATE reports it."""

    limit: int
    per_ms: int
    burst: int
    remaining: int  # grants allowed now, one after the other
    allowed_at_ms: int  # the first unix ms a grant is allowed (now when remaining > 0)
    idle_at_ms: int  # the first unix ms nothing is spent any more

    @property
    def allowed_at(self) -> datetime:
        return _aware(self.allowed_at_ms)


def rate_args(rate: RateT) -> List[Any]:
    """``RATE n PER ms [BURST b]`` of a :class:`Rate` or a ``(limit, per_seconds[, burst])``
    tuple; the period is rounded up to whole ms."""
    if not isinstance(rate, Rate):
        if not isinstance(rate, tuple) or len(rate) not in (2, 3):
            raise TypeError("rate must be a Rate or a (limit, per_seconds[, burst]) tuple, not %r" % (rate,))
        rate = Rate(*rate)
    for name in ("limit", "burst"):
        value = getattr(rate, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < (1 if name == "limit" else 0):
            raise ValueError("rate %s must be an integer %s, not %r" % (name, ">= 1" if name == "limit" else ">= 0",
                                                                       value))
    args: List[Any] = ["RATE", rate.limit, "PER", seconds_to_ms(rate.per, "rate per")]
    if rate.burst:
        args += ["BURST", rate.burst]
    return args


def seconds_to_ms(seconds: float, what: str) -> int:
    """A positive number of seconds as whole ms, rounded up (never 0)."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise TypeError("%s must be a number of seconds, not %r" % (what, seconds))
    if not seconds > 0 or math.isinf(seconds):
        raise ValueError("%s must be a positive number of seconds, not %r" % (what, seconds))
    # Rounded up to whole ms from the value to the microsecond: 0.0004 s is 1 ms,
    # and 0.3 s is 300 ms, not the 301 that ceil(0.3 * 1000) gives on floats.
    micros = round(seconds * 1_000_000)
    return max(1, -(-micros // 1000))


def pxat_to_ms(pxat: Union[datetime, int]) -> int:
    """The end of a lease: an aware datetime, or unix time in milliseconds as an
    int, as redis-py's own ``pxat`` (``set(..., pxat=int(time.time() * 1000))``)."""
    if isinstance(pxat, datetime):
        if pxat.tzinfo is None:
            raise ValueError("pxat must be an aware datetime (with a tzinfo)")
        return math.ceil(pxat.timestamp() * 1000)
    if isinstance(pxat, bool) or not isinstance(pxat, int):
        raise TypeError("pxat must be an aware datetime or unix time in milliseconds (an int, "
                        "as redis-py's pxat), not %r" % (pxat,))
    return pxat


MODES = ("shared", "exclusive")
MAX_GROUP_BYTES = 1024
MAX_WEIGHT = 1000
MAX_GROUP_LIMIT = 2147483647


def _bounded_int(value: Any, what: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError("%s must be an integer from %d to %d, not %r" % (what, low, high, value))
    return value


def group_args(group: Optional[Union[str, bytes]], weight: Optional[int], group_limit: Optional[int],
               mode: Optional[str]) -> List[Any]:
    """``[GROUP name [WEIGHT w]] [GROUPLIMIT m] [MODE shared|exclusive]``, checked here so
    that a mistake is told before anything is sent: WEIGHT and GROUPLIMIT need a group."""
    args: List[Any] = []
    if group is not None:
        if not isinstance(group, (str, bytes)):
            raise TypeError("group must be a str or bytes (a tenant's name), not %r" % (group,))
        size = len(group.encode("utf-8") if isinstance(group, str) else group)
        if not 1 <= size <= MAX_GROUP_BYTES:
            raise ValueError("group must be 1 to %d bytes, not %d" % (MAX_GROUP_BYTES, size))
        args += ["GROUP", group]
        if weight is not None:
            args += ["WEIGHT", _bounded_int(weight, "weight", 1, MAX_WEIGHT)]
    elif weight is not None or group_limit is not None:
        raise ValueError("%s needs a group" % ("weight" if weight is not None else "group_limit"))
    if group_limit is not None:
        args += ["GROUPLIMIT", _bounded_int(group_limit, "group_limit", 1, MAX_GROUP_LIMIT)]
    if mode is not None:
        if not isinstance(mode, str) or mode.lower() not in MODES:
            raise ValueError("mode must be 'shared' or 'exclusive', not %r" % (mode,))
        args += ["MODE", mode.lower()]
    return args


TASK_GROUP_OPTIONS = ("lock_group", "lock_group_limit", "lock_group_weight")


def check_task_group(group: Any, group_limit: Any, weight: Any, names: Sequence[str] = TASK_GROUP_OPTIONS) -> None:
    """A task's group options (called ``names``), each a value or a callable of the call:
    the values given as such are checked now (a callable's result at each call)."""
    if group is None:
        for name, option in ((names[1], group_limit), (names[2], weight)):
            if option is not None:
                raise ValueError("%s needs %s" % (name, names[0]))
        return
    if not callable(group) and not isinstance(group, (str, bytes)):
        raise TypeError("%s must be a str or a callable(args, kwargs), not %r" % (names[0], group))
    group_args("g" if callable(group) else group, None if callable(weight) else weight,
               None if callable(group_limit) else group_limit, None)


def task_group(group: Any, group_limit: Any, weight: Any, args: Any, kwargs: Any) -> Dict[str, Any]:
    """The ``group``, ``group_limit`` and ``weight`` of one call of a task (each option a
    value or a callable(args, kwargs)); a group that comes out None leaves the call without
    one, and then without a group limit or weight."""
    def value(option: Any) -> Any:
        return option(list(args or ()), dict(kwargs or {})) if callable(option) else option

    name = value(group)
    if name is None:
        return {}
    found = {"group": name, "group_limit": value(group_limit), "weight": value(weight)}
    group_args(found["group"], found["weight"], found["group_limit"], None)
    return found


def lock_args(key: KeyT, jid: JidT, *, limit: Optional[int] = None, ttl: Optional[float] = None,
              pxat: Union[datetime, int, None] = None, type: Optional[str] = None,
              owner: Optional[str] = None, meta: Optional[Mapping[str, Any]] = None,
              rate: Optional[RateT] = None, group: Optional[Union[str, bytes]] = None,
              weight: Optional[int] = None, group_limit: Optional[int] = None, mode: Optional[str] = None,
              wait: Optional[float] = None) -> Tuple[Any, ...]:
    args: List[Any] = ["UNIQUE.LOCK", key, jid]
    if limit is not None:  # sent when given, as by every client (the server's default is 1)
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise ValueError("limit must be an integer >= 0 (0: no limit), not %r" % (limit,))
        args += ["LIMIT", limit]
    if ttl is not None and pxat is not None:
        raise ValueError("give ttl or pxat, not both")
    if ttl is not None:
        args += ["TTL", seconds_to_ms(ttl, "ttl")]
    elif pxat is not None:
        args += ["PXAT", pxat_to_ms(pxat)]
    if type is not None:
        args += ["TYPE", type]
    if owner is not None:
        args += ["OWNER", owner]
    if meta is not None:
        args += ["META", meta if isinstance(meta, (str, bytes)) else
                 json.dumps(meta, separators=(",", ":"), default=str)]
    if rate is not None:
        args += rate_args(rate)
    args += group_args(group, weight, group_limit, mode)
    if wait is not None:
        args += ["WAIT", seconds_to_ms(wait, "wait")]
    return tuple(args)


def parse_rate(raw: Any) -> Optional[RateState]:
    """UNIQUE.RATE's reply: None, a dict (RESP3) or a flat field/value list (RESP2)."""
    if raw is None:
        return None
    if isinstance(raw, dict):
        fields = {_text(k): int(v) for k, v in raw.items()}
    else:
        items = list(raw)
        fields = {_text(items[i]): int(items[i + 1]) for i in range(0, len(items), 2)}
    return RateState(limit=fields["limit"], per_ms=fields["per"], burst=fields["burst"],
                     remaining=fields["remaining"], allowed_at_ms=fields["allowed_at"],
                     idle_at_ms=fields["idle_at"])


def _text(value: Any) -> Any:
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return value
    return value


_LATEST = datetime.max.replace(tzinfo=timezone.utc)


def _aware(ms: int) -> datetime:
    """A unix time in ms as an aware datetime; one past what a datetime can hold
    (year 9999) is datetime.max in UTC: the exact value is in the ``*_ms`` field."""
    try:
        return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        return _LATEST


def parse_holder(raw: Any) -> Holder:
    """One WITHMETA entry: a dict (RESP3) or a flat field/value list (RESP2)."""
    if isinstance(raw, dict):
        fields = {_text(k): v for k, v in raw.items()}
    else:
        items = list(raw)
        fields = {_text(items[i]): items[i + 1] for i in range(0, len(items), 2)}
    expires = int(fields["expires_at"])
    ttl = int(fields["ttl"])
    meta = fields.get("meta")
    return Holder(
        jid=_text(fields["jid"]),
        token=int(fields["token"]),
        acquired_at=_aware(int(fields["acquired_at"])),
        expires_at=None if expires < 0 else _aware(expires),
        acquired_at_ms=int(fields["acquired_at"]),
        expires_at_ms=None if expires < 0 else expires,
        ttl=None if ttl < 0 else ttl / 1000,
        type=_text(fields["type"]),
        owner=None if fields.get("owner") is None else _text(fields["owner"]),
        meta=None if meta is None else json.loads(meta),
        group=None if fields.get("group") is None else _text(fields["group"]),
        mode=None if fields.get("mode") is None else _text(fields["mode"]),
    )


def parse_holders(reply: Sequence[Any]) -> List[Holder]:
    return [parse_holder(h) for h in reply or ()]


def parse_group_waiters(reply: Sequence[Any]) -> List[GroupWaiters]:
    """UNIQUE.WAITERS key GROUPS: one map (RESP3) or flat field/value list (RESP2) per group."""
    entries = []
    for raw in reply or ():
        if isinstance(raw, dict):
            fields = {_text(k): v for k, v in raw.items()}
        else:
            items = list(raw)
            fields = {_text(items[i]): items[i + 1] for i in range(0, len(items), 2)}
        group = fields.get("group")
        entries.append(GroupWaiters(group=None if group is None else _text(group), waiting=int(fields["waiting"]),
                                    holding=int(fields["holding"])))
    return entries


def parse_token(reply: Any) -> Optional[int]:
    return None if reply is None else int(reply)


def check_token(token: Any) -> int:
    """A fencing token as LOCK returned it, for ``unlock(..., token=)``: a positive int."""
    if isinstance(token, bool) or not isinstance(token, int) or not 1 <= token <= 2**63 - 1:
        raise ValueError("token must be a fencing token as lock() returned it (an int from 1 to 2**63-1), "
                         "got %r" % (token,))
    return token


def unlock_args(key: KeyT, jid: JidT, token: Optional[int] = None) -> Tuple[Any, ...]:
    """``UNIQUE.UNLOCK key jid [TOKEN t]``: with ``token``, only the hold of that token goes (a
    late unlock of an older hold of the same jid frees nothing of a newer one)."""
    if token is None:
        return ("UNIQUE.UNLOCK", key, jid)
    return ("UNIQUE.UNLOCK", key, jid, "TOKEN", check_token(token))


def parse_metrics(reply: Any) -> Dict[str, Any]:
    return json.loads(reply)


def metrics_args(minutes: Optional[int]) -> Tuple[Any, ...]:
    if minutes is None:
        return ("UNIQUE.METRICS", "FORMAT", "json")
    return ("UNIQUE.METRICS", "MINUTES", int(minutes), "FORMAT", "json")


def reap_args(cursor: Any, owner: Optional[str], count: int) -> Tuple[Any, ...]:
    args: List[Any] = ["UNIQUE.REAP", cursor, "COUNT", int(count)]
    if owner is not None:
        args += ["OWNER", owner]
    return tuple(args)


def cursor_done(cursor: Any) -> bool:
    return cursor in (b"0", "0", 0)


# Renewal: the rule of clients/conformance (README "Renewal"), the same in every client.

# Error codes by which a server says it cannot answer now, not that the hold is gone: a
# renewal refused with one of them is tried again, as after a connection error.
RENEW_RETRY_CODES = ("LOADING", "BUSY", "READONLY", "CLUSTERDOWN", "TRYAGAIN", "MASTERDOWN", "OOM")


def renew_interval_ms(lease_ms: int) -> int:
    """How often a held lease is renewed: a third of it (leaving room for two more tries)."""
    return max(1, lease_ms // 3)


def renew_retry_ms(lease_ms: int) -> int:
    """How soon a renewal that got no answer is tried again: a tenth of the lease."""
    return max(1, lease_ms // 10)


def renewal_args(key: KeyT, jid: JidT, lease_ms: int, *, type: Optional[str] = None,
                 owner: Optional[str] = None, meta: Optional[Mapping[str, Any]] = None) -> Tuple[Any, ...]:
    """A renewal moves the end of the lease and sends again only what changed (TYPE,
    OWNER, META): never LIMIT, RATE or WAIT."""
    args: List[Any] = ["UNIQUE.LOCK", key, jid, "TTL", lease_ms]
    if type is not None:
        args += ["TYPE", type]
    if owner is not None:
        args += ["OWNER", owner]
    if meta is not None:
        args += ["META", meta if isinstance(meta, (str, bytes)) else
                 json.dumps(meta, separators=(",", ":"), default=str)]
    return tuple(args)


def renewal_outcome(token: int, reply: Any) -> str:
    """What a renewal's reply means for the hold of ``token``: ``kept``, ``lost`` (nil:
    another holder has the slot) or ``lost_unlock`` (another token: the hold had ended and
    the renewal took a new one, which must be given up)."""
    got = parse_token(reply)
    if got == token:
        return "kept"
    return "lost" if got is None else "lost_unlock"
