/**
 * The one seam between this package and a Redis client: ioredis or node-redis (v4 and later).
 * Everything above it sends argv arrays of strings and reads plain replies.
 */
export type Reply = null | number | string | Buffer | Reply[] | { [key: string]: Reply } | Map<unknown, unknown>;

export interface Transport {
  /** Sends one command. */
  send(argv: string[]): Promise<Reply>;
  /** Sends several in one round trip (`atomic`: inside MULTI/EXEC); an error reply is an Error in its place. */
  batch(commands: string[][], atomic: boolean): Promise<Array<Reply | Error>>;
  /** A new connection to the same server, for a call that blocks (WAIT). */
  duplicate(): Promise<Transport>;
  /** Closes a connection made by duplicate(). */
  close(): Promise<void>;
  /** Drops the connection at once, a command in flight too (a blocked WAIT: the server forgets that waiter). */
  destroy(): void;
  /**
   * Calls `listener` once this connection has ended for good (quit, close, disconnect), so
   * that what was duplicated from it can be closed with it. Optional: a Client over a
   * transport without it closes its wait connections on close() and when idle.
   */
  onEnd?(listener: () => void): () => void;
}

type Emitter = {
  on?(event: string, listener: (...args: unknown[]) => void): unknown;
  once?(event: string, listener: (...args: unknown[]) => void): unknown;
  off?(event: string, listener: (...args: unknown[]) => void): unknown;
  removeListener?(event: string, listener: (...args: unknown[]) => void): unknown;
};

// One "end" listener per Redis client, however many Clients and locks use it (a listener
// per lock object would trip Node's MaxListenersExceededWarning).
const endListeners = new WeakMap<object, Set<() => void>>();

function onEndOf(client: object): (listener: () => void) => () => void {
  return (listener) => {
    let set = endListeners.get(client);
    if (!set) {
      const emitter = client as Emitter;
      if (typeof emitter.on !== "function") return () => {};
      const listeners = new Set<() => void>();
      set = listeners;
      endListeners.set(client, listeners);
      emitter.on("end", () => {
        for (const l of [...listeners]) l();
      });
    }
    set.add(listener);
    return () => void set!.delete(listener);
  };
}

/** Errors of a wait connection reach the waiting call as its rejection; this keeps them off the 'error' event. */
function quiet(client: object): void {
  (client as Emitter).on?.("error", () => {});
}

/** An ioredis client (Redis or Cluster): what this package uses of it. */
export interface IoRedisLike {
  call(command: string, ...args: string[]): Promise<unknown>;
  pipeline(): { call(command: string, ...args: string[]): unknown; exec(): Promise<Array<[Error | null, unknown]> | null> };
  multi(): { call(command: string, ...args: string[]): unknown; exec(): Promise<Array<[Error | null, unknown]> | null> };
  duplicate(): IoRedisLike;
  quit(): Promise<unknown>;
  disconnect(): void;
  /** `wait` (lazyConnect), `connecting`, `ready`, `end`... */
  status?: string;
  connect?(): Promise<unknown>;
}

/** A node-redis client (v4 and later): what this package uses of it. */
export interface NodeRedisLike {
  sendCommand(argv: string[]): Promise<unknown>;
  multi(): { addCommand(argv: string[]): unknown; exec(): Promise<unknown[]> };
  duplicate(): NodeRedisLike;
  connect(): Promise<unknown>;
  isOpen?: boolean;
  quit?(): Promise<unknown>;
  close?(): Promise<unknown>;
  destroy?(): void;
  disconnect?(): Promise<unknown> | void;
}

export type RedisClient = IoRedisLike | NodeRedisLike;

function isIoRedis(client: RedisClient): client is IoRedisLike {
  return typeof (client as IoRedisLike).call === "function" && typeof (client as IoRedisLike).pipeline === "function";
}

function isNodeRedis(client: RedisClient): client is NodeRedisLike {
  return typeof (client as NodeRedisLike).sendCommand === "function";
}

class IoRedisTransport implements Transport {
  constructor(private readonly client: IoRedisLike) {}

  send(argv: string[]): Promise<Reply> {
    const [name, ...args] = argv;
    return this.client.call(name!, ...args) as Promise<Reply>;
  }

