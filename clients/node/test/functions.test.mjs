// The client on a server started WITHOUT the module: it finds that out by itself, loads the
// Functions library (functions/redis_unique.lua) or says what an operator runs, and the same
// code locks, waits and renews; the conformance table's calls give the same value on both
// backends, and its LOCKALL rows are refused on the library with an error naming the module.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { spawnSync } from "node:child_process";
import IORedis from "ioredis";
import { createClient } from "redis";
import { Client, Mutex, Semaphore, commands, setBackend, wakeKey, LIBRARY_VERSION, FunctionsNotLoadedError, NotInFunctionsError } from "../dist/esm/index.js";
import { LIBRARY } from "../dist/esm/library.js";
import { ROOT, startServer, waitFor } from "./helpers.mjs";

const table = JSON.parse(readFileSync(new URL("../../conformance/table.json", import.meta.url), "utf8"));
let plain;
let withModule;

before(async () => {
  plain = await startServer({ module: false });
  withModule = await startServer({ module: true });
});
after(() => {
  plain.stop();
  withModule.stop();
});

async function fresh() {
  const redis = new IORedis({ port: plain.port });
  await redis.call("FLUSHALL", "SYNC");
  await redis.call("FUNCTION", "FLUSH", "SYNC");
  return redis;
}

test("the package ships the repository's library", () => {
  assert.equal(LIBRARY, readFileSync(`${ROOT}/functions/redis_unique.lua`, "utf8"));
  assert.ok(LIBRARY_VERSION >= 1);
});

test("the wake list hashes with the lock key, as the Python client's and the library's", async () => {
  const redis = await fresh();
  try {
    for (const key of ["plain", "{user:1}:lock", "a{b", "a}b", "x{}y}z"]) {
      assert.ok(wakeKey(key).endsWith(`:unique:w:${key}`));
      const c = new Client(redis);
      assert.equal(typeof (await c.lock(key, "j", { ttl: 60000 })), "number", key);
    }
  } finally {
    redis.disconnect();
  }
});

test("ioredis and node-redis: the library is loaded and the same code locks", async () => {
  const redis = await fresh();
  try {
    const c = new Client(redis);
    const token = await c.lock("k", "a", { ttl: 30000 });
    assert.equal(typeof token, "number");
    assert.equal(await c.lock("k", "b"), null);
    assert.deepEqual((await c.holders("k")).map((h) => h.jid), ["a"]);
    assert.equal(await c.unlock("k", "a"), true);
    assert.equal(Number(await redis.call("FCALL_RO", "unique_version", "0")), LIBRARY_VERSION);
    const nr = createClient({ url: plain.url });
    await nr.connect();
    try {
      const c2 = new Client(nr);
      assert.equal(typeof (await c2.lock("k2", "a", { ttl: 30000 })), "number");
      assert.equal(await c2.lock("k2", "b"), null);
    } finally {
      await nr.quit();
    }
  } finally {
    redis.disconnect();
  }
});

test("a wait is served by the release, a Mutex renews, a Semaphore counts", async () => {
  const redis = await fresh();
  const c = new Client(redis);
  try {
    await c.lock("w", "holder", { ttl: 60000 });
    const waiting = c.lock("w", "waiter", { ttl: 60000, wait: 30000 });
    await waitFor(async () => (await c.waiters("w")) === 1, { message: "the waiter to queue" });
    assert.equal(await c.unlock("w", "holder"), true);
    assert.equal(typeof (await waiting), "number");
    const mutex = new Mutex(redis, "m", { lockTimeout: 300 });
    await mutex.acquire();
    const first = (await c.holders("m"))[0];
    await waitFor(async () => (await c.holders("m"))[0]?.expiresAt > first.expiresAt + 200, { message: "a renewal" });
    await mutex.release();
    assert.deepEqual(await c.holders("m"), []);
    const s1 = new Semaphore(redis, "s", 2, { lockTimeout: 30000 });
    const s2 = new Semaphore(redis, "s", 2, { lockTimeout: 30000 });
    await s1.acquire();
    await s2.acquire();
    assert.equal(await c.lock("s", "third", { limit: 2 }), null);
    await s1.release();
    await s2.release();
  } finally {
    await c.close();
    redis.disconnect();
  }
});

