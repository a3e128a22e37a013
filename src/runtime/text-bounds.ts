/**
 * Texts a caller, a handler or an upstream can set, bounded where they are stored: a task's status message (shown on
 * every poll, listen notification and dashboard row), a failed task's error message and data, and a question's
 * message. A longer text is cut on a character boundary and ends with a visible marker (`… [truncated, N bytes]`),
 * so what a reader sees says it was cut. The store the runtime writes through is wrapped (`boundedTexts`), so every
 * path (both wires, handles, the dashboard, events) reads the bounded text; cutting an already cut text changes nothing.
 */
import type { InputRequest, JsonRpcErrorObject } from '../protocol/index.js';
import type { NewTask, Outcome, PendingInput, TaskStore } from '../store/types.js';
import { wrapStore, type StoreWrappers } from './store-proxy.js';

/** Largest status message kept, in UTF-8 bytes. */
export const MAX_STATUS_MESSAGE_BYTES = 4096;
/** Largest error message, question message or error data (its JSON) kept, in UTF-8 bytes. */
export const MAX_STORED_TEXT_BYTES = 16384;

/** `text`, or its first bytes and the marker, at most `maxBytes` UTF-8 bytes in all. */
export function capText(text: string, maxBytes: number): string {
  if (text.length * 3 <= maxBytes) return text;
  const bytes = Buffer.byteLength(text, 'utf8');
  if (bytes <= maxBytes) return text;
  const marker = `… [truncated, ${bytes} bytes]`;
  const budget = Math.max(0, maxBytes - Buffer.byteLength(marker, 'utf8'));
  // More than `budget` bytes (each code unit is at least one byte); cut before the character that crosses it.
  const head = Buffer.from(text.slice(0, budget + 1), 'utf8');
  let end = budget;
  while (end > 0 && (head[end]! & 0xc0) === 0x80) end--;
  return head.subarray(0, end).toString('utf8') + marker;
}

export const capStatus = (message: string): string => capText(message, MAX_STATUS_MESSAGE_BYTES);
const capNullableStatus = (message: string | null | undefined) => (typeof message === 'string' ? capStatus(message) : message);

/** The question with its message bounded (the same object when nothing was cut). */
export function capInputRequest(request: InputRequest): InputRequest {
  const message = request.params?.message;
  if (typeof message !== 'string') return request;
  const capped = capText(message, MAX_STORED_TEXT_BYTES);
  return capped === message ? request : { ...request, params: { ...request.params, message: capped } };
}

/** A JSON-RPC error with its message bounded, and data whose JSON is too large (or too deep to write) replaced by
 *  `{reason?, truncated: bytes}`. */
function capError(error: JsonRpcErrorObject): JsonRpcErrorObject {
  const message = typeof error.message === 'string' ? capText(error.message, MAX_STORED_TEXT_BYTES) : error.message;
  let data = error.data;
  if (data !== undefined) {
    let bytes: number;
    try {
      bytes = Buffer.byteLength(JSON.stringify(data) ?? '', 'utf8');
    } catch {
      bytes = Infinity;
    }
    if (bytes > MAX_STORED_TEXT_BYTES) {
      const reason = (data as { reason?: unknown } | null)?.reason;
      data = { ...(typeof reason === 'string' ? { reason: capText(reason, 256) } : {}), truncated: Number.isFinite(bytes) ? bytes : 'too deep to store' };
    }
  }
  return message === error.message && data === error.data ? error : { ...error, message, ...(data !== undefined ? { data } : {}) };
}

function capOutcome(outcome: Outcome): Outcome {
  return outcome.status === 'failed' ? { ...outcome, error: capError(outcome.error) } : outcome;
}

function capRequests(requests: Record<string, PendingInput>): Record<string, PendingInput> {
  let out: Record<string, PendingInput> | undefined;
  for (const [key, pending] of Object.entries(requests)) {
    const request = capInputRequest(pending.request);
    if (request === pending.request) continue;
    out ??= { ...requests };
    out[key] = { ...pending, request };
  }
  return out ?? requests;
}

/** A creation's texts bounded: its status, and the end it may be written with (NewTask.endedBy). */
function boundedNewTask(task: NewTask): NewTask {
  const ended = task.endedBy;
  if (task.statusMessage == null && !ended) return task;
  return {
    ...task,
    ...(task.statusMessage != null ? { statusMessage: capStatus(task.statusMessage) } : {}),
    ...(ended
      ? {
          endedBy: () => {
            const e = ended();
            return e && { ...e, outcome: capOutcome(e.outcome), statusMessage: capNullableStatus(e.statusMessage) as string | null };
          },
        }
      : {}),
  };
}

/** The store with every text written through it bounded (a proxy: the other calls pass through unchanged). */
export function boundedTexts(store: TaskStore): TaskStore {
  const wrap: StoreWrappers = {
    create: (s) => (task: NewTask) => s.create(boundedNewTask(task)),
    setProgress: (s) => (taskId: string, owner: string, statusMessage: string | null, pollIntervalMs?: number, epoch?: number) =>
      s.setProgress(taskId, owner, capNullableStatus(statusMessage) as string | null, pollIntervalMs, epoch),
    requestInput: (s) => (taskId: string, owner: string, requests: Record<string, PendingInput>, now: number, epoch?: number) => s.requestInput(taskId, owner, capRequests(requests), now, epoch),
    finish: (s) => (taskId: string, owner: string | null, outcome: Outcome, statusMessage: string | null, now: number, epoch?: number) =>
      s.finish(taskId, owner, capOutcome(outcome), capNullableStatus(statusMessage) as string | null, now, epoch),
    cancelQueued: (s) => (taskId: string, now: number, statusMessage: string) => s.cancelQueued(taskId, now, capStatus(statusMessage)),
  };
  return wrapStore(store, wrap);
}
