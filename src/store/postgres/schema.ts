/**
 * Numbered migrations for the PostgreSQL store. Applied in order at start-up, each once, in one transaction that
 * holds an advisory lock, so replicas starting together do not race. Everything lives in the store's schema
 * (search_path), so several deployments can share one database.
 *
 * Times are epoch milliseconds from the application (bigint), except `replicas.heartbeat_at`, which is the
 * database's clock, so lease checks do not depend on the replicas' clocks agreeing.
 *
 * Every index says which query uses it ("Used by:"), as EXPLAIN showed on 60,000 analyzed tasks (2026-12-02, the
 * statements the store kit runs, generic plans). A creation writes the unconditional ones (the key, tasks_by_principal,
 * tasks_ops_created, _status, _tool) and the partial ones its row matches (tasks_unfinished; tasks_expiry with a TTL;
 * tasks_idem with a key; the queue's when queued); each of those is read by the query named beside it.
 */
import { CLAIM_FUNCTION } from './queue.js';
import type { Migration } from '../schema-version.js';
import { STEPS_TABLE } from './steps.js';

/**
 * The transition history: one row-level trigger whose function writes an event per kind of change (its WHEN clause
 * watches the columns that matter). Migration 5 created it and migration 7 replaced it with the kinds of the run
 * queue and parking (started, parked, resumed); both apply this text, so a new database gets it once, complete.
 */
const HISTORY_TRIGGER_SQL = `CREATE OR REPLACE FUNCTION outlast_history_changed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE keys text;
BEGIN
  IF NEW.input_requests IS DISTINCT FROM OLD.input_requests AND NEW.status = 'input_required' THEN
    SELECT string_agg(k, ', ') INTO keys FROM jsonb_object_keys(NEW.input_requests) k WHERE NOT OLD.input_requests ? k;
    IF keys IS NOT NULL THEN
      INSERT INTO task_events (task_id, at, kind, actor, detail) VALUES (NEW.task_id, NEW.updated_at, 'input_asked', NEW.owner, keys);
    END IF;
  END IF;
  IF NEW.input_responses IS DISTINCT FROM OLD.input_responses THEN
    SELECT string_agg(k, ', ') INTO keys FROM jsonb_object_keys(NEW.input_responses) k WHERE NOT OLD.input_responses ? k;
    IF keys IS NOT NULL THEN
      INSERT INTO task_events (task_id, at, kind, actor, detail) VALUES (NEW.task_id, NEW.updated_at, 'input_answered', NEW.principal, keys);
    END IF;
  END IF;
  IF OLD.cancel_requested_at IS NULL AND NEW.cancel_requested_at IS NOT NULL THEN
    INSERT INTO task_events (task_id, at, kind, actor, detail)
      VALUES (NEW.task_id, NEW.cancel_requested_at, 'cancel_requested', coalesce('operator:' || NEW.cancelled_by, NEW.principal), NEW.cancel_reason);
  END IF;
  IF NEW.attempts > OLD.attempts THEN
    INSERT INTO task_events (task_id, at, kind, actor, detail)
      VALUES (NEW.task_id, NEW.updated_at, 'taken_over', NEW.owner, 'attempt ' || NEW.attempts || coalesce(', from ' || OLD.owner, ''));
  END IF;
  IF OLD.queued_at IS NOT NULL AND NEW.queued_at IS NULL AND OLD.parked_at IS NULL THEN
    INSERT INTO task_events (task_id, at, kind, actor, detail)
      VALUES (NEW.task_id, NEW.updated_at, 'started', NEW.owner, 'after ' || ((NEW.updated_at - OLD.queued_at) / 1000) || ' s in the queue');
  END IF;
  IF OLD.parked_at IS NULL AND NEW.parked_at IS NOT NULL THEN
    INSERT INTO task_events (task_id, at, kind, actor, detail)
      VALUES (NEW.task_id, NEW.parked_at, 'parked', OLD.owner, CASE WHEN NEW.status = 'input_required' THEN 'waiting for input' ELSE 'sleeping' END);
  END IF;
  IF OLD.parked_at IS NOT NULL AND NEW.parked_at IS NULL AND NEW.owner IS NOT NULL THEN
    INSERT INTO task_events (task_id, at, kind, actor, detail) VALUES (NEW.task_id, NEW.updated_at, 'resumed', NEW.owner, 'claim ' || NEW.epoch);
  END IF;
  IF NEW.status IN ('completed','failed','cancelled') AND OLD.status NOT IN ('completed','failed','cancelled') THEN
    INSERT INTO task_events (task_id, at, kind, actor, detail)
      VALUES (NEW.task_id, NEW.updated_at, NEW.status, NEW.owner, CASE WHEN NEW.status = 'failed' THEN NEW.error->>'message' ELSE NEW.status_message END);
  END IF;
  IF OLD.acknowledged_at IS NULL AND NEW.acknowledged_at IS NOT NULL THEN
    INSERT INTO task_events (task_id, at, kind, actor, detail) VALUES (NEW.task_id, NEW.acknowledged_at, 'acknowledged', 'operator:' || NEW.acknowledged_by, NULL);
  END IF;
  RETURN NULL;
END $$;
CREATE TRIGGER tasks_history_changed AFTER UPDATE ON tasks FOR EACH ROW
  WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.cancel_requested_at IS DISTINCT FROM NEW.cancel_requested_at
    OR OLD.attempts IS DISTINCT FROM NEW.attempts OR OLD.input_requests IS DISTINCT FROM NEW.input_requests
    OR OLD.input_responses IS DISTINCT FROM NEW.input_responses OR OLD.acknowledged_at IS DISTINCT FROM NEW.acknowledged_at
    OR OLD.queued_at IS DISTINCT FROM NEW.queued_at OR OLD.parked_at IS DISTINCT FROM NEW.parked_at)
  EXECUTE FUNCTION outlast_history_changed();
`;

