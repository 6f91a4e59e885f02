// The renewal rule of clients/conformance (README "Renewal"): the table's timing, argv and
// outcomes on the one Refresher every lock of this client uses, and a real server: a lease
// shorter than the job kept alive with renewals that send only the lease; a renewal refused
// after a REAP and another holder, lost at once; the connection cut mid-job (a proxy in
// between) and restored before the lease ends (kept) and after (lost when the lease ends);
// a renewal that comes after the lease ended gives up the new grant it got. The connection
// tests run over both Redis clients: each queues, resends or fails a command on a dropped
// link its own way, and the rule must hold over either.
import { test, describe, before, beforeEach, after } from "node:test";
import IORedis from "ioredis";
import { createClient } from "redis";
import { startServer, startCutProxy, waitFor, assertNoClientsLeft } from "./helpers.mjs";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { Client, Mutex, Refresher, renewIntervalMs, renewRetryMs, CommandError, commands } from "../dist/esm/index.js";
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
    if ("unlock_argv" in c) {
      // The release of the hold the renewal took, by the reply's token.
      const sent = [];
      const recorder = { unlock: (key, jid, token) => { sent.push(commands.unlock(key, jid, token).argv); return Promise.resolve(); } };
      const r2 = new Refresher(recorder, { key: "k", jid: "j", token: c.token, leaseMs: 30000, sentAt: 0, onLost() {} });
      r2.releaseCall("j", c.reply);
      assert.deepEqual(sent, [c.unlock_argv]);
    }
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
  // Renewed every third of the lease: 1200 ms is kept through a stall of the loaded machine
  // of 800 ms, where one of 600 ms ended after 400 ms.
  const lease = 1200;
  const mutex = new Mutex(client, "renew:node:kept", { lockTimeout: lease, owner: "w-1", meta: { job: 1 },
                                                      onLockLost: (e) => lost.push(e) });
  try {
    await mutex.acquire();
    const start = Date.now();
    await waitFor(() => mutex.renewals >= 6 && Date.now() - start > 3 * lease, { timeout: 30_000, message: "renewals" });
    const [h] = await client.holders("renew:node:kept");
    assert.deepEqual([h.token, h.owner, h.meta], [mutex.token, "w-1", { job: 1 }]);
    await mutex.release();
    const sent = (await redis.slowlog("GET", 1024)).map((e) => e[3]).reverse()
      .filter((argv) => argv[0] === "UNIQUE.LOCK" && argv[1] === "renew:node:kept");
    const bare = ["UNIQUE.LOCK", "renew:node:kept", mutex.identifier, "TTL", String(lease)];
    assert.ok(sent.length >= 7);
    for (const argv of sent.slice(1)) assert.deepEqual(argv, bare);
    assert.deepEqual(lost, []);
  } finally {
    await redis.config("SET", "slowlog-log-slower-than", "10000");
  }
});

test("a renewal refused after a REAP and another holder is lost at once", async () => {
  const lost = [];
  // A lease of 3 s: the REAP comes while it is held however late the loaded machine runs it
  // (a lease that ended first would be taken again by a late renewal, another loss).
  const mutex = new Mutex(client, "renew:node:reaped", { lockTimeout: 3000, owner: "w-dead",
                                                        onLockLost: (e) => lost.push(e) });
  await mutex.acquire();
  // At least its holder: REAP also counts ended leases other tests left on this server.
  const reaped = await client.reap({ owner: "w-dead" });
  assert.ok(reaped >= 1, `reaped ${reaped}`);
  const other = await client.lock("renew:node:reaped", "other", { ttl: 30_000 });
  await waitFor(() => lost.length === 1, { message: "the loss to be told" });
  assert.match(lost[0].message, /another holder/);
  assert.equal(mutex.isAcquired, false);
  await mutex.release(); // nothing to unlock: the new holder keeps it
  const [h] = await client.holders("renew:node:reaped");
  assert.deepEqual([h.jid, h.token], ["other", other]);
  await client.unlock("renew:node:reaped", "other");
});

// Both Redis clients behind the one seam, each with its own reconnect and offline queue
// (the defaults: a user's client is rarely tuned for renewals).
const flavours = {
  ioredis: async (port) => {
    const r = new IORedis({ port });
    r.on("error", () => {}); // a cut link is expected: its errors reach the renewal, not the log
    return { redis: r, close: () => r.disconnect() };
  },
  "node-redis": async (port) => {
    const r = createClient({ socket: { port, host: "127.0.0.1" } });
    r.on("error", () => {});
    await r.connect();
    return { redis: r, close: () => r.destroy() };
  },
};

/**
 * The LOCK and UNLOCK calls made on `client` from now on (the renewals among them, and the
 * holds they give up): for each, a promise of its outcome ({ reply } or { error }) and when
 * it came (`at`, Date.now()).
 */
function spyOn(client) {
  const calls = { lock: [], unlock: [] };
  for (const name of ["lock", "unlock"]) {
    const call = client[name].bind(client);
    client[name] = (...args) => {
      const p = call(...args);
      calls[name].push(p.then((reply) => ({ reply, at: Date.now() }), (error) => ({ error, at: Date.now() })));
      return p;
    };
  }
  return calls;
}

