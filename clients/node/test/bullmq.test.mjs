import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import IORedis from "ioredis";
import { Queue, QueueEvents, Worker } from "bullmq";
import { Client } from "../dist/esm/index.js";
import { DeadWorkerReaper, GroupLimit, UniqueJobs } from "../dist/esm/bullmq.js";
import { startServer, waitFor, calls, totalCommands, assertNoClientsLeft, workerProcesses, mostInAnyWindow } from "./helpers.mjs";

let server, redis, client;
const workers = workerProcesses(fileURLToPath(new URL("./bullmq-worker.mjs", import.meta.url)), () => server.port);
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

async function workersReady(n) {
  await waitFor(async () => (await redis.llen("workers")) >= n, { message: `${n} workers` });
}

test("1,000 jobs over 20 groups, limit 2, on 3 worker processes: never more than 2 of a group at once", async () => {
  const name = "groups";
  const queue = new Queue(name, { connection: { host: "127.0.0.1", port: server.port } });
  await redis.del("workers", "started");
  for (let i = 0; i < 3; i++) startWorker(name, { CONCURRENCY: 8, LIMIT: 2, JOB_MS: 15 });
  await workersReady(3);
  const commandsBefore = await totalCommands(redis);
  const locksBefore = await calls(redis, "unique.lock");
  const jobs = Array.from({ length: 1000 }, (_, i) => ({ name: "work", data: { group: `g${i % 20}` } }));
  await queue.addBulk(jobs);
  await waitFor(async () => (await queue.getJobCounts("completed")).completed === 1000, {
    timeout: 120_000, interval: 200, message: "1,000 completed jobs",
  });
  const counts = await queue.getJobCounts("failed", "waiting", "delayed", "active");
  assert.deepEqual(counts, { failed: 0, waiting: 0, delayed: 0, active: 0 });
  let highest = 0;
  for (let g = 0; g < 20; g++) {
    const seen = (await redis.lrange(`seen:g${g}`, 0, -1)).map(Number);
    highest = Math.max(highest, ...seen);
    assert.ok(Math.max(...seen) <= 2, `group g${g} ran ${Math.max(...seen)} at once`);
  }
  assert.equal(highest, 2, "the limit was reached, so it was tested");
  const started = await redis.lrange("started", 0, -1);
  assert.equal(new Set(started).size, 1000, "every job ran exactly once");
  const perJob = ((await totalCommands(redis)) - commandsBefore) / 1000;
  const locksPerJob = ((await calls(redis, "unique.lock")) - locksBefore) / 1000;
  console.log(`# ${perJob.toFixed(1)} Redis commands per job in all, ${locksPerJob.toFixed(2)} UNIQUE.LOCK per job`);
  assert.ok(locksPerJob < 6, `no polling storm: ${locksPerJob} UNIQUE.LOCK per job`);
  assert.ok(perJob < 120, `no polling storm: ${perJob} commands per job`);
  for (const c of children.splice(0)) c.kill("SIGTERM");
  await queue.obliterate({ force: true });
  await queue.close();
});

test("300 jobs of one group, concurrency 3 and 50 a second, on 3 worker processes: never over either limit", async () => {
  const name = "rated";
  const queue = new Queue(name, { connection: { host: "127.0.0.1", port: server.port } });
  await redis.del("workers", "started", "seen:acme", "grants:acme");
  for (let i = 0; i < 3; i++) {
    startWorker(name, { CONCURRENCY: 4, LIMIT: 3, RATE_MAX: 50, RATE_MS: 1000, WAIT_MS: 5000 });
  }
  await workersReady(3);
  // Every round must keep both limits. That a round also reached them (so that they were
  // tested) depends on the workers keeping up 50 jobs a second, which a loaded machine may
  // not: up to 3 rounds are run until one does.
  let most = 0;
  let highest = 0;
  for (let round = 0; round < 3; round++) {
    await redis.del("seen:acme", "grants:acme");
    // 20 to 60 ms each: 3 slots would allow 75 a second, so both limits bind in turn.
    const jobs = Array.from({ length: 300 }, (_, i) => ({ name: "call", data: { group: "acme", ms: 20 + (i % 5) * 10 } }));
    await queue.addBulk(jobs);
    await waitFor(async () => (await queue.getJobCounts("completed")).completed === 300 * (round + 1), {
      timeout: 120_000, interval: 100, message: "300 completed jobs",
    });
    const seen = (await redis.lrange("seen:acme", 0, -1)).map(Number);
    highest = Math.max(...seen);
    assert.ok(highest <= 3, `${highest} at once`);
    // At most 50 in any second, on the server's clock: the grants' tokens (unix µs), exact,
    // where the jobs' own start times would follow their grants by a varying delay.
    const grants = (await redis.lrange("grants:acme", 0, -1)).map(Number);
    assert.equal(grants.length, 300, "every job ran once");
    assert.ok(grants.every(Number.isFinite), "every job found its hold");
    const ms = grants.map((t) => t / 1000);
    most = mostInAnyWindow(ms, 1000);
    assert.ok(most <= 50, `${most} grants in a second`);
    const elapsed = Math.max(...ms) - Math.min(...ms);
    assert.ok(elapsed >= 299 * 20 - 1, `the rate held the pace: ${elapsed} ms`);
    console.log(`# round ${round + 1}: 300 jobs in ${elapsed} ms, at most ${highest} at once, ${most} grants in any second`);
    if (highest === 3 && most >= 45) break;
  }
  assert.equal(highest, 3, "the limit was reached, so it was tested");
  assert.ok(most >= 45, "the rate was reached, so it was tested");
  for (const c of children.splice(0)) c.kill("SIGTERM");
  await queue.obliterate({ force: true });
  await queue.close();
});

