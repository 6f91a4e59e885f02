"""The harness's Server when its free port is taken before the server binds it."""

import socket
import tempfile
from pathlib import Path

import pytest

import conftest
from conftest import SERVER, Server


def held_port() -> socket.socket:
    """A port bound (not listening): the server cannot bind it, and nothing answers there."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    return s


def test_a_taken_port_is_retried_on_a_new_one(server, monkeypatch):
    free_port = conftest.free_port
    with held_port() as held:
        taken = held.getsockname()[1]
        # Try 1: the port is held, the server exits; try 2: another server answers there.
        ports = iter([taken, server.port])
        monkeypatch.setattr(conftest, "free_port", lambda: next(ports, None) or free_port())
        s = Server()
    client = s.client()
    try:
        assert s.port not in (taken, server.port)
        assert client.info("server")["process_id"] == s.proc.pid
        assert "in use" in Path(s.dir, "redis-try-1.log").read_text()
    finally:
        client.close()
        s.stop()


def test_five_failed_tries_name_the_binary_and_the_logs(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with held_port() as held:
        monkeypatch.setattr(conftest, "free_port", lambda: held.getsockname()[1])
        with pytest.raises(RuntimeError) as e:
            Server()
    assert SERVER in str(e.value) and "redis-try-*.log" in str(e.value)
    (logs,) = tmp_path.iterdir()
    assert sorted(p.name for p in logs.iterdir()) == ["redis-try-%d.log" % i for i in range(1, 6)]