test("lockAll is refused with an error naming the module; reap and metrics work", async () => {
  const redis = await fresh();
  const c = new Client(redis);
  try {
    await assert.rejects(c.lockAll(["{a}:x", "{a}:y"], "j"), (err) => err instanceof NotInFunctionsError && /needs the redis-unique module/.test(err.message));
    await c.lock("r1", "j1", { owner: "dead" });
    await c.lock("r2", "j2", { owner: "alive" });
    assert.equal(await c.reap({ owner: "dead" }), 1);
    assert.deepEqual((await c.holders("r2")).map((h) => h.jid), ["j2"]);
    const m = await c.metrics();
    assert.equal(m.total.reaped, 1);
  } finally {
    redis.disconnect();
  }
});

test("a user who may not load it is told the operator's command, which loads it", async () => {
  const admin = await fresh();
  await admin.call("ACL", "SETUSER", "app", "on", ">pw", "~*", "+@all", "-function");
  try {
    const app = new IORedis({ port: plain.port, username: "app", password: "pw" });
    await assert.rejects(new Client(app).lock("k", "a"), (err) => err instanceof FunctionsNotLoadedError && /npx redis-unique functions load/.test(err.message));
    app.disconnect();
    const cli = spawnSync(process.execPath, [new URL("../dist/esm/cli.js", import.meta.url).pathname, "functions", "load", plain.url], { encoding: "utf8" });
    assert.equal(cli.status, 0, cli.stderr);
    assert.match(cli.stdout, /loaded redis_unique library version/);
    const again = new IORedis({ port: plain.port, username: "app", password: "pw" });
    assert.equal(typeof (await new Client(again).lock("k", "a")), "number");
    again.disconnect();
  } finally {
    await admin.call("ACL", "DELUSER", "app");
    admin.disconnect();
  }
});

test("a setting forces the module backend", async () => {
  const redis = await fresh();
  setBackend("module");
  try {
    await assert.rejects(new Client(redis).lock("k", "a"), /not loaded|unknown command/i);
  } finally {
    setBackend(undefined);
    redis.disconnect();
  }
});

// ---- The conformance table's calls on both backends ---------------------------------

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

const build = {
  lock: (a) => commands.lock(a.key, a.jid, nodeOptions(a)),
  unlock: (a) => commands.unlock(a.key, a.jid),
  locked_by: (a) => commands.lockedBy(a.key),
  holders: (a) => commands.holders(a.key),
  waiters: (a) => commands.waiters(a.key),
  waiters_by_group: (a) => commands.waitersByGroup(a.key),
  rate: (a) => commands.rate(a.key),
  lock_all: (a) => commands.lockAll(a.keys, a.jid, { limits: a.limits }),
  unlock_all: (a) => commands.unlockAll(a.keys, a.jid),
};

async function runRow(redis, c) {
  const client = new Client(redis);
  await client.lock("k", "someone", { limit: 0, ttl: 60000, owner: "o", meta: { a: 1 } });
  const command = build[c.call](c.args);
  try {
    const value = await client.run(command);
    if (c.call === "lock") return typeof value === "number" ? "token" : value;
    if (c.call === "holders") return value.map((h) => [h.jid, h.type, h.owner, h.group, h.mode]);
    return value;
  } catch (err) {
    return ["error", err.message.replace(/^ERR /, "")];
  } finally {
    await client.close();
  }
}

for (const c of table.calls) {
  const inSeconds = Object.keys(c.args).some((k) => k.endsWith("_seconds"));
  const waits = "wait_ms" in c.args && !("limit" in c.args);
  test(`both backends: ${c.name}`, { skip: (inSeconds && "Node takes milliseconds only") || (waits && "a wait that runs out: tested above") }, async () => {
    const lib = await fresh();
    const mod = new IORedis({ port: withModule.port });
    try {
      await mod.call("FLUSHALL", "SYNC");
      if (c.functions === "refused") {
        await assert.rejects(new Client(lib).run(build[c.call](c.args)), NotInFunctionsError);
        return;
      }
      assert.deepEqual(await runRow(lib, c), await runRow(mod, c));
    } finally {
      lib.disconnect();
      mod.disconnect();
    }
  });
}
