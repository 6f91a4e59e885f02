"""Each extra brings what the README's example needs, and nothing else does.

A fresh venv per extra, with the package installed from this directory the way
the README says (`pip install './clients/python[celery]'`), none of the test
dependencies, then the README's example run for real: a worker process of
that venv takes the job and its lock is freed. The project's own venv cannot
tell: pytest and the test extra bring packages (e.g. `packaging`, which
kombu's Redis transport imports) that a user's venv may not have.
"""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from conftest import wait_for

PACKAGE = Path(__file__).resolve().parents[1]
CELERY_EXTRA_DB, RQ_EXTRA_DB = 5, 6


def fresh_venv(tmp: Path, extra: str) -> Path:
    venv = tmp / f"venv-{extra}"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         f"{PACKAGE}[{extra}]"],
        capture_output=True, text=True)
    # No skip when PyPI cannot be reached: the test would pass without testing anything.
    assert install.returncode == 0, f"pip install .[{extra}] failed (is PyPI reachable?):\n{install.stderr}"
    # The test dependencies must not be what makes the example work.
    assert subprocess.run([str(python), "-c", "import pytest"], capture_output=True).returncode != 0
    return python


def test_the_celery_extra_runs_the_readme_example(server, tmp_path):
    python = fresh_venv(tmp_path, "celery")
    # A database of its own: the rq test's example writes the same key, and its lock.
    url = f"redis://127.0.0.1:{server.port}/{CELERY_EXTRA_DB}"
    server.client(db=CELERY_EXTRA_DB).flushdb()
    # The README's app, with this test's server for localhost:6379.
    (tmp_path / "proj.py").write_text(textwrap.dedent(f"""
        from celery import Celery
        from redis_unique.celery import UniqueTask

        app = Celery("proj", broker="{url}", task_cls=UniqueTask)
        app.conf.unique_redis_url = "{url}"

        @app.task(unique={{"lock": "until_executed", "ttl": 3600, "on_conflict": "skip"}})
        def sync_user(user_id):
            import redis
            redis.Redis.from_url("{url}").set(f"synced:{{user_id}}", "yes")
    """))
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    log = open(tmp_path / "worker.log", "w")
    worker = subprocess.Popen(
        [str(python), "-m", "celery", "-A", "proj", "worker", "-P", "solo", "-l", "info",
         "--without-gossip", "--without-mingle"],
        cwd=str(tmp_path), env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        sent = subprocess.run(
            [str(python), "-c", "from proj import sync_user; print(sync_user.delay(42).id)"],
            cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=60)
        assert sent.returncode == 0, sent.stderr
        r = server.client(db=CELERY_EXTRA_DB)
        wait_for(lambda: r.get("synced:42") == b"yes",
                 message="the worker ran the README's task")
        # until_executed: the lock taken at .delay() goes when the task succeeds.
        wait_for(lambda: not [k for k in r.scan_iter(match="*sync_user*")],
                 message="the task's lock freed")
    finally:
        worker.terminate()
        worker.wait(timeout=30)
        log.close()


def test_the_rq_extra_runs_the_readme_example(server, tmp_path):
    python = fresh_venv(tmp_path, "rq")
    # A database of its own: the Celery test's example writes the same key.
    url = f"redis://127.0.0.1:{server.port}/{RQ_EXTRA_DB}"
    server.client(db=RQ_EXTRA_DB).flushdb()
    (tmp_path / "jobs.py").write_text(textwrap.dedent(f"""
        import redis

        def sync_user(user_id):
            redis.Redis.from_url("{url}").set(f"synced:{{user_id}}", "yes")
    """))
    (tmp_path / "send.py").write_text(textwrap.dedent(f"""
        import redis
        from rq import Queue
        from redis_unique.rq import enqueue_unique
        from jobs import sync_user

        q = Queue(connection=redis.Redis.from_url("{url}"))
        first = enqueue_unique(q, sync_user, 42)
        second = enqueue_unique(q, sync_user, 42)        # skip: the job that holds the lock
        assert second.id == first.id, (first.id, second.id)
        print(first.id)
    """))
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    sent = subprocess.run([str(python), "send.py"], cwd=str(tmp_path), env=env,
                          capture_output=True, text=True, timeout=60)
    assert sent.returncode == 0, sent.stderr
    worker = subprocess.run(
        [str(python), "-m", "rq.cli", "worker", "--burst", "--url", url],
        cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=120)
    assert worker.returncode == 0, worker.stderr
    r = server.client(db=RQ_EXTRA_DB)
    assert r.get("synced:42") == b"yes"
    assert not [k for k in r.scan_iter(match="*sync_user*") if r.type(k) == b"uniq-lock"]
