"""The two backends: the redis-unique module, or its Redis Functions library where
the module cannot be loaded (managed Redis and Valkey).

Once per redis-py client, the first UNIQUE.* call tells: it goes to the module,
and an ``unknown command`` reply (which changed nothing; no ``MODULE LIST``,
forbidden on several clouds) sends it and every later call to the library
through FCALL (a pipeline asks ``COMMAND INFO unique.lock`` first), loaded (``FUNCTION LOAD REPLACE``) when it is
missing or older than this package's, or, where the user may not load it, an
error that gives the one command an operator runs. ``REDIS_UNIQUE_BACKEND``
(``module``, ``functions`` or ``auto``, the default) or :func:`set_backend`
forces either. A user's code is the same on both.

Every UNIQUE.* call is the same call to the library: ``FCALL unique_lock 2 key
wake jid ...`` with the lock's wake list (:func:`wake_key`, in the lock's hash
slot) and, on a server that is not a cluster, the counters' hash. A WAIT is a
waiter queued on the server, woken by a BLPOP on the wake list (see
functions/redis_unique.lua).
"""

from __future__ import annotations

import asyncio
import os
import re
import time
import weakref
from pathlib import Path
from typing import Any, List, Optional, Sequence, Tuple

from redis.exceptions import ResponseError

from .errors import CommandError, UniqueError

LIBRARY_NAME = "redis_unique"
METRICS_KEY = "unique:metrics"
# The library's source, shipped in the package (a copy of functions/redis_unique.lua).
LIBRARY_FILE = Path(__file__).with_name("redis_unique.lua")

_backend_setting: Optional[str] = None
_chosen: "weakref.WeakKeyDictionary[Any, str]" = weakref.WeakKeyDictionary()


class FunctionsNotLoaded(CommandError):
    """The module is not loaded and the Functions library is absent (or older than
    this package's), and this connection may not load it: an operator runs the command
    in the message once."""


class NotInFunctions(CommandError):
    """A call the Functions library does not keep (LOCKALL, METRICS MINUTES on a
    cluster...): it needs the redis-unique module."""


def library_source() -> str:
    return LIBRARY_FILE.read_text()


def library_version(source: Optional[str] = None) -> int:
    match = re.search(r"^local VERSION = (\d+)", source or library_source(), re.M)
    return int(match.group(1)) if match else 0


def set_backend(name: Optional[str]) -> None:
    """Forces a backend for every client: "module", "functions", or None/"auto" to
    detect it per connection (the default; REDIS_UNIQUE_BACKEND sets it too)."""
    global _backend_setting
    if name not in (None, "auto", "module", "functions"):
        raise ValueError("backend must be 'module', 'functions' or 'auto', not %r" % (name,))
    _backend_setting = None if name == "auto" else name
    _chosen.clear()


def _setting() -> Optional[str]:
    if _backend_setting is not None:
        return _backend_setting
    env = os.environ.get("REDIS_UNIQUE_BACKEND", "auto").strip().lower()
    return None if env in ("", "auto") else env


# ---- Cluster hash slots: the wake list hashes with the lock key ---------------------

def _crc16(data: bytes) -> int:
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) & 0xFFFF if crc & 0x8000 else (crc << 1) & 0xFFFF
    return crc


def _tag(key: bytes) -> Optional[bytes]:
    start = key.find(b"{")
    if start < 0:
        return None
    end = key.find(b"}", start + 1)
    if end < 0 or end == start + 1:
        return None
    return key[start + 1:end]


def key_slot(key: bytes) -> int:
    return _crc16(_tag(key) or key) % 16384


