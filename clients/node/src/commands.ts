/**
 * The argv of every UNIQUE.* call and the parsing of its reply: plain functions with no
 * I/O, shared by the Client, its pipelines and transactions, and the locks. Every
 * argument is checked here, before anything is sent.
 */
import type { Reply } from "./transport.js";

/** A command to send and how to read its reply. */
export interface Command<T> {
  readonly argv: string[];
  parse(reply: Reply): T;
}

export interface LockOptions {
  /** The lease, in milliseconds from now (a positive whole number). Without `ttl` or `pxat`: no lease. */
  ttl?: number;
  /** The end of the lease: a Date, or unix time in milliseconds (as redis-py's and ioredis's `PXAT`). */
  pxat?: Date | number;
  /** How many holders the lock may have for this call (0: no limit). Default 1. */
  limit?: number;
  /** The lock type (1 to 64 of `A-Z a-z 0-9 _ : . -`), e.g. `until_executed`. Default `lock`. */
  type?: string;
  /** The worker process that runs the job, for reaping by owner. */
  owner?: string;
  /** Metadata kept with the holder: an object (sent as JSON) or a JSON object's text. */
  meta?: Record<string, unknown> | string;
  /** A rate a new grant also needs: at most `limit` grants per `per` ms, plus `burst` at once (renewals never spend it). */
  rate?: RateLimit;
  /**
   * The caller's group (a tenant id, 1 to 1024 bytes). Waiters of several groups share the
   * key's `limit` fairly: a freed slot goes to the waiting group holding the fewest slots for
   * its `weight`. Kept by the hold (a renewal keeps it).
   */
  group?: string;
  /** The group's weight among the waiting groups, 1 to 1000 (default 1); needs `group`. */
  weight?: number;
  /** A grant also needs fewer than this many live holders of the caller's `group` on the key; needs `group`. */
  groupLimit?: number;
  /**
   * `shared` (readers: up to `limit` at once, none while a writer holds or waits ahead) or
   * `exclusive` (a writer: holds alone, whatever `limit` says). Without it, today's
   * behaviour (counted as shared against a writer). On a renewal: `shared` downgrades an
   * exclusive hold, `exclusive` upgrades only the sole holder (null otherwise, never waiting).
   */
  mode?: LockMode;
  /** When denied, wait up to this many milliseconds for a slot (and the rate), first come, first served. */
  wait?: number;
}

/** A hold's mode: readers share, a writer holds alone. */
export type LockMode = "shared" | "exclusive";

/** `RATE limit PER per [BURST burst]`: at most `limit` grants every `per` milliseconds, evenly spaced, plus `burst` at once. */
export interface RateLimit {
  limit: number;
  /** The period, in milliseconds. */
  per: number;
  /** Grants allowed at once beyond the steady pace. Default 0. */
  burst?: number;
}

/** A key's rate state, as UNIQUE.RATE gives it; times are unix milliseconds. */
export interface RateState {
  limit: number;
  per: number;
  burst: number;
  /** Grants allowed now, one after the other. */
  remaining: number;
  /** The first instant a grant is allowed (now when `remaining` is above 0). */
  allowedAt: number;
  /** The first instant nothing is spent any more. */
  idleAt: number;
}

/** One holder of a lock, as UNIQUE.LOCKEDBY WITHMETA gives it; times are unix milliseconds. */
export interface Holder {
  jid: string;
  token: number;
  acquiredAt: number;
  /** The end of the lease, or null without a lease. */
  expiresAt: number | null;
  /** Milliseconds left, or null without a lease. */
  ttl: number | null;
  type: string;
  owner: string | null;
  meta: Record<string, unknown> | null;
  /** The hold's group, or null when taken without one. */
  group: string | null;
  /** The hold's mode, or null when taken without one (it then counts as shared against a writer). */
  mode: LockMode | null;
}

/** One group of UNIQUE.WAITERS key GROUPS: how many of it wait for the key, and how many hold it. */
export interface GroupWaiters {
  /** The group, or null for the waiters and holders without one. */
  group: string | null;
  waiting: number;
  holding: number;
}

