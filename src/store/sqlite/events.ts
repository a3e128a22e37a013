/**
 * The MCP Events room of the SQLite store: its migration (log, subscriptions, deliveries and the triggers that write
 * them with the task's change) and its queries. Writes go through the store's group-commit queue.
 */
import type Database from 'better-sqlite3';
import {
  EVENTS_MIGRATION,
  LOG_COLUMNS,
  SUBSCRIPTION_COLUMNS,
  ofAlias,
  filterWhere,
  statusMatch,
  toChange,
  toClaimed,
  toSubscription,
  type ClaimRow,
  type EventStore,
  type LogRow,
  type NewSubscription,
  type SubscriptionRow,
} from '../events.js';

type Write = <T>(op: () => T) => Promise<T>;

const LOG_INSERT = `INSERT INTO event_log (principal, task_id, tool, status, status_message, at)
  VALUES (NEW.principal, NEW.task_id, NEW.tool, NEW.status, NEW.status_message, NEW.updated_at)`;

/** Each change goes to the owner's live subscriptions it matches (same transaction: no change without its deliveries).
 *  Migration 13 creates it again (output subscriptions match no change). */
export const FANOUT_TRIGGER = `CREATE TRIGGER event_log_fanout AFTER INSERT ON event_log BEGIN
  INSERT INTO event_deliveries (sub_id, seq, next_attempt_at)
  SELECT s.sub_id, NEW.seq, NEW.at FROM event_subscriptions s
  WHERE s.principal = NEW.principal AND s.active = 1 AND (s.refresh_before IS NULL OR s.refresh_before > NEW.at)
    AND (s.task_id IS NULL OR s.task_id = NEW.task_id) AND (s.tool IS NULL OR s.tool = NEW.tool)
    AND ${statusMatch('NEW.status', 's.name')};
END;`;

export const SQLITE_EVENTS_MIGRATION = {
  version: EVENTS_MIGRATION,
  sql: `
-- Every status change of a task, in its own transaction: the outbox of MCP Events and the poll/stream cursor.
CREATE TABLE event_log (
  seq            INTEGER PRIMARY KEY AUTOINCREMENT,
  principal      TEXT NOT NULL,
  task_id        TEXT NOT NULL,
  tool           TEXT NOT NULL,
  status         TEXT NOT NULL,
  status_message TEXT,
  at             INTEGER NOT NULL
);
-- Used by: events/poll and the stream's read of one principal's changes after its cursor (principal = ?, seq > ?).
CREATE INDEX event_log_by_principal ON event_log (principal, seq);
-- Used by: the prune of log rows past retention (at < ?), read from the index alone.
CREATE INDEX event_log_by_time ON event_log (at);
-- Used by: tasks_event_gone, the delete of a task's log rows when the task leaves.
CREATE INDEX event_log_by_task ON event_log (task_id);
CREATE TABLE event_subscriptions (
  sub_id           TEXT PRIMARY KEY,
  principal        TEXT NOT NULL,
  url              TEXT NOT NULL,
  name             TEXT NOT NULL,
  args             TEXT NOT NULL,
  task_id          TEXT,
  tool             TEXT,
  secret           TEXT NOT NULL,
  refresh_before   INTEGER,
  active           INTEGER NOT NULL DEFAULT 1,
  created_at       INTEGER NOT NULL,
  failures         INTEGER NOT NULL DEFAULT 0,
  verified_at      INTEGER,
  last_status      INTEGER,
  last_error       TEXT,
  last_delivery_at INTEGER,
  deactivated_by   TEXT
);
-- Used by: the fan-out of a change to its principal's subscriptions of that name (principal, name), the count of a
-- principal's live subscriptions, a subscribe's lookup of the same subscription, and a principal's subscription list.
CREATE INDEX event_subscriptions_match ON event_subscriptions (principal, name);
CREATE TABLE event_deliveries (
  sub_id          TEXT NOT NULL,
  seq             INTEGER NOT NULL,
  state           TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending','delivered','failed')),
  attempts        INTEGER NOT NULL DEFAULT 0,
  next_attempt_at INTEGER NOT NULL,
  claimed_by      TEXT,
  claimed_until   INTEGER,
  last_status     INTEGER,
  last_error      TEXT,
  PRIMARY KEY (sub_id, seq)
);
-- Used by: the delivery claim's scan for pending deliveries that are due (next_attempt_at <= now), and the prune's
-- pending set.
CREATE INDEX event_deliveries_due ON event_deliveries (next_attempt_at) WHERE state = 'pending';
CREATE TRIGGER tasks_event_changed AFTER UPDATE OF status ON tasks WHEN NEW.status <> OLD.status BEGIN ${LOG_INSERT}; END;
CREATE TRIGGER tasks_event_created AFTER INSERT ON tasks WHEN NEW.status <> 'working' BEGIN ${LOG_INSERT}; END;
-- A task leaves (the sweeper made it a tombstone): its log rows and deliveries go with it, so the log is bounded by
-- task retention even on a replica that never prunes (no --events).
CREATE TRIGGER tasks_event_gone AFTER DELETE ON tasks BEGIN
  DELETE FROM event_deliveries WHERE seq IN (SELECT seq FROM event_log WHERE task_id = OLD.task_id);
  DELETE FROM event_log WHERE task_id = OLD.task_id;
END;
${FANOUT_TRIGGER}
`,
};

