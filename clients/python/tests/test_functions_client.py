"""The client on a server without the module: it finds that out by itself, loads the
Functions library (or says what an operator runs), and a user's code is the same; the
conformance table's calls give the same value on both backends."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest
import redis
import redis.asyncio as aioredis

from redis_unique import Client, CommandError, Lock, Semaphore, _functions as fn
from redis_unique import asyncio as aio
from redis_unique._functions import FunctionsNotLoaded, NotInFunctions

from conftest import Server, wait_for
from test_conformance import ARGV, VALUE

TABLE = json.loads((Path(__file__).resolve().parents[2] / "conformance" / "table.json").read_text())


@pytest.fixture(scope="module")
def plain() -> Iterator[Server]:
    s = Server(module=None)
    yield s
    s.stop()


@pytest.fixture()
def pr(plain: Server) -> Iterator[redis.Redis]:
    conn = plain.client()
    conn.execute_command("FLUSHALL", "SYNC")
    conn.execute_command("FUNCTION", "FLUSH", "SYNC")
    yield conn
    conn.close()


def test_the_client_loads_the_library_and_locks_on_a_server_without_the_module(pr):
    assert pr.execute_command("FUNCTION", "LIST") == []
    c = Client(pr)
    token = c.lock("k", "a", ttl=30)
    assert isinstance(token, int) and c.lock("k", "b") is None
    assert fn.backend(pr) == "functions"
    assert [h.jid for h in c.holders("k")] == ["a"]
    assert c.unlock("k", "a") and not c.unlock("k", "a")
    assert pr.execute_command("FCALL_RO", "unique_version", 0) == fn.library_version()


def test_an_older_library_is_replaced_and_a_lost_one_loaded_again(pr, plain):
    old = fn.library_source().replace("local VERSION = %d" % fn.library_version(), "local VERSION = 0")
    pr.execute_command("FUNCTION", "LOAD", "REPLACE", old)
    c = Client(plain.client())
    assert c.lock("k", "a") is not None
    assert pr.execute_command("FCALL_RO", "unique_version", 0) == fn.library_version()
    # after a failover to a node without it (here: flushed), the next call loads it again
    pr.execute_command("FUNCTION", "FLUSH", "SYNC")
    assert c.lock("k2", "a") is not None


def test_a_user_who_may_not_load_it_is_told_the_operators_command(pr, plain):
    pr.execute_command("ACL", "SETUSER", "app", "on", ">pw", "~*", "+@all", "-function")
    try:
        c = Client(redis.Redis(host="127.0.0.1", port=plain.port, username="app", password="pw"))
        with pytest.raises(FunctionsNotLoaded) as exc:
            c.lock("k", "a")
        assert "python -m redis_unique functions load redis://" in str(exc.value)
        # the operator loads it once, with the package's command
        out = subprocess.run([sys.executable, "-m", "redis_unique", "functions", "load", plain.url],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert "loaded redis_unique library version" in out.stdout
        c = Client(redis.Redis(host="127.0.0.1", port=plain.port, username="app", password="pw"))
        assert c.lock("k", "a") is not None
    finally:
        pr.execute_command("ACL", "DELUSER", "app")


def test_a_setting_forces_either_backend(pr, server, monkeypatch):
    monkeypatch.setenv("REDIS_UNIQUE_BACKEND", "functions")
    fn.set_backend(None)
    try:
        # on a server with the module, forced to the library: FCALL, not UNIQUE.LOCK
        with_module = server.client()
        with_module.execute_command("FLUSHALL", "SYNC")
        Client(with_module).lock("forced", "a")
        assert with_module.type("forced") == b"hash"
        assert with_module.execute_command("UNIQUE.LOCKEDBY", "other") == []
    finally:
        monkeypatch.delenv("REDIS_UNIQUE_BACKEND")
        fn.set_backend(None)
    with pytest.raises(ValueError):
        fn.set_backend("lua")


def test_locks_that_renew_themselves_and_semaphores(pr):
    with Lock(pr, "job:1", ttl=0.3) as held:
        token = held.token
        # held past three of its leases: the renewal runs through the library too
        wait_for(lambda: Client(pr).holders("job:1")[0].expires_at_ms > Client(pr).holders("job:1")[0]
                 .acquired_at_ms + 300, message="a renewal")
        assert Client(pr).holders("job:1")[0].token == token
    assert Client(pr).holders("job:1") == []
    with Semaphore(pr, "pool", 2, ttl=30), Semaphore(pr, "pool", 2, ttl=30):
        assert len(Client(pr).holders("pool")) == 2
        assert Client(pr).lock("pool", "third", limit=2) is None


def test_a_wait_is_served_by_the_release(pr, plain):
    import threading

    c = Client(pr)
    c.lock("w", "holder", ttl=60)
    got = {}

    def waiter() -> None:
        got["token"] = Client(plain.client()).lock("w", "waiter", ttl=60, wait=30)

    t = threading.Thread(target=waiter)
    t.start()
    wait_for(lambda: c.waiters("w") == 1, message="the waiter to queue")
    assert c.unlock("w", "holder")
    t.join(30)
    assert isinstance(got["token"], int) and [h.jid for h in c.holders("w")] == ["waiter"]


def test_reap_by_owner_and_metrics(pr):
    c = Client(pr)
    c.lock("a", "j1", owner="dead")
    c.lock("b", "j2", owner="dead")
    c.lock("c", "j3", owner="alive")
    assert c.reap(owner="dead") == 2
    assert [h.jid for h in c.holders("c")] == ["j3"] and c.holders("a") == []
    m = c.metrics()
    assert m["total"]["reaped"] == 2 and m["total"]["acquired"] == 3
    with pytest.raises(CommandError, match="MINUTES needs the redis-unique module"):
        c.metrics(minutes=5)


def test_lockall_is_refused_with_an_error_naming_the_module(pr):
    c = Client(pr)
    with pytest.raises(NotInFunctions, match="needs the redis-unique module"):
        c.lock_all(["{a}:x", "{a}:y"], "j")
    assert pr.keys("*") == []


def test_pipelines_and_asyncio(pr, plain):
    c = Client(pr)
    with c.pipeline() as pipe:
        replies = pipe.lock("p", "a", ttl=30).lock("p", "b").unlock("p", "a").execute()
    assert isinstance(replies[0], int) and replies[1:] == [None, True]

    async def main() -> None:
        conn = aioredis.Redis(host="127.0.0.1", port=plain.port)
        ac = aio.Client(conn)
        assert await ac.lock("q", "a", ttl=30) is not None
        assert await ac.lock("q", "b") is None
        pipe = ac.pipeline()
        pipe.lock("q", "c").unlock("q", "a")
        assert (await pipe.execute())[1] is True
        async with aio.Lock(conn, "r", ttl=5) as held:
            assert held.token
        await conn.aclose()

    asyncio.run(asyncio.wait_for(main(), 60))


# ---- The conformance table: every call on both backends --------------------------

CALLS = [c for c in TABLE["calls"]]


def run_row(conn: redis.Redis, case: Any) -> Any:
    args = [str(a) for a in ARGV[case["call"]](case["args"])]
    try:
        reply = Client(conn)._call(*args)
    except redis.ResponseError as exc:
        return ("error", str(exc).split(" (")[0])
    parse = VALUE.get(case["call"], lambda r: r)
    value = parse(reply)
    if case["call"] == "lock":
        return "token" if isinstance(value, int) else value
    if case["call"] == "holders":
        return [(h["jid"], h["type"], h["owner"], h["meta"], h["group"], h["mode"]) for h in value]
    return value


@pytest.mark.parametrize("case", CALLS, ids=[c["name"] for c in CALLS])
def test_every_call_of_the_table_on_both_backends(case, pr, r):
    # a fresh key, one holder there first for the calls that read
    for conn in (r, pr):
        Client(conn).lock("k", "someone", limit=0, ttl=60, owner="o", meta={"a": 1})
    if case.get("functions") == "refused":
        with pytest.raises(NotInFunctions, match="needs the redis-unique module"):
            Client(pr)._call(*[str(a) for a in ARGV[case["call"]](case["args"])])
        return
    assert run_row(pr, case) == run_row(r, case)


def test_the_readmes_example_without_the_module(pr, plain):
    import re

    from test_readme import checked

    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    start = text.index("## Without the module")
    section = text[start:text.index("\n## ", start + 5)]
    [code] = re.findall(r"```python\n(.*?)```", section, re.S)
    code = code.replace("port=6379", "port=%d" % plain.port)
    exec(compile(checked(code), "README.md (Without the module)", "exec"), {"__name__": "readme_functions"})
    assert pr.execute_command("FCALL_RO", "unique_version", 0) == fn.library_version()
