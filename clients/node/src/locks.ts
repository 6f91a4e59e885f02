import { randomUUID } from "node:crypto";
import { Client } from "./client.js";
import * as commands from "./commands.js";
import { AlreadyAcquiredError, LockLostError, LockNotAcquiredError } from "./errors.js";
import type { RedisClient, Transport } from "./transport.js";

export interface LockObjectOptions {
  /** The lease in ms, renewed every third of it while held (redis-semaphore's name). Default 10000. */
  lockTimeout?: number;
  /** How long acquire() waits for the lock, natively on the server, in ms. Default 10000. */
  acquireTimeout?: number;
  /** How often the lease is renewed, in ms. Default a third of `lockTimeout`. */
  refreshInterval?: number;
  /** This holder's id (the jid). Default a random UUID. */
  identifier?: string;
  /** The worker process holding it, for reaping by owner. */
  owner?: string;
  /** Metadata kept with the holder. */
  meta?: Record<string, unknown>;
  /** The lock type. Default `lock`. */
  type?: string;
  /** A rate each acquire also needs (`{ limit, per, burst? }`, per in ms): "at most 3 at once and 50 a second". */
  rate?: commands.RateLimit;
  /** Called when the lease could not be renewed: the lock is no longer held. Default: throws it unhandled. */
  onLockLost?: (error: LockLostError) => void;
}

/**
 * A lock that renews its own lease while held: at most `limit` holders of `key` at once
 * (Mutex: 1). Each acquire gets a fencing token; `await using` releases it.
 */
class LeasedLock {
  readonly client: Client;
  readonly identifier: string;
  readonly lockTimeout: number;
  readonly acquireTimeout: number;
  readonly refreshInterval: number;
  private timer: NodeJS.Timeout | undefined;
  private _token: number | null = null;
  private expiresAt = 0;
  private refreshing = false;

  constructor(
    redis: Client | RedisClient | Transport,
    readonly key: string,
    readonly limit: number,
    private readonly options: LockObjectOptions = {},
  ) {
    this.client = redis instanceof Client ? redis : new Client(redis);
    commands.checkKey(key);
    commands.checkLimit(limit);
    this.identifier = commands.checkJid(options.identifier ?? randomUUID());
    this.lockTimeout = options.lockTimeout ?? 10_000;
    this.acquireTimeout = options.acquireTimeout ?? 10_000;
    this.refreshInterval = options.refreshInterval ?? Math.max(1, Math.floor(this.lockTimeout / 3));
    // Checked now, so that a bad option fails at construction, not at the first acquire.
    commands.lockArgv(key, this.identifier, this.lockOptions());
    if (!Number.isInteger(this.refreshInterval) || this.refreshInterval < 1) {
      throw new RangeError(`redis-unique: refreshInterval must be a whole number of ms of at least 1, got ${this.refreshInterval}`);
    }
  }

  /** The fencing token of the current hold (null when not held). */
  get token(): number | null {
    return this._token;
  }

  get isAcquired(): boolean {
    return this._token !== null;
  }

  private lockOptions(wait?: number) {
    const { owner, meta, type, rate } = this.options;
    return { ttl: this.lockTimeout, limit: this.limit, owner, meta, type, rate, wait };
  }

  /** Takes the lock at once, or returns false. */
  async tryAcquire(): Promise<boolean> {
    this.ensureFree();
    return this.took(await this.client.lock(this.key, this.identifier, this.lockOptions()));
  }

  /**
   * Waits natively (first come, first served) up to `acquireTimeout` ms; throws
   * LockNotAcquiredError when it stays held, or the signal's reason when aborted.
   */
  async acquire(options: { signal?: AbortSignal } = {}): Promise<void> {
    this.ensureFree();
    options.signal?.throwIfAborted();
    const now = await this.client.lock(this.key, this.identifier, this.lockOptions());
    if (this.took(now)) return;
    const waited = await this.client.blocking(
      commands.lock(this.key, this.identifier, this.lockOptions(this.acquireTimeout)),
      options.signal,
    );
    if (options.signal?.aborted) {
      // Granted in the instant of the abort: nobody wants that hold now.
      if (waited !== null) await this.client.unlock(this.key, this.identifier).catch(() => {});
      throw options.signal.reason;
    }
    if (this.took(waited)) return;
    throw new LockNotAcquiredError(this.key, await this.client.lockedBy(this.key).catch(() => []));
  }

  /** Releases the hold (a no-op when not held). */
  async release(): Promise<void> {
    this.stopRefresh();
    if (this._token === null) return;
    this._token = null;
    await this.client.unlock(this.key, this.identifier);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.release();
  }

  private ensureFree(): void {
    if (this._token !== null) throw new AlreadyAcquiredError(this.key);
  }

  private took(token: number | null): boolean {
    if (token === null) return false;
    this._token = token;
    this.expiresAt = Date.now() + this.lockTimeout;
    this.timer = setInterval(() => void this.refresh(), this.refreshInterval);
    this.timer.unref(); // a held lock never keeps the process alive
    return true;
  }

  private stopRefresh(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }

  private async refresh(): Promise<void> {
    if (this.refreshing || this._token === null) return;
    this.refreshing = true;
    try {
      const token = await this.client.lock(this.key, this.identifier, this.lockOptions());
      if (this._token === null) return; // released meanwhile
      if (token === this._token) {
        this.expiresAt = Date.now() + this.lockTimeout;
        return;
      }
      if (token !== null) {
        // A new grant, not a renewal: the old hold had ended, and another job may
        // have had the lock in between. The old token fenced that time; give it up.
        await this.client.unlock(this.key, this.identifier).catch(() => {});
      }
      this.lost();
    } catch {
      // A connection problem: try again at the next tick, while the lease lasts.
      if (this._token !== null && Date.now() >= this.expiresAt) this.lost();
    } finally {
      this.refreshing = false;
    }
  }

  private lost(): void {
    this.stopRefresh();
    this._token = null;
    const error = new LockLostError(this.key, this.identifier);
    if (this.options.onLockLost) this.options.onLockLost(error);
    else
      queueMicrotask(() => {
        throw error;
      });
  }
}

/** At most one holder of `key` at a time. */
export class Mutex extends LeasedLock {
  constructor(redis: Client | RedisClient | Transport, key: string, options: LockObjectOptions = {}) {
    super(redis, key, 1, options);
  }
}

/** At most `limit` holders of `key` at a time. */
export class Semaphore extends LeasedLock {
  constructor(redis: Client | RedisClient | Transport, key: string, limit: number, options: LockObjectOptions = {}) {
    if (typeof limit !== "number" || !Number.isInteger(limit) || limit < 1) {
      throw new RangeError(`redis-unique: a Semaphore's limit must be a whole number of at least 1, got ${String(limit)}`);
    }
    super(redis, key, limit, options);
  }
}
