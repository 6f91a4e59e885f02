import { randomUUID } from "node:crypto";
import type { Client } from "./client.js";
import * as commands from "./commands.js";
import { AlreadyAcquiredError, LockLostError, TimeoutError } from "./errors.js";
import { acquireWaitMs, clientFor, defaultOnLockLost, signalOf } from "./locks.js";
import { Refresher, renewIntervalMs } from "./refresh.js";
import type { RedisClient, Transport } from "./transport.js";

/** What a MultiLock's `onLockLost` is called with: `this` is the MultiLock. */
export type MultiLockLostCallback = (this: MultiLock, error: LockLostError) => void;

export interface MultiLockOptions {
  /** The lease of every key in ms, renewed every third of it while held. Default 10000. */
  lockTimeout?: number;
  /** How long acquire() and tryAcquire() wait for every key at once, natively, in ms. Default 10000; 0: one attempt. */
  acquireTimeout?: number;
  /** How often the leases are renewed, in ms. Default a third of `lockTimeout`; 0: never. */
  refreshInterval?: number;
  /** This holder's id (the jid on every key). Default a random UUID. */
  identifier?: string;
  /** A random UUID followed by `-` and this, as the identifier. */
  identifierSuffix?: string;
  /** As a Mutex's: the wait bounded by `(acquireAttemptsLimit - 1) * retryInterval` ms; 1: a single attempt. */
  acquireAttemptsLimit?: number;
  /** As a Mutex's: no effect (nothing polls) but with a finite `acquireAttemptsLimit`. Default 10. */
  retryInterval?: number;
  /** The worker process holding it, for reaping by owner (on every key). */
  owner?: string;
  /** Metadata kept with the holder of every key. */
  meta?: Record<string, unknown>;
  /** The lock type of every key. Default `lock`. */
  type?: string;
  /**
   * Rates by key name (`{ "{api}:global": { limit: 50, per: 1000 } }`): an acquire also needs
   * each to allow it, and spends them only when every key grants.
   */
  rates?: Record<string, commands.RateLimit>;
  /** Called, with `this` the MultiLock, when a renewal finds a hold gone. Default: throws the LockLostError (unhandled). */
  onLockLost?: MultiLockLostCallback;
}

const KNOWN_OPTIONS = new Set([
  "lockTimeout", "acquireTimeout", "refreshInterval", "identifier", "identifierSuffix", "acquireAttemptsLimit",
  "retryInterval", "owner", "meta", "type", "rates", "onLockLost",
]);

const NOT_FOR_MULTI: Record<string, string> = {
  rate: "give rates by key name: rates: { [key]: { limit, per } }",
  group: "a MultiLock takes no group in this version: use a Semaphore with group for fair sharing on one key",
  weight: "a MultiLock takes no weight in this version (it goes with group)",
  groupLimit: "a MultiLock takes no groupLimit in this version: give the group's own key a limit instead",
  mode: "a MultiLock takes no mode in this version: use an RWLock on one key",
  acquiredExternally: "a MultiLock cannot take over holds taken elsewhere",
  externallyAcquiredIdentifier: "a MultiLock cannot take over holds taken elsewhere",
};

/**
 * Holds on several locks taken at once, each with its own limit, for one identifier: every
 * key or none (UNIQUE.LOCKALL). A waiting acquire holds nothing while it waits, so two
 * MultiLocks naming keys in any order never deadlock. Renewed together by the package's
 * one renewal loop; a loss of any key is the loss of the MultiLock. In a cluster, the keys
 * need one hash tag.
 *
 *     const lock = new MultiLock(redis, { "{api}:tenant:acme": 2, "{api}:global": 10 }, { lockTimeout: 30_000 });
 *     await lock.acquire();
 *     try { ... } finally { await lock.release(); }
 */
export class MultiLock {
  readonly keys: string[];
  readonly limits: number[];
  readonly identifier: string;
  readonly lockTimeout: number;
  readonly acquireTimeout: number;
  readonly refreshInterval: number;
  private readonly rates: Array<commands.RateLimit | undefined>;
  private readonly onLockLost: MultiLockLostCallback;
  private refresher: Refresher | undefined;
  private _tokens: number[] | null = null;
  private sentAt = 0;

