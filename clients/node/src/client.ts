import * as commands from "./commands.js";
import type { Command, GroupWaiters, Holder, LockAllOptions, LockOptions, Metrics, ReapOptions } from "./commands.js";
import { fromReply, ModuleVersionMismatchError, UniqueError } from "./errors.js";
import { type RedisClient, type Reply, type Transport, transportFor } from "./transport.js";
import { withFunctions } from "./functions.js";
import { decodeModuleVersion, loadedModuleVersion, moduleVersionCheck } from "./version.js";

// The Redis clients whose module passed the version check (or cannot be checked), so that
// the many Client objects (one per Mutex) made over one Redis client ask once.
const checked = new WeakSet<object>();

/** How a Client keeps the connections its waits block on. */
export interface ClientOptions {
  /**
   * At most this many connections of its own for waits at once (default 16): a wait blocks
   * a connection on the server, so each one in progress needs its own. Waits beyond it
   * queue here, first come first served, for the next connection given back.
   */
  maxWaitConnections?: number;
  /** A wait connection unused for this many ms is closed (default 5000). */
  idleTimeout?: number;
}

interface Idle {
  connection: Transport;
  timer: NodeJS.Timeout;
}

interface Queued {
  deadline: number;
  resolve(connection: Transport | null): void;
  reject(error: unknown): void;
}

/**
 * The UNIQUE.* commands over an ioredis or node-redis client. Times are milliseconds;
 * every argument is checked before anything is sent (TypeError, RangeError); a refused
 * command is a CommandError with the server's code, and a server without the module a
 * ModuleNotLoadedError.
 *
 * Waits (`wait`, a Mutex's acquire) run on a small pool of connections duplicated from
 * yours, at most `maxWaitConnections`, each closed after `idleTimeout` unused, and all of
 * them when your connection ends (quit, close) or on close(): nothing is left open behind.
 */
export class Client {
  readonly transport: Transport;
  readonly maxWaitConnections: number;
  readonly idleTimeout: number;
  private readonly idle: Idle[] = [];
  private readonly busy = new Set<Transport>();
  private readonly queue: Queued[] = [];
  private opening = 0;
  private closed = false;
  private drainedBy: Error | undefined;
  private readonly unsubscribe: () => void;
  private readonly redis: object;

  constructor(redis: RedisClient | Transport, options: ClientOptions = {}) {
    const given = transportFor(redis);
    // a Redis client: the module, or the Functions library where it is absent (functions.ts)
    this.transport = given === redis ? given : withFunctions(given, redis);
    this.redis = redis;
    const { maxWaitConnections = 16, idleTimeout = 5_000, ...unknown } = options;
    const extra = Object.keys(unknown);
    if (extra.length) {
      throw new TypeError(`redis-unique: unknown Client option ${extra.join(", ")} (known: maxWaitConnections, idleTimeout)`);
    }
    if (!Number.isInteger(maxWaitConnections) || maxWaitConnections < 1) {
      throw new RangeError(`redis-unique: maxWaitConnections must be a whole number of at least 1, got ${maxWaitConnections}`);
    }
    if (!Number.isInteger(idleTimeout) || idleTimeout < 0) {
      throw new RangeError(`redis-unique: idleTimeout must be a whole number of ms of at least 0, got ${idleTimeout}`);
    }
    this.maxWaitConnections = maxWaitConnections;
    this.idleTimeout = idleTimeout;
    // When your connection ends, so do the ones duplicated from it (a process that quits
    // its client then exits by itself); the Client stays usable if you connect again.
    this.unsubscribe = this.transport.onEnd?.(() => this.drain(new Error("redis-unique: the Redis connection ended during the wait"))) ?? (() => {});
  }

  /** True after close(). */
  get isClosed(): boolean {
    return this.closed;
  }

  /** How many wait connections are open and unused now. */
  get idleWaitConnections(): number {
    return this.idle.length;
  }

  /** How many connections this client holds open for waits now (busy and idle). */
  get waitConnections(): number {
    return this.busy.size + this.idle.length + this.opening;
  }

  /**
   * Throws ModuleVersionMismatchError, before the first command on this Redis client, when
   * its module is of another major.minor than this package (see version.ts).
   */
  async checkModuleVersion(): Promise<void> {
    if (checked.has(this.redis)) return;
    let reply: Reply;
    try {
      reply = await this.transport.send(["MODULE", "LIST"]);
    } catch (err) {
      const code = err instanceof Error ? /^[A-Z][A-Z_]+(?=\s|$)/.exec(err.message)?.[0] : undefined;
      if (code === undefined) throw err; // a connection error: the client's own
      checked.add(this.redis); // MODULE LIST refused (an ACL): nothing to compare
      return;
    }
    const ver = loadedModuleVersion(reply);
    if (ver !== null) {
      const [major, minor] = moduleVersionCheck.builtFor.split(".").map(Number);
      if (Math.floor(ver / 10000) !== major || Math.floor(ver / 100) % 100 !== minor) {
        throw new ModuleVersionMismatchError(decodeModuleVersion(ver), moduleVersionCheck.builtFor);
      }
    }
    checked.add(this.redis);
  }

