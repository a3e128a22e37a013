/**
 * A replica's drain (SIGTERM, a rolling deploy): nothing that can go on elsewhere waits for it, and nothing that
 * cannot is cut before it must be.
 *
 * - Tasks that may run again elsewhere (declared safe to re-run, or durable) are handed over at once: the run here is
 *   stopped and the task parked due now (no owner), so the run queue's claim of any other replica resumes it at once
 *   (a durable task from its steps, a retry-safe one from the start), without waiting for a lease. A durable run
 *   inside a step not marked idempotent is handed over as soon as that step has ended and its value is stored, so no
 *   such step is cut.
 * - A call still answering inline whose tool may run elsewhere becomes a task at once, and is handed over likewise
 *   (its caller gets the task, or a handle).
 * - Everything else (tasks not safe to re-run, other calls still answering inline) runs on for the drain.
 * - When the drain ends: what may run elsewhere is handed over now (a step still running is cut: the next run finds
 *   it interrupted, as after a crash), the rest is stopped and its task failed naming the stop.
 */
import { setTimeout as delay } from 'node:timers/promises';
import { ErrorCode } from '../protocol/index.js';
import { QUEUE_SIGNAL_ID, type SignalKind } from '../store/local-bus.js';
import { TaskWriteRefused, type Outcome, type TaskStore } from '../store/types.js';
import { TaskCancelledError } from './context.js';
import type { Execution } from './execution.js';
import type { Logger } from './types.js';

/** What a drain needs from the runtime. */
export interface DrainHost {
  readonly store: TaskStore;
  readonly log: Logger;
  /** Handlers running here (inline and tasks). */
  readonly executions: ReadonlySet<Execution>;
  publish(taskId: string, kind?: SignalKind): void;
  finishQuietly(taskId: string, outcome: Outcome, message: string): Promise<void>;
}

/** A handed-over run's handler gets at most this long to stop before its task is parked for another replica. */
const STOP_GRACE_MS = 1000;
/** How often the drain looks at what still runs (runs promoted to tasks meanwhile, handlers that ended). */
const LOOK_MS = 50;

export class Drain {
  private readonly startedAt = Date.now();
  private deadline: number;
  private readonly handing = new Map<Execution, Promise<void>>();
  /** Handovers waiting for a step not marked idempotent to end (the drain waits for them too): begun anyway when the
   *  drain ends. */
  private readonly afterStep = new Map<Execution, () => void>();
  /** Calls answering inline asked to become tasks (once each). */
  private readonly promoted = new WeakSet<Execution>();
  private wake: () => void = () => undefined;

  constructor(private readonly host: DrainHost, drainMs: number, private readonly handOff: boolean) {
    this.deadline = this.startedAt + drainMs;
  }

  /** Ends the drain within `ms` from now, if that is sooner (a second stop, e.g. a second SIGTERM). */
  shorten(ms: number): void {
    this.deadline = Math.min(this.deadline, Date.now() + Math.max(0, ms));
    this.wake();
  }

  /** Hands over what may run elsewhere, waits for the rest until the drain ends, then stops and settles what is left. */
  async run(): Promise<void> {
    for (;;) {
      if (this.handOff) for (const exec of this.host.executions) this.considerHandOver(exec);
      const waiting = [...this.host.executions].some((e) => !this.handing.has(e) || this.afterStep.has(e));
      if (!waiting || Date.now() >= this.deadline) break;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, Math.min(LOOK_MS, Math.max(1, this.deadline - Date.now())));
        this.wake = () => {
          clearTimeout(timer);
          resolve();
        };
      });
    }
    // A step still running now is cut: the next run finds it interrupted, as after a crash.
    for (const begin of [...this.afterStep.values()]) begin();
    for (const exec of [...this.host.executions]) {
      if (this.handing.has(exec)) continue;
      if (this.handOff && exec.mayRunElsewhere) {
        this.handOver(exec);
        continue;
      }
      await this.endHere(exec);
    }
    await Promise.all(this.handing.values());
  }

  /** Hands the run's task over now, or once its step not marked idempotent ends. */
  private considerHandOver(exec: Execution): void {
    if (this.handing.has(exec) || exec.abandoned) return;
    if (!exec.taskId) {
      // A call still answering inline whose tool may run elsewhere becomes a task now (its caller gets the task or a
      // handle), and is handed over at the next look.
      const spec = exec.tool.spec;
      if ((spec.retrySafe ?? spec.durable) && !this.promoted.has(exec)) {
        this.promoted.add(exec);
        void exec.promote().catch(() => undefined);
      }
      return;
    }
    if (!exec.mayRunElsewhere) return;
    // Marked at once so it is considered once; the handover itself waits for the step in flight to end.
    let resolve!: () => void;
    const between = new Promise<void>((r) => (resolve = r));
    const begin = () => {
      this.afterStep.delete(exec);
      resolve();
    };
    this.afterStep.set(exec, begin);
    this.handing.set(exec, between.then(() => this.handOverNow(exec)));
    exec.whenBetweenSteps(begin);
  }

  private handOver(exec: Execution): void {
    this.handing.set(exec, this.handOverNow(exec));
  }

  /** Stops the run and parks its task due now, so another replica's claim resumes it at once. */
  private async handOverNow(exec: Execution): Promise<void> {
    const { store, log } = this.host;
    const taskId = exec.taskId!;
    exec.stopForHandOver();
    // A handler that honours its signal ends first, so the next run does not overlap it.
    const grace = Math.min(STOP_GRACE_MS, Math.max(0, this.deadline - Date.now()));
    if (grace > 0) await Promise.race([exec.done.catch(() => undefined), delay(grace)]);
    const now = store.now();
    try {
      const r = await store.park(taskId, exec.fence, { wakeAt: now, awaiting: [], handOff: true }, now);
      if (r.outcome === 'cancelled') {
        await this.host.finishQuietly(taskId, { status: 'cancelled' }, 'Cancelled: the server running it stopped after the cancel request');
        return;
      }
      this.host.publish(taskId);
      this.host.publish(QUEUE_SIGNAL_ID, 'queue');
      log.info('handed over: this replica is shutting down, another one resumes the task now', { taskId, tool: exec.tool.name });
    } catch (e) {
      if (e instanceof TaskWriteRefused) return; // it ended meanwhile, or another replica holds it
      // Still this replica's: once its replica row is gone, the others take it over like a crashed replica's.
      log.warn('could not hand a task over on shutdown; the other replicas take it over once this one has left', { taskId, error: String(e) });
    }
  }

  /** The drain is over and the run cannot go on elsewhere: it stops, and its task fails naming the stop. */
  private async endHere(exec: Execution): Promise<void> {
    exec.abandoned = true;
    exec.abort(new TaskCancelledError('shutdown'));
    const taskId = exec.taskId;
    if (!taskId) return;
    const l = await this.host.store.get(taskId).catch(() => undefined);
    if (l?.state === 'found' && l.record.retrySafe) return; // left for the next start (no handover asked)
    const cut = exec.tool.spec.lostWork ? ` (${exec.tool.spec.lostWork} was cut off)` : '';
    await this.host.finishQuietly(
      taskId,
      {
        status: 'failed',
        error: {
          code: ErrorCode.InternalError,
          message: `The server shut down before the task finished: its drain ended ${((Date.now() - this.startedAt) / 1000).toFixed(1)} s after the stop began (--drain-ms)${cut}; the tool is not declared safe to re-run`,
          data: { reason: 'shutdown' },
        },
      },
      'The server shut down before the task finished',
    ).catch(() => undefined);
  }
}