  /**
   * `keys`: the key names (limit 1 each: a mutex on every key), or `{ key: limit, ... }` (0:
   * no limit), in the order of the tokens.
   */
  constructor(
    private readonly redis: Client | RedisClient | Transport,
    keys: string[] | Record<string, number>,
    private readonly options: MultiLockOptions = {},
  ) {
    if (typeof options !== "object" || options === null) throw new TypeError("redis-unique: MultiLock options must be an object");
    for (const [name, value] of Object.entries(options)) {
      if (value === undefined) continue;
      if (name in NOT_FOR_MULTI) throw new TypeError(`redis-unique: MultiLock has no option ${name}: ${NOT_FOR_MULTI[name]}`);
      if (!KNOWN_OPTIONS.has(name)) {
        throw new TypeError(`redis-unique: unknown MultiLock option ${name} (known: ${[...KNOWN_OPTIONS].join(", ")})`);
      }
    }
    if (Array.isArray(keys)) {
      this.keys = commands.checkKeys([...keys]);
      this.limits = this.keys.map(() => 1);
    } else if (keys !== null && typeof keys === "object") {
      this.keys = commands.checkKeys(Object.keys(keys));
      this.limits = Object.values(keys).map((l) => commands.checkLimit(l));
    } else {
      throw new TypeError("redis-unique: MultiLock takes an array of keys or { key: limit, ... }");
    }
    const { rates = {}, identifier, identifierSuffix } = options;
    if (rates === null || typeof rates !== "object") throw new TypeError("redis-unique: rates must be { [key]: { limit, per } }");
    const stray = Object.keys(rates).filter((k) => !this.keys.includes(k));
    if (stray.length) throw new RangeError(`redis-unique: rates name keys the MultiLock does not hold: ${stray.join(", ")}`);
    this.rates = this.keys.map((k) => rates[k]);
    if (identifier !== undefined && identifierSuffix !== undefined) {
      throw new TypeError("redis-unique: give identifier or identifierSuffix, not both (the suffix follows a random UUID)");
    }
    if (identifierSuffix !== undefined && (typeof identifierSuffix !== "string" || identifierSuffix === "")) {
      throw new TypeError("redis-unique: identifierSuffix must be a non-empty string");
    }
    if (options.onLockLost !== undefined && typeof options.onLockLost !== "function") {
      throw new TypeError("redis-unique: onLockLost must be a function");
    }
    this.identifier = commands.checkJid(identifier ?? (identifierSuffix ? `${randomUUID()}-${identifierSuffix}` : randomUUID()));
    this.lockTimeout = options.lockTimeout ?? 10_000;
    this.acquireTimeout = acquireWaitMs(options);
    this.refreshInterval = options.refreshInterval ?? renewIntervalMs(this.lockTimeout);
    this.onLockLost = options.onLockLost ?? defaultOnLockLost;
    commands.lockAllArgv(this.keys, this.identifier, this.lockOptions()); // a bad option fails now
    if (!Number.isSafeInteger(this.acquireTimeout) || this.acquireTimeout < 0) {
      throw new RangeError(`redis-unique: acquireTimeout must be a whole number of ms of at least 0, got ${this.acquireTimeout}`);
    }
    if (!Number.isSafeInteger(this.refreshInterval) || this.refreshInterval < 0) {
      throw new RangeError(`redis-unique: refreshInterval must be a whole number of ms (0: no renewals), got ${this.refreshInterval}`);
    }
    clientFor(redis);
  }

  /** The Client this lock runs on (shared by the lock objects over one Redis client). */
  get client(): Client {
    return clientFor(this.redis);
  }

  /** The fencing token of each key, in key order (null when not held). */
  get tokens(): number[] | null {
    return this._tokens && [...this._tokens];
  }

  get isAcquired(): boolean {
    return this._tokens !== null;
  }

  /** How many renewals kept the current holds. */
  get renewals(): number {
    return this.refresher?.renewals ?? 0;
  }

  private lockOptions(wait?: number): commands.LockAllOptions {
    const { owner, meta, type } = this.options;
    const rates = this.rates.some((r) => r !== undefined) ? this.rates : undefined;
    return { limits: this.limits, rates, ttl: this.lockTimeout, type, owner, meta, wait };
  }

  /**
   * Waits natively up to `acquireTimeout` ms until every key can grant at once: true when
   * taken, false when not. An abort of the signal rejects with its reason.
   */
  async tryAcquire(signal?: AbortSignal | { signal?: AbortSignal }): Promise<boolean> {
    const abort = signalOf(signal);
    if (this._tokens !== null) throw new AlreadyAcquiredError(this.keys.join(", "));
    abort?.throwIfAborted();
    if (this.acquireTimeout === 0 || this.client.idleWaitConnections === 0) {
      this.sentAt = Date.now();
      const now = await this.client.lockAll(this.keys, this.identifier, this.lockOptions());
      if (this.took(now)) return true;
      if (this.acquireTimeout === 0) return false;
    }
    const waited = await this.client.waitLockAll(this.keys, this.identifier, this.lockOptions(this.acquireTimeout), abort);
    this.sentAt = Date.now(); // a wait is spent before the grant: the leases start at the reply, at the latest
    if (abort?.aborted) {
      if (waited !== null) await this.client.unlockAll(this.keys, this.identifier, waited).catch(() => {});
      throw abort.reason;
    }
    return this.took(waited);
  }

  /** tryAcquire() that throws LockNotAcquiredError (with the holders of the keys) when not taken in time. */
  async acquire(signal?: AbortSignal | { signal?: AbortSignal }): Promise<void> {
    if (await this.tryAcquire(signal)) return;
    const holders = await Promise.all(this.keys.map((k) => this.client.lockedBy(k).catch(() => [] as string[])));
    throw new TimeoutError(this.keys.join(", "), [...new Set(holders.flat())], "multilock");
  }

  /** Releases every key (a no-op when not held). */
  async release(): Promise<void> {
    this.stopRefresh();
    if (this._tokens === null) return;
    const tokens = this._tokens;
    this._tokens = null;
    await this.client.unlockAll(this.keys, this.identifier, tokens); // by its tokens: never a later hold
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.release();
  }

  /** Stops renewing the leases (the holds then end with them, unless released first). */
  stopRefresh(): void {
    this.refresher?.stop();
    this.refresher = undefined;
  }

  private took(tokens: number[] | null): boolean {
    if (tokens === null) return false;
    this._tokens = tokens;
    if (this.refreshInterval > 0) {
      this.refresher = new Refresher(this.client, {
        keys: this.keys, tokens, jid: this.identifier, leaseMs: this.lockTimeout, sentAt: this.sentAt,
        intervalMs: this.refreshInterval, kind: "multilock",
        onLost: (error) => {
          this.refresher = undefined;
          this._tokens = null;
          void Promise.resolve().then(() => this.onLockLost.call(this, error));
        },
      }).start();
    }
    return true;
  }
}