export interface ReapOptions {
  /** Also remove every holder whose owner is this (a worker process known to be dead). */
  owner?: string;
  /** Lock keys examined per REAP step (default 100). */
  count?: number;
}

const TYPE_NAME = /^[A-Za-z0-9_:.-]{1,64}$/;
const MAX_LIMIT = 2147483647;
const MAX_WEIGHT = 1000;
const MODES: readonly LockMode[] = ["shared", "exclusive"];

function wholeMs(name: string, value: unknown, min: number): number {
  if (typeof value !== "number" || Number.isNaN(value)) {
    throw new TypeError(`redis-unique: ${name} must be a number of milliseconds, got ${String(value)}`);
  }
  if (!Number.isInteger(value) || value < min || !Number.isSafeInteger(value)) {
    throw new RangeError(`redis-unique: ${name} must be a whole number of milliseconds of at least ${min}, got ${value}`);
  }
  return value;
}

function nonEmpty(name: string, value: unknown, maxBytes: number): string {
  if (typeof value !== "string") throw new TypeError(`redis-unique: ${name} must be a string, got ${typeof value}`);
  const bytes = Buffer.byteLength(value);
  if (bytes < 1 || bytes > maxBytes) {
    throw new RangeError(`redis-unique: ${name} must be 1 to ${maxBytes} bytes, got ${bytes}`);
  }
  return value;
}

export function checkKey(key: unknown): string {
  if (typeof key !== "string" || key.length === 0) {
    throw new TypeError(`redis-unique: key must be a non-empty string, got ${String(key)}`);
  }
  return key;
}

export function checkJid(jid: unknown): string {
  return nonEmpty("jid", jid, 1024);
}

export function checkType(type: unknown): string {
  if (typeof type !== "string") throw new TypeError(`redis-unique: type must be a string, got ${typeof type}`);
  if (!TYPE_NAME.test(type)) {
    throw new RangeError(`redis-unique: type must be 1 to 64 characters of A-Z a-z 0-9 _ : . -, got ${JSON.stringify(type)}`);
  }
  return type;
}

export function checkLimit(limit: unknown): number {
  if (typeof limit !== "number") throw new TypeError(`redis-unique: limit must be a number, got ${typeof limit}`);
  if (!Number.isInteger(limit) || limit < 0 || limit > MAX_LIMIT) {
    throw new RangeError(`redis-unique: limit must be a whole number from 0 to ${MAX_LIMIT}, got ${limit}`);
  }
  return limit;
}

export function checkGroup(group: unknown): string {
  return nonEmpty("group", group, 1024);
}

export function checkWeight(weight: unknown): number {
  if (typeof weight !== "number") throw new TypeError(`redis-unique: weight must be a number, got ${typeof weight}`);
  if (!Number.isInteger(weight) || weight < 1 || weight > MAX_WEIGHT) {
    throw new RangeError(`redis-unique: weight must be a whole number from 1 to ${MAX_WEIGHT}, got ${weight}`);
  }
  return weight;
}

export function checkGroupLimit(groupLimit: unknown): number {
  if (typeof groupLimit !== "number") throw new TypeError(`redis-unique: groupLimit must be a number, got ${typeof groupLimit}`);
  if (!Number.isInteger(groupLimit) || groupLimit < 1 || groupLimit > MAX_LIMIT) {
    throw new RangeError(`redis-unique: groupLimit must be a whole number from 1 to ${MAX_LIMIT}, got ${groupLimit}`);
  }
  return groupLimit;
}

export function checkMode(mode: unknown): LockMode {
  if (typeof mode !== "string") throw new TypeError(`redis-unique: mode must be "shared" or "exclusive", got ${typeof mode}`);
  if (!MODES.includes(mode as LockMode)) {
    throw new RangeError(`redis-unique: mode must be "shared" or "exclusive", got ${JSON.stringify(mode)}`);
  }
  return mode as LockMode;
}

