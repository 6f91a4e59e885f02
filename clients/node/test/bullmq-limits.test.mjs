// GroupLimit's `limits` with real BullMQ workers in child processes (test/bullmq-limits-worker.mjs):
// per-tenant and global limits together, each job's slots taken in one atomic grant. Judged on
// the server's state: its holders of every key, sampled in one transaction while the jobs run.
// On a server without the module (REDIS_UNIQUE_TEST_BACKEND=functions) `limits` is refused: the
// Functions library keeps single-key locks only (one atomic grant over keys of several hash
// slots is the module's), so a real worker's job fails with the error that names the module.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import IORedis from "ioredis";
import { Queue } from "bullmq";
import { Client, NotInFunctionsError } from "../dist/esm/index.js";
import { GroupLimit } from "../dist/esm/bullmq.js";
import { BACKEND, startServer, waitFor, assertNoClientsLeft, workerProcesses, mostInAnyWindow } from "./helpers.mjs";

const onModule = { skip: BACKEND === "functions" && "limits needs the module: refused on the library (below)" };

let server, redis, client;
const workers = workerProcesses(fileURLToPath(new URL("./bullmq-limits-worker.mjs", import.meta.url)), () => server.port);
const { children } = workers;
const startWorker = workers.start;

before(async () => {
  server = await startServer();
  redis = new IORedis({ port: server.port });
  client = new Client(redis);
});
after(async () => {
  await workers.killAll();
  await client.close();
  await redis.quit();
  await assertNoClientsLeft(server.port);
  server?.stop();
});

async function stopWorkers() {
  await Promise.all(children.splice(0).map((c) => new Promise((r) => { c.once("exit", r); c.kill("SIGTERM"); })));
}

/** The keys of a queue's limits, as the workers' GroupLimit names them. */
const namer = () => new GroupLimit({ redis: client, limits: { tenant: { group: () => "", concurrency: 1 }, global: { concurrency: 1 } } });

test("per-tenant 2 and global 5 on 3 worker processes: neither exceeded in any sample, no deadlock, every job runs", onModule, async () => {
  const name = "limits";
  const queue = new Queue(name, { connection: { host: "127.0.0.1", port: server.port } });
  await redis.del("workers", "started");
  const tenants = ["t0", "t1", "t2", "t3", "t4", "t5"];
  for (let i = 0; i < 3; i++) startWorker(name, { CONCURRENCY: 6, TENANT_LIMIT: 2, GLOBAL_LIMIT: 5 });
  await waitFor(async () => (await redis.llen("workers")) >= 3, { message: "3 workers" });
  const keys = namer();
  const tenantKeys = tenants.map((t) => keys.limitKey(name, "tenant", t));
  const globalKey = keys.limitKey(name, "global");

  // The server's holders of every key at one instant (one transaction), while the jobs run.
  const samples = [];
  let sampling = true;
  const sampler = (async () => {
    const r = new IORedis({ port: server.port });
    const c = new Client(r);
    while (sampling) {
      const batch = c.multi();
      for (const key of [...tenantKeys, globalKey]) batch.lockedBy(key);
      const held = await batch.exec();
      samples.push({ tenants: held.slice(0, -1), global: held.at(-1) });
      await new Promise((res) => setTimeout(res, 5));
    }
    await c.close();
    await r.quit();
  })();

  // Tenants of unequal job lengths (10 to 60 ms): 360 jobs, 18 worker slots for 5 global ones.
  const jobs = Array.from({ length: 360 }, (_, i) => ({
    name: "work", data: { tenant: tenants[i % tenants.length], ms: 10 + (i % tenants.length) * 10 },
  }));
  await queue.addBulk(jobs);
  await waitFor(async () => (await queue.getJobCounts("completed")).completed === 360, {
    timeout: 120_000, interval: 100, message: "360 completed jobs",
  });
  sampling = false;
  await sampler;

  const counts = await queue.getJobCounts("failed", "waiting", "delayed", "active");
  assert.deepEqual(counts, { failed: 0, waiting: 0, delayed: 0, active: 0 });
  assert.equal(new Set(await redis.lrange("started", 0, -1)).size, 360, "every job ran exactly once");
  assert.ok(samples.length >= 20, `sampled often enough: ${samples.length}`);
  let globalHighest = 0;
  let tenantHighest = 0;
  for (const s of samples) {
    assert.ok(s.global.length <= 5, `${s.global.length} held the global limit at once`);
    for (const held of s.tenants) assert.ok(held.length <= 2, `${held.length} of a tenant at once`);
    // One grant per job: a job holds its tenant's slot exactly when it holds a global one.
    assert.deepEqual(s.tenants.flat().sort(), [...s.global].sort(), "every key of a job or none");
    globalHighest = Math.max(globalHighest, s.global.length);
    tenantHighest = Math.max(tenantHighest, ...s.tenants.map((h) => h.length));
  }
  assert.equal(globalHighest, 5, "the global limit was reached, so it was tested");
  assert.equal(tenantHighest, 2, "a tenant's limit was reached, so it was tested");
  for (const key of [...tenantKeys, globalKey]) assert.deepEqual(await client.lockedBy(key), [], `${key} free at the end`);
  console.log(`# 360 jobs, ${samples.length} samples: at most ${globalHighest} in all and ${tenantHighest} of a tenant at once`);
  await stopWorkers();
  await queue.obliterate({ force: true });
  await queue.close();
});

