// The Functions library on a Redis Cluster of three primaries started WITHOUT the module,
// through an ioredis Cluster: the client loads the library on every primary, locks keys of
// many slots (every key a call touches is in the lock's slot: the server refuses any other),
// a wait is served by the release, and a primary that lost the library (a failover to a node
// without it, a FUNCTION FLUSH) gets it again at the next call.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import IORedis from "ioredis";
import { Client, LIBRARY_VERSION } from "../dist/esm/index.js";
import { startServer, waitFor } from "./helpers.mjs";

const CLI = process.env.REDIS_CLI || "redis-cli";
let nodes = [];
let cluster;

before(async () => {
  for (let i = 0; i < 3; i++) {
    nodes.push(await startServer({ module: false, args: ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"] }));
  }
  const out = spawnSync(CLI, ["--cluster", "create", ...nodes.map((n) => `127.0.0.1:${n.port}`), "--cluster-replicas", "0", "--cluster-yes"],
    { encoding: "utf8", timeout: 120_000 });
  assert.equal(out.status, 0, out.stdout + out.stderr);
  for (const n of nodes) {
    const r = new IORedis({ port: n.port });
    await waitFor(async () => /cluster_state:ok/.test(String(await r.call("CLUSTER", "INFO"))), { message: "the cluster to be ok" });
    r.disconnect();
  }
  cluster = new IORedis.Cluster([{ host: "127.0.0.1", port: nodes[0].port }]);
  await waitFor(() => cluster.status === "ready", { message: "the cluster client" });
});
after(async () => {
  await cluster?.quit();
  for (const n of nodes) n.stop();
});

/** The library's version on each primary (null where it is not loaded). */
async function versions() {
  return Promise.all(nodes.map(async (n) => {
    const r = new IORedis({ port: n.port });
    try {
      return Number(await r.call("FCALL_RO", "unique_version", "0"));
    } catch {
      return null;
    } finally {
      r.disconnect();
    }
  }));
}

/** The port of the primary that serves `key`'s slot. */
async function ownerOf(key) {
  const r = new IORedis({ port: nodes[0].port });
  try {
    const slot = Number(await r.call("CLUSTER", "KEYSLOT", key));
    const ranges = await r.call("CLUSTER", "SLOTS");
    return ranges.find(([from, to]) => from <= slot && slot <= to)[2][1];
  } finally {
    r.disconnect();
  }
}

test("the client loads the library on every primary and locks keys of many slots", async () => {
  const c = new Client(cluster);
  const keys = ["a", "b", "c", "order:17", "{user:1}:sync", "x}y", "q{r"];
  const tokens = [];
  for (const key of keys) tokens.push(await c.lock(key, "j1", { ttl: 60_000 }));
  assert.ok(tokens.every((t) => typeof t === "number"), String(tokens));
  assert.deepEqual(await versions(), [LIBRARY_VERSION, LIBRARY_VERSION, LIBRARY_VERSION]);
  const owners = new Set(await Promise.all(keys.map(ownerOf)));
  assert.ok(owners.size > 1, "the keys landed on more than one primary");
  for (const key of keys) {
    assert.equal(await c.lock(key, "j2"), null, key);
    assert.deepEqual((await c.holders(key)).map((h) => h.jid), ["j1"]);
    assert.equal(await c.unlock(key, "j1"), true);
  }
});

test("a wait on a cluster is served by the release, through the lock's own slot", async () => {
  const c = new Client(cluster);
  assert.equal(typeof (await c.lock("{w}:lock", "holder", { ttl: 60_000 })), "number");
  const other = new IORedis.Cluster([{ host: "127.0.0.1", port: nodes[1].port }]);
  try {
    const waiting = new Client(other).lock("{w}:lock", "waiter", { ttl: 60_000, wait: 30_000 });
    await waitFor(async () => (await c.waiters("{w}:lock")) === 1, { message: "the waiter to queue" });
    assert.equal(await c.unlock("{w}:lock", "holder"), true);
    assert.equal(typeof (await waiting), "number");
    assert.deepEqual((await c.holders("{w}:lock")).map((h) => h.jid), ["waiter"]);
    assert.equal(await c.unlock("{w}:lock", "waiter"), true);
  } finally {
    await other.quit();
  }
});

test("a primary that lost the library gets it again at the next call (function not found)", async () => {
  const c = new Client(cluster);
  assert.equal(typeof (await c.lock("again", "j", { ttl: 60_000 })), "number");
  const port = await ownerOf("again");
  const r = new IORedis({ port });
  try {
    await r.call("FUNCTION", "FLUSH", "SYNC");
    assert.equal((await versions()).filter((v) => v === null).length, 1);
    assert.equal(await c.lock("again", "k"), null, "the hold of j is kept, k denied");
    assert.deepEqual(await versions(), [LIBRARY_VERSION, LIBRARY_VERSION, LIBRARY_VERSION]);
    assert.equal(await c.unlock("again", "j"), true);
  } finally {
    r.disconnect();
  }
});
