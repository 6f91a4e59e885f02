import * as commands from "./commands.js";
import type { Command, Holder, LockOptions, Metrics, ReapOptions } from "./commands.js";
import { fromReply, ModuleVersionMismatchError } from "./errors.js";
import { type RedisClient, type Reply, type Transport, transportFor } from "./transport.js";
import { decodeModuleVersion, loadedModuleVersion, moduleVersionCheck } from "./version.js";

// The Redis clients whose module passed the version check (or cannot be checked), so that
// the many Client objects (one per Mutex) made over one Redis client ask once.
const checked = new WeakSet<object>();

/**
 * The UNIQUE.* commands over an ioredis or node-redis client. Times are milliseconds;
 * every argument is checked before anything is sent (TypeError, RangeError); a refused
 * command is a CommandError with the server's code, and a server without the module a
 * ModuleNotLoadedError.
 */
export class Client {
  readonly transport: Transport;
  private readonly idle: Transport[] = [];

  private readonly redis: object;

  constructor(redis: RedisClient | Transport) {
    this.transport = transportFor(redis);
    this.redis = redis;
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
    return this.blocking(command);
  }

  /** Releases `jid`'s hold: true if it held the lock. */
  unlock(key: string, jid: string): Promise<boolean> {
    return this.run(commands.unlock(key, jid));
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

  /** How many clients wait for a slot of `key`. */
  waiters(key: string): Promise<number> {
    return this.run(commands.waiters(key));
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
   * Runs a blocking command on a connection of its own, kept for the next one. An abort
   * drops that connection (the server forgets a waiter that disconnects) and rejects
   * with the signal's reason.
   */
  async blocking<T>(command: Command<T>, signal?: AbortSignal): Promise<T> {
    signal?.throwIfAborted();
    await this.checkModuleVersion();
    const connection = this.idle.pop() ?? (await this.transport.duplicate());
    const onAbort = () => connection.destroy();
    signal?.addEventListener("abort", onAbort, { once: true });
    try {
      const reply = await connection.send(command.argv);
      signal?.removeEventListener("abort", onAbort);
      if (signal?.aborted) connection.destroy();
      else this.idle.push(connection);
      return command.parse(reply);
    } catch (err) {
      connection.destroy();
      if (signal?.aborted) throw signal.reason;
      throw fromReply(err);
    } finally {
      signal?.removeEventListener("abort", onAbort);
    }
  }

  /** Closes the connections this client opened for waits (not the one it was given). */
  async close(): Promise<void> {
    await Promise.all(this.idle.splice(0).map((c) => c.close().catch(() => {})));
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

  unlock(key: string, jid: string): this {
    return this.add(commands.unlock(key, jid));
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

  waiters(key: string): this {
    return this.add(commands.waiters(key));
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
