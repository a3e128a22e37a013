/** The summary row every backend's listings read (same column names in each dialect). */
import type { TaskOrigin, TaskStatus } from '../protocol/index.js';
import type { TaskSummary } from './types.js';

export const SUMMARY_COLUMNS = 'task_id, principal, tool, status, status_message, created_at, updated_at, ttl_ms, poll_interval_ms, origin';

export interface SummaryRow {
  task_id: string;
  principal: string;
  tool: string;
  status: TaskStatus;
  status_message: string | null;
  created_at: number;
  updated_at: number;
  ttl_ms: number | null;
  poll_interval_ms: number;
  origin: TaskOrigin;
}

export function toSummary(r: SummaryRow): TaskSummary {
  return {
    taskId: r.task_id,
    principal: r.principal,
    tool: r.tool,
    status: r.status,
    statusMessage: r.status_message,
    createdAt: r.created_at,
    updatedAt: r.updated_at,
    ttlMs: r.ttl_ms,
    pollIntervalMs: r.poll_interval_ms,
    origin: r.origin,
  };
}
