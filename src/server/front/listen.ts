/**
 * `subscriptions/listen` with `notifications.taskIds` (the SDK's handler intercepts listen before any server runs
 * and knows no task filter): an SSE stream that acknowledges the task ids it honours, then pushes
 * `notifications/tasks` for each, and the standard list-changed kinds from the SDK's bus on the same stream.
 */
import type { ServerEventBus } from '@modelcontextprotocol/server';
import { ErrorCode, SUBSCRIPTION_ID_META, TaskProtocolError, type JsonObject } from '../../protocol/index.js';
import { SSE_HEADERS, refuseTaskStream } from './envelope.js';
import type { TaskRuntime } from '../../runtime/runtime.js';
import { jsonRpcError } from './answers.js';
import type { Answer } from './exchange.js';
import { isRequestObject, type MessageRoute } from './route.js';

export interface ListenRequest {
  id?: unknown;
  params: { _meta?: Record<string, unknown>; notifications: Record<string, unknown> };
}

export interface ListenStream {
  end(): void;
}

export interface TaskListenHost {
  runtime: TaskRuntime;
  bus: ServerEventBus;
  keepAliveMs: number;
  /** Open streams, ended by the front's close(). */
  streams: Set<ListenStream>;
}

const encoder = new TextEncoder();

export async function serveTaskListen(host: TaskListenHost, request: Request, msg: ListenRequest, principal: string): Promise<Answer> {
  const { runtime, bus, keepAliveMs, streams } = host;
  const id = msg.id;
  const refused = refuseTaskStream(request, 'subscriptions/listen', id, msg.params?._meta);
  if (refused) return refused;
  const wanted = msg.params.notifications.taskIds;
  if (!Array.isArray(wanted) || !wanted.every((t) => typeof t === 'string') || wanted.length > 1000) {
    return jsonRpcError(400, id, ErrorCode.InvalidParams, 'notifications.taskIds must be an array of at most 1000 task id strings');
  }
  const subMeta = { [SUBSCRIPTION_ID_META]: id };
  const unsubscribers: Array<() => void> = [];
  const honoured: string[] = [];
  const pending: JsonObject[] = [];
  let open = true;
  let out: ReadableStreamDefaultController<Uint8Array> | undefined;
  const write = (text: string) => {
    if (!open || !out) return;
    try {
      out.enqueue(encoder.encode(text));
    } catch {
      cleanup(); // the stream was closed under us
    }
  };
  const send = (m: JsonObject) => write(`event: message\ndata: ${JSON.stringify(m)}\n\n`);
  const onTask = (task: JsonObject) => {
    // The task's own _meta (its output seq) joins the subscription's.
    const n = { jsonrpc: '2.0', method: 'notifications/tasks', params: { ...task, _meta: { ...(task._meta as JsonObject | undefined), ...subMeta } } };
    if (acked) send(n);
    else pending.push(n);
  };
  let acked = false;
  let keepAlive: ReturnType<typeof setInterval> | undefined;
  let stream: ListenStream | undefined;
  const cleanup = () => {
    if (!open) return;
    open = false;
    clearInterval(keepAlive);
    for (const u of unsubscribers.splice(0)) u();
    if (stream) streams.delete(stream);
    request.signal.removeEventListener('abort', cleanup);
  };
  // Before the first watch: a client gone at any stage of the setup releases every watch made so far.
  request.signal.addEventListener('abort', cleanup, { once: true });
  for (const taskId of new Set(wanted as string[])) {
    if (!open || request.signal.aborted) return gone(cleanup);
    try {
      const unwatch = await runtime.watch(taskId, principal, (t) => onTask(t as unknown as JsonObject));
      if (!open || request.signal.aborted) {
        unwatch();
        return gone(cleanup);
      }
      unsubscribers.push(unwatch);
      honoured.push(taskId);
    } catch (e) {
      if (!(e instanceof TaskProtocolError)) throw e; // unknown / expired / someone else's: not honoured
    }
  }
  // Standard list-changed kinds on the same stream, from the SDK's bus.
  const filter = msg.params.notifications;
  const kinds = { toolsListChanged: 'tools_list_changed', promptsListChanged: 'prompts_list_changed', resourcesListChanged: 'resources_list_changed' } as const;
  const ack: Record<string, unknown> = { taskIds: honoured };
  for (const [k, kind] of Object.entries(kinds)) {
    if (filter[k] !== true) continue;
    ack[k] = true;
    const method = `notifications/${kind.replace('_list_changed', '')}/list_changed`;
    unsubscribers.push(bus.subscribe((ev) => ev.kind === kind && send({ jsonrpc: '2.0', method, params: { _meta: subMeta } })));
  }
  if (!open || request.signal.aborted) return gone(cleanup);
  stream = {
    end() {
      if (!open) return;
      send({ jsonrpc: '2.0', id, result: { resultType: 'complete', _meta: subMeta } });
      const o = out;
      cleanup();
      try {
        o?.close();
      } catch {
        /* already closed */
      }
    },
  };
  streams.add(stream);
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      out = controller;
      send({ jsonrpc: '2.0', method: 'notifications/subscriptions/acknowledged', params: { _meta: subMeta, notifications: ack } });
      acked = true;
      for (const n of pending.splice(0)) send(n);
      keepAlive = setInterval(() => write(': keep-alive\n\n'), keepAliveMs);
    },
    // The client left: its reader is cancelled (and the request's signal aborts, where the runtime gives one).
    cancel: cleanup,
  });
  if (request.signal.aborted) cleanup();
  return new Response(body, { status: 200, headers: SSE_HEADERS });
}

/** The answer to a listen whose client left during its setup (nobody reads it): what was set up is released. */
function gone(cleanup: () => void): Response {
  cleanup();
  return new Response(null, { status: 499 });
}

/** The front's route for `subscriptions/listen` with `notifications.taskIds` (other listens go to the SDK). */
export function taskListenRoute(host: TaskListenHost): MessageRoute {
  return ({ request, msg, who, streaming }) => {
    if (!isRequestObject(msg) || msg.method !== 'subscriptions/listen') return undefined;
    if ((msg.params?.notifications as { taskIds?: unknown } | undefined)?.taskIds === undefined) return undefined;
    return serveTaskListen(host, request.web(), msg as ListenRequest, who).then((r) => (r instanceof Response ? streaming(r) : r));
  };
}
