/**
 * The MCP Events wire (design sketch as ChatGPT consumes it; decisions in docs/events.md): `events/list`,
 * `events/subscribe` / `events/unsubscribe` (webhook delivery, an authenticated principal required; subscriptions.ts),
 * `events/poll` (long poll with a store cursor) and `events/stream` (SSE; change-log.ts, and task-output.ts for a
 * task's output). Web-standard: each answer is a `Response`, so the node:http front and a fetch front serve it alike.
 * Only the caller's own tasks are ever matched.
 */
import { pollOutput, streamOutput } from './task-output.js';
import { isOutput, needTaskWithoutCredentials, type WireScope } from './params.js';
import { subscribe, unsubscribe } from './subscriptions.js';
import { pollChanges, sleepUnlessAborted, streamChanges } from './change-log.js';
import { EVENT_DESCRIPTORS } from './descriptors.js';
import { EventsError, type EventsWireOptions, type Params } from './wire-options.js';

export { EventErrorCode, type EventsWireOptions } from './wire-options.js';
export { EVENT_DESCRIPTORS } from './descriptors.js';
export { canonicalJson, subscriptionId } from './canonical.js';

export const EVENTS_EXTENSION = 'io.modelcontextprotocol/events';

export const EVENT_METHODS = new Set(['events/list', 'events/subscribe', 'events/unsubscribe', 'events/poll', 'events/stream']);

export interface EventsWire {
  /** Answers an events/* request (a JSON-RPC answer, or an SSE stream for events/stream). */
  answer(msg: { id?: unknown; method: string; params?: Params }, principal: string, authenticated: boolean, signal?: AbortSignal): Promise<Response>;
}

const json = (status: number, v: unknown) => new Response(JSON.stringify(v), { status, headers: { 'content-type': 'application/json' } });

export function createEventsWire(o: EventsWireOptions): EventsWire {
  const { store } = o;
  const readEveryMs = o.readEveryMs ?? 250;
  const scope: WireScope = { o, store, readEveryMs, output: { store, bus: o.bus, recheckMs: o.recheckMs, fail: (code, message, data) => new EventsError(code, message, data) } };
  return {
    async answer(msg, principal, authenticated, signal) {
      const id = msg.id;
      if (id === undefined || id === null) return json(400, { jsonrpc: '2.0', error: { code: -32600, message: `${msg.method} must be a request with an id` } });
      const p = msg.params ?? {};
      if (typeof p !== 'object' || Array.isArray(p)) return json(200, { jsonrpc: '2.0', id, error: { code: -32602, message: 'params must be an object' } });
      try {
        let result: Record<string, unknown>;
        switch (msg.method) {
          case 'events/list':
            result = { events: EVENT_DESCRIPTORS };
            break;
          case 'events/subscribe':
            result = await subscribe(scope, p, principal, authenticated);
            break;
          case 'events/unsubscribe':
            result = await unsubscribe(scope, p, principal, authenticated);
            break;
          case 'events/poll':
            if (!isOutput(p)) needTaskWithoutCredentials(p, authenticated, 'events/poll');
            result = isOutput(p) ? await pollOutput(scope.output, p, principal, signal, sleepUnlessAborted, readEveryMs) : await pollChanges(scope, p, principal, signal);
            break;
          case 'events/stream':
            if (!isOutput(p)) needTaskWithoutCredentials(p, authenticated, 'events/stream');
            return isOutput(p) ? await streamOutput(scope.output, id, p, principal, o.heartbeatMs ?? 15_000, signal) : await streamChanges(scope, id, p, principal, signal);
          default:
            return json(200, { jsonrpc: '2.0', id, error: { code: -32601, message: `Method not found: ${msg.method}` } });
        }
        return json(200, { jsonrpc: '2.0', id, result: { ...result, resultType: 'complete' } });
      } catch (e) {
        if (e instanceof EventsError) return json(200, { jsonrpc: '2.0', id, error: { code: e.code, message: e.message, ...(e.data !== undefined ? { data: e.data } : {}) } });
        throw e;
      }
    },
  };
}
