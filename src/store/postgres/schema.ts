/**
 * Numbered migrations for the PostgreSQL store. Applied in order at start-up, each once, in one transaction that
 * holds an advisory lock, so replicas starting together do not race. Everything lives in the store's schema
 * (search_path), so several deployments can share one database.
 *
 * Times are epoch milliseconds from the application (bigint), except `replicas.heartbeat_at`, which is the
 * database's clock, so lease checks do not depend on the replicas' clocks agreeing.
 */
import { CLAIM_FUNCTION } from './queue.js';
import { STEPS_TABLE } from './steps.js';

export const MIGRATIONS: ReadonlyArray<{ version: number; sql: string }> = [
  {
    version: 1,
    sql: `
CREATE TABLE tasks (
  task_id             text PRIMARY KEY,
  principal           text NOT NULL,
  tool                text NOT NULL,
  args                jsonb NOT NULL,
  status              text NOT NULL CHECK (status IN ('working','input_required','completed','failed','cancelled')),
  status_message      text,
  created_at          bigint NOT NULL,
  updated_at          bigint NOT NULL,
  ttl_ms              bigint,
  expires_at          bigint,
  input_since         bigint,
  poll_interval_ms    integer NOT NULL,
  result              jsonb,
  error               jsonb,
  input_requests      jsonb NOT NULL DEFAULT '{}',
  input_responses     jsonb NOT NULL DEFAULT '{}',
  cancel_requested_at bigint,
  owner               text,
  attempts            integer NOT NULL DEFAULT 1,
  retry_safe          boolean NOT NULL DEFAULT false,
  idem_key            text,
  request_hash        text,
  client_capabilities jsonb NOT NULL DEFAULT '{}',
  version             integer NOT NULL DEFAULT 1,
  retrieved_at        bigint
);
CREATE UNIQUE INDEX tasks_idem ON tasks (principal, tool, idem_key) WHERE idem_key IS NOT NULL;
CREATE INDEX tasks_expiry ON tasks (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX tasks_unfinished ON tasks (owner) WHERE status IN ('working','input_required');
-- Terminal is final: no write may change a finished task (every state write bumps version; the only update a
-- finished task accepts is the note that its outcome was retrieved; the sweeper deletes).
CREATE FUNCTION outlast_terminal_is_final() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF OLD.status IN ('completed','failed','cancelled') AND (NEW.version <> OLD.version OR NEW.status <> OLD.status
     OR NEW.result IS DISTINCT FROM OLD.result OR NEW.error IS DISTINCT FROM OLD.error) THEN
    RAISE EXCEPTION 'outlast: task % is terminal', OLD.task_id;
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER tasks_terminal_is_final BEFORE UPDATE ON tasks FOR EACH ROW EXECUTE FUNCTION outlast_terminal_is_final();
CREATE TABLE tombstones (
  task_id    text PRIMARY KEY,
  principal  text NOT NULL,
  expired_at bigint NOT NULL,
  purge_at   bigint NOT NULL
);
CREATE INDEX tombstones_purge ON tombstones (purge_at);
CREATE TABLE replicas (
  replica_id   text PRIMARY KEY,
  host         text NOT NULL,
  pid          integer NOT NULL,
  started_at   bigint NOT NULL,
  heartbeat_at timestamptz NOT NULL
);
`,
  },
  {
    version: 2,
    sql: `
-- Which wire created a task, and the progressToken of its creating request (2025-11-25 keeps it for the task's life).
ALTER TABLE tasks ADD COLUMN origin text NOT NULL DEFAULT 'extension' CHECK (origin IN ('extension','legacy','handle'));
ALTER TABLE tasks ADD COLUMN progress_token jsonb;
-- A principal's tasks, newest first (tasks/list): one range read per page.
CREATE INDEX tasks_by_principal ON tasks (principal, created_at DESC, task_id DESC);
`,
  },
  {
    // Capacity: the run queue (queued_at: waiting for capacity, owner NULL), its claim function, and
    // deployment-wide settings.
    version: 3,
    sql: `
ALTER TABLE tasks ADD COLUMN queued_at bigint;
-- Per principal, oldest first: the claim's loose index scan over principals and each one's head.
CREATE INDEX tasks_queue ON tasks (principal, queued_at, task_id) WHERE queued_at IS NOT NULL;
-- The whole queue, oldest first: its depth and a task's position in it.
CREATE INDEX tasks_queue_age ON tasks (queued_at, task_id) WHERE queued_at IS NOT NULL;
CREATE TABLE settings (
  name       text PRIMARY KEY,
  value      text NOT NULL,
  created_at bigint NOT NULL
);
${CLAIM_FUNCTION}
`,
  },
  {
    // Work that outlasts its process: a fencing epoch bumped by every claim, parked waits (no owner, claimable from
    // queued_at = their wake time, so the claim function is replaced), and durable steps.
    version: 4,
    sql: `
ALTER TABLE tasks ADD COLUMN epoch integer NOT NULL DEFAULT 1;
ALTER TABLE tasks ADD COLUMN parked_at bigint;
${STEPS_TABLE}
${CLAIM_FUNCTION}
`,
  },
];
