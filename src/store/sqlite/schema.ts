/** Numbered migrations for the SQLite store. Applied in order at start-up, each once, in a transaction. */
export const MIGRATIONS: ReadonlyArray<{ version: number; sql: string }> = [
  {
    version: 1,
    sql: `
CREATE TABLE tasks (
  task_id             TEXT PRIMARY KEY,
  principal           TEXT NOT NULL,
  tool                TEXT NOT NULL,
  args                TEXT NOT NULL,
  status              TEXT NOT NULL CHECK (status IN ('working','input_required','completed','failed','cancelled')),
  status_message      TEXT,
  created_at          INTEGER NOT NULL,
  updated_at          INTEGER NOT NULL,
  ttl_ms              INTEGER,
  expires_at          INTEGER,
  input_since         INTEGER,
  poll_interval_ms    INTEGER NOT NULL,
  result              TEXT,
  error               TEXT,
  input_requests      TEXT NOT NULL DEFAULT '{}',
  input_responses     TEXT NOT NULL DEFAULT '{}',
  cancel_requested_at INTEGER,
  owner               TEXT,
  attempts            INTEGER NOT NULL DEFAULT 1,
  retry_safe          INTEGER NOT NULL DEFAULT 0,
  idem_key            TEXT,
  request_hash        TEXT,
  client_capabilities TEXT NOT NULL DEFAULT '{}',
  version             INTEGER NOT NULL DEFAULT 1,
  retrieved_at        INTEGER
);
CREATE UNIQUE INDEX tasks_idem ON tasks (principal, tool, idem_key) WHERE idem_key IS NOT NULL;
CREATE INDEX tasks_expiry ON tasks (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX tasks_unfinished ON tasks (owner) WHERE status IN ('working','input_required');
-- Terminal is final: no write may change a finished task (every state write bumps version; the only
-- update a finished task accepts is the note that its outcome was retrieved; the sweeper deletes).
CREATE TRIGGER tasks_terminal_is_final BEFORE UPDATE ON tasks
  WHEN OLD.status IN ('completed','failed','cancelled') AND (NEW.version <> OLD.version OR NEW.status <> OLD.status
    OR NEW.result IS NOT OLD.result OR NEW.error IS NOT OLD.error)
  BEGIN SELECT RAISE(ABORT, 'outlast: task is terminal'); END;
CREATE TABLE tombstones (
  task_id    TEXT PRIMARY KEY,
  principal  TEXT NOT NULL,
  expired_at INTEGER NOT NULL,
  purge_at   INTEGER NOT NULL
);
CREATE INDEX tombstones_purge ON tombstones (purge_at);
CREATE TABLE replicas (
  replica_id   TEXT PRIMARY KEY,
  host         TEXT NOT NULL,
  pid          INTEGER NOT NULL,
  started_at   INTEGER NOT NULL,
  heartbeat_at INTEGER NOT NULL
);
`,
  },
  {
    version: 2,
    sql: `
-- Which wire created a task, and the progressToken of its creating request (2025-11-25 keeps it for the task's life).
ALTER TABLE tasks ADD COLUMN origin TEXT NOT NULL DEFAULT 'extension' CHECK (origin IN ('extension','legacy','handle'));
ALTER TABLE tasks ADD COLUMN progress_token TEXT;
-- A principal's tasks, newest first (tasks/list): one range read per page.
CREATE INDEX tasks_by_principal ON tasks (principal, created_at DESC, task_id DESC);
`,
  },
  {
    // Capacity: the run queue (queued_at: waiting for capacity, owner NULL) and deployment-wide settings.
    version: 3,
    sql: `
ALTER TABLE tasks ADD COLUMN queued_at INTEGER;
-- Per principal, oldest first: the claim's loose index scan over principals and each one's head.
CREATE INDEX tasks_queue ON tasks (principal, queued_at, task_id) WHERE queued_at IS NOT NULL;
-- The whole queue, oldest first: its depth and a task's position in it.
CREATE INDEX tasks_queue_age ON tasks (queued_at, task_id) WHERE queued_at IS NOT NULL;
CREATE TABLE settings (
  name       TEXT PRIMARY KEY,
  value      TEXT NOT NULL,
  created_at INTEGER NOT NULL
);
`,
  },
  {
    // Work that outlasts its process: a fencing epoch bumped by every claim, parked waits (no owner, claimable from
    // queued_at = their wake time), and durable steps.
    version: 4,
    sql: `
ALTER TABLE tasks ADD COLUMN epoch INTEGER NOT NULL DEFAULT 1;
ALTER TABLE tasks ADD COLUMN parked_at INTEGER;
CREATE TABLE task_steps (
  task_id     TEXT NOT NULL,
  step_key    TEXT NOT NULL,
  name        TEXT NOT NULL,
  kind        TEXT NOT NULL CHECK (kind IN ('step','sleep')),
  seq         INTEGER NOT NULL,
  state       TEXT NOT NULL CHECK (state IN ('started','completed','failed')),
  epoch       INTEGER NOT NULL,
  tries       INTEGER NOT NULL,
  idempotent  INTEGER NOT NULL,
  result      TEXT,
  error       TEXT,
  bytes       INTEGER NOT NULL,
  started_at  INTEGER NOT NULL,
  finished_at INTEGER,
  PRIMARY KEY (task_id, step_key)
);
`,
  },
];
