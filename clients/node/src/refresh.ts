// The one loop that keeps a held lease alive, for every lock of this package (Mutex,
// Semaphore, MultiLock, the BullMQ helpers), on one key or on several held at once. The rule is clients/conformance's (README "Renewal"):
// renew every third of the lease with only what a renewal needs; the hold's own token back
// means kept, anything else means lost at once; no answer means try again every tenth of
// the lease until the lease would have ended, then lost.
import type { Client } from "./client.js";
import * as commands from "./commands.js";
import { LockLostError, UniqueError } from "./errors.js";

export type RenewalOutcome = "kept" | "retry" | "lost" | "lost_unlock";

/** Error codes by which a server says it cannot answer now, not that the hold is gone. */
export const RENEW_RETRY_CODES: ReadonlySet<string> = new Set([
  "LOADING", "BUSY", "READONLY", "CLUSTERDOWN", "TRYAGAIN", "MASTERDOWN", "OOM",
]);

/** How often a held lease is renewed: a third of it (room for two more tries). */
export function renewIntervalMs(leaseMs: number): number {
  return Math.max(1, Math.floor(leaseMs / 3));
}

/** How soon a renewal that got no answer is tried again: a tenth of the lease. */
export function renewRetryMs(leaseMs: number): number {
  return Math.max(1, Math.floor(leaseMs / 10));
}

/** What a renewal may change besides the lease: sent once, with the next renewal. */
export interface RenewalChanges {
  type?: string;
  owner?: string;
  meta?: Record<string, unknown> | string;
}

/** A renewal's argv: the lease, and only what changed (never LIMIT, RATE or WAIT). */
export function renewalArgv(key: string, jid: string, leaseMs: number, changes: RenewalChanges = {}): string[] {
  return commands.lockArgv(key, jid, { ttl: leaseMs, ...changes });
}

/**
 * A renewal of holds on several keys: `UNIQUE.LOCKALL n keys... jid TTL <lease>` and nothing
 * else (no LIMIT, RATE or WAIT, as a single key's; no TYPE, OWNER or META either).
 */
export function renewalAllArgv(keys: string[], jid: string, leaseMs: number): string[] {
  return commands.lockAllArgv(keys, jid, { ttl: leaseMs });
}

/**
 * What a renewal of several keys means for the holds of `tokens` (in key order): the same
 * tokens, kept; nil, lost (one key's hold had ended, and the module renews every key or
 * none); other tokens, lost after giving up the new holds (every hold had ended, and the
 * call took new ones). Errors as a single key's.
 */
export function renewalAllOutcome(tokens: readonly number[], reply: readonly number[] | null | undefined, error?: unknown): RenewalOutcome {
  if (error !== undefined) return renewalOutcome(0, undefined, error);
  if (reply === null || reply === undefined) return "lost";
  const same = reply.length === tokens.length && reply.every((t, i) => t === tokens[i]);
  return same ? "kept" : "lost_unlock";
}

/** What a renewal's reply (or error) means for the hold of `token`. */
export function renewalOutcome(token: number, reply: number | null | undefined, error?: unknown): RenewalOutcome {
  if (error !== undefined) {
    if (error instanceof UniqueError) return error.code && RENEW_RETRY_CODES.has(error.code) ? "retry" : "lost";
    return "retry"; // no reply: the connection's own error
  }
  if (reply === token) return "kept";
  return reply === null || reply === undefined ? "lost" : "lost_unlock";
}

interface RefresherCommon {
  jid: string;
  leaseMs: number;
  /** Date.now() when the LOCK that granted the hold was sent. */
  sentAt: number;
  /** Overrides the interval (redis-semaphore's refreshInterval). */
  intervalMs?: number;
  /** The lock object's kind (`mutex`, `semaphore`...): a loss then reads as redis-semaphore's, `Lost mutex for key <key>: ...`. */
  kind?: string;
  /** Called once, at once, when the hold is lost. */
  onLost: (error: LockLostError) => void;
}

/** One key's hold, or holds on several keys taken at once by lockAll (renewed all or none). */
export type RefresherOptions = RefresherCommon & ({ key: string; token: number } | { keys: string[]; tokens: number[] });

/** Renews one hold until stopped or lost; `renewals`, `failures`, `lost` tell how it goes. */
export class Refresher {
  renewals = 0;
  failures = 0;
  lost: LockLostError | null = null;
  readonly intervalMs: number;
  readonly retryMs: number;
  private deadline: number;
  private changes: RenewalChanges = {};
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;

  /** The keys of a hold on several keys (renewed by LOCKALL), or null for one key's. */
  private readonly multi: { keys: string[]; tokens: number[] } | null;
  private readonly key: string;

  constructor(private readonly client: Client, readonly options: RefresherOptions) {
    if ("keys" in options) {
      commands.checkKeys(options.keys);
      if (!Array.isArray(options.tokens) || options.tokens.length !== options.keys.length) {
        throw new TypeError("redis-unique: a Refresher of several keys needs one token per key");
      }
      this.multi = { keys: [...options.keys], tokens: [...options.tokens] };
      this.key = options.keys.join(", ");
    } else {
      this.multi = null;
      this.key = options.key;
    }
    this.intervalMs = options.intervalMs ?? renewIntervalMs(options.leaseMs);
    this.retryMs = renewRetryMs(options.leaseMs);
    this.deadline = options.sentAt + options.leaseMs; // the lease started no earlier than the send
  }

