// A BullMQ worker process for the tests of GroupLimit's `limits`: a real Worker whose
// processor runs only while its job holds a slot of its tenant and of the queue in all, taken
// in one grant (UNIQUE.LOCKALL). Each job records that it started; with TENANT_RATE_MAX and
// TENANT_RATE_MS the tenants also have a rate, and each job records its tenant grant's token
// (the server's clock, unix µs).
//   node test/bullmq-limits-worker.mjs   (env: PORT, QUEUE, CONCURRENCY, TENANT_LIMIT, GLOBAL_LIMIT,
//                                         TENANT_RATE_MAX, TENANT_RATE_MS, LEASE, WAIT_MS, JOB_MS)
import { Queue, Worker } from "bullmq";
import IORedis from "ioredis";
import { GroupLimit, DeadWorkerReaper } from "../dist/esm/bullmq.js";

const env = (name, fallback) => Number(process.env[name] ?? fallback);
const port = env("PORT");
const queueName = process.env.QUEUE;
const connection = { host: "127.0.0.1", port };
const redis = new IORedis({ port });
const rated = Boolean(process.env.TENANT_RATE_MAX);
const limit = new GroupLimit({
  redis,
  limits: {
    tenant: {
      group: (job) => job.data.tenant,
      concurrency: env("TENANT_LIMIT", 2),
      limiter: rated ? { max: env("TENANT_RATE_MAX"), duration: env("TENANT_RATE_MS") } : undefined,
    },
    global: { concurrency: env("GLOBAL_LIMIT", 5) },
  },
  lease: env("LEASE", 30_000),
  wait: env("WAIT_MS", 200),
  delay: env("DELAY_MS", 50),
  maxDelay: env("MAX_DELAY_MS", 500),
});
const queue = new Queue(queueName, { connection });
const reaper = new DeadWorkerReaper(redis, queue);

const worker = new Worker(
  queueName,
  limit.wrap(async (job) => {
    if (rated) {
      const [tenantKey] = limit.keysOf(job);
      const held = (await limit.client.holders(tenantKey)).find((h) => h.jid === String(job.id));
      await redis.rpush(`grants:${job.data.tenant}`, String(held?.token ?? "none"));
    }
    await redis.rpush("started", String(job.id));
    await new Promise((r) => setTimeout(r, job.data.ms ?? env("JOB_MS", 10)));
    return process.pid;
  }),
  { connection, name: limit.workerName, concurrency: env("CONCURRENCY", 5) },
);
await worker.waitUntilReady();
await reaper.register(limit.workerName);
reaper.start(1000);
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
