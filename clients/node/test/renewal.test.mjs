// The renewal rule of clients/conformance (README "Renewal"): the table's timing, argv and
// outcomes on the one Refresher every lock of this client uses, and a real server: a lease
// shorter than the job kept alive with renewals that send only the lease; a renewal refused
// after a REAP and another holder, lost at once.
import { test, before, after } from "node:test";
import IORedis from "ioredis";
import { startServer, waitFor, assertNoClientsLeft } from "./helpers.mjs";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { Client, Mutex, Refresher, renewIntervalMs, renewRetryMs, CommandError } from "../dist/esm/index.js";
import { fromReply } from "../dist/esm/errors.js";

const table = JSON.parse(readFileSync(new URL("../../conformance/table.json", import.meta.url), "utf8")).renewal;

for (const c of table.timing) {
  test(`renewal timing: ${c.name}`, () => {
    const r = new Refresher(null, { key: "k", jid: "j", token: 1, leaseMs: c.lease_ms, sentAt: 0, onLost() {} });
    assert.deepEqual([renewIntervalMs(c.lease_ms), renewRetryMs(c.lease_ms), r.intervalMs, r.retryMs],
      [c.interval_ms, c.retry_ms, c.interval_ms, c.retry_ms]);
  });
}

for (const c of table.argv) {
  test(`renewal argv: ${c.name}`, () => {
    const a = c.args;
    const r = new Refresher(null, { key: a.key, jid: a.jid, token: 1, leaseMs: a.ttl_ms, sentAt: 0, onLost() {} });
    r.update(a.changed ?? {});
    assert.deepEqual(r.next().argv, c.argv);
    assert.deepEqual(r.next().argv, ["UNIQUE.LOCK", a.key, a.jid, "TTL", String(a.ttl_ms)]); // a change goes once
  });
}

// The error this client's renewal meets: an error reply as Client turns it (fromReply), or
// the connection's own error (no code) for no reply at all.
function errorFor(text) {
  if (text === "connection") return Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:1"), { code: "ECONNREFUSED" });
  return fromReply(new Error(text));
}

for (const c of table.outcomes) {
  test(`renewal outcome: ${c.name}`, () => {
    const lost = [];
    const r = new Refresher(null, { key: "k", jid: "j", token: c.token, leaseMs: 30000, sentAt: 0, onLost: (e) => lost.push(e) });
    const outcome = "error" in c ? r.settle({}, 0, undefined, errorFor(c.error)) : r.settle({}, 0, c.reply);
    assert.equal(outcome, c.outcome);
    assert.equal(lost.length, outcome.startsWith("lost") ? 1 : 0);
  });
}

let server, redis, client;
before(async () => {
  server = await startServer();
  redis = new IORedis({ port: server.port });
  client = new Client(redis);
});
after(async () => { await client.close(); await redis.quit(); await assertNoClientsLeft(server.port); server?.stop(); });

test("a lease shorter than the job is kept, and a renewal sends the lease only", async () => {
  await redis.config("SET", "slowlog-log-slower-than", "0");
  await redis.slowlog("RESET");
  const lost = [];
  const mutex = new Mutex(client, "renew:node:kept", { lockTimeout: 600, owner: "w-1", meta: { job: 1 },
                                                      onLockLost: (e) => lost.push(e) });
  try {
    await mutex.acquire();
    const start = Date.now();
    await waitFor(() => mutex.renewals >= 6 && Date.now() - start > 1800, { timeout: 30_000, message: "renewals" });
    const [h] = await client.holders("renew:node:kept");
    assert.deepEqual([h.token, h.owner, h.meta], [mutex.token, "w-1", { job: 1 }]);
    await mutex.release();
    const sent = (await redis.slowlog("GET", 1024)).map((e) => e[3]).reverse()
      .filter((argv) => argv[0] === "UNIQUE.LOCK" && argv[1] === "renew:node:kept");
    const bare = ["UNIQUE.LOCK", "renew:node:kept", mutex.identifier, "TTL", "600"];
    assert.ok(sent.length >= 7);
    for (const argv of sent.slice(1)) assert.deepEqual(argv, bare);
    assert.deepEqual(lost, []);
  } finally {
    await redis.config("SET", "slowlog-log-slower-than", "10000");
  }
});

test("a renewal refused after a REAP and another holder is lost at once", async () => {
  const lost = [];
  const mutex = new Mutex(client, "renew:node:reaped", { lockTimeout: 1000, owner: "w-dead",
                                                        onLockLost: (e) => lost.push(e) });
  await mutex.acquire();
  assert.equal(await client.reap({ owner: "w-dead" }), 1);
  const other = await client.lock("renew:node:reaped", "other", { ttl: 30_000 });
  await waitFor(() => lost.length === 1, { message: "the loss to be told" });
  assert.match(lost[0].message, /another holder/);
  assert.equal(mutex.isAcquired, false);
  await mutex.release(); // nothing to unlock: the new holder keeps it
  const [h] = await client.holders("renew:node:reaped");
  assert.deepEqual([h.jid, h.token], ["other", other]);
  await client.unlock("renew:node:reaped", "other");
});
