import { randomUUID } from "node:crypto";
import { Client } from "./client.js";
import * as commands from "./commands.js";
import { AlreadyAcquiredError, LockLostError, TimeoutError } from "./errors.js";
import { Refresher, renewIntervalMs } from "./refresh.js";
import type { RedisClient, Transport } from "./transport.js";

/** What `onLockLost` is called with: `this` is the lock object, as in redis-semaphore. */
export type LockLostCallback = (this: Mutex | Semaphore | RWLock, error: LockLostError) => void;

export interface LockObjectOptions {
  /** The lease in ms, renewed every third of it while held (redis-semaphore's name). Default 10000. */
  lockTimeout?: number;
  /**
   * How long acquire() and tryAcquire() wait for the lock, natively on the server, in ms.
   * Default 10000; 0: a single attempt, no wait.
   */
  acquireTimeout?: number;
  /** How often the lease is renewed, in ms. Default a third of `lockTimeout`; 0: never (as redis-semaphore). */
  refreshInterval?: number;
  /** This holder's id (the jid). Default a random UUID. */
  identifier?: string;
  /** A random UUID followed by `-` and this, as the identifier (redis-semaphore's, deprecated there). */
  identifierSuffix?: string;
  /**
   * The lock is already held under `identifier` (taken by another process, e.g. a scheduler
   * that hands the job over): acquire() and tryAcquire() take over that hold, with its
   * fencing token, instead of taking a new one, and fail when it is not held.
   */
  acquiredExternally?: true;
  /** redis-semaphore's deprecated form of `{ identifier, acquiredExternally: true }`. */
  externallyAcquiredIdentifier?: string;
  /**
   * redis-semaphore's count of attempts, `retryInterval` apart: the wait is bounded by the
   * time those attempts take, `(acquireAttemptsLimit - 1) * retryInterval` ms (and always by
   * `acquireTimeout`). 1: a single attempt, no wait. Default Infinity: `acquireTimeout` alone.
   */
  acquireAttemptsLimit?: number;
  /**
   * redis-semaphore's pause between attempts (default 10 ms). Nothing polls here (a waiting
   * acquire is woken by the release itself, on the server), so it has no effect but the bound
   * `acquireAttemptsLimit` gives the wait.
   */
  retryInterval?: number;
  /** The worker process holding it, for reaping by owner. */
  owner?: string;
  /** Metadata kept with the holder. */
  meta?: Record<string, unknown>;
  /** The lock type. Default `lock`. */
  type?: string;
  /** A rate each acquire also needs (`{ limit, per, burst? }`, per in ms): "at most 3 at once and 50 a second". */
  rate?: commands.RateLimit;
  /**
   * This holder's group (a tenant id): waiters of several groups share the limit fairly, a
   * freed slot going to the waiting group that holds the fewest slots for its `weight`.
   */
  group?: string;
  /** The group's weight among the waiting groups, 1 to 1000 (default 1); needs `group`. */
  weight?: number;
  /** At most this many holders of this `group` at once on the key (besides the limit); needs `group`. */
  groupLimit?: number;
  /**
   * Called, with `this` the lock object, when a renewal finds the hold gone. Default (as
   * redis-semaphore's): throws the LockLostError, which, as whatever this callback throws,
   * surfaces as an unhandled promise rejection.
   */
  onLockLost?: LockLostCallback;
}

const KNOWN_OPTIONS = new Set([
  "lockTimeout", "acquireTimeout", "refreshInterval", "identifier", "identifierSuffix", "acquiredExternally",
  "externallyAcquiredIdentifier", "acquireAttemptsLimit", "retryInterval", "owner", "meta", "type", "rate", "group",
  "weight", "groupLimit", "onLockLost",
]);

/** redis-semaphore's timing options (its `TimeoutOptions`), every one accepted. */
export interface TimeoutOptions {
  lockTimeout?: number;
  acquireTimeout?: number;
  acquireAttemptsLimit?: number;
  retryInterval?: number;
  refreshInterval?: number;
}

