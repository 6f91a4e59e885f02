/**
 * GroupLimit's `limits`: several limits on one job (per tenant and in all, say), each with its
 * concurrency and optional rate, taken in one atomic grant (UNIQUE.LOCKALL): a job starts only
 * when every limit has room, and spends a rate only then. Kept apart from bullmq.ts so that it
 * needs nothing of BullMQ but the job it reads.
 */
import * as commands from "./commands.js";

/** One of GroupLimit's `limits`. */
export interface JobLimit<J> {
  /**
   * The group of a job under this limit (e.g. its tenant id): the job counts against that
   * group's `concurrency`. Null or undefined: this limit leaves the job alone. Left out: every
   * job is under one group, the limit in all (a global limit).
   */
  group?: (job: J) => string | null | undefined;
  /** How many jobs of one group (of every job, without `group`) may run at once; 0: only the rate. */
  concurrency: number;
  /** At most `max` jobs of one group start every `duration` ms (evenly spaced), plus `burst` at once. */
  limiter?: { max: number; duration: number; burst?: number };
}

/** A limit as GroupLimit keeps it: its name, and its rate in the client's words. */
export interface NormalizedLimit<J> {
  name: string;
  group: ((job: J) => string | null | undefined) | undefined;
  concurrency: number;
  rate: commands.RateLimit | undefined;
}

const NAME = /^[A-Za-z0-9_.-]{1,64}$/;
const LIMIT_FIELDS = new Set(["group", "concurrency", "limiter"]);

/** Checks `limits` ({ name: { group?, concurrency, limiter? } }), in their order. */
export function normalizeLimits<J>(limits: unknown): NormalizedLimit<J>[] {
  if (limits === null || typeof limits !== "object" || Array.isArray(limits)) {
    throw new TypeError("redis-unique: limits must be an object of named limits: { tenant: { group, concurrency }, global: { concurrency } }");
  }
  const entries = Object.entries(limits as Record<string, JobLimit<J>>);
  if (entries.length < 1 || entries.length > commands.MAX_KEYS) {
    throw new RangeError(`redis-unique: give 1 to ${commands.MAX_KEYS} limits, got ${entries.length}`);
  }
  return entries.map(([name, limit]) => {
    if (!NAME.test(name)) {
      throw new RangeError(`redis-unique: a limit's name must be 1 to 64 of A-Z a-z 0-9 _ . - (it is part of its keys), got ${JSON.stringify(name)}`);
    }
    if (limit === null || typeof limit !== "object") throw new TypeError(`redis-unique: limits.${name} must be { group?, concurrency, limiter? }`);
    const stray = Object.keys(limit).filter((f) => !LIMIT_FIELDS.has(f));
    if (stray.length) {
      throw new TypeError(
        `redis-unique: limits.${name} has no option ${stray.join(", ")} (known: group, concurrency, limiter; ` +
          "total and weight share one key fairly, which a grant of several keys cannot)",
      );
    }
    if (limit.group !== undefined && typeof limit.group !== "function") {
      throw new TypeError(`redis-unique: limits.${name}.group must be a function of the job (or left out for a limit in all)`);
    }
    if (limit.concurrency === undefined) throw new TypeError(`redis-unique: limits.${name}.concurrency is needed (0: only the rate)`);
    commands.checkLimit(limit.concurrency);
    const l = limit.limiter;
    const rate = l && { limit: l.max, per: l.duration, burst: l.burst };
    if (rate) commands.rateArgv(rate);
    if (limit.concurrency === 0 && !rate) {
      throw new RangeError(`redis-unique: limits.${name} limits nothing: give a concurrency of at least 1, or a limiter`);
    }
    return { name, group: limit.group, concurrency: limit.concurrency, rate };
  });
}

/**
 * A limit's key: `<prefix>:{<queue>}:<name>` in all, `<prefix>:{<queue>}:<name>:<group>` per
 * group. The queue is the hash tag, so that in a cluster every key of a queue's jobs is in
 * one slot, as a grant of several keys needs.
 */
export function limitKey(prefix: string, queueName: string, name: string, group?: string): string {
  const base = `${prefix}:{${queueName}}:${name}`;
  return group === undefined ? base : `${base}:${group}`;
}

/** The keys, limits and rates of a job: only the limits whose group applies to it. */
export function jobGrant<J>(limits: NormalizedLimit<J>[], prefix: string, queueName: string, job: J):
  { keys: string[]; limits: number[]; rates: Array<commands.RateLimit | undefined> } {
  const keys: string[] = [];
  const counts: number[] = [];
  const rates: Array<commands.RateLimit | undefined> = [];
  for (const limit of limits) {
    let group: string | undefined;
    if (limit.group) {
      const g = limit.group(job);
      if (g === null || g === undefined) continue;
      group = String(g);
    }
    keys.push(limitKey(prefix, queueName, limit.name, group));
    counts.push(limit.concurrency);
    rates.push(limit.rate);
  }
  return { keys, limits: counts, rates };
}