/** `GROUP name [WEIGHT w] [GROUPLIMIT m]`: WEIGHT and GROUPLIMIT only with a group. */
export function groupArgv(group?: string, weight?: number, groupLimit?: number): string[] {
  if (group === undefined) {
    if (weight !== undefined) throw new TypeError("redis-unique: weight needs group (it is the group's weight among the waiting groups)");
    if (groupLimit !== undefined) throw new TypeError("redis-unique: groupLimit needs group (it limits the holders of the caller's group)");
    return [];
  }
  const argv = ["GROUP", checkGroup(group)];
  if (weight !== undefined) argv.push("WEIGHT", String(checkWeight(weight)));
  if (groupLimit !== undefined) argv.push("GROUPLIMIT", String(checkGroupLimit(groupLimit)));
  return argv;
}

/** The argv of UNIQUE.LOCK; every option checked. */
export function lockArgv(key: string, jid: string, options: LockOptions = {}): string[] {
  const argv = ["UNIQUE.LOCK", checkKey(key), checkJid(jid)];
  const { ttl, pxat, limit, type, owner, meta, rate, group, weight, groupLimit, mode, wait } = options;
  if (limit !== undefined) argv.push("LIMIT", String(checkLimit(limit)));
  if (ttl !== undefined && pxat !== undefined) throw new TypeError("redis-unique: give ttl or pxat, not both");
  if (ttl !== undefined) argv.push("TTL", String(wholeMs("ttl", ttl, 1)));
  if (pxat !== undefined) {
    const at = pxat instanceof Date ? pxat.getTime() : pxat;
    argv.push("PXAT", String(wholeMs("pxat", at, 1)));
  }
  if (type !== undefined) argv.push("TYPE", checkType(type));
  if (owner !== undefined) argv.push("OWNER", nonEmpty("owner", owner, 1024));
  if (meta !== undefined) {
    let text: string;
    if (typeof meta === "string") text = meta;
    else if (meta !== null && typeof meta === "object" && !Array.isArray(meta)) text = JSON.stringify(meta);
    else throw new TypeError("redis-unique: meta must be an object or a JSON object's text");
    argv.push("META", text);
  }
  if (rate !== undefined) argv.push(...rateArgv(rate));
  argv.push(...groupArgv(group, weight, groupLimit));
  if (mode !== undefined) argv.push("MODE", checkMode(mode));
  if (wait !== undefined) argv.push("WAIT", String(wholeMs("wait", wait, 1)));
  return argv;
}

/** `RATE n PER ms [BURST b]` (BURST only when above 0). */
export function rateArgv(rate: RateLimit): string[] {
  if (rate === null || typeof rate !== "object") {
    throw new TypeError("redis-unique: rate must be { limit, per, burst? } (per in ms)");
  }
  const whole = (name: string, value: unknown, min: number) => {
    if (typeof value !== "number" || !Number.isSafeInteger(value) || value < min) {
      throw new RangeError(`redis-unique: rate.${name} must be a whole number of at least ${min}, got ${String(value)}`);
    }
    return value;
  };
  const argv = ["RATE", String(whole("limit", rate.limit, 1)), "PER", String(whole("per", rate.per, 1))];
  const burst = whole("burst", rate.burst ?? 0, 0);
  if (burst > 0) argv.push("BURST", String(burst));
  return argv;
}

function text(reply: Reply): string {
  return Buffer.isBuffer(reply) ? reply.toString("utf8") : String(reply);
}

function int(reply: Reply): number {
  return typeof reply === "number" ? reply : Number(text(reply));
}

/** LOCK: the fencing token, or null when denied. */
export function lock(key: string, jid: string, options?: LockOptions): Command<number | null> {
  return { argv: lockArgv(key, jid, options), parse: (r) => (r === null ? null : int(r)) };
}

