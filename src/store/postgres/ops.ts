/**
 * The operator side of the PostgreSQL store: listings over any filter (keyset, one index each), counts from the
 * sharded counter table, history, operator cancel and acknowledge, and the alert outbox (claimed with SKIP LOCKED,
 * so replicas delivering together never take the same alert while a claim holds).
 */
import type pg from 'pg';
import { ALERT_READ_COLUMNS, IDLE_COLUMNS, QUEUED_WHERE, toIdle, type IdleRow, newAlertId, SCAN_BOUND, UNREAD_FAILURE, contradicts, countsFrom, listingPage, listingQuery, listingValues, toAlert, toEvent, toolStatsQuery, toToolStats, type AlertRow, type EventRow, type OpsRow, type ToolStatsDbRow } from '../ops-rows.js';
import { HISTORY_TRIGGERS } from './schema.js';
import { ofAlias } from '../events.js';
import type { NewAlert, OperatorStore, OpsTaskDetail, TaskLookup, WaitingTask } from '../types.js';

type Query = <R extends pg.QueryResultRow>(name: string, text: string, values: unknown[]) => Promise<pg.QueryResult<R>>;

const ALERT_COLUMNS = 'alert_id, dedupe_key, kind, task_id, tool, principal, message, destination, data, created_at, next_attempt_at';
const alertValues = (a: NewAlert) => [a.alertId, a.dedupeKey, a.kind, a.taskId ?? null, a.tool ?? null, a.principal ?? null, a.message, a.destination, JSON.stringify(a.data), a.createdAt];

