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
}

/** An ioredis client (Redis or Cluster): what this package uses of it. */
export interface IoRedisLike {
  call(command: string, ...args: string[]): Promise<unknown>;
  pipeline(): { call(command: string, ...args: string[]): unknown; exec(): Promise<Array<[Error | null, unknown]> | null> };
  multi(): { call(command: string, ...args: string[]): unknown; exec(): Promise<Array<[Error | null, unknown]> | null> };
  duplicate(): IoRedisLike;
  quit(): Promise<unknown>;
  disconnect(): void;
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
    return new IoRedisTransport(this.client.duplicate());
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
    await copy.connect();
    return new NodeRedisTransport(copy);
  }

  async close(): Promise<void> {
    if (typeof this.client.close === "function") await this.client.close();
    else await this.client.quit?.();
  }

  destroy(): void {
    // node-redis 5 and later: destroy(); 4: disconnect().
    if (typeof this.client.destroy === "function") this.client.destroy();
    else void this.client.disconnect?.();
  }
}

export function transportFor(client: RedisClient | Transport): Transport {
  if (typeof (client as Transport).send === "function" && typeof (client as Transport).batch === "function") {
    return client as Transport;
  }
  if (isIoRedis(client as RedisClient)) return new IoRedisTransport(client as IoRedisLike);
  if (isNodeRedis(client as RedisClient)) return new NodeRedisTransport(client as NodeRedisLike);
  throw new TypeError("redis-unique: expected an ioredis client (new Redis()) or a node-redis client (createClient())");
}
