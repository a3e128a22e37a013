/**
 * Task Event Sources (the Triggers & Events WG draft, "SEP-XXXX: Task Event Sources"): with Events on, a task's
 * CreateTaskResult names its output event, `outlast.task.output` with input `{taskId}`, and the task's output
 * (`ctx.output`) is delivered as that event through `events/poll`, `events/stream` and webhooks (`events/subscribe`:
 * the subscription's cursor starts here, the delivery is ops/events/output.ts). Nothing is copied: the event
 * wire reads the task's one output log (src/runtime/output-follow.ts: bound to the task's principal, `events_gone`
 * past retention), and the cursor is the output's own sequence number. The stream ends (`notifications/events/
 * terminated`) once the task is terminal and every item was sent; a poll past that point answers the same error.
 */
import { isTerminal } from '../../protocol/index.js';
import { checkTaskId } from '../../runtime/wire.js';
import { followOutput, readOutput } from '../../runtime/output-follow.js';
import type { SignalBus } from '../../store/local-bus.js';
import type { TaskStore } from '../../store/types.js';
import { TASK_OUTPUT } from '../../store/output-events.js';
import { outputEnded, outputOccurrence } from '../../ops/events/output.js';

export { TASK_OUTPUT, outputEnded, outputOccurrence };

/** The draft's TaskEventSource, as put on a CreateTaskResult. */
export interface TaskEventSource {
  name: string;
  input: { taskId: string };
  /** The stream position at creation: subscribing with it replays everything the task emitted before. */
  initialCursor: string;
}

export function taskEventSource(taskId: string): TaskEventSource {
  return { name: TASK_OUTPUT, input: { taskId }, initialCursor: '0' };
}

/** Whether a request's client capabilities declare MCP Events (SEP-3415's extension key, or the sketch's `events`). */
export function declaresEvents(clientCapabilities: Record<string, unknown> | undefined, extension: string): boolean {
  if (!clientCapabilities) return false;
  const ext = clientCapabilities.extensions as Record<string, unknown> | undefined;
  return (typeof ext === 'object' && ext !== null && extension in ext) || (typeof clientCapabilities.events === 'object' && clientCapabilities.events !== null);
}

export const TASK_OUTPUT_DESCRIPTOR = {
  name: TASK_OUTPUT,
  description:
    "One task's output as it is written (ctx.output): one event per item, in order, from the task's eventSource; the stream ends when the task is terminal. The cursor is the item's seq.",
  delivery: ['poll', 'push', 'webhook'],
  inputSchema: {
    type: 'object',
    properties: { taskId: { type: 'string', maxLength: 256, description: 'The task (one of yours), as its CreateTaskResult eventSource names it.' } },
    required: ['taskId'],
    additionalProperties: false,
  },
  payloadSchema: {
    type: 'object',
    properties: {
      taskId: { type: 'string' },
      seq: { type: 'integer', minimum: 1, description: "The item's sequence number in its task (1, 2, 3 … no gaps)." },
      type: { type: 'string', description: 'text, image, audio, resource_link, resource, or a vendor-prefixed type.' },
      data: { description: 'The content block itself, or the data of a vendor-prefixed event.' },
    },
    required: ['taskId', 'seq', 'type', 'data'],
  },
};

/** An error of the events wire (code, message, data), thrown out of here and answered by the wire. */
export type WireError = (code: number, message: string, data?: unknown) => Error;

export interface TaskOutputEvents {
  store: TaskStore;
  bus: SignalBus;
  recheckMs: number;
  fail: WireError;
}

/** The task and cursor of an `outlast.task.output` request (cursor null: from now, the task's latest seq); `latest` is
 *  the task's latest seq. An unknown task, or another principal's, is refused here. */
export async function parseOutputRequest(o: TaskOutputEvents, p: Record<string, unknown>, principal: string): Promise<{ taskId: string; after: number; latest: number }> {
  const a = p.arguments;
  if (typeof a !== 'object' || a === null || Array.isArray(a)) throw o.fail(-32602, `params.arguments must be {taskId} (the task's eventSource input)`);
  for (const k of Object.keys(a)) if (k !== 'taskId') throw o.fail(-32602, `Unknown argument "${k.slice(0, 100)}" for ${TASK_OUTPUT}; it takes taskId`);
  let taskId: string;
  try {
    taskId = checkTaskId((a as { taskId?: unknown }).taskId);
  } catch {
    throw o.fail(-32602, `${TASK_OUTPUT} needs a taskId argument (the task whose output to follow)`);
  }
  const c = p.cursor;
  if (c !== null && c !== undefined && (typeof c !== 'string' || !/^\d{1,15}$/.test(c))) throw o.fail(-32602, `cursor must be null (from now), "0" (the eventSource's initialCursor: from the start) or a cursor this server returned`);
  // Read past the end (the largest seq a store keeps: a 32-bit integer): the task's latest seq, and that it is the
  // caller's, whatever is still retained.
  const page = await read(o, taskId, principal, 2_147_483_647, 1);
  return { taskId, after: c === null || c === undefined ? page.last : Number(c), latest: page.last };
}

/** A page of the task's output, with the store's errors (unknown task, events_gone) as the wire's. */
async function read(o: TaskOutputEvents, taskId: string, principal: string, after: number, limit: number) {
  try {
    return await readOutput(o.store, taskId, principal, after, limit);
  } catch (e) {
    throw asWire(o, e);
  }
}

