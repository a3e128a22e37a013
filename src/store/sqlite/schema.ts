import { SQLITE_EVENTS_MIGRATION } from './events.js';
import type { Migration } from '../schema-version.js';
import { SQLITE_ASKS_MIGRATION } from './asks.js';
import { SQLITE_OUTPUT_MIGRATION } from './output.js';
import { SQLITE_OUTPUT_EVENTS_MIGRATION } from './output-events.js';
import { SQLITE_OPERATOR_SESSIONS_MIGRATION } from './operator-sessions.js';

/**
 * Numbered migrations for the SQLite store. Applied in order at start-up, each once, in a transaction.
 *
 * Every index says which query uses it ("Used by:"), as EXPLAIN QUERY PLAN showed for every statement the store
 * prepares (2026-12-02; the store never runs ANALYZE, so these plans are the ones a deployment gets). A creation
 * writes the unconditional ones (the task id's, tasks_by_principal, tasks_ops_created, _status, _tool) and the partial
 * ones its row matches (tasks_unfinished; tasks_expiry with a TTL; tasks_idem with a key; the queue's when queued).
 */
export const MIGRATIONS: ReadonlyArray<Migration> = [
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
-- Used by: a creation with an idempotency key, its lookup of the task that key already names (byIdem: principal, tool, key).
CREATE UNIQUE INDEX tasks_idem ON tasks (principal, tool, idem_key) WHERE idem_key IS NOT NULL;
-- Used by: the sweeper's scan for tasks past their TTL (expires_at <= now, oldest first).
CREATE INDEX tasks_expiry ON tasks (expires_at) WHERE expires_at IS NOT NULL;
-- Used by: a replica's pending cancels (owner = me, cancel requested, unfinished).
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
-- Used by: the sweeper's purge of tombstones past purge_at.
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
-- Used by: tasks/list pages (principal, then a row-value range), and admission's count of one principal's stored and
-- queued tasks.
CREATE INDEX tasks_by_principal ON tasks (principal, created_at DESC, task_id DESC);
`,
  },
  {
    // Capacity: the run queue (queued_at: waiting for capacity, owner NULL) and deployment-wide settings.
    version: 3,
    sql: `
ALTER TABLE tasks ADD COLUMN queued_at INTEGER;
-- Per principal, oldest first: the claim's loose index scan over principals and each one's head.
-- Used by: the claim (./queue.ts): its loose index scan over the principals with queued work and each one's head.
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
  {
    // Operations (dashboard, alerts). Numbered 5: 3 and 4 belong to the run queue and durable steps.
    version: 5,
    sql: `
-- Who acknowledged a failure and when (a client reading it is retrieved_at); who asked for a cancel and why
-- (NULL: the caller); when the unread-failure alert was written (each failure alerts once).
ALTER TABLE tasks ADD COLUMN acknowledged_at INTEGER;
ALTER TABLE tasks ADD COLUMN acknowledged_by TEXT;
ALTER TABLE tasks ADD COLUMN cancelled_by TEXT;
ALTER TABLE tasks ADD COLUMN cancel_reason TEXT;
ALTER TABLE tasks ADD COLUMN unread_alert_at INTEGER;
-- Operator listings: each filter is one range read of an index, newest first.
-- Used by: the operator's task list without a filter (and filters no other index serves), newest first.
CREATE INDEX tasks_ops_created ON tasks (created_at DESC, task_id DESC);
-- Used by: the operator's task list filtered by status, and recovery's scan for unfinished tasks whose owner is gone.
CREATE INDEX tasks_ops_status ON tasks (status, created_at DESC, task_id DESC);
-- Used by: the operator's task list filtered by tool.
CREATE INDEX tasks_ops_tool ON tasks (tool, created_at DESC, task_id DESC);
-- Used by: the operator's list of unread failures and their count (the dashboard's badge).
CREATE INDEX tasks_ops_unread ON tasks (created_at DESC, task_id DESC)
  WHERE status = 'failed' AND retrieved_at IS NULL AND acknowledged_at IS NULL;
-- Used by: the unread-failure alert scan (failures unread for longer than the alert's delay).
CREATE INDEX tasks_ops_unread_due ON tasks (updated_at)
  WHERE status = 'failed' AND retrieved_at IS NULL AND acknowledged_at IS NULL AND unread_alert_at IS NULL;
-- Used by: the dashboard's tasks waiting for input, longest waiting first (INDEXED BY: without
-- statistics the planner would sort every waiting task read through tasks_ops_status).
CREATE INDEX tasks_ops_waiting ON tasks (input_since) WHERE status = 'input_required';

-- Counts by state, kept exact by the triggers below (a count(*) over a million rows is not a page load).
CREATE TABLE task_counts (status TEXT NOT NULL, shard TEXT NOT NULL, n INTEGER NOT NULL, PRIMARY KEY (status, shard));
INSERT INTO task_counts (status, shard, n)
  SELECT s.status, '', (SELECT count(*) FROM tasks t WHERE t.status = s.status)
  FROM (SELECT 'working' AS status UNION ALL SELECT 'input_required' UNION ALL SELECT 'completed'
        UNION ALL SELECT 'failed' UNION ALL SELECT 'cancelled') s;
CREATE TRIGGER tasks_count_insert AFTER INSERT ON tasks BEGIN
  UPDATE task_counts SET n = n + 1 WHERE status = NEW.status AND shard = '';
END;
CREATE TRIGGER tasks_count_status AFTER UPDATE OF status ON tasks WHEN NEW.status <> OLD.status BEGIN
  UPDATE task_counts SET n = n - 1 WHERE status = OLD.status AND shard = '';
  UPDATE task_counts SET n = n + 1 WHERE status = NEW.status AND shard = '';
END;

-- Each task's transitions after its creation (written by the history triggers, see HISTORY_TRIGGERS), gone with the task.
CREATE TABLE task_events (
  event_id INTEGER PRIMARY KEY,
  task_id  TEXT NOT NULL,
  at       INTEGER NOT NULL,
  kind     TEXT NOT NULL,
  actor    TEXT,
  detail   TEXT
);
-- Used by: a task's history (the dashboard's task page), and the delete of its history when the task leaves.
CREATE INDEX task_events_by_task ON task_events (task_id, event_id);

-- Alerts: an outbox any replica delivers from. dedupe_key makes "at most once per cause" a constraint.
CREATE TABLE alerts (
  alert_id        TEXT PRIMARY KEY,
  dedupe_key      TEXT NOT NULL UNIQUE,
  kind            TEXT NOT NULL,
  task_id         TEXT,
  tool            TEXT,
  principal       TEXT,
  message         TEXT NOT NULL,
  destination     TEXT NOT NULL,
  data            TEXT NOT NULL,
  created_at      INTEGER NOT NULL,
  state           TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending','delivered','failed')),
  attempts        INTEGER NOT NULL DEFAULT 0,
  next_attempt_at INTEGER NOT NULL,
  claimed_by      TEXT,
  claimed_until   INTEGER,
  last_status     INTEGER,
  last_error      TEXT,
  delivered_at    INTEGER
);
-- Used by: the alert delivery claim's scan for pending alerts that are due (next_attempt_at <= now).
CREATE INDEX alerts_due ON alerts (next_attempt_at) WHERE state = 'pending';
-- Used by: the dashboard's alert list, newest first.
CREATE INDEX alerts_recent ON alerts (created_at DESC, alert_id DESC);

-- Pushes a caller asked for: a delivery to the destination on each state change of the task.
CREATE TABLE task_subscriptions (
  task_id     TEXT NOT NULL,
  destination TEXT NOT NULL,
  PRIMARY KEY (task_id, destination)
);
CREATE TRIGGER tasks_push_status AFTER UPDATE OF status ON tasks WHEN NEW.status <> OLD.status BEGIN
  INSERT OR IGNORE INTO alerts (alert_id, dedupe_key, kind, task_id, tool, principal, message, destination, data, created_at, next_attempt_at)
  SELECT 'msg_' || lower(hex(randomblob(12))), 'task-status:' || NEW.task_id || ':' || NEW.status || ':' || s.destination, 'task-status',
    NEW.task_id, NEW.tool, NEW.principal, 'task ' || NEW.task_id || ' is ' || NEW.status, s.destination,
    json_object('taskId', NEW.task_id, 'status', NEW.status, 'statusMessage', NEW.status_message, 'updatedAt', NEW.updated_at),
    NEW.updated_at, NEW.updated_at
  FROM task_subscriptions s WHERE s.task_id = NEW.task_id;
END;

-- A task leaves (the sweeper made it a tombstone): its counts, history and pushes go; unfinished work that
-- expired is an alert, written in the sweeper's transaction.
CREATE TRIGGER tasks_gone AFTER DELETE ON tasks BEGIN
  UPDATE task_counts SET n = n - 1 WHERE status = OLD.status AND shard = '';
  DELETE FROM task_events WHERE task_id = OLD.task_id;
  DELETE FROM task_subscriptions WHERE task_id = OLD.task_id;
  INSERT OR IGNORE INTO alerts (alert_id, dedupe_key, kind, task_id, tool, principal, message, destination, data, created_at, next_attempt_at)
  SELECT 'msg_' || lower(hex(randomblob(12))), 'expired-unfinished:' || OLD.task_id, 'expired-unfinished', OLD.task_id, OLD.tool,
    OLD.principal, 'task ' || OLD.task_id || ' (' || OLD.tool || ') reached its TTL while still ' || OLD.status, 'alerts',
    json_object('taskId', OLD.task_id, 'tool', OLD.tool, 'status', OLD.status),
    CAST(unixepoch('subsec') * 1000 AS INTEGER), CAST(unixepoch('subsec') * 1000 AS INTEGER)
  WHERE OLD.status IN ('working','input_required');
END;
`,
  },
  {
    // Traces and per-tool durations. Numbered 6: 4 belongs to durable steps, 5 to operations.
    version: 6,
    sql: `
-- The creating call's trace context (W3C traceparent/tracestate as JSON): a run started from the row links to it.
ALTER TABLE tasks ADD COLUMN trace_context TEXT;
-- Finished tasks by when they finished, covering what the per-tool durations read (one bounded range, no row lookups).
-- Used by: the per-tool durations (a range of recently finished tasks, read from the index alone).
CREATE INDEX tasks_ops_finished ON tasks (updated_at DESC, tool, created_at, status) WHERE status IN ('completed','failed','cancelled');
`,
  },
  {
    // Operations views of queued and parked work: parked tasks by when they are due.
    version: 7,
    sql: `
-- Used by: the operator's list of parked tasks, by when they are due.
CREATE INDEX tasks_ops_parked ON tasks (queued_at, task_id) WHERE parked_at IS NOT NULL;
`,
  },
  SQLITE_EVENTS_MIGRATION,
  {
    // A queued task's position on every poll counts the tasks ahead of it that wait for capacity (not parked): with
    // parked_at in the queue's index the count reads the index alone, instead of one row lookup per task ahead.
    // Numbered 10: 8 and 9 are PostgreSQL's fair claims and both backends' events.
    version: 10,
    sql: `
DROP INDEX tasks_queue_age;
-- Used by: the queue's depth and a queued task's position (index only), the next wake (min(queued_at) > now), and
-- the operator's list of queued tasks.
CREATE INDEX tasks_queue_age ON tasks (queued_at, task_id, parked_at) WHERE queued_at IS NOT NULL;
`,
  },
  SQLITE_ASKS_MIGRATION,
  SQLITE_OUTPUT_MIGRATION,
  SQLITE_OUTPUT_EVENTS_MIGRATION,
  SQLITE_OPERATOR_SESSIONS_MIGRATION,
  {
    // The newest-first indexes a creation writes, built ascending. SQLite reads an ascending index backwards for
    // ORDER BY … DESC just as well, but a descending one takes every new row at its left edge, where a full leaf is
    // rebalanced with its siblings instead of split off (SQLite's quick balance is for the right edge only): a
    // creation wrote about 15 % more pages. Same names and columns, so older builds' INDEXED BY still finds them.
    // Numbered 16: 15 is the operator sessions' migration. On a store of a million tasks this rebuilds five indexes
    // once, at the first start of this release (docs/deployment.md).
    version: 16,
    sql: `
DROP INDEX tasks_by_principal;
-- Used by: tasks/list pages (principal, then a row-value range), and admission's count of one principal's stored and
-- queued tasks; read backwards, newest first.
CREATE INDEX tasks_by_principal ON tasks (principal, created_at, task_id);
DROP INDEX tasks_ops_created;
-- Used by: the operator's task list without a filter (and filters no other index serves), read backwards.
CREATE INDEX tasks_ops_created ON tasks (created_at, task_id);
DROP INDEX tasks_ops_status;
-- Used by: the operator's task list filtered by status, and recovery's scan for unfinished tasks whose owner is gone.
CREATE INDEX tasks_ops_status ON tasks (status, created_at, task_id);
DROP INDEX tasks_ops_tool;
-- Used by: the operator's task list filtered by tool, read backwards.
CREATE INDEX tasks_ops_tool ON tasks (tool, created_at, task_id);
DROP INDEX tasks_ops_finished;
-- Used by: the per-tool durations (a range of recently finished tasks, read backwards from the index alone).
CREATE INDEX tasks_ops_finished ON tasks (updated_at, tool, created_at, status) WHERE status IN ('completed','failed','cancelled');
`,
  },
];

