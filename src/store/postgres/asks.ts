/**
 * Questions put to a caller, on PostgreSQL: one row per question that a stream of its caller holds (see
 * TaskStore.markAsked). The row goes with its task (foreign key), so nothing outlives the task's retention.
 */
import { ASKS_MIGRATION } from '../asks.js';

export const POSTGRES_ASKS_MIGRATION = {
  version: ASKS_MIGRATION,
  sql: `
CREATE TABLE question_asks (
  task_id   text NOT NULL REFERENCES tasks (task_id) ON DELETE CASCADE,
  input_key text NOT NULL,
  asker     text NOT NULL,
  asked_at  bigint NOT NULL,
  PRIMARY KEY (task_id, input_key)
);
`,
};

export const ASK_QUERIES = {
  // Only for a task that still exists (the foreign key would refuse it, as an error instead of "not marked").
  askMark: `INSERT INTO question_asks (task_id, input_key, asker, asked_at)
    SELECT $1, $2, $3, $4 WHERE EXISTS (SELECT 1 FROM tasks WHERE task_id = $1)
    ON CONFLICT (task_id, input_key) DO NOTHING`,
  askUnmark: 'DELETE FROM question_asks WHERE task_id = $1 AND input_key = $2 AND asker = $3',
};
