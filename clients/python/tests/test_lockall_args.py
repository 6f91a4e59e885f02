"""Several keys in one grant, without a server: LOCKALL's and UNLOCKALL's argv in the
contract's order, the checks made before sending, the replies, and the renewal rule read over
the tokens of every key."""
import pytest
from redis.exceptions import ConnectionError

from redis_unique import Client, MultiLock, Rate, UniqueError
from redis_unique import _multi as m
from redis_unique import asyncio as aio
from redis_unique.errors import CommandError
from redis_unique.multilock import MultiRefreshLoop


class NoServer:
    """A redis-py stand-in that fails the test if anything is sent."""

    def execute_command(self, *args):
        raise AssertionError("sent %r" % (args,))


def argv(*args, **kwargs):
    return [str(a) for a in m.lock_all_args(*args, **kwargs)]


# In the conformance table's neutral form (clients/conformance/README.md: lock_all's keys,
# limits, rates [{key: position from 1, rate_limit, rate_per_ms | rate_per_seconds,
# rate_burst}], ttl_ms ...); the table's own rows run in test_conformance.py.
CASES = [
    ({"keys": ["a"], "jid": "j"}, ["UNIQUE.LOCKALL", "1", "a", "j"]),
    ({"keys": ["{api}:tenant:acme", "{api}:global"], "jid": "job-7", "limits": [2, 10],
      "rates": [{"key": 2, "rate_limit": 50, "rate_per_ms": 1000}], "ttl_ms": 30000, "wait_ms": 5000},
     ["UNIQUE.LOCKALL", "2", "{api}:tenant:acme", "{api}:global", "job-7", "LIMIT", "2", "10",
      "RATE", "2", "50", "PER", "1000", "TTL", "30000", "WAIT", "5000"]),
    ({"keys": ["a", "b", "c"], "jid": "j", "limits": [0, 1, 3],
      "rates": [{"key": 3, "rate_limit": 5, "rate_per_ms": 60000, "rate_burst": 2},
                {"key": 1, "rate_limit": 1, "rate_per_seconds": 0.01}],
      "pxat_ms": 1900000000000, "type": "while_executing", "owner": "host:1", "meta": {"b": 1, "a": [2]},
      "wait_seconds": 0.0004},
     ["UNIQUE.LOCKALL", "3", "a", "b", "c", "j", "LIMIT", "0", "1", "3", "RATE", "1", "1", "PER", "10",
      "RATE", "3", "5", "PER", "60000", "BURST", "2", "PXAT", "1900000000000", "TYPE", "while_executing",
      "OWNER", "host:1", "META", '{"b":1,"a":[2]}', "WAIT", "1"]),
    ({"keys": ["a", "b"], "jid": "j", "ttl_seconds": 0.3, "rates": [{"key": 1, "rate_limit": 3, "rate_per_ms": 1000,
                                                                      "rate_burst": 0}]},
     ["UNIQUE.LOCKALL", "2", "a", "b", "j", "RATE", "1", "3", "PER", "1000", "TTL", "300"]),
]


def python_kwargs(args):
    """The neutral arguments as this client's (seconds, a Rate per key)."""
    kwargs = {}
    for name, value in args.items():
        if name in ("keys", "jid"):
            continue
        if name == "rates":
            kwargs["rates"] = {args["keys"][r["key"] - 1]: Rate(
                r["rate_limit"], per=r["rate_per_ms"] / 1000 if "rate_per_ms" in r else r["rate_per_seconds"],
                burst=r.get("rate_burst", 0)) for r in value}
        elif name in ("ttl_ms", "wait_ms"):
            kwargs[name[:-3]] = value / 1000
        elif name in ("ttl_seconds", "wait_seconds"):
            kwargs[name.split("_")[0]] = value
        elif name == "pxat_ms":
            kwargs["pxat"] = value
        else:
            kwargs[name] = value
    return kwargs


@pytest.mark.parametrize("args,expected", CASES)
def test_lock_all_sends_the_contracts_argv(args, expected):
    assert argv(args["keys"], args["jid"], **python_kwargs(args)) == expected


def test_rates_in_key_order_and_by_key_are_the_same():
    by_key = argv(["a", "b", "c"], "j", rates={"c": Rate(5, per=1), b"a": (2, 0.5, 1)})
    in_order = argv(["a", "b", "c"], "j", rates=[(2, 0.5, 1), None, Rate(5, per=1)])
    assert by_key == in_order == ["UNIQUE.LOCKALL", "3", "a", "b", "c", "j", "RATE", "1", "2", "PER", "500",
                                  "BURST", "1", "RATE", "3", "5", "PER", "1000"]


def test_unlock_all_argv_and_replies():
    assert m.unlock_all_args(["a", b"b"], "j") == ("UNIQUE.UNLOCKALL", 2, "a", b"b", "j")
    assert m.parse_tokens(None) is None
    assert m.parse_tokens([b"7", 9]) == [7, 9]


@pytest.mark.parametrize("keys,error", [
    ([], ValueError), (["k%d" % i for i in range(65)], ValueError), (["a", b"a"], ValueError),
    (["a", "b", "a"], ValueError), ("ab", TypeError), (["a", 1], TypeError), ({"a"}, TypeError)])