/**
 * The transition history, one trigger per kind of change (each fires only when its columns changed). Not a
 * migration: the store creates or drops them at start-up, so history can be switched off (bench (m)); a file opened
 * by an earlier release gains new ones at its next start. Creation writes no event: the task's row records it
 * (created_at, principal, origin), and the history read puts it first.
 */
/** A trigger recording the keys a JSON object column gained (input asked, input answered). */
function keysAdded(name: string, column: string, kind: string, actor: string, when: string): { name: string; sql: string } {
  return {
    name,
    sql: `AFTER UPDATE OF ${column} ON tasks WHEN NEW.${column} <> OLD.${column} ${when} BEGIN
  INSERT INTO task_events (task_id, at, kind, actor, detail)
  SELECT NEW.task_id, NEW.updated_at, '${kind}', ${actor}, group_concat(n.key, ', ')
  FROM json_each(NEW.${column}) n WHERE n.key NOT IN (SELECT key FROM json_each(OLD.${column}))
  HAVING count(*) > 0;
END`,
  };
}

/** What a task's end says in its history: a failure's message, else its status message (`row`: "NEW." in a trigger). */
export const finishedDetail = (row = '') => `CASE WHEN ${row}status = 'failed' THEN json_extract(${row}error, '$.message') ELSE ${row}status_message END`;