/** redis-semaphore's defaults, the same values (`retryInterval` only bounds a limited count of attempts here). */
export const defaultTimeoutOptions = Object.freeze({
  lockTimeout: 10_000,
  acquireTimeout: 10_000,
  acquireAttemptsLimit: Number.POSITIVE_INFINITY,
  retryInterval: 10,
});

/**
 * How long an acquire waits, natively: `acquireTimeout`, bounded, when `acquireAttemptsLimit`
 * is finite, by the time redis-semaphore's attempts `retryInterval` apart would take (a grant
 * there can come at the last attempt, `(n - 1) * retryInterval` ms after the first).
 */
export function acquireWaitMs(options: TimeoutOptions): number {
  const { acquireAttemptsLimit: attempts, retryInterval = defaultTimeoutOptions.retryInterval } = options;
  const timeout = options.acquireTimeout ?? defaultTimeoutOptions.acquireTimeout;
  if (typeof retryInterval !== "number" || !Number.isFinite(retryInterval) || retryInterval < 0) {
    throw new RangeError(`redis-unique: retryInterval must be a number of ms of at least 0, got ${String(retryInterval)}`);
  }
  if (attempts === undefined || attempts === Number.POSITIVE_INFINITY) return timeout;
  if (typeof attempts !== "number" || !Number.isInteger(attempts) || attempts < 1) {
    throw new RangeError(
      `redis-unique: acquireAttemptsLimit must be a whole number of at least 1 (or Infinity), got ${String(attempts)}`,
    );
  }
  return Math.min(timeout, Math.ceil((attempts - 1) * retryInterval));
}

/** redis-semaphore's default: the error is thrown where nothing catches it. */
export function defaultOnLockLost(error: LockLostError): never {
  throw error;
}

function isAbortSignal(value: unknown): value is AbortSignal {
  return (
    typeof value === "object" && value !== null &&
    typeof (value as AbortSignal).aborted === "boolean" &&
    typeof (value as AbortSignal).addEventListener === "function"
  );
}

/** `acquire(signal)` as redis-semaphore, or `acquire({ signal })`. */
export function signalOf(arg: AbortSignal | { signal?: AbortSignal } | undefined): AbortSignal | undefined {
  if (arg === undefined || arg === null) return undefined;
  if (isAbortSignal(arg)) return arg;
  if (typeof arg === "object" && (arg.signal === undefined || isAbortSignal(arg.signal))) return arg.signal;
  throw new TypeError("redis-unique: acquire() takes an AbortSignal, or { signal }");
}

function checkOptions(options: LockObjectOptions): void {
  if (typeof options !== "object" || options === null) throw new TypeError("redis-unique: lock options must be an object");
  for (const name of Object.keys(options)) {
    if ((options as Record<string, unknown>)[name] === undefined) continue;
    if (!KNOWN_OPTIONS.has(name)) {
      throw new TypeError(`redis-unique: unknown lock option ${name} (known: ${[...KNOWN_OPTIONS].join(", ")})`);
    }
  }
  const { identifier, identifierSuffix, acquiredExternally, externallyAcquiredIdentifier } = options;
  if (identifier !== undefined && identifierSuffix !== undefined) {
    throw new TypeError("redis-unique: give identifier or identifierSuffix, not both (the suffix follows a random UUID)");
  }
  if (identifierSuffix !== undefined && (typeof identifierSuffix !== "string" || identifierSuffix === "")) {
    throw new TypeError("redis-unique: identifierSuffix must be a non-empty string");
  }
  if (acquiredExternally !== undefined && acquiredExternally !== true) {
    throw new TypeError("redis-unique: acquiredExternally must be true (or left out)");
  }
  if (acquiredExternally && identifier === undefined) {
    throw new TypeError("redis-unique: acquiredExternally needs the identifier of the hold to take over");
  }
  if (externallyAcquiredIdentifier !== undefined && (identifier !== undefined || acquiredExternally)) {
    throw new TypeError("redis-unique: use identifier with acquiredExternally: true, or externallyAcquiredIdentifier alone");
  }
  if (options.onLockLost !== undefined && typeof options.onLockLost !== "function") {
    throw new TypeError("redis-unique: onLockLost must be a function");
  }
}

