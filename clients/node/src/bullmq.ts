/**
 * BullMQ integration (`redis-unique/bullmq`): per-group concurrency for Workers ("at most
 * 2 jobs of this customer at once, across every worker and process"), several limits per job
 * in one atomic grant (`limits`: per tenant and in all, each with its rate), and unique jobs
 * (`while_executing`, `until_and_while_executing`), on the module's native locks.
 *
 * A job over its group's limit waits natively for a bounded time (first come, first
 * served), then goes back to delayed, the way BullMQ documents manual rate limiting
 * (`job.moveToDelayed(...)`, then `throw new DelayedError()`): it is neither lost nor
 * spinning. Its slot is a holder with a lease that the worker renews and with the
 * worker's name as OWNER: it frees when the job completes or fails, when the lease runs
 * out (a stalled job, a frozen process), and at once when BullMQ no longer lists the
 * worker (reapDeadWorkers).
 */
import { hostname } from "node:os";
import { randomBytes } from "node:crypto";
import { DelayedError, type Job, type Queue } from "bullmq";
import { Client } from "./client.js";
import * as commands from "./commands.js";
import type { LockLostError } from "./errors.js";
import { jobGrant, limitKey, normalizeLimits, type JobLimit, type NormalizedLimit } from "./grouplimits.js";
import { Refresher } from "./refresh.js";
import type { RedisClient } from "./transport.js";

type Processor<T, R> = (job: Job<T, R>, token?: string, signal?: AbortSignal) => Promise<R>;

export interface GroupLimitOptions<T = unknown> {
  /** The Redis connection for the locks: an ioredis or node-redis client, or a Client. */
  redis: RedisClient | Client;
  /** The group of a job (e.g. its customer id); null or undefined: not limited (and outside `total`). Not with `limits`. */
  group?: (job: Job<T>) => string | null | undefined;
  /**
   * How many jobs of one group may run at once, across every worker. Needed without `total`;
   * optional with it (a group waiting alone may then take the whole `total`).
   */
  concurrency?: number;
  /**
   * How many jobs of every group together may run at once, shared fairly: a freed slot goes
   * to the waiting group that runs the fewest jobs for its `weight` (jobs running now, not jobs
   * run so far), first come first served within a group. Without it, each group has a key of
   * its own and only `concurrency` applies.
   */
  total?: number;
  /**
   * A group's weight in the fair share of `total` (1 to 1000, default 1): a number, or a
   * function of the job and its group. A group of weight 2 gets twice the slots of a group of
   * weight 1 while both wait. Needs `total`.
   */
  weight?: number | ((job: Job<T>, group: string) => number);
  /**
   * A rate per group beside the concurrency, as BullMQ's own `limiter`: at most `max` jobs of
   * one group start every `duration` ms (evenly spaced), plus `burst` at once. Decided with
   * the concurrency in one atomic grant; a job refused by either waits the same way. Not with
   * `total` (the groups then share one key, whose rate could only be the queue's).
   */
  limiter?: { max: number; duration: number; burst?: number };
  /**
   * Several limits on every job, named, instead of `group`/`concurrency`/`limiter`/`total`:
   * per tenant and in all, say, each with its concurrency and optional rate. A job starts only
   * when every limit that applies to it has room, in one atomic grant (UNIQUE.LOCKALL): it
   * holds no slot of one limit while it waits for another, and spends a rate only when it
   * starts. Keys: `<prefix>:{<queue>}:<name>[:<group>]`, default prefix `unique:limit`.
   *
   *     limits: { tenant: { group: (job) => job.data.tenant, concurrency: 2, limiter: { max: 5, duration: 1000 } },
   *               global: { concurrency: 10, limiter: { max: 50, duration: 1000 } } }
   */
  limits?: Record<string, JobLimit<Job<T>>>;
  /** The lease of a running job's slot in ms, renewed every third of it. Default 30000. */
  lease?: number;
  /** How long a job over the limit waits for a slot, natively, in ms. Default 1000. */
  wait?: number;
  /** The first delay of a job that found no slot, in ms; doubled per try up to `maxDelay`, with jitter. Default 1000. */
  delay?: number;
  /** The longest delay, in ms. Default 30000. */
  maxDelay?: number;
  /**
   * The prefix of the lock keys: `<prefix>:<queue>:<group>`, default `unique:group`; with
   * `total`, one key per queue, `<prefix>:<queue>`, default `unique:fair`; with `limits`,
   * `<prefix>:{<queue>}:<name>[:<group>]`, default `unique:limit`.
   */
  prefix?: string;
  /** The lock type shown in metrics and the Locks tab. Default `group`. */
  type?: string;
  /**
   * Called once, at once, when a running job's slot is lost (a renewal refused, or none
   * answered within the lease); the signal handed to the processor is aborted with the same
   * LockLostError. Default: a process warning (`process.emitWarning`).
   */
  onLockLost?: (error: LockLostError, job: Job<T>) => void;
}

