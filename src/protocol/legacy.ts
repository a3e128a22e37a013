/**
 * The 2025-11-25 Tasks wire (SEP-1686, core experimental tasks): what clients built on that revision send and
 * expect. Outlast serves it from the same tasks as the 2026-07-28 extension (legacy.md §1).
 */
import type { TaskStatus } from './index.js';

export const LEGACY_PROTOCOL_VERSION = '2025-11-25';
/** `_meta` key on every message tied to a task (and on the tasks/result result). */
export const RELATED_TASK_META = 'io.modelcontextprotocol/related-task';
/** Optional hint on a CreateTaskResult: what a model may be told while the task runs. */
export const MODEL_IMMEDIATE_RESPONSE_META = 'io.modelcontextprotocol/model-immediate-response';

/** The server capability: tasks can be listed, cancelled, and created by tools/call. */
export const LEGACY_TASKS_CAPABILITY = { list: {}, cancel: {}, requests: { tools: { call: {} } } } as const;

/** Tool-level task support as tools/list shows it. */
export type TaskSupport = 'forbidden' | 'optional' | 'required';

/** A task as the 2025-11-25 wire carries it (tasks/get, tasks/list, tasks/cancel, notifications/tasks/status). */
export interface LegacyTask {
  taskId: string;
  status: TaskStatus;
  statusMessage?: string;
  createdAt: string;
  lastUpdatedAt: string;
  /** Retention in ms from creation; null = unlimited (the key is required). */
  ttl: number | null;
  pollInterval?: number;
  /** OUTPUT_SEQ_META once the task has output. */
  _meta?: { [key: string]: unknown };
}

/** The id of a server→client input request sent on a tasks/result stream: globally unique, so the client's answer
 *  can be posted to any replica and matched to its task and key. */
export function inputRequestId(taskId: string, key: string): string {
  return `outlast-input/${taskId}/${encodeURIComponent(key)}`;
}

/** The task and key an input request id names, or undefined if it is not one. */
export function parseInputRequestId(id: unknown): { taskId: string; key: string } | undefined {
  return parseTaskKeyId(id, 'outlast-input/');
}

/** The task and key of an id made as `PREFIX<taskId>/<encoded key>` (input requests, URL elicitations). */
export function parseTaskKeyId(id: unknown, prefix: string): { taskId: string; key: string } | undefined {
  if (typeof id !== 'string' || !id.startsWith(prefix) || id.length > 1200) return undefined;
  const rest = id.slice(prefix.length);
  const slash = rest.indexOf('/');
  if (slash <= 0) return undefined;
  try {
    return { taskId: rest.slice(0, slash), key: decodeURIComponent(rest.slice(slash + 1)) };
  } catch {
    return undefined;
  }
}
