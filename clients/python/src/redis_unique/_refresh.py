"""The one loop that keeps a held lease alive, for every lock of this package: Lock and
Semaphore (a thread), their asyncio flavour (a task), and through them Celery tasks and RQ
jobs. The rule is clients/conformance's (README "Renewal"): renew every third of the lease
with only what a renewal needs; the hold's own token back means kept, anything else means
lost at once; no answer means try again every tenth of the lease until the lease would have
ended, then lost."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any, Callable, Dict, Optional, Tuple

from redis.exceptions import ConnectionError, TimeoutError

from . import _protocol as p
from .errors import CommandError, LockLost

log = logging.getLogger("redis_unique")

OnLost = Callable[[LockLost], Any]

KEPT, RETRY, LOST, LOST_UNLOCK = "kept", "retry", "lost", "lost_unlock"


def error_outcome(exc: BaseException) -> str:
    """``retry`` for no answer or a server that cannot answer now, ``lost`` for any
    other error reply."""
    if isinstance(exc, CommandError):
        return RETRY if exc.code in p.RENEW_RETRY_CODES else LOST
    if isinstance(exc, (ConnectionError, TimeoutError, OSError)):
        return RETRY  # redis-py's LOADING (BusyLoadingError) is a ConnectionError too
    return LOST


class RefreshLoop:
    """Renews ``jid``'s hold of ``key`` (fencing token ``token``, lease ``lease_ms``,
    granted by a LOCK sent at ``sent_at``, a ``time.monotonic()``) until stopped or lost.

    ``renewals`` counts the renewals that kept it and ``failures`` the tries that got no
    answer in a row; ``lost`` is the :class:`LockLost` once it is lost, reported at once:
    a warning on the ``redis_unique`` logger and ``on_lost(error)``, called once from the
    loop's thread or task. ``update(type=, owner=, meta=)`` sends a change with the next
    renewal (once)."""

    # Why a renewal answered nil.
    refused = "another holder has it (the lease ran out, or the lock was reaped or deleted)"

    def __init__(self, client: Any, key: Any, jid: Any, token: int, lease_ms: int, *, sent_at: float,
                 on_lost: Optional[OnLost] = None, name: str = "lock") -> None:
        self.client = client
        self.key = key
        self.jid = jid
        self.token = token
        self.lease_ms = lease_ms
        self.interval = p.renew_interval_ms(lease_ms) / 1000
        self.retry = p.renew_retry_ms(lease_ms) / 1000
        self.deadline = sent_at + lease_ms / 1000  # the lease started no earlier than the send
        self.on_lost = on_lost
        self.name = name
        self.renewals = 0
        self.failures = 0
        self.lost: Optional[LockLost] = None
        self._changes: Dict[str, Any] = {}
        self._mutex = threading.Lock()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._task: Optional["asyncio.Task[None]"] = None

    # -- the rule, shared by both drivers -------------------------------------------------

    def update(self, **changes: Any) -> None:
        """TYPE, OWNER or META to send with the next renewal (None: unchanged)."""
        unknown = set(changes) - {"type", "owner", "meta"}
        if unknown:
            raise TypeError("a renewal can change type, owner and meta, not %s" % ", ".join(sorted(unknown)))
        with self._mutex:
            self._changes.update({k: v for k, v in changes.items() if v is not None})

    def _next(self) -> Tuple[Tuple[Any, ...], Dict[str, Any], float]:
        with self._mutex:
            changes, self._changes = self._changes, {}
        return self._renewal_args(changes), changes, time.monotonic()

    # What differs for a hold of several keys (see MultiRefreshLoop): the renewal's command,
    # what its reply means, and the release of a hold a late renewal took.

    def _renewal_args(self, changes: Dict[str, Any]) -> Tuple[Any, ...]:
        return p.renewal_args(self.key, self.jid, self.lease_ms, **changes)

    def _outcome(self, reply: Any) -> str:
        return p.renewal_outcome(self.token, reply)

    def _took_hold(self, reply: Any) -> bool:
        return p.parse_token(reply) is not None

    def _unlock_call(self, reply: Any) -> Any:
        """The release of the hold a late renewal took, by the token it replied (a fenced
        unlock: never a newer hold of the same jid); a coroutine with the asyncio client."""
        return self.client.unlock(self.key, self.jid, token=p.parse_token(reply))

    def _refused_call(self) -> Any:
        """What a refused renewal leaves to release (None: nothing; a hold of several keys
        releases the keys still held, see MultiRefreshLoop)."""
        return None

    def _delay(self) -> Optional[float]:
        """Seconds to the next try; None when the lease has ended without an answer."""
        if not self.failures:
            return self.interval
        left = self.deadline - time.monotonic()
        return None if left <= 0 else min(self.retry, left)

    def _settle(self, changes: Dict[str, Any], sent_at: float, reply: Any = None,
                error: Optional[BaseException] = None) -> str:
        outcome = error_outcome(error) if error is not None else self._outcome(reply)
        if outcome == KEPT:
            self.renewals += 1
            self.failures = 0
            self.deadline = sent_at + self.lease_ms / 1000
        elif outcome == RETRY:
            self.failures += 1
            with self._mutex:  # not sent: send it with the next try (unless changed again since)
                self._changes = dict(changes, **self._changes)
            log.warning("redis-unique: renewing %r failed, trying again until its lease ends (in %.3gs): %s",
                        self.key, max(0.0, self.deadline - time.monotonic()), error)
        elif outcome == LOST_UNLOCK:
            self._lose("the lease ran out before the renewal, which took the lock again under another fencing "
                       "token (given up)")
        elif error is not None:
            self._lose("the renewal was refused: %s" % error)
        else:
            self._lose(self.refused)
        return outcome

    def _expired(self) -> None:
        self._lose("no renewal was answered before the lease ended (%d tries)" % self.failures)

    def _lose(self, why: str) -> None:
        with self._mutex:  # once: the loop and its deadline watchdog may both find it
            if self.lost is not None:
                return
            self.lost = LockLost("lost the %s %r: %s" % (self.name, self.key, why), self.key)
        log.warning("redis-unique: %s", self.lost)
        if self.on_lost is not None:
            try:
                self.on_lost(self.lost)
            except Exception:  # noqa: BLE001 - the user's callback must not kill the loop's report
                log.exception("redis-unique: on_lost raised")

    # -- a thread, for the sync client --------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="redis-unique renew %s" % (self.key,), daemon=True)
        self._thread.start()

    def _run(self) -> None:
        delay = self._delay()
        while delay is not None and not self._stop.wait(delay):
            args, changes, sent_at = self._next()
            # A call that hangs (redis-py retries a dropped connection for seconds) must not
            # hold back the news: the lock is lost when the lease ends, answered or not.
            watchdog = threading.Timer(max(0.0, self.deadline - sent_at), self._overdue)
            watchdog.daemon = True
            watchdog.start()
            try:
                reply, error = self.client._call(*args), None
            except Exception as exc:  # noqa: BLE001 - classified by the rule
                reply, error = None, exc
            finally:
                watchdog.cancel()
            if self.lost is not None:  # told already: a late renewal is given up
                if error is None and self._took_hold(reply):
                    self._unlock(reply)
                return
            outcome = self._settle(changes, sent_at, reply=reply, error=error)
            if outcome == LOST_UNLOCK:
                self._unlock(reply)
            elif outcome == LOST:
                self._best_effort(self._refused_call)
            if outcome not in (KEPT, RETRY):
                return
            delay = self._delay()
        if delay is None:
            self._expired()

    def _overdue(self) -> None:
        if not self._stop.is_set():
            self._lose("no renewal was answered before the lease ended")

    def _unlock(self, reply: Any) -> None:
        self._best_effort(lambda: self._unlock_call(reply))

    @staticmethod
    def _best_effort(call: Callable[[], Any]) -> None:
        try:
            call()
        except Exception:  # noqa: BLE001 - best effort: the lease ends it anyway
            pass

    def stop(self) -> None:
        """Stops renewing (waits for a renewal under way)."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    # -- a task, for the asyncio client -------------------------------------------------

    def start_task(self) -> None:
        self._task = asyncio.ensure_future(self._run_task())

    async def _run_task(self) -> None:
        delay = self._delay()
        while delay is not None:
            await asyncio.sleep(delay)
            args, changes, sent_at = self._next()
            reply: Any = None
            try:
                # Not past the end of the lease: a hanging call is lost news otherwise.
                reply = await asyncio.wait_for(self.client._call(*args), max(0.001, self.deadline - sent_at))
            except asyncio.TimeoutError:
                self._lose("no renewal was answered before the lease ended")
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - classified by the rule
                outcome = self._settle(changes, sent_at, error=exc)
            else:
                outcome = self._settle(changes, sent_at, reply=reply)
            release = (lambda: self._unlock_call(reply)) if outcome == LOST_UNLOCK else (
                self._refused_call if outcome == LOST else None)
            if release is not None:
                try:
                    pending = release()
                    if pending is not None:
                        await pending
                except Exception:  # noqa: BLE001 - best effort
                    pass
            if outcome not in (KEPT, RETRY):
                return
            delay = self._delay()
        self._expired()

    async def stop_task(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
