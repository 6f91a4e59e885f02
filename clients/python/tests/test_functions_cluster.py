"""The Functions library on a Redis Cluster of three primaries started without the module:
the client loads it on every primary, every key a call touches is in the lock's slot
(the server refuses any other), waits are served there, and a primary that lost the
library (a failover to a node without it) gets it again at the next call."""

from __future__ import annotations

import os
import subprocess
import threading
from typing import Iterator, List

import pytest
import redis
from redis.cluster import RedisCluster

from redis_unique import Client, _functions as fn

from conftest import Server, wait_for

CLI = "redis-cli"


@pytest.fixture(scope="module")
def cluster() -> Iterator[List[Server]]:
    nodes = [Server(module=None, extra=["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"])
             for _ in range(3)]
    cli = os.environ.get("REDIS_CLI", CLI)
    try:
        out = subprocess.run([cli, "--cluster", "create"] + ["127.0.0.1:%d" % n.port for n in nodes]
                             + ["--cluster-replicas", "0", "--cluster-yes"],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stdout + out.stderr
        for n in nodes:
            conn = n.client()
            wait_for(lambda: b"cluster_state:ok" in conn.execute_command("CLUSTER", "INFO", NEVER_DECODE=True),
                     message="the cluster to be ok")
            conn.close()
        yield nodes
    finally:
        for n in nodes:
            n.stop()


@pytest.fixture()
def rc(cluster: List[Server]) -> Iterator[RedisCluster]:
    conn = RedisCluster(host="127.0.0.1", port=cluster[0].port)
    yield conn
    conn.close()


def versions(cluster: List[Server]) -> List[object]:
    out = []
    for n in cluster:
        conn = n.client()
        try:
            out.append(conn.execute_command("FCALL_RO", "unique_version", 0))
        except redis.ResponseError:
            out.append(None)
        finally:
            conn.close()
    return out


def test_locks_on_every_primary_and_in_each_locks_slot(rc, cluster):
    c = Client(rc)
    keys = ["a", "b", "c", "order:17", "{user:1}:sync", "x}y", "q{r"]
    tokens = {k: c.lock(k, "j1", ttl=60) for k in keys}
    assert all(isinstance(t, int) for t in tokens.values())
    assert versions(cluster) == [fn.library_version()] * 3
    # the keys landed on more than one primary
    owners = {rc.get_node_from_key(k).port for k in keys}
    assert len(owners) > 1
    for k in keys:
        assert c.lock(k, "j2") is None and [h.jid for h in c.holders(k)] == ["j1"]
        assert c.unlock(k, "j1")


def test_a_wait_on_a_cluster_is_served_by_the_release(rc, cluster):
    c = Client(rc)
    c.lock("{w}:lock", "holder", ttl=60)
    got = {}

    def waiter() -> None:
        conn = RedisCluster(host="127.0.0.1", port=cluster[1].port)
        got["token"] = Client(conn).lock("{w}:lock", "waiter", ttl=60, wait=30)
        conn.close()

    t = threading.Thread(target=waiter)
    t.start()
    wait_for(lambda: c.waiters("{w}:lock") == 1, message="the waiter to queue")
    assert c.unlock("{w}:lock", "holder")
    t.join(30)
    assert isinstance(got.get("token"), int)


def test_a_primary_that_lost_the_library_gets_it_again(rc, cluster):
    c = Client(rc)
    assert c.lock("again", "j", ttl=60) is not None
    node = rc.get_node_from_key("again")
    conn = redis.Redis(host="127.0.0.1", port=node.port)
    conn.execute_command("FUNCTION", "FLUSH", "SYNC")
    conn.close()
    assert c.lock("again", "k") is None
    assert versions(cluster) == [fn.library_version()] * 3
