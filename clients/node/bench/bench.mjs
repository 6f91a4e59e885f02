// make bench-node: Mutex acquire+release pairs/s through ioredis, redis-unique against
// redis-semaphore's Mutex (Lua scripts over SET/PEXPIRE) on the same server, one client
// sequential and pipelined (ioredis auto-pipelining, 50 mutexes of 50 keys at once); and
// jobs/s of one BullMQ worker with and without the group limiter; and contended locks: K
// workers (2, 8, 32), each on its own connection, looping acquire -> hold 1 ms -> release on
// one key (a Mutex, and a Semaphore of 4 with 32 workers), critical sections/s and the time
// to acquire (p50/p99), with the server's client count before and after each run (the median
// of BENCH_CONTENDED_ROUNDS rounds, default 3, the order alternating; the largest growth). Prints
// tables and writes bench/results.json (the contended runs: bench/results-contended.json).
// BENCH_SECONDS per run (default 3); BENCH_ONLY=contended runs the contended part alone.
import { writeFileSync } from "node:fs";
import { cpus, platform, release } from "node:os";
import IORedis from "ioredis";
import { Mutex as RSMutex, Semaphore as RSSemaphore } from "redis-semaphore";
import { Queue, Worker } from "bullmq";
import { Mutex, Semaphore, Client } from "../dist/esm/index.js";
import { GroupLimit } from "../dist/esm/bullmq.js";
import { startServer, waitFor, clientCount } from "../test/helpers.mjs";

const SECONDS = Number(process.env.BENCH_SECONDS ?? 3);
const ONLY = process.env.BENCH_ONLY;
const server = await startServer();
// What the results files record of the run: the server's version and the machine.
const probe = new IORedis(server.port);
const serverInfo = await probe.info("server");
await probe.quit();
const field = (name) => serverInfo.match(new RegExp(`^${name}:(.*)$`, "m"))?.[1]?.trim();
const serverName = field("server_name") === "valkey" ? `Valkey ${field("valkey_version")}` : `Redis ${field("redis_version")}`;
const machine = { cpus: cpus().length, cpu: cpus()[0]?.model ?? "unknown", platform: `${platform()} ${release()}` };

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
for (const [label, parallel, auto] of ONLY ? [] : [["one client, one at a time", 1, false], ["one client, pipelined (50 at once)", 50, true]]) {
  const redis = new IORedis({ port: server.port, enableAutoPipelining: auto });
  const client = new Client(redis);
  const ours = await pairs((k) => new Mutex(client, k, { lockTimeout: 10_000 }), parallel);
  const theirs = await pairs((k) => new RSMutex(redis, k, { lockTimeout: 10_000, acquireTimeout: 10_000 }), parallel);
  results.push({ comparison: `Mutex acquire+release, ${label}`, "redis-unique": Math.round(ours), "redis-semaphore": Math.round(theirs), ratio: +(ours / theirs).toFixed(2) });
  await client.close();
  await redis.quit();
}

// Contended: every worker its own connection and lock object, all on one key.
const admin = new IORedis({ port: server.port });
const quantile = (sorted, q) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
async function contended(library, workers, limit) {
  const key = `contended:${library}:${workers}:${limit}`;
  const before = await clientCount(admin);
  const conns = Array.from({ length: workers }, () => new IORedis({ port: server.port }));
  const options = { lockTimeout: 10_000, acquireTimeout: 60_000 };
  const locks = conns.map((redis) => library === "redis-unique"
    ? (limit === 1 ? new Mutex(redis, key, options) : new Semaphore(redis, key, limit, options))
    : (limit === 1 ? new RSMutex(redis, key, options) : new RSSemaphore(redis, key, limit, options)));
  await Promise.all(conns.map((c) => c.ping()));
  let peak = 0;
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      peak = Math.max(peak, await clientCount(admin));
      await new Promise((r) => setTimeout(r, 100));
    }
  })();
  const waits = [];
  let sections = 0;
  const end = Date.now() + SECONDS * 1000;
  await Promise.all(locks.map(async (lock) => {
    while (Date.now() < end) {
      const t = performance.now();
      await lock.acquire();
      waits.push(performance.now() - t);
      await new Promise((r) => setTimeout(r, 1)); // the critical section: 1 ms
      await lock.release();
      sections++;
    }
  }));
  const elapsed = (Date.now() - end) / 1000 + SECONDS;
  sampling = false;
  await sampler;
  await Promise.all(conns.map((c) => c.quit()));
  // the server drops a quit connection a moment after its OK: settle, bounded
  let after = await clientCount(admin);
  const settle = Date.now() + 5_000;
  while (after > before && Date.now() < settle) {
    await new Promise((r) => setTimeout(r, 20));
    after = await clientCount(admin);
  }
  waits.sort((a, b) => a - b);
  return {
    perSecond: Math.round(sections / elapsed),
    p50: +quantile(waits, 0.5).toFixed(1),
    p99: +quantile(waits, 0.99).toFixed(1),
    peakConnections: peak - before,
    growth: after - before,
  };
}

// Rounds alternate which library goes first; each figure is the median of its rounds.
const ROUNDS = Number(process.env.BENCH_CONTENDED_ROUNDS ?? 3);
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const contendedResults = [];
const clientsBefore = await clientCount(admin);
for (const [workers, limit] of [[2, 1], [8, 1], [32, 1], [32, 4]]) {
  const runs = { "redis-unique": [], "redis-semaphore": [] };
  for (let round = 0; round < ROUNDS; round++) {
    const order = round % 2 ? ["redis-semaphore", "redis-unique"] : ["redis-unique", "redis-semaphore"];
    for (const library of order) runs[library].push(await contended(library, workers, limit));
  }
  const what = limit === 1 ? `Mutex, ${workers} workers` : `Semaphore(${limit}), ${workers} workers`;
  for (const [library, rs] of Object.entries(runs)) {
    contendedResults.push({
      contended: what, library,
      "sections/s": median(rs.map((r) => r.perSecond)),
      "p50 acquire ms": median(rs.map((r) => r.p50)),
      "p99 acquire ms": median(rs.map((r) => r.p99)),
      "peak connections": Math.max(...rs.map((r) => r.peakConnections)),
      "client growth": Math.max(...rs.map((r) => r.growth)),
    });
  }
}
const clientsAfter = await clientCount(admin);
await admin.quit();

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
if (!ONLY) {
  const plain = await jobsPerSecond(false);
  const limited = await jobsPerSecond(true);
  results.push({ comparison: "BullMQ no-op jobs/s, 1 worker (concurrency 20), 20 groups", "with GroupLimit (2 per group)": Math.round(limited), "without": Math.round(plain), ratio: +(limited / plain).toFixed(2) });
}

server.stop();
if (!ONLY) console.table(results);
console.table(contendedResults);
console.log(`server clients (CLIENT LIST, the asking one included) before the contended runs: ${clientsBefore}, after: ${clientsAfter}`);
const meta = { date: new Date().toISOString(), node: process.version, server: serverName, machine, seconds: SECONDS };
if (!ONLY) writeFileSync(new URL("./results.json", import.meta.url), JSON.stringify({ ...meta, results }, null, 2) + "\n");
writeFileSync(new URL("./results-contended.json", import.meta.url), JSON.stringify({ ...meta, rounds: ROUNDS, clientsBefore, clientsAfter, contended: contendedResults }, null, 2) + "\n");
process.exit(0);
