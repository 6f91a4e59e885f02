"""The module-version check: a client meets a module of another major.minor than
it was made for (here: the real module, 0.1.0 for instance, with the client told
it was made for another version) and says so at its first command."""

import asyncio

import pytest
import redis
import redis.asyncio as aioredis

import redis_unique
from redis_unique import Client, ModuleVersionMismatch
from redis_unique import _version
from redis_unique.asyncio import Client as AsyncClient


def loaded(r: redis.Redis) -> str:
    return _version.decode(_version.loaded_version(r.execute_command("MODULE", "LIST")))


@pytest.fixture()
def built_for(monkeypatch):
    def pretend(version: str) -> None:
        monkeypatch.setattr(_version, "BUILT_FOR", version)

    yield pretend


def other_minor(version: str) -> str:
    major, minor, _ = version.split(".")
    return "%s.%d.0" % (major, int(minor) + 1)


def test_the_module_reports_this_packages_version(r):
    assert loaded(r) == redis_unique.__version__
    assert _version.decode(20601) == "2.6.1" and _version.decode(100) == "0.1.0"


def test_a_module_of_another_minor_is_refused_at_the_first_command(server, r, built_for):
    module = loaded(r)
    client_version = other_minor(module)
    built_for(client_version)
    c = Client(server.client())
    with pytest.raises(ModuleVersionMismatch) as e:
        c.lock("k", "a", ttl=30)
    message = str(e.value)
    assert module in message and client_version in message and "pip install" in message
    assert (e.value.module_version, e.value.client_version) == (module, client_version)
    assert r.exists("k") == 0  # the command was never sent
    with pytest.raises(ModuleVersionMismatch):
        c.pipeline().lock("k", "a").execute()
    assert r.exists("k") == 0


def test_another_patch_release_is_accepted(server, r, built_for):
    major, minor, patch = loaded(r).split(".")
    built_for("%s.%s.%d" % (major, minor, int(patch) + 1))
    assert Client(server.client()).lock("k", "a", ttl=30) is not None


def test_a_user_without_module_list_is_not_checked(server, r, built_for):
    built_for(other_minor(loaded(r)))
    r.execute_command("ACL", "SETUSER", "no-module-list", "on", ">pw", "~*", "+@all", "-module")
    try:
        c = Client(server.client(username="no-module-list", password="pw"))
        assert c.lock("k", "a", ttl=30) is not None
    finally:
        r.execute_command("ACL", "DELUSER", "no-module-list")


def test_the_asyncio_client_checks_too(server, r, built_for):
    built_for(other_minor(loaded(r)))

    async def main():
        conn = aioredis.Redis(host="127.0.0.1", port=server.port)
        try:
            with pytest.raises(ModuleVersionMismatch):
                await AsyncClient(conn).lock("k", "a", ttl=30)
            with pytest.raises(ModuleVersionMismatch):
                await AsyncClient(conn).pipeline().unlock("k", "a").execute()
        finally:
            await conn.aclose()

    asyncio.run(asyncio.wait_for(main(), 30))
    assert r.exists("k") == 0
