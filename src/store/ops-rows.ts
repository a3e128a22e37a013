/** The operator rows every backend reads (same column names in each dialect), and how they become records. */
import { randomBytes } from 'node:crypto';
import type { TaskStatus } from '../protocol/index.js';
import { SUMMARY_COLUMNS, toSummary, type SummaryRow } from './summary.js';
import type { AlertRecord, IdleTask, ListCursor, NewAlert, OpsCounts, OpsTaskFilter, OpsTaskPage, OpsTaskRow, TaskEvent, ToolStats } from './types.js';

export const OPS_ROW_COLUMNS = `${SUMMARY_COLUMNS}, owner, attempts, retrieved_at, acknowledged_at, cancel_requested_at, input_since, error`;

export interface OpsRow extends SummaryRow {
  owner: string | null;
  attempts: number;
  retrieved_at: number | null;
  acknowledged_at: number | null;
  cancel_requested_at: number | null;
  input_since: number | null;
  /** JSON text (SQLite) or an object (PostgreSQL). */
  error: string | { message?: unknown } | null;
}

export function toOpsRow(r: OpsRow): OpsTaskRow {
  const error = typeof r.error === 'string' ? (JSON.parse(r.error) as { message?: unknown }) : r.error;
  return {
    ...toSummary(r),
    owner: r.owner,
    attempts: r.attempts,
    retrievedAt: r.retrieved_at,
    acknowledgedAt: r.acknowledged_at,
    cancelRequestedAt: r.cancel_requested_at,
    inputSince: r.input_since,
    errorMessage: error && typeof error.message === 'string' ? error.message : null,
  };
}

/** The unread-failure condition; the partial indexes `tasks_ops_unread*` are built on exactly this. */
export const UNREAD_FAILURE = `status = 'failed' AND retrieved_at IS NULL AND acknowledged_at IS NULL`;

/** Rows one page may examine when filters combine (the first filter's index is read; the others are tested). */
export const SCAN_BOUND = 1000;

type ListingKey = keyof OpsTaskFilter | 'afterCreatedAt' | 'afterTaskId' | 'read';

/**
 * An operator listing in a dialect: the filter with the most selective index (unread, principal, tool, then state)
 * is the index range read, newest first from the keyset position; the other filters are tested on the rows read,
 * at most SCAN_BOUND of them a page (`hit` says which match). With one filter or none, `hit` is always true and the
 * read stops at the page size. `param(i)` renders the i-th placeholder.
 */
export function listingQuery(f: OpsTaskFilter, keyset: boolean, param: (i: number) => string): { sql: string; keys: ListingKey[]; bounded: boolean } {
  const range: string[] = [];
  const tests: string[] = [];
  const keys: ListingKey[] = [];
  const bind = (key: ListingKey) => {
    keys.push(key);
    return param(keys.length);
  };
  const index = f.unread ? 'unread' : f.principal !== undefined ? 'principal' : f.tool !== undefined ? 'tool' : f.status !== undefined ? 'status' : 'none';
  if (f.unread) range.push(UNREAD_FAILURE);
  for (const k of ['principal', 'tool', 'status'] as const) {
    if (f[k] === undefined || (k === 'status' && f.unread)) continue;
    (k === index ? range : tests).push(`${k} = ${bind(k)}`);
  }
  if (f.createdBefore !== undefined) range.push(`created_at <= ${bind('createdBefore')}`);
  if (keyset) {
    const a = bind('afterCreatedAt');
    const b = bind('afterTaskId');
    range.push(`(created_at, task_id) < (${a}, ${b})`);
  }
  const where = range.length ? `WHERE ${range.join(' AND ')}` : '';
  const order = 'ORDER BY created_at DESC, task_id DESC';
  if (tests.length === 0) return { sql: `SELECT ${OPS_ROW_COLUMNS}, 1 AS hit, 0 AS rn FROM tasks ${where} ${order} LIMIT `, keys, bounded: false };
  // Read the index range narrowly (id, time, whether the other filters match), number the rows read, and fetch the
  // full rows of the matches only, plus the last row read (where the next page starts when the read hit its bound).
  const read = bind('read');
  const cols = OPS_ROW_COLUMNS.split(', ').map((c) => `t.${c}`).join(', ');
  const sql = `WITH scan AS (SELECT task_id, created_at, CASE WHEN ${tests.join(' AND ')} THEN 1 ELSE 0 END AS hit FROM tasks ${where} ${order} LIMIT ${read}),
    numbered AS (SELECT task_id, created_at, hit, row_number() OVER (${order}) AS rn FROM scan)
    SELECT ${cols}, n.hit, n.rn FROM numbered n JOIN tasks t ON t.task_id = n.task_id WHERE n.hit = 1 OR n.rn = ${read}
    ORDER BY n.created_at DESC, n.task_id DESC LIMIT `;
  return { sql, keys, bounded: true };
}