for (const [name, connect] of Object.entries(flavours)) {
  describe(`renewal over ${name}`, () => {
    let proxy, conn, via, calls;
    before(async () => {
      proxy = await startCutProxy(server.port);
      conn = await connect(proxy.port);
      via = new Client(conn.redis);
      calls = spyOn(via);
    });
    after(async () => {
      proxy.restore();
      await via.close();
      await conn.close();
      await proxy.close();
    });

    const key = (s) => `renew:node:${name}:${s}`;

    // Each test starts on a working link: after a cut, the client reconnects with a backoff,
    // and a lease counted from a LOCK sent meanwhile would start short.
    beforeEach(async () => {
      await via.holders(key("link"));
    });

    test("a connection restored before the lease ends keeps the lock", async () => {
      const lost = [];
      const mutex = new Mutex(via, key("blip"), { lockTimeout: 3000, onLockLost: (e) => lost.push(e) });
      await mutex.acquire();
      await waitFor(() => mutex.renewals >= 1, { message: "a first renewal" });
      proxy.cut();
      const sentBefore = calls.lock.length;
      // The client reconnects on its own: a refused reconnect is not enough, a renewal must
      // meet the cut link too.
      await waitFor(() => proxy.refused >= 1 && calls.lock.length > sentBefore, { message: "a renewal to meet the cut link" });
      proxy.restore();
      const before = mutex.renewals;
      await waitFor(() => mutex.renewals > before, { message: "a renewal after the link is back" });
      assert.deepEqual((await client.holders(key("blip"))).map((h) => h.token), [mutex.token]);
      assert.equal(mutex.isAcquired, true);
      await mutex.release();
      assert.deepEqual(lost, []);
      assert.deepEqual(await client.holders(key("blip")), []);
    });

    test("a connection down past the lease loses the lock when the lease ends", async () => {
      const lost = [];
      const lease = 1200;
      const sent = calls.lock.length;
      let lostAt;
      const mutex = new Mutex(via, key("down"), { lockTimeout: lease, onLockLost: (e) => {
        lostAt ??= Date.now();
        lost.push(e);
      } });
      const askedAt = Date.now();
      await mutex.acquire();
      await waitFor(() => mutex.renewals >= 1, { message: "a first renewal" });
      proxy.cut();
      // Read in the cut's tick (the mutex forgets its count once lost); a renewal answered
      // after it only makes the bound below looser.
      const renewals = mutex.renewals;
      await waitFor(() => lost.length > 0, { message: "the loss to be told" });
      const toldAt = Date.now();
      // Not before the lease could have ended. The grant was sent after askedAt and each kept
      // renewal at least a third of the lease after the one before, so the last one kept was
      // sent no sooner than askedAt + renewals * lease / 3, and its lease runs a whole lease
      // from there; every try since met the cut link. (Measured from the cut instead, a timer
      // or a test step that the loaded machine ran late would move the bound.)
      const earliest = askedAt + renewals * renewIntervalMs(lease) + lease;
      assert.ok(lostAt >= earliest - 50, `told ${lostAt - earliest} ms after the earliest end (${renewals} renewals)`);
      assert.ok(proxy.refused >= 1);
      assert.match(lost[0].message, /before the lease ended/);
      assert.equal(mutex.isAcquired, false);
      await waitFor(async () => (await client.holders(key("down"))).length === 0, { message: "the server's lease to end" });
      const unlocked = calls.unlock.length;
      proxy.restore();
      // A renewal the client queued or resent through the cut (ioredis resends one, node-redis
      // may have failed them all) lands now and takes the lock again: that hold is no job's,
      // and is given up at once, not left to block others for a lease.
      const late = (await Promise.all(calls.lock.slice(sent))).filter((c) => typeof c.reply === "number" && c.at > toldAt);
      await waitFor(() => calls.unlock.length - unlocked >= late.length, { message: "the late renewals' holds given up" });
      assert.equal(calls.unlock.length - unlocked, late.length);
      for (const c of await Promise.all(calls.unlock.slice(unlocked))) assert.equal(c.reply, true);
      assert.deepEqual(await client.holders(key("down")), []);
      await mutex.release(); // nothing held: the loss was told already, once
      assert.equal(lost.length, 1);
    });

    test("a renewal after the lease gives up the new grant", async () => {
      const lost = [];
      const unlocked = calls.unlock.length;
      const mutex = new Mutex(via, key("late"), { lockTimeout: 1000, onLockLost: (e) => lost.push(e) });
      await mutex.acquire();
      await redis.del(key("late")); // nobody holds it: the next renewal is a new grant
      await waitFor(() => lost.length > 0, { message: "the loss to be told" });
      assert.match(lost[0].message, /another fencing token/);
      // Given up by an UNLOCK, not left to end with its lease.
      await waitFor(() => calls.unlock.length === unlocked + 1, { message: "the new grant given up" });
      assert.deepEqual((await calls.unlock[unlocked]).reply, true);
      assert.deepEqual(await client.holders(key("late")), []);
      assert.equal(mutex.isAcquired, false);
      await mutex.release();
      assert.equal(lost.length, 1);
    });
  });
}
