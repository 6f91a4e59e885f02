// Tenants take turns at one slot, with real BullMQ workers (test/bullmq-worker.mjs, a
// GroupLimit of `total` 1 and no limit per group): the test holds the queue's key while jobs
// queue in a known order, each confirmed waiting in the server before the next is added, then
// frees it; the order the jobs start in is the order of the grants. Each shape runs with a
// group per tenant (the first letter of the job's name) and beside it with every job in one
// group (arrival order):
// - one tenant's backlog queued first: A1 A2 A3 B1 B2 C1 start A1 B1 C1 A2 B2 A3, in arrival
//   order in one group;
// - short jobs (50 ms): six of A, then one of B: B starts second, seventh in one group.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import IORedis from "ioredis";
import { Queue } from "bullmq";
import { Client } from "../dist/esm/index.js";
import { startServer, waitFor, assertNoClientsLeft, workerProcesses } from "./helpers.mjs";

let server, redis, client;
const workers = workerProcesses(fileURLToPath(new URL("./bullmq-worker.mjs", import.meta.url)), () => server.port);

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

const shapes = {
  "a backlog queued first": { ms: 200, jobs: ["A1", "A2", "A3", "B1", "B2", "C1"], turns: ["A1", "B1", "C1", "A2", "B2", "A3"] },
  "short jobs": { ms: 50, jobs: ["A1", "A2", "A3", "A4", "A5", "A6", "B1"], turns: ["A1", "B1", "A2", "A3", "A4", "A5", "A6"] },
};

for (const [shape, { ms, jobs, turns }] of Object.entries(shapes)) {
  for (const grouped of [true, false]) {
    test(`${shape} on a key of limit 1, ${grouped ? "a group per tenant: turns" : "one group: arrival order"}`, async () => {
      const name = `turns-${Object.keys(shapes).indexOf(shape)}-${grouped}`;
      const queue = new Queue(name, { connection: { host: "127.0.0.1", port: server.port } });
      await redis.del("workers", "started");
      workers.start(name, { CONCURRENCY: jobs.length, WAIT_CONNECTIONS: jobs.length, TOTAL: 1, LIMIT: 0, WAIT_MS: 120_000 });
      await waitFor(async () => (await redis.llen("workers")) >= 1, { message: "the worker" });
      const key = `unique:fair:${name}`;
      assert.equal(typeof (await client.lock(key, "gate", { limit: 1 })), "number");
      const names = new Map();
      for (const [n, job] of jobs.entries()) {
        const added = await queue.add("work", { group: grouped ? job[0] : "all", ms });
        names.set(String(added.id), job);
        await waitFor(async () => (await client.waiters(key)) === n + 1, { timeout: 60_000, message: `${job} to wait` });
      }
      assert.equal(await client.unlock(key, "gate"), true);
      await waitFor(async () => (await queue.getJobCounts("completed")).completed === jobs.length, {
        timeout: 60_000, interval: 100, message: "every job to run",
      });
      const started = (await redis.lrange("started", 0, -1)).map((id) => names.get(id));
      assert.deepEqual(started, grouped ? turns : jobs);
      await workers.killAll();
      await queue.obliterate({ force: true });
      await queue.close();
    });
  }
}
