/**
 * Durable steps on PostgreSQL: the statements of the task_steps table. A step write is one statement: its first part
 * locks the task row FOR SHARE only while the run that writes still holds the task (owner and epoch, unfinished; a
 * `started` row also needs no cancel requested), and the row is inserted (or replaced) only if that matched. FOR SHARE
 * conflicts with the UPDATE of a takeover or a claim, so a write and a takeover serialise: a write after the takeover
 * re-checks the new row and matches nothing, and a replica that lost the task commits nothing. Values are text, not
 * jsonb: the exact JSON is kept (key order, U+0000), so what a replay returns is what the first run returned.
 */
import { STEP_COLUMNS } from '../step-row.js';

const INSERT_STEP = `WITH holder AS (
      SELECT task_id, epoch FROM tasks
      WHERE task_id = $1 AND owner = $2 AND epoch = $3 AND status IN ('working','input_required')
        AND ($8::text <> 'started' OR cancel_requested_at IS NULL)
      FOR SHARE
    )
    INSERT INTO task_steps (task_id, epoch, step_key, name, kind, seq, state, tries, idempotent, result, error, bytes, started_at, finished_at)
    SELECT task_id, epoch, $4::text, $5::text, $6::text, $7::int, $8::text, $9::int, $10::boolean, $11::text, $12::text, $13::int, $14::bigint, $15::bigint
    FROM holder`;
const REPLACE_STEP = `ON CONFLICT (task_id, step_key) DO UPDATE SET epoch = excluded.epoch, name = excluded.name, kind = excluded.kind, seq = excluded.seq,
      state = excluded.state, tries = excluded.tries, idempotent = excluded.idempotent, result = excluded.result, error = excluded.error,
      bytes = excluded.bytes, started_at = excluded.started_at, finished_at = excluded.finished_at`;

export const STEPS_QUERIES = {
  listSteps: `SELECT ${STEP_COLUMNS} FROM task_steps WHERE task_id = $1 ORDER BY seq, step_key`,
  writeStep: `${INSERT_STEP}
    ${REPLACE_STEP}`,
  // A key's first write (StepWrite.firstWrite): no look for a row to replace; one found anyway fails with 23505.
  insertStep: INSERT_STEP,
  // The grouped form (./step-batch.ts): one array per column, each row with its own fence, checked as above.
  writeSteps: `WITH w AS (
      SELECT task_id, owner, epoch, step_key, name, kind, seq, state, tries, idempotent, result, error, bytes, started_at, finished_at FROM unnest($1::text[], $2::text[], $3::int[], $4::text[], $5::text[], $6::text[], $7::int[], $8::text[], $9::int[],
        $10::boolean[], $11::text[], $12::text[], $13::int[], $14::bigint[], $15::bigint[])
        AS w(task_id, owner, epoch, step_key, name, kind, seq, state, tries, idempotent, result, error, bytes, started_at, finished_at)
    ), holder AS (
      SELECT w.task_id, w.step_key, w.name, w.kind, w.seq, w.state, w.tries, w.idempotent, w.result, w.error, w.bytes, w.started_at, w.finished_at,
        t.epoch AS task_epoch FROM w JOIN tasks t ON t.task_id = w.task_id
      WHERE t.owner = w.owner AND t.epoch = w.epoch AND t.status IN ('working','input_required')
        AND (w.state <> 'started' OR t.cancel_requested_at IS NULL)
      FOR SHARE OF t
    )
    INSERT INTO task_steps (task_id, epoch, step_key, name, kind, seq, state, tries, idempotent, result, error, bytes, started_at, finished_at)
    SELECT task_id, task_epoch, step_key, name, kind, seq, state, tries, idempotent, result, error, bytes, started_at, finished_at
    FROM holder
    ON CONFLICT (task_id, step_key) DO UPDATE SET epoch = excluded.epoch, name = excluded.name, kind = excluded.kind, seq = excluded.seq,
      state = excluded.state, tries = excluded.tries, idempotent = excluded.idempotent, result = excluded.result, error = excluded.error,
      bytes = excluded.bytes, started_at = excluded.started_at, finished_at = excluded.finished_at
    RETURNING task_id, step_key`,
};

/** Part of migration 4: the step table (steps of a swept task are deleted with it, in the sweep's statement). */
export const STEPS_TABLE = `
CREATE TABLE task_steps (
  task_id     text NOT NULL,
  step_key    text NOT NULL,
  name        text NOT NULL,
  kind        text NOT NULL CHECK (kind IN ('step','sleep')),
  seq         integer NOT NULL,
  state       text NOT NULL CHECK (state IN ('started','completed','failed')),
  epoch       integer NOT NULL,
  tries       integer NOT NULL,
  idempotent  boolean NOT NULL,
  result      text,
  error       text,
  bytes       integer NOT NULL,
  started_at  bigint NOT NULL,
  finished_at bigint,
  PRIMARY KEY (task_id, step_key)
);`;
