"""redis-unique: native job locks for Redis, from Python.

``Client`` wraps a redis-py client with one method per UNIQUE.* command;
``Lock``, ``Semaphore`` and ``RWLock`` (``read()`` / ``write()``) are context
managers whose lease renews itself; ``MultiLock`` holds several keys,
each with its limit, taken in one atomic grant.
``redis_unique.asyncio`` has the same over ``redis.asyncio``;
``redis_unique.celery`` and ``redis_unique.rq`` give unique tasks and jobs.
"""

from ._protocol import LOCK_TYPES, GroupWaiters, Holder, Rate, RateState
from .client import Client, Pipeline
from .errors import (AlreadyAcquired, CommandError, DuplicateTask, LockLost, LockNotAcquired, ModuleNotLoaded,
                     ModuleVersionMismatch, UniqueError)
from .lock import Lock, RWLock, Semaphore
from .multilock import MultiLock

__version__ = "0.1.0"

__all__ = [
    "AlreadyAcquired",
    "Client",
    "Pipeline",
    "Holder",
    "GroupWaiters",
    "Rate",
    "RateState",
    "Lock",
    "Semaphore",
    "RWLock",
    "MultiLock",
    "LOCK_TYPES",
    "UniqueError",
    "CommandError",
    "ModuleNotLoaded",
    "ModuleVersionMismatch",
    "LockNotAcquired",
    "LockLost",
    "DuplicateTask",
]
