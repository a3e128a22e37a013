/**
 * The run queue on PostgreSQL: its statements, one per transition, and the claim function (created by migration 3,
 * replaced by migration 4, which made parked tasks claimable once due and a claim bump the fencing epoch).
 *
 * A claim is one statement, `SELECT <task columns> FROM outlast_claim(...)`: a function, because a deployment-wide tool limit
 * needs a count taken after a lock (in READ COMMITTED every statement of a function sees what committed before it;
 * one plain statement would count on the snapshot it started with, and two replicas could both take the last
 * slot). The rule is rules.nextClaim, applied once per task taken (a claim takes up to `max`):
 *   - principals with queued work are walked through the (principal, queued_at) index one at a time (a loose index
 *     scan: the cost grows with the number of principals, not with the length of the queue), fewest running first,
 *     then by their oldest eligible task;
 *   - each principal's oldest eligible task is locked `FOR UPDATE SKIP LOCKED`, so concurrent claimers take
 *     different tasks instead of waiting for each other;
 *   - a task of a tool with a deployment-wide limit is taken only under that tool's advisory lock, after counting
 *     the tool's running tasks again. The first such lock is waited for (its holder commits within one statement);
 *     any further one is only tried, so two claimers can never wait for each other.
 */

import type { QueueClaim } from '../types.js';
import { TASK_COLUMNS } from '../task-columns.js';

const RUNNING = `r.owner IS NOT NULL AND r.status IN ('working','input_required')`;
// rules.claimable: due (a parked task's queued_at is its wake time; a queued task is always due), not cancelled, not
// expired (no TTL runs while a task waits for input).
const ELIGIBLE = `q.queued_at IS NOT NULL AND (q.parked_at IS NULL OR q.queued_at <= p_now) AND q.cancel_requested_at IS NULL
          AND (q.status = 'input_required' OR q.expires_at IS NULL OR q.expires_at > p_now)
          AND q.tool = ANY(p_tools) AND NOT (q.tool = ANY(v_full))`;

/** The claim function, as migration 4 left it. Migration 3 creates it and migration 4 replaces it with the same text:
 *  PL/pgSQL checks the columns a body names only when it runs, so on a new database migration 3 may create the latest
 *  body before migration 4 adds the columns it uses. */
export const CLAIM_FUNCTION = `
CREATE OR REPLACE FUNCTION outlast_claim(p_owner text, p_now bigint, p_tools text[], p_room integer[], p_limited text[], p_limits integer[], p_max integer,
  p_principal_cap integer, p_principals text[], p_principal_running integer[])
RETURNS SETOF tasks LANGUAGE plpgsql
-- A burst fills the queue faster than statistics follow: with estimates from a nearly empty queue the planner would
-- fetch and sort a principal's whole backlog for each task taken. Walking the (principal, queued_at) index in order
-- is right at any size, so bitmap scans are off inside the claim (and JIT, which its short queries never repay).
SET enable_bitmapscan = off SET jit = off
AS $$
DECLARE
  v_full text[];
  v_principal text;
  v_id text;
  v_tool text;
  v_limit integer;
  v_i integer;
  v_taken integer := 0;
  v_waited boolean := false;
  -- The principals this claim took a task of, once per task (their handlers run on the claimer from now on).
  v_took text[] := '{}';
BEGIN
  -- Tools the claimer has no room for, and tools at their deployment-wide limit now.
  SELECT coalesce(array_agg(t.tool), '{}') INTO v_full FROM unnest(p_tools, p_room) AS t(tool, room) WHERE t.room <= 0;
  v_full := v_full || (SELECT coalesce(array_agg(l.tool), '{}') FROM unnest(p_limited, p_limits) AS l(tool, lim)
    WHERE (SELECT count(*) FROM tasks r WHERE ${RUNNING} AND r.tool = l.tool) >= l.lim);
  WHILE v_taken < p_max LOOP
    v_id := NULL;
    -- Each task taken starts from the top: the principals' order changes as their running counts grow.
    <<principals>>
    FOR v_principal IN
      WITH RECURSIVE principals(p) AS (
        (SELECT t.principal FROM tasks t WHERE t.queued_at IS NOT NULL ORDER BY t.principal LIMIT 1)
        UNION ALL
        SELECT (SELECT t.principal FROM tasks t WHERE t.queued_at IS NOT NULL AND t.principal > principals.p ORDER BY t.principal LIMIT 1)
        FROM principals WHERE principals.p IS NOT NULL
      )
      SELECT h.p FROM (
        SELECT pr.p, head.queued_at, head.task_id, count(*) OVER () AS principals FROM principals pr CROSS JOIN LATERAL (
          SELECT q.queued_at, q.task_id FROM tasks q WHERE q.principal = pr.p AND ${ELIGIBLE}
          ORDER BY q.queued_at, q.task_id LIMIT 1) head
        WHERE pr.p IS NOT NULL
      ) h
      -- Running tasks are counted only when there is someone to be fair to.
      ORDER BY CASE WHEN h.principals > 1 THEN (SELECT count(*) FROM tasks r WHERE r.principal = h.p AND ${RUNNING}) ELSE 0 END,
        h.queued_at, h.task_id
    LOOP
      -- The claimer's per-principal bound: a principal running its share there gets nothing more from this claim.
      CONTINUE WHEN p_principal_cap IS NOT NULL AND coalesce((SELECT pr.n FROM unnest(p_principals, p_principal_running) AS pr(p, n) WHERE pr.p = v_principal), 0)
        + coalesce(cardinality(array_positions(v_took, v_principal)), 0) >= p_principal_cap;
      LOOP
        v_id := NULL;
        SELECT q.task_id, q.tool INTO v_id, v_tool FROM tasks q WHERE q.principal = v_principal AND ${ELIGIBLE}
          ORDER BY q.queued_at, q.task_id LIMIT 1 FOR UPDATE SKIP LOCKED;
        EXIT WHEN v_id IS NULL;
        v_limit := (SELECT l.lim FROM unnest(p_limited, p_limits) AS l(tool, lim) WHERE l.tool = v_tool);
        IF v_limit IS NOT NULL THEN
          IF NOT v_waited THEN
            PERFORM pg_advisory_xact_lock(hashtext('outlast:limit:' || current_schema() || ':' || v_tool));
            v_waited := true;
          ELSIF NOT pg_try_advisory_xact_lock(hashtext('outlast:limit:' || current_schema() || ':' || v_tool)) THEN
            v_full := v_full || v_tool;
            CONTINUE;
          END IF;
          -- Counted again under the lock (this claim's own earlier takes included).
          IF (SELECT count(*) FROM tasks r WHERE ${RUNNING} AND r.tool = v_tool) >= v_limit THEN
            v_full := v_full || v_tool;
            CONTINUE;
          END IF;
        END IF;
        -- A parked task keeps its status message (what its handler last said); a queued one loses "Queued: ...".
        RETURN QUERY UPDATE tasks SET owner = p_owner, queued_at = NULL, parked_at = NULL, epoch = epoch + 1,
            status_message = CASE WHEN parked_at IS NULL THEN NULL ELSE status_message END, updated_at = p_now, version = version + 1
          WHERE task_id = v_id RETURNING *;
        v_taken := v_taken + 1;
        v_took := v_took || v_principal;
        v_i := array_position(p_tools, v_tool);
        p_room[v_i] := p_room[v_i] - 1;
        IF p_room[v_i] <= 0 THEN v_full := v_full || v_tool; END IF;
        EXIT principals;
      END LOOP;
    END LOOP;
    EXIT WHEN v_id IS NULL;
  END LOOP;
END $$;
`;