/** A fencing token as LOCK replied it, for a fenced unlock: a whole number from 1 on. */
export function checkToken(token: unknown, name = "token"): string {
  if (typeof token === "bigint" && token >= 1n && token <= 9223372036854775807n) return String(token);
  if (typeof token !== "number" || !Number.isSafeInteger(token) || token < 1) {
    throw new TypeError(`redis-unique: ${name} must be a fencing token as lock() returned it (a whole number of at least 1), got ${String(token)}`);
  }
  return String(token);
}

/**
 * UNLOCK: true when `jid` held the lock and no longer does. With `token` (the one lock()
 * returned), a fenced unlock: only the hold of that token is released, so a late unlock never
 * frees a newer hold of the same jid.
 */
export function unlock(key: string, jid: string, token?: number): Command<boolean> {
  const argv = ["UNIQUE.UNLOCK", checkKey(key), checkJid(jid)];
  if (token !== undefined) argv.push("TOKEN", checkToken(token));
  return { argv, parse: (r) => int(r) === 1 };
}

/** LOCKEDBY: the jids of the live holders, oldest grant first. */
export function lockedBy(key: string): Command<string[]> {
  return {
    argv: ["UNIQUE.LOCKEDBY", checkKey(key)],
    parse: (r) => (Array.isArray(r) ? r.map(text) : []),
  };
}

function fields(entry: Reply): Map<string, Reply> {
  const out = new Map<string, Reply>();
  if (Array.isArray(entry)) {
    for (let i = 0; i + 1 < entry.length; i += 2) out.set(text(entry[i]!), entry[i + 1]!);
  } else if (entry instanceof Map) {
    for (const [k, v] of entry) out.set(text(k as Reply), v as Reply);
  } else if (entry !== null && typeof entry === "object" && !Buffer.isBuffer(entry)) {
    for (const [k, v] of Object.entries(entry)) out.set(k, v);
  }
  return out;
}

/** One holder of a LOCKEDBY WITHMETA reply (a flat array on RESP2, a map on RESP3). */
export function parseHolder(entry: Reply): Holder {
  const f = fields(entry);
  const expires = int(f.get("expires_at") ?? -1);
  const ttl = int(f.get("ttl") ?? -1);
  const owner = f.get("owner");
  const meta = f.get("meta");
  const group = f.get("group");
  const mode = f.get("mode");
  let parsedMeta: Record<string, unknown> | null = null;
  if (meta !== null && meta !== undefined) {
    try {
      parsedMeta = JSON.parse(text(meta)) as Record<string, unknown>;
    } catch {
      parsedMeta = null; // the server only keeps JSON objects; nothing else can arrive
    }
  }
  return {
    jid: text(f.get("jid") ?? ""),
    token: int(f.get("token") ?? 0),
    acquiredAt: int(f.get("acquired_at") ?? 0),
    expiresAt: expires < 0 ? null : expires,
    ttl: ttl < 0 ? null : ttl,
    type: text(f.get("type") ?? "lock"),
    owner: owner === null || owner === undefined ? null : text(owner),
    meta: parsedMeta,
    group: group === null || group === undefined ? null : text(group),
    mode: mode === null || mode === undefined ? null : (text(mode) as LockMode),
  };
}

/** LOCKEDBY WITHMETA: every live holder with its token, lease, type, owner and META. */
export function holders(key: string): Command<Holder[]> {
  return {
    argv: ["UNIQUE.LOCKEDBY", checkKey(key), "WITHMETA"],
    parse: (r) => (Array.isArray(r) ? r.map(parseHolder) : []),
  };
}

/** RATE: the key's rate state, or null when it has none. */
export function rate(key: string): Command<RateState | null> {
  return {
    argv: ["UNIQUE.RATE", checkKey(key)],
    parse: (r) => {
      if (r === null) return null;
      const f = fields(r);
      const n = (name: string) => int(f.get(name) ?? 0);
      return {
        limit: n("limit"),
        per: n("per"),
        burst: n("burst"),
        remaining: n("remaining"),
        allowedAt: n("allowed_at"),
        idleAt: n("idle_at"),
      };
    },
  };
}

