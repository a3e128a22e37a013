/**
 * Task output on SQLite (see ../output.ts): the task_output table and its statements. An append runs in the store's
 * write transaction: the task row's output_seq is bumped only while the writer holds the task (owner and epoch,
 * unfinished), the items are inserted with the numbers it gave, and the oldest items past the bounds are dropped. The
 * processes on one file take turns on its write lock, so numbers are assigned once, in order, with no gap.
 */
import type Database from 'better-sqlite3';
import { OUTPUT_MIGRATION, keptFrom, rotation, type OutputAppended, type OutputBounds, type OutputPage, type OutputStore, type OutputWrite } from '../output.js';
import { refusalOf } from '../rules.js';
import type { TaskStatus } from '../../protocol/index.js';
import type { WriteFence } from '../types.js';

export const SQLITE_OUTPUT_MIGRATION = {
  version: OUTPUT_MIGRATION,
  sql: `
-- The task's latest output sequence number: bumped by each append, in its transaction (the counter).
ALTER TABLE tasks ADD COLUMN output_seq INTEGER NOT NULL DEFAULT 0;
CREATE TABLE task_output (
  task_id  TEXT NOT NULL REFERENCES tasks (task_id) ON DELETE CASCADE,
  seq      INTEGER NOT NULL,
  type     TEXT NOT NULL,
  data     TEXT NOT NULL,
  bytes    INTEGER NOT NULL,
  -- The task's output bytes up to and including this item (the byte bound reads it, not a sum).
  cum      INTEGER NOT NULL,
  item_key TEXT,
  at       INTEGER NOT NULL,
  PRIMARY KEY (task_id, seq)
) WITHOUT ROWID;
-- Used by: an append's check that an item key is new (the item is written once, whatever the retries).
CREATE UNIQUE INDEX task_output_keys ON task_output (task_id, item_key) WHERE item_key IS NOT NULL;
`,
};

type Sync = <T>(op: () => T) => Promise<T>;

export function sqliteOutput(db: Database.Database, write: Sync): OutputStore {
  const s = {
    hasKey: db.prepare('SELECT 1 FROM task_output WHERE task_id = ? AND item_key = ?').pluck(),
    bump: db.prepare(`UPDATE tasks SET output_seq = output_seq + ? WHERE task_id = ? AND owner = ? AND epoch = ?
      AND status IN ('working','input_required') RETURNING output_seq`).pluck(),
    fence: db.prepare('SELECT status, owner, epoch FROM tasks WHERE task_id = ?'),
    cumAt: db.prepare('SELECT cum FROM task_output WHERE task_id = ? AND seq = ?').pluck(),
    insert: db.prepare('INSERT INTO task_output (task_id, seq, type, data, bytes, cum, item_key, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)'),
    first: db.prepare('SELECT seq, cum - bytes AS base FROM task_output WHERE task_id = ? ORDER BY seq LIMIT 1'),
    fromBytes: db.prepare('SELECT seq FROM task_output WHERE task_id = ? AND cum - bytes >= ? ORDER BY seq LIMIT 1').pluck(),
    drop: db.prepare('DELETE FROM task_output WHERE task_id = ? AND seq < ?'),
    head: db.prepare('SELECT status, principal, output_seq FROM tasks WHERE task_id = ?'),
    page: db.prepare('SELECT seq, type, data, at FROM task_output WHERE task_id = ? AND seq > ? ORDER BY seq LIMIT ?'),
  };
  const readTx = db.transaction((taskId: string, principal: string, after: number, limit: number): OutputPage | undefined => {
    const head = s.head.get(taskId) as { status: TaskStatus; principal: string; output_seq: number } | undefined;
    if (!head || head.principal !== principal) return undefined;
    const first = s.first.get(taskId) as { seq: number } | undefined;
    const rows = s.page.all(taskId, after, limit) as Array<{ seq: number; type: string; data: string; at: number }>;
    return {
      items: rows.map((r) => ({ seq: r.seq, type: r.type, data: JSON.parse(r.data), at: r.at })),
      first: first?.seq ?? null,
      last: head.output_seq,
      status: head.status,
    };
  });

  function append(taskId: string, fence: WriteFence, items: OutputWrite[], bounds: OutputBounds, now: number): OutputAppended {
    const seen = new Set<string>();
    const fresh = items.filter((i) => {
      if (i.key === null) return true;
      if (seen.has(i.key) || s.hasKey.get(taskId, i.key) !== undefined) return false;
      seen.add(i.key);
      return true;
    });
    const last = s.bump.get(fresh.length, taskId, fence.owner, fence.epoch) as number | undefined;
    if (last === undefined) {
      const row = s.fence.get(taskId) as { status: TaskStatus; owner: string | null; epoch: number } | undefined;
      throw refusalOf(taskId, row, fence.owner, fence.epoch);
    }
    if (fresh.length === 0) return { added: 0, last };
    const old = last - fresh.length;
    let cum = old > 0 ? ((s.cumAt.get(taskId, old) as number | undefined) ?? 0) : 0;
    fresh.forEach((i, n) => {
      const bytes = Buffer.byteLength(i.data);
      cum += bytes;
      s.insert.run(taskId, old + n + 1, i.type, i.data, bytes, cum, i.key, now);
    });
    const first = s.first.get(taskId) as { seq: number; base: number };
    const r = rotation({ firstSeq: first.seq, firstBase: first.base, last, lastCum: cum }, bounds);
    if (r) s.drop.run(taskId, keptFrom(r, r.minBase === undefined ? undefined : (s.fromBytes.get(taskId, r.minBase) as number | undefined)));
    return { added: fresh.length, last };
  }

  return {
    append: (taskId, fence, items, bounds, now) => write(() => append(taskId, fence, items, bounds, now)),
    async read(taskId, principal, after, limit) {
      return readTx(taskId, principal, after, limit);
    },
  };
}