test("a rate per tenant beside the global limit: at most 10 grants a second of each tenant, on the server's clock", onModule, async () => {
  const name = "limits-rated";
  const queue = new Queue(name, { connection: { host: "127.0.0.1", port: server.port } });
  await redis.del("workers", "started", "grants:r0", "grants:r1");
  for (let i = 0; i < 2; i++) {
    startWorker(name, { CONCURRENCY: 4, TENANT_LIMIT: 3, GLOBAL_LIMIT: 4, TENANT_RATE_MAX: 10, TENANT_RATE_MS: 1000, WAIT_MS: 5000 });
  }
  await waitFor(async () => (await redis.llen("workers")) >= 2, { message: "2 workers" });
  await queue.addBulk(Array.from({ length: 60 }, (_, i) => ({ name: "call", data: { tenant: `r${i % 2}`, ms: 5 } })));
  await waitFor(async () => (await queue.getJobCounts("completed")).completed === 60, {
    timeout: 120_000, interval: 100, message: "60 completed jobs",
  });
  for (const tenant of ["r0", "r1"]) {
    const grants = (await redis.lrange(`grants:${tenant}`, 0, -1)).map(Number);
    assert.equal(grants.length, 30, `every job of ${tenant} ran once`);
    assert.ok(grants.every(Number.isFinite), "every job found its hold");
    const most = mostInAnyWindow(grants.map((t) => t / 1000), 1000);
    assert.ok(most <= 10, `${most} grants of ${tenant} in a second`);
    assert.ok(most >= 8, `the rate was reached (${most} in a second), so it was tested`);
  }
  await stopWorkers();
  await queue.obliterate({ force: true });
  await queue.close();
});

test("a running job's slots of every limit are renewed together, and an UNLOCK of one is the loss of all", onModule, async () => {
  const lost = [];
  const limit = new GroupLimit({
    // Renewed every third of the lease: 1200 ms is kept through a stall of the loaded
    // machine of 800 ms, where one of 600 ms ended after 400 ms.
    redis: client, lease: 1200,
    limits: { tenant: { group: (job) => job.data.tenant, concurrency: 2 }, global: { concurrency: 5 } },
    onLockLost: (error, job) => lost.push([error, job.id]),
  });
  const job = { id: "renewed-1", data: { tenant: "acme" }, queueName: "limits-renewal" };
  const keys = limit.keysOf(job);
  const leaseEnds = async () => Promise.all(keys.map(async (key) => (await client.holders(key))[0]));
  const result = await limit.wrap(async (j, token, signal) => {
    const first = await leaseEnds();
    // Kept: the same holds (tokens) with their leases moved on, well past the first lease.
    await waitFor(async () => {
      const now = await leaseEnds();
      return now.every((h, i) => h && h.token === first[i].token && h.expiresAt >= first[i].expiresAt + 2 * 1200);
    }, { timeout: 30_000, message: "renewals of both keys" });
    // Lost: one key's hold removed; the next renewal refuses every key, and the job hears of it.
    await client.unlock(keys[0], String(j.id));
    await waitFor(() => signal.aborted, { timeout: 30_000, message: "the processor's signal aborted" });
    return signal.reason;
  })(job, "token");
  assert.equal(lost.length, 1);
  assert.equal(lost[0][1], "renewed-1");
  assert.equal(result, lost[0][0], "the signal's reason is the LockLostError onLockLost got");
  assert.deepEqual(result.keys, keys);
  await client.unlockAll(keys, "renewed-1"); // the global hold, left to its lease by the refused renewal
  assert.deepEqual(await Promise.all(keys.map((key) => client.lockedBy(key))), [[], []]);
});

test("on the Functions library, limits is refused: a real worker's job fails with the error naming the module, holding nothing", { skip: BACKEND !== "functions" && "the module keeps limits (above)" }, async () => {
  const name = "limits-refused";
  const queue = new Queue(name, { connection: { host: "127.0.0.1", port: server.port } });
  await redis.del("workers", "started");
  startWorker(name, { CONCURRENCY: 2 });
  await waitFor(async () => (await redis.llen("workers")) >= 1, { message: "the worker" });
  const job = await queue.add("call", { tenant: "t0", ms: 5 });
  await waitFor(async () => (await queue.getJobCounts("failed")).failed === 1, { message: "the job to fail" });
  const failed = await queue.getJob(job.id);
  assert.match(failed.failedReason, /UNIQUE\.LOCKALL needs the redis-unique module/);
  assert.equal(await redis.llen("started"), 0, "the processor never ran");
  const keys = namer();
  for (const key of [keys.limitKey(name, "tenant", "t0"), keys.limitKey(name, "global")]) {
    assert.deepEqual(await client.lockedBy(key), [], key);
  }
  // and the client refuses the call itself, before sending anything
  await assert.rejects(client.lockAll(["a", "b"], "j"), NotInFunctionsError);
  await stopWorkers();
  await queue.obliterate({ force: true });
  await queue.close();
});
