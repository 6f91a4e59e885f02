"""The README's section "Several keys in one grant", replayed: each of its python blocks runs
on its own against the test server (localhost:6379 and a bare Redis() become the test
server), a line whose comment is a Python value asserts that the line gives it (as
tests/test_readme.py does), a block that defines ``main`` has it run by asyncio, and what each block leaves
behind is checked: its tasks' options, its RQ job's limits, and every hold released."""
import asyncio
import re
from pathlib import Path

import pytest

from redis_unique import Client

from test_readme import checked  # a line ``expr  # value`` asserts that expr gives value

README = Path(__file__).resolve().parents[1] / "README.md"
SECTION = "## Several keys in one grant"
KEYS = ["{api}:tenant:acme", "{api}:global"]


def blocks():
    text = README.read_text()
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    section = text[start:end if end >= 0 else None]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def test_the_section_has_its_examples():
    assert len(blocks()) == 4
    assert checked(blocks()[0]).count("assert ") == 3  # the sync block's values are checked


@pytest.mark.parametrize("index", range(4))
def test_readme_several_keys_example(index, server, r):
    code = blocks()[index]
    code = code.replace("localhost:6379", "127.0.0.1:%d" % server.port)
    code = re.sub(r"\bRedis\(\)", "Redis(host='127.0.0.1', port=%d)" % server.port, code)
    namespace = {"__name__": "readme_example"}
    c = Client(r)
    c.reset_metrics()
    exec(compile(checked(code), "%s block %d" % (README.name, index), "exec"), namespace)
    if asyncio.iscoroutinefunction(namespace.get("main")):
        asyncio.run(asyncio.wait_for(namespace["main"](), 60))
    if "tokens" in namespace:
        # The client's block: its grant gave a token per key, and its MultiLock another.
        assert len(namespace["tokens"]) == 2 and isinstance(namespace["fence"], int)
        assert c.metrics()["total"]["acquired"] == 4  # 2 keys by lock_all, 2 by MultiLock
    if "main" in namespace:
        assert c.metrics()["total"]["acquired"] == 4  # 2 keys by MultiLock, 2 by lock_all
    from redis_unique.celery import UniqueTask

    tasks = [v for v in namespace.values() if isinstance(v, UniqueTask)]
    for task in tasks:
        assert task.unique_options() is not None
    if "call_api" in namespace and tasks:
        limits = namespace["call_api"].unique_limits(["acme", {}], {})
        assert limits == {"keys": KEYS, "limits": [2, 10], "rates": {"{api}:global": [50, 1.0, 0]}}
    if "enqueue_unique" in namespace:
        from rq import Queue

        (job,) = Queue(connection=r).get_jobs()
        info = job.meta["redis_unique"]
        assert (info["key"], info["lock"], info["limits"]["keys"], info["limits"]["limits"]) == \
            (None, "while_executing", KEYS, [2, 10])
    for key in KEYS:
        assert c.holders(key) == []
