"""The clients' conformance table (clients/conformance/table.json): every call's argv,
every reply's value and the renewal rule, as the Ruby and Node clients have them too."""
import dataclasses
import json
from pathlib import Path

import pytest
from redis._parsers import BaseParser
from redis.exceptions import ConnectionError, ResponseError

from redis_unique import Rate
from redis_unique import _multi as m
from redis_unique import _protocol as p
from redis_unique._refresh import RefreshLoop
from redis_unique.errors import translate

from test_lockall_args import python_kwargs as lock_all_kwargs

TABLE = json.loads((Path(__file__).resolve().parents[2] / "conformance" / "table.json").read_text())


def python_kwargs(args):
    """The neutral arguments as this client's: seconds for ttl, wait and a rate's period,
    unix ms for pxat, a Rate for the rate."""
    kwargs = {}
    if "rate_limit" in args:
        per = args["rate_per_ms"] / 1000 if "rate_per_ms" in args else args["rate_per_seconds"]
        kwargs["rate"] = Rate(args["rate_limit"], per=per, burst=args.get("rate_burst", 0))
    for name, value in args.items():
        if name in ("key", "jid") or name.startswith("rate_"):
            continue
        if name == "ttl_ms":
            kwargs["ttl"] = value / 1000
        elif name == "ttl_seconds":
            kwargs["ttl"] = value
        elif name == "wait_ms":
            kwargs["wait"] = value / 1000
        elif name == "wait_seconds":
            kwargs["wait"] = value
        elif name == "pxat_ms":
            kwargs["pxat"] = value
        else:
            kwargs[name] = value
    return kwargs


ARGV = {
    "lock": lambda a: p.lock_args(a["key"], a["jid"], **python_kwargs(a)),
    "unlock": lambda a: p.unlock_args(a["key"], a["jid"], a.get("token")),
    "locked_by": lambda a: ("UNIQUE.LOCKEDBY", a["key"]),
    "holders": lambda a: ("UNIQUE.LOCKEDBY", a["key"], "WITHMETA"),
    "waiters": lambda a: ("UNIQUE.WAITERS", a["key"]),
    "waiters_by_group": lambda a: ("UNIQUE.WAITERS", a["key"], "GROUPS"),
    "rate": lambda a: ("UNIQUE.RATE", a["key"]),
    "lock_all": lambda a: m.lock_all_args(a["keys"], a["jid"], **lock_all_kwargs(a)),
    "unlock_all": lambda a: m.unlock_all_args(a["keys"], a["jid"], a.get("tokens")),
}


@pytest.mark.parametrize("case", TABLE["calls"], ids=[c["name"] for c in TABLE["calls"]])
def test_every_call_sends_the_tables_argv(case):
    assert [str(a) for a in ARGV[case["call"]](case["args"])] == case["argv"]


def neutral_holder(h):
    return {"jid": h.jid, "token": h.token, "acquired_at_ms": h.acquired_at_ms, "expires_at_ms": h.expires_at_ms,
            "ttl_ms": None if h.ttl is None else round(h.ttl * 1000), "type": h.type, "owner": h.owner,
            "meta": h.meta, "group": h.group, "mode": h.mode}


VALUE = {
    "lock": p.parse_token,
    "unlock": lambda r: bool(r),
    "holders": lambda r: [neutral_holder(h) for h in p.parse_holders(r)],
    "rate": lambda r: None if p.parse_rate(r) is None else dataclasses.asdict(p.parse_rate(r)),
    "waiters_by_group": lambda r: [dataclasses.asdict(g) for g in p.parse_group_waiters(r)],
    "lock_all": m.parse_tokens,
    "unlock_all": int,
}


@pytest.mark.parametrize("case", TABLE["replies"], ids=[c["name"] for c in TABLE["replies"]])
def test_every_reply_reads_as_the_tables_value(case):
    assert VALUE[case["call"]](case["reply"]) == case["value"]


# Renewal (README "Renewal"): checked on the one loop object every lock of this client uses.
RENEWAL = TABLE["renewal"]


@pytest.mark.parametrize("case", RENEWAL["timing"], ids=[c["name"] for c in RENEWAL["timing"]])
def test_renewal_timing(case):
    loop = RefreshLoop(None, "k", "j", 1, case["lease_ms"], sent_at=0.0)
    assert (p.renew_interval_ms(case["lease_ms"]), p.renew_retry_ms(case["lease_ms"])) == \
        (case["interval_ms"], case["retry_ms"])
    assert (round(loop.interval * 1000, 6), round(loop.retry * 1000, 6)) == (case["interval_ms"], case["retry_ms"])


@pytest.mark.parametrize("case", RENEWAL["argv"], ids=[c["name"] for c in RENEWAL["argv"]])
def test_renewal_sends_the_tables_argv_and_a_change_once(case):
    a = case["args"]
    loop = RefreshLoop(None, a["key"], a["jid"], 1, a["ttl_ms"], sent_at=0.0)
    loop.update(**a.get("changed", {}))
    first, _, _ = loop._next()
    again, _, _ = loop._next()
    assert [str(x) for x in first] == case["argv"]
    assert [str(x) for x in again] == ["UNIQUE.LOCK", a["key"], a["jid"], "TTL", str(a["ttl_ms"])]


def error_as_raised(text):
    """The exception this client's renewal meets for an error reply: redis-py's own
    parse of it, translated as Client does; "connection" for no reply at all."""
    if text == "connection":
        return ConnectionError("Error 111 connecting to 127.0.0.1:1. Connection refused.")
    exc = BaseParser.parse_error(text)
    return translate(exc) if isinstance(exc, ResponseError) else exc


@pytest.mark.parametrize("case", RENEWAL["outcomes"], ids=[c["name"] for c in RENEWAL["outcomes"]])
def test_renewal_outcome(case):
    loop = RefreshLoop(None, "k", "j", case["token"], 30000, sent_at=0.0)
    if "error" in case:
        outcome = loop._settle({}, 0.0, error=error_as_raised(case["error"]))
    else:
        outcome = loop._settle({}, 0.0, reply=case["reply"])
    assert outcome == case["outcome"]
    assert (loop.lost is not None) == outcome.startswith("lost")
    if "unlock_argv" in case:
        # The release of the hold the renewal took: what the loop sends, by the reply's token.
        class Sent:
            def unlock(self, key, jid, token=None):
                return p.unlock_args(key, jid, token)

        loop.client = Sent()
        assert [str(a) for a in loop._unlock_call(case["reply"])] == case["unlock_argv"]