// Lock objects over the same Redis client share one Client, and so its few wait
// connections: a Client per lock object would leave a connection behind each.
const shared = new WeakMap<object, Client>();

export function clientFor(redis: Client | RedisClient | Transport): Client {
  if (redis instanceof Client) return redis;
  let client = shared.get(redis);
  if (!client || client.isClosed) {
    client = new Client(redis);
    shared.set(redis, client);
  }
  return client;
}

/**
 * A lock that renews its own lease while held: at most `limit` holders of `key` at once
 * (Mutex: 1). Each acquire gets a fencing token; `await using` releases it.
 */
class LeasedLock {
  readonly identifier: string;
  readonly lockTimeout: number;
  readonly acquireTimeout: number;
  readonly refreshInterval: number;
  private refresher: Refresher | undefined;
  private _token: number | null = null;
  private sentAt = 0;
  private external: boolean;
  private readonly onLockLost: LockLostCallback;
  /** @internal The MODE of the next acquire (an RWLock's read or write), and of the hold once granted. */
  requestMode: commands.LockMode | undefined;
  /** @internal `this` of onLockLost (an RWLock gives itself). */
  lockObject: Mutex | Semaphore | RWLock;

  constructor(
    private readonly redis: Client | RedisClient | Transport,
    readonly key: string,
    readonly limit: number,
    private readonly options: LockObjectOptions = {},
    /** @internal What it is in its errors' messages, as redis-semaphore's (`Acquire mutex <key> timeout`). */
    readonly kind = "mutex",
  ) {
    this.lockObject = this as unknown as Mutex;
    checkOptions(options);
    commands.checkKey(key);
    commands.checkLimit(limit);
    const { identifier, identifierSuffix, externallyAcquiredIdentifier } = options;
    const id = identifier ?? externallyAcquiredIdentifier ?? (identifierSuffix ? `${randomUUID()}-${identifierSuffix}` : randomUUID());
    this.identifier = commands.checkJid(id);
    this.external = options.acquiredExternally === true || externallyAcquiredIdentifier !== undefined;
    this.lockTimeout = options.lockTimeout ?? 10_000;
    this.acquireTimeout = acquireWaitMs(options);
    this.refreshInterval = options.refreshInterval ?? renewIntervalMs(this.lockTimeout);
    this.onLockLost = options.onLockLost ?? defaultOnLockLost;
    // Checked now, so that a bad option fails at construction, not at the first acquire.
    commands.lockArgv(key, this.identifier, this.lockOptions());
    if (!Number.isSafeInteger(this.acquireTimeout) || this.acquireTimeout < 0) {
      throw new RangeError(`redis-unique: acquireTimeout must be a whole number of ms of at least 0, got ${this.acquireTimeout}`);
    }
    if (!Number.isSafeInteger(this.refreshInterval) || this.refreshInterval < 0) {
      throw new RangeError(
        `redis-unique: refreshInterval must be a whole number of ms (0: no renewals), got ${this.refreshInterval}`,
      );
    }
    clientFor(redis); // a wrong kind of client fails here, not at the first acquire
  }

  /**
   * The Client this lock object runs on: the one it was given, or the one shared by every
   * lock object over the same Redis client (made again if it was closed).
   */
  get client(): Client {
    return clientFor(this.redis);
  }

  /** The fencing token of the current hold (null when not held). */
  get token(): number | null {
    return this._token;
  }

  get isAcquired(): boolean {
    return this._token !== null;
  }

  private lockOptions(wait?: number): commands.LockOptions {
    const { owner, meta, type, rate, group, weight, groupLimit } = this.options;
    return { ttl: this.lockTimeout, limit: this.limit, owner, meta, type, rate, group, weight, groupLimit, mode: this.requestMode, wait };
  }