test("kill -9 of a worker mid-job: its group slot frees and BullMQ's stalled check retries the job", async () => {
  const name = "stalled";
  const queue = new Queue(name, { connection: { host: "127.0.0.1", port: server.port } });
  const events = new QueueEvents(name, { connection: { host: "127.0.0.1", port: server.port } });
  await redis.del("workers", "started");
  const env = { CONCURRENCY: 1, LIMIT: 1, LEASE: 60_000, STALLED_MS: 1000, LOCK_MS: 2000, REAP_MS: 300 };
  const doomed = startWorker(name, env);
  await workersReady(1);
  const [, doomedName] = (await redis.lindex("workers", 0)).split(" ");
  const job = await queue.add("long", { group: "solo", ms: 60_000 });
  const key = `unique:group:${name}:solo`;
  // The slot is taken before the job's code runs: kill only once the job has started,
  // or "it ran again" below would count one run.
  await waitFor(async () => (await client.lockedBy(key)).includes(String(job.id))
    && (await redis.lrange("started", 0, -1)).includes(String(job.id)), { message: "the job running" });
  assert.equal((await client.holders(key))[0].owner, doomedName);
  // The run again must be short, and its data is read when a worker takes the job: changed
  // before the kill, as the doomed worker's run has read its 60 s already. Changed after it,
  // a survivor's stalled check could hand the job out first, on a loaded machine, and the
  // run again would take the 60 s.
  await job.updateData({ group: "solo", ms: 10 });
  doomed.kill("SIGKILL");
  // A survivor: its reaper sees the dead worker gone from BullMQ's list and frees its slot
  // long before the 60 s lease; BullMQ's stalled check gives the job back.
  const survivor = startWorker(name, { ...env });
  await workersReady(2);
  await waitFor(async () => (await client.lockedBy(key)).length === 0 || (await redis.llen("started")) >= 2,
    { message: "the dead worker's slot freed" });
  const done = await job.waitUntilFinished(events, 30_000);
  assert.equal(typeof done, "number");
  assert.notEqual(done, doomed.pid, "finished by the survivor");
  assert.ok((await redis.llen("started")) >= 2, "it ran again");
  assert.deepEqual(await client.lockedBy(key), [], "the slot is free at the end");
  survivor.kill("SIGTERM");
  await events.close();
  await queue.close();
});