import { POSTGRES_EVENTS_MIGRATION } from './events.js';
import { POSTGRES_ASKS_MIGRATION } from './asks.js';
import { POSTGRES_OUTPUT_MIGRATION } from './output.js';
import { POSTGRES_OUTPUT_EVENTS_MIGRATION } from './output-events.js';
import { POSTGRES_OPERATOR_SESSIONS_MIGRATION } from './operator-sessions.js';
import { POSTGRES_COMMIT_CLAIM_MIGRATION, POSTGRES_LEAN_EVENT_LOG_MIGRATION } from './commit-claim.js';

export const MIGRATIONS: ReadonlyArray<Migration> = [
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
-- Used by: a creation with an idempotency key, its lookup of the task that key already names (byIdem: principal, tool, key).
CREATE UNIQUE INDEX tasks_idem ON tasks (principal, tool, idem_key) WHERE idem_key IS NOT NULL;
-- Used by: the sweeper's scan for tasks past their TTL (expires_at <= now, oldest first).
CREATE INDEX tasks_expiry ON tasks (expires_at) WHERE expires_at IS NOT NULL;
-- Used by: a replica's pending cancels (owner = me, cancel requested, unfinished), recovery's scan for unfinished tasks whose owner is gone, and the
-- claim's count of running tasks (per principal, per limited tool).
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
-- Used by: the sweeper's purge of tombstones past purge_at.
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
-- Used by: tasks/list pages (principal, then a row-value range), and admission's count of one principal's stored and
-- queued tasks.
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
-- Used by: the claim (outlast_claim, ./queue.ts): its loose index scan over the principals with queued work and each one's head.
CREATE INDEX tasks_queue ON tasks (principal, queued_at, task_id) WHERE queued_at IS NOT NULL;
-- The whole queue, oldest first: its depth and a task's position in it.
-- Used by: the queue's depth and a queued task's position (index only), the next wake (min(queued_at) > now), and
-- the operator's list of queued tasks.
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
  {
    // Operations (dashboard, alerts). Numbered 5: 3 and 4 belong to the run queue and durable steps.
    version: 5,
    sql: `
-- Who acknowledged a failure and when (a client reading it is retrieved_at); who asked for a cancel and why
-- (NULL: the caller); when the unread-failure alert was written (each failure alerts once).
ALTER TABLE tasks ADD COLUMN acknowledged_at bigint, ADD COLUMN acknowledged_by text, ADD COLUMN cancelled_by text,
  ADD COLUMN cancel_reason text, ADD COLUMN unread_alert_at bigint;
-- Operator listings: each filter is one range read of an index, newest first.
-- Used by: the operator's task list without a filter (and filters no other index serves), newest first.
CREATE INDEX tasks_ops_created ON tasks (created_at DESC, task_id DESC);
-- Used by: the operator's task list filtered by status.
CREATE INDEX tasks_ops_status ON tasks (status, created_at DESC, task_id DESC);
-- Used by: the operator's task list filtered by tool.
CREATE INDEX tasks_ops_tool ON tasks (tool, created_at DESC, task_id DESC);
-- Used by: the operator's list of unread failures and their count (the dashboard's badge).
CREATE INDEX tasks_ops_unread ON tasks (created_at DESC, task_id DESC)
  WHERE status = 'failed' AND retrieved_at IS NULL AND acknowledged_at IS NULL;
-- Used by: the unread-failure alert scan (failures unread for longer than the alert's delay).
CREATE INDEX tasks_ops_unread_due ON tasks (updated_at)
  WHERE status = 'failed' AND retrieved_at IS NULL AND acknowledged_at IS NULL AND unread_alert_at IS NULL;
-- Used by: the dashboard's tasks waiting for input, longest waiting first.
CREATE INDEX tasks_ops_waiting ON tasks (input_since) WHERE status = 'input_required';

-- Counts by state, kept exact by triggers. Sharded by the task id's first character (random), so concurrent
-- writers rarely wait on the same counter row; each statement locks its counter rows in one order (no deadlock).
CREATE TABLE task_counts (status text NOT NULL, shard text NOT NULL, n bigint NOT NULL, PRIMARY KEY (status, shard));
INSERT INTO task_counts (status, shard, n) SELECT status, left(task_id, 1), count(*) FROM tasks GROUP BY 1, 2;

CREATE TABLE task_events (
  event_id bigserial PRIMARY KEY,
  task_id  text NOT NULL,
  at       bigint NOT NULL,
  kind     text NOT NULL,
  actor    text,
  detail   text
);
-- Used by: a task's history (the dashboard's task page), and the delete of its history when the task leaves.
CREATE INDEX task_events_by_task ON task_events (task_id, event_id);

CREATE TABLE alerts (
  alert_id        text PRIMARY KEY,
  dedupe_key      text NOT NULL UNIQUE,
  kind            text NOT NULL,
  task_id         text,
  tool            text,
  principal       text,
  message         text NOT NULL,
  destination     text NOT NULL,
  data            jsonb NOT NULL,
  created_at      bigint NOT NULL,
  state           text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending','delivered','failed')),
  attempts        integer NOT NULL DEFAULT 0,
  next_attempt_at bigint NOT NULL,
  claimed_by      text,
  claimed_until   bigint,
  last_status     integer,
  last_error      text,
  delivered_at    bigint
);
-- Used by: the alert delivery claim's scan for pending alerts that are due (next_attempt_at <= now).
CREATE INDEX alerts_due ON alerts (next_attempt_at) WHERE state = 'pending';
-- Used by: the dashboard's alert list, newest first.
CREATE INDEX alerts_recent ON alerts (created_at DESC, alert_id DESC);

CREATE TABLE task_subscriptions (
  task_id     text NOT NULL,
  destination text NOT NULL,
  PRIMARY KEY (task_id, destination)
);

CREATE FUNCTION outlast_now_ms() RETURNS bigint LANGUAGE sql AS $$ SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint $$;
CREATE FUNCTION outlast_alert_id() RETURNS text LANGUAGE sql AS $$ SELECT 'msg_' || substr(md5(random()::text || clock_timestamp()::text), 1, 24) $$;

CREATE FUNCTION outlast_counts_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO task_counts (status, shard, n)
    SELECT status, left(task_id, 1), count(*) FROM new_rows GROUP BY 1, 2 ORDER BY 1, 2
  ON CONFLICT (status, shard) DO UPDATE SET n = task_counts.n + excluded.n;
  RETURN NULL;
END $$;
CREATE TRIGGER tasks_count_insert AFTER INSERT ON tasks REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION outlast_counts_insert();

-- A status change: the counters move, and each push the caller asked for is queued in the same transaction.
CREATE FUNCTION outlast_status_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO task_counts (status, shard, n)
    SELECT s, left(NEW.task_id, 1), d FROM (VALUES (OLD.status, -1), (NEW.status, 1)) v(s, d) ORDER BY 1
  ON CONFLICT (status, shard) DO UPDATE SET n = task_counts.n + excluded.n;
  INSERT INTO alerts (alert_id, dedupe_key, kind, task_id, tool, principal, message, destination, data, created_at, next_attempt_at)
    SELECT outlast_alert_id(), 'task-status:' || NEW.task_id || ':' || NEW.status || ':' || s.destination, 'task-status', NEW.task_id,
      NEW.tool, NEW.principal, 'task ' || NEW.task_id || ' is ' || NEW.status, s.destination,
      jsonb_build_object('taskId', NEW.task_id, 'status', NEW.status, 'statusMessage', NEW.status_message, 'updatedAt', NEW.updated_at),
      NEW.updated_at, NEW.updated_at
    FROM task_subscriptions s WHERE s.task_id = NEW.task_id
  ON CONFLICT DO NOTHING;
  RETURN NULL;
END $$;
CREATE TRIGGER tasks_status_changed AFTER UPDATE ON tasks FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status)
  EXECUTE FUNCTION outlast_status_changed();

-- A task leaves (the sweeper made it a tombstone): counts, history and pushes go; unfinished work that expired
-- is an alert, in the sweeper's statement.
CREATE FUNCTION outlast_tasks_gone() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO task_counts (status, shard, n)
    SELECT status, left(task_id, 1), -count(*) FROM old_rows GROUP BY 1, 2 ORDER BY 1, 2
  ON CONFLICT (status, shard) DO UPDATE SET n = task_counts.n + excluded.n;
  DELETE FROM task_events e USING old_rows o WHERE e.task_id = o.task_id;
  DELETE FROM task_subscriptions s USING old_rows o WHERE s.task_id = o.task_id;
  INSERT INTO alerts (alert_id, dedupe_key, kind, task_id, tool, principal, message, destination, data, created_at, next_attempt_at)
    SELECT outlast_alert_id(), 'expired-unfinished:' || task_id, 'expired-unfinished', task_id, tool, principal,
      'task ' || task_id || ' (' || tool || ') reached its TTL while still ' || status, 'alerts',
      jsonb_build_object('taskId', task_id, 'tool', tool, 'status', status), outlast_now_ms(), outlast_now_ms()
    FROM old_rows WHERE status IN ('working','input_required')
  ON CONFLICT DO NOTHING;
  RETURN NULL;
END $$;
CREATE TRIGGER tasks_gone AFTER DELETE ON tasks REFERENCING OLD TABLE AS old_rows
  FOR EACH STATEMENT EXECUTE FUNCTION outlast_tasks_gone();

-- The transition history (the store enables or disables this trigger at start-up: history on or off). Creation
-- writes no event: the row records it, and the history read puts it first. A new transition (queued, started,
-- parked, woken) is one more branch of outlast_history_changed.
${HISTORY_TRIGGER_SQL}`,
  },
  {
    // Traces and per-tool durations. Numbered 6: 4 belongs to durable steps, 5 to operations.
    version: 6,
    sql: `
-- The creating call's trace context ({traceparent, tracestate}): a run started from the row links to it.
ALTER TABLE tasks ADD COLUMN trace_context jsonb;
-- Finished tasks by when they finished, covering what the per-tool durations read (an index-only range scan).
-- Used by: the per-tool durations (a range of recently finished tasks, read from the index alone).
CREATE INDEX tasks_ops_finished ON tasks (updated_at DESC) INCLUDE (tool, created_at, status) WHERE status IN ('completed','failed','cancelled');
`,
  },
  {
    // Operations views of queued and parked work: parked tasks by when they are due, and three more history kinds
    // (started: claimed from the run queue; parked; resumed: claimed again after parking).
    version: 7,
    sql: `
-- Used by: the operator's list of parked tasks, by when they are due.
CREATE INDEX tasks_ops_parked ON tasks (queued_at, task_id) WHERE parked_at IS NOT NULL;
DROP TRIGGER tasks_history_changed ON tasks;
${HISTORY_TRIGGER_SQL}`,
  },
  {
    // Fair to every caller: the claim takes the claimer's per-principal bound (a new signature, so the old one goes).
    version: 8,
    sql: `
DROP FUNCTION IF EXISTS outlast_claim(text, bigint, text[], integer[], text[], integer[], integer);
${CLAIM_FUNCTION}`,
  },
  POSTGRES_EVENTS_MIGRATION,
  POSTGRES_ASKS_MIGRATION,
  POSTGRES_OUTPUT_MIGRATION,
  POSTGRES_OUTPUT_EVENTS_MIGRATION,
  POSTGRES_COMMIT_CLAIM_MIGRATION,
  POSTGRES_OPERATOR_SESSIONS_MIGRATION,
  POSTGRES_LEAN_EVENT_LOG_MIGRATION,
];

/** The history trigger, switched on or off at start-up (`ALTER TABLE … ENABLE/DISABLE TRIGGER`). */
export const HISTORY_TRIGGERS = ['tasks_history_changed'] as const;