  /**
   * Waits natively (first come, first served) up to `acquireTimeout` ms for the lock, as
   * redis-semaphore's tryAcquire: true when taken, false when it stayed held. An abort of
   * the signal (`tryAcquire(signal)` or `tryAcquire({ signal })`) rejects with its reason.
   */
  async tryAcquire(signal?: AbortSignal | { signal?: AbortSignal }): Promise<boolean> {
    const abort = signalOf(signal);
    this.ensureFree();
    abort?.throwIfAborted();
    if (this.external) return this.takeOver();
    // With a wait connection idle, WAIT at once: the server grants a free lock as fast, and
    // a contended one costs a round trip less. Without one, a free lock needs none.
    if (this.acquireTimeout === 0 || this.client.idleWaitConnections === 0) {
      this.sentAt = Date.now();
      const now = await this.client.lock(this.key, this.identifier, this.lockOptions());
      if (this.took(now)) return true;
      if (this.acquireTimeout === 0) return false;
    }
    const waited = await this.client.waitLock(this.key, this.identifier, this.lockOptions(this.acquireTimeout), abort);
    this.sentAt = Date.now(); // a wait is spent before the grant: the lease starts at the reply, at the latest
    if (abort?.aborted) {
      // Granted in the instant of the abort: nobody wants that hold now.
      if (waited !== null) await this.client.unlock(this.key, this.identifier, waited).catch(() => {});
      throw abort.reason;
    }
    return this.took(waited);
  }

  /**
   * tryAcquire() that throws TimeoutError (a LockNotAcquiredError: `Acquire mutex <key>
   * timeout: the lock <key> is held by ...`, with the holders) when the lock stays held for
   * `acquireTimeout` ms, or the signal's reason when aborted.
   */
  async acquire(signal?: AbortSignal | { signal?: AbortSignal }): Promise<void> {
    if (await this.tryAcquire(signal)) return;
    throw new TimeoutError(this.key, await this.client.lockedBy(this.key).catch(() => []), this.kind);
  }

  /** Releases the hold (a no-op when not held; a hold taken elsewhere under `acquiredExternally` too). */
  async release(): Promise<void> {
    this.stopRefresh();
    if (this._token === null && !this.external) return;
    // The hold's own token when known (a fenced unlock: never a later hold of this identifier);
    // a hold taken elsewhere (acquiredExternally, not taken over) by its identifier.
    const token = this._token ?? undefined;
    this._token = null;
    this.external = false;
    await this.client.unlock(this.key, this.identifier, token);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.release();
  }

  /** Stops renewing the lease (the hold then ends with it, unless released first), as redis-semaphore's. */
  stopRefresh(): void {
    this.refresher?.stop();
    this.refresher = undefined;
  }

  /** How many renewals kept the current hold. */
  get renewals(): number {
    return this.refresher?.renewals ?? 0;
  }

  /** TYPE, OWNER or META changed for the current hold: sent with the next renewal, once. */
  update(changes: { type?: string; owner?: string; meta?: Record<string, unknown> }): void {
    if (!this.refresher) throw new LockLostError(this.key, this.identifier, "not held (or not renewed): nothing to update");
    commands.lockArgv(this.key, this.identifier, changes); // checked now
    this.refresher.update(changes);
  }

  private ensureFree(): void {
    if (this._token !== null) throw new AlreadyAcquiredError(this.key);
  }

  /** acquiredExternally: renews the hold `identifier` has, and keeps its token; false when it has none. */
  private async takeOver(): Promise<boolean> {
    const held = (await this.client.holders(this.key)).find((h) => h.jid === this.identifier);
    if (!held) return false;
    // An RWLock takes over a hold of the mode asked for only: a renewal with the other MODE
    // would downgrade a writer, or try to upgrade a reader.
    if (this.requestMode !== undefined && (held.mode ?? "shared") !== this.requestMode) return false;
    this.sentAt = Date.now();
    const token = await this.client.lock(this.key, this.identifier, this.lockOptions());
    if (token !== held.token) {
      // Its lease ended between the two calls: this is a new grant, not that hold.
      if (token !== null) await this.client.unlock(this.key, this.identifier, token).catch(() => {});
      return false;
    }
    this.external = false;
    return this.took(token);
  }

