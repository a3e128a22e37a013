/**
 * Webhook delivery of task output on SQLite (see ../output-events.ts): the per-subscription cursor table, and the
 * fan-out trigger made again so that an output subscription matches no status change.
 */
import type Database from 'better-sqlite3';
import type { NewSubscription } from '../events.js';
import { OUTPUT_EVENTS_MIGRATION, TASK_OUTPUT, outputCursorsTable, type ClaimedOutput, type OutputEventStore } from '../output-events.js';
import { FANOUT_TRIGGER } from './events.js';

type Write = <T>(op: () => T) => Promise<T>;

export const SQLITE_OUTPUT_EVENTS_MIGRATION = {
  version: OUTPUT_EVENTS_MIGRATION,
  sql: `${outputCursorsTable({ text: 'TEXT', int: 'INTEGER', seq: 'INTEGER' })}
DROP TRIGGER event_log_fanout;
${FANOUT_TRIGGER}
`,
};

/** The statement subscribe runs for an output subscription (a refresh keeps the cursor it has). */
export function outputCursorStarter(db: Database.Database): (s: NewSubscription) => void {
  const insert = db.prepare(`INSERT INTO event_output_cursors (sub_id, task_id, delivered_seq, next_attempt_at) VALUES (?, ?, ?, ?) ON CONFLICT (sub_id) DO NOTHING`);
  return (s) => {
    if (s.name === TASK_OUTPUT && s.taskId !== null) insert.run(s.subId, s.taskId, s.outputAfter ?? 0, s.now);
  };
}

export function sqliteOutputEvents(db: Database.Database, write: Write): OutputEventStore {
  const q = {
    claim: db.prepare(`UPDATE event_output_cursors SET claimed_by = @replica, claimed_until = @until
      WHERE sub_id IN (SELECT c.sub_id FROM event_output_cursors c
          JOIN event_subscriptions s ON s.sub_id = c.sub_id JOIN tasks t ON t.task_id = c.task_id
        WHERE c.next_attempt_at <= @now AND (c.claimed_until IS NULL OR c.claimed_until <= @now)
          AND s.active = 1 AND (s.refresh_before IS NULL OR s.refresh_before > @now)
          AND (t.output_seq > c.delivered_seq OR t.status IN ('completed','failed','cancelled'))
        ORDER BY c.next_attempt_at LIMIT @limit)
      RETURNING sub_id, task_id, delivered_seq, attempts`),
    target: db.prepare(`SELECT principal, url, secret FROM event_subscriptions WHERE sub_id = ?`),
    moved: db.prepare(`UPDATE event_output_cursors SET delivered_seq = @to, attempts = 0, claimed_until = @holdUntil
      WHERE sub_id = @subId AND claimed_by = @replica`),
    retry: db.prepare(`UPDATE event_output_cursors SET attempts = attempts + 1, next_attempt_at = @retryAt, claimed_by = NULL, claimed_until = NULL
      WHERE sub_id = @subId AND claimed_by = @replica`),
    subOk: db.prepare(`UPDATE event_subscriptions SET failures = 0, last_status = @status, last_error = NULL, last_delivery_at = @now WHERE sub_id = @subId`),
    subFailed: db.prepare(`UPDATE event_subscriptions SET failures = failures + 1, last_status = @status, last_error = @error,
        active = CASE WHEN failures + 1 >= @deactivateAfter THEN 0 ELSE active END WHERE sub_id = @subId`),
    release: db.prepare(`UPDATE event_output_cursors SET claimed_by = NULL, claimed_until = NULL WHERE sub_id = ? AND claimed_by = ?`),
    held: db.prepare(`SELECT 1 FROM event_output_cursors WHERE sub_id = ? AND claimed_by = ?`),
    endDeliveries: db.prepare(`DELETE FROM event_deliveries WHERE sub_id = ?`),
    endSub: db.prepare(`DELETE FROM event_subscriptions WHERE sub_id = ?`),
  };
  return {
    claim: (replica, now, claimMs, limit) =>
      write(() => {
        const got = q.claim.all({ replica, now, until: now + claimMs, limit }) as Array<{ sub_id: string; task_id: string; delivered_seq: number; attempts: number }>;
        return got.flatMap((g): ClaimedOutput[] => {
          const t = q.target.get(g.sub_id) as { principal: string; url: string; secret: string } | undefined;
          return t ? [{ subId: g.sub_id, taskId: g.task_id, principal: t.principal, url: t.url, secret: t.secret, delivered: g.delivered_seq, attempts: g.attempts }] : [];
        });
      }),
    settle: (subId, replica, to, o, holdUntil) =>
      write(() => {
        const moves = o.delivered || o.retryAt === null;
        const held = moves ? q.moved.run({ subId, replica, to, holdUntil }).changes > 0 : q.retry.run({ subId, replica, retryAt: o.retryAt }).changes > 0;
        if (!held) return false;
        if (o.delivered) q.subOk.run({ subId, status: o.status, now: o.now });
        else q.subFailed.run({ subId, status: o.status, error: o.error, deactivateAfter: o.deactivateAfter });
        return moves;
      }),
    release: (subId, replica) => write(() => void q.release.run(subId, replica)),
    end: (subId, replica) =>
      write(() => {
        if (!q.held.get(subId, replica)) return;
        q.endDeliveries.run(subId);
        q.endSub.run(subId);
      }),
  };
}
