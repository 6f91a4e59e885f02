"""A real redis-server with the freshly built module, on a free port in a temp dir.

REDIS_SERVER: the server binary (default: redis-server on PATH).
REDIS_UNIQUE_MODULE: the module (default: <repo>/target/release/libredis_unique.so).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator, List, Optional, Tuple

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

ROOT = Path(__file__).resolve().parents[3]
MODULE = os.environ.get("REDIS_UNIQUE_MODULE", str(ROOT / "target" / "release" / "libredis_unique.so"))
SERVER = os.environ.get("REDIS_SERVER", "redis-server")
# "functions": the session's server starts WITHOUT the module, so the clients (and the Celery
# and RQ workers) take the Functions library, as on a managed Redis (make test-python-functions).
BACKEND = os.environ.get("REDIS_UNIQUE_TEST_BACKEND", "module")


def pytest_configure(config: Any) -> None:
    config.addinivalue_line("markers", "module_only(reason): needs the module, skipped on the Functions library")


def pytest_collection_modifyitems(config: Any, items: List[Any]) -> None:
    if BACKEND != "functions":
        return
    for item in items:
        marker = item.get_closest_marker("module_only")
        if marker is not None:
            item.add_marker(pytest.mark.skip(reason="needs the module: %s" % marker.args[0]))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# How long a test waits for a condition before it fails. A server, a worker or a task comes
# in well under a second on an idle machine, but CI runs on 2 shared cores with other suites,
# background builds and servers under valgrind: the bound only costs time when the test fails
# anyway, so it is generous. Tests poll with wait_for, never a fixed sleep.
PATIENCE = 60.0


def wait_for(condition: Callable[[], object], timeout: float = PATIENCE, interval: float = 0.01,
             message: str = "condition") -> object:
    """Bounded polling: the first truthy value of condition(), or a failure."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %.1fs waiting for %s" % (timeout, message))
        time.sleep(interval)


class Server:
    def __init__(self, module: Optional[str] = MODULE, extra: Optional[List[str]] = None) -> None:
        if module is not None and not os.path.exists(module):
            pytest.exit("module not built: %s (run `cargo build --release --lib`)" % module, 2)
        self.dir = tempfile.mkdtemp(prefix="redis-unique-py-")
        args = ["--bind", "127.0.0.1", "--dir", self.dir, "--save", "", "--appendonly", "no", "--logfile", "redis.log"]
        if module is not None:
            args += ["--loadmodule", module]
        args += extra or []
        # Another process (CI runs suites side by side, each starting servers) can take the
        # free port between free_port()'s probe and the server's bind: the server then exits,
        # or the probe would reach the other process's server. So each try picks a new port,
        # counts as ready only when the server answering there is this child, and leaves its
        # log as redis-try-N.log in the same directory.
        for attempt in range(1, 6):
            self.port = free_port()
            self.proc = subprocess.Popen([SERVER, "--port", str(self.port)] + args,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if self._ready():
                break
            self.proc.kill()
            self.proc.wait()
            log = Path(self.dir, "redis.log")
            if log.exists():
                log.rename(Path(self.dir, "redis-try-%d.log" % attempt))
        else:
            last = Path(self.dir, "redis-try-5.log")
            raise RuntimeError("%s did not start in 5 tries; see %s/redis-try-*.log, the last:\n%s"
                               % (SERVER, self.dir, last.read_text() if last.exists() else "(no log)"))
        self.url = "redis://127.0.0.1:%d/0" % self.port

    def _ready(self) -> bool:
        """Whether this try's server comes up (answers PING, and INFO gives its pid) within
        PATIENCE; False once the process exits or another process answers on the port."""
        # No retries inside redis-py (with backoff by default since redis-py 6): this loop polls.
        probe = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5, retry=Retry(NoBackoff(), 0))
        deadline = time.monotonic() + PATIENCE
        try:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    return False
                try:
                    if probe.ping():
                        return probe.info("server").get("process_id") == self.proc.pid
                except redis.RedisError:
                    pass
                time.sleep(0.01)
            return False
        finally:
            probe.close()

    def client(self, **kwargs: object) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, **kwargs)  # type: ignore[arg-type]

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    s = Server(module=None) if BACKEND == "functions" else Server()
    yield s
    s.stop()


