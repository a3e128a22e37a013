/**
 * Durable steps on SQLite: the statements of the task_steps table. A step write is one conditional statement run in
 * the store's write transaction: it inserts (or replaces) the row only while the run that writes it still holds the
 * task (owner and epoch, unfinished; a `started` row also needs no cancel requested), so a replica that lost the task
 * commits nothing. The processes on one file take turns on its write lock, which makes the check and the write one step.
 */
import type Database from 'better-sqlite3';
import { refusalOf } from '../rules.js';
import { STEP_COLUMNS, stepValues, toStep, type StepRow } from '../step-row.js';
import type { TaskStatus } from '../../protocol/index.js';
import type { StepRecord, StepWrite, WriteFence } from '../types.js';

const UPSERT = `INSERT INTO task_steps (task_id, epoch, step_key, name, kind, seq, state, tries, idempotent, result, error, bytes, started_at, finished_at)
  SELECT t.task_id, t.epoch, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ? FROM tasks t
  WHERE t.task_id = ? AND t.owner = ? AND t.epoch = ? AND t.status IN ('working','input_required')
    AND (? <> 'started' OR t.cancel_requested_at IS NULL)
  ON CONFLICT (task_id, step_key) DO UPDATE SET epoch = excluded.epoch, name = excluded.name, kind = excluded.kind, seq = excluded.seq,
    state = excluded.state, tries = excluded.tries, idempotent = excluded.idempotent, result = excluded.result, error = excluded.error,
    bytes = excluded.bytes, started_at = excluded.started_at, finished_at = excluded.finished_at`;

export function prepareSteps(db: Database.Database) {
  const list = db.prepare(`SELECT ${STEP_COLUMNS} FROM task_steps WHERE task_id = ? ORDER BY seq, step_key`);
  const upsert = db.prepare(UPSERT);
  const fence = db.prepare('SELECT status, owner, epoch, cancel_requested_at FROM tasks WHERE task_id = ?');
  const remove = db.prepare('DELETE FROM task_steps WHERE task_id = ?');
  return {
    list(taskId: string): StepRecord[] {
      return (list.all(taskId) as StepRow[]).map(toStep);
    },
    /** Runs inside the store's write transaction. */
    write(taskId: string, f: WriteFence, step: StepWrite): void {
      const values = stepValues(step).map((v) => (typeof v === 'boolean' ? (v ? 1 : 0) : v));
      if (upsert.run(...values, taskId, f.owner, f.epoch, step.state).changes > 0) return;
      const row = fence.get(taskId) as { status: TaskStatus; owner: string | null; epoch: number; cancel_requested_at: number | null } | undefined;
      throw refusalOf(taskId, row && { status: row.status, owner: row.owner, epoch: row.epoch, cancelRequestedAt: row.cancel_requested_at }, f.owner, f.epoch);
    },
    /** A swept task's steps go with it (inside the sweep's transaction). */
    deleteOf(taskId: string): void {
      remove.run(taskId);
    },
  };
}
export type SqliteSteps = ReturnType<typeof prepareSteps>;
