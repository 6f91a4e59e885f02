"""A real redis-server with the freshly built module, on a free port in a temp dir.

REDIS_SERVER: the server binary (default: redis-server on PATH).
REDIS_UNIQUE_MODULE: the module (default: <repo>/target/release/libredis_unique.so).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator, List, Optional

import pytest
import redis

ROOT = Path(__file__).resolve().parents[3]
MODULE = os.environ.get("REDIS_UNIQUE_MODULE", str(ROOT / "target" / "release" / "libredis_unique.so"))
SERVER = os.environ.get("REDIS_SERVER", "redis-server")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(condition: Callable[[], object], timeout: float = 10.0, interval: float = 0.01,
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