/** A signal aborted when either is (BullMQ's own signal, or the slot's loss). */
function anyAbort(signal: AbortSignal | undefined, lost: AbortSignal): AbortSignal {
  if (!signal) return lost;
  const both = new AbortController(); // AbortSignal.any needs Node 20.3; engines says 18
  for (const s of [signal, lost]) {
    if (s.aborted) both.abort(s.reason);
    else s.addEventListener("abort", () => both.abort(s.reason), { once: true });
  }
  return both.signal;
}

/** A name unique to this worker, for BullMQ's Worker option `name` and the locks' OWNER. */
export function uniqueWorkerName(base = "worker"): string {
  return `${base}:${hostname()}:${process.pid}:${randomBytes(4).toString("hex")}`;
}

const GROUP_LIMIT_OPTIONS = new Set([
  "redis", "group", "concurrency", "total", "weight", "limiter", "limits", "lease", "wait", "delay", "maxDelay", "prefix", "type",
  "onLockLost", "workerName",
]);

/**
 * Per-group concurrency for one Worker, and with `total` a limit shared fairly by the groups:
 *
 *     const limit = new GroupLimit({ redis, group: (job) => job.data.customerId, concurrency: 2,
 *                                    total: 10 });   // optional: 10 in all, shared fairly
 *     const worker = new Worker("jobs", limit.wrap(process), { connection, name: limit.workerName });
 *
 * or several limits, every one with room or the job waits (one UNIQUE.LOCKALL per job):
 *
 *     new GroupLimit({ redis, limits: { tenant: { group: (job) => job.data.tenant, concurrency: 2 },
 *                                       global: { concurrency: 10, limiter: { max: 50, duration: 1000 } } } });
 */
export class GroupLimit<T = unknown> {
  readonly client: Client;
  /** Pass it as the Worker's `name`: BullMQ lists workers by it, and it is the OWNER of their slots. */
  readonly workerName: string;
  /** How many jobs of one group may run at once (undefined: only `total` bounds a group). */
  readonly concurrency: number | undefined;
  /** How many jobs of every group may run at once, shared fairly (undefined: no such limit). */
  readonly total: number | undefined;
  /** The named limits of `limits` (undefined: the one limit of `group`). */
  readonly limits: ReadonlyArray<Readonly<NormalizedLimit<Job<T>>>> | undefined;
  private readonly lease: number;
  private readonly wait: number;
  private readonly delay: number;
  private readonly maxDelay: number;
  private readonly prefix: string;
  private readonly type: string;
  private readonly tries = new Map<string, number>();
  private readonly rate: commands.RateLimit | undefined;

  constructor(private readonly options: GroupLimitOptions<T> & { workerName?: string }) {
    if (typeof options !== "object" || options === null) throw new TypeError("redis-unique: GroupLimit takes an options object");
    const unknown = Object.keys(options).filter((name) => !GROUP_LIMIT_OPTIONS.has(name));
    if (unknown.length) {
      throw new TypeError(`redis-unique: unknown GroupLimit option ${unknown.join(", ")} (known: ${[...GROUP_LIMIT_OPTIONS].join(", ")})`);
    }
    const { concurrency, total, weight } = options;
    if (options.limits !== undefined) {
      const beside = (["group", "concurrency", "total", "weight", "limiter"] as const).filter((n) => options[n] !== undefined);
      if (beside.length) {
        throw new TypeError(
          `redis-unique: limits replaces ${beside.join(", ")}: give each limit its group, concurrency and limiter inside ` +
            "limits (total and weight share one key fairly, which a grant of several keys cannot; use them without limits)",
        );
      }
      this.limits = normalizeLimits<Job<T>>(options.limits);
    } else if (typeof options.group !== "function") {
      throw new TypeError("redis-unique: group must be a function of the job (or give limits)");
    } else if (total === undefined) {
      if (weight !== undefined) {
        throw new TypeError(
          "redis-unique: weight needs total: a weight is a group's share of a limit the groups share (total); " +
            "without total each group has a key and a concurrency of its own, with nothing to share",
        );
      }
      if (concurrency === undefined) throw new TypeError("redis-unique: give concurrency (per group), total (in all), or both");
    } else {
      commands.checkLimit(total);
      if (total < 1) throw new RangeError(`redis-unique: total must be a whole number of at least 1, got ${total}`);
      if (options.limiter !== undefined) {
        throw new TypeError(
          "redis-unique: limiter cannot be combined with total: limiter is a rate per group, and with total every " +
            "group of the queue shares one key, whose rate would be the queue's in all. Leave out total for a rate " +
            "per group, or use the Worker's own limiter for a rate of the queue",
        );
      }
      if (weight !== undefined && typeof weight !== "function") commands.checkWeight(weight);
    }
    if (concurrency !== undefined) {
      commands.checkLimit(concurrency);
      if (concurrency < 1) throw new RangeError("redis-unique: concurrency must be at least 1");
    }
    this.client = options.redis instanceof Client ? options.redis : new Client(options.redis);
    this.concurrency = concurrency;
    this.total = total;
    this.lease = options.lease ?? 30_000;
    this.wait = options.wait ?? 1_000;
    this.delay = options.delay ?? 1_000;
    this.maxDelay = options.maxDelay ?? 30_000;
    this.prefix = options.prefix ?? (this.limits ? "unique:limit" : total === undefined ? "unique:group" : "unique:fair");
    this.type = commands.checkType(options.type ?? "group");
    this.workerName = options.workerName ?? uniqueWorkerName();
    this.rate = options.limiter && { limit: options.limiter.max, per: options.limiter.duration, burst: options.limiter.burst };
    if (this.rate) commands.rateArgv(this.rate);
    for (const [name, value] of Object.entries({ lease: this.lease, wait: this.wait, delay: this.delay, maxDelay: this.maxDelay })) {
      if (!Number.isInteger(value) || value < 1) throw new RangeError(`redis-unique: ${name} must be a whole number of ms of at least 1, got ${value}`);
    }
  }