const SUB_COLUMNS = `${ofAlias('s', SUBSCRIPTION_COLUMNS)}, (SELECT count(*) FROM event_deliveries d WHERE d.sub_id = s.sub_id AND d.state = 'pending') AS pending`;

/** `startCursor`: puts an output subscription's cursor in place, in the subscribe's write (./output-events.ts). */
export function sqliteEvents(db: Database.Database, write: Write, startCursor: (s: NewSubscription) => void): EventStore {
  const q = {
    get: db.prepare(`SELECT ${SUB_COLUMNS} FROM event_subscriptions s WHERE sub_id = ?`),
    live: db.prepare(`SELECT count(*) AS n FROM event_subscriptions WHERE principal = ? AND (refresh_before IS NULL OR refresh_before > ?)`),
    insert: db.prepare(`INSERT INTO event_subscriptions (sub_id, principal, url, name, args, task_id, tool, secret, refresh_before, created_at)
      VALUES (@subId, @principal, @url, @name, @args, @taskId, @tool, @secret, @refreshBefore, @now)`),
    refresh: db.prepare(`UPDATE event_subscriptions SET secret = @secret, refresh_before = @refreshBefore, active = 1, failures = 0, deactivated_by = NULL
      WHERE sub_id = @subId`),
    dropControl: db.prepare(`DELETE FROM event_deliveries WHERE sub_id = ? AND seq < 0`),
    exists: db.prepare(`SELECT 1 FROM event_subscriptions WHERE sub_id = ?`),
    byKey: db.prepare(`SELECT sub_id FROM event_subscriptions WHERE principal = ? AND url = ? AND name = ? AND args = ?`),
    del: db.prepare(`DELETE FROM event_subscriptions WHERE sub_id = ?`),
    delDeliveries: db.prepare(`DELETE FROM event_deliveries WHERE sub_id = ?`),
    verified: db.prepare(`SELECT max(verified_at) AS v FROM event_subscriptions WHERE principal = ? AND url = ?`),
    markVerified: db.prepare(`UPDATE event_subscriptions SET verified_at = ? WHERE sub_id = ?`),
    list: db.prepare(`SELECT ${SUB_COLUMNS} FROM event_subscriptions s ORDER BY created_at DESC LIMIT ?`),
    listOf: db.prepare(`SELECT ${SUB_COLUMNS} FROM event_subscriptions s WHERE principal = ? ORDER BY created_at DESC LIMIT ?`),
    deactivate: db.prepare(`UPDATE event_subscriptions SET active = 0, deactivated_by = ? WHERE sub_id = ? AND active = 1`),
    queueTerminated: db.prepare(`INSERT INTO event_deliveries (sub_id, seq, next_attempt_at) VALUES (?, ?, ?) ON CONFLICT (sub_id, seq) DO NOTHING`),
    claim: db.prepare(`UPDATE event_deliveries SET claimed_by = @replica, claimed_until = @until, attempts = attempts + 1
      WHERE rowid IN (SELECT d.rowid FROM event_deliveries d JOIN event_subscriptions s ON s.sub_id = d.sub_id
        WHERE d.state = 'pending' AND d.seq > 0 AND d.next_attempt_at <= @now AND (d.claimed_until IS NULL OR d.claimed_until <= @now)
          AND s.active = 1 AND (s.refresh_before IS NULL OR s.refresh_before > @now)
        ORDER BY d.next_attempt_at LIMIT @limit)
      RETURNING sub_id, seq, attempts`),
    claimControl: db.prepare(`UPDATE event_deliveries SET claimed_by = @replica, claimed_until = @until, attempts = attempts + 1
      WHERE rowid IN (SELECT d.rowid FROM event_deliveries d JOIN event_subscriptions s ON s.sub_id = d.sub_id
        WHERE d.state = 'pending' AND d.seq < 0 AND d.next_attempt_at <= @now AND (d.claimed_until IS NULL OR d.claimed_until <= @now)
          AND (s.refresh_before IS NULL OR s.refresh_before > @now)
        ORDER BY d.next_attempt_at LIMIT @limit)
      RETURNING sub_id, seq, attempts`),
    claimedControl: db.prepare(`SELECT url, secret FROM event_subscriptions WHERE sub_id = ?`),
    claimed: db.prepare(`SELECT ${ofAlias('l', LOG_COLUMNS)}, s.sub_id, s.name, s.url, s.secret FROM event_log l, event_subscriptions s WHERE l.seq = ? AND s.sub_id = ?`),
    delivered: db.prepare(`UPDATE event_deliveries SET state = 'delivered', last_status = @status, claimed_by = NULL, claimed_until = NULL
      WHERE sub_id = @subId AND seq = @seq AND claimed_by = @replica`),
    failed: db.prepare(`UPDATE event_deliveries SET state = CASE WHEN @retryAt IS NULL THEN 'failed' ELSE 'pending' END,
        next_attempt_at = coalesce(@retryAt, next_attempt_at), last_status = @status, last_error = @error, claimed_by = NULL, claimed_until = NULL
      WHERE sub_id = @subId AND seq = @seq AND claimed_by = @replica`),
    subOk: db.prepare(`UPDATE event_subscriptions SET failures = 0, last_status = @status, last_error = NULL, last_delivery_at = @now WHERE sub_id = @subId`),
    subFailed: db.prepare(`UPDATE event_subscriptions SET failures = failures + 1, last_status = @status, last_error = @error,
        active = CASE WHEN failures + 1 >= @deactivateAfter THEN 0 ELSE active END WHERE sub_id = @subId`),
    head: db.prepare(`SELECT coalesce(max(seq), 0) AS seq FROM event_log`),
    pruneLog: db.prepare(`DELETE FROM event_log WHERE at < ? AND seq NOT IN (SELECT seq FROM event_deliveries WHERE state = 'pending')`),
    pruneDone: db.prepare(`DELETE FROM event_deliveries WHERE state <> 'pending' AND seq NOT IN (SELECT seq FROM event_log)`),
    expired: db.prepare(`SELECT sub_id FROM event_subscriptions WHERE refresh_before IS NOT NULL AND refresh_before < ?`),
  };
  const reads = new Map<string, Database.Statement>();
  const readQuery = (where: string, byTask: boolean, byTool: boolean) => {
    const k = `${where}|${byTask}|${byTool}`;
    let st = reads.get(k);
    if (!st) {
      st = db.prepare(`SELECT ${LOG_COLUMNS} FROM event_log WHERE principal = @principal AND seq > @after AND ${where}
        ${byTask ? 'AND task_id = @taskId' : ''} ${byTool ? 'AND tool = @tool' : ''} ORDER BY seq LIMIT @limit`);
      reads.set(k, st);
    }
    return st;
  };
  return {
    subscribe: (s, limit) =>
      write(() => {
        if (q.exists.get(s.subId)) {
          q.refresh.run(s);
          q.dropControl.run(s.subId);
          startCursor(s);
          return 'refreshed' as const;
        }
        if ((q.live.get(s.principal, s.now) as { n: number }).n >= limit) return 'limit' as const;
        q.insert.run(s);
        startCursor(s);
        return 'created' as const;
      }),
    unsubscribe: (key) =>
      write(() => {
        const row = q.byKey.get(key.principal, key.url, key.name, key.args) as { sub_id: string } | undefined;
        if (!row) return false;
        q.delDeliveries.run(row.sub_id);
        q.del.run(row.sub_id);
        return true;
      }),
    get: async (subId) => {
      const r = q.get.get(subId) as SubscriptionRow | undefined;
      return r ? toSubscription(r) : undefined;
    },
    live: async (principal, now) => (q.live.get(principal, now) as { n: number }).n,
    verifiedAt: async (principal, url) => (q.verified.get(principal, url) as { v: number | null }).v,
    markVerified: (subId, now) => write(() => void q.markVerified.run(now, subId)),
    list: async (principal, limit) => ((principal === undefined ? q.list.all(limit) : q.listOf.all(principal, limit)) as SubscriptionRow[]).map(toSubscription),
    deactivate: (subId, operator, now) =>
      write(() => {
        if (q.deactivate.run(operator, subId).changes === 0) return false;
        q.queueTerminated.run(subId, -now, now);
        return true;
      }),
    claim: (replica, now, claimMs, limit) =>
      write(() => {
        const got = q.claim.all({ replica, now, until: now + claimMs, limit }) as Array<{ sub_id: string; seq: number; attempts: number }>;
        return got.flatMap((g) => {
          const r = q.claimed.get(g.seq, g.sub_id) as ClaimRow | undefined;
          return r ? [toClaimed({ ...r, attempts: g.attempts })] : [];
        });
      }),
    claimControl: (replica, now, claimMs, limit) =>
      write(() => {
        const got = q.claimControl.all({ replica, now, until: now + claimMs, limit }) as Array<{ sub_id: string; seq: number; attempts: number }>;
        return got.flatMap((g) => {
          const r = q.claimedControl.get(g.sub_id) as { url: string; secret: string } | undefined;
          return r ? [{ type: 'terminated' as const, subId: g.sub_id, seq: g.seq, url: r.url, secret: r.secret, attempts: g.attempts }] : [];
        });
      }),
    settle: (subId, seq, replica, o) =>
      write(() => {
        if (o.delivered) {
          if (q.delivered.run({ subId, seq, replica, status: o.status }).changes) q.subOk.run({ subId, status: o.status, now: o.now });
        } else if (q.failed.run({ subId, seq, replica, status: o.status, error: o.error, retryAt: o.retryAt }).changes) {
          q.subFailed.run({ subId, status: o.status, error: o.error, deactivateAfter: o.deactivateAfter });
        }
      }),
    head: async () => (q.head.get() as { seq: number }).seq,
    read: async (principal, filter, after, limit) =>
      (readQuery(filterWhere(filter), filter.taskId !== null, filter.tool !== null).all({
        principal,
        after,
        limit,
        ...(filter.taskId !== null ? { taskId: filter.taskId } : {}),
        ...(filter.tool !== null ? { tool: filter.tool } : {}),
      }) as LogRow[]).map(toChange),
    prune: (before, expiredBefore) =>
      write(() => {
        for (const r of q.expired.all(expiredBefore) as Array<{ sub_id: string }>) {
          q.delDeliveries.run(r.sub_id);
          q.del.run(r.sub_id);
        }
        q.pruneLog.run(before);
        q.pruneDone.run();
      }),
  };
}
