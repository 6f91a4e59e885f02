// make bench-node: Mutex acquire+release pairs/s through ioredis, redis-unique against
// redis-semaphore's Mutex (Lua scripts over SET/PEXPIRE) on the same server, one client
// sequential and pipelined (ioredis auto-pipelining, 50 mutexes of 50 keys at once); and
// jobs/s of one BullMQ worker with and without the group limiter. Prints a table and
// writes bench/results.json. BENCH_SECONDS per run (default 3).
import { writeFileSync } from "node:fs";
import IORedis from "ioredis";
import { Mutex as RSMutex } from "redis-semaphore";
import { Queue, Worker } from "bullmq";
import { Mutex, Client } from "../dist/esm/index.js";
import { GroupLimit } from "../dist/esm/bullmq.js";
import { startServer, waitFor } from "../test/helpers.mjs";

const SECONDS = Number(process.env.BENCH_SECONDS ?? 3);
const server = await startServer();

async function pairs(makeMutex, parallel) {
  const mutexes = Array.from({ length: parallel }, (_, i) => makeMutex(`bench:${i}`));
  let n = 0;
  const end = Date.now() + SECONDS * 1000;
  await Promise.all(mutexes.map(async (m) => {
    while (Date.now() < end) {
      await m.acquire();
      await m.release();
      n++;
    }
  }));
  return n / SECONDS;
}

const results = [];
for (const [label, parallel, auto] of [["one client, one at a time", 1, false], ["one client, pipelined (50 at once)", 50, true]]) {
  const redis = new IORedis({ port: server.port, enableAutoPipelining: auto });
  const client = new Client(redis);
  const ours = await pairs((k) => new Mutex(client, k, { lockTimeout: 10_000 }), parallel);
  const theirs = await pairs((k) => new RSMutex(redis, k, { lockTimeout: 10_000, acquireTimeout: 10_000 }), parallel);
  results.push({ comparison: `Mutex acquire+release, ${label}`, "redis-unique": Math.round(ours), "redis-semaphore": Math.round(theirs), ratio: +(ours / theirs).toFixed(2) });
  await client.close();
  await redis.quit();
}

async function jobsPerSecond(limited) {
  const connection = { host: "127.0.0.1", port: server.port };
  const name = `bench-${limited ? "limited" : "plain"}`;
  const queue = new Queue(name, { connection });
  const total = 3000;
  await queue.addBulk(Array.from({ length: total }, (_, i) => ({ name: "j", data: { group: `g${i % 20}` } })));
  const redis = new IORedis({ port: server.port });
  const limit = new GroupLimit({ redis, group: (job) => job.data.group, concurrency: 2 });
  const noop = async () => 1;
  const t = Date.now();
  const worker = new Worker(name, limited ? limit.wrap(noop) : noop, { connection, concurrency: 20, name: limit.workerName });
  await waitFor(async () => (await queue.getJobCounts("completed")).completed === total, { timeout: 300_000, interval: 50, message: "jobs" });
  const rate = total / ((Date.now() - t) / 1000);
  await worker.close();
  await queue.obliterate({ force: true });
  await queue.close();
  await limit.client.close();
  await redis.quit();
  return rate;
}
const plain = await jobsPerSecond(false);
const limited = await jobsPerSecond(true);
results.push({ comparison: "BullMQ no-op jobs/s, 1 worker (concurrency 20), 20 groups", "with GroupLimit (2 per group)": Math.round(limited), "without": Math.round(plain), ratio: +(limited / plain).toFixed(2) });

server.stop();
console.table(results);
writeFileSync(new URL("./results.json", import.meta.url), JSON.stringify({ date: new Date().toISOString(), node: process.version, seconds: SECONDS, results }, null, 2) + "\n");
process.exit(0);
