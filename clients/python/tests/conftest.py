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

ROOT = Path(__file__).resolve().parents[3]
MODULE = os.environ.get("REDIS_UNIQUE_MODULE", str(ROOT / "target" / "release" / "libredis_unique.so"))
SERVER = os.environ.get("REDIS_SERVER", "redis-server")


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
        self.port = free_port()
        args = [SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir,
                "--save", "", "--appendonly", "no", "--logfile", "redis.log"]
        if module is not None:
            args += ["--loadmodule", module]
        self.proc = subprocess.Popen(args + (extra or []), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.url = "redis://127.0.0.1:%d/0" % self.port
        probe = redis.Redis(port=self.port)

        def up() -> bool:
            if self.proc.poll() is not None:
                log = Path(self.dir, "redis.log")
                raise RuntimeError("redis-server exited: %s" % (log.read_text() if log.exists() else "?"))
            try:
                return bool(probe.ping())
            except redis.ConnectionError:
                return False

        wait_for(up, message="redis-server to start")
        probe.close()

    def client(self, **kwargs: object) -> redis.Redis:
        return redis.Redis(port=self.port, **kwargs)  # type: ignore[arg-type]

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    s = Server()
    yield s
    s.stop()


@pytest.fixture()
def r(server: Server) -> Iterator[redis.Redis]:
    conn = server.client()
    conn.flushall()
    conn.execute_command("UNIQUE.METRICS", "RESET")
    yield conn
    conn.close()


# The database of the Celery tests' app (tests/celery_app.py). Every test imports the one
# celery_app module, whose app is bound to the URL of the first import: all use this one.
CELERY_DB = 2
HERE = Path(__file__).resolve().parent


@contextlib.contextmanager
def celery_worker(server: Server, name: str, queue: str, concurrency: int) -> Iterator[Tuple[Any, subprocess.Popen]]:
    """A real Celery worker process (prefork) of tests/celery_app.py on ``queue``, named
    ``name@<host>``, logging to the server's directory: the app module and the process,
    once the worker answers a ping; stopped at the end."""
    os.environ["CELERY_TEST_URL"] = "redis://127.0.0.1:%d/%d" % (server.port, CELERY_DB)
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    import celery_app

    log = open(Path(server.dir, "celery-%s.log" % name), "w")
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "celery_app", "worker", "-P", "prefork", "-c", str(concurrency),
         "-Q", queue, "-n", name + "@%h", "-E", "--without-gossip", "--without-mingle", "-l", "info"],
        cwd=str(HERE), env=dict(os.environ), stdout=log, stderr=subprocess.STDOUT)
    try:
        node = "%s@%s" % (name, os.uname().nodename)
        wait_for(lambda: celery_app.app.control.ping(destination=[node], timeout=0.5),
                 timeout=60, interval=0.2, message="the Celery worker %s" % node)
        yield celery_app, worker
    finally:
        worker.terminate()
        try:
            worker.wait(30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
        log.close()