function asWire(o: TaskOutputEvents, e: unknown): Error {
  const err = e as { code?: unknown; message?: string; data?: unknown };
  if (typeof err.code === 'number') {
    // Another principal's task, like an unknown one: the events wire's words for it.
    if (/Task not found|expired/.test(err.message ?? '')) return o.fail(-32602, `Unknown task (or not yours): ${err.message}`);
    return o.fail(err.code, err.message ?? 'error', err.data);
  }
  return e as Error;
}

/** events/poll for `outlast.task.output`: the items after the cursor; once the task is terminal and the cursor is at its
 *  last item, the subscription's end as an error. */
export async function pollOutput(o: TaskOutputEvents, p: Record<string, unknown>, principal: string, signal: AbortSignal | undefined, sleep: (ms: number, s?: AbortSignal) => Promise<void>, readEveryMs: number) {
  const { taskId, after } = await parseOutputRequest(o, p, principal);
  const max = typeof p.maxEvents === 'number' && p.maxEvents >= 1 ? Math.min(100, Math.floor(p.maxEvents)) : 100;
  const waitMs = typeof p.timeoutMs === 'number' && p.timeoutMs > 0 ? Math.min(30_000, p.timeoutMs) : 0;
  const deadline = Date.now() + waitMs;
  for (;;) {
    const page = await read(o, taskId, principal, after, max + 1);
    if (page.items.length === 0 && isTerminal(page.status) && after >= page.last) {
      const end = outputEnded(taskId, page.status, page.last);
      throw o.fail(end.code, end.message, end.data);
    }
    if (page.items.length || Date.now() >= deadline || signal?.aborted) {
      const items = page.items.slice(0, max);
      return {
        events: items.map((i) => outputOccurrence(taskId, i)),
        cursor: String(items.length ? items[items.length - 1]!.seq : after),
        truncated: false,
        hasMore: page.items.length > max,
        nextPollMs: 1000,
      };
    }
    await sleep(readEveryMs, signal);
  }
}

/** events/stream for `outlast.task.output`: `active`, one `event` per item (store + bus: any replica), heartbeats, and
 *  `terminated` once the task is terminal and every item was sent. */
export async function streamOutput(o: TaskOutputEvents, id: unknown, p: Record<string, unknown>, principal: string, heartbeatMs: number, signal?: AbortSignal): Promise<Response> {
  const { taskId, after } = await parseOutputRequest(o, p, principal);
  const meta = { 'io.modelcontextprotocol/subscriptionId': id };
  const enc = new TextEncoder();
  let stop: (() => void) | undefined;
  let beat: ReturnType<typeof setInterval> | undefined;
  let closed = false;
  // Backpressure, as tasks/stream: the follow reads its next page only once the client took what was sent.
  let wake: (() => void) | undefined;
  const woken = () => {
    const w = wake;
    wake = undefined;
    w?.();
  };
  let out: ReadableStreamDefaultController<Uint8Array> | undefined;
  const end = () => {
    if (closed) return;
    closed = true;
    woken();
    stop?.();
    clearInterval(beat);
  };
  const body = new ReadableStream<Uint8Array>({
    async start(ctrl) {
      out = ctrl;
      let cursor = after;
      const send = (method: string, params: Record<string, unknown>) => {
        if (!closed) ctrl.enqueue(enc.encode(`event: message\ndata: ${JSON.stringify({ jsonrpc: '2.0', method, params: { ...params, _meta: meta } })}\n\n`));
      };
      const finish = (method: string, error: ReturnType<typeof outputEnded> | { code: number; message: string; data?: unknown }) => {
        send(method, { error });
        end();
        try {
          ctrl.close();
        } catch {
          /* already cancelled */
        }
      };
      send('notifications/events/active', { cursor: String(cursor), truncated: false });
      beat = setInterval(() => send('notifications/events/heartbeat', { cursor: String(cursor) }), heartbeatMs);
      beat.unref?.();
      signal?.addEventListener('abort', end, { once: true });
      try {
        stop = await followOutput({ store: o.store, bus: o.bus, recheckMs: o.recheckMs }, taskId, principal, after, {
          item: (i) => {
            cursor = i.seq;
            send('notifications/events/event', outputOccurrence(taskId, i) as unknown as Record<string, unknown>);
          },
          end: (status, last) => finish('notifications/events/terminated', outputEnded(taskId, status, last)),
          error: (e) => {
            const w = asWire(o, e) as Error & { code?: number; data?: unknown };
            finish('notifications/events/terminated', { code: w.code ?? -32603, message: w.message, ...(w.data !== undefined ? { data: w.data } : {}) });
          },
          ready: () => {
            if (closed || (out!.desiredSize ?? 1) > 0) return;
            return new Promise<void>((r) => (wake = r));
          },
        });
        if (closed) stop();
      } catch (e) {
        const w = asWire(o, e) as Error & { code?: number; data?: unknown };
        finish('notifications/events/terminated', { code: w.code ?? -32603, message: w.message, ...(w.data !== undefined ? { data: w.data } : {}) });
      }
    },
    pull: woken,
    cancel: end,
  }, new CountQueuingStrategy({ highWaterMark: 256 }));
  return new Response(body, { status: 200, headers: { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', 'x-accel-buffering': 'no' } });
}