/** The parameter values of a listing query, in order. */
export function listingValues(keys: ListingKey[], f: OpsTaskFilter, after: ListCursor | undefined, read: number): unknown[] {
  return keys.map((k) => (k === 'afterCreatedAt' ? after!.createdAt : k === 'afterTaskId' ? after!.taskId : k === 'read' ? read : f[k]));
}

/**
 * The page from the rows returned: the matches (at most `limit`) and where the next page starts if more may match.
 * `limit` rows were asked for (plus one to know whether more exist); a bounded read also returns its last row
 * (`rn` = `read`) so the next page starts after what was read.
 */
export function listingPage(rows: Array<OpsRow & { hit: number | string; rn: number | string }>, limit: number, read: number, bounded: boolean): OpsTaskPage {
  const matches: OpsTaskRow[] = [];
  let lastRead: OpsRow | undefined;
  for (const r of rows) {
    if (bounded && Number(r.rn) === read) lastRead = r;
    if (Number(r.hit) !== 1) continue;
    if (matches.length === limit) {
      const last = matches[matches.length - 1]!;
      return { rows: matches, next: { createdAt: last.createdAt, taskId: last.taskId } };
    }
    matches.push(toOpsRow(r));
  }
  // The read stopped at its bound first: older rows may still match.
  if (lastRead && matches.length < limit) return { rows: matches, next: { createdAt: lastRead.created_at, taskId: lastRead.task_id }, scanned: read };
  if (lastRead) return { rows: matches, next: { createdAt: matches[matches.length - 1]!.createdAt, taskId: matches[matches.length - 1]!.taskId } };
  return { rows: matches };
}

/** The finished condition; the partial index `tasks_ops_finished` is built on exactly this. */
export const FINISHED = `status IN ('completed','failed','cancelled')`;

/**
 * Per-tool counts and nearest-rank percentiles of creation-to-finish time, over the `$2` most recent finishes at or
 * after `$1` (a range of the finished index, newest first), in either dialect (`param(i)` renders a placeholder).
 * Cancelled tasks are counted but ranked apart, so the percentiles describe runs that reached their end.
 */
export function toolStatsQuery(param: (i: number) => string): string {
  return `WITH recent AS (
      SELECT tool, status, updated_at, updated_at - created_at AS ms FROM tasks WHERE ${FINISHED} AND updated_at >= ${param(1)}
      ORDER BY updated_at DESC LIMIT ${param(2)}
    ), ranked AS (
      SELECT tool, status, updated_at, ms, row_number() OVER (PARTITION BY tool, status = 'cancelled' ORDER BY ms) AS rn,
        count(*) OVER (PARTITION BY tool, status = 'cancelled') AS n FROM recent
    )
    SELECT tool, count(*) AS finished, sum(CASE WHEN status = 'failed' THEN 1 ELSE 0 END) AS failed,
      sum(CASE WHEN status = 'cancelled' THEN 1 ELSE 0 END) AS cancelled,
      max(CASE WHEN status <> 'cancelled' AND rn = (n + 1) / 2 THEN ms END) AS p50,
      max(CASE WHEN status <> 'cancelled' AND rn = (95 * n + 99) / 100 THEN ms END) AS p95,
      max(CASE WHEN status <> 'cancelled' THEN ms END) AS max_ms, min(updated_at) AS oldest
    FROM ranked GROUP BY tool ORDER BY count(*) DESC, tool`;
}

export interface ToolStatsDbRow {
  tool: string;
  finished: number | string;
  failed: number | string;
  cancelled: number | string;
  p50: number | string | null;
  p95: number | string | null;
  max_ms: number | string | null;
  oldest: number | string;
}

export function toToolStats(rows: ToolStatsDbRow[], cap: number): ToolStats {
  const num = (v: number | string | null) => (v === null ? null : Number(v));
  const tools = rows.map((r) => ({ tool: r.tool, finished: Number(r.finished), failed: Number(r.failed), cancelled: Number(r.cancelled), p50Ms: num(r.p50), p95Ms: num(r.p95), maxMs: num(r.max_ms) }));
  const read = tools.reduce((n, t) => n + t.finished, 0);
  return { tools, capped: read >= cap, from: rows.length ? Math.min(...rows.map((r) => Number(r.oldest))) : null };
}

