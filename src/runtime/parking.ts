/**
 * Waits that hold no process. A durable tool's handler that waits (for input, or in a long ctx.sleep) with no step
 * running is parked once it has waited `parkAfterMs`: the store lets go of the task (rules.parkChange: no owner,
 * claimable from its wake time), the handler's pending calls are detached without ever settling, and nothing of the
 * run stays in memory. The run queue's claim resumes it on any replica when an answer ends the wait or its wake time
 * comes (the earliest input deadline or sleep end); the handler then runs again from the top, its steps and answers
 * replayed from the store.
 */
import { TaskWriteRefused, type ParkResult, type TaskRecord, type TaskStore, type WriteFence } from '../store/types.js';
import type { Logger } from './types.js';

/** One pending wait of a handler: when it must be looked at again without news, the input keys it needs. */
export interface PendingWait {
  wakeAt: number;
  keys: string[];
  /** Stops its timers and subscriptions without settling it (the run is parked; its promise never settles). */
  detach(): void;
}

/** What parking needs from the run it parks. */
export interface ParkingHost {
  readonly store: TaskStore;
  readonly log: Logger;
  readonly parkAfterMs: number;
  /** The task and the fence of this run, once the call is a durable task that may park (undefined: it may not). */
  parkable(): { taskId: string; fence: WriteFence } | undefined;
  /** Steps of this run now running (a run is parked only between steps). */
  stepsInFlight(): number;
  /** The store let go of the task: drop the run (write nothing more, free its slot, stop listening). */
  parked(record: TaskRecord): void;
  /** A cancel was requested while the run waited. */
  cancelled(): void;
  lostOwnership(): void;
}

export class Waits {
  private readonly pending = new Set<PendingWait>();
  private timer: NodeJS.Timeout | undefined;
  private parking = false;
  private done = false;
  /** Wait resolutions that came while a park was being written: run if the run goes on, dropped if it was parked. */
  private deferred: Array<() => void> = [];

  constructor(private readonly host: ParkingHost) {}

  /** A wait begins; returns its removal (when it settles by itself). */
  add(wait: PendingWait): () => void {
    this.pending.add(wait);
    this.schedule();
    return () => {
      this.pending.delete(wait);
      this.schedule();
    };
  }

  /** Settles a wait, unless a park is being written (then once its outcome is known: never, if the run was parked). */
  release(settle: () => void): void {
    if (this.done) return;
    if (this.parking) this.deferred.push(settle);
    else settle();
  }

  /** Re-evaluates whether the run should park (a wait or a step began or ended). */
  schedule(): void {
    const idle = !this.done && this.pending.size > 0 && this.host.stepsInFlight() === 0 && this.host.parkable() !== undefined;
    if (!idle) {
      if (this.timer) clearTimeout(this.timer);
      this.timer = undefined;
      return;
    }
    if (this.timer || this.parking) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.park();
    }, this.host.parkAfterMs);
    this.timer.unref?.();
  }

  private async park(): Promise<void> {
    const target = this.host.parkable();
    if (this.done || this.pending.size === 0 || this.host.stepsInFlight() > 0 || !target) return;
    const waits = [...this.pending];
    const wakeAt = Math.min(...waits.map((w) => w.wakeAt));
    const awaiting = [...new Set(waits.flatMap((w) => w.keys))];
    this.parking = true;
    let result: ParkResult;
    try {
      result = await this.host.store.park(target.taskId, target.fence, { wakeAt, awaiting }, this.host.store.now());
    } catch (e) {
      this.resume();
      if (e instanceof TaskWriteRefused) {
        if (e.reason === 'fenced') this.host.lostOwnership();
        return;
      }
      this.host.log.warn('could not park a waiting task; it waits in memory and tries again', { taskId: target.taskId, error: String(e) });
      this.schedule();
      return;
    }
    if (result.outcome !== 'parked') {
      this.resume();
      if (result.outcome === 'cancelled') return this.host.cancelled();
      return this.schedule();
    }
    this.parking = false;
    this.done = true;
    this.deferred = [];
    for (const w of waits) w.detach();
    this.pending.clear();
    this.host.parked(result.record);
  }

  /** The park did not happen: the run goes on, with what settled meanwhile. */
  private resume(): void {
    this.parking = false;
    const settle = this.deferred;
    this.deferred = [];
    for (const s of settle) s();
  }

  /**
   * The run lost its task: no more parking, and the waits pending now never settle (close() drops their settling),
   * so they are detached. Returns whether the handler was waiting: then nothing will ever end it.
   */
  abandon(): boolean {
    this.close();
    const waiting = this.pending.size > 0;
    for (const w of this.pending) w.detach();
    this.pending.clear();
    this.deferred = [];
    return waiting;
  }

  /** The run ended (or was parked): no more parking. */
  close(): void {
    this.done = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
  }
}
