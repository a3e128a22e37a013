/**
 * The operator side of the SQLite store: listings over any filter (keyset, one index each), counts from the
 * counter table, history, operator cancel and acknowledge, and the alert outbox. Writes go through the store's
 * group-commit queue, so each is in the same transaction machinery as every other write.
 */
import type Database from 'better-sqlite3';
import { ALERT_READ_COLUMNS, IDLE_COLUMNS, QUEUED_WHERE, toIdle, type IdleRow, newAlertId, unreadFailureAlert, OPS_ROW_COLUMNS, SCAN_BOUND, UNREAD_FAILURE, contradicts, countsFrom, listingPage, listingQuery, listingValues, toAlert, toEvent, toOpsRow, toolStatsQuery, toToolStats, type AlertRow, type EventRow, type OpsRow, type ToolStatsDbRow } from '../ops-rows.js';
import { finishedDetail, HISTORY_TRIGGERS, RETIRED_TRIGGERS } from './schema.js';
import type {
  AlertRecord,
  ListCursor,
  NewAlert,
  OperatorStore,
  OpsCounts,
  OpsTaskDetail,
  OpsTaskFilter,
  OpsTaskPage,
  TaskEvent,
  TaskLookup,
  TaskRecord,
  WaitingTask,
} from '../types.js';

type Write = <T>(op: () => T) => Promise<T>;

/** Creates (history on) or drops (off) the history triggers: a setting of the file, applied at start-up. */
export function applyHistorySetting(db: Database.Database, on: boolean): void {
  db.transaction(() => {
    for (const t of HISTORY_TRIGGERS) {
      db.exec(on ? `CREATE TRIGGER IF NOT EXISTS ${t.name} ${t.sql};` : `DROP TRIGGER IF EXISTS ${t.name};`);
    }
    for (const name of RETIRED_TRIGGERS) db.exec(`DROP TRIGGER IF EXISTS ${name};`);
  }).immediate();
}