/** WAITERS: how many clients wait for a slot of the key. */
export function waiters(key: string): Command<number> {
  return { argv: ["UNIQUE.WAITERS", checkKey(key)], parse: int };
}

/**
 * WAITERS GROUPS: per group that waits for or holds the key, how many wait and how many
 * hold (the holders and waiters without a group first, as group null, then by name).
 */
export function waitersByGroup(key: string): Command<GroupWaiters[]> {
  return {
    argv: ["UNIQUE.WAITERS", checkKey(key), "GROUPS"],
    parse: (r) =>
      Array.isArray(r)
        ? r.map((entry) => {
            const f = fields(entry);
            const group = f.get("group");
            return {
              group: group === null || group === undefined ? null : text(group),
              waiting: int(f.get("waiting") ?? 0),
              holding: int(f.get("holding") ?? 0),
            };
          })
        : [],
  };
}

/** One REAP step: [next cursor, holders removed]. */
export function reapStep(cursor: string, options: ReapOptions = {}): Command<[string, number]> {
  const argv = ["UNIQUE.REAP", cursor];
  if (options.count !== undefined) argv.push("COUNT", String(wholeMs("count", options.count, 1)));
  if (options.owner !== undefined) argv.push("OWNER", nonEmpty("owner", options.owner, 1024));
  return {
    argv,
    parse: (r) => {
      const [next, removed] = Array.isArray(r) ? r : ["0", 0];
      return [text(next ?? "0"), int(removed ?? 0)];
    },
  };
}

export interface Metrics {
  locks: number;
  holders: number;
  total: Record<string, number>;
  types: Record<string, Record<string, number>>;
}

/** METRICS FORMAT json: counters per lock type and in total, and the gauges. */
export function metrics(options: { minutes?: number } = {}): Command<Metrics> {
  const argv = ["UNIQUE.METRICS", "FORMAT", "json"];
  if (options.minutes !== undefined) argv.push("MINUTES", String(wholeMs("minutes", options.minutes, 1)));
  return { argv, parse: (r) => JSON.parse(text(r)) as Metrics };
}

/** The most keys one UNIQUE.LOCKALL or UNLOCKALL names. */
export const MAX_KEYS = 64;

/**
 * UNIQUE.LOCKALL's options: every key or none, each key with its own limit and rate. GROUP,
 * WEIGHT, GROUPLIMIT and MODE per key (which the module takes by key position) are not sent by
 * this package yet: it refuses them before sending rather than ignore them.
 */
export interface LockAllOptions {
  /** One limit per key, in key order (0: no limit). Default 1 each. */
  limits?: number[];
  /**
   * The rates a new grant also needs, in key order: `rates[i]` for `keys[i]`, null or left out
   * for a key without one (`[undefined, { limit: 50, per: 1000 }]`). Spent only when every key
   * grants, never by a renewal.
   */
  rates?: Array<RateLimit | null | undefined>;
  /** The lease of every key, in ms from now. */
  ttl?: number;
  /** The end of every key's lease: a Date, or unix time in ms. */
  pxat?: Date | number;
  type?: string;
  owner?: string;
  meta?: Record<string, unknown> | string;
  /** When refused, wait up to this many ms until every key can grant at once (holding nothing meanwhile). */
  wait?: number;
}

const SINGLE_KEY_ONLY = ["group", "weight", "groupLimit", "mode"] as const;
const LOCK_ALL_OPTIONS = new Set(["limits", "rates", "ttl", "pxat", "type", "owner", "meta", "wait"]);

/** 1 to 64 keys, each a non-empty string named once. */
export function checkKeys(keys: unknown): string[] {
  if (!Array.isArray(keys)) throw new TypeError(`redis-unique: keys must be an array of key names, got ${typeof keys}`);
  if (keys.length < 1 || keys.length > MAX_KEYS) {
    throw new RangeError(`redis-unique: give 1 to ${MAX_KEYS} keys, got ${keys.length}`);
  }
  const seen = new Set<string>();
  for (const key of keys) {
    checkKey(key);
    if (seen.has(key)) throw new RangeError(`redis-unique: the key ${key} is named twice (each key once)`);
    seen.add(key);
  }
  return keys as string[];
}

