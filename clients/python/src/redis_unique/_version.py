"""The module-version check: at its first command on a Redis client, redis_unique
asks MODULE LIST which version of the module is loaded and refuses another
major.minor than its own (a patch release of either side changes no reply).

MODULE LIST's ``ver`` is major * 10000 + minor * 100 + patch (0.1.0 is 100).
A server that refuses MODULE LIST (an ACL without it, a proxy) is not checked.
"""

from __future__ import annotations

import weakref
from typing import Any, Optional, Tuple

from redis.exceptions import ResponseError

from .errors import ModuleVersionMismatch

# The package's version, the module version it was made for; tests set another.
BUILT_FOR: Optional[str] = None

# Redis clients whose module passed the check (or cannot be checked).
_checked: "weakref.WeakKeyDictionary[Any, bool]" = weakref.WeakKeyDictionary()


def built_for() -> str:
    if BUILT_FOR is not None:
        return BUILT_FOR
    from . import __version__

    return __version__


def decode(ver: int) -> str:
    """MODULE LIST's ver as MAJOR.MINOR.PATCH (20601 -> 2.6.1)."""
    return "%d.%d.%d" % (ver // 10000, ver // 100 % 100, ver % 100)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def loaded_version(reply: Any) -> Optional[int]:
    """The ver of the module named "unique" in a MODULE LIST reply, None when absent."""
    for entry in reply or []:
        if isinstance(entry, dict):
            fields = {_text(k): v for k, v in entry.items()}
        else:
            items = list(entry)
            fields = {_text(items[i]): items[i + 1] for i in range(0, len(items) - 1, 2)}
        if _text(fields.get("name", "")) == "unique":
            return int(_text(fields.get("ver", 0)))
    return None


def mismatch(ver: int) -> Optional[ModuleVersionMismatch]:
    """The error for a loaded module of `ver`, None when it is this package's major.minor."""
    mine = built_for()
    major, minor = (int(x) for x in mine.split(".")[:2])
    if (ver // 10000, ver // 100 % 100) == (major, minor):
        return None
    return ModuleVersionMismatch(decode(ver), mine)


def _seen(redis: Any) -> bool:
    try:
        return _checked.get(redis, False)
    except TypeError:
        return False


def _remember(redis: Any) -> None:
    try:
        _checked[redis] = True
    except TypeError:
        pass


def _verdict(redis: Any, reply: Any) -> None:
    ver = loaded_version(reply)
    if ver is not None:
        error = mismatch(ver)
        if error is not None:
            raise error
    _remember(redis)


def check(redis: Any) -> None:
    """Raises ModuleVersionMismatch at the first command on `redis` when the loaded
    module is of another major.minor; a missing module is left to the command itself."""
    if _seen(redis):
        return
    try:
        reply = redis.execute_command("MODULE", "LIST")
    except ResponseError:
        _remember(redis)
        return
    _verdict(redis, reply)


async def check_async(redis: Any) -> None:
    """check() for a redis.asyncio client."""
    if _seen(redis):
        return
    try:
        reply = await redis.execute_command("MODULE", "LIST")
    except ResponseError:
        _remember(redis)
        return
    _verdict(redis, reply)

