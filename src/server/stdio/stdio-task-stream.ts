/**
 * `tasks/stream` on a stdio connection (the HTTP front's is front/task-stream.ts; the rules are the runtime's,
 * output-follow.ts): a transport that wraps the real one and answers `tasks/stream` itself, so a client over stdio
 * reads a task's output as one over HTTP does. Each item goes out as a `notifications/tasks/event` carrying the request
 * id as subscription id, then the result `{resultType: "complete", taskId, status, latestSeq}` once the task is
 * terminal and every item was sent. `notifications/cancelled` for the request stops it (the client closed the stream,
 * and resumes later with `after`); the end of the connection stops them all. Everything else passes through.
 */
import { ErrorCode, SUBSCRIPTION_ID_META, TASKS_STREAM_METHOD, TASK_EVENT_NOTIFICATION, TaskProtocolError, type JsonObject } from '../../protocol/index.js';
import { checkAfter, followOutput } from '../../runtime/output-follow.js';
import type { Outlast } from '../outlast.js';
import { WrappedTransport, type Message, type OnMessage } from './wrapped-transport.js';
import type { Transport } from '@modelcontextprotocol/server';

type Incoming = { id?: string | number; method?: string; params?: { taskId?: unknown; after?: unknown; requestId?: unknown } };

export class TaskStreamTransport extends WrappedTransport {
  /** Open streams by request id: the function that stops each. */
  private readonly streams = new Map<string | number, () => void>();

  constructor(
    inner: Transport,
    private readonly outlast: Outlast,
  ) {
    super(inner);
  }

  protected override ended(): void {
    for (const id of [...this.streams.keys()]) this.stop(id);
  }

  protected receive(message: Message, extra: Parameters<OnMessage>[1]): void {
    const m = message as Incoming;
    if (m.method === TASKS_STREAM_METHOD && m.id !== undefined) return void this.serve(m.id, m.params ?? {});
    const requestId = m.params?.requestId;
    if (m.method === 'notifications/cancelled' && (typeof requestId === 'string' || typeof requestId === 'number') && this.streams.has(requestId)) {
      return this.stop(requestId);
    }
    this.deliver(message, extra);
  }

  private stop(id: string | number): void {
    const stop = this.streams.get(id);
    this.streams.delete(id);
    stop?.();
  }

  private async serve(id: string | number, params: NonNullable<Incoming['params']>): Promise<void> {
    const subMeta = { [SUBSCRIPTION_ID_META]: id };
    let last: Promise<void> = Promise.resolve();
    let open = true;
    // A write that fails means the client is gone: the stream stops.
    const send = (m: JsonObject) => {
      if (!open) return;
      last = this.inner.send(m as unknown as Message).catch(() => this.stop(id));
    };
    const fail = (e: unknown) => {
      const error = e instanceof TaskProtocolError
        ? { code: e.code, message: e.message, ...(e.data !== undefined ? { data: e.data } : {}) }
        : { code: ErrorCode.InternalError, message: `tasks/stream: ${(e as Error)?.message ?? String(e)}` };
      send({ jsonrpc: '2.0', id, error });
    };
    this.streams.set(id, () => (open = false));
    try {
      const { runtime } = this.outlast;
      const unfollow = await followOutput({ store: runtime.store, bus: runtime.bus, recheckMs: runtime.watchRecheckMs }, params.taskId, this.outlast.principalOfAuth(undefined), checkAfter(params.after), {
        item: (i) => send({ jsonrpc: '2.0', method: TASK_EVENT_NOTIFICATION, params: { _meta: subMeta, taskId: params.taskId as string, seq: i.seq, type: i.type, data: i.data as JsonObject } }),
        end: (status, latestSeq) => {
          send({ jsonrpc: '2.0', id, result: { resultType: 'complete', _meta: subMeta, taskId: params.taskId as string, status, latestSeq } });
          this.stop(id);
        },
        error: (e) => {
          fail(e);
          this.stop(id);
        },
        ready: () => last, // a page is read once the pipe took the last one
      });
      if (this.streams.has(id)) this.streams.set(id, () => ((open = false), unfollow()));
      else unfollow();
    } catch (e) {
      fail(e);
      this.stop(id);
    }
  }
}
