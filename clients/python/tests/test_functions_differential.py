"""A differential property test: random sequences of calls against a server with the
module and one with the Functions library only, the replies compared one by one.

What differs by design is normalised: a fencing token becomes its rank among the
tokens seen on that server (tokens rise on a key on both, from different clocks),
times (acquired_at, expires_at, ttl, allowed_at, idle_at) become their sign. The
sequences are drawn from a seed (TEST_SEED, printed by make; DIFF_CASES sets how
many), so a failure replays; leases are long and rates slow, so nothing depends on
how fast the two servers answer.
"""

from __future__ import annotations

import json
import os
import random
from typing import Any, Iterator, List, Tuple

import pytest
import redis

from redis_unique import _functions as fn

from conftest import Server
from test_functions import SOURCE

CASES = int(os.environ.get("DIFF_CASES", "200"))
STEPS = int(os.environ.get("DIFF_STEPS", "50"))
SEED = int(os.environ.get("TEST_SEED", "1"))

KEYS = ["k1", "k2", "{t}k3"]
# A key of another type: every call on it is WRONGTYPE (it never is a lock, so the
# gauges stay comparable: the library cannot see a SET replace a lock).
PLAIN = "plain"
FENCED_UNLOCK: List[bool] = []
JIDS = ["j1", "j2", "j3", "j4"]


@pytest.fixture(scope="module")
def pair() -> Iterator[Tuple[redis.Redis, redis.Redis]]:
    module_server, lib_server = Server(), Server(module=None)
    a, b = module_server.client(), lib_server.client()
    b.execute_command("FUNCTION", "LOAD", "REPLACE", SOURCE.read_text())
    # UNLOCK key jid TOKEN t is compared once the module has it too
    try:
        a.execute_command("UNIQUE.UNLOCK", "probe", "j", "TOKEN", 1)
        FENCED_UNLOCK.append(True)
    except redis.ResponseError:
        pass
    yield a, b
    a.close()
    b.close()
    module_server.stop()
    lib_server.stop()


def pick_key(rng: random.Random) -> str:
    return PLAIN if rng.random() < 0.04 else rng.choice(KEYS)


def lock_call(rng: random.Random) -> List[Any]:
    args: List[Any] = ["LOCK", pick_key(rng), rng.choice(JIDS)]
    options: List[List[Any]] = []
    if rng.random() < 0.7:
        options.append(["LIMIT", rng.choice([0, 1, 2, 3])])
    if rng.random() < 0.6:
        options.append(["TTL", rng.choice([600000, 900000])])
    if rng.random() < 0.2:
        options.append(["TYPE", rng.choice(["until_executed", "while_executing"])])
    if rng.random() < 0.3:
        options.append(["OWNER", rng.choice(["o1", "o2"])])
    if rng.random() < 0.2:
        options.append(["META", rng.choice(['{"a":1}', '{"b":[1,2]}', "[1]", "{bad"])])
    if rng.random() < 0.15:
        options.append(["RATE", rng.choice([2, 3]), "PER", 3600000] + (["BURST", 1] if rng.random() < 0.5 else []))
    if rng.random() < 0.15:
        options.append(["GROUP", rng.choice(["ga", "gb"])]
                       + (["GROUPLIMIT", rng.choice([1, 2])] if rng.random() < 0.5 else []))
    if rng.random() < 0.15:
        options.append(["MODE", rng.choice(["shared", "exclusive", "Exclusive"])])
    if rng.random() < 0.05:
        options.append(rng.choice([["LIMIT", "x"], ["TTL", 0], ["TTL", -5], ["NOPE", 1], ["LIMIT"], [3600000],
                                   ["TYPE", "a b"], ["OWNER", ""], ["WEIGHT", 2], ["PER", 10], ["MODE", "x"],
                                   ["LIMIT", 1, "LIMIT", 1]]))
    rng.shuffle(options)
    for option in options:
        args += option
    return args


def random_call(rng: random.Random) -> List[Any]:
    roll = rng.random()
    if roll < 0.5:
        return lock_call(rng)
    if roll < 0.7:
        return ["UNLOCK", pick_key(rng), rng.choice(JIDS)] + (
            [] if rng.random() < 0.8 or not FENCED_UNLOCK else ["TOKEN", rng.choice([1, 2])])
    if roll < 0.8:
        return ["LOCKEDBY", pick_key(rng)] + rng.choice([[], ["WITHMETA"], ["CURSOR", 0], ["CURSOR", 0, "COUNT", 5]])
    if roll < 0.86:
        return ["RATE", pick_key(rng)]
    if roll < 0.93:
        return ["WAITERS", pick_key(rng)] + rng.choice([[], ["GROUPS"]])
    if roll < 0.97:
        return ["REAP", "0", "COUNT", 1000] + rng.choice([[], ["OWNER", "o1"], ["OWNER", "o2"]])
    return ["PLAIN", PLAIN]


