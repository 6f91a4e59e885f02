// The clients' conformance table (clients/conformance/table.json): every call's argv and
// every reply's value as the Ruby and Python clients have them too. Node takes ms only:
// the cases in seconds are for the clients with a seconds API.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { commands } from "../dist/esm/index.js";

const table = JSON.parse(readFileSync(new URL("../../conformance/table.json", import.meta.url), "utf8"));

function nodeOptions(args) {
  const options = {};
  if ("rate_limit" in args) {
    options.rate = { limit: args.rate_limit, per: args.rate_per_ms };
    if ("rate_burst" in args) options.rate.burst = args.rate_burst;
  }
  for (const [name, value] of Object.entries(args)) {
    if (name === "key" || name === "jid" || name.startsWith("rate_")) continue;
    if (name === "ttl_ms") options.ttl = value;
    else if (name === "wait_ms") options.wait = value;
    else if (name === "pxat_ms") options.pxat = value;
    else if (name === "group_limit") options.groupLimit = value;
    else options[name] = value;
  }
  return options;
}

/**
 * lock_all's neutral arguments as lockAll's options: `rates` ({ key: position from 1,
 * rate_limit, rate_per_ms, rate_burst }) into an array in key order.
 */
function lockAllOptions(args) {
  const { keys, jid, limits, rates, ...rest } = args;
  const options = nodeOptions(rest);
  if (limits !== undefined) options.limits = limits;
  if (rates !== undefined) {
    options.rates = [];
    for (const r of rates) {
      options.rates[r.key - 1] = { limit: r.rate_limit, per: r.rate_per_ms, ...("rate_burst" in r ? { burst: r.rate_burst } : {}) };
    }
  }
  return options;
}

const build = {
  lock_all: (a) => commands.lockAll(a.keys, a.jid, lockAllOptions(a)),
  unlock_all: (a) => commands.unlockAll(a.keys, a.jid, a.tokens),
  lock: (a) => commands.lock(a.key, a.jid, nodeOptions(a)),
  unlock: (a) => commands.unlock(a.key, a.jid, a.token),
  locked_by: (a) => commands.lockedBy(a.key),
  holders: (a) => commands.holders(a.key),
  waiters: (a) => commands.waiters(a.key),
  waiters_by_group: (a) => commands.waitersByGroup(a.key),
  rate: (a) => commands.rate(a.key),
};

for (const c of table.calls) {
  const inSeconds = Object.keys(c.args).some((k) => k.endsWith("_seconds"));
  test(`argv: ${c.name}`, { skip: inSeconds && "Node takes milliseconds only" }, () => {
    assert.deepEqual(build[c.call](c.args).argv, c.argv);
  });
}

const neutral = (h) => ({
  jid: h.jid, token: h.token, acquired_at_ms: h.acquiredAt, expires_at_ms: h.expiresAt,
  ttl_ms: h.ttl, type: h.type, owner: h.owner, meta: h.meta, group: h.group, mode: h.mode,
});
const parse = {
  lock_all: (r) => commands.lockAll(["k1", "k2"], "j").parse(r),
  unlock_all: (r) => commands.unlockAll(["k1", "k2"], "j").parse(r),
  lock: (r) => commands.lock("k", "j").parse(r),
  unlock: (r) => commands.unlock("k", "j").parse(r),
  holders: (r) => commands.holders("k").parse(r).map(neutral),
  waiters_by_group: (r) => commands.waitersByGroup("k").parse(r),
  rate: (r) => {
    const s = commands.rate("k").parse(r);
    return s && { limit: s.limit, per_ms: s.per, burst: s.burst, remaining: s.remaining,
                  allowed_at_ms: s.allowedAt, idle_at_ms: s.idleAt };
  },
};

for (const c of table.replies) {
  test(`reply: ${c.name}`, () => {
    assert.deepEqual(parse[c.call](c.reply), c.value);
  });
}
