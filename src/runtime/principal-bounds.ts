/**
 * Fair to every caller: per-principal bounds, so one principal fills only its own share of a replica and of the
 * deployment.
 * - running: handlers of one principal running (or about to start) on this replica, inline or task. Past it, a call
 *   that can wait as a task joins the queue, whose claim skips that principal here until one of its handlers ends;
 *   a call that cannot wait is refused (`principal_running`).
 * - queued: one principal's tasks waiting for capacity in the whole deployment; past it, new calls that would queue
 *   are refused (`principal_queued`, nothing stored).
 * - stored: one principal's unexpired task rows; past it, calls that may become tasks are refused (`principal_tasks`,
 *   retry when its next task expires).
 * The store counts (queued, stored) are read once per principal per second at most (one indexed read), plus what this
 * replica added since; the cache of those reads is bounded in entries.
 */
import { serverBusy, type TaskProtocolError } from '../protocol/index.js';
import type { PrincipalLoad, TaskStore } from '../store/types.js';

export interface PrincipalBoundOptions {
  maxRunningPerPrincipal: number;
  maxQueuedPerPrincipal: number;
  maxTasksPerPrincipal: number;
}

/** Defaults: a share of the replica's and the deployment's bounds, so another caller always has room. */
export function principalDefaults(maxRunning: number, maxQueued: number): PrincipalBoundOptions {
  return {
    // 3/4 of the handler slots (a replica with fewer than 8 keeps every slot for one caller); 256 when unlimited.
    maxRunningPerPrincipal: !Number.isFinite(maxRunning) ? 256 : maxRunning < 8 ? Math.max(1, maxRunning) : Math.ceil((maxRunning * 3) / 4),
    // A quarter of the queue (a queue shorter than 100 is one caller's).
    maxQueuedPerPrincipal: !Number.isFinite(maxQueued) ? 2500 : maxQueued < 100 ? Math.max(1, maxQueued) : Math.ceil(maxQueued / 4),
    maxTasksPerPrincipal: 100_000,
  };
}

/** How long a store read of a principal's share is reused. */
const REUSE_MS = 1000;
/** Most principals whose share is remembered (the oldest read goes first). */
export const MAX_REMEMBERED_PRINCIPALS = 10_000;

interface Share {
  at: number;
  load: PrincipalLoad;
  /** Queued and stored by this replica since the read. */
  queued: number;
  stored: number;
}

const clamp = (x: number, lo: number, hi: number) => Math.min(hi, Math.max(lo, Math.round(x)));

export class PrincipalBounds {
  /** Handlers of each principal running or about to start here (entries at zero are removed). */
  private readonly running = new Map<string, number>();
  private readonly shares = new Map<string, Share>();
  private readonly reads = new Map<string, Promise<PrincipalLoad>>();

  constructor(private readonly store: TaskStore, readonly opts: PrincipalBoundOptions, private readonly runMs: () => number) {
    for (const name of ['maxRunningPerPrincipal', 'maxQueuedPerPrincipal', 'maxTasksPerPrincipal'] as const) {
      const n = opts[name];
      if (!Number.isInteger(n) || n < 1) throw new RangeError(`${name} must be an integer >= 1, got ${n}`);
    }
  }

  /** Principals whose share is remembered (bounded by MAX_REMEMBERED_PRINCIPALS). */
  get remembered(): number {
    return this.shares.size;
  }

  runningOf(principal: string): number {
    return this.running.get(principal) ?? 0;
  }

  hasRoom(principal: string): boolean {
    return this.runningOf(principal) < this.opts.maxRunningPerPrincipal;
  }

  took(principal: string): void {
    this.running.set(principal, this.runningOf(principal) + 1);
  }

  gave(principal: string): void {
    const n = this.runningOf(principal) - 1;
    if (n > 0) this.running.set(principal, n);
    else this.running.delete(principal);
  }

  /** What a claim of up to `max` tasks must know: the principals it could bring to their bound here. */
  claimCap(max: number): { cap: number; running: Record<string, number> } {
    const cap = this.opts.maxRunningPerPrincipal;
    const running: Record<string, number> = {};
    for (const [p, n] of this.running) if (n + max > cap) running[p] = n;
    return { cap, running };
  }