  /**
   * The lock key of a group of a queue: `<prefix>:<queue>:<group>`; with `total`, the one
   * key of the queue, `<prefix>:<queue>`, whatever the group.
   */
  key(queueName: string, group?: string): string {
    if (this.limits) throw new TypeError("redis-unique: a GroupLimit with limits has a key per limit: use keysOf(job) or limitKey(queue, name, group)");
    if (this.total !== undefined) return `${this.prefix}:${queueName}`;
    if (group === undefined) throw new TypeError("redis-unique: key() of a GroupLimit without total needs the group");
    return `${this.prefix}:${queueName}:${group}`;
  }

  /** The UNIQUE.LOCK options of a job of `group` (checked when sent). */
  lockOptions(job: Job<T>, group: string): commands.LockOptions {
    const base = { ttl: this.lease, owner: this.workerName, type: this.type, wait: this.wait };
    if (this.total === undefined) return { limit: this.concurrency, ...base, rate: this.rate };
    const { weight } = this.options;
    const w = typeof weight === "function" ? weight(job, group) : weight;
    return { limit: this.total, ...base, group, weight: w, groupLimit: this.concurrency };
  }

  /** With `limits`: the key of a limit, per group (`group`) or in all. */
  limitKey(queueName: string, name: string, group?: string): string {
    return limitKey(this.prefix, queueName, name, group);
  }

  /** With `limits`: the keys a job holds while it runs, in the order of `limits` (the limits that apply to it). */
  keysOf(job: Job<T>): string[] {
    if (!this.limits) throw new TypeError("redis-unique: keysOf() is for a GroupLimit with limits");
    return jobGrant(this.limits as NormalizedLimit<Job<T>>[], this.prefix, job.queueName, job).keys;
  }

  /** The processor, run only while the job holds a slot of its group (of every limit, with `limits`). */
  wrap<R>(processor: Processor<T, R>): Processor<T, R> {
    if (this.limits) return this.wrapAll(processor);
    return async (job, token, signal) => {
      const group = this.options.group!(job);
      if (group === null || group === undefined) return processor(job, token, signal);
      const key = this.key(job.queueName, String(group));
      const jid = String(job.id);
      const sentAt = Date.now();
      const slot = await this.client.lock(key, jid, this.lockOptions(job, String(group)));
      if (slot === null) {
        await job.moveToDelayed(Date.now() + this.backoff(jid), token);
        throw new DelayedError();
      }
      this.tries.delete(jid);
      // A wait is spent before the grant: the lease starts at the reply, at the latest.
      const granted = this.wait ? Date.now() : sentAt;
      return this.holding(key, jid, slot, granted, (lost) => processor(job, token, anyAbort(signal, lost)), (error) =>
        (this.options.onLockLost ?? ((e: LockLostError) => process.emitWarning(e)))(error, job));
    };
  }