const Q = {
  counts: `SELECT status, sum(n)::bigint AS n FROM task_counts GROUP BY status`,
  unread: `SELECT count(*)::int AS n FROM (SELECT 1 FROM tasks WHERE ${UNREAD_FAILURE} LIMIT $1) u`,
  waiting: `SELECT task_id, principal, tool, status_message, input_since, input_requests, created_at FROM tasks
    WHERE status = 'input_required' ORDER BY input_since LIMIT $1`,
  toolStats: toolStatsQuery((i) => `$${i}`),
  queued: `SELECT ${IDLE_COLUMNS} FROM tasks WHERE ${QUEUED_WHERE} ORDER BY queued_at, task_id LIMIT $1`,
  parked: `SELECT ${IDLE_COLUMNS} FROM tasks WHERE parked_at IS NOT NULL ORDER BY queued_at, task_id LIMIT $1`,
  opsColumns: `SELECT acknowledged_at, acknowledged_by, cancelled_by, cancel_reason FROM tasks WHERE task_id = $1`,
  // The creation comes from the row itself (no event is written for it: creations are the hot path).
  history: `SELECT event_id, task_id, at, kind, actor, detail FROM (SELECT 0::bigint AS event_id, task_id, created_at AS at, 'created' AS kind, principal AS actor, 'through ' || origin AS detail
      FROM tasks WHERE task_id = $1
    UNION ALL SELECT event_id, task_id, at, kind, actor, detail FROM task_events WHERE task_id = $1) h ORDER BY event_id LIMIT $2`,
  cancel: `UPDATE tasks SET cancel_requested_at = $2, cancelled_by = $3, cancel_reason = $4, version = version + 1
    WHERE task_id = $1 AND status IN ('working','input_required') AND cancel_requested_at IS NULL`,
  ack: `UPDATE tasks SET acknowledged_at = $2, acknowledged_by = $3 WHERE task_id = $1 AND status = 'failed' AND acknowledged_at IS NULL`,
  // Each unread failure is marked and its alert written in one statement; SKIP LOCKED keeps concurrent scans apart.
  unreadDue: `WITH due AS (
      SELECT task_id FROM tasks WHERE ${UNREAD_FAILURE} AND unread_alert_at IS NULL AND updated_at <= $1
      ORDER BY updated_at LIMIT $2 FOR UPDATE SKIP LOCKED
    ), marked AS (
      UPDATE tasks t SET unread_alert_at = $3 FROM due WHERE t.task_id = due.task_id
      RETURNING t.task_id, t.tool, t.principal, t.updated_at, t.error->>'message' AS error_message
    )
    INSERT INTO alerts (${ALERT_COLUMNS})
    SELECT outlast_alert_id(), 'failed-unread:' || task_id, 'failed-unread', task_id, tool, principal,
      'task ' || task_id || ' (' || tool || ') failed and nobody has read the failure: ' || coalesce(error_message, 'no message'), 'alerts',
      jsonb_build_object('taskId', task_id, 'tool', tool, 'status', 'failed', 'error', error_message, 'failedAt', updated_at), $3, $3
    FROM marked ON CONFLICT DO NOTHING RETURNING ${ALERT_READ_COLUMNS}`,
  addAlert: `INSERT INTO alerts (${ALERT_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::jsonb, $10, $10) ON CONFLICT DO NOTHING RETURNING alert_id`,
  replicaLost: `WITH gone AS (DELETE FROM replicas WHERE replica_id = $11 RETURNING replica_id)
    INSERT INTO alerts (${ALERT_COLUMNS}) SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9::jsonb, $10, $10 FROM gone
    ON CONFLICT DO NOTHING RETURNING alert_id`,
  claim: `WITH due AS (
      SELECT alert_id FROM alerts WHERE state = 'pending' AND next_attempt_at <= $2 AND (claimed_until IS NULL OR claimed_until <= $2)
        AND destination = ANY($5::text[])
      ORDER BY next_attempt_at LIMIT $4 FOR UPDATE SKIP LOCKED
    )
    UPDATE alerts a SET claimed_by = $1, claimed_until = $3, attempts = attempts + 1 FROM due WHERE a.alert_id = due.alert_id RETURNING ${ofAlias('a', ALERT_READ_COLUMNS)}`,
  delivered: `UPDATE alerts SET state = 'delivered', delivered_at = $3, last_status = $4, last_error = NULL, claimed_until = NULL
    WHERE alert_id = $1 AND claimed_by = $2 AND state = 'pending'`,
  retry: `UPDATE alerts SET state = CASE WHEN $3::bigint IS NULL THEN 'failed' ELSE 'pending' END, next_attempt_at = coalesce($3, next_attempt_at),
    last_status = $4, last_error = $5, claimed_until = NULL WHERE alert_id = $1 AND claimed_by = $2 AND state = 'pending'`,
  alertsFirst: `SELECT ${ALERT_READ_COLUMNS} FROM alerts ORDER BY created_at DESC, alert_id DESC LIMIT $1`,
  alertsNext: `SELECT ${ALERT_READ_COLUMNS} FROM alerts WHERE (created_at, alert_id) < ($1, $2) ORDER BY created_at DESC, alert_id DESC LIMIT $3`,
  // The row lock orders this against a concurrent finish: either the finish sees the subscription, or this sees the outcome.
  subscribe: `WITH t AS (SELECT task_id, tool, principal, status, status_message, updated_at FROM tasks WHERE task_id = $1 FOR UPDATE),
      sub AS (INSERT INTO task_subscriptions (task_id, destination) SELECT task_id, $2 FROM t ON CONFLICT DO NOTHING)
    INSERT INTO alerts (${ALERT_COLUMNS})
    SELECT $3, 'task-status:' || task_id || ':' || status || ':' || $2, 'task-status', task_id, tool, principal, 'task ' || task_id || ' is ' || status, $2,
      jsonb_build_object('taskId', task_id, 'status', status, 'statusMessage', status_message, 'updatedAt', updated_at), $4, $4
    FROM t WHERE status IN ('completed','failed','cancelled') ON CONFLICT DO NOTHING`,
  historyState: `SELECT tgname, tgenabled FROM pg_trigger WHERE tgrelid = 'tasks'::regclass AND tgname = ANY($1::text[])`,
};

/** Enables (history on) or disables (off) the history triggers when they are not already so: a setting of the schema. */
export async function applyHistorySetting(client: pg.ClientBase, on: boolean): Promise<void> {
  const rows = (await client.query<{ tgname: string; tgenabled: string }>(Q.historyState, [HISTORY_TRIGGERS])).rows;
  for (const r of rows) {
    const enabled = r.tgenabled !== 'D';
    if (enabled !== on) await client.query(`ALTER TABLE tasks ${on ? 'ENABLE' : 'DISABLE'} TRIGGER ${r.tgname}`);
  }
}

