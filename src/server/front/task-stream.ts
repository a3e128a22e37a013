/**
 * `tasks/stream` (SEP-2694, a draft that may change) on the 2026-07-28 wire: `{taskId, after?}` opens an SSE stream
 * that replays the task's retained output after `after` and then follows it live, from the store and the bus (so any
 * replica serves any task), one `notifications/tasks/event` `{taskId, seq, type, data}` per item (with the request id
 * as `_meta` subscriptionId, as on a listen stream), and ends with the
 * result `{resultType: "complete", taskId, status, latestSeq}` once the task is terminal and every item was sent. A
 * stream cut without that result (the client left, the server stopped) is resumed with `after` = the last seq
 * received. A cursor older than the retained output gets `events_gone` (with the earliest retained seq) before any
 * stream opens; another principal's task reads as unknown. The rules are the runtime's (output-follow.ts).
 */
import { ErrorCode, SUBSCRIPTION_ID_META, TASKS_STREAM_METHOD, TASK_EVENT_NOTIFICATION, TaskProtocolError, type JsonObject } from '../../protocol/index.js';
import { SSE_HEADERS, refuseTaskStream } from './envelope.js';
import { checkAfter, followOutput } from '../../runtime/output-follow.js';
import type { TaskRuntime } from '../../runtime/runtime.js';
import { jsonRpcError } from './answers.js';
import type { Answer } from './exchange.js';
import { isRequestObject, type MessageRoute } from './route.js';
import type { ListenStream } from './listen.js';

export interface TaskStreamHost {
  runtime: TaskRuntime;
  keepAliveMs: number;
  /** Open streams, ended by the front's close() (without a result: the client resumes elsewhere). */
  streams: Set<ListenStream>;
}

export interface TaskStreamRequest {
  id?: unknown;
  params?: { _meta?: Record<string, unknown>; taskId?: unknown; after?: unknown };
}

const encoder = new TextEncoder();
/** Messages a tasks/stream holds for a slow client before it stops reading the store (a page is read whole). */
const STREAM_HIGH_WATER = 256;

export async function serveTaskStream(host: TaskStreamHost, request: Request, msg: TaskStreamRequest, principal: string): Promise<Answer> {
  const id = msg.id;
  const refused = refuseTaskStream(request, TASKS_STREAM_METHOD, id, msg.params?._meta);
  if (refused) return refused;
  const taskId = msg.params?.taskId;
  const name = request.headers.get('mcp-name');
  if (name !== null && typeof taskId === 'string' && name !== taskId) {
    return jsonRpcError(400, id, ErrorCode.HeaderMismatch, `the body carries params.taskId="${taskId}" but the Mcp-Name header names "${name}"`);
  }

  let open = true;
  let out: ReadableStreamDefaultController<Uint8Array> | undefined;
  const queued: string[] = [];
  let keepAlive: ReturnType<typeof setInterval> | undefined;
  let unfollow: (() => void) | undefined;
  let stream: ListenStream | undefined;
  // Backpressure: the follow reads its next page only once the client has taken what was sent (see ready below).
  let wake: (() => void) | undefined;
  const woken = () => {
    const w = wake;
    wake = undefined;
    w?.();
  };
  const write = (text: string) => {
    if (!open) return;
    if (!out) return void queued.push(text);
    try {
      out.enqueue(encoder.encode(text));
    } catch {
      cleanup(); // the client left
    }
  };
  const send = (m: JsonObject) => write(`event: message\ndata: ${JSON.stringify(m)}\n\n`);
  const close = () => {
    const o = out;
    cleanup();
    try {
      o?.close();
    } catch {
      /* already closed */
    }
  };
  const cleanup = () => {
    if (!open) return;
    open = false;
    woken();
    clearInterval(keepAlive);
    unfollow?.();
    if (stream) host.streams.delete(stream);
    request.signal.removeEventListener('abort', cleanup);
  };
  request.signal.addEventListener('abort', cleanup, { once: true });
  try {
    const after = checkAfter(msg.params?.after);
    const { runtime } = host;
    // Like a listen stream's, every message carries the request id as subscription id (a client routes by it).
    const subMeta = { [SUBSCRIPTION_ID_META]: id };
    unfollow = await followOutput({ store: runtime.store, bus: runtime.bus, recheckMs: runtime.watchRecheckMs }, taskId, principal, after, {
      item: (i) => send({ jsonrpc: '2.0', method: TASK_EVENT_NOTIFICATION, params: { _meta: subMeta, taskId: taskId as string, seq: i.seq, type: i.type, data: i.data as JsonObject } }),
      end: (status, last) => {
        send({ jsonrpc: '2.0', id, result: { resultType: 'complete', _meta: subMeta, taskId: taskId as string, status, latestSeq: last } });
        close();
      },
      error: (e) => {
        if (e instanceof TaskProtocolError) send({ jsonrpc: '2.0', id, error: { code: e.code, message: e.message, ...(e.data !== undefined ? { data: e.data } : {}) } });
        close(); // a store failure: a cut stream, which the client resumes
      },
      // Before the stream exists (out unset) the replay waits too: its start (then pull) wakes it.
      ready: () => {
        if (!open || (out && (out.desiredSize ?? 1) > 0)) return;
        return new Promise<void>((r) => (wake = r));
      },
    });
  } catch (e) {
    cleanup();
    if (e instanceof TaskProtocolError) return jsonRpcError(200, id, e.code, e.message, e.data);
    throw e;
  }
  if (!open) {
    // Ended before the stream was made (a finished task with nothing after the cursor): answer in one response.
    const body = queued.join('');
    return new Response(body, { status: 200, headers: SSE_HEADERS });
  }
  stream = { end: close };
  host.streams.add(stream);
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      out = controller;
      for (const t of queued.splice(0)) controller.enqueue(encoder.encode(t));
      keepAlive = setInterval(() => write(': keep-alive\n\n'), host.keepAliveMs);
    },
    pull: woken,
    cancel: cleanup,
  }, new CountQueuingStrategy({ highWaterMark: STREAM_HIGH_WATER }));
  return new Response(body, { status: 200, headers: SSE_HEADERS });
}

/** The front's route for `tasks/stream`. */
export function taskStreamRoute(host: TaskStreamHost): MessageRoute {
  return ({ request, msg, who, streaming }) =>
    isRequestObject(msg) && msg.method === TASKS_STREAM_METHOD ? serveTaskStream(host, request.web(), msg as TaskStreamRequest, who).then((r) => (r instanceof Response ? streaming(r) : r)) : undefined;
}