def run_module(r: redis.Redis, call: List[Any]) -> Any:
    if call[0] == "PLAIN":
        return r.execute_command("SET", call[1], "v")
    return r.execute_command("UNIQUE." + call[0], *call[1:])


def run_library(r: redis.Redis, call: List[Any]) -> Any:
    name, key, rest = call[0], call[1], call[2:]
    if name == "REAP":
        # the client walks the keyspace and reaps each lock through the library
        return fn._reap(r, ["UNIQUE.REAP"] + call[1:])
    if name == "PLAIN":
        return r.execute_command("SET", key, "v")
    if name in ("LOCKEDBY", "RATE", "WAITERS"):
        return r.execute_command("FCALL_RO", "unique_" + name.lower(), 1, key, *rest)
    return r.execute_command("FCALL", "unique_" + name.lower(), 3, key, fn.wake_key(key), fn.METRICS_KEY, *rest)


def as_dict(reply: Any) -> dict:
    return reply if isinstance(reply, dict) else dict(zip(reply[::2], reply[1::2]))


class Normal:
    """Tokens as their rank on their key (the module's tokens rise across keys, the
    library's on each key: both by the clock rule), times as their sign; maps as dicts
    (the library replies RESP2's flat arrays on RESP3 too)."""

    def __init__(self) -> None:
        self.tokens: dict = {}

    def token(self, key: str, value: int) -> str:
        seen = self.tokens.setdefault(key, {})
        if value not in seen:
            seen[value] = len(seen)
        return "token#%d" % seen[value]

    def reply(self, call: List[Any], reply: Any) -> Any:
        if isinstance(reply, redis.ResponseError):
            return ("error", str(reply))
        name, key = call[0], call[1]
        if name == "REAP":
            return [int(reply[0]), int(reply[1])]
        if name == "LOCK" and isinstance(reply, int):
            return self.token(key, reply)
        if name == "WAITERS" and isinstance(reply, list):
            return [sorted(as_dict(g).items()) for g in reply]
        if name == "LOCKEDBY":
            page = reply
            cursor = None
            if "CURSOR" in call:
                cursor, page = reply
                # the order of a paged walk is not grant order on either
                page = sorted(page, key=lambda h: h if isinstance(h, bytes) else as_dict(h)[b"jid"])
            out = []
            for h in page:
                if not isinstance(h, bytes):
                    d = dict(as_dict(h))
                    d[b"token"] = self.token(key, d[b"token"])
                    for t in (b"acquired_at", b"expires_at", b"ttl"):
                        d[t] = "time" if d[t] != -1 else -1
                    out.append(sorted(d.items()))
                else:
                    out.append(h)
            return (cursor, out)
        if name == "RATE" and reply is not None:
            d = dict(as_dict(reply))
            d[b"allowed_at"] = "time"
            d[b"idle_at"] = "time"
            return sorted(d.items())
        return reply


def replay(r: redis.Redis, runner: Any, calls: List[List[Any]]) -> List[Any]:
    normal = Normal()
    out = []
    for c in calls:
        try:
            reply = runner(r, c)
        except redis.ResponseError as exc:
            reply = exc
        out.append(normal.reply(c, reply))
    return out


def metrics_of(reply: Any) -> Any:
    m = as_dict(reply)
    return (m[b"locks"], m[b"holders"], as_dict(m[b"total"]),
            {t: as_dict(v) for t, v in as_dict(m[b"types"]).items()})


@pytest.mark.parametrize("case", range(CASES))
def test_the_library_replies_as_the_module(pair, case):
    a, b = pair
    for conn in (a, b):
        conn.execute_command("FLUSHALL", "SYNC")
        conn.set(PLAIN, "v")
    a.execute_command("UNIQUE.METRICS", "RESET")
    rng = random.Random(SEED * 100003 + case)
    calls = [random_call(rng) for _ in range(STEPS)]
    want, got = replay(a, run_module, calls), replay(b, run_library, calls)
    for i, (c, w, g) in enumerate(zip(calls, want, got)):
        assert w == g, "step %d of seed %d case %d: %r\nmodule:  %r\nlibrary: %r\ncalls so far: %s" % (
            i, SEED, case, c, w, g, json.dumps(calls[:i + 1]))
    assert metrics_of(a.execute_command("UNIQUE.METRICS")) == metrics_of(
        b.execute_command("FCALL", "unique_metrics", 1, fn.METRICS_KEY))