  /** wrap() with `limits`: one LOCKALL for every limit that applies to the job. */
  private wrapAll<R>(processor: Processor<T, R>): Processor<T, R> {
    return async (job, token, signal) => {
      const { keys, limits, rates } = jobGrant(this.limits as NormalizedLimit<Job<T>>[], this.prefix, job.queueName, job);
      if (keys.length === 0) return processor(job, token, signal);
      const jid = String(job.id);
      const sentAt = Date.now();
      const tokens = await this.client.lockAll(keys, jid, {
        limits, rates: rates.some((r) => r !== undefined) ? rates : undefined,
        ttl: this.lease, type: this.type, owner: this.workerName, wait: this.wait,
      });
      if (tokens === null) {
        await job.moveToDelayed(Date.now() + this.backoff(jid), token);
        throw new DelayedError();
      }
      this.tries.delete(jid);
      const granted = this.wait ? Date.now() : sentAt;
      return this.hold({ keys, tokens }, jid, granted, (lost) => processor(job, token, anyAbort(signal, lost)), (error) =>
        (this.options.onLockLost ?? ((e: LockLostError) => process.emitWarning(e)))(error, job));
    };
  }

  /**
   * holding() for holds on several keys taken at once (`tokens` in key order): renewed
   * together, released together (UNLOCKALL); the loss of any is the loss of all.
   */
  holdingAll<R>(keys: string[], jid: string, tokens: number[], sentAt: number,
                work: (lost: AbortSignal) => Promise<R>, onLost: (error: LockLostError) => void): Promise<R> {
    return this.hold({ keys, tokens }, jid, sentAt, work, onLost);
  }

  /**
   * Runs `work` while the one renewal loop of this package keeps `jid`'s hold of `key`
   * (fencing token `token`, granted by a LOCK sent at `sentAt`), then releases it. A loss
   * aborts the signal given to `work` and calls `onLost`.
   */
  async holding<R>(key: string, jid: string, token: number, sentAt: number,
                   work: (lost: AbortSignal) => Promise<R>, onLost: (error: LockLostError) => void): Promise<R> {
    return this.hold({ key, token }, jid, sentAt, work, onLost);
  }

  private async hold<R>(held: { key: string; token: number } | { keys: string[]; tokens: number[] }, jid: string, sentAt: number,
                        work: (lost: AbortSignal) => Promise<R>, onLost: (error: LockLostError) => void): Promise<R> {
    const lost = new AbortController();
    const refresher = new Refresher(this.client, {
      ...held, jid, leaseMs: this.lease, sentAt,
      onLost: (error) => {
        lost.abort(error);
        onLost(error);
      },
    }).start();
    try {
      return await work(lost.signal);
    } finally {
      refresher.stop();
      if (!refresher.lost) {
        const release = "keys" in held
          ? this.client.unlockAll(held.keys, jid, held.tokens)
          : this.client.unlock(held.key, jid, held.token);
        await release.catch(() => {});
      }
    }
  }

  private backoff(jid: string): number {
    const tries = (this.tries.get(jid) ?? 0) + 1;
    this.tries.set(jid, tries);
    if (this.tries.size > 10_000) this.tries.clear(); // jobs moved to another worker
    const base = Math.min(this.maxDelay, this.delay * 2 ** Math.min(tries - 1, 20));
    return Math.round(base / 2 + Math.random() * (base / 2));
  }
}

/**
 * Frees the slots and unique locks of workers that BullMQ no longer lists for `queue`
 * (killed, crashed, disconnected), among the owners registered with `register`. Run it
 * now and then from any process (`startReaper` does, every `interval` ms).
 */
export class DeadWorkerReaper {
  readonly client: Client;
  private readonly registry: string;
  private timer: NodeJS.Timeout | undefined;

  constructor(redis: RedisClient | Client, private readonly queue: Queue, options: { registry?: string } = {}) {
    this.client = redis instanceof Client ? redis : new Client(redis);
    this.registry = options.registry ?? `unique:workers:${queue.name}`;
  }

  /**
   * Records a worker's name, so that its locks are freed once BullMQ stops listing it. Call it
   * once the Worker is ready (`await worker.waitUntilReady()`): BullMQ lists it from then on, and
   * a pass before that would take it for dead (and forget it).
   */
  async register(workerName: string): Promise<void> {
    await this.client.transport.send(["SADD", this.registry, workerName]);
  }

