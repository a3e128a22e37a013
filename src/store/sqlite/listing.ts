/** Listings of the SQLite store: keyset-paged, newest first, each one range read of an index. */
import type Database from 'better-sqlite3';
import { SUMMARY_COLUMNS, toSummary, type SummaryRow } from '../summary.js';
import type { ListCursor, TaskSummary } from '../types.js';

export function prepareListing(db: Database.Database) {
  const first = db.prepare(`SELECT ${SUMMARY_COLUMNS} FROM tasks WHERE principal = ? ORDER BY created_at DESC, task_id DESC LIMIT ?`);
  const next = db.prepare(`SELECT ${SUMMARY_COLUMNS} FROM tasks WHERE principal = ? AND (created_at, task_id) < (?, ?)
    ORDER BY created_at DESC, task_id DESC LIMIT ?`);
  return {
    byPrincipal(principal: string, after: ListCursor | undefined, limit: number): TaskSummary[] {
      const rows = (after ? next.all(principal, after.createdAt, after.taskId, limit) : first.all(principal, limit)) as SummaryRow[];
      return rows.map(toSummary);
    },
  };
}
export type Listing = ReturnType<typeof prepareListing>;
