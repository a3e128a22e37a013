/**
 * Task output on PostgreSQL (see ../output.ts). An append is one statement: it skips keyed items already stored, bumps
 * the task row's output_seq by the number left only while the writer holds the task (owner and epoch, unfinished;
 * the UPDATE locks the row, so a takeover and an append serialise and a replica that lost the task writes nothing),
 * and inserts the items under the numbers that bump gave: assigned in the row's own lock, so two replicas never take
 * the same number and none is skipped. Dropping the oldest items past the bounds is a second statement, only when over.
 */
import type pg from 'pg';
import { OUTPUT_MIGRATION, keptFrom, rotation, type OutputStore } from '../output.js';
import { refusalOf } from '../rules.js';
import type { TaskStatus } from '../../protocol/index.js';

type Query = <R extends pg.QueryResultRow>(name: string, text: string, values: unknown[]) => Promise<pg.QueryResult<R>>;

export const POSTGRES_OUTPUT_MIGRATION = {
  version: OUTPUT_MIGRATION,
  sql: `
-- The task's latest output sequence number: bumped by each append, in its statement (the counter).
ALTER TABLE tasks ADD COLUMN output_seq integer NOT NULL DEFAULT 0;
CREATE TABLE task_output (
  task_id  text NOT NULL REFERENCES tasks (task_id) ON DELETE CASCADE,
  seq      integer NOT NULL,
  type     text NOT NULL,
  data     text NOT NULL,
  bytes    integer NOT NULL,
  -- The task's output bytes up to and including this item (the byte bound reads it, not a sum).
  cum      bigint NOT NULL,
  item_key text,
  at       bigint NOT NULL,
  PRIMARY KEY (task_id, seq)
);
-- Used by: an append's check that an item key is new (the item is written once, whatever the retries).
CREATE UNIQUE INDEX task_output_keys ON task_output (task_id, item_key) WHERE item_key IS NOT NULL;
`,
};

const APPEND = `WITH items AS (
    SELECT type, data, bytes, item_key, ord FROM unnest($4::text[], $5::text[], $6::int[], $7::text[]) WITH ORDINALITY AS i(type, data, bytes, item_key, ord)
  ), fresh AS (
    SELECT i.type, i.data, i.bytes, i.item_key, i.ord, row_number() OVER (ORDER BY ord) AS n, sum(bytes) OVER (ORDER BY ord) AS run FROM items i
    WHERE i.item_key IS NULL OR NOT EXISTS (SELECT 1 FROM task_output o WHERE o.task_id = $1 AND o.item_key = i.item_key)
  ), head AS (
    UPDATE tasks SET output_seq = output_seq + (SELECT count(*) FROM fresh)
    WHERE task_id = $1 AND owner = $2 AND epoch = $3 AND status IN ('working','input_required')
    RETURNING output_seq
  ), prev AS (
    SELECT h.output_seq - (SELECT count(*) FROM fresh) AS old,
      COALESCE((SELECT cum FROM task_output o WHERE o.task_id = $1 AND o.seq = h.output_seq - (SELECT count(*) FROM fresh)), 0) AS cum
    FROM head h
  ), ins AS (
    INSERT INTO task_output (task_id, seq, type, data, bytes, cum, item_key, at)
    SELECT $1, p.old + f.n, f.type, f.data, f.bytes, p.cum + f.run, f.item_key, $8 FROM fresh f, prev p
    RETURNING seq, cum
  ), first AS (
    SELECT seq, cum - bytes AS base FROM task_output WHERE task_id = $1 ORDER BY seq LIMIT 1
  )
  SELECT p.old::int AS old, p.cum::float8 AS cum_before, (SELECT count(*) FROM ins)::int AS added,
    (SELECT max(cum) FROM ins)::float8 AS cum_last, (SELECT seq FROM first) AS first_seq, (SELECT base FROM first)::float8 AS first_base
  FROM prev p`;

const Q = {
  append: APPEND,
  fence: 'SELECT status, owner, epoch FROM tasks WHERE task_id = $1',
  fromBytes: 'SELECT seq FROM task_output WHERE task_id = $1 AND cum - bytes >= $2 ORDER BY seq LIMIT 1',
  drop: 'DELETE FROM task_output WHERE task_id = $1 AND seq < $2',
  head: `SELECT status, principal, output_seq, (SELECT seq FROM task_output o WHERE o.task_id = t.task_id ORDER BY seq LIMIT 1) AS first
    FROM tasks t WHERE task_id = $1`,
  page: 'SELECT seq, type, data, at FROM task_output WHERE task_id = $1 AND seq > $2 ORDER BY seq LIMIT $3',
};

export function postgresOutput(query: Query): OutputStore {
  const q = <R extends pg.QueryResultRow>(name: keyof typeof Q, values: unknown[]) => query<R>(`outlast_output_${name}`, Q[name], values);
  return {
    async append(taskId, fence, items, bounds, now) {
      const r = (await q<{ old: number; cum_before: number; added: number; cum_last: number | null; first_seq: number | null; first_base: number | null }>('append', [
        taskId, fence.owner, fence.epoch,
        items.map((i) => i.type), items.map((i) => i.data), items.map((i) => Buffer.byteLength(i.data)), items.map((i) => i.key),
        now,
      ])).rows[0];
      if (!r) {
        const row = (await q<{ status: TaskStatus; owner: string | null; epoch: number }>('fence', [taskId])).rows[0];
        throw refusalOf(taskId, row, fence.owner, fence.epoch);
      }
      const last = r.old + r.added;
      if (r.added === 0) return { added: 0, last };
      // first_* were read on the statement's snapshot (before its own rows): none means this append made the first.
      const cut = rotation({
        firstSeq: r.first_seq ?? r.old + 1,
        firstBase: r.first_base ?? r.cum_before,
        last,
        lastCum: r.cum_last ?? r.cum_before,
      }, bounds);
      if (cut) {
        const byBytes = cut.minBase === undefined ? undefined : (await q<{ seq: number }>('fromBytes', [taskId, cut.minBase])).rows[0]?.seq;
        await q('drop', [taskId, keptFrom(cut, byBytes)]);
      }
      return { added: r.added, last };
    },
    async read(taskId, principal, after, limit) {
      const head = (await q<{ status: TaskStatus; principal: string; output_seq: number; first: number | null }>('head', [taskId])).rows[0];
      if (!head || head.principal !== principal) return undefined;
      const rows = (await q<{ seq: number; type: string; data: string; at: string | number }>('page', [taskId, after, limit])).rows;
      const items = rows.map((r) => ({ seq: r.seq, type: r.type, data: JSON.parse(r.data) as unknown, at: Number(r.at) }));
      // An append that committed between the two reads: its items are in the page, so the head is at least theirs.
      const last = Math.max(head.output_seq, items.at(-1)?.seq ?? 0);
      const first = head.first ?? items[0]?.seq ?? null;
      return { items, first, last, status: head.status };
    },
  };
}
