"""The README's section "Fair sharing and read/write locks", replayed: each of its python
blocks runs on its own against the test server (localhost:6379 and a bare Redis() become
the test server), a line whose comment is a Python value (``expr  # [GroupWaiters(...)]``,
no ``...`` in it) asserts that the line gives it, a block that defines ``main`` has it run
by asyncio, and every Celery task it defines has its options parsed. A block that stops
working, or a value that stops being true, fails here."""
import asyncio
import re
from pathlib import Path

import pytest

from redis_unique import Client

README = Path(__file__).resolve().parents[1] / "README.md"
SECTION = "## Fair sharing and read/write locks"


def blocks():
    text = README.read_text()
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    section = text[start:end if end >= 0 else None]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def test_the_section_has_its_examples():
    assert len(blocks()) == 4
    assert "assert " in checked(blocks()[0])  # the sync block's values are checked


def checked(code):
    """Each line ``expr  # value`` whose value parses (and has no ``...``) as an assertion."""
    lines = []
    for line in code.splitlines():
        expr, sep, comment = line.partition("  #")
        value = comment.strip()
        if sep and expr.strip() and not expr.startswith((" ", "\t")) and "..." not in value:
            try:
                compile(value, "<value>", "eval")
                compile(expr, "<expr>", "eval")
            except SyntaxError:
                pass
            else:
                line = "assert (%s) == (%s), %r" % (expr.strip(), value, line)
        lines.append(line)
    return "\n".join(lines)


@pytest.mark.parametrize("index", range(4))
def test_readme_fair_sharing_example(index, server, r):
    code = blocks()[index]
    code = code.replace("localhost:6379", "127.0.0.1:%d" % server.port)
    code = re.sub(r"\bRedis\(\)", "Redis(host='127.0.0.1', port=%d)" % server.port, code)
    namespace = {"__name__": "readme_example"}
    from redis_unique import GroupWaiters, Holder  # the names a value in a comment uses

    namespace.update(GroupWaiters=GroupWaiters, Holder=Holder)
    exec(compile(checked(code), "%s block %d" % (README.name, index), "exec"), namespace)
    if asyncio.iscoroutinefunction(namespace.get("main")):
        asyncio.run(asyncio.wait_for(namespace["main"](), 60))
    from redis_unique.celery import UniqueTask

    tasks = [v for v in namespace.values() if isinstance(v, UniqueTask)]
    for task in tasks:
        assert task.unique_options() is not None
    if "call_partner" in namespace and tasks:
        # The README's weights, as its Celery task computes them per call.
        task = namespace["call_partner"]
        assert task.unique_group(["globex", {}], {}) == {"group": "globex", "group_limit": 4, "weight": 2}
        assert task.unique_group(["acme", {}], {}) == {"group": "acme", "group_limit": 4, "weight": 1}
    if "enqueue_unique" in namespace:
        from rq import Queue

        (job,) = Queue(connection=r).get_jobs()
        info = job.meta["redis_unique"]
        assert (info["limit"], info["group"], info["group_limit"]) == (10, "acme", 4)
    # Every hold of the examples is released.
    c = Client(r)
    for key in ("api:partner", "doc:7"):
        assert c.holders(key) == []