/** The argv of UNIQUE.LOCKALL, options in the reference's order; every option checked. */
export function lockAllArgv(keys: string[], jid: string, options: LockAllOptions = {}): string[] {
  checkKeys(keys);
  if (options === null || typeof options !== "object") throw new TypeError("redis-unique: lockAll options must be an object");
  for (const name of SINGLE_KEY_ONLY) {
    if ((options as Record<string, unknown>)[name] !== undefined) {
      throw new TypeError(
        `redis-unique: ${name} is not supported by lockAll in this version (per-key GROUP, WEIGHT, GROUPLIMIT and ` +
          "MODE): take such a lock with lock() on its own key",
      );
    }
  }
  const unknown = Object.keys(options).filter((n) => !LOCK_ALL_OPTIONS.has(n) && (options as Record<string, unknown>)[n] !== undefined);
  if (unknown.length) {
    throw new TypeError(`redis-unique: unknown lockAll option ${unknown.join(", ")} (known: ${[...LOCK_ALL_OPTIONS].join(", ")})`);
  }
  const argv = ["UNIQUE.LOCKALL", String(keys.length), ...keys, checkJid(jid)];
  const { limits, rates, ttl, pxat, type, owner, meta, wait } = options;
  if (limits !== undefined) {
    if (!Array.isArray(limits) || limits.length !== keys.length) {
      throw new TypeError(`redis-unique: limits must be an array of one limit per key (${keys.length}), in key order`);
    }
    argv.push("LIMIT", ...limits.map((l) => String(checkLimit(l))));
  }
  if (rates !== undefined) {
    if (!Array.isArray(rates) || rates.length > keys.length) {
      throw new TypeError(`redis-unique: rates must be an array of at most one rate per key (${keys.length}), in key order`);
    }
    rates.forEach((rate, i) => {
      if (rate === null || rate === undefined) return;
      const [, ...rest] = rateArgv(rate);
      argv.push("RATE", String(i + 1), ...rest);
    });
  }
  // TTL, PXAT, TYPE, OWNER, META: checked and written as LOCK's, then WAIT last.
  argv.push(...lockArgv(keys[0]!, jid, { ttl, pxat, type, owner, meta }).slice(3));
  if (wait !== undefined) argv.push("WAIT", String(wholeMs("wait", wait, 1)));
  return argv;
}

/** The tokens of a LOCKALL reply, in key order, or null when refused. */
function tokens(reply: Reply): number[] | null {
  if (reply === null || reply === undefined) return null;
  if (!Array.isArray(reply)) throw new TypeError(`redis-unique: UNIQUE.LOCKALL replied ${String(reply)}, not an array of tokens`);
  return reply.map(int);
}

/** LOCKALL: one fencing token per key, in key order, or null when refused (or the wait ended). */
export function lockAll(keys: string[], jid: string, options?: LockAllOptions): Command<number[] | null> {
  return { argv: lockAllArgv(keys, jid, options), parse: tokens };
}

/**
 * UNLOCKALL: how many of the keys `jid` held and no longer does. With `tokens` (one per key,
 * in key order, as lockAll() returned them), a key is released only when its hold has its token.
 */
export function unlockAll(keys: string[], jid: string, tokens?: readonly number[]): Command<number> {
  checkKeys(keys);
  const argv = ["UNIQUE.UNLOCKALL", String(keys.length), ...keys, checkJid(jid)];
  if (tokens !== undefined) {
    if (!Array.isArray(tokens) || tokens.length !== keys.length) {
      throw new TypeError(`redis-unique: tokens must be one per key, in key order (${keys.length} keys, got ${Array.isArray(tokens) ? tokens.length : typeof tokens})`);
    }
    argv.push("TOKEN", ...tokens.map((t) => checkToken(t, "each token")));
  }
  return { argv, parse: int };
}
