/**
 * Parking on SQLite: a durable handler's wait lets go of its task (rules.parkChange: owner cleared, parked_at set,
 * claimable from its wake time), and the earliest wake to come. Resuming is the run queue's claim (queue.ts): a parked
 * task is claimable once queued_at <= now, like a queued one.
 */
import type Database from 'better-sqlite3';
import { TASK_COLUMNS } from '../task-columns.js';

export function prepareParking(db: Database.Database): { park: Database.Statement; nextWake: Database.Statement } {
  return {
    /** Conditional on the version read in the same write transaction. */
    park: db.prepare(`UPDATE tasks SET owner = NULL, parked_at = @parkedAt, queued_at = @queuedAt, updated_at = @parkedAt, version = version + 1
      WHERE task_id = @taskId AND version = @version RETURNING ${TASK_COLUMNS}`),
    /** Only parked tasks are claimable in the future. */
    nextWake: db.prepare('SELECT min(queued_at) AS t FROM tasks WHERE queued_at > ?'),
  };
}
export type SqliteParking = ReturnType<typeof prepareParking>;