  runningFull(principal: string): TaskProtocolError {
    const ms = clamp(this.runMs() || 1000, 500, 30_000);
    return serverBusy(
      `This caller already runs ${this.runningOf(principal)} handlers on this replica (--max-running-per-principal ${this.opts.maxRunningPerPrincipal}) and this call cannot wait as a task; nothing was stored. Retry in ${ms} ms`,
      ms,
      'principal_running',
    );
  }

  private queuedFull(queued: number): TaskProtocolError {
    const perSlot = Math.ceil(queued / this.opts.maxRunningPerPrincipal);
    const ms = clamp((this.runMs() || 1000) * perSlot, 1000, 60_000);
    return serverBusy(
      `This caller has ${queued} tasks waiting in the run queue (--max-queued-per-principal ${this.opts.maxQueuedPerPrincipal}); nothing was stored. Retry in ${ms} ms`,
      ms,
      'principal_queued',
    );
  }

  private storedFull(share: Share, now: number): TaskProtocolError {
    const ms = clamp(share.load.nextExpiry === null ? 60_000 : share.load.nextExpiry - now, 1000, 3_600_000);
    return serverBusy(
      `This caller has ${share.load.stored + share.stored} stored tasks (--max-tasks-per-principal ${this.opts.maxTasksPerPrincipal}); nothing was stored. Its next task expires in ${ms} ms: retry then`,
      ms,
      'principal_tasks',
    );
  }

  /** The principal's share: a recent read plus what was added here since, or a new read (one at a time per principal). */
  private async share(principal: string): Promise<Share> {
    const now = Date.now();
    const known = this.shares.get(principal);
    if (known && now - known.at < REUSE_MS) return known;
    let read = this.reads.get(principal);
    if (!read) {
      read = this.store.principalLoad(principal).finally(() => this.reads.delete(principal));
      this.reads.set(principal, read);
    }
    const load = await read;
    const again = this.shares.get(principal);
    if (again && again.at >= now) return again; // another caller of the same read stored it first
    const share: Share = { at: now, load, queued: 0, stored: 0 };
    this.shares.delete(principal);
    this.shares.set(principal, share);
    while (this.shares.size > MAX_REMEMBERED_PRINCIPALS) this.shares.delete(this.shares.keys().next().value!);
    return share;
  }

  /** Refuses a call that may become a task when the principal's stored tasks are at the bound, on what is known now:
   *  never waits for the store (an inline call needs none, also while it is unreachable); a stale share is re-read
   *  in the background. */
  checkStored(principal: string): void {
    const s = this.shares.get(principal);
    if (!s || Date.now() - s.at >= REUSE_MS) void this.share(principal).catch(() => undefined);
    if (s && s.load.stored + s.stored >= this.opts.maxTasksPerPrincipal) throw this.storedFull(s, this.store.now());
  }

  /** Takes a place among the principal's queued tasks (refused past the bound); `giveBack` undoes it. A store that
   *  cannot be read refuses nothing here: the creation that follows fails with the store's own error. */
  async takeQueued(principal: string): Promise<() => void> {
    let s: Share;
    try {
      s = await this.share(principal);
    } catch {
      return () => undefined;
    }
    const queued = s.load.queued + s.queued;
    if (queued >= this.opts.maxQueuedPerPrincipal) throw this.queuedFull(queued);
    s.queued++;
    return () => void (s.queued = Math.max(0, s.queued - 1));
  }

  /** A task of `principal` that expires at `expiresAt` was stored here. */
  stored(principal: string, expiresAt: number | null): void {
    const s = this.shares.get(principal);
    if (!s) return;
    s.stored++;
    if (expiresAt !== null && (s.load.nextExpiry === null || expiresAt < s.load.nextExpiry)) s.load = { ...s.load, nextExpiry: expiresAt };
  }

  /** The refusal a call would get now from what is already known (synchronous, for the HTTP front's 503). */
  knownRefusal(principal: string, asTask: boolean): TaskProtocolError | undefined {
    if (!asTask) return this.hasRoom(principal) ? undefined : this.runningFull(principal);
    const s = this.shares.get(principal);
    if (!s || Date.now() - s.at >= REUSE_MS) return undefined;
    if (s.load.stored + s.stored >= this.opts.maxTasksPerPrincipal) return this.storedFull(s, this.store.now());
    if (!this.hasRoom(principal) && s.load.queued + s.queued >= this.opts.maxQueuedPerPrincipal) return this.queuedFull(s.load.queued + s.queued);
    return undefined;
  }
}