export function postgresOps(query: Query, get: (taskId: string) => Promise<TaskLookup>): OperatorStore {
  const q = <R extends pg.QueryResultRow>(name: keyof typeof Q, values: unknown[]) => query<R>(`outlast_ops_${name}`, Q[name], values);
  return {
    async listTasks(filter, after, limit) {
      if (contradicts(filter)) return { rows: [] };
      const { sql, keys, bounded } = listingQuery(filter, after !== undefined, (i) => `$${i}`);
      const read = Math.max(SCAN_BOUND, limit + 1);
      const name = `outlast_ops_list_${filter.unread ? 'unread_' : ''}${keys.join('_') || 'all'}`;
      const rows = (await query<OpsRow & { hit: number; rn: number }>(name, `${sql} $${keys.length + 1}`, [...listingValues(keys, filter, after, read), limit + 1])).rows;
      return listingPage(rows, limit, read, bounded);
    },

    async counts(unreadCap) {
      const rows = (await q<{ status: string; n: number }>('counts', [])).rows;
      const unread = (await q<{ n: number }>('unread', [unreadCap + 1])).rows[0]!.n;
      return countsFrom(rows, unread, unreadCap);
    },

    async waiting(limit): Promise<WaitingTask[]> {
      const rows = (await q<{ task_id: string; principal: string; tool: string; status_message: string | null; input_since: number | null; input_requests: WaitingTask['inputRequests']; created_at: number }>('waiting', [limit])).rows;
      return rows.map((r) => ({ taskId: r.task_id, principal: r.principal, tool: r.tool, statusMessage: r.status_message, inputSince: r.input_since, inputRequests: r.input_requests, createdAt: r.created_at }));
    },

    async queued(limit) {
      return (await q<IdleRow>('queued', [limit])).rows.map(toIdle);
    },

    async parked(limit) {
      return (await q<IdleRow>('parked', [limit])).rows.map(toIdle);
    },

    async toolStats(since, cap) {
      return toToolStats((await q<ToolStatsDbRow>('toolStats', [since, cap])).rows, cap);
    },

    async detail(taskId): Promise<OpsTaskDetail | undefined> {
      const l = await get(taskId);
      if (l.state !== 'found') return undefined;
      const o = (await q<{ acknowledged_at: number | null; acknowledged_by: string | null; cancelled_by: string | null; cancel_reason: string | null }>('opsColumns', [taskId])).rows[0];
      return { ...l.record, acknowledgedAt: o?.acknowledged_at ?? null, acknowledgedBy: o?.acknowledged_by ?? null, cancelledBy: o?.cancelled_by ?? null, cancelReason: o?.cancel_reason ?? null };
    },

    async history(taskId, limit) {
      return (await q<EventRow>('history', [taskId, limit])).rows.map(toEvent);
    },

    async cancel(taskId, operator, reason, now) {
      await q('cancel', [taskId, now, operator, reason]);
      const l = await get(taskId);
      return l.state === 'found' ? l.record : undefined;
    },

    async acknowledge(taskId, operator, now) {
      return ((await q('ack', [taskId, now, operator])).rowCount ?? 0) > 0;
    },

    async alertUnreadFailures(failedBefore, now, limit) {
      return (await q<AlertRow>('unreadDue', [failedBefore, limit, now])).rows.map(toAlert);
    },

    async addAlert(alert) {
      return ((await q('addAlert', alertValues(alert))).rowCount ?? 0) > 0;
    },

    async replicaLost(replicaId, alert) {
      return ((await q('replicaLost', [...alertValues(alert), replicaId])).rowCount ?? 0) > 0;
    },

    async claimAlerts(replica, destinations, now, claimMs, limit) {
      return (await q<AlertRow>('claim', [replica, now, now + claimMs, limit, destinations])).rows.map(toAlert);
    },

    async settleAlert(alertId, replica, o) {
      if (o.delivered) await q('delivered', [alertId, replica, o.now, o.status]);
      else await q('retry', [alertId, replica, o.retryAt, o.status, o.error.slice(0, 500)]);
    },

    async listAlerts(after, limit) {
      const rows = after ? (await q<AlertRow>('alertsNext', [after.createdAt, after.alertId, limit])).rows : (await q<AlertRow>('alertsFirst', [limit])).rows;
      return rows.map(toAlert);
    },

    async subscribe(taskId, destination, now) {
      await q('subscribe', [taskId, destination, newAlertId(), now]);
    },
  };
}