test("until_and_while_executing: a duplicate is not queued, and jobs of one key run one at a time", async () => {
  const name = "unique";
  const connection = { host: "127.0.0.1", port: server.port };
  const queue = new Queue(name, { connection });
  const unique = new UniqueJobs({ redis, lock: "until_and_while_executing", key: (d) => d.user, wait: 100, delay: 50 });
  const first = await unique.add(queue, "sync", { user: 42, ms: 400 });
  assert.ok(first);
  assert.equal(await unique.add(queue, "sync", { user: 42 }), null, "a duplicate of a queued job is refused");
  assert.ok(await unique.add(queue, "sync", { user: 7 }), "another key is not");
  let running = 0;
  let highest = 0;
  const ran = [];
  const worker = new Worker(name, unique.wrap(async (job) => {
    running += job.data.user === 42 ? 1 : 0;
    highest = Math.max(highest, running);
    ran.push(job.id);
    await new Promise((r) => setTimeout(r, job.data.ms ?? 10));
    running -= job.data.user === 42 ? 1 : 0;
  }), { connection, name: unique.workerName, concurrency: 4 });
  // Once the first has started its queued lock is gone: a second job of the key queues,
  // and waits for the first to end before it runs (the "while executing" half).
  await waitFor(() => ran.includes(first.id), { message: "the first job to start" });
  const second = await unique.add(queue, "sync", { user: 42, ms: 10 });
  assert.ok(second, "queued again once the first started");
  await waitFor(async () => (await queue.getJobCounts("completed")).completed === 3, { message: "3 jobs" });
  assert.equal(highest, 1, "never two jobs of one key at once");
  assert.ok(ran.indexOf(second.id) > ran.indexOf(first.id));
  await worker.close();
  await unique.client.close();
  assert.throws(() => new UniqueJobs({ redis, lock: "until_executed", key: (d) => d.user }), RangeError);
  assert.throws(() => new GroupLimit({ redis, group: () => "g", concurrency: 1.5 }), RangeError);
  await queue.obliterate({ force: true });
  await queue.close();
});

test("fair sharing with real workers: 3 tenants of unequal job lengths and arrival rates share total 8 by their weights", async () => {
  // Weights 1, 1 and 2 on 8 slots: 2, 2 and 4 while all three wait, whatever their jobs'
  // lengths (400, 50 and 200 ms) and however fast their jobs come (20, 50 and 25 a second, each
  // faster than its share serves, so each keeps waiters). At most 5 of a tenant at once.
  // First come, first served would give each a share of its load (rate x length: 8, 2.5 and
  // 5 slots' worth), about 4.1, 1.3 and 2.6: "big" would take twice its share.
  const name = "fair";
  const connection = { host: "127.0.0.1", port: server.port };
  const queue = new Queue(name, { connection });
  const tenants = {
    big: { weight: 1, ms: 400, perSecond: 20 },
    small: { weight: 1, ms: 50, perSecond: 50 },
    heavy: { weight: 2, ms: 200, perSecond: 25 },
  };
  const total = 8;
  const groupLimit = 5;
  const seconds = 6;
  await redis.del("workers", "started", ...Object.keys(tenants).flatMap((t) => [`seen:${t}`, `running:${t}`]));
  const weights = Object.fromEntries(Object.entries(tenants).map(([t, { weight }]) => [t, weight]));
  for (let i = 0; i < 3; i++) {
    startWorker(name, {
      CONCURRENCY: 100, WAIT_CONNECTIONS: 100, TOTAL: total, LIMIT: groupLimit, WEIGHTS: JSON.stringify(weights),
      WAIT_MS: 120_000,
    });
  }
  await workersReady(3);
  const key = `unique:fair:${name}`;

  // The server's state, sampled while the jobs come and run: holding and waiting per tenant.
  const samples = [];
  let sampling = true;
  const sampler = (async () => {
    const r = new IORedis({ port: server.port });
    const client = new Client(r);
    while (sampling) {
      const groups = await client.waiters(key, { groups: true });
      samples.push(Object.fromEntries(groups.map((g) => [g.group, g])));
      await new Promise((r) => setTimeout(r, 20));
    }
    await client.close();
    await r.quit();
  })();

  // The arrivals: each tenant adds its jobs at its own pace, for `seconds`.
  let added = 0;
  const start = Date.now();
  const due = Object.fromEntries(Object.keys(tenants).map((t) => [t, 0]));
  while (Date.now() - start < seconds * 1000) {
    const elapsed = (Date.now() - start) / 1000;
    const jobs = [];
    for (const [t, { ms, perSecond }] of Object.entries(tenants)) {
      for (; due[t] < Math.floor(elapsed * perSecond); due[t]++) jobs.push({ name: "work", data: { group: t, ms } });
    }
    if (jobs.length) await queue.addBulk(jobs);
    added += jobs.length;
    await new Promise((r) => setTimeout(r, 50));
  }
  await waitFor(async () => (await queue.getJobCounts("completed")).completed === added, {
    timeout: 120_000, interval: 200, message: `${added} completed jobs`,
  });
  sampling = false;
  await sampler;

  // Nothing starved: every job ran, once.
  const counts = await queue.getJobCounts("failed", "waiting", "delayed", "active");
  assert.deepEqual(counts, { failed: 0, waiting: 0, delayed: 0, active: 0 });
  assert.equal(new Set(await redis.lrange("started", 0, -1)).size, added, "every job ran exactly once");

  // Never over a limit, in any sample, on the server and in the jobs themselves.
  const holding = (s, t) => s[t]?.holding ?? 0;
  for (const s of samples) {
    const held = Object.keys(tenants).map((t) => holding(s, t));
    assert.ok(held.every((h) => h <= groupLimit), `a tenant over its limit: ${JSON.stringify(s)}`);
    assert.ok(held.reduce((a, b) => a + b) <= total, `over the total: ${JSON.stringify(s)}`);
  }
  for (const t of Object.keys(tenants)) {
    const seen = (await redis.lrange(`seen:${t}`, 0, -1)).map(Number);
    assert.ok(Math.max(...seen) <= groupLimit, `${t} ran ${Math.max(...seen)} at once`);
  }
  assert.ok(samples.some((s) => Object.keys(tenants).some((t) => holding(s, t) === groupLimit)),
    "a tenant reached its limit (waiting alone at the end), so the limit was tested");

  // The shares: the mean of the slots each tenant held while the total was saturated and
  // every tenant had jobs waiting, against its weight's share of the total, within half a slot.
  const contended = samples.filter((s) => Object.keys(tenants).every((t) => (s[t]?.waiting ?? 0) > 0)
    && Object.keys(tenants).reduce((n, t) => n + holding(s, t), 0) === total);
  assert.ok(contended.length >= 50, `${contended.length} samples with every tenant waiting (of ${samples.length})`);
  const weightSum = Object.values(tenants).reduce((n, { weight }) => n + weight, 0);
  const loadSum = Object.values(tenants).reduce((n, { ms, perSecond }) => n + (ms * perSecond) / 1000, 0);
  const report = [];
  for (const [t, { weight, ms, perSecond }] of Object.entries(tenants)) {
    const mean = contended.reduce((n, s) => n + holding(s, t), 0) / contended.length;
    const fair = (total * weight) / weightSum;
    const fifo = (total * (ms * perSecond) / 1000) / loadSum;
    report.push(`${t} ${mean.toFixed(2)} (fair ${fair}, first come first served about ${fifo.toFixed(1)})`);
    assert.ok(Math.abs(mean - fair) <= 0.5, `${t} held ${mean.toFixed(2)} slots on average, its share is ${fair}`);
  }
  console.log(`# fair sharing: ${added} jobs, ${contended.length} of ${samples.length} samples contended; mean slots held: ${report.join(", ")}`);
  for (const c of children.splice(0)) c.kill("SIGTERM");
  await queue.obliterate({ force: true });
  await queue.close();
});

