import { test, before, after, describe } from "node:test";
import assert from "node:assert/strict";
import IORedis from "ioredis";
import { createClient } from "redis";
import {
  setBackend,
  Client, CommandError, ModuleNotLoadedError, UniqueError,
} from "../dist/esm/index.js";
import { startServer, calls, assertNoClientsLeft } from "./helpers.mjs";

let server;
before(async () => { server = await startServer(); });
after(async () => { await assertNoClientsLeft(server.port); server?.stop(); });

// Both Redis clients behind the one seam, each through every call.
const flavours = {
  ioredis: async (port) => {
    const r = new IORedis({ port });
    return { redis: r, close: () => r.quit() };
  },
  "node-redis": async (port) => {
    const r = createClient({ socket: { port, host: "127.0.0.1" } });
    await r.connect();
    return { redis: r, close: () => r.close?.() ?? r.quit() };
  },
};

for (const [name, connect] of Object.entries(flavours)) {
  describe(`Client over ${name}`, () => {
    let conn, client, raw;
    before(async () => {
      conn = await connect(server.port);
      client = new Client(conn.redis);
      raw = new IORedis({ port: server.port });
    });
    after(async () => { await client.close(); await conn.close(); await raw.quit(); });

    const key = (s) => `${name}:${s}`;

    test("lock, renew, deny, unlock", async () => {
      const t1 = await client.lock(key("a"), "job-a", { ttl: 60_000 });
      assert.equal(typeof t1, "number");
      assert.equal(await client.lock(key("a"), "job-b", { ttl: 60_000 }), null);
      assert.equal(await client.lock(key("a"), "job-a", { ttl: 120_000 }), t1, "a renewal keeps its token");
      assert.deepEqual(await client.lockedBy(key("a")), ["job-a"]);
      assert.equal(await client.unlock(key("a"), "job-a"), true);
      assert.equal(await client.unlock(key("a"), "job-a"), false);
      assert.deepEqual(await client.lockedBy(key("a")), []);
    });

    test("a rate beside the limit: a grant spends it, a renewal does not, rate() tells the state", async () => {
      const rate = { limit: 2, per: 1000 };
      // The grant, the refusal, the renewal and the state's read in one transaction: sent one by
      // one, a loaded machine that ran the test half a second late between two of them would
      // see the rate allow the next (2 a second: 500 ms after the grant).
      const [t1, denied, renewed, state] = await client.multi()
        .lock(key("r"), "a", { limit: 3, ttl: 60_000, rate })
        .lock(key("r"), "b", { limit: 3, ttl: 60_000, rate })
        .lock(key("r"), "a", { limit: 3, ttl: 60_000, rate })
        .rate(key("r"))
        .exec();
      assert.equal(typeof t1, "number");
      assert.equal(denied, null, "the rate refuses");
      assert.equal(renewed, t1, "a renewal is free");
      assert.deepEqual([state.limit, state.per, state.burst, state.remaining], [2, 1000, 0, 0]);
      assert.equal(state.allowedAt, state.idleAt);
      assert.ok(state.allowedAt >= Math.floor(t1 / 1000) + 500, "500 ms after the grant");
      assert.equal(await client.rate(key("none")), null);
      await assert.rejects(client.lock(key("r"), "c", { rate: { limit: 0, per: 1000 } }), RangeError);
    });

    test("holders carry token, lease, type, owner and meta in ms", async () => {
      const before = Date.now();
      const token = await client.lock(key("h"), "j1", {
        ttl: 60_000, limit: 2, type: "until_executed", owner: "host:1", meta: { class: "Sync", n: 1 },
      });
      await client.lock(key("h"), "j2", { limit: 2 });
      const sent = Date.now();
      const [h1, h2] = await client.holders(key("h"));
      const got = Date.now();
      assert.equal(h1.jid, "j1");
      assert.equal(h1.token, token);
      assert.ok(h1.acquiredAt >= before - 5 && h1.acquiredAt <= Date.now() + 5);
      assert.equal(h1.expiresAt, h1.acquiredAt + 60_000);
      // The time left as the server read it during the call, bounded from the lease's end: a
      // pause of the test before the call shrinks it (a second's pause broke ttl > 59 s), not these.
      assert.ok(h1.ttl > 0 && h1.ttl <= 60_000);
      assert.ok(h1.ttl >= h1.expiresAt - got - 2 && h1.ttl <= h1.expiresAt - sent + 2,
        `${h1.ttl} ms left of a lease ending at ${h1.expiresAt}, read between ${sent} and ${got}`);
      assert.equal(h1.type, "until_executed");
      assert.equal(h1.owner, "host:1");
      assert.deepEqual(h1.meta, { class: "Sync", n: 1 });
      assert.deepEqual({ expiresAt: h2.expiresAt, ttl: h2.ttl, owner: h2.owner, meta: h2.meta, type: h2.type },
        { expiresAt: null, ttl: null, owner: null, meta: null, type: "lock" });
    });

    test("pxat is unix milliseconds, and a lease past year 9999 reads back", async () => {
      const at = Date.now() + 3_600_000;
      await client.lock(key("p"), "j", { pxat: at });
      assert.equal((await client.holders(key("p")))[0].expiresAt, at);
      await client.lock(key("p2"), "j", { pxat: new Date(at) });
      assert.equal((await client.holders(key("p2")))[0].expiresAt, at);
      const far = 300_000_000_000_000; // year 11,000 or so
      await client.lock(key("far"), "j", { pxat: far });
      assert.equal((await client.holders(key("far")))[0].expiresAt, far);
    });

    test("WAIT blocks on a connection of its own and is served by an UNLOCK", async () => {
      await client.lock(key("w"), "a");
      const waiting = client.lock(key("w"), "b", { wait: 10_000 });
      // this client's own connection stays free meanwhile
      await assertEventually(async () => (await client.waiters(key("w"))) === 1);
      assert.equal(await client.unlock(key("w"), "a"), true);
      assert.equal(typeof (await waiting), "number");
      assert.deepEqual(await client.lockedBy(key("w")), ["b"]);
      assert.equal(await client.lock(key("w"), "c", { wait: 50 }), null, "a wait that runs out is null");
    });

    test("reap runs the cursor to the end", async () => {
      for (let i = 0; i < 250; i++) await client.lock(key(`r:${i}`), `j${i}`, { owner: `dead:${name}` });
      // At least the owner's 250: REAP also counts ended leases other tests left on this
      // server. That the cursor went to the end shows in every one of the 250 keys freed.
      const reaped = await client.reap({ owner: `dead:${name}`, count: 10 });
      assert.ok(reaped >= 250, `reaped ${reaped}`);
      const left = [];
      for (let i = 0; i < 250; i++) left.push(...(await client.lockedBy(key(`r:${i}`))));
      assert.deepEqual(left, []);
    });

    test("metrics", async () => {
      // A grant of its own, not one an earlier test may have made minutes ago.
      await client.lock(key("metrics"), "a");
      const m = await client.metrics();
      assert.ok(m.total.acquired > 0);
      assert.ok(typeof m.locks === "number" && typeof m.holders === "number");
      // The current and the previous minute: the grant above may be in the one before a
      // minute's turn (minutes: 1 alone would then read an empty bucket).
      assert.ok((await client.metrics({ minutes: 2 })).total.acquired > 0);
    });

    test("pipelines and transactions, errors in place", async () => {
      const [t, held, released, err] = await client.pipeline()
        .lock(key("pipe"), "a", { ttl: 1000 })
        .lockedBy(key("pipe"))
        .unlock(key("pipe"), "a")
        .command(["UNIQUE.LOCK", key("pipe"), "a", "TTL", "0"])
        .exec();
      assert.equal(typeof t, "number");
      assert.deepEqual(held, ["a"]);
      assert.equal(released, true);
      assert.ok(err instanceof CommandError);
      assert.equal(err.code, "ERR");
      const [t2, holders] = await client.multi().lock(key("tx"), "a").holders(key("tx")).exec();
      assert.equal(holders[0].token, t2);
      assert.throws(() => client.pipeline().lock(key("x"), "a", { wait: 10 }), TypeError);
    });

    test("bad arguments throw before anything is sent", async () => {
      const sent = await calls(raw, "unique.lock");
      const bad = [
        [{ ttl: -1 }, RangeError], [{ ttl: 1.5 }, RangeError], [{ ttl: "10" }, TypeError],
        [{ limit: 1.5 }, RangeError], [{ limit: -1 }, RangeError], [{ limit: "2" }, TypeError],
        [{ type: "has space" }, RangeError], [{ wait: 0 }, RangeError], [{ owner: "" }, RangeError],
        [{ ttl: 10, pxat: Date.now() + 1000 }, TypeError], [{ meta: [1, 2] }, TypeError],
      ];
      for (const [options, kind] of bad) {
        await assert.rejects(client.lock(key("bad"), "j", options), kind, JSON.stringify(options));
      }
      await assert.rejects(client.lock("", "j"), TypeError);
      await assert.rejects(client.lock(key("bad"), ""), RangeError);
      assert.equal(await calls(raw, "unique.lock"), sent, "nothing reached the server");
    });

    test("server errors keep their code", async () => {
      await raw.set(key("str"), "x");
      const err = await client.lock(key("str"), "j").catch((e) => e);
      assert.ok(err instanceof CommandError && err instanceof UniqueError);
      assert.equal(err.code, "WRONGTYPE");
      const meta = await client.lock(key("m"), "j", { meta: "[1]" }).catch((e) => e);
      assert.equal(meta.code, "ERR");
      assert.match(meta.message, /META must be a JSON object/);
    });
  });
}

test("a server without the module, forced to the module backend: ModuleNotLoadedError saying how to load it", async () => {
  // by default the client takes the Functions library there (test/functions.test.mjs)
  const bare = await startServer({ module: false });
  const r = new IORedis({ port: bare.port });
  setBackend("module");
  try {
    const err = await new Client(r).lock("k", "j").catch((e) => e);
    assert.ok(err instanceof ModuleNotLoadedError);
    assert.match(err.message, /loadmodule/);
  } finally {
    setBackend(undefined);
    await r.quit();
    bare.stop();
  }
});

test("an unknown Redis client is a TypeError", () => {
  assert.throws(() => new Client({}), TypeError);
});

async function assertEventually(condition) {
  const deadline = Date.now() + 5000;
  while (!(await condition())) {
    if (Date.now() > deadline) assert.fail("condition never held");
    await new Promise((r) => setTimeout(r, 10));
  }
}
