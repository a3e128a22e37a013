/** A `tasks/stream` client on the raw 2026-07-28 wire (SSE read in the background), for the task-output tests. */
import { TASKS_CAPS, checkServerMessage, headersFor, metaFor, readSseMessages, type RpcOptions } from './helpers.js';

export interface OutputEvent {
  taskId: string;
  seq: number;
  type: string;
  data: { type?: string; text?: string; [k: string]: unknown };
}

export interface TaskStream {
  /** The request's id (every message of the stream carries it as subscription id). */
  id: string;
  status: number;
  /** Events in arrival order. */
  events: OutputEvent[];
  /** The final message (result or error), once it came. */
  final: Record<string, any> | undefined;
  /** Resolves once `n` events came (or the stream ended: then `final` says why). */
  untilEvents(n: number, timeoutMs?: number): Promise<void>;
  /** Resolves when the stream ends (final message or cut). */
  ended(timeoutMs?: number): Promise<void>;
  /** The client drops the connection. */
  close(): void;
}

let nextId = 1;

export async function openTaskStream(url: string, taskId: string, after: unknown = undefined, opts: RpcOptions = {}): Promise<TaskStream> {
  const ac = new AbortController();
  const params: Record<string, unknown> = { taskId, ...(after !== undefined ? { after } : {}), _meta: metaFor(opts.caps ?? TASKS_CAPS) };
  const id = `stream-${nextId++}`;
  const res = await fetch(url, {
    method: 'POST',
    headers: headersFor('tasks/stream', params, opts),
    body: JSON.stringify({ jsonrpc: '2.0', id, method: 'tasks/stream', params }),
    signal: ac.signal,
  });
  const events: OutputEvent[] = [];
  let final: Record<string, any> | undefined;
  let done = false;
  let wake = () => {};
  const push = (m: Record<string, any>) => {
    checkServerMessage('tasks/stream', m);
    if (m.method === 'notifications/tasks/event') events.push(m.params as OutputEvent);
    else if ('result' in m || 'error' in m) final = m;
    wake();
  };
  const reading = (async () => {
    try {
      if (!res.headers.get('content-type')?.includes('text/event-stream')) {
        push(await res.json());
        return;
      }
      await readSseMessages(res, push);
    } catch {
      /* the client dropped it */
    } finally {
      done = true;
      wake();
    }
  })();
  const wait = async (pred: () => boolean, what: string, timeoutMs: number) => {
    const deadline = Date.now() + timeoutMs;
    while (!pred()) {
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`${what} did not happen in ${timeoutMs} ms; events: ${events.map((e) => e.seq).join(',')}; final: ${JSON.stringify(final)}`);
      await new Promise<void>((r) => {
        const t = setTimeout(r, left);
        wake = () => {
          clearTimeout(t);
          r();
        };
      });
    }
  };
  return {
    id,
    status: res.status,
    events,
    get final() {
      return final;
    },
    untilEvents: (n, timeoutMs = 20_000) => wait(() => events.length >= n || done, `${n} events`, timeoutMs),
    ended: async (timeoutMs = 30_000) => {
      await wait(() => done, 'the end of the stream', timeoutMs);
      await reading;
    },
    close: () => ac.abort(),
  };
}

/** The text of each event (`line k`). */
export const lines = (events: OutputEvent[]) => events.map((e) => e.data.text);
/** `line 1` … `line n`. */
export const expected = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => `line ${from + i}`);
