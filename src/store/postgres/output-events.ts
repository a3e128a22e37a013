/**
 * Webhook delivery of task output on PostgreSQL (see ../output-events.ts): the per-subscription cursor table (claimed
 * with SKIP LOCKED, so two replicas never send one subscription's items at once), and the fan-out function replaced
 * so that an output subscription matches no status change.
 */
import type pg from 'pg';
import type { NewSubscription } from '../events.js';
import { OUTPUT_EVENTS_MIGRATION, TASK_OUTPUT, outputCursorsTable, type OutputEventStore } from '../output-events.js';
import { LOGGED_FUNCTION } from './events.js';

type Query = <R extends pg.QueryResultRow>(name: string, text: string, values: unknown[]) => Promise<pg.QueryResult<R>>;

export const POSTGRES_OUTPUT_EVENTS_MIGRATION = {
  version: OUTPUT_EVENTS_MIGRATION,
  sql: `${outputCursorsTable({ text: 'text', int: 'integer', seq: 'bigint' })}
${LOGGED_FUNCTION}
`,
};

/** What subscribe runs for an output subscription, in its transaction (a refresh keeps the cursor it has). */
export async function startOutputCursor(c: pg.PoolClient, s: NewSubscription): Promise<void> {
  if (s.name !== TASK_OUTPUT || s.taskId === null) return;
  await c.query(`INSERT INTO event_output_cursors (sub_id, task_id, delivered_seq, next_attempt_at) VALUES ($1, $2, $3, $4) ON CONFLICT (sub_id) DO NOTHING`, [s.subId, s.taskId, s.outputAfter ?? 0, s.now]);
}

export function postgresOutputEvents(query: Query): OutputEventStore {
  return {
    claim: async (replica, now, claimMs, limit) => {
      const r = await query<{ sub_id: string; task_id: string; delivered_seq: string; attempts: number; principal: string; url: string; secret: string }>(
        'evo_claim',
        `WITH due AS (
            SELECT c.sub_id FROM event_output_cursors c
              JOIN event_subscriptions s ON s.sub_id = c.sub_id JOIN tasks t ON t.task_id = c.task_id
            WHERE c.next_attempt_at <= $2 AND (c.claimed_until IS NULL OR c.claimed_until <= $2)
              AND s.active AND (s.refresh_before IS NULL OR s.refresh_before > $2)
              AND (t.output_seq > c.delivered_seq OR t.status IN ('completed','failed','cancelled'))
            ORDER BY c.next_attempt_at LIMIT $4 FOR UPDATE OF c SKIP LOCKED
          ), claimed AS (
            UPDATE event_output_cursors c SET claimed_by = $1, claimed_until = $3
            FROM due WHERE c.sub_id = due.sub_id RETURNING c.sub_id, c.task_id, c.delivered_seq, c.attempts
          )
          SELECT c.sub_id, c.task_id, c.delivered_seq, c.attempts, s.principal, s.url, s.secret FROM claimed c JOIN event_subscriptions s ON s.sub_id = c.sub_id`,
        [replica, now, now + claimMs, limit],
      );
      return r.rows.map((x) => ({ subId: x.sub_id, taskId: x.task_id, principal: x.principal, url: x.url, secret: x.secret, delivered: Number(x.delivered_seq), attempts: x.attempts }));
    },
    settle: async (subId, replica, to, o, holdUntil) => {
      const retryAt = o.delivered ? null : o.retryAt;
      const moves = retryAt === null;
      const sub = o.delivered
        ? { sql: `UPDATE event_subscriptions SET failures = 0, last_status = $3, last_error = NULL, last_delivery_at = $4 WHERE sub_id IN (SELECT sub_id FROM d)`, values: [o.status, o.now] }
        : { sql: `UPDATE event_subscriptions SET failures = failures + 1, last_status = $3, last_error = $4,
              active = CASE WHEN failures + 1 >= $5 THEN false ELSE active END WHERE sub_id IN (SELECT sub_id FROM d)`, values: [o.status, o.error, o.deactivateAfter] };
      const cursor = moves
        ? { sql: `UPDATE event_output_cursors SET delivered_seq = $${sub.values.length + 3}, attempts = 0, claimed_until = $${sub.values.length + 4} WHERE sub_id = $1 AND claimed_by = $2 RETURNING sub_id`, values: [to, holdUntil] }
        : { sql: `UPDATE event_output_cursors SET attempts = attempts + 1, next_attempt_at = $${sub.values.length + 3}, claimed_by = NULL, claimed_until = NULL WHERE sub_id = $1 AND claimed_by = $2 RETURNING sub_id`, values: [retryAt] };
      const r = await query(
        `evo_settle_${o.delivered ? 'ok' : 'failed'}_${moves ? 'move' : 'retry'}`,
        `WITH d AS (${cursor.sql}), u AS (${sub.sql}) SELECT sub_id FROM d`,
        [subId, replica, ...sub.values, ...cursor.values],
      );
      return moves && (r.rowCount ?? 0) > 0;
    },
    release: async (subId, replica) =>
      void (await query('evo_release', `UPDATE event_output_cursors SET claimed_by = NULL, claimed_until = NULL WHERE sub_id = $1 AND claimed_by = $2`, [subId, replica])),
    end: async (subId, replica) =>
      void (await query(
        'evo_end',
        `WITH gone AS (DELETE FROM event_subscriptions s WHERE s.sub_id = $1 AND EXISTS (SELECT 1 FROM event_output_cursors c WHERE c.sub_id = $1 AND c.claimed_by = $2) RETURNING sub_id)
         DELETE FROM event_deliveries WHERE sub_id IN (SELECT sub_id FROM gone)`,
        [subId, replica],
      )),
  };
}