  /**
   * @internal A renewal with MODE `mode` now (an RWLock's downgrade or upgrade), never
   * waiting: true when the server kept this hold's token under the new mode, false when it
   * answered nil (an upgrade refused, the hold unchanged). Another token means the hold had
   * ended and this call took a new one: given up, and a LockLostError thrown.
   */
  async changeMode(mode: commands.LockMode): Promise<boolean> {
    const held = this._token;
    if (held === null) throw new LockLostError(this.key, this.identifier, "not held: no mode to change");
    const token = await this.client.lock(this.key, this.identifier, { ttl: this.lockTimeout, mode });
    if (token === held) {
      this.requestMode = mode;
      return true;
    }
    if (token === null) return false;
    this.forget();
    await this.client.unlock(this.key, this.identifier, token).catch(() => {});
    throw new LockLostError(this.key, this.identifier, "the hold had ended before the change of mode (the new grant was given up)");
  }

  /** @internal Forgets the hold without a call (it is known to be gone). */
  forget(): void {
    this.stopRefresh();
    this._token = null;
  }

  private took(token: number | null): boolean {
    if (token === null) return false;
    this._token = token;
    if (this.refreshInterval > 0) {
      this.refresher = new Refresher(this.client, {
        key: this.key, jid: this.identifier, token, leaseMs: this.lockTimeout, sentAt: this.sentAt,
        intervalMs: this.refreshInterval, kind: this.kind,
        onLost: (error) => {
          this.refresher = undefined;
          this._token = null;
          // Whatever onLockLost throws (by default the error itself) is left unhandled on
          // purpose, as redis-semaphore's.
          void Promise.resolve().then(() => this.onLockLost.call(this.lockObject, error));
        },
      }).start();
    }
    return true;
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
    super(redis, key, limit, options, "semaphore");
  }
}

export interface RWLockOptions extends LockObjectOptions {
  /** At most this many readers at once (default 0: no limit). A writer always holds alone. */
  limit?: number;
}

/**
 * A readers-writer lock on `key`, one holder per object (as a Mutex): `acquireRead()` shares
 * the key with other readers (up to `limit`), `acquireWrite()` holds it alone. A writer waits
 * for the readers holding it, and readers that come after a waiting writer queue behind it, so
 * neither side starves; the readers queued behind a writer are served together when it leaves.
 * The lease is renewed as a Mutex's, with the same options; `release()` ends either hold.
 *
 *     const rw = new RWLock(redis, "report:2024");
 *     await rw.acquireRead();  try { await read(); }  finally { await rw.releaseRead(); }
 *     await rw.acquireWrite(); try { await write(); } finally { await rw.releaseWrite(); }
 */
export class RWLock {
  private readonly lock: LeasedLock;

  constructor(redis: Client | RedisClient | Transport, readonly key: string, options: RWLockOptions = {}) {
    if (typeof options !== "object" || options === null) throw new TypeError("redis-unique: lock options must be an object");
    const { limit = 0, ...rest } = options;
    if (typeof limit !== "number" || !Number.isInteger(limit) || limit < 0) {
      throw new RangeError(`redis-unique: an RWLock's limit must be a whole number of readers (0: no limit), got ${String(limit)}`);
    }
    this.lock = new LeasedLock(redis, key, limit, rest, "rwlock");
    this.lock.lockObject = this;
  }

  /** At most this many readers at once (0: no limit). */
  get limit(): number {
    return this.lock.limit;
  }

  get identifier(): string {
    return this.lock.identifier;
  }

  get lockTimeout(): number {
    return this.lock.lockTimeout;
  }

  get acquireTimeout(): number {
    return this.lock.acquireTimeout;
  }

  get refreshInterval(): number {
    return this.lock.refreshInterval;
  }

  /** The Client this lock object runs on (shared by the lock objects over one Redis client). */
  get client(): Client {
    return this.lock.client;
  }

