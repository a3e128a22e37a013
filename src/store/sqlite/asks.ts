/**
 * Questions put to a caller, on SQLite: one row per question that a stream of its caller holds (see TaskStore.markAsked).
 * The row goes with its task (foreign key), so nothing outlives the task's retention.
 */
import type Database from 'better-sqlite3';
import { ASKS_MIGRATION } from '../asks.js';

export const SQLITE_ASKS_MIGRATION = {
  version: ASKS_MIGRATION,
  sql: `
CREATE TABLE question_asks (
  task_id   TEXT NOT NULL REFERENCES tasks (task_id) ON DELETE CASCADE,
  input_key TEXT NOT NULL,
  asker     TEXT NOT NULL,
  asked_at  INTEGER NOT NULL,
  PRIMARY KEY (task_id, input_key)
) WITHOUT ROWID;
`,
};

export function prepareAsks(db: Database.Database): { mark: Database.Statement; unmark: Database.Statement } {
  return {
    // Only for a task that still exists: a question of a task that is gone is asked by nobody.
    mark: db.prepare(`INSERT INTO question_asks (task_id, input_key, asker, asked_at)
      SELECT @taskId, @key, @asker, @now WHERE EXISTS (SELECT 1 FROM tasks WHERE task_id = @taskId)
      ON CONFLICT (task_id, input_key) DO NOTHING`),
    unmark: db.prepare('DELETE FROM question_asks WHERE task_id = ? AND input_key = ? AND asker = ?'),
  };
}
export type SqliteAsks = ReturnType<typeof prepareAsks>;