/** Named statements of the queue (merged into the store's statement table). */
export const QUEUE_QUERIES = {
  claim: `SELECT ${TASK_COLUMNS} FROM outlast_claim($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
  // Only while still queued or parked: a claim holding the row makes this wait, then match nothing (the owner cancels it).
  cancelQueued: `UPDATE tasks SET status = 'cancelled', cancel_requested_at = COALESCE(cancel_requested_at, $2), queued_at = NULL, parked_at = NULL,
      input_requests = '{}', input_since = NULL,
      status_message = $3, updated_at = $2, version = version + 1
    WHERE task_id = $1 AND queued_at IS NOT NULL AND status IN ('working','input_required') RETURNING ${TASK_COLUMNS}`,
  // What a claim at $2 took, untouched since (a creation keeps epoch 1; any later write moves updated_at): the
  // tasks_unfinished index on owner.
  claimedAt: `SELECT ${TASK_COLUMNS} FROM tasks WHERE owner = $1 AND updated_at = $2 AND epoch > 1 AND queued_at IS NULL AND parked_at IS NULL
      AND status IN ('working','input_required')`,
  // Work waiting for capacity; parked tasks wait for their time or an answer, not for a slot.
  queueDepth: 'SELECT count(*)::int AS n FROM tasks WHERE queued_at IS NOT NULL AND parked_at IS NULL',
  // One principal's share (the tasks_by_principal index): waiting for capacity, stored, and the next expiry.
  principalLoad: `SELECT count(*) FILTER (WHERE queued_at IS NOT NULL AND parked_at IS NULL)::int AS queued, count(*)::int AS stored,
      min(expires_at) AS next_expiry FROM tasks WHERE principal = $1`,
  queuePosition: `SELECT (SELECT count(*) FROM tasks q WHERE q.queued_at IS NOT NULL AND q.parked_at IS NULL
      AND (q.queued_at < me.queued_at OR (q.queued_at = me.queued_at AND q.task_id < me.task_id)))::int + 1 AS n
    FROM tasks me WHERE me.task_id = $1 AND me.queued_at IS NOT NULL AND me.parked_at IS NULL`,
};

/** The parameters of the claim statement: room and limits as parallel arrays (room capped to an integer). */
export function claimValues(c: QueueClaim): unknown[] {
  const tools = Object.keys(c.room);
  const limited = Object.keys(c.limits);
  const int = (n: number) => Math.min(n, 2 ** 31 - 1);
  const principals = c.principalCap ? Object.keys(c.principalCap.running) : [];
  return [c.owner, c.now, tools, tools.map((t) => int(c.room[t]!)), limited, limited.map((t) => c.limits[t]), int(c.max),
    c.principalCap ? int(c.principalCap.cap) : null, principals, principals.map((p) => int(c.principalCap!.running[p]!))];
}
