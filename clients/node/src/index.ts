export { Client, Batch } from "./client.js";
export type { ClientOptions } from "./client.js";
export * as commands from "./commands.js";
export type {
  Command, GroupWaiters, Holder, LockAllOptions, LockMode, LockOptions, Metrics, RateLimit, RateState, ReapOptions,
} from "./commands.js";
export {
  AlreadyAcquiredError,
  CommandError,
  LockLostError,
  LockLostError as LostLockError,
  LockNotAcquiredError,
  ModuleNotLoadedError,
  ModuleVersionMismatchError,
  TimeoutError,
  UniqueError,
} from "./errors.js";
export { Mutex, RWLock, Semaphore, defaultOnLockLost, defaultTimeoutOptions } from "./locks.js";
export { MultiLock } from "./multilock.js";
export type { MultiLockLostCallback, MultiLockOptions } from "./multilock.js";
export { VERSION } from "./version.js";
export {
  FunctionsNotLoadedError, LIBRARY_VERSION, NotInFunctionsError, fcallArgv, setBackend, wakeKey,
} from "./functions.js";
export type { Backend } from "./functions.js";
export type { LockLostCallback, LockObjectOptions, RWLockOptions, TimeoutOptions } from "./locks.js";
export type { IoRedisLike, NodeRedisLike, RedisClient, Transport } from "./transport.js";
export {
  Refresher, RENEW_RETRY_CODES, renewIntervalMs, renewRetryMs, renewalAllArgv, renewalAllOutcome, renewalArgv, renewalOutcome,
} from "./refresh.js";
export type { RefresherOptions, RenewalChanges, RenewalOutcome } from "./refresh.js";