  /** The fencing token of the current hold (null when not held). */
  get token(): number | null {
    return this.lock.token;
  }

  get isAcquired(): boolean {
    return this.lock.isAcquired;
  }

  /** `"read"` or `"write"` while held, null otherwise. */
  get mode(): "read" | "write" | null {
    if (!this.lock.isAcquired) return null;
    return this.lock.requestMode === "exclusive" ? "write" : "read";
  }

  /** How many renewals kept the current hold. */
  get renewals(): number {
    return this.lock.renewals;
  }

  /** As Mutex.tryAcquire, as a reader: true when taken within `acquireTimeout`, false otherwise. */
  tryAcquireRead(signal?: AbortSignal | { signal?: AbortSignal }): Promise<boolean> {
    return this.take("shared", () => this.lock.tryAcquire(signal));
  }

  /** As Mutex.acquire, as a reader: LockNotAcquiredError when not taken within `acquireTimeout`. */
  acquireRead(signal?: AbortSignal | { signal?: AbortSignal }): Promise<void> {
    return this.take("shared", () => this.lock.acquire(signal));
  }

  /** As Mutex.tryAcquire, as the writer (alone). */
  tryAcquireWrite(signal?: AbortSignal | { signal?: AbortSignal }): Promise<boolean> {
    return this.take("exclusive", () => this.lock.tryAcquire(signal));
  }

  /** As Mutex.acquire, as the writer (alone). */
  acquireWrite(signal?: AbortSignal | { signal?: AbortSignal }): Promise<void> {
    return this.take("exclusive", () => this.lock.acquire(signal));
  }

  /** Ends a read hold (a no-op when not held; a TypeError when the hold is a write). */
  releaseRead(): Promise<void> {
    return this.releaseAs("read");
  }

  /** Ends the write hold (a no-op when not held; a TypeError when the hold is a read). */
  releaseWrite(): Promise<void> {
    return this.releaseAs("write");
  }

  /** Ends the hold, read or write (a no-op when not held). */
  release(): Promise<void> {
    return this.lock.release();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.release();
  }

  /**
   * The write hold becomes a read hold, with the same fencing token and without letting a
   * waiting writer in between; the readers waiting for the key are served at once.
   * LockLostError when the hold had ended.
   */
  async downgrade(): Promise<void> {
    if (this.mode !== "write") throw new TypeError("redis-unique: downgrade() needs a write hold");
    if (await this.lock.changeMode("shared")) return;
    this.lock.forget();
    throw new LockLostError(this.key, this.identifier, "another holder has it (the lease ran out, or it was reaped or deleted)");
  }

  /**
   * The read hold becomes the write hold, with the same fencing token, only when it is the
   * only holder: true then, false otherwise (the read hold unchanged). Never waits: two
   * readers waiting to upgrade would wait for each other forever. To wait, release the read
   * hold and acquireWrite().
   */
  async tryUpgrade(): Promise<boolean> {
    if (this.mode !== "read") throw new TypeError("redis-unique: tryUpgrade() needs a read hold");
    return this.lock.changeMode("exclusive");
  }

  /** Stops renewing the lease (the hold then ends with it, unless released first). */
  stopRefresh(): void {
    this.lock.stopRefresh();
  }

  /** TYPE, OWNER or META changed for the current hold: sent with the next renewal, once. */
  update(changes: { type?: string; owner?: string; meta?: Record<string, unknown> }): void {
    this.lock.update(changes);
  }

  private async take<T>(mode: commands.LockMode, acquire: () => Promise<T>): Promise<T> {
    if (this.lock.isAcquired) throw new AlreadyAcquiredError(this.key);
    this.lock.requestMode = mode;
    return acquire();
  }

  private async releaseAs(mode: "read" | "write"): Promise<void> {
    const held = this.mode;
    if (held !== null && held !== mode) {
      throw new TypeError(`redis-unique: this RWLock holds ${this.key} for ${held}: release${held === "read" ? "Read" : "Write"}() or release() it`);
    }
    await this.lock.release();
  }
}
