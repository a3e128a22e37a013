/**
 * The run queue on PostgreSQL: its statements, one per transition, and the claim function (created by migration 3).
 *
 * A claim is one statement, `SELECT * FROM outlast_claim(...)`: a function, because a deployment-wide tool limit
 * needs a count taken after a lock (in READ COMMITTED every statement of a function sees what committed before it;
 * one plain statement would count on the snapshot it started with, and two replicas could both take the last
 * slot). The rule is rules.nextClaim:
 *   - principals with queued work are walked through the (principal, queued_at) index one at a time (a loose index
 *     scan: the cost grows with the number of principals, not with the length of the queue), fewest running first,
 *     then by their oldest eligible task;
 *   - each principal's oldest eligible task is locked `FOR UPDATE SKIP LOCKED`, so concurrent claimers take
 *     different tasks instead of waiting for each other;
 *   - a task of a tool with a deployment-wide limit is taken only under that tool's advisory lock, after counting
 *     the tool's running tasks again. The first such lock is waited for (its holder commits within one statement);
 *     any further one is only tried, so two claimers can never wait for each other.
 */

const RUNNING = `r.owner IS NOT NULL AND r.status IN ('working','input_required')`;
const ELIGIBLE = `q.queued_at IS NOT NULL AND q.cancel_requested_at IS NULL AND (q.expires_at IS NULL OR q.expires_at > p_now)
          AND q.tool = ANY(p_tools) AND NOT (q.tool = ANY(v_full))`;

/** Part of migration 3: the claim function. */
export const CLAIM_FUNCTION = `
CREATE FUNCTION outlast_claim(p_owner text, p_now bigint, p_tools text[], p_limited text[], p_limits integer[])
RETURNS SETOF tasks LANGUAGE plpgsql AS $$
DECLARE
  v_full text[];
  v_principal text;
  v_id text;
  v_tool text;
  v_limit integer;
  v_waited boolean := false;
BEGIN
  SELECT coalesce(array_agg(l.tool), '{}') INTO v_full FROM unnest(p_limited, p_limits) AS l(tool, lim)
    WHERE (SELECT count(*) FROM tasks r WHERE ${RUNNING} AND r.tool = l.tool) >= l.lim;
  FOR v_principal IN
    WITH RECURSIVE principals(p) AS (
      (SELECT t.principal FROM tasks t WHERE t.queued_at IS NOT NULL ORDER BY t.principal LIMIT 1)
      UNION ALL
      SELECT (SELECT t.principal FROM tasks t WHERE t.queued_at IS NOT NULL AND t.principal > principals.p ORDER BY t.principal LIMIT 1)
      FROM principals WHERE principals.p IS NOT NULL
    )
    SELECT pr.p FROM principals pr CROSS JOIN LATERAL (
      SELECT q.queued_at, q.task_id FROM tasks q WHERE q.principal = pr.p AND ${ELIGIBLE}
      ORDER BY q.queued_at, q.task_id LIMIT 1) head
    WHERE pr.p IS NOT NULL
    ORDER BY (SELECT count(*) FROM tasks r WHERE r.principal = pr.p AND ${RUNNING}), head.queued_at, head.task_id
  LOOP
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
        IF (SELECT count(*) FROM tasks r WHERE ${RUNNING} AND r.tool = v_tool) >= v_limit THEN
          v_full := v_full || v_tool;
          CONTINUE;
        END IF;
      END IF;
      RETURN QUERY UPDATE tasks SET owner = p_owner, queued_at = NULL, status_message = NULL, updated_at = p_now, version = version + 1
        WHERE task_id = v_id RETURNING *;
      RETURN;
    END LOOP;
  END LOOP;
END $$;
`;

/** Named statements of the queue (merged into the store's statement table). */
export const QUEUE_QUERIES = {
  claim: 'SELECT * FROM outlast_claim($1, $2, $3, $4, $5)',
  // Only while still queued: a claim holding the row makes this wait, then match nothing (the owner cancels it).
  cancelQueued: `UPDATE tasks SET status = 'cancelled', cancel_requested_at = COALESCE(cancel_requested_at, $2), queued_at = NULL,
      status_message = $3, updated_at = $2, version = version + 1
    WHERE task_id = $1 AND queued_at IS NOT NULL AND status IN ('working','input_required') RETURNING *`,
  queueDepth: 'SELECT count(*)::int AS n FROM tasks WHERE queued_at IS NOT NULL',
  queuePosition: `SELECT (SELECT count(*) FROM tasks q WHERE q.queued_at IS NOT NULL
      AND (q.queued_at < me.queued_at OR (q.queued_at = me.queued_at AND q.task_id < me.task_id)))::int + 1 AS n
    FROM tasks me WHERE me.task_id = $1 AND me.queued_at IS NOT NULL`,
};

/** The parameters of the claim statement: the limits as two parallel arrays. */
export function claimValues(c: { owner: string; now: number; tools: string[]; limits: Record<string, number> }): unknown[] {
  const limited = Object.keys(c.limits);
  return [c.owner, c.now, c.tools, limited, limited.map((t) => c.limits[t])];
}
