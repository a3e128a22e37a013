/** The operator rows every backend reads (same column names in each dialect), and how they become records. */
import { randomBytes } from 'node:crypto';
import type { TaskStatus } from '../protocol/index.js';
import { SUMMARY_COLUMNS, toSummary, type SummaryRow } from './summary.js';
import type { AlertRecord, NewAlert, OpsCounts, OpsTaskFilter, OpsTaskRow, TaskEvent } from './types.js';

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

/**
 * The WHERE clause of an operator listing and the order of its parameters. `param(i)` renders the i-th placeholder
 * of the dialect. The keyset condition comes last, so every filter is an equality or a range on an index prefix.
 */
export function listingWhere(f: OpsTaskFilter, keyset: boolean, param: (i: number) => string): { where: string; keys: Array<keyof OpsTaskFilter | 'afterCreatedAt' | 'afterTaskId'> } {
  const parts: string[] = [];
  const keys: Array<keyof OpsTaskFilter | 'afterCreatedAt' | 'afterTaskId'> = [];
  const add = (sql: (p: string) => string, key: keyof OpsTaskFilter) => {
    keys.push(key);
    parts.push(sql(param(keys.length)));
  };
  if (f.unread) parts.push(UNREAD_FAILURE);
  if (f.status !== undefined && !f.unread) add((p) => `status = ${p}`, 'status');
  if (f.tool !== undefined) add((p) => `tool = ${p}`, 'tool');
  if (f.principal !== undefined) add((p) => `principal = ${p}`, 'principal');
  if (f.createdBefore !== undefined) add((p) => `created_at <= ${p}`, 'createdBefore');
  if (keyset) {
    keys.push('afterCreatedAt', 'afterTaskId');
    parts.push(`(created_at, task_id) < (${param(keys.length - 1)}, ${param(keys.length)})`);
  }
  return { where: parts.length ? `WHERE ${parts.join(' AND ')}` : '', keys };
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