/** A task's end in its history, written by a finish (a task created finished has its end read from its row). */
const FINISHED_EVENT = `INSERT INTO task_events (task_id, at, kind, actor, detail)
  VALUES (NEW.task_id, NEW.updated_at, NEW.status, NEW.owner, ${finishedDetail('NEW.')});`;

/** Triggers an earlier release made and this one drops at start-up: a task created finished writes no event row
 *  (its random-keyed index entry cost a sixth of a creation's pages). */
export const RETIRED_TRIGGERS: ReadonlyArray<string> = ['tasks_history_finished_at_creation'];

export const HISTORY_TRIGGERS: ReadonlyArray<{ name: string; sql: string }> = [
  keysAdded('tasks_history_input_asked', 'input_requests', 'input_asked', 'NEW.owner', "AND NEW.status = 'input_required'"),
  keysAdded('tasks_history_input_answered', 'input_responses', 'input_answered', 'NEW.principal', ''),
  {
    name: 'tasks_history_cancel',
    sql: `AFTER UPDATE OF cancel_requested_at ON tasks WHEN OLD.cancel_requested_at IS NULL AND NEW.cancel_requested_at IS NOT NULL BEGIN
  INSERT INTO task_events (task_id, at, kind, actor, detail)
  VALUES (NEW.task_id, NEW.cancel_requested_at, 'cancel_requested', coalesce('operator:' || NEW.cancelled_by, NEW.principal), NEW.cancel_reason);
END`,
  },
  {
    name: 'tasks_history_takeover',
    sql: `AFTER UPDATE OF attempts ON tasks WHEN NEW.attempts > OLD.attempts BEGIN
  INSERT INTO task_events (task_id, at, kind, actor, detail)
  VALUES (NEW.task_id, NEW.updated_at, 'taken_over', NEW.owner, 'attempt ' || NEW.attempts || coalesce(', from ' || OLD.owner, ''));
END`,
  },
  {
    name: 'tasks_history_finished',
    sql: `AFTER UPDATE OF status ON tasks WHEN NEW.status IN ('completed','failed','cancelled') AND OLD.status NOT IN ('completed','failed','cancelled') BEGIN
  ${FINISHED_EVENT}
END`,
  },
  {
    // Claimed from the run queue (a parked task's claim is a resume, below).
    name: 'tasks_history_started',
    sql: `AFTER UPDATE OF queued_at ON tasks WHEN OLD.queued_at IS NOT NULL AND NEW.queued_at IS NULL AND OLD.parked_at IS NULL BEGIN
  INSERT INTO task_events (task_id, at, kind, actor, detail)
  VALUES (NEW.task_id, NEW.updated_at, 'started', NEW.owner, 'after ' || ((NEW.updated_at - OLD.queued_at) / 1000) || ' s in the queue');
END`,
  },
  {
    name: 'tasks_history_parked',
    sql: `AFTER UPDATE OF parked_at ON tasks WHEN OLD.parked_at IS NULL AND NEW.parked_at IS NOT NULL BEGIN
  INSERT INTO task_events (task_id, at, kind, actor, detail)
  VALUES (NEW.task_id, NEW.parked_at, 'parked', OLD.owner, CASE WHEN NEW.status = 'input_required' THEN 'waiting for input' ELSE 'sleeping' END);
END`,
  },
  {
    name: 'tasks_history_resumed',
    sql: `AFTER UPDATE OF parked_at ON tasks WHEN OLD.parked_at IS NOT NULL AND NEW.parked_at IS NULL AND NEW.owner IS NOT NULL BEGIN
  INSERT INTO task_events (task_id, at, kind, actor, detail)
  VALUES (NEW.task_id, NEW.updated_at, 'resumed', NEW.owner, 'claim ' || NEW.epoch);
END`,
  },
  {
    name: 'tasks_history_acknowledged',
    sql: `AFTER UPDATE OF acknowledged_at ON tasks WHEN OLD.acknowledged_at IS NULL AND NEW.acknowledged_at IS NOT NULL BEGIN
  INSERT INTO task_events (task_id, at, kind, actor, detail)
  VALUES (NEW.task_id, NEW.acknowledged_at, 'acknowledged', 'operator:' || NEW.acknowledged_by, NULL);
END`,
  },
];
