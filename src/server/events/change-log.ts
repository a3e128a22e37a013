/** `events/poll` (a long poll on a store cursor) and `events/stream` (SSE) over the change log: only the caller's own
 *  tasks are ever matched. */
import type { LoggedChange } from '../../store/events.js';
import { occurrenceOf } from '../../ops/events/index.js';
import { parseArgs, parseCursor, parseName, type WireScope } from './params.js';
import type { Params } from './wire-options.js';

/** Waits `ms`, or less when the request is aborted. */
export function sleepUnlessAborted(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise<void>((r) => {
    const t = setTimeout(r, ms);
    signal?.addEventListener('abort', () => { clearTimeout(t); r(); }, { once: true });
  });
}

export async function pollChanges(scope: WireScope, p: Params, principal: string, signal?: AbortSignal): Promise<Record<string, unknown>> {
  const { o, store, readEveryMs } = scope;
  const name = parseName(p);
  const { filter } = await parseArgs(store, name, p, principal);
  let after = await parseCursor(store, p.cursor);
  const max = typeof p.maxEvents === 'number' && p.maxEvents >= 1 ? Math.min(100, Math.floor(p.maxEvents)) : 100;
  const waitMs = typeof p.timeoutMs === 'number' && p.timeoutMs > 0 ? Math.min(30_000, p.timeoutMs) : 0;
  const deadline = Date.now() + waitMs;
  let rows: LoggedChange[] = [];
  for (;;) {
    rows = await store.events.read(principal, filter, after, max + 1);
    if (rows.length || Date.now() >= deadline || signal?.aborted) break;
    await sleepUnlessAborted(readEveryMs, signal);
  }
  const hasMore = rows.length > max;
  rows = rows.slice(0, max);
  const events = [];
  for (const r of rows) events.push((await occurrenceOf(store, r, name, undefined, o.answerLinkOf)).occurrence);
  if (rows.length) after = rows[rows.length - 1]!.seq;
  return { events, cursor: String(after), truncated: false, hasMore, nextPollMs: 1000 };
}

export async function streamChanges(scope: WireScope, id: unknown, p: Params, principal: string, signal?: AbortSignal): Promise<Response> {
  const { o, store, readEveryMs } = scope;
  const name = parseName(p);
  const { filter } = await parseArgs(store, name, p, principal);
  let after = await parseCursor(store, p.cursor);
  const meta = { 'io.modelcontextprotocol/subscriptionId': id };
  const enc = new TextEncoder();
  let closed = false;
  const body = new ReadableStream<Uint8Array>({
    async start(ctrl) {
      const send = (method: string, params: Record<string, unknown>) => ctrl.enqueue(enc.encode(`event: message\ndata: ${JSON.stringify({ jsonrpc: '2.0', method, params: { ...params, _meta: meta } })}\n\n`));
      send('notifications/events/active', { cursor: String(after), truncated: false });
      let lastBeat = Date.now();
      while (!closed && !signal?.aborted) {
        try {
          const rows = await store.events.read(principal, filter, after, 100);
          for (const r of rows) {
            after = r.seq;
            send('notifications/events/event', (await occurrenceOf(store, r, name, String(r.seq), o.answerLinkOf)).occurrence as unknown as Record<string, unknown>);
          }
          if (Date.now() - lastBeat >= (o.heartbeatMs ?? 15_000)) {
            lastBeat = Date.now();
            send('notifications/events/heartbeat', { cursor: String(after) });
          }
        } catch (e) {
          if (closed) break;
          send('notifications/events/error', { error: { code: -32603, message: `could not read events (${(e as Error).message}); retrying` } });
        }
        await sleepUnlessAborted(readEveryMs, signal);
      }
      try {
        ctrl.close();
      } catch {
        /* already cancelled */
      }
    },
    cancel() {
      closed = true;
    },
  });
  return new Response(body, { status: 200, headers: { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', 'x-accel-buffering': 'no' } });
}