def test_keys_are_checked_before_sending(keys, error):
    with pytest.raises(error):
        Client(NoServer()).lock_all(keys, "j")
    with pytest.raises(error):
        Client(NoServer()).unlock_all(keys, "j")


def test_sixty_four_keys_are_allowed():
    assert argv(["k%d" % i for i in range(64)], "j")[:2] == ["UNIQUE.LOCKALL", "64"]


@pytest.mark.parametrize("kwargs,error", [
    (dict(limits=[1]), ValueError), (dict(limits=[1, 2, 3]), ValueError), (dict(limits=[1, -1]), ValueError),
    (dict(limits=[1, True]), ValueError), (dict(limits=3), TypeError), (dict(rates={"z": Rate(1)}), ValueError),
    (dict(rates=[Rate(1)]), ValueError), (dict(rates=[Rate(0), None]), ValueError), (dict(rates="x"), TypeError),
    (dict(ttl=1, pxat=10), ValueError), (dict(ttl=0), ValueError), (dict(wait=-1), ValueError),
    # The module refuses fair sharing on LOCKALL: so does the client, before sending.
    (dict(group="acme"), TypeError), (dict(mode="shared"), TypeError), (dict(group_limit=2), TypeError),
    (dict(weight=2), TypeError)])
def test_options_are_checked_before_sending(kwargs, error):
    with pytest.raises(error):
        Client(NoServer()).lock_all(["a", "b"], "j", **kwargs)
    # MultiLock takes limits in its {key: limit} and has no pxat (a held lease is renewed).
    with pytest.raises(TypeError if {"limits", "pxat"} & set(kwargs) else error):
        MultiLock(NoServer(), {"a": 1, "b": 1}, **dict({"ttl": 1}, **kwargs))


def test_multilock_is_checked_at_construction():
    for locks in ({"a": -1}, {"a": 1.5}, {}, [], ["a", "a"], "ab"):
        with pytest.raises((TypeError, ValueError)):
            MultiLock(NoServer(), locks, ttl=1)
    with pytest.raises(ValueError):
        aio.MultiLock(NoServer(), {"a": 1}, ttl=0)
    lock = MultiLock(NoServer(), {"a": 2, "b": 0}, ttl=1, rates={"b": Rate(5)})
    assert (lock.keys, lock.limits, lock.tokens, lock.held) == (["a", "b"], [2, 0], None, False)
    assert MultiLock(NoServer(), ["a", "b"], ttl=1).limits is None  # LIMIT not sent: 1 each
    with pytest.raises(UniqueError, match="only the lease"):
        lock.update(meta={"x": 1})


# Renewal over the tokens of every key.

def test_renewal_sends_the_lease_only():
    loop = MultiRefreshLoop(None, ["a", "b"], "j", [5, 6], 30000, sent_at=0.0)
    args, _, _ = loop._next()
    assert [str(a) for a in args] == ["UNIQUE.LOCKALL", "2", "a", "b", "j", "TTL", "30000"]
    with pytest.raises(UniqueError):
        loop.update(meta={"x": 1})
    assert (loop.interval, loop.retry) == (10.0, 3.0)


@pytest.mark.parametrize("reply,outcome", [
    ([5, 6], "kept"), ([b"5", b"6"], "kept"), (None, "lost"), ([5, 7], "lost_unlock"), ([7, 8], "lost_unlock")])
def test_renewal_outcome(reply, outcome):
    assert m.renewal_all_outcome([5, 6], reply) == outcome
    loop = MultiRefreshLoop(None, ["a", "b"], "j", [5, 6], 30000, sent_at=0.0)
    assert loop._settle({}, 0.0, reply=reply) == outcome
    assert (loop.lost is not None) == outcome.startswith("lost")
    if outcome == "lost":
        assert "one key's hold had ended" in str(loop.lost)


@pytest.mark.parametrize("error,outcome", [
    (ConnectionError("reset"), "retry"), (CommandError("LOADING loading", "LOADING"), "retry"),
    (CommandError("CROSSSLOT Keys in request don't hash to the same slot", "CROSSSLOT"), "lost"),
    (CommandError("WRONGTYPE wrong", "WRONGTYPE"), "lost")])
def test_renewal_errors_as_a_single_keys(error, outcome):
    loop = MultiRefreshLoop(None, ["a", "b"], "j", [5, 6], 30000, sent_at=0.0)
    assert loop._settle({}, 0.0, error=error) == outcome


def test_a_renewal_that_took_new_holds_gives_them_up():
    sent = []

    class Recorder:
        def unlock_all(self, keys, jid, tokens=None):
            sent.append((keys, jid, tokens))
            return 2

    loop = MultiRefreshLoop(Recorder(), ["a", "b"], "j", [5, 6], 30000, sent_at=0.0)
    assert loop._took_hold([7, 8]) and not loop._took_hold(None)
    loop._unlock([7, 8])
    assert sent == [(("a", "b"), "j", [7, 8])]  # the new holds, by their own tokens
    loop._refused_call()
    assert sent[-1] == (("a", "b"), "j", [5, 6])  # a refused renewal: the keys still held, by the grant's
