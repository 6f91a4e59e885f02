/** Every error this package throws for a server or lock problem is a UniqueError. */
export class UniqueError extends Error {
  /** The server's error code (`ERR`, `WRONGTYPE`, `OOM`, `MOVED`...), when the server replied one. */
  readonly code: string | undefined;

  constructor(message: string, code?: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
    this.code = code;
  }
}

/** The server refused a command (a syntax error, a value out of range, WRONGTYPE...). */
export class CommandError extends UniqueError {}

/** The server does not know the UNIQUE.* commands: the module is not loaded there. */
export class ModuleNotLoadedError extends UniqueError {
  constructor(options?: { cause?: unknown }) {
    super(
      "the redis-unique module is not loaded in this Redis server (UNIQUE.* commands are unknown). " +
        "Load it with `loadmodule /path/to/libredis_unique.so` in redis.conf, " +
        "`redis-server --loadmodule /path/to/libredis_unique.so`, or `MODULE LOAD /path/to/libredis_unique.so` " +
        "(build it with `cargo build --release` in the redis-unique repository)",
      "ERR",
      options,
    );
  }
}

/**
 * The module loaded in the server is of another major.minor version than this package was
 * made for: `moduleVersion` and `clientVersion` say which.
 */
export class ModuleVersionMismatchError extends UniqueError {
  constructor(readonly moduleVersion: string, readonly clientVersion: string) {
    const mine = clientVersion.split(".").slice(0, 2).join(".");
    const theirs = moduleVersion.split(".").slice(0, 2).join(".");
    super(
      `the redis-unique module loaded in this Redis server is version ${moduleVersion}, but this redis-unique ` +
        `npm package (${clientVersion}) was made for module ${mine}.x: install the package of the server's ` +
        `module (npm install redis-unique@~${theirs}.0), or load module ${mine}.x into the server ` +
        "(docs/install.md, Upgrades)",
    );
  }
}

/**
 * acquire() gave up: the lock stayed held by others for the whole wait. With `kind` (a lock
 * object's: `mutex`, `semaphore`...), the message starts as redis-semaphore's timeout does,
 * `Acquire mutex <key> timeout`, and says who holds it after that.
 */
export class LockNotAcquiredError extends UniqueError {
  constructor(readonly key: string, readonly holders: string[] = [], kind?: string) {
    super(
      `${kind ? `Acquire ${kind} ${key} timeout: ` : ""}the lock ${key} is held${holders.length ? ` by ${holders.join(", ")}` : ""}`,
    );
  }
}

/**
 * What a lock object's acquire() throws when the wait ends (redis-semaphore's `TimeoutError`,
 * under its name): a LockNotAcquiredError, `Acquire <kind> <key> timeout: the lock <key> is held by ...`.
 */
export class TimeoutError extends LockNotAcquiredError {}

/**
 * A lock this process held is gone: its lease ran out, or another client removed it. With
 * `kind` (a lock object's), the message starts as redis-semaphore's LostLockError does,
 * `Lost mutex for key <key>`, and says why after that. Exported as `LostLockError` too.
 */
export class LockLostError extends UniqueError {
  /** Every key of the hold: `[key]`, or the keys of a hold taken by lockAll (lost together). */
  readonly keys: string[];

  constructor(readonly key: string, readonly identifier: string, readonly reason?: string, keys?: string[], kind?: string) {
    super(
      `${kind ? `Lost ${kind} for key ${key}: ` : ""}the lock ${key} is no longer held by ${identifier}: ` +
        (reason ?? "its lease ran out or it was removed"),
    );
    this.keys = keys ?? [key];
  }
}

/** acquire() on a Mutex or Semaphore that already holds its lock (release it first). */
export class AlreadyAcquiredError extends UniqueError {
  constructor(readonly key: string) {
    super(`this lock object already holds ${key}: release() it before acquiring again`);
  }
}

/** Turns an error reply of either Redis client into this package's error. */
export function fromReply(err: unknown): Error {
  if (!(err instanceof Error) || err instanceof UniqueError) return err as Error;
  const message = err.message;
  const code = /^[A-Z][A-Z_]+(?=\s|$)/.exec(message)?.[0];
  if (code === undefined) return err; // a connection error: the client's own
  if (/^ERR unknown command ['`]?unique\./i.test(message)) return new ModuleNotLoadedError({ cause: err });
  return new CommandError(message, code, { cause: err });
}
