// A BullMQ worker process for the tests: a real Worker whose processor runs under a
// GroupLimit, recording how many jobs of its group run at once (INCR on start, DECR at
// the end, both while the slot is held, so the counter is the group's holders exactly).
// With RATE_MAX and RATE_MS the group also has a rate (GroupLimit's `limiter`), and each
// job records its grant's time on the server's clock. With TOTAL the groups share that many
// slots fairly (GroupLimit's `total`), LIMIT each (LIMIT 0: no limit per group), with WEIGHTS
// (a JSON object, group to weight); WAIT_CONNECTIONS bounds the waits this process may have
// on the server at once.
//   node test/bullmq-worker.mjs   (env: PORT, QUEUE, CONCURRENCY, LIMIT, LEASE, JOB_MS, STALLED_MS,
//                                  RATE_MAX, RATE_MS, TOTAL, WEIGHTS, WAIT_CONNECTIONS)
import { Worker } from "bullmq";
import IORedis from "ioredis";
import { GroupLimit, DeadWorkerReaper } from "../dist/esm/bullmq.js";
import { Client } from "../dist/esm/index.js";
import { Queue } from "bullmq";

const env = (name, fallback) => Number(process.env[name] ?? fallback);
const port = env("PORT");
const queueName = process.env.QUEUE;
const connection = { host: "127.0.0.1", port };
const redis = new IORedis({ port });
const weights = JSON.parse(process.env.WEIGHTS ?? "{}");
const limit = new GroupLimit({
  redis: new Client(redis, { maxWaitConnections: env("WAIT_CONNECTIONS", 16) }),
  group: (job) => job.data.group,
  concurrency: env("LIMIT", 2) || undefined,
  total: process.env.TOTAL ? env("TOTAL") : undefined,
  weight: process.env.WEIGHTS ? (job, group) => weights[group] ?? 1 : undefined,
  lease: env("LEASE", 30_000),
  wait: env("WAIT_MS", 200),
  delay: env("DELAY_MS", 50),
  maxDelay: env("MAX_DELAY_MS", 500),
  limiter: process.env.RATE_MAX ? { max: env("RATE_MAX"), duration: env("RATE_MS") } : undefined,
});
const queue = new Queue(queueName, { connection });
const reaper = new DeadWorkerReaper(redis, queue);

const worker = new Worker(
  queueName,
  limit.wrap(async (job) => {
    // With a rate: when the server granted this job's slot, on its own clock (the hold's
    // token, unix µs), not the worker's clock after the grant.
    if (process.env.RATE_MAX) {
      const held = (await limit.client.holders(limit.key(queueName, job.data.group)))
        .find((h) => h.jid === String(job.id));
      await redis.rpush(`grants:${job.data.group}`, String(held?.token ?? "none"));
    }
    const running = await redis.incr(`running:${job.data.group}`);
    await redis.rpush(`seen:${job.data.group}`, String(running));
    await redis.rpush("started", String(job.id));
    await new Promise((r) => setTimeout(r, job.data.ms ?? env("JOB_MS", 10)));
    await redis.decr(`running:${job.data.group}`);
    return process.pid;
  }),
  {
    connection,
    name: limit.workerName,
    concurrency: env("CONCURRENCY", 5),
    stalledInterval: env("STALLED_MS", 30_000),
    lockDuration: env("LOCK_MS", 30_000),
  },
);
await worker.waitUntilReady();
// Registered once BullMQ lists the worker: a reaper pass before that would take it for dead.
await reaper.register(limit.workerName);
reaper.start(env("REAP_MS", 1000));
await redis.rpush("workers", `${process.pid} ${limit.workerName}`);

const stop = async () => {
  reaper.stop();
  await worker.close();
  await queue.close();
  await limit.client.close();
  await redis.quit();
  process.exit(0);
};
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
