/**
 * The two backends: the redis-unique module, or its Redis Functions library where the module
 * cannot be loaded (managed Redis and Valkey). A Transport in front of yours: at the first
 * UNIQUE.* call it asks `COMMAND INFO unique.lock` (allowed where MODULE LIST is not); when
 * the module answers, every call goes through as it is; else each is the same call to the
 * library through FCALL, which it loads (FUNCTION LOAD REPLACE) when it is missing or older
 * than this package's, or, where your user may not, an error that gives the one command an
 * operator runs (`npx redis-unique functions load redis://...`). REDIS_UNIQUE_BACKEND
 * (`module`, `functions`, `auto`) or setBackend() forces either. A WAIT is a waiter queued on
 * the server and woken by a BLPOP on the lock's wake list (functions/redis_unique.lua).
 */
import { LIBRARY } from "./library.js";
import type { Reply, Transport } from "./transport.js";

export type Backend = "module" | "functions";

let forced: Backend | undefined;

/** Forces a backend for every Client created afterwards ("auto" or undefined: detect it). */
export function setBackend(name: Backend | "auto" | undefined): void {
  if (name !== undefined && name !== "auto" && name !== "module" && name !== "functions") {
    throw new RangeError(`redis-unique: backend must be "module", "functions" or "auto", not ${String(name)}`);
  }
  forced = name === "auto" ? undefined : name;
}

function setting(): Backend | undefined {
  if (forced) return forced;
  const env = (typeof process !== "undefined" ? process.env.REDIS_UNIQUE_BACKEND : undefined)?.trim().toLowerCase();
  return env === "module" || env === "functions" ? env : undefined;
}

export const LIBRARY_VERSION = Number(/^local VERSION = (\d+)/m.exec(LIBRARY)?.[1] ?? 0);
export const METRICS_KEY = "unique:metrics";

/** The library is absent (or older than this package's) and this connection may not load it. */
export class FunctionsNotLoadedError extends Error {
  readonly code = "ERR";
  constructor(cause: string) {
    super(
      `redis-unique: the module is not loaded on this server, and its Functions library (version ${LIBRARY_VERSION}) ` +
        "is not loaded either. Load it once: `npx redis-unique functions load redis://HOST:PORT` " +
        `(or \`redis-cli -x FUNCTION LOAD REPLACE < functions/redis_unique.lua\`), or load the module (docs/install.md) (${cause})`,
    );
    this.name = "FunctionsNotLoadedError";
  }
}

/** A call the Functions library does not keep (LOCKALL, UNLOCKALL): it needs the module. */
export class NotInFunctionsError extends Error {
  readonly code = "ERR";
  constructor(command: string) {
    super(`redis-unique: ${command} needs the redis-unique module: the Functions library keeps single-key locks only (load the module, docs/install.md)`);
    this.name = "NotInFunctionsError";
  }
}

// ---- Cluster hash slots: the wake list hashes with the lock key -------------------------

