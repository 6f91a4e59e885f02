"""Tenants take turns the same way on both backends: the same calls queue on a key held by
the test, on a server with the module and on one with the Functions library only, and the
order they are served in is the same, and is the turns of docs/commands.md ("Turns among
groups that hold alike"): among the groups holding the fewest for their weight, the
earliest finish tag goes next.

Each waiter is a thread blocked in `lock(..., wait=...)`, confirmed waiting in the server
before the next is sent; served, it records its name and releases, so on a key of LIMIT 1
the order recorded is the order of the grants."""

from __future__ import annotations

import threading
from typing import Iterator, List, Optional, Tuple

import pytest

from redis_unique import Client, _functions as fn

from conftest import Server, wait_for

# name -> group (its first letter) and weight; the order they are queued in; the order served.
SHAPES = {
    "a backlog queued first": (
        ["A1", "A2", "A3", "B1", "B2", "C1"], {},
        ["A1", "B1", "C1", "A2", "B2", "A3"]),
    "short jobs": (
        ["A1", "A2", "A3", "A4", "A5", "A6", "B1"], {},
        ["A1", "B1", "A2", "A3", "A4", "A5", "A6"]),
    # A of weight 2 takes two turns to B's and C's one, interleaved within a round
    "weighted 2:1:1": (
        ["A1", "A2", "A3", "A4", "A5", "A6", "B1", "B2", "B3", "C1", "C2", "C3"], {"A": 2},
        ["A1", "B1", "C1", "A2", "A3", "B2", "C2", "A4", "A5", "B3", "C3", "A6"]),
    # no group: arrival order
    "without groups": (
        ["A1", "A2", "B1", "A3", "C1"], None,
        ["A1", "A2", "B1", "A3", "C1"]),
}


@pytest.fixture(scope="module")
def servers() -> Iterator[Tuple[Server, Server]]:
    with_module, library = Server(), Server(module=None)
    yield with_module, library
    with_module.stop()
    library.stop()


def served_order(server: Server, key: str, calls: List[str], weights: Optional[dict]) -> List[str]:
    conn = server.client()
    c = Client(conn)
    ran: List[str] = []
    errors: List[BaseException] = []

    def waiter(name: str) -> None:
        try:
            mine = Client(server.client())
            options = {} if weights is None else {"group": name[0], "weight": weights.get(name[0], 1)}
            token = mine.lock(key, name, limit=1, ttl=60, wait=60, **options)
            assert token is not None, "%s was not served" % name
            ran.append(name)
            assert mine.unlock(key, name)
        except BaseException as exc:  # reported by the test, not lost in the thread
            errors.append(exc)

    try:
        assert c.lock(key, "gate", limit=1, ttl=60) is not None
        threads = []
        for n, name in enumerate(calls, 1):
            t = threading.Thread(target=waiter, args=(name,), daemon=True)
            t.start()
            threads.append(t)
            wait_for(lambda: c.waiters(key) == n, timeout=30, message="%s to wait" % name)
        assert c.unlock(key, "gate")
        for t in threads:
            t.join(timeout=60)
        assert not errors, errors
        assert len(ran) == len(calls), ran
        # the turns leave nothing behind once nobody waits
        wait_for(lambda: c.waiters(key) == 0 and c.holders(key) == [], message="the key to be free")
        return ran
    finally:
        conn.close()


@pytest.mark.parametrize("shape", list(SHAPES))
def test_both_backends_serve_the_groups_in_the_same_turns(servers, shape):
    calls, weights, expected = SHAPES[shape]
    with_module, library = servers
    key = "turns:" + shape.replace(" ", "-")
    on_module = served_order(with_module, key, calls, weights)
    on_library = served_order(library, key, calls, weights)
    assert fn.backend(library.client()) == "functions"
    assert on_library == on_module, "library %r, module %r" % (on_library, on_module)
    assert on_library == expected


def test_the_library_keeps_the_turns_only_while_groups_wait(servers):
    _, library = servers
    conn = library.client()
    c = Client(conn)
    key = "turns:state"
    assert c.lock(key, "gate", limit=1, ttl=60) is not None
    done = threading.Event()

    def waiter() -> None:
        Client(library.client()).lock(key, "A1", limit=1, ttl=60, wait=60, group="A")
        done.set()

    threading.Thread(target=waiter, daemon=True).start()
    wait_for(lambda: c.waiters(key) == 1, message="A1 to wait")
    fields = set(conn.hkeys(key))
    assert {b"~c", b"c:A"} <= fields, fields
    assert c.unlock(key, "gate")
    wait_for(done.is_set, message="A1 to be served")
    # served, A1 holds; no group waits: neither its start nor the clock is kept
    wait_for(lambda: not {b"~c", b"c:A"} & set(conn.hkeys(key)), message="the turns to go")
    assert [h.jid for h in c.holders(key)] == ["A1"]
    conn.close()


def test_the_library_moves_its_clock_back_before_tags_leave_a_doubles_exact_integers(servers):
    # Tags are kept below 2^51: a grant past it moves every start and the clock back
    # together, so the order stands. The tags are set just below it while A1, A2 and B1 wait.
    _, library = servers
    conn = library.client()
    c = Client(conn)
    key = "turns:rebase"
    ran: List[str] = []
    release = threading.Event()
    assert c.lock(key, "gate", limit=1, ttl=60) is not None

    def waiter(name: str) -> None:
        mine = Client(library.client())
        assert mine.lock(key, name, limit=1, ttl=60, wait=60, group=name[0]) is not None
        ran.append(name)
        release.wait(60)
        mine.unlock(key, name)

    threads = []
    for n, name in enumerate(["A1", "A2", "B1"], 1):
        threads.append(threading.Thread(target=waiter, args=(name,), daemon=True))
        threads[-1].start()
        wait_for(lambda: c.waiters(key) == n, message="%s to wait" % name)
    near = 2 ** 51 - 10
    for field in (b"~c", b"c:A", b"c:B"):
        finish, stamp = conn.hget(key, field).split()
        conn.hset(key, field, "%d %s" % (int(finish) + near, stamp.decode()))
    assert c.unlock(key, "gate")
    wait_for(lambda: ran == ["A1"], message="A1 to be served")
    # A1's grant went past 2^51: the clock and the starts moved back by the same amount
    clock = int(conn.hget(key, b"~c").split()[0])
    starts = {g: int(conn.hget(key, g).split()[0]) for g in (b"c:A", b"c:B")}
    assert 0 <= clock < 2 ** 40 and starts[b"c:A"] == clock and starts[b"c:B"] < clock, (clock, starts)
    release.set()
    for t in threads:
        t.join(timeout=60)
    assert ran == ["A1", "B1", "A2"]
    wait_for(lambda: c.waiters(key) == 0 and c.holders(key) == [], message="the key to be free")
    conn.close()