export function sqliteOps(db: Database.Database, write: Write, get: (taskId: string) => Promise<TaskLookup>): OperatorStore {
  const listings = new Map<string, { st: Database.Statement; keys: ReturnType<typeof listingQuery>['keys']; bounded: boolean }>();
  const listing = (f: OpsTaskFilter, keyset: boolean) => {
    const shape = JSON.stringify([!!f.unread, f.status !== undefined, f.tool !== undefined, f.principal !== undefined, f.createdBefore !== undefined, keyset]);
    let q = listings.get(shape);
    if (!q) {
      // Named placeholders: the row test in the SELECT list binds values that the WHERE clause lists first.
      const { sql, keys, bounded } = listingQuery(f, keyset, (i) => `@p${i}`);
      // SQLite's planner prefers the state index for unread failures; the partial index holds only them.
      const text = f.unread ? sql.replace(/FROM tasks WHERE/, 'FROM tasks INDEXED BY tasks_ops_unread WHERE') : sql;
      q = { st: db.prepare(`${text} @limit`), keys, bounded };
      listings.set(shape, q);
    }
    return q;
  };
  const s = {
    counts: db.prepare(`SELECT status, sum(n) AS n FROM task_counts GROUP BY status`),
    // INDEXED BY: counted in the partial index of unread failures (the planner would walk every failure).
    unread: db.prepare(`SELECT count(*) AS n FROM (SELECT 1 FROM tasks INDEXED BY tasks_ops_unread WHERE ${UNREAD_FAILURE} LIMIT ?)`),
    // INDEXED BY: the partial index of waiting tasks in their order (the planner would sort all of them, read by status).
    waiting: db.prepare(`SELECT task_id, principal, tool, status_message, input_since, input_requests, created_at FROM tasks
      INDEXED BY tasks_ops_waiting WHERE status = 'input_required' ORDER BY input_since LIMIT ?`),
    // The queue's own partial index (queued_at, task_id), oldest first; the partial index of parked tasks, soonest due first.
    queued: db.prepare(`SELECT ${IDLE_COLUMNS} FROM tasks INDEXED BY tasks_queue_age WHERE ${QUEUED_WHERE} ORDER BY queued_at, task_id LIMIT ?`),
    parked: db.prepare(`SELECT ${IDLE_COLUMNS} FROM tasks INDEXED BY tasks_ops_parked WHERE parked_at IS NOT NULL ORDER BY queued_at, task_id LIMIT ?`),
    // INDEXED BY: the covering partial index of finished tasks (a range of it, never the table).
    toolStats: db.prepare(toolStatsQuery((i) => (i === 1 ? '@since' : '@cap')).replace(/FROM tasks WHERE/, 'FROM tasks INDEXED BY tasks_ops_finished WHERE')),
    opsColumns: db.prepare(`SELECT acknowledged_at, acknowledged_by, cancelled_by, cancel_reason FROM tasks WHERE task_id = ?`),
    // The creation comes from the row itself (no event is written for it: creations are the hot path), and so does
    // the end of a task created finished (NewTask.endedBy: version 1 and terminal; a row an earlier release gave an
    // event for is not told twice).
    history: db.prepare(`SELECT event_id, task_id, at, kind, actor, detail FROM (
        SELECT 0 AS ord, 0 AS event_id, task_id, created_at AS at, 'created' AS kind, principal AS actor, 'through ' || origin AS detail
        FROM tasks WHERE task_id = @id
      UNION ALL SELECT 1, 0, task_id, updated_at, status, owner, ${finishedDetail()} FROM tasks t
        WHERE task_id = @id AND version = 1 AND status IN ('completed','failed','cancelled')
          AND NOT EXISTS (SELECT 1 FROM task_events e WHERE e.task_id = t.task_id AND e.kind = t.status)
      UNION ALL SELECT 2, event_id, task_id, at, kind, actor, detail FROM task_events WHERE task_id = @id) ORDER BY ord, event_id LIMIT @limit`),
    cancel: db.prepare(`UPDATE tasks SET cancel_requested_at = ?, cancelled_by = ?, cancel_reason = ?, version = version + 1
      WHERE task_id = ? AND status IN ('working','input_required') AND cancel_requested_at IS NULL`),
    ack: db.prepare(`UPDATE tasks SET acknowledged_at = ?, acknowledged_by = ? WHERE task_id = ? AND status = 'failed' AND acknowledged_at IS NULL`),
    unreadDue: db.prepare(`SELECT ${OPS_ROW_COLUMNS} FROM tasks INDEXED BY tasks_ops_unread_due WHERE ${UNREAD_FAILURE} AND unread_alert_at IS NULL AND updated_at <= ?
      ORDER BY updated_at LIMIT ?`),
    markUnread: db.prepare(`UPDATE tasks SET unread_alert_at = ? WHERE task_id = ? AND unread_alert_at IS NULL`),
    addAlert: db.prepare(`INSERT INTO alerts (alert_id, dedupe_key, kind, task_id, tool, principal, message, destination, data, created_at, next_attempt_at)
      VALUES (@alertId, @dedupeKey, @kind, @taskId, @tool, @principal, @message, @destination, @data, @createdAt, @createdAt)
      ON CONFLICT DO NOTHING RETURNING ${ALERT_READ_COLUMNS}`),
    replicaDelete: db.prepare(`DELETE FROM replicas WHERE replica_id = ?`),
    due: db.prepare(`SELECT alert_id FROM alerts WHERE state = 'pending' AND next_attempt_at <= ? AND (claimed_until IS NULL OR claimed_until <= ?)
      AND destination IN (SELECT value FROM json_each(?)) ORDER BY next_attempt_at LIMIT ?`),
    claim: db.prepare(`UPDATE alerts SET claimed_by = ?, claimed_until = ?, attempts = attempts + 1 WHERE alert_id = ? RETURNING ${ALERT_READ_COLUMNS}`),
    delivered: db.prepare(`UPDATE alerts SET state = 'delivered', delivered_at = ?, last_status = ?, last_error = NULL, claimed_until = NULL
      WHERE alert_id = ? AND claimed_by = ? AND state = 'pending'`),
    retry: db.prepare(`UPDATE alerts SET state = CASE WHEN ? IS NULL THEN 'failed' ELSE 'pending' END, next_attempt_at = coalesce(?, next_attempt_at),
      last_status = ?, last_error = ?, claimed_until = NULL WHERE alert_id = ? AND claimed_by = ? AND state = 'pending'`),
    alertsFirst: db.prepare(`SELECT ${ALERT_READ_COLUMNS} FROM alerts ORDER BY created_at DESC, alert_id DESC LIMIT ?`),
    alertsNext: db.prepare(`SELECT ${ALERT_READ_COLUMNS} FROM alerts WHERE (created_at, alert_id) < (?, ?) ORDER BY created_at DESC, alert_id DESC LIMIT ?`),
    subscribe: db.prepare(`INSERT OR IGNORE INTO task_subscriptions (task_id, destination) VALUES (?, ?)`),
    statusOf: db.prepare(`SELECT task_id, tool, principal, status, status_message, updated_at FROM tasks WHERE task_id = ?`),
  };
  const insertAlert = (a: NewAlert): AlertRow | undefined =>
    s.addAlert.get({ ...a, taskId: a.taskId ?? null, tool: a.tool ?? null, principal: a.principal ?? null, data: JSON.stringify(a.data) }) as AlertRow | undefined;

  return {
    async listTasks(filter: OpsTaskFilter, after: ListCursor | undefined, limit: number): Promise<OpsTaskPage> {
      if (contradicts(filter)) return { rows: [] };
      const { st, keys, bounded } = listing(filter, after !== undefined);
      const read = Math.max(SCAN_BOUND, limit + 1);
      const params: Record<string, unknown> = { limit: limit + 1 };
      listingValues(keys, filter, after, read).forEach((v, i) => (params[`p${i + 1}`] = v));
      return listingPage(st.all(params) as Array<OpsRow & { hit: number; rn: number }>, limit, read, bounded);
    },

    async counts(unreadCap: number): Promise<OpsCounts> {
      const rows = s.counts.all() as Array<{ status: string; n: number }>;
      const unread = (s.unread.get(unreadCap + 1) as { n: number }).n;
      return countsFrom(rows, unread, unreadCap);
    },

    async waiting(limit: number): Promise<WaitingTask[]> {
      return (s.waiting.all(limit) as Array<{ task_id: string; principal: string; tool: string; status_message: string | null; input_since: number | null; input_requests: string; created_at: number }>).map((r) => ({
        taskId: r.task_id,
        principal: r.principal,
        tool: r.tool,
        statusMessage: r.status_message,
        inputSince: r.input_since,
        inputRequests: JSON.parse(r.input_requests),
        createdAt: r.created_at,
      }));
    },

    async queued(limit: number) {
      return (s.queued.all(limit) as IdleRow[]).map(toIdle);
    },

    async parked(limit: number) {
      return (s.parked.all(limit) as IdleRow[]).map(toIdle);
    },

    async toolStats(since: number, cap: number) {
      return toToolStats(s.toolStats.all({ since, cap }) as ToolStatsDbRow[], cap);
    },

    async detail(taskId: string): Promise<OpsTaskDetail | undefined> {
      const l = await get(taskId);
      if (l.state !== 'found') return undefined;
      const o = s.opsColumns.get(taskId) as { acknowledged_at: number | null; acknowledged_by: string | null; cancelled_by: string | null; cancel_reason: string | null } | undefined;
      return { ...l.record, acknowledgedAt: o?.acknowledged_at ?? null, acknowledgedBy: o?.acknowledged_by ?? null, cancelledBy: o?.cancelled_by ?? null, cancelReason: o?.cancel_reason ?? null };
    },

    async history(taskId: string, limit: number): Promise<TaskEvent[]> {
      return (s.history.all({ id: taskId, limit }) as EventRow[]).map(toEvent);
    },

    async cancel(taskId: string, operator: string, reason: string, now: number): Promise<TaskRecord | undefined> {
      await write(() => s.cancel.run(now, operator, reason, taskId));
      const l = await get(taskId);
      return l.state === 'found' ? l.record : undefined;
    },

    acknowledge(taskId: string, operator: string, now: number): Promise<boolean> {
      return write(() => s.ack.run(now, operator, taskId).changes > 0);
    },

    alertUnreadFailures(failedBefore: number, now: number, limit: number): Promise<AlertRecord[]> {
      // The mark and the alert in one transaction: each failure alerts once, whichever process scans first.
      return write(() => {
        const out: AlertRecord[] = [];
        for (const r of s.unreadDue.all(failedBefore, limit) as OpsRow[]) {
          const t = toOpsRow(r);
          if (s.markUnread.run(now, t.taskId).changes === 0) continue;
          const row = insertAlert(unreadFailureAlert(t, now));
          if (row) out.push(toAlert(row));
        }
        return out;
      });
    },

    addAlert(alert: NewAlert): Promise<boolean> {
      return write(() => insertAlert(alert) !== undefined);
    },

    replicaLost(replicaId: string, alert: NewAlert): Promise<boolean> {
      return write(() => s.replicaDelete.run(replicaId).changes > 0 && insertAlert(alert) !== undefined);
    },

    claimAlerts(replica: string, destinations: string[], now: number, claimMs: number, limit: number): Promise<AlertRecord[]> {
      // One writer at a time on a SQLite file: the IMMEDIATE transaction is the claim's lock.
      return write(() =>
        (s.due.all(now, now, JSON.stringify(destinations), limit) as Array<{ alert_id: string }>).map((r) => toAlert(s.claim.get(replica, now + claimMs, r.alert_id) as AlertRow)),
      );
    },

    async settleAlert(alertId, replica, o): Promise<void> {
      await write(() => {
        if (o.delivered) s.delivered.run(o.now, o.status, alertId, replica);
        else s.retry.run(o.retryAt, o.retryAt, o.status, o.error.slice(0, 500), alertId, replica);
      });
    },

    async listAlerts(after, limit): Promise<AlertRecord[]> {
      const rows = (after ? s.alertsNext.all(after.createdAt, after.alertId, limit) : s.alertsFirst.all(limit)) as AlertRow[];
      return rows.map(toAlert);
    },

    subscribe(taskId: string, destination: string, now: number): Promise<void> {
      return write(() => {
        s.subscribe.run(taskId, destination);
        // Already finished before the subscription landed: push its outcome now (same transaction, so no gap).
        const t = s.statusOf.get(taskId) as { task_id: string; tool: string; principal: string; status: string; status_message: string | null; updated_at: number } | undefined;
        if (t && ['completed', 'failed', 'cancelled'].includes(t.status)) {
          insertAlert({
            alertId: newAlertId(),
            dedupeKey: `task-status:${taskId}:${t.status}:${destination}`,
            kind: 'task-status',
            taskId,
            tool: t.tool,
            principal: t.principal,
            message: `task ${taskId} is ${t.status}`,
            destination,
            data: { taskId, status: t.status, statusMessage: t.status_message, updatedAt: t.updated_at },
            createdAt: now,
          });
        }
      });
    },
  };
}