  /** Runs one command of `commands`. */
  async run<T>(command: Command<T>): Promise<T> {
    await this.checkModuleVersion();
    let reply: Reply;
    try {
      reply = await this.transport.send(command.argv);
    } catch (err) {
      throw fromReply(err);
    }
    return command.parse(reply);
  }

  /**
   * Takes or renews a hold on `key` for `jid`: the fencing token, or null when denied.
   * With `wait`, a denied call blocks up to `wait` ms on a connection of its own (so
   * this client's connection stays free) and is served first come, first served.
   */
  async lock(key: string, jid: string, options: LockOptions = {}): Promise<number | null> {
    const command = commands.lock(key, jid, options);
    if (options.wait === undefined) return this.run(command);
    return this.waitLock(key, jid, options);
  }

  /**
   * UNIQUE.LOCK ... WAIT on a wait connection: `options.wait` counts from now, the time
   * queued here for a connection included. With `signal`, an abort ends the wait at once.
   */
  async waitLock(key: string, jid: string, options: LockOptions, signal?: AbortSignal): Promise<number | null> {
    commands.lock(key, jid, options); // every option checked before waiting for anything
    await this.checkModuleVersion();
    const deadline = Date.now() + (options.wait ?? 0);
    return this.withConnection(signal, deadline, (connection) => {
      if (connection === null) return this.run(commands.lock(key, jid, { ...options, wait: undefined }));
      const wait = Math.max(1, deadline - Date.now());
      return this.send(connection, commands.lock(key, jid, { ...options, wait }), signal);
    });
  }

  /**
   * Takes or renews a hold on every key of `keys` for `jid` at once, or on none: one fencing
   * token per key, in key order, or null when refused. Each key has its own limit
   * (`limits`, default 1 each) and rate (`rates`, spent only when every key grants). With
   * `wait`, a refused call blocks up to `wait` ms on a connection of its own, holding
   * nothing meanwhile (so two callers naming keys in any order never deadlock). In a
   * cluster, the keys need one hash tag (`{api}:tenant:acme`, `{api}:global`).
   */
  async lockAll(keys: string[], jid: string, options: LockAllOptions = {}): Promise<number[] | null> {
    const command = commands.lockAll(keys, jid, options);
    if (options.wait === undefined) return this.run(command);
    return this.waitLockAll(keys, jid, options);
  }

  /** UNIQUE.LOCKALL ... WAIT on a wait connection, as waitLock(); an abort ends the wait at once. */
  async waitLockAll(keys: string[], jid: string, options: LockAllOptions, signal?: AbortSignal): Promise<number[] | null> {
    commands.lockAll(keys, jid, options); // every option checked before waiting for anything
    await this.checkModuleVersion();
    const deadline = Date.now() + (options.wait ?? 0);
    return this.withConnection(signal, deadline, (connection) => {
      if (connection === null) return this.run(commands.lockAll(keys, jid, { ...options, wait: undefined }));
      const wait = Math.max(1, deadline - Date.now());
      return this.send(connection, commands.lockAll(keys, jid, { ...options, wait }), signal);
    });
  }

  /** Releases `jid`'s holds of every key of `keys`: how many it held. */
  unlockAll(keys: string[], jid: string, tokens?: readonly number[]): Promise<number> {
    return this.run(commands.unlockAll(keys, jid, tokens));
  }

  /** Releases `jid`'s hold: true if it held the lock. */
  unlock(key: string, jid: string, token?: number): Promise<boolean> {
    return this.run(commands.unlock(key, jid, token));
  }

  /** The jids holding `key`, oldest grant first. */
  lockedBy(key: string): Promise<string[]> {
    return this.run(commands.lockedBy(key));
  }

  /** Every live holder of `key`, with token, lease (unix ms), type, owner and META. */
  holders(key: string): Promise<Holder[]> {
    return this.run(commands.holders(key));
  }

  /** UNIQUE.RATE: the key's rate state (what `lock(..., { rate })` spent), or null. */
  rate(key: string): Promise<commands.RateState | null> {
    return this.run(commands.rate(key));
  }