def _as_bytes(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    return str(value).encode()


def wake_key(key: Any) -> bytes:
    """The lock's wake list: "{X}:unique:w:" + key, X the key's hash tag, else the key
    (without '}'), else a tag of the same slot; in the lock's slot whatever the key."""
    k = _as_bytes(key)
    tag = _tag(k)
    if tag is None:
        if k and b"}" not in k:
            tag = k
        else:
            want = key_slot(k)
            i = 0
            while _crc16(b"u%d" % i) % 16384 != want:
                i += 1
            tag = b"u%d" % i
    return b"{" + tag + b"}:unique:w:" + k


# ---- Which backend ---------------------------------------------------------------

def _is_cluster(redis: Any) -> bool:
    return hasattr(redis, "get_nodes") and hasattr(redis, "nodes_manager")


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _module_loaded(redis: Any) -> bool:
    try:
        reply = redis.execute_command("COMMAND", "INFO", "unique.lock")
    except ResponseError:
        return False
    except (TypeError, AttributeError, IndexError):
        # redis-py's parser of COMMAND fails on the [nil] of an unknown command
        return False
    if isinstance(reply, dict):
        return any(v for v in reply.values())
    if not isinstance(reply, (list, tuple)):
        return True  # not a server's COMMAND INFO (a stand-in): the module, as before
    return bool(reply) and any(entry for entry in reply)


def backend(redis: Any) -> str:
    """"module" or "functions" for this redis-py client, found once."""
    forced = _setting()
    if forced:
        return forced
    try:
        found = _chosen.get(redis)
    except TypeError:
        found = None
    if found:
        return found
    found = "module" if _module_loaded(redis) else "functions"
    if found == "functions":
        ensure_loaded(redis)
    try:
        _chosen[redis] = found
    except TypeError:
        pass
    return found


def operator_hint() -> str:
    return ("the redis-unique module is not loaded on this server, and its Functions library is not "
            "loaded either (or is older than this package's, version %d). Load it once: "
            "`python -m redis_unique functions load redis://HOST:PORT` (or `redis-cli -x FUNCTION LOAD "
            "REPLACE < functions/redis_unique.lua`), or load the module (docs/install.md)" % library_version())


def _loaded_version(redis: Any) -> Optional[int]:
    try:
        return int(redis.execute_command("FCALL_RO", "unique_version", 0))
    except ResponseError as exc:
        if "function not found" in str(exc).lower() or "no such" in str(exc).lower():
            return None
        raise


def load(redis: Any, replace: bool = True) -> None:
    """FUNCTION LOAD REPLACE of the library (on every primary of a cluster)."""
    source = library_source()
    args = ["FUNCTION", "LOAD"] + (["REPLACE"] if replace else []) + [source]
    if _is_cluster(redis):
        for node in redis.get_primaries():
            redis.execute_command(*args, target_nodes=node)
    else:
        redis.execute_command(*args)


def ensure_loaded(redis: Any) -> None:
    """Loads the library when it is absent or older than this package's; raises
    FunctionsNotLoaded with the operator's command where this user may not."""
    mine = library_version()
    if _is_cluster(redis):
        versions = []
        for node in redis.get_primaries():
            try:
                versions.append(int(redis.execute_command("FCALL_RO", "unique_version", 0, target_nodes=node)))
            except ResponseError:
                versions.append(None)
        fresh = all(v is not None and v >= mine for v in versions)
    else:
        have = _loaded_version(redis)
        fresh = have is not None and have >= mine
    if fresh:
        return
    try:
        load(redis)
    except ResponseError as exc:
        raise FunctionsNotLoaded("%s (%s)" % (operator_hint(), exc), "ERR") from exc


# ---- UNIQUE.* as FCALL --------------------------------------------------------------

_READS = {"UNIQUE.LOCKEDBY": "unique_lockedby", "UNIQUE.RATE": "unique_rate", "UNIQUE.WAITERS": "unique_waiters"}
_WRITES = {"UNIQUE.LOCK": "unique_lock", "UNIQUE.UNLOCK": "unique_unlock"}
_REFUSED = {"UNIQUE.LOCKALL", "UNIQUE.UNLOCKALL"}


def _keys(redis: Any, key: Any) -> List[Any]:
    keys = [key, wake_key(key)]
    if not _is_cluster(redis):
        keys.append(METRICS_KEY)
    return keys


def _wait_ms(args: Sequence[Any]) -> Optional[int]:
    for i in range(3, len(args) - 1, 2):
        if _text(args[i]).upper() == "WAIT":
            return int(_text(args[i + 1]))
    return None


def fcall_args(redis: Any, args: Sequence[Any]) -> List[Any]:
    """The FCALL for a UNIQUE.* call that does not wait (pipelines, transactions)."""
    name = _text(args[0]).upper()
    if name in _REFUSED:
        raise NotInFunctions(
            "%s needs the redis-unique module: the Functions library keeps single-key locks only "
            "(load the module, docs/install.md)" % name, "ERR")
    if name in _READS:
        return ["FCALL_RO", _READS[name], 1, args[1]] + list(args[2:])
    if name in _WRITES:
        keys = _keys(redis, args[1])
        rest = list(args[2:])
        if name == "UNIQUE.LOCK":
            # Inside a batch a call cannot block: WAIT is ignored, as the module's in MULTI.
            out, i = rest[:1], 1
            while i < len(rest):
                if _text(rest[i]).upper() == "WAIT" and i + 1 < len(rest):
                    i += 2
                    continue
                out.append(rest[i])
                i += 1
            rest = out
        return ["FCALL", _WRITES[name], len(keys)] + keys + rest
    if name == "UNIQUE.METRICS":
        keys = [] if _is_cluster(redis) else [METRICS_KEY]
        return ["FCALL", "unique_metrics", len(keys)] + keys + list(args[1:])
    raise NotInFunctions("%s needs the redis-unique module (docs/install.md)" % name, "ERR")


def _fcall(redis: Any, args: List[Any]) -> Any:
    try:
        return redis.execute_command(*args)
    except ResponseError as exc:
        # after a failover, or a slot move to a node without it: load again, once
        if "function not found" not in str(exc).lower():
            raise
        _chosen.pop(redis, None)
        ensure_loaded(redis)
        return redis.execute_command(*args)


# A BLPOP times out only on the server's timer tick (100 ms at the default hz 10), so an
# instant the library names (a rate's next grant, a lease's end) would be missed by up to a
# tick: the last tick of a block is slept on the client instead, and the library asked at the
# instant itself. A grant in that last tick is found then.
BLOCK_TICK_MS = 100


def _seconds(ms: int) -> str:
    """BLPOP's timeout in seconds: a fraction of one is fine from Redis 6 on."""
    return "%.3f" % (ms / 1000.0)


def _lock_wait(redis: Any, args: Sequence[Any]) -> Any:
    key = args[1]
    keys = _keys(redis, key)
    reply = _fcall(redis, ["FCALL", "unique_lock", len(keys)] + keys + list(args[2:]))
    if not isinstance(reply, list):
        return reply
    seq = reply[0]
    try:
        while True:
            block_ms = max(int(reply[1]), 1)
            until = time.monotonic() + block_ms / 1000.0
            popped = None
            if block_ms > BLOCK_TICK_MS:
                popped = redis.execute_command("BLPOP", keys[1], _seconds(block_ms - BLOCK_TICK_MS))
            if not popped:
                time.sleep(max(until - time.monotonic(), 0.0))
            # the wake-up popped goes back to the library: another waiter's is passed on
            woke = [popped[1]] if popped else []
            reply = _fcall(redis, ["FCALL", "unique_wait", len(keys)] + keys + [seq] + woke)
            if not isinstance(reply, list):
                return reply
    except BaseException:
        # interrupted: leave the queue; a grant that raced it is released
        try:
            token = _fcall(redis, ["FCALL", "unique_wait", len(keys)] + keys + [seq, "CANCEL"])
            if token is not None:
                _fcall(redis, ["FCALL", "unique_unlock", len(keys)] + keys + [args[2]])
        except Exception:
            pass
        raise


def _reap(redis: Any, args: Sequence[Any]) -> Any:
    cursor = _text(args[1])
    count, owner = 100, ""
    i = 2
    while i + 1 < len(args):
        option = _text(args[i]).upper()
        if option == "COUNT":
            count = int(_text(args[i + 1]))
        elif option == "OWNER":
            owner = args[i + 1]
        i += 2
    next_cursor, names = redis.execute_command("SCAN", cursor, "COUNT", count, "TYPE", "hash")
    removed = 0
    if names:
        pipe = redis.pipeline(transaction=False)
        for name in names:
            keys = _keys(redis, name)
            pipe.execute_command("FCALL", "unique_reapkey", len(keys), *keys, owner)
        removed = sum(int(r) for r in pipe.execute())
    return [next_cursor, removed]


def _unknown_command(exc: Exception) -> bool:
    text = str(exc).lower()
    return "unknown command" in text and "unique." in text


def _known(redis: Any) -> Optional[str]:
    forced = _setting()
    if forced:
        return forced
    try:
        return _chosen.get(redis)
    except TypeError:
        return None


def _remember(redis: Any, found: str) -> None:
    try:
        _chosen[redis] = found
    except TypeError:
        pass


def execute(redis: Any, args: Sequence[Any]) -> Any:
    """A UNIQUE.* call on the backend of `redis`. Before the backend is known the call goes
    to the module: its reply, or its error, says the module is there; an unknown command
    (which changed nothing) says it is not, and the call goes to the library."""
    from . import _version

    known = _known(redis)
    if known is None and _is_cluster(redis):
        # a cluster client refuses a command it cannot route before sending it: ask
        known = backend(redis)
    if known != "functions":
        _version.check(redis)
        if known == "module":
            return redis.execute_command(*args)
        try:
            reply = redis.execute_command(*args)
        except ResponseError as exc:
            if not _unknown_command(exc):
                _remember(redis, "module")
                raise
            ensure_loaded(redis)
            _remember(redis, "functions")
        else:
            _remember(redis, "module")
            return reply
    name = _text(args[0]).upper()
    if name == "UNIQUE.LOCK" and _wait_ms(args) is not None:
        return _lock_wait(redis, args)
    if name == "UNIQUE.REAP":
        if _is_cluster(redis):
            raise NotInFunctions("UNIQUE.REAP walks one server: run it on each primary", "ERR")
        return _reap(redis, args)
    return _fcall(redis, fcall_args(redis, args))


def pipeline_args(redis: Any, args: Sequence[Any]) -> Tuple[Any, ...]:
    """The command a pipeline sends for a UNIQUE.* call on the backend of `redis`."""
    if backend(redis) == "module":
        return tuple(args)
    return tuple(fcall_args(redis, args))


# ---- The same over redis.asyncio ------------------------------------------------

_chosen_async: "weakref.WeakKeyDictionary[Any, str]" = weakref.WeakKeyDictionary()


async def _module_loaded_async(redis: Any) -> bool:
    try:
        reply = await redis.execute_command("COMMAND", "INFO", "unique.lock")
    except ResponseError:
        return False
    except (TypeError, AttributeError, IndexError):
        return False
    if isinstance(reply, dict):
        return any(v for v in reply.values())
    return bool(reply) and any(entry for entry in reply)


async def ensure_loaded_async(redis: Any) -> None:
    mine = library_version()
    try:
        have: Optional[int] = int(await redis.execute_command("FCALL_RO", "unique_version", 0))
    except ResponseError as exc:
        if "function not found" not in str(exc).lower():
            raise
        have = None
    if have is not None and have >= mine:
        return
    try:
        await redis.execute_command("FUNCTION", "LOAD", "REPLACE", library_source())
    except ResponseError as exc:
        raise FunctionsNotLoaded("%s (%s)" % (operator_hint(), exc), "ERR") from exc


async def backend_async(redis: Any) -> str:
    forced = _setting()
    if forced:
        return forced
    try:
        found = _chosen_async.get(redis)
    except TypeError:
        found = None
    if found:
        return found
    found = "module" if await _module_loaded_async(redis) else "functions"
    if found == "functions":
        await ensure_loaded_async(redis)
    try:
        _chosen_async[redis] = found
    except TypeError:
        pass
    return found


async def _fcall_async(redis: Any, args: List[Any]) -> Any:
    try:
        return await redis.execute_command(*args)
    except ResponseError as exc:
        if "function not found" not in str(exc).lower():
            raise
        _chosen_async.pop(redis, None)
        await ensure_loaded_async(redis)
        return await redis.execute_command(*args)


async def execute_async(redis: Any, args: Sequence[Any]) -> Any:
    """execute() for a redis.asyncio client."""
    from . import _version

    forced = _setting()
    try:
        known = forced or _chosen_async.get(redis)
    except TypeError:
        known = None
    if known != "functions":
        await _version.check_async(redis)
        if known == "module":
            return await redis.execute_command(*args)
        try:
            reply = await redis.execute_command(*args)
        except ResponseError as exc:
            if not _unknown_command(exc):
                try:
                    _chosen_async[redis] = "module"
                except TypeError:
                    pass
                raise
            await ensure_loaded_async(redis)
            try:
                _chosen_async[redis] = "functions"
            except TypeError:
                pass
        else:
            try:
                _chosen_async[redis] = "module"
            except TypeError:
                pass
            return reply
    name = _text(args[0]).upper()
    if name == "UNIQUE.REAP":
        cursor = _text(args[1])
        count, owner = 100, ""
        for i in range(2, len(args) - 1, 2):
            if _text(args[i]).upper() == "COUNT":
                count = int(_text(args[i + 1]))
            elif _text(args[i]).upper() == "OWNER":
                owner = args[i + 1]
        next_cursor, names = await redis.execute_command("SCAN", cursor, "COUNT", count, "TYPE", "hash")
        removed = 0
        for key in names:
            keys = _keys(redis, key)
            removed += int(await _fcall_async(redis, ["FCALL", "unique_reapkey", len(keys)] + keys + [owner]))
        return [next_cursor, removed]
    if name != "UNIQUE.LOCK" or _wait_ms(args) is None:
        return await _fcall_async(redis, fcall_args(redis, args))
    keys = _keys(redis, args[1])
    reply = await _fcall_async(redis, ["FCALL", "unique_lock", len(keys)] + keys + list(args[2:]))
    if not isinstance(reply, list):
        return reply
    seq = reply[0]
    try:
        while True:
            block_ms = max(int(reply[1]), 1)
            until = time.monotonic() + block_ms / 1000.0
            popped = None
            if block_ms > BLOCK_TICK_MS:
                popped = await redis.execute_command("BLPOP", keys[1], _seconds(block_ms - BLOCK_TICK_MS))
            if not popped:
                await asyncio.sleep(max(until - time.monotonic(), 0.0))
            woke = [popped[1]] if popped else []
            reply = await _fcall_async(redis, ["FCALL", "unique_wait", len(keys)] + keys + [seq] + woke)
            if not isinstance(reply, list):
                return reply
    except BaseException:
        try:
            token = await _fcall_async(redis, ["FCALL", "unique_wait", len(keys)] + keys + [seq, "CANCEL"])
            if token is not None:
                await _fcall_async(redis, ["FCALL", "unique_unlock", len(keys)] + keys + [args[2]])
        except Exception:
            pass
        raise


__all__ = ["FunctionsNotLoaded", "NotInFunctions", "UniqueError", "backend", "set_backend", "load",
           "ensure_loaded", "wake_key", "execute", "execute_async", "backend_async", "pipeline_args", "library_source", "library_version"]
