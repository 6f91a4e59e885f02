"""The clients' conformance table (clients/conformance/table.json): every call's argv and
every reply's value as the Ruby and Node clients have them too."""
import dataclasses
import json
from pathlib import Path

import pytest

from redis_unique import Rate
from redis_unique import _protocol as p

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
    "unlock": lambda a: ("UNIQUE.UNLOCK", a["key"], a["jid"]),
    "locked_by": lambda a: ("UNIQUE.LOCKEDBY", a["key"]),
    "holders": lambda a: ("UNIQUE.LOCKEDBY", a["key"], "WITHMETA"),
    "waiters": lambda a: ("UNIQUE.WAITERS", a["key"]),
    "rate": lambda a: ("UNIQUE.RATE", a["key"]),
}


@pytest.mark.parametrize("case", TABLE["calls"], ids=[c["name"] for c in TABLE["calls"]])
def test_every_call_sends_the_tables_argv(case):
    assert [str(a) for a in ARGV[case["call"]](case["args"])] == case["argv"]


def neutral_holder(h):
    return {"jid": h.jid, "token": h.token, "acquired_at_ms": h.acquired_at_ms, "expires_at_ms": h.expires_at_ms,
            "ttl_ms": None if h.ttl is None else round(h.ttl * 1000), "type": h.type, "owner": h.owner,
            "meta": h.meta}


VALUE = {
    "lock": p.parse_token,
    "unlock": lambda r: bool(r),
    "holders": lambda r: [neutral_holder(h) for h in p.parse_holders(r)],
    "rate": lambda r: None if p.parse_rate(r) is None else dataclasses.asdict(p.parse_rate(r)),
}


@pytest.mark.parametrize("case", TABLE["replies"], ids=[c["name"] for c in TABLE["replies"]])
def test_every_reply_reads_as_the_tables_value(case):
    assert VALUE[case["call"]](case["reply"]) == case["value"]