  /**
   * How many clients wait for a slot of `key`; with `{ groups: true }`, per group that waits
   * or holds: `[{ group, waiting, holding }]` (group null for those without one, first).
   */
  waiters(key: string, options?: { groups?: false }): Promise<number>;
  waiters(key: string, options: { groups: true }): Promise<GroupWaiters[]>;
  waiters(key: string, options: { groups?: boolean } = {}): Promise<number | GroupWaiters[]> {
    return options.groups ? this.run(commands.waitersByGroup(key)) : this.run(commands.waiters(key));
  }

  /**
   * REAP to the end of the cursor: removes every ended lease and, with `owner`, every
   * holder of that owner. Returns how many holders were removed. Node-local: in a cluster,
   * run it on each primary.
   */
  async reap(options: ReapOptions = {}): Promise<number> {
    let cursor = "0";
    let removed = 0;
    do {
      const [next, n] = await this.run(commands.reapStep(cursor, options));
      cursor = next;
      removed += n;
    } while (cursor !== "0");
    return removed;
  }

  /** Counters per lock type and in total, and the gauges (`minutes`: the last n minutes). */
  metrics(options: { minutes?: number } = {}): Promise<Metrics> {
    return this.run(commands.metrics(options));
  }

  /** Several calls in one round trip: `client.pipeline().lock(...).unlock(...).exec()`. */
  pipeline(): Batch {
    return new Batch(this.transport, false, () => this.checkModuleVersion());
  }

  /** Several calls in one MULTI/EXEC transaction. */
  multi(): Batch {
    return new Batch(this.transport, true, () => this.checkModuleVersion());
  }

  /**
   * Runs a blocking command on a wait connection. An abort drops that connection (the
   * server forgets a waiter that disconnects) and rejects with the signal's reason.
   */
  async blocking<T>(command: Command<T>, signal?: AbortSignal): Promise<T> {
    await this.checkModuleVersion();
    return this.withConnection(signal, Infinity, (connection) => this.send(connection!, command, signal));
  }

  /** Closes the connections this client opened for waits (not the one it was given); a wait in progress rejects. */
  async close(): Promise<void> {
    this.closed = true;
    this.unsubscribe();
    await this.drain(new Error("redis-unique: the Client was closed during the wait"));
  }

  private async withConnection<T>(
    signal: AbortSignal | undefined,
    deadline: number,
    use: (connection: Transport | null) => Promise<T>,
  ): Promise<T> {
    signal?.throwIfAborted();
    const connection = await this.take(signal, deadline);
    if (connection === null) return use(null);
    let healthy = false;
    try {
      const result = await use(connection);
      healthy = !signal?.aborted;
      return result;
    } catch (err) {
      // An error reply (WRONGTYPE...) leaves the connection as good as it was.
      healthy = err instanceof UniqueError && !signal?.aborted;
      // Dropped by close() or by the end of your connection: say so, not "Connection is closed".
      if (!this.busy.has(connection) && this.drainedBy && !signal?.aborted) {
        throw new Error(this.drainedBy.message, { cause: err });
      }
      throw err;
    } finally {
      this.giveBack(connection, healthy);
    }
  }

  private async send<T>(connection: Transport, command: Command<T>, signal?: AbortSignal): Promise<T> {
    const onAbort = () => connection.destroy();
    signal?.addEventListener("abort", onAbort, { once: true });
    try {
      signal?.throwIfAborted();
      const reply = await connection.send(command.argv);
      return command.parse(reply);
    } catch (err) {
      if (signal?.aborted) throw signal.reason;
      throw fromReply(err);
    } finally {
      signal?.removeEventListener("abort", onAbort);
    }
  }