  /** One pass: returns how many holders of dead workers were removed. */
  async reap(): Promise<number> {
    const names = (await this.client.transport.send(["SMEMBERS", this.registry])) as Array<string | Buffer>;
    if (!names.length) return 0;
    // BullMQ gives each worker's connection name as `rawname` (its `name` is the queue's).
    const live = (await this.queue.getWorkers()).map((w) => String(w.rawname ?? w.name ?? ""));
    let removed = 0;
    for (const raw of names) {
      const name = String(raw);
      if (live.some((n) => n.endsWith(`:w:${name}`))) continue;
      removed += await this.client.reap({ owner: name });
      await this.client.transport.send(["SREM", this.registry, name]);
    }
    return removed;
  }

  start(interval = 5_000): this {
    this.stop();
    this.timer = setInterval(() => void this.reap().catch(() => {}), interval);
    this.timer.unref();
    return this;
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }
}

export type UniqueLockType = "while_executing" | "until_and_while_executing";
const LOCK_TYPES: readonly UniqueLockType[] = ["while_executing", "until_and_while_executing"];

export interface UniqueJobOptions<T = unknown> {
  redis: RedisClient | Client;
  /** `while_executing`: one job of a key runs at a time (the others wait, then are delayed).
   *  `until_and_while_executing`: also one job of a key queued at a time (add() skips a duplicate). */
  lock: UniqueLockType;
  /** The uniqueness key of a job's data (e.g. `(data) => data.userId`). */
  key: (data: T, name: string) => string;
  /** Lease of the running lock in ms (renewed), and of the queued lock. Defaults 30000 and 3600000. */
  runLease?: number;
  queuedLease?: number;
  /** Native wait before a running duplicate is delayed, and its first delay, in ms. */
  wait?: number;
  delay?: number;
  prefix?: string;
}

/**
 * Unique jobs beyond BullMQ's own deduplication (which keys on adding only):
 *
 *     const unique = new UniqueJobs({ redis, lock: "until_and_while_executing", key: (d) => d.userId });
 *     await unique.add(queue, "sync", { userId: 42 });           // null: a duplicate is queued
 *     new Worker("jobs", unique.wrap(process), { connection, name: unique.workerName });
 */
export class UniqueJobs<T = unknown> {
  readonly client: Client;
  private readonly running: GroupLimit<T>;
  private readonly prefix: string;

  constructor(private readonly options: UniqueJobOptions<T>) {
    if (!LOCK_TYPES.includes(options.lock)) {
      throw new RangeError(`redis-unique: lock must be one of ${LOCK_TYPES.join(", ")}, got ${String(options.lock)}`);
    }
    if (typeof options.key !== "function") throw new TypeError("redis-unique: key must be a function of the job's data");
    this.client = options.redis instanceof Client ? options.redis : new Client(options.redis);
    this.prefix = options.prefix ?? "unique:job";
    this.running = new GroupLimit<T>({
      redis: this.client,
      group: (job) => this.uniqueKey(job.data, job.name),
      concurrency: 1,
      lease: options.runLease,
      wait: options.wait,
      delay: options.delay,
      prefix: `${this.prefix}:run`,
      type: "while_executing",
    });
  }

  get workerName(): string {
    return this.running.workerName;
  }

  uniqueKey(data: T, name: string): string {
    return `${name}:${this.options.key(data, name)}`;
  }

  /**
   * Adds a job; with `until_and_while_executing`, only when no job of the same key is
   * queued (the lock is taken first, with the job's id): returns null for a duplicate.
   */
  async add(queue: Queue, name: string, data: T, opts: Record<string, unknown> = {}): Promise<Job<T> | null> {
    if (this.options.lock !== "until_and_while_executing") return queue.add(name as never, data as never, opts) as Promise<Job<T>>;
    const jobId = String(opts.jobId ?? `${name}-${randomBytes(8).toString("hex")}`); // BullMQ refuses ":" in ids
    const key = `${this.prefix}:queued:${queue.name}:${this.uniqueKey(data, name)}`;
    const token = await this.client.lock(key, jobId, { ttl: this.options.queuedLease ?? 3_600_000, type: "until_executing" });
    if (token === null) return null;
    try {
      return (await queue.add(name as never, data as never, { ...opts, jobId })) as Job<T>;
    } catch (err) {
      await this.client.unlock(key, jobId, token).catch(() => {}); // this call's own hold, not a later one
      throw err;
    }
  }

  /** The processor, run under the job's running lock (and freeing its queued lock when it starts). */
  wrap<R>(processor: Processor<T, R>): Processor<T, R> {
    return this.running.wrap(async (job, token, signal) => {
      if (this.options.lock === "until_and_while_executing") {
        const key = `${this.prefix}:queued:${job.queueName}:${this.uniqueKey(job.data, job.name)}`;
        await this.client.unlock(key, String(job.id));
      }
      return processor(job, token, signal);
    });
  }
}

export type { JobLimit } from "./grouplimits.js";