  async batch(commands: string[][], atomic: boolean): Promise<Array<Reply | Error>> {
    const pipe = atomic ? this.client.multi() : this.client.pipeline();
    for (const [name, ...args] of commands) pipe.call(name!, ...args);
    const results = (await pipe.exec()) ?? [];
    return results.map(([err, value]) => err ?? (value as Reply));
  }

  async duplicate(): Promise<Transport> {
    const copy = this.client.duplicate();
    quiet(copy);
    // Ready before the first command: with enableOfflineQueue: false, ioredis refuses a
    // command sent while the new connection still connects; with lazyConnect it never starts.
    await ioRedisReady(copy);
    return new IoRedisTransport(copy);
  }

  onEnd(listener: () => void): () => void {
    return onEndOf(this.client)(listener);
  }

  async close(): Promise<void> {
    await this.client.quit();
  }

  destroy(): void {
    this.client.disconnect();
  }
}

class NodeRedisTransport implements Transport {
  constructor(private readonly client: NodeRedisLike) {}

  send(argv: string[]): Promise<Reply> {
    return this.client.sendCommand(argv) as Promise<Reply>;
  }

  async batch(commands: string[][], atomic: boolean): Promise<Array<Reply | Error>> {
    if (!atomic) {
      // node-redis writes every command of one tick in one go (its auto-pipelining),
      // and settles each on its own: one round trip, each error in its place.
      const settled = await Promise.allSettled(commands.map((argv) => this.client.sendCommand(argv)));
      return settled.map((s) => (s.status === "fulfilled" ? (s.value as Reply) : (s.reason as Error)));
    }
    const multi = this.client.multi();
    for (const argv of commands) multi.addCommand(argv);
    try {
      return (await multi.exec()) as Array<Reply | Error>;
    } catch (err) {
      // A transaction with an error reply inside: node-redis keeps every reply on the error.
      const replies = (err as { replies?: Array<Reply | Error> }).replies;
      if (Array.isArray(replies)) return replies;
      throw err;
    }
  }

  async duplicate(): Promise<Transport> {
    const copy = this.client.duplicate();
    quiet(copy); // node-redis throws an 'error' event that has no listener
    await copy.connect();
    return new NodeRedisTransport(copy);
  }

  async close(): Promise<void> {
    if (typeof this.client.close === "function") await this.client.close();
    else await this.client.quit?.();
  }

  onEnd(listener: () => void): () => void {
    return onEndOf(this.client)(listener);
  }

  destroy(): void {
    // node-redis 5 and later: destroy(); 4: disconnect().
    if (typeof this.client.destroy === "function") this.client.destroy();
    else void this.client.disconnect?.();
  }
}

async function ioRedisReady(client: IoRedisLike): Promise<void> {
  if (client.status === "ready" || client.status === undefined) return;
  if (client.status === "wait" && typeof client.connect === "function") {
    await client.connect();
    return;
  }
  if (client.status === "end" || client.status === "close") {
    throw new Error("redis-unique: the connection for a wait closed before it was ready");
  }
  const emitter = client as unknown as Emitter;
  await new Promise<void>((resolve, reject) => {
    const done = (error?: Error) => {
      emitter.removeListener?.("ready", onReady);
      emitter.removeListener?.("end", onEnd);
      emitter.removeListener?.("error", onError);
      if (error) {
        client.disconnect(); // no reconnecting in the background for a wait that failed
        reject(error);
      } else resolve();
    };
    const onReady = () => done();
    const onEnd = () => done(new Error("redis-unique: the connection for a wait closed before it was ready"));
    const onError = (error: unknown) => done(error instanceof Error ? error : new Error(String(error)));
    emitter.once?.("ready", onReady);
    emitter.once?.("end", onEnd);
    emitter.once?.("error", onError);
  });
}

export function transportFor(client: RedisClient | Transport): Transport {
  if (typeof (client as Transport).send === "function" && typeof (client as Transport).batch === "function") {
    return client as Transport;
  }
  if (isIoRedis(client as RedisClient)) return new IoRedisTransport(client as IoRedisLike);
  if (isNodeRedis(client as RedisClient)) return new NodeRedisTransport(client as NodeRedisLike);
  throw new TypeError("redis-unique: expected an ioredis client (new Redis()) or a node-redis client (createClient())");
}
