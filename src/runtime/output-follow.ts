/**
 * Reading a task's output, for every seam (tasks/stream, the status tool, the client, the dashboard): a page after a
 * cursor, bound to the task's principal (another principal's task reads as unknown), with `events_gone` for a cursor
 * older than what is retained; and following it live: what is stored after the cursor, then each new item as the
 * bus signals it (any replica wrote it; a slow re-read covers lost signals), until the task is terminal and every
 * item was delivered.
 */
import { ErrorCode, TaskProtocolError, isTerminal, type JsonObject, type TaskStatus } from '../protocol/index.js';
import { MAX_OUTPUT_PAGE, cursorGone, type OutputItem, type OutputPage } from '../store/output.js';
import type { SignalBus } from '../store/local-bus.js';
import type { TaskStore } from '../store/types.js';
import { checkTaskId, owned } from './wire.js';
import { coalesced } from './coalesce.js';

export interface OutputSource {
  store: TaskStore;
  bus: SignalBus;
  /** Period of the re-read that covers lost signals. */
  recheckMs: number;
}

/** What server/discover says of tasks/stream (under `capabilities.experimental["tasks/stream"]`): the draft it follows
 *  and how much output a task keeps (older cursors get events_gone). */
export function taskStreamCapability(bounds: { maxItems: number; maxBytes: number }): JsonObject {
  return { draft: 'SEP-2694', retention: { maxEventsPerTask: bounds.maxItems, maxBytesPerTask: bounds.maxBytes } };
}

/** A cursor from the wire: absent is 0 (from the start); otherwise an integer >= 0. */
export function checkAfter(after: unknown, name = 'after'): number {
  if (after === undefined || after === null) return 0;
  if (typeof after !== 'number' || !Number.isSafeInteger(after) || after < 0) {
    throw new TaskProtocolError(ErrorCode.InvalidParams, `${name} must be an integer >= 0 (the seq of the last event received; 0 or absent for the start), got ${JSON.stringify(after)}`);
  }
  return after;
}

/** The error for a cursor older than the retained output. */
export function eventsGone(after: number, page: Pick<OutputPage, 'first' | 'last'>): TaskProtocolError {
  const earliest = page.first ?? page.last + 1;
  return new TaskProtocolError(
    ErrorCode.InvalidParams,
    `events_gone: the output after seq ${after} is no longer retained; the earliest retained is seq ${earliest} (resume with after: ${earliest - 1}, or read the task's result)`,
    { reason: 'events_gone', earliestSeq: earliest, latestSeq: page.last },
  );
}

/** One page of output after `after` (at most `limit` items), or the error a caller should get. */
export async function readOutput(store: TaskStore, taskId: unknown, principal: string, after: number, limit = MAX_OUTPUT_PAGE): Promise<OutputPage> {
  const id = checkTaskId(taskId);
  const page = await store.output.read(id, principal, after, Math.min(Math.max(1, limit), MAX_OUTPUT_PAGE));
  if (!page) {
    owned(await store.view(id), principal); // throws not found or expired, as tasks/get would
    throw new TaskProtocolError(ErrorCode.InvalidParams, 'Failed to retrieve task: Task not found');
  }
  if (cursorGone(after, page)) throw eventsGone(after, page);
  return page;
}

export interface OutputListener {
  item(item: OutputItem): void;
  /** Every item was delivered and the task is terminal. */
  end(status: TaskStatus, last: number): void;
  /** The follow stopped: the cursor fell out of retention, the task went, or the store failed. */
  error(e: unknown): void;
  /** Backpressure (optional): resolves once the listener can take more. Awaited before each further page is read, so
   *  a replay is read no faster than the reader takes it (without it a long replay is read into memory whole). */
  ready?(): Promise<void> | void;
}

/**
 * Follows the output after `after` (the first page is read before this resolves, so a bad cursor or an unknown task
 * throws here). Returns the function that stops following.
 */
export async function followOutput(src: OutputSource, taskId: unknown, principal: string, after: number, on: OutputListener): Promise<() => void> {
  const id = checkTaskId(taskId);
  let cursor = after;
  let closed = false;
  const first = await readOutput(src.store, id, principal, cursor);
  const deliver = (page: OutputPage): boolean => {
    for (const i of page.items) {
      if (closed) return true;
      if (i.seq <= cursor) continue;
      cursor = i.seq;
      on.item(i);
    }
    if (page.items.length < MAX_OUTPUT_PAGE && isTerminal(page.status) && cursor >= page.last) {
      stop();
      on.end(page.status, page.last);
      return true;
    }
    return page.items.length < MAX_OUTPUT_PAGE;
  };
  const reread = coalesced(async () => {
    try {
      for (;;) {
        if (closed) return;
        const page = await readOutput(src.store, id, principal, cursor);
        if (deliver(page)) break; // a full page: read on once the listener can take more
        await on.ready?.();
      }
    } catch (e) {
      if (closed) return;
      stop();
      on.error(e);
    }
  });
  const unsubscribe = src.bus.subscribe(id, (s) => {
    if (s.kind === 'output' || s.kind === 'changed') void reread();
  });
  const fallback = setInterval(() => void reread(), src.recheckMs);
  fallback.unref?.();
  function stop() {
    if (closed) return;
    closed = true;
    clearInterval(fallback);
    unsubscribe();
  }
  // The first page was read before the subscription: read once more after it, so nothing written between is missed.
  queueMicrotask(() => {
    if (closed) return;
    deliver(first);
    if (!closed) void reread();
  });
  return stop;
}
