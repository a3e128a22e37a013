/**
 * Group commit of step writes on PostgreSQL: the step writes that arrive in one event-loop turn (steps of different
 * runs that start or end together) go to the database as one statement, one commit, and each caller is answered only
 * after it. Each row keeps its own fence (owner, epoch, unfinished, no cancel for `started`), checked with the task row
 * locked FOR SHARE as a single write does (./steps.ts), so a row whose run lost its task is skipped and only its caller
 * is refused. A write alone in its turn is sent as the single statement (nothing to group, nothing to wait for).
 */
import { StoreUnavailableError, type StepWrite, type WriteFence } from '../types.js';
import { stepValues } from '../step-row.js';

/** Most rows in one grouped statement. */
const MAX_BATCH = 500;

interface PendingStep {
  taskId: string;
  fence: WriteFence;
  step: StepWrite;
  resolve: () => void;
  reject: (e: unknown) => void;
}

/** What the grouping needs from the store. */
export interface StepWriteLanes {
  /** The single fenced write (refuses with TaskWriteRefused). */
  one(taskId: string, fence: WriteFence, step: StepWrite): Promise<void>;
  /** The grouped write, one array per column; returns the (task_id, step_key) of the rows written. */
  many(cols: unknown[][]): Promise<Array<{ task_id: string; step_key: string }>>;
  /** Why a write of this run was refused (the task as it is now). */
  refusal(taskId: string, fence: WriteFence): Promise<Error>;
}

export class StepWriteGroups {
  private pending: PendingStep[] = [];
  private scheduled = false;

  constructor(private readonly lanes: StepWriteLanes) {}

  write(taskId: string, fence: WriteFence, step: StepWrite): Promise<void> {
    return new Promise((resolve, reject) => {
      this.pending.push({ taskId, fence, step, resolve, reject });
      if (!this.scheduled) {
        this.scheduled = true;
        setImmediate(() => this.flush());
      }
    });
  }

  private flush(): void {
    this.scheduled = false;
    const all = this.pending;
    this.pending = [];
    if (all.length === 1) {
      // Alone in its turn (one handler stepping): the single statement, without the grouping's bookkeeping.
      const p = all[0]!;
      this.lanes.one(p.taskId, p.fence, p.step).then(p.resolve, p.reject);
      return;
    }
    // A key written twice in one turn goes in a later statement (one statement cannot update a row twice), in order.
    const rounds: PendingStep[][] = [];
    const seen = new Map<string, number>();
    for (const p of all) {
      const k = `${p.taskId}\u0000${p.step.key}`;
      const n = seen.get(k) ?? 0;
      seen.set(k, n + 1);
      (rounds[n] ??= []).push(p);
    }
    void rounds.reduce<Promise<void>>((prev, round) => prev.then(() => this.sendRound(round)), Promise.resolve());
  }

  private async sendRound(round: PendingStep[]): Promise<void> {
    const sends: Promise<void>[] = [];
    for (let i = 0; i < round.length; i += MAX_BATCH) sends.push(this.send(round.slice(i, i + MAX_BATCH)));
    await Promise.all(sends);
  }

  private async send(batch: PendingStep[]): Promise<void> {
    if (batch.length === 1) {
      const p = batch[0]!;
      return this.lanes.one(p.taskId, p.fence, p.step).then(p.resolve, p.reject);
    }
    const cols: unknown[][] = Array.from({ length: 15 }, () => new Array(batch.length));
    batch.forEach((p, i) => {
      const row = [p.taskId, p.fence.owner, p.fence.epoch, ...stepValues(p.step)];
      for (let c = 0; c < 15; c++) cols[c]![i] = row[c];
    });
    let written: Set<string>;
    try {
      written = new Set((await this.lanes.many(cols)).map((r) => `${r.task_id}\u0000${r.step_key}`));
    } catch (e) {
      // The store did not answer: every row's fate is the same unknown (retrying them one by one would wait again).
      if (e instanceof StoreUnavailableError) return batch.forEach((p) => p.reject(e));
      // Anything else (a deadlock with a takeover, one bad row) must not fail the others: each on its own.
      await Promise.all(batch.map((p) => this.lanes.one(p.taskId, p.fence, p.step).then(p.resolve, p.reject)));
      return;
    }
    for (const p of batch) {
      if (written.has(`${p.taskId}\u0000${p.step.key}`)) p.resolve();
      else this.lanes.refusal(p.taskId, p.fence).then(p.reject, p.reject);
    }
  }
}