  /** A wait connection: an idle one, a new one under the bound, or the next given back (null at `deadline`). */
  private async take(signal: AbortSignal | undefined, deadline: number): Promise<Transport | null> {
    if (this.closed) throw new Error("redis-unique: this Client is closed");
    const idle = this.idle.pop();
    if (idle) {
      clearTimeout(idle.timer);
      this.busy.add(idle.connection);
      return idle.connection;
    }
    if (this.waitConnections < this.maxWaitConnections) return this.open();
    return new Promise<Transport | null>((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      const entry: Queued = {
        deadline,
        resolve: (c) => {
          settle();
          resolve(c);
        },
        reject: (e) => {
          settle();
          reject(e);
        },
      };
      const onAbort = () => entry.reject(signal!.reason);
      const settle = () => {
        const i = this.queue.indexOf(entry);
        if (i >= 0) this.queue.splice(i, 1);
        if (timer) clearTimeout(timer);
        signal?.removeEventListener("abort", onAbort);
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      if (Number.isFinite(deadline)) timer = setTimeout(() => entry.resolve(null), Math.max(0, deadline - Date.now()));
      this.queue.push(entry);
    });
  }

  private async open(): Promise<Transport> {
    this.opening++;
    let connection: Transport;
    try {
      connection = await this.transport.duplicate();
    } catch (err) {
      throw fromReply(err);
    } finally {
      this.opening--;
    }
    if (this.closed) {
      connection.destroy();
      throw new Error("redis-unique: this Client is closed");
    }
    this.busy.add(connection);
    return connection;
  }

  private giveBack(connection: Transport, healthy: boolean): void {
    if (!this.busy.delete(connection)) return; // drained meanwhile
    if (!healthy || this.closed) {
      connection.destroy();
      this.serveQueue();
      return;
    }
    const next = this.queue.shift();
    if (next) {
      this.busy.add(connection);
      next.resolve(connection);
      return;
    }
    const timer = setTimeout(() => {
      const i = this.idle.findIndex((e) => e.connection === connection);
      if (i >= 0) this.idle.splice(i, 1);
      connection.close().catch(() => connection.destroy());
    }, this.idleTimeout);
    timer.unref(); // an idle wait connection never keeps the process alive by its timer
    this.idle.push({ connection, timer });
  }

  /** A queued wait gets a new connection when one was dropped. */
  private serveQueue(): void {
    while (this.queue.length && this.waitConnections < this.maxWaitConnections) {
      const next = this.queue.shift()!;
      this.open().then(next.resolve, next.reject);
    }
  }

  /** Closes every wait connection: the idle ones now, the busy ones at once (their waits reject). */
  private async drain(reason: Error): Promise<void> {
    this.drainedBy = reason;
    for (const q of this.queue.splice(0)) q.reject(reason);
    for (const c of this.busy) c.destroy();
    this.busy.clear();
    const idle = this.idle.splice(0);
    await Promise.all(
      idle.map(({ connection, timer }) => {
        clearTimeout(timer);
        return connection.close().catch(() => connection.destroy());
      }),
    );
  }
}

/** A pipeline or a transaction of UNIQUE.* calls, sent by exec(). */
export class Batch {
  private readonly queued: Command<unknown>[] = [];

  constructor(
    private readonly transport: Transport,
    private readonly atomic: boolean,
    private readonly before: () => Promise<void> = async () => {},
  ) {}

  private add(command: Command<unknown>): this {
    this.queued.push(command);
    return this;
  }

  lock(key: string, jid: string, options: Omit<LockOptions, "wait"> = {}): this {
    if ((options as LockOptions).wait !== undefined) {
      throw new TypeError("redis-unique: wait cannot be used in a pipeline or transaction (nothing blocks there)");
    }
    return this.add(commands.lock(key, jid, options));
  }

  unlock(key: string, jid: string, token?: number): this {
    return this.add(commands.unlock(key, jid, token));
  }

  lockAll(keys: string[], jid: string, options: Omit<LockAllOptions, "wait"> = {}): this {
    if ((options as LockAllOptions).wait !== undefined) {
      throw new TypeError("redis-unique: wait cannot be used in a pipeline or transaction (nothing blocks there)");
    }
    return this.add(commands.lockAll(keys, jid, options));
  }

  unlockAll(keys: string[], jid: string, tokens?: readonly number[]): this {
    return this.add(commands.unlockAll(keys, jid, tokens));
  }

  lockedBy(key: string): this {
    return this.add(commands.lockedBy(key));
  }

  holders(key: string): this {
    return this.add(commands.holders(key));
  }

  rate(key: string): this {
    return this.add(commands.rate(key));
  }

  /** WAITERS, or with `{ groups: true }` WAITERS GROUPS (as Client.waiters). */
  waiters(key: string, options: { groups?: boolean } = {}): this {
    return this.add(options.groups ? commands.waitersByGroup(key) : commands.waiters(key));
  }

  /** Any other command, sent as is (its reply returned as the client gives it). */
  command(argv: string[]): this {
    return this.add({ argv, parse: (r) => r });
  }

  /** Sends every call; each result in order, or the error of its call (not thrown). */
  async exec(): Promise<unknown[]> {
    await this.before();
    let replies: Array<Reply | Error>;
    try {
      replies = await this.transport.batch(
        this.queued.map((c) => c.argv),
        this.atomic,
      );
    } catch (err) {
      throw fromReply(err);
    }
    return replies.map((reply, i) => (reply instanceof Error ? fromReply(reply) : this.queued[i]!.parse(reply)));
  }
}
