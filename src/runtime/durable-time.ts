/**
 * Time decided by the store, not by a timer in one process:
 * - an input deadline that passes is recorded in the store (rules.expireInputs) by whoever gets there first: the run
 *   waiting in memory when its timer fires, the run that replays the wait, or the late answer itself, so every replica
 *   refuses the late answer and a re-run takes the same path;
 * - ctx.sleep records its wake time once (a step row `{"wakeAt": ms}`), so a re-run after a crash wakes at the original
 *   time; a long sleep of a durable tool is a parked wait that the claim resumes when due;
 * - a replica wakes for the earliest parked task due (WakeTimer), so a wake does not wait for the next queue poll.
 * (A task past its TTL reads expired on every replica at once: the store decides that on read, rules.readsExpired.)
 * Every time here is the store's clock (TaskStore.now), so a replica whose own clock is off wakes nothing early.
 */
import type { TaskRecord, TaskStore } from '../store/types.js';
import { TaskCancelledError } from './context.js';
import type { Waits } from './parking.js';

/** Records the input deadlines of `taskId` that passed (any replica may); the row after it (undefined: gone). */
export function recordTimeouts(store: TaskStore, taskId: string): Promise<TaskRecord | undefined> {
  return store.expireInput(taskId, store.now());
}

/** A sleep's wake time, checked against the task's TTL: a sleep the TTL would cut short is refused at once. */
export function sleepWakeAt(name: string, ms: number, now: number, expiresAt: number | null): number {
  if (typeof ms !== 'number' || !Number.isFinite(ms) || ms < 0) throw new TypeError(`ctx.sleep("${name}", ms): ms must be a finite number >= 0, got ${String(ms)}`);
  const wakeAt = now + Math.round(ms);
  if (expiresAt !== null && wakeAt > expiresAt) {
    throw new RangeError(
      `ctx.sleep("${name}", ${ms}): the task's TTL ends at ${new Date(expiresAt).toISOString()}, before the sleep would (${new Date(wakeAt).toISOString()}); give the tool a longer ttlMs`,
    );
  }
  return wakeAt;
}

/** Waits until `wakeAt` (or throws when `signal` aborts); a durable run's wait may be parked meanwhile (then this never
 *  settles, and holds nothing). */
export function sleepUntil(wakeAt: number, signal: AbortSignal, waits: Waits | undefined, now: () => number): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason ?? new TaskCancelledError('cancelled'));
    let remove: () => void = () => undefined;
    const stop = () => {
      clearTimeout(timer);
      signal.removeEventListener('abort', onAbort);
      remove();
    };
    const onAbort = () => {
      stop();
      reject(signal.reason ?? new TaskCancelledError('cancelled'));
    };
    const timer = setTimeout(() => {
      const settle = () => {
        stop();
        resolve();
      };
      if (waits) waits.release(settle);
      else settle();
    }, Math.max(0, wakeAt - now()));
    signal.addEventListener('abort', onAbort, { once: true });
    if (waits) remove = waits.add({ wakeAt, keys: [], detach: () => {
      clearTimeout(timer);
      signal.removeEventListener('abort', onAbort);
    } });
  });
}

/**
 * One timer per replica for the earliest parked task due: armed from what this replica parked and, at every queue
 * poll, from the store (another replica may have parked it, or died), when it is due before the next poll.
 */
export class WakeTimer {
  private timer: NodeJS.Timeout | undefined;
  private at = Infinity;
  private reading = false;

  constructor(private readonly store: TaskStore, private readonly wake: () => void, private readonly horizonMs: number) {}

  /** A parked task becomes due at `t`. */
  due(t: number): void {
    const now = this.store.now();
    if (t >= this.at || t - now > this.horizonMs) return;
    if (this.timer) clearTimeout(this.timer);
    this.at = t;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.at = Infinity;
      this.wake();
    }, Math.max(0, t - now));
    this.timer.unref?.();
  }

  /** Looks up the earliest wake to come in the store (one indexed read). */
  refresh(onError: (e: unknown) => void): void {
    if (this.reading) return;
    this.reading = true;
    this.store.nextWake(this.store.now()).then(
      (t) => {
        this.reading = false;
        if (t !== undefined) this.due(t);
      },
      (e) => {
        this.reading = false;
        onError(e);
      },
    );
  }

  stop(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    this.at = Infinity;
  }
}