/** A filter asking for unread failures of another status matches nothing (unread means failed). */
export function contradicts(f: OpsTaskFilter): boolean {
  return !!f.unread && f.status !== undefined && f.status !== 'failed';
}

export function emptyCounts(): Record<TaskStatus, number> {
  return { working: 0, input_required: 0, completed: 0, failed: 0, cancelled: 0 };
}

export function countsFrom(rows: Array<{ status: string; n: number | string }>, unread: number, cap: number): OpsCounts {
  const byStatus = emptyCounts();
  for (const r of rows) if (r.status in byStatus) byStatus[r.status as TaskStatus] += Number(r.n);
  return { byStatus, unreadFailures: Math.min(unread, cap), unreadCapped: unread > cap };
}

export interface EventRow {
  event_id: number | string;
  task_id: string;
  at: number;
  kind: string;
  actor: string | null;
  detail: string | null;
}

export function toEvent(r: EventRow): TaskEvent {
  return { eventId: Number(r.event_id), taskId: r.task_id, at: r.at, kind: r.kind, actor: r.actor, detail: r.detail };
}

/** The alert columns every backend reads, by name (a later column changes no result shape). */
export const ALERT_READ_COLUMNS = 'alert_id, kind, task_id, tool, principal, message, destination, data, created_at, state, attempts, next_attempt_at, claimed_by, last_status, last_error, delivered_at';

export interface AlertRow {
  alert_id: string;
  kind: AlertRecord['kind'];
  task_id: string | null;
  tool: string | null;
  principal: string | null;
  message: string;
  destination: string;
  data: string | Record<string, unknown>;
  created_at: number;
  state: AlertRecord['state'];
  attempts: number;
  next_attempt_at: number;
  claimed_by: string | null;
  last_status: number | null;
  last_error: string | null;
  delivered_at: number | null;
}

export function toAlert(r: AlertRow): AlertRecord {
  return {
    alertId: r.alert_id,
    kind: r.kind,
    taskId: r.task_id,
    tool: r.tool,
    principal: r.principal,
    message: r.message,
    destination: r.destination,
    data: typeof r.data === 'string' ? JSON.parse(r.data) : r.data,
    createdAt: r.created_at,
    state: r.state,
    attempts: r.attempts,
    nextAttemptAt: r.next_attempt_at,
    claimedBy: r.claimed_by,
    lastStatus: r.last_status,
    lastError: r.last_error,
    deliveredAt: r.delivered_at,
  };
}

/** An alert's id, also the `webhook-id` of its deliveries (Standard Webhooks: `msg_` and random). */
export function newAlertId(): string {
  return `msg_${randomBytes(12).toString('hex')}`;
}

/** The alert for a failure nobody read (the PostgreSQL store writes the same in SQL, see postgres/ops.ts). */
export function unreadFailureAlert(t: OpsTaskRow, now: number): NewAlert {
  return {
    alertId: newAlertId(),
    dedupeKey: `failed-unread:${t.taskId}`,
    kind: 'failed-unread',
    taskId: t.taskId,
    tool: t.tool,
    principal: t.principal,
    message: `task ${t.taskId} (${t.tool}) failed and nobody has read the failure: ${t.errorMessage ?? 'no message'}`,
    destination: 'alerts',
    data: { taskId: t.taskId, tool: t.tool, status: 'failed', error: t.errorMessage, failedAt: t.updatedAt },
    createdAt: now,
  };
}

/** The columns and mapping of an idle (queued or parked) task; the same in both dialects. */
export const IDLE_COLUMNS = 'task_id, principal, tool, status, status_message, created_at, queued_at, parked_at, input_requests';
/** Oldest first among tasks waiting for capacity (parked ones share the queue's columns but are not waiting for it). */
export const QUEUED_WHERE = 'queued_at IS NOT NULL AND parked_at IS NULL';

export interface IdleRow {
  task_id: string;
  principal: string;
  tool: string;
  status: TaskStatus;
  status_message: string | null;
  created_at: number;
  queued_at: number;
  parked_at: number | null;
  /** JSON text (SQLite) or the parsed object (PostgreSQL jsonb). */
  input_requests: string | Record<string, unknown>;
}

export function toIdle(r: IdleRow): IdleTask {
  const pending = typeof r.input_requests === 'string' ? (JSON.parse(r.input_requests) as Record<string, unknown>) : r.input_requests;
  return {
    taskId: r.task_id,
    principal: r.principal,
    tool: r.tool,
    status: r.status,
    statusMessage: r.status_message,
    createdAt: r.created_at,
    queuedAt: r.queued_at,
    parkedAt: r.parked_at,
    inputKeys: r.status === 'input_required' ? Object.keys(pending) : [],
  };
}
