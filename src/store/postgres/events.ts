/**
 * The MCP Events room of the PostgreSQL store: its migration (log, subscriptions, deliveries and the triggers that
 * write them with the task's change) and its queries; deliveries are claimed with SKIP LOCKED, so replicas
 * delivering together never take the same one while a claim holds.
 */
import type pg from 'pg';
import type { TaskRecord } from '../types.js';
import {
  EVENTS_MIGRATION,
  LOG_COLUMNS,
  SUBSCRIPTION_COLUMNS,
  filterWhere,
  ofAlias,
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

type Query = <R extends pg.QueryResultRow>(name: string, text: string, values: unknown[]) => Promise<pg.QueryResult<R>>;
type Tx = <T>(fn: (c: pg.PoolClient) => Promise<T>) => Promise<T>;

/** The live subscriptions (`e`) of a change's owner that it matches; `c` names the change's columns. */
export function subscriptionsMatching(c: { principal: string; taskId: string; tool: string; status: string; at: string }): string {
  return `e.principal = ${c.principal} AND e.active AND (e.refresh_before IS NULL OR e.refresh_before > ${c.at})
      AND (e.task_id IS NULL OR e.task_id = ${c.taskId}) AND (e.tool IS NULL OR e.tool = ${c.tool})
      AND ${statusMatch(c.status, 'e.name')}`;
}

/** A change is logged and fanned out to the owner's live subscriptions it matches, in the change's transaction.
 *  Migration 13 replaces it (output subscriptions match no change), 14 (./commit-claim.ts), and 17 with this text again
 *  after `guard`: the statement that skips a change its own statement logged (14's commit claim). */
export function loggedFunction(guard = ''): string {
  return `CREATE OR REPLACE FUNCTION outlast_event_logged() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE s bigint;
BEGIN${guard}
  INSERT INTO event_log (principal, task_id, tool, status, status_message, at)
    VALUES (NEW.principal, NEW.task_id, NEW.tool, NEW.status, NEW.status_message, NEW.updated_at) RETURNING seq INTO s;
  INSERT INTO event_deliveries (sub_id, seq, next_attempt_at)
    SELECT e.sub_id, s, NEW.updated_at FROM event_subscriptions e
    WHERE ${subscriptionsMatching({ principal: 'NEW.principal', taskId: 'NEW.task_id', tool: 'NEW.tool', status: 'NEW.status', at: 'NEW.updated_at' })};
  RETURN NULL;
END $$;`;
}
export const LOGGED_FUNCTION = loggedFunction();

export const POSTGRES_EVENTS_MIGRATION = {
  version: EVENTS_MIGRATION,
  sql: `
-- Every status change of a task, in its own transaction: the outbox of MCP Events and the poll/stream cursor.
CREATE TABLE event_log (
  seq            bigserial PRIMARY KEY,
  principal      text NOT NULL,
  task_id        text NOT NULL,
  tool           text NOT NULL,
  status         text NOT NULL,
  status_message text,
  at             bigint NOT NULL
);
-- Used by: events/poll and the stream's read of one principal's changes after its cursor (principal = ?, seq > ?).
CREATE INDEX event_log_by_principal ON event_log (principal, seq);
-- Used by: the prune of log rows past retention (at < ?), read from the index alone.
CREATE INDEX event_log_by_time ON event_log (at);
-- Used by: tasks_event_gone, the delete of a task's log rows when the task leaves.
CREATE INDEX event_log_by_task ON event_log (task_id);
CREATE TABLE event_subscriptions (
  sub_id           text PRIMARY KEY,
  principal        text NOT NULL,
  url              text NOT NULL,
  name             text NOT NULL,
  args             text NOT NULL,
  task_id          text,
  tool             text,
  secret           text NOT NULL,
  refresh_before   bigint,
  active           boolean NOT NULL DEFAULT true,
  created_at       bigint NOT NULL,
  failures         integer NOT NULL DEFAULT 0,
  verified_at      bigint,
  last_status      integer,
  last_error       text,
  last_delivery_at bigint,
  deactivated_by   text
);
-- Used by: the fan-out of a change to its principal's subscriptions of that name (principal, name), the count of a
-- principal's live subscriptions, a subscribe's lookup of the same subscription, and a principal's subscription list.
CREATE INDEX event_subscriptions_match ON event_subscriptions (principal, name);
CREATE TABLE event_deliveries (
  sub_id          text NOT NULL,
  seq             bigint NOT NULL,
  state           text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending','delivered','failed')),
  attempts        integer NOT NULL DEFAULT 0,
  next_attempt_at bigint NOT NULL,
  claimed_by      text,
  claimed_until   bigint,
  last_status     integer,
  last_error      text,
  PRIMARY KEY (sub_id, seq)
);
-- Used by: the delivery claim's scan for pending deliveries that are due (next_attempt_at <= now), and the prune's
-- pending set.
CREATE INDEX event_deliveries_due ON event_deliveries (next_attempt_at) WHERE state = 'pending';
${LOGGED_FUNCTION}
CREATE TRIGGER tasks_event_changed AFTER UPDATE ON tasks FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status)
  EXECUTE FUNCTION outlast_event_logged();
-- A task leaves (the sweeper made it a tombstone): its log rows and deliveries go with it, so the log is bounded by
-- task retention even when no replica prunes (no --events).
CREATE FUNCTION outlast_event_gone() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM event_deliveries WHERE seq IN (SELECT seq FROM event_log WHERE task_id = OLD.task_id);
  DELETE FROM event_log WHERE task_id = OLD.task_id;
  RETURN NULL;
END $$;
CREATE TRIGGER tasks_event_gone AFTER DELETE ON tasks FOR EACH ROW EXECUTE FUNCTION outlast_event_gone();
CREATE TRIGGER tasks_event_created AFTER INSERT ON tasks FOR EACH ROW WHEN (NEW.status <> 'working')
  EXECUTE FUNCTION outlast_event_logged();
`,
};

const SUB_COLUMNS = `${ofAlias('s', SUBSCRIPTION_COLUMNS)}, (SELECT count(*) FROM event_deliveries d WHERE d.sub_id = s.sub_id AND d.state = 'pending') AS pending`;

/** Deliveries settled as delivered, in one statement: the subscriptions' rows are locked in sub_id order (two replicas'
 *  batches never wait on each other in a cycle), each takes its newest delivery's status and time. */
const SETTLE_DELIVERED = `WITH x AS (SELECT sub_id, seq, replica, status, now FROM unnest($1::text[], $2::bigint[], $3::text[], $4::int[], $5::bigint[]) AS x(sub_id, seq, replica, status, now)),
    d AS (UPDATE event_deliveries e SET state = 'delivered', last_status = x.status, claimed_by = NULL, claimed_until = NULL
      FROM x WHERE e.sub_id = x.sub_id AND e.seq = x.seq AND e.claimed_by = x.replica RETURNING e.sub_id, e.seq, x.status, x.now),
    newest AS (SELECT DISTINCT ON (sub_id) sub_id, status, now FROM d ORDER BY sub_id, now DESC, seq DESC),
    locked AS (SELECT s.sub_id FROM event_subscriptions s WHERE s.sub_id IN (SELECT sub_id FROM newest) ORDER BY s.sub_id FOR UPDATE)
  UPDATE event_subscriptions s SET failures = 0, last_status = n.status, last_error = NULL, last_delivery_at = n.now
  FROM newest n WHERE s.sub_id = n.sub_id AND s.sub_id IN (SELECT sub_id FROM locked)`;

interface Delivered {
  subId: string;
  seq: number;
  replica: string;
  status: number;
  now: number;
}

/** Settles deliveries as delivered: one statement at a time, and what is settled while it runs goes in the next (a
 *  burst of deliveries to one subscription would otherwise queue on its row, a commit each). */
function deliveredSettler(query: Query): (d: Delivered) => Promise<void> {
  let queued: Array<{ d: Delivered; done: (e?: unknown) => void }> = [];
  let running = false;
  const run = async (): Promise<void> => {
    running = true;
    while (queued.length > 0) {
      const batch = queued;
      queued = [];
      const cols = [batch.map((b) => b.d.subId), batch.map((b) => b.d.seq), batch.map((b) => b.d.replica), batch.map((b) => b.d.status), batch.map((b) => b.d.now)];
      let error: unknown;
      try {
        await query('ev_delivered_many', SETTLE_DELIVERED, cols).catch(async (e) => {
          // A deadlock with a statement of another kind is resolved by the database cancelling one: run it again once.
          if ((e as { code?: string }).code !== '40P01') throw e;
          await query('ev_delivered_many', SETTLE_DELIVERED, cols);
        });
      } catch (e) {
        error = e ?? new Error('settle failed');
      }
      for (const b of batch) b.done(error);
    }
    running = false;
  };
  return (d) =>
    new Promise<void>((resolve, reject) => {
      queued.push({ d, done: (e) => (e === undefined ? resolve() : reject(e)) });
      if (!running) void run();
    });
}

/** `startCursor`: puts an output subscription's cursor in place, in the subscribe's transaction (./output-events.ts).
 *  `taskOf`: a task row read with a claim (its columns and the database's `store_now`) as the record (null: expired). */
export function postgresEvents(query: Query, tx: Tx, startCursor: (c: pg.PoolClient, s: NewSubscription) => Promise<void>, taskOf: (row: object) => TaskRecord | null): EventStore {
  const settleDelivered = deliveredSettler(query);
  return {
    subscribe: (s, limit) =>
      tx(async (c) => {
        // One principal's subscribes are serialised, so the limit holds under concurrent requests.
        await c.query('SELECT pg_advisory_xact_lock(hashtext($1))', [`outlast-events:${s.principal}`]);
        const refreshed = await c.query(
          `UPDATE event_subscriptions SET secret = $2, refresh_before = $3, active = true, failures = 0, deactivated_by = NULL WHERE sub_id = $1`,
          [s.subId, s.secret, s.refreshBefore],
        );
        if (refreshed.rowCount) {
          await c.query(`DELETE FROM event_deliveries WHERE sub_id = $1 AND seq < 0`, [s.subId]);
          await startCursor(c, s);
          return 'refreshed' as const;
        }
        const live = await c.query<{ n: number }>(`SELECT count(*)::int AS n FROM event_subscriptions WHERE principal = $1 AND (refresh_before IS NULL OR refresh_before > $2)`, [s.principal, s.now]);
        if (live.rows[0]!.n >= limit) return 'limit' as const;
        await c.query(
          `INSERT INTO event_subscriptions (sub_id, principal, url, name, args, task_id, tool, secret, refresh_before, created_at) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10)`,
          [s.subId, s.principal, s.url, s.name, s.args, s.taskId, s.tool, s.secret, s.refreshBefore, s.now],
        );
        await startCursor(c, s);
        return 'created' as const;
      }),
    unsubscribe: async (key) => {
      const r = await query<{ sub_id: string }>(
        'ev_unsub',
        `WITH gone AS (DELETE FROM event_subscriptions WHERE principal = $1 AND url = $2 AND name = $3 AND args = $4 RETURNING sub_id),
           d AS (DELETE FROM event_deliveries WHERE sub_id IN (SELECT sub_id FROM gone)) SELECT sub_id FROM gone`,
        [key.principal, key.url, key.name, key.args],
      );
      return (r.rowCount ?? 0) > 0;
    },
    get: async (subId) => {
      const r = await query<SubscriptionRow>('ev_get', `SELECT ${SUB_COLUMNS} FROM event_subscriptions s WHERE sub_id = $1`, [subId]);
      return r.rows[0] ? toSubscription(r.rows[0]) : undefined;
    },
    live: async (principal, now) => (await query<{ n: number }>('ev_live', `SELECT count(*)::int AS n FROM event_subscriptions WHERE principal = $1 AND (refresh_before IS NULL OR refresh_before > $2)`, [principal, now])).rows[0]!.n,
    verifiedAt: async (principal, url) => {
      const r = await query<{ v: string | null }>('ev_verified', `SELECT max(verified_at) AS v FROM event_subscriptions WHERE principal = $1 AND url = $2`, [principal, url]);
      return r.rows[0]?.v == null ? null : Number(r.rows[0].v);
    },
    markVerified: async (subId, now) => void (await query('ev_mark', `UPDATE event_subscriptions SET verified_at = $2 WHERE sub_id = $1`, [subId, now])),
    list: async (principal, limit) => {
      const r = principal === undefined
        ? await query<SubscriptionRow>('ev_list', `SELECT ${SUB_COLUMNS} FROM event_subscriptions s ORDER BY created_at DESC LIMIT $1`, [limit])
        : await query<SubscriptionRow>('ev_list_of', `SELECT ${SUB_COLUMNS} FROM event_subscriptions s WHERE principal = $1 ORDER BY created_at DESC LIMIT $2`, [principal, limit]);
      return r.rows.map(toSubscription);
    },
    deactivate: async (subId, operator, now) => {
      // One statement: the deactivation and its terminated envelope's delivery row commit together.
      const r = await query<{ sub_id: string }>(
        'ev_deact',
        `WITH d AS (UPDATE event_subscriptions SET active = false, deactivated_by = $2 WHERE sub_id = $1 AND active RETURNING sub_id),
           t AS (INSERT INTO event_deliveries (sub_id, seq, next_attempt_at) SELECT sub_id, -$3::bigint, $3::bigint FROM d ON CONFLICT (sub_id, seq) DO NOTHING)
         SELECT sub_id FROM d`,
        [subId, operator, now],
      );
      return (r.rowCount ?? 0) > 0;
    },
    claim: async (replica, now, claimMs, limit) => {
      const r = await query<ClaimRow & { nth: string; task: object | null }>(
        'ev_claim',
        `WITH due AS (
            SELECT d.sub_id, d.seq FROM event_deliveries d JOIN event_subscriptions s ON s.sub_id = d.sub_id
            WHERE d.state = 'pending' AND d.seq > 0 AND d.next_attempt_at <= $2 AND (d.claimed_until IS NULL OR d.claimed_until <= $2)
              AND s.active AND (s.refresh_before IS NULL OR s.refresh_before > $2)
            ORDER BY d.next_attempt_at LIMIT $4 FOR UPDATE OF d SKIP LOCKED
          ), claimed AS (
            UPDATE event_deliveries d SET claimed_by = $1, claimed_until = $3, attempts = d.attempts + 1
            FROM due WHERE d.sub_id = due.sub_id AND d.seq = due.seq RETURNING d.sub_id, d.seq, d.attempts
          )
          SELECT ${ofAlias('l', LOG_COLUMNS)}, c.sub_id, c.attempts, s.name, s.url, s.secret, row_number() OVER (PARTITION BY c.seq ORDER BY c.sub_id) AS nth,
            CASE WHEN row_number() OVER (PARTITION BY c.seq ORDER BY c.sub_id) = 1
              THEN to_jsonb(t) || jsonb_build_object('store_now', (extract(epoch FROM now()) * 1000)::float8) END AS task
          FROM claimed c JOIN event_log l ON l.seq = c.seq JOIN event_subscriptions s ON s.sub_id = c.sub_id
          LEFT JOIN tasks t ON t.task_id = l.task_id`,
        [replica, now, now + claimMs, limit],
      );
      // The task is read once per change (the first of its rows carries it), however many subscriptions it goes to.
      const tasks = new Map<string, TaskRecord | null>();
      for (const row of r.rows) if (Number(row.nth) === 1) tasks.set(String(row.seq), row.task ? taskOf(row.task) : null);
      return r.rows.map((row) => ({ ...toClaimed(row), task: tasks.get(String(row.seq)) ?? null }));
    },
    claimControl: async (replica, now, claimMs, limit) => {
      const r = await query<{ sub_id: string; seq: string; attempts: number; url: string; secret: string }>(
        'ev_claim_control',
        `WITH due AS (
            SELECT d.sub_id, d.seq FROM event_deliveries d JOIN event_subscriptions s ON s.sub_id = d.sub_id
            WHERE d.state = 'pending' AND d.seq < 0 AND d.next_attempt_at <= $2 AND (d.claimed_until IS NULL OR d.claimed_until <= $2)
              AND (s.refresh_before IS NULL OR s.refresh_before > $2)
            ORDER BY d.next_attempt_at LIMIT $4 FOR UPDATE OF d SKIP LOCKED
          ), claimed AS (
            UPDATE event_deliveries d SET claimed_by = $1, claimed_until = $3, attempts = d.attempts + 1
            FROM due WHERE d.sub_id = due.sub_id AND d.seq = due.seq RETURNING d.sub_id, d.seq, d.attempts
          )
          SELECT c.sub_id, c.seq, c.attempts, s.url, s.secret FROM claimed c JOIN event_subscriptions s ON s.sub_id = c.sub_id`,
        [replica, now, now + claimMs, limit],
      );
      return r.rows.map((x) => ({ type: 'terminated' as const, subId: x.sub_id, seq: Number(x.seq), url: x.url, secret: x.secret, attempts: x.attempts }));
    },
    settle: async (subId, seq, replica, o) => {
      if (o.delivered) return settleDelivered({ subId, seq, replica, status: o.status, now: o.now });
      await query(
        'ev_failed',
        `WITH d AS (UPDATE event_deliveries SET state = CASE WHEN $6::bigint IS NULL THEN 'failed' ELSE 'pending' END,
              next_attempt_at = coalesce($6::bigint, next_attempt_at), last_status = $4, last_error = $5, claimed_by = NULL, claimed_until = NULL
            WHERE sub_id = $1 AND seq = $2 AND claimed_by = $3 RETURNING sub_id)
         UPDATE event_subscriptions SET failures = failures + 1, last_status = $4, last_error = $5,
           active = CASE WHEN failures + 1 >= $7 THEN false ELSE active END WHERE sub_id IN (SELECT sub_id FROM d)`,
        [subId, seq, replica, o.status, o.error, o.retryAt, o.deactivateAfter],
      );
    },
    head: async () => Number((await query<{ seq: string }>('ev_head', `SELECT coalesce(max(seq), 0) AS seq FROM event_log`, [])).rows[0]!.seq),
    read: async (principal, filter, after, limit) => {
      const values: unknown[] = [principal, after, limit];
      let extra = '';
      if (filter.taskId !== null) extra += ` AND task_id = $${values.push(filter.taskId)}`;
      if (filter.tool !== null) extra += ` AND tool = $${values.push(filter.tool)}`;
      const where = filterWhere(filter);
      const r = await query<LogRow>(`ev_read_${filter.name}_${filter.taskId !== null}_${filter.tool !== null}`, `SELECT ${LOG_COLUMNS} FROM event_log WHERE principal = $1 AND seq > $2 AND ${where}${extra} ORDER BY seq LIMIT $3`, values);
      return r.rows.map(toChange);
    },
    prune: async (before, expiredBefore) => {
      await query(
        'ev_prune_subs',
        `WITH gone AS (DELETE FROM event_subscriptions WHERE refresh_before IS NOT NULL AND refresh_before < $1 RETURNING sub_id)
         DELETE FROM event_deliveries WHERE sub_id IN (SELECT sub_id FROM gone)`,
        [expiredBefore],
      );
      await query('ev_prune_log', `DELETE FROM event_log l WHERE at < $1 AND NOT EXISTS (SELECT 1 FROM event_deliveries d WHERE d.seq = l.seq AND d.state = 'pending')`, [before]);
      await query('ev_prune_done', `DELETE FROM event_deliveries d WHERE state <> 'pending' AND NOT EXISTS (SELECT 1 FROM event_log l WHERE l.seq = d.seq)`, []);
    },
  };
}
