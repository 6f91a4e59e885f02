"""Exceptions of redis_unique: every one is a :class:`UniqueError`."""

from __future__ import annotations

from typing import Optional

from redis.exceptions import ResponseError

__all__ = [
    "UniqueError",
    "CommandError",
    "ModuleNotLoaded",
    "ModuleVersionMismatch",
    "LockNotAcquired",
    "LockLost",
    "DuplicateTask",
]

LOAD_HINT = (
    "the redis-unique module is not loaded on this server: load it with "
    "`loadmodule /path/to/libredis_unique.so` in redis.conf, "
    "`redis-server --loadmodule /path/to/libredis_unique.so`, or "
    "`MODULE LOAD /path/to/libredis_unique.so` (build it with `make build`)"
)


class UniqueError(Exception):
    """Base class of every error raised by redis_unique."""


class CommandError(UniqueError, ResponseError):
    """The server refused a command. ``code`` is the error code of the reply
    (``ERR``, ``WRONGTYPE``, ``OOM``...), restored where redis-py strips it."""

    def __init__(self, message: str, code: str = "ERR") -> None:
        super().__init__(message)
        self.code = code


class ModuleNotLoaded(CommandError):
    """The server does not know the UNIQUE.* commands."""


class ModuleVersionMismatch(UniqueError):
    """The module loaded on the server is of another major.minor version than
    this package was made for: ``module_version`` and ``client_version`` say which."""

    def __init__(self, module_version: str, client_version: str) -> None:
        major_minor = ".".join(client_version.split(".")[:2])
        module_major_minor = ".".join(module_version.split(".")[:2])
        super().__init__(
            "the redis-unique module loaded on this server is version %s, but this redis-unique "
            "Python package (%s) was made for module %s.x: install the package of the server's "
            "module (pip install 'redis-unique==%s.*'), or load module %s.x into the server "
            "(docs/install.md, Upgrades)"
            % (module_version, client_version, major_minor, module_major_minor, major_minor))
        self.module_version = module_version
        self.client_version = client_version


class LockNotAcquired(UniqueError):
    """The lock is held by others (after waiting, when a wait was given)."""

    def __init__(self, message: str, key: Optional[str] = None) -> None:
        super().__init__(message)
        self.key = key


class AlreadyAcquired(UniqueError):
    """acquire() on a Lock or Semaphore that already holds (as python-redis-lock's):
    release it first. One hold, one renewal."""

    def __init__(self, message: str, key: Optional[str] = None) -> None:
        super().__init__(message)
        self.key = key


class LockLost(UniqueError):
    """A held lock was found gone: its lease ran out (renewal came too late or
    the server was unreachable) or it was removed by REAP, DEL or a failover."""

    def __init__(self, message: str, key: Optional[str] = None) -> None:
        super().__init__(message)
        self.key = key


class DuplicateTask(LockNotAcquired):
    """A unique task or job was refused because another one holds its lock
    (``on_conflict="raise"``). ``existing`` is the job id of a holder, if any."""

    def __init__(self, message: str, key: Optional[str] = None, existing: Optional[str] = None) -> None:
        super().__init__(message, key)
        self.existing = existing


_CODES = ("WRONGTYPE", "OOM", "READONLY", "NOSCRIPT", "BUSY", "NOPERM", "MOVED", "ASK",
          "CLUSTERDOWN", "LOADING", "MASTERDOWN", "NOREPLICAS", "EXECABORT", "CROSSSLOT", "TRYAGAIN")


def translate(exc: ResponseError) -> Exception:
    """The redis_unique exception for a redis-py ResponseError."""
    if isinstance(exc, UniqueError):
        return exc
    message = str(exc)
    lowered = message.lower()
    if "unknown command" in lowered and "unique." in lowered:
        return ModuleNotLoaded("%s (%s)" % (LOAD_HINT, message), "ERR")
    first = message.split(" ", 1)[0]
    if first.isupper() and first.isalpha() and len(first) > 1 and (first in _CODES or first.endswith("ERR")):
        return CommandError(message, first)
    # redis-py strips "ERR " and maps some codes to classes of their own.
    name = type(exc).__name__
    code = {"OutOfMemoryError": "OOM", "ReadOnlyError": "READONLY", "NoPermissionError": "NOPERM",
            "NoScriptError": "NOSCRIPT", "BusyLoadingError": "LOADING", "ExecAbortError": "EXECABORT",
            "ClusterDownError": "CLUSTERDOWN", "TryAgainError": "TRYAGAIN", "MasterDownError": "MASTERDOWN"}.get(name, "ERR")
    return CommandError(message, code)