@pytest.fixture()
def r(server: Server) -> Iterator[redis.Redis]:
    conn = server.client()
    # SYNC: Valkey frees a plain FLUSHALL on a background thread, so the last test's
    # values could still count in the server-wide gauges when this test reads them.
    conn.execute_command("FLUSHALL", "SYNC")
    if BACKEND != "functions":  # the library's counters went with FLUSHALL
        conn.execute_command("UNIQUE.METRICS", "RESET")
    yield conn
    conn.close()


# The database of the Celery tests' app (tests/celery_app.py). Every test imports the one
# celery_app module, whose app is bound to the URL of the first import: all use this one.
CELERY_DB = 2
HERE = Path(__file__).resolve().parent


@contextlib.contextmanager
def celery_workers(server: Server, specs: List[Tuple[str, str, int]]) -> Iterator[Tuple[Any, List[subprocess.Popen]]]:
    """Real Celery worker processes (prefork) of tests/celery_app.py, one per ``(name, queue,
    concurrency)``, named ``name@<host>``, logging to the server's directory, started together:
    the app module and the processes, once every worker answers a ping; stopped at the end."""
    os.environ["CELERY_TEST_URL"] = "redis://127.0.0.1:%d/%d" % (server.port, CELERY_DB)
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    import celery_app

    logs, workers = [], []
    try:
        for name, queue, concurrency in specs:
            log = open(Path(server.dir, "celery-%s.log" % name), "w")
            logs.append(log)
            workers.append(subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "celery_app", "worker", "-P", "prefork", "-c",
                 str(concurrency), "-Q", queue, "-n", name + "@%h", "-E", "--without-gossip", "--without-mingle",
                 "-l", "info"],
                cwd=str(HERE), env=dict(os.environ), stdout=log, stderr=subprocess.STDOUT))
        for name, _, _ in specs:
            node = "%s@%s" % (name, os.uname().nodename)
            wait_for(lambda: celery_app.app.control.ping(destination=[node], timeout=0.5),
                     timeout=60, interval=0.2, message="the Celery worker %s" % node)
        yield celery_app, workers
    finally:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            try:
                worker.wait(30)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
        for log in logs:
            log.close()


@contextlib.contextmanager
def celery_worker(server: Server, name: str, queue: str, concurrency: int) -> Iterator[Tuple[Any, subprocess.Popen]]:
    """One real Celery worker process (see :func:`celery_workers`)."""
    with celery_workers(server, [(name, queue, concurrency)]) as (celery_app, workers):
        yield celery_app, workers[0]


class CutProxy:
    """A TCP proxy in front of the server whose link a test cuts and restores: cut()
    closes every proxied connection and closes each new one at once (the client sees
    its connection reset or closed, as when a network link drops); restore() lets new
    connections through again. ``refused`` counts the connections closed while cut."""

    def __init__(self, target_port: int) -> None:
        import threading

        self.target = target_port
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.refused = 0
        self._cut = threading.Event()
        self._mutex = threading.Lock()
        self._socks: set = set()
        self._threading = threading
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                down, _ = self.listener.accept()
            except OSError:
                return
            if self._cut.is_set():
                self.refused += 1
                down.close()
                continue
            try:
                up = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                down.close()
                continue
            with self._mutex:
                self._socks.update((down, up))
            for a, b in ((down, up), (up, down)):
                self._threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        try:
            while True:
                data = a.recv(65536)
                if not data:
                    break
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                self._drop(s)

    def _drop(self, s: socket.socket) -> None:
        with self._mutex:
            self._socks.discard(s)
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()

    def cut(self) -> None:
        self._cut.set()
        with self._mutex:
            socks = list(self._socks)
        for s in socks:
            self._drop(s)

    def restore(self) -> None:
        self._cut.clear()

    def close(self) -> None:
        self.listener.close()
        self.cut()


@pytest.fixture()
def proxy(server: Server) -> Iterator[CutProxy]:
    p = CutProxy(server.port)
    yield p
    p.close()
