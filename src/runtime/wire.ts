/** The wire view of stored tasks (2026-07-28 shapes) and the principal check every read goes through. */
import { ErrorCode, OUTPUT_SEQ_META, TaskProtocolError, taskExpired, taskNotFound, type CreateTaskResult, type DetailedTask, type InputRequest } from '../protocol/index.js';
import type { ListCursor, TaskLookup, TaskRecord, TaskView } from '../store/types.js';
import { advertisedPollInterval, type PollPolicy } from './poll.js';

/** Recent conversions: a task polled again converts the same instants (a `Date` and its string were ~1 µs a poll). */
const isoStrings = new Map<number, string>();
const ISO_STRINGS_MAX = 4096;

export function isoOf(ms: number): string {
  let iso = isoStrings.get(ms);
  if (iso === undefined) {
    iso = new Date(ms).toISOString();
    if (isoStrings.size >= ISO_STRINGS_MAX) isoStrings.clear();
    isoStrings.set(ms, iso);
  }
  return iso;
}

/** The CreateTaskResult for a record, built directly (on the creation hot path). */
export function createResult(rec: TaskRecord, now: number, policy: PollPolicy): CreateTaskResult {
  const createdAt = isoOf(rec.createdAt);
  const out: CreateTaskResult = {
    resultType: 'task',
    taskId: rec.taskId,
    status: rec.status,
    createdAt,
    lastUpdatedAt: rec.updatedAt === rec.createdAt ? createdAt : isoOf(rec.updatedAt),
    ttlMs: rec.ttlMs,
  };
  if (rec.statusMessage !== null) out.statusMessage = rec.statusMessage;
  out.pollIntervalMs = advertisedPollInterval(rec, now, policy);
  return out;
}

/** What tasks/get and notifications/tasks carry for a record: one object, its fields in the wire's order (every poll
 *  builds one, so no spread copies). */
export function detailedTask(rec: TaskView, now: number, policy: PollPolicy): DetailedTask {
  const createdAt = isoOf(rec.createdAt);
  const out: Record<string, unknown> = {
    taskId: rec.taskId,
    createdAt,
    lastUpdatedAt: rec.updatedAt === rec.createdAt ? createdAt : isoOf(rec.updatedAt),
    ttlMs: rec.ttlMs,
    pollIntervalMs: advertisedPollInterval(rec, now, policy),
  };
  if (rec.statusMessage !== null) out.statusMessage = rec.statusMessage;
  if (rec.outputSeq) out._meta = { [OUTPUT_SEQ_META]: rec.outputSeq };
  switch (rec.status) {
    case 'input_required': {
      const inputRequests: Record<string, InputRequest> = {};
      for (const [k, v] of Object.entries(rec.inputRequests)) inputRequests[k] = v.request;
      out.status = 'input_required';
      out.inputRequests = inputRequests;
      break;
    }
    case 'completed':
      out.status = 'completed';
      out.result = rec.result ?? { content: [], resultType: 'complete' };
      break;
    case 'failed':
      out.status = 'failed';
      out.error = rec.error ?? { code: ErrorCode.InternalError, message: 'Failed' };
      break;
    case 'cancelled':
      out.status = 'cancelled';
      break;
    default:
      out.status = 'working';
  }
  return out as unknown as DetailedTask;
}

export function checkTaskId(taskId: unknown): string {
  if (typeof taskId !== 'string' || taskId.length === 0 || taskId.length > 200) {
    throw new TaskProtocolError(ErrorCode.InvalidParams, 'params.taskId must be a non-empty string (the id from a CreateTaskResult)');
  }
  // No task id holds U+0000 (ids are base64url), and some stores cannot even look one up: it reads as unknown.
  if (taskId.includes('\u0000')) throw taskNotFound();
  return taskId;
}

/** The record if `principal` owns it; otherwise exactly what an unknown id gets. */
export function owned<R extends { principal: string }>(l: TaskLookup<R>, principal: string): R {
  if (l.state === 'found' && l.record.principal === principal) return l.record;
  if (l.state === 'expired' && l.principal === principal) throw taskExpired();
  throw taskNotFound();
}

/** An opaque listing cursor: where the next page starts (base64url of the last task's creation time and id). */
export function encodeCursor(c: ListCursor): string {
  return Buffer.from(`${c.createdAt}:${c.taskId}`, 'utf8').toString('base64url');
}

export function decodeCursor(cursor: unknown): ListCursor {
  const bad = () => new TaskProtocolError(ErrorCode.InvalidParams, 'Invalid cursor: pass the nextCursor of a previous page unchanged');
  if (typeof cursor !== 'string' || cursor.length === 0 || cursor.length > 400 || !/^[A-Za-z0-9_-]+$/.test(cursor)) throw bad();
  const text = Buffer.from(cursor, 'base64url').toString('utf8');
  const m = /^(\d{1,15}):(.{1,200})$/s.exec(text);
  if (!m) throw bad();
  return { createdAt: Number(m[1]), taskId: m[2]! };
}