  start(): this {
    this.schedule(this.intervalMs);
    return this;
  }

  stop(): void {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
  }

  /** TYPE, OWNER or META to send with the next renewal (once). */
  update(changes: RenewalChanges): void {
    if (this.multi) throw new TypeError("redis-unique: a renewal of several keys sends only the lease (no TYPE, OWNER or META)");
    this.changes = { ...this.changes, ...changes };
  }

  /** The argv of the next renewal, and the changes it carries (taken). */
  next(): { argv: string[]; changes: RenewalChanges } {
    const changes = this.changes;
    this.changes = {};
    const { jid, leaseMs } = this.options;
    if (this.multi) return { argv: renewalAllArgv(this.multi.keys, jid, leaseMs), changes };
    return { argv: renewalArgv(this.key, jid, leaseMs, changes), changes };
  }

  /** Applies the rule to a renewal's result; returns the outcome. */
  settle(changes: RenewalChanges, sentAt: number, reply: number | number[] | null | undefined, error?: unknown): RenewalOutcome {
    const outcome = this.multi
      ? renewalAllOutcome(this.multi.tokens, reply as number[] | null | undefined, error)
      : renewalOutcome((this.options as { token: number }).token, reply as number | null | undefined, error);
    if (outcome === "kept") {
      this.renewals += 1;
      this.failures = 0;
      this.deadline = sentAt + this.options.leaseMs;
    } else if (outcome === "retry") {
      this.failures += 1;
      this.changes = { ...changes, ...this.changes };
    } else if (outcome === "lost_unlock") {
      this.lose("the lease ran out before the renewal, which took the lock again under another fencing token (given up)");
    } else if (error !== undefined) {
      this.lose(`the renewal was refused: ${(error as Error).message}`);
    } else {
      this.lose("another holder has it (the lease ran out, or the lock was reaped or deleted)");
    }
    return outcome;
  }

  private schedule(delay: number): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => void this.tick(), delay);
    this.timer.unref(); // a held lock never keeps the process alive
  }

  private async tick(): Promise<void> {
    if (this.stopped || this.lost) return;
    if (this.failures > 0 && Date.now() >= this.deadline) {
      this.lose(`no renewal was answered before the lease ended (${this.failures} tries)`);
      return;
    }
    const { jid, leaseMs } = this.options;
    const { changes } = this.next();
    const sentAt = Date.now();
    // A call that hangs (a client queueing commands while it reconnects) must not hold back
    // the news: the lock is lost when the lease ends, answered or not.
    const watchdog = setTimeout(() => {
      if (!this.stopped) this.lose("no renewal was answered before the lease ended");
    }, Math.max(0, this.deadline - sentAt));
    watchdog.unref();
    let reply: number | number[] | null | undefined;
    let error: unknown;
    try {
      reply = this.multi
        ? await this.client.lockAll(this.multi.keys, jid, { ttl: leaseMs })
        : await this.client.lock(this.key, jid, { ttl: leaseMs, ...changes });
    } catch (err) {
      error = err ?? new Error("renewal failed");
    } finally {
      clearTimeout(watchdog);
    }
    if (this.lost) {
      // Told lost meanwhile (the watchdog: the lease ended unanswered), and then answered: a
      // call the client queued or resent through a cut link. Whatever hold it took or kept
      // is no job's now (the user heard the lock is gone): give it up rather than leave it
      // to block others for a lease. Checked before `stopped`, which the loss also sets.
      if (error === undefined && reply !== null && reply !== undefined) await this.giveUp(reply);
      return;
    }
    if (this.stopped) return; // released or stopped meanwhile
    const outcome = this.settle(changes, sentAt, reply, error);
    if (outcome === "lost_unlock") await this.giveUp(reply as number | number[]);
    else if (outcome === "lost" && this.multi) {
      // A renewal of several keys refused (one key's hold had ended): the keys still held
      // would stay this job's until their leases end. Released now, by the grant's tokens,
      // so that a key taken again meanwhile (this jid elsewhere, a retried job) is not freed.
      await this.client.unlockAll(this.multi.keys, this.options.jid, this.multi.tokens).catch(() => {});
    }
    if (outcome === "kept") this.schedule(this.intervalMs);
    else if (outcome === "retry") this.schedule(Math.max(0, Math.min(this.retryMs, this.deadline - Date.now())));
  }

  /**
   * Best effort: frees what a renewal took or kept after the hold was told lost, by the
   * tokens it replied (a fenced unlock: never a newer hold of the same jid).
   */
  private async giveUp(reply: number | number[]): Promise<void> {
    const { jid } = this.options;
    await this.releaseCall(jid, reply).catch(() => {});
  }

  /** @internal The release of the hold a renewal replied `reply` for (its argv is in the conformance table). */
  releaseCall(jid: string, reply: number | number[]): Promise<unknown> {
    if (this.multi) return this.client.unlockAll(this.multi.keys, jid, reply as number[]);
    return this.client.unlock(this.key, jid, reply as number);
  }

  private lose(why: string): void {
    if (this.lost) return;
    this.stop();
    this.lost = new LockLostError(this.key, this.options.jid, why, this.multi?.keys, this.options.kind);
    this.options.onLost(this.lost);
  }
}