function crc16(data: Buffer): number {
  let crc = 0;
  for (const byte of data) {
    crc ^= byte << 8;
    for (let i = 0; i < 8; i++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  }
  return crc;
}

function tagOf(key: Buffer): Buffer | null {
  const start = key.indexOf("{");
  if (start < 0) return null;
  const end = key.indexOf("}", start + 1);
  if (end < 0 || end === start + 1) return null;
  return key.subarray(start + 1, end);
}

export function keySlot(key: string | Buffer): number {
  const k = Buffer.isBuffer(key) ? key : Buffer.from(key);
  return crc16(tagOf(k) ?? k) % 16384;
}

/** The lock's wake list: "{X}:unique:w:" + key, in the lock's hash slot whatever the key. */
export function wakeKey(key: string): string {
  const k = Buffer.from(key);
  let tag = tagOf(k)?.toString();
  if (tag === undefined) {
    if (k.length > 0 && !k.includes("}")) tag = key;
    else {
      const want = keySlot(k);
      let i = 0;
      while (crc16(Buffer.from(`u${i}`)) % 16384 !== want) i++;
      tag = `u${i}`;
    }
  }
  return `{${tag}}:unique:w:${key}`;
}

// ---- UNIQUE.* as FCALL --------------------------------------------------------------------

const READS: Record<string, string> = { "UNIQUE.LOCKEDBY": "unique_lockedby", "UNIQUE.RATE": "unique_rate", "UNIQUE.WAITERS": "unique_waiters" };
const WRITES: Record<string, string> = { "UNIQUE.LOCK": "unique_lock", "UNIQUE.UNLOCK": "unique_unlock" };

function lockKeys(key: string, cluster: boolean): string[] {
  return cluster ? [key, wakeKey(key)] : [key, wakeKey(key), METRICS_KEY];
}

/** The FCALL of a UNIQUE.* call that does not block (a WAIT is left out, as in MULTI). */
export function fcallArgv(argv: string[], cluster = false): string[] {
  const name = argv[0]!.toUpperCase();
  if (name === "UNIQUE.LOCKALL" || name === "UNIQUE.UNLOCKALL") throw new NotInFunctionsError(name);
  if (READS[name]) return ["FCALL_RO", READS[name]!, "1", argv[1]!, ...argv.slice(2)];
  if (WRITES[name]) {
    const keys = lockKeys(argv[1]!, cluster);
    let rest = argv.slice(2);
    if (name === "UNIQUE.LOCK") {
      const out = [rest[0]!];
      for (let i = 1; i < rest.length; i++) {
        if (rest[i]!.toUpperCase() === "WAIT" && i + 1 < rest.length) i++;
        else out.push(rest[i]!);
      }
      rest = out;
    }
    return ["FCALL", WRITES[name]!, String(keys.length), ...keys, ...rest];
  }
  if (name === "UNIQUE.METRICS") {
    const keys = cluster ? [] : [METRICS_KEY];
    return ["FCALL", "unique_metrics", String(keys.length), ...keys, ...argv.slice(1)];
  }
  throw new NotInFunctionsError(name);
}

/** The server's timer tick in ms at Redis's and Valkey's default hz (10): a BLPOP times out on a tick. */
const BLOCK_TICK = 100;

function hasWait(argv: string[]): boolean {
  for (let i = 3; i < argv.length - 1; i += 2) if (argv[i]!.toUpperCase() === "WAIT") return true;
  return false;
}

function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** A cluster node as ioredis gives it. */
type Sender = { call(command: string, ...args: string[]): Promise<unknown> };

/** Loads the library on one server where it is absent or older than this package's. */
async function loadOn(send: (argv: string[]) => Promise<Reply>): Promise<void> {
  let have: number | null = null;
  try {
    have = Number(await send(["FCALL_RO", "unique_version", "0"]));
  } catch (err) {
    if (!/function not found/i.test(errorText(err))) throw err;
  }
  if (have !== null && have >= LIBRARY_VERSION) return;
  try {
    await send(["FUNCTION", "LOAD", "REPLACE", LIBRARY]);
  } catch (err) {
    throw new FunctionsNotLoadedError(errorText(err));
  }
}

/** What the Transports of one Redis client share: the backend found, once. */
class Choice {
  backend: Promise<Backend> | undefined;
}

/** A Transport that sends each UNIQUE.* call to the module or to the library. */
export class FunctionsTransport implements Transport {
  onEnd?: Transport["onEnd"];

  constructor(
    readonly inner: Transport,
    private readonly choice: Choice = new Choice(),
    readonly cluster = false,
    /** A cluster's primaries now (ioredis's `nodes("master")`): the library is loaded on each. */
    private readonly primaries?: () => Sender[],
  ) {
    if (inner.onEnd) this.onEnd = (listener) => inner.onEnd!(listener);
  }

  /** "module" or "functions", found at the first call. */
  backend(): Promise<Backend> {
    const f = setting();
    if (f) return Promise.resolve(f);
    this.choice.backend ??= this.detect().catch((err) => {
      this.choice.backend = undefined;
      throw err;
    });
    return this.choice.backend;
  }

  private async detect(): Promise<Backend> {
    let found: Backend = "functions";
    try {
      const reply = await this.inner.send(["COMMAND", "INFO", "unique.lock"]);
      if (Array.isArray(reply) && reply.some((entry) => entry !== null && entry !== undefined)) found = "module";
    } catch {
      found = "functions";
    }
    if (found === "functions") await this.ensureLoaded();
    return found;
  }

  /**
   * Loads the library where it is absent or older than this package's: on a cluster on every
   * primary (a call with no key reaches any one node), else on the server.
   */
  async ensureLoaded(): Promise<void> {
    const nodes = this.primaries?.() ?? [];
    if (nodes.length === 0) return loadOn((argv) => this.inner.send(argv));
    await Promise.all(nodes.map((node) => loadOn((argv) => node.call(argv[0]!, ...argv.slice(1)) as Promise<Reply>)));
  }

  private async fcall(argv: string[]): Promise<Reply> {
    try {
      return await this.inner.send(argv);
    } catch (err) {
      // after a failover to a node without it: load again, once
      if (!/function not found/i.test(errorText(err))) throw err;
      await this.ensureLoaded();
      return this.inner.send(argv);
    }
  }

  async send(argv: string[]): Promise<Reply> {
    if (!argv[0]!.toUpperCase().startsWith("UNIQUE.") || (await this.backend()) === "module") return this.inner.send(argv);
    const name = argv[0]!.toUpperCase();
    if (name === "UNIQUE.REAP") return this.reap(argv);
    if (name !== "UNIQUE.LOCK" || !hasWait(argv)) return this.fcall(fcallArgv(argv, this.cluster));
    const keys = lockKeys(argv[1]!, this.cluster);
    let reply = await this.fcall(["FCALL", "unique_lock", String(keys.length), ...keys, ...argv.slice(2)]);
    if (!Array.isArray(reply)) return reply;
    const seq = String(reply[0]);
    for (;;) {
      const ms = Math.max(Number(reply[1]), 1);
      const until = Date.now() + ms;
      // A BLPOP's timeout fires only at the server's next timer tick (100 ms at the default
      // hz 10), so an instant the library named (a rate's next grant, a lease's end) would
      // be missed by up to a tick: the last tick of the block is slept here instead, and the
      // library asked at the instant itself. A grant in that last tick is found then.
      let popped: Reply = null;
      if (ms > BLOCK_TICK) popped = await this.inner.send(["BLPOP", keys[1]!, ((ms - BLOCK_TICK) / 1000).toFixed(3)]);
      // the wake-up popped goes back to the library: another waiter's is passed on
      const woke = Array.isArray(popped) && popped.length === 2 ? [String(popped[1])] : [];
      if (woke.length === 0 && until > Date.now()) await new Promise((r) => setTimeout(r, until - Date.now()));
      reply = await this.fcall(["FCALL", "unique_wait", String(keys.length), ...keys, seq, ...woke]);
      if (!Array.isArray(reply)) return reply;
    }
  }

  private async reap(argv: string[]): Promise<Reply> {
    let count = "100";
    let owner = "";
    for (let i = 2; i + 1 < argv.length; i += 2) {
      if (argv[i]!.toUpperCase() === "COUNT") count = argv[i + 1]!;
      else if (argv[i]!.toUpperCase() === "OWNER") owner = argv[i + 1]!;
    }
    const [next, names] = (await this.inner.send(["SCAN", argv[1]!, "COUNT", count, "TYPE", "hash"])) as [string, string[]];
    let removed = 0;
    for (const key of names.map(String)) {
      const keys = lockKeys(key, this.cluster);
      removed += Number(await this.fcall(["FCALL", "unique_reapkey", String(keys.length), ...keys, owner]));
    }
    return [String(next), removed];
  }

  async batch(commands: string[][], atomic: boolean): Promise<Array<Reply | Error>> {
    const unique = commands.some((argv) => argv[0]!.toUpperCase().startsWith("UNIQUE."));
    if (!unique || (await this.backend()) === "module") return this.inner.batch(commands, atomic);
    return this.inner.batch(commands.map((argv) => (argv[0]!.toUpperCase().startsWith("UNIQUE.") ? fcallArgv(argv, this.cluster) : argv)), atomic);
  }

  async duplicate(): Promise<Transport> {
    return new FunctionsTransport(await this.inner.duplicate(), this.choice, this.cluster, this.primaries);
  }

  close(): Promise<void> {
    return this.inner.close();
  }

  destroy(): void {
    this.inner.destroy();
  }
}

// One choice per Redis client object, however many Clients wrap it.
const choices = new WeakMap<object, Choice>();

/** Your Transport behind the backend choice (a Redis Cluster client: no counters' key). */
export function withFunctions(inner: Transport, redis: object): Transport {
  if (inner instanceof FunctionsTransport) return inner;
  let choice = choices.get(redis);
  if (!choice) {
    choice = new Choice();
    choices.set(redis, choice);
  }
  const nodes = (redis as { nodes?: (role: string) => Sender[] }).nodes;
  const cluster = typeof nodes === "function";
  return new FunctionsTransport(inner, choice, cluster, cluster ? () => nodes.call(redis, "master") : undefined);
}
