"""The README's "Quick start", replayed as it is pasted: its python block runs against the
test server (`redis.Redis()` pointed at it, on a database of its own), and the root
README shows the same block."""
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]
QUICK_START_DB = 7


def quick_start() -> str:
    text = (PACKAGE / "README.md").read_text()
    section = text.split("\n## Quick start\n", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"^```python\n(.*?)^```\n", section, re.S | re.M)
    assert match, "no python block in the README's Quick start"
    return match.group(1)


def test_the_quick_start_runs(server, capsys):
    code = quick_start()
    assert "redis.Redis()" in code
    pointed = code.replace("redis.Redis()", f"redis.Redis(port={server.port}, db={QUICK_START_DB})")
    db = server.client(db=QUICK_START_DB)
    db.flushdb()
    try:
        exec(compile(pointed, "README.md quick start", "exec"), {"__name__": "quickstart"})
        assert re.search(r"writing with fencing token \d{13,}", capsys.readouterr().out)
        # Both holds are released: nothing is left locked.
        for key in ("sync:user:1", "report:2024"):
            assert db.execute_command("UNIQUE.LOCKEDBY", key) == [], key
    finally:
        db.flushdb()


def test_the_root_readme_shows_the_same_quick_start():
    root = (PACKAGE.parents[1] / "README.md").read_text()
    assert "```python\n" + quick_start() + "```\n" in root
