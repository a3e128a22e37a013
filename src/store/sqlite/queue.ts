/**
 * The run queue on SQLite: its statements, one per transition. The processes sharing one file take turns on its
 * write lock, so a claim (one UPDATE run inside the store's write transaction) sees every claim before it and
 * the deployment-wide tool limits hold exactly. The claim rule is rules.nextClaim, stated in SQL. A parked task is in
 * the queue with its wake time as queued_at: the same claim resumes it once that time has come (rules.claimable).
 */
import type Database from 'better-sqlite3';
import type { QueueClaim } from '../types.js';
import { TASK_COLUMNS } from '../task-columns.js';

const RUNNING = `r.owner IS NOT NULL AND r.status IN ('working','input_required')`;

/**
 * Principals with queued work, walked through the (principal, queued_at) index one principal at a time (a loose
 * index scan: the cost grows with the number of principals, not with the length of the queue); each one's oldest
 * eligible task; of those, the one whose principal runs the fewest tasks, then the oldest.
 */
const CLAIM = `
WITH RECURSIVE
  principals(p) AS (
    SELECT (SELECT principal FROM tasks WHERE queued_at IS NOT NULL ORDER BY principal LIMIT 1)
    UNION ALL
    SELECT (SELECT t.principal FROM tasks t WHERE t.queued_at IS NOT NULL AND t.principal > principals.p ORDER BY t.principal LIMIT 1)
    FROM principals WHERE principals.p IS NOT NULL
  ),
  full_tools(tool) AS (
    SELECT l.key FROM json_each(@limits) l WHERE (SELECT count(*) FROM tasks r WHERE ${RUNNING} AND r.tool = l.key) >= l.value
  ),
  heads(task_id) AS (
    SELECT (SELECT q.task_id FROM tasks q
      WHERE q.principal = principals.p AND q.queued_at IS NOT NULL AND q.cancel_requested_at IS NULL
        AND (q.parked_at IS NULL OR q.queued_at <= @now) AND (q.status = 'input_required' OR q.expires_at IS NULL OR q.expires_at > @now)
        AND q.tool IN (SELECT value FROM json_each(@tools)) AND q.tool NOT IN (SELECT tool FROM full_tools)
        AND q.principal NOT IN (SELECT value FROM json_each(@capped))
      ORDER BY q.queued_at, q.task_id LIMIT 1)
    FROM principals WHERE principals.p IS NOT NULL
  )
UPDATE tasks SET owner = @owner, queued_at = NULL, parked_at = NULL, epoch = epoch + 1,
  status_message = CASE WHEN parked_at IS NULL THEN NULL ELSE status_message END, updated_at = @now, version = version + 1
WHERE task_id = (
  SELECT t.task_id FROM heads h JOIN tasks t ON t.task_id = h.task_id
  ORDER BY (SELECT count(*) FROM tasks r WHERE r.principal = t.principal AND ${RUNNING}), t.queued_at, t.task_id
  LIMIT 1)
RETURNING ${TASK_COLUMNS}`;

export interface QueueStatements {
  claim: Database.Statement;
  claimedAt: Database.Statement;
  cancel: Database.Statement;
  depth: Database.Statement;
  principalLoad: Database.Statement;
  position: Database.Statement;
}

export function prepareQueue(db: Database.Database): QueueStatements {
  return {
    claim: db.prepare(CLAIM),
    // What a claim at @now took, untouched since (a creation keeps epoch 1; any later write moves updated_at).
    claimedAt: db.prepare(`SELECT ${TASK_COLUMNS} FROM tasks WHERE owner = @owner AND updated_at = @now AND epoch > 1 AND queued_at IS NULL AND parked_at IS NULL
      AND status IN ('working','input_required')`),
    // Only while still queued or parked: a task claimed meanwhile is cancelled through its owner instead.
    cancel: db.prepare(`UPDATE tasks SET status = 'cancelled', cancel_requested_at = COALESCE(cancel_requested_at, @now), queued_at = NULL, parked_at = NULL,
        input_requests = '{}', input_since = NULL,
        status_message = @statusMessage, updated_at = @now, version = version + 1
      WHERE task_id = @taskId AND queued_at IS NOT NULL AND status IN ('working','input_required') RETURNING ${TASK_COLUMNS}`),
    // Work waiting for capacity; parked tasks wait for their time or an answer, not for a slot.
    depth: db.prepare('SELECT count(*) AS n FROM tasks WHERE queued_at IS NOT NULL AND parked_at IS NULL'),
    // One principal's share: waiting for capacity, stored, and the next expiry.
    principalLoad: db.prepare(`SELECT count(CASE WHEN queued_at IS NOT NULL AND parked_at IS NULL THEN 1 END) AS queued, count(*) AS stored,
        min(expires_at) AS next_expiry FROM tasks WHERE principal = ?`),
    // A row-value comparison: one range of the queue's covering index (an OR of two ranges made SQLite collect and
    // de-duplicate the rowids of every task ahead).
    position: db.prepare(`SELECT (SELECT count(*) FROM tasks q WHERE q.queued_at IS NOT NULL AND q.parked_at IS NULL
        AND (q.queued_at, q.task_id) < (me.queued_at, me.task_id)) + 1 AS n
      FROM tasks me WHERE me.task_id = ? AND me.queued_at IS NOT NULL AND me.parked_at IS NULL`),
  };
}

/** A claim of up to `c.max` tasks: the claim statement once per task, each taking one of its tool's room (inside
 *  the store's write transaction, so the processes on the file see it as one step). Returns the claimed rows. */
export function claimRows<R extends { tool: string; principal: string }>(claim: Database.Statement, c: QueueClaim): R[] {
  const room = { ...c.room };
  const running = { ...c.principalCap?.running };
  const rows: R[] = [];
  while (rows.length < c.max) {
    const tools = Object.keys(room).filter((t) => room[t]! > 0);
    if (tools.length === 0) break;
    // Principals at the claimer's per-principal bound (this claim's takes included) get nothing more from it.
    const capped = c.principalCap ? Object.keys(running).filter((p) => running[p]! >= c.principalCap!.cap) : [];
    const row = claim.get({ owner: c.owner, now: c.now, tools: JSON.stringify(tools), limits: JSON.stringify(c.limits), capped: JSON.stringify(capped) }) as R | undefined;
    if (!row) break;
    rows.push(row);
    room[row.tool]! -= 1;
    if (c.principalCap) running[row.principal] = (running[row.principal] ?? 0) + 1;
  }
  return rows;
}

/**
 * Queued tasks' positions, remembered until the file changes: a position is a count over the tasks ahead (one index
 * range, longer as the queue grows), and a client polling a queue that does not move asks it again each second.
 * Any commit, by this connection (`total_changes()`) or by another process on the file (`data_version`), forgets
 * them all, so a poll never reads a position older than the last write.
 */
export class QueuePositions {
  private readonly generation: Database.Statement;
  private seen = '';
  private readonly known = new Map<string, number | undefined>();
  constructor(db: Database.Database, private readonly position: Database.Statement, private readonly max = 10_000) {
    this.generation = db.prepare('SELECT total_changes() AS c, data_version AS v FROM pragma_data_version').raw();
  }

  get(taskId: string): number | undefined {
    const [changes, version] = this.generation.get() as [number, number];
    const now = `${changes}:${version}`;
    if (now !== this.seen || this.known.size >= this.max) {
      this.known.clear();
      this.seen = now;
    }
    if (this.known.has(taskId)) return this.known.get(taskId);
    const n = (this.position.get(taskId) as { n: number } | undefined)?.n;
    this.known.set(taskId, n);
    return n;
  }
}