test("the dead-worker reaper leaves a live worker's slots alone, and frees them once it is gone", async () => {
  const name = "reaper-live";
  const connection = { host: "127.0.0.1", port: server.port };
  const queue = new Queue(name, { connection });
  const limit = new GroupLimit({ redis, group: (job) => job.data.group, concurrency: 1 });
  let finish;
  const held = new Promise((r) => { finish = r; });
  const worker = new Worker(name, limit.wrap(() => held), { connection, name: limit.workerName });
  await worker.waitUntilReady();
  const reaper = new DeadWorkerReaper(redis, queue);
  await reaper.register(limit.workerName);
  const job = await queue.add("hold", { group: "g" });
  const key = limit.key(name, "g");
  await waitFor(async () => (await client.lockedBy(key)).includes(String(job.id)), { message: "the job holding its slot" });
  assert.equal(await reaper.reap(), 0, "the worker is listed by BullMQ: nothing reaped");
  assert.deepEqual(await client.lockedBy(key), [String(job.id)]);
  // Gone from BullMQ's list while its job still holds (a worker cut off): its slot is freed.
  await worker.close(true);
  await waitFor(async () => (await queue.getWorkers()).length === 0, { message: "the worker gone from the list" });
  // At least its holder: REAP also counts ended leases other tests left on this server.
  const reaped = await reaper.reap();
  assert.ok(reaped >= 1, `reaped ${reaped}`);
  assert.deepEqual(await client.lockedBy(key), []);
  finish();
  await limit.client.close();
  await queue.obliterate({ force: true });
  await queue.close();
});
