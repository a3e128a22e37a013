/**
 * The MCP Events wire (design sketch as ChatGPT consumes it; decisions in docs/events.md): `events/list`,
 * `events/subscribe` / `events/unsubscribe` (webhook delivery, an authenticated principal required), `events/poll`
 * (long poll with a store cursor) and `events/stream` (SSE). Web-standard: each answer is a `Response`, so the
 * node:http front and a fetch front serve it alike. Only the caller's own tasks are ever matched.
 */
import { createHash } from 'node:crypto';
import { webhookKey } from '../../protocol/webhook.js';
import { EVENT_NAMES, TASK_FINISHED, TASK_INPUT_REQUIRED, TASK_STATUS, type EventFilter, type EventName, type LoggedChange } from '../../store/events.js';
import type { TaskStore } from '../../store/types.js';
import type { SignalBus } from '../../store/local-bus.js';
import { TASK_OUTPUT, TASK_OUTPUT_DESCRIPTOR, parseOutputRequest, pollOutput, streamOutput, type TaskOutputEvents } from './task-output.js';
import { CallbackError, callbackUrlProblem, occurrenceOf, verifyCallback, type AnswerLinkOf, type CallbackPolicy } from '../../ops/events/index.js';

export const EVENTS_EXTENSION = 'io.modelcontextprotocol/events';

/** The design sketch's codes, which ChatGPT documents (SEP-3415 renumbers them; see docs/events.md). */
export const EventErrorCode = { InvalidParams: -32602, NotFound: -32011, Forbidden: -32012, ResourceExhausted: -32013, Unsupported: -32014, CallbackEndpointError: -32015 } as const;

export const EVENT_METHODS = new Set(['events/list', 'events/subscribe', 'events/unsubscribe', 'events/poll', 'events/stream']);

export interface EventsWireOptions {
  store: TaskStore;
  /** The replicas' bus: a task's output event (Task Event Sources) is followed live through it. */
  bus: SignalBus;
  /** Period of the re-read that covers a lost bus signal, ms. */
  recheckMs: number;
  policy: CallbackPolicy;
  /** Links of open questions to the answer page, put in input_required events. */
  answerLinkOf?: AnswerLinkOf;
  /** Live webhook subscriptions one principal may hold. Default 100. */
  maxSubscriptionsPerPrincipal?: number;
  /** Grant when the client suggests none, ms. Default 24 h; grants are clamped to [1 min, 7 d] (never unlimited). */
  defaultTtlMs?: number;
  /** A (principal, url) that passed the challenge skips it for this long. Default 1 h. */
  verificationCacheMs?: number;
  challengeTimeoutMs?: number;
  /** SSE heartbeat period of events/stream. Default 15 000. */
  heartbeatMs?: number;
  /** How often poll and stream re-read the log while waiting. Default 250 ms. */
  readEveryMs?: number;
}

class EventsError extends Error {
  constructor(readonly code: number, message: string, readonly data?: unknown) {
    super(message);
  }
}

const MAX_TTL = 7 * 86_400_000;
const MIN_TTL = 60_000;
const MAX_ARGS_BYTES = 2048;

const ARGUMENTS_SCHEMA = (needsTask: boolean) => ({
  type: 'object',
  properties: {
    taskId: { type: 'string', maxLength: 256, description: needsTask ? 'The task to follow (one of yours).' : 'Only this task (omit for all your tasks).' },
    ...(needsTask ? {} : { tool: { type: 'string', maxLength: 256, description: 'Only tasks of this tool.' } }),
  },
  ...(needsTask ? { required: ['taskId'] } : {}),
  additionalProperties: false,
});

const PAYLOAD_SCHEMA = {
  type: 'object',
  properties: {
    taskId: { type: 'string' },
    tool: { type: 'string' },
    status: { type: 'string', enum: ['working', 'input_required', 'completed', 'failed', 'cancelled'] },
    statusMessage: { type: 'string' },
    lastUpdatedAt: { type: 'string', format: 'date-time' },
    createdAt: { type: 'string', format: 'date-time' },
    ttl: { type: 'number' },
    result: { type: 'object', description: 'The tool result (completed), when the event fits 256 KiB.' },
    error: { type: 'object', description: 'The JSON-RPC error (failed), when the event fits 256 KiB.' },
    resultOmitted: { type: 'string', description: 'Set when the result was too large: fetch it with tasks/get.' },
    inputRequests: { type: 'object', description: 'input_required: what is asked, by key (answer with tasks/update).' },
  },
  required: ['taskId', 'tool', 'status', 'lastUpdatedAt'],
};

export const EVENT_DESCRIPTORS = [
  { name: TASK_FINISHED, description: 'A task of yours finished: completed, failed or cancelled (the tasks/get view).', delivery: ['poll', 'push', 'webhook'], inputSchema: ARGUMENTS_SCHEMA(false), payloadSchema: PAYLOAD_SCHEMA },
  { name: TASK_INPUT_REQUIRED, description: 'A task of yours needs input (the questions; answer with tasks/update).', delivery: ['poll', 'push', 'webhook'], inputSchema: ARGUMENTS_SCHEMA(false), payloadSchema: PAYLOAD_SCHEMA },
  { name: TASK_STATUS, description: "Every status change of one task of yours (needs taskId).", delivery: ['poll', 'push', 'webhook'], inputSchema: ARGUMENTS_SCHEMA(true), payloadSchema: PAYLOAD_SCHEMA },
  TASK_OUTPUT_DESCRIPTOR,
];

/** Canonical JSON (sorted keys), the form arguments are compared in. */
export function canonicalJson(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonicalJson).join(',')}]`;
  if (v && typeof v === 'object') return `{${Object.keys(v).sort().map((k) => `${JSON.stringify(k)}:${canonicalJson((v as Record<string, unknown>)[k])}`).join(',')}}`;
  return JSON.stringify(v);
}

/** The derived subscription id: deterministic over (principal, url, name, canonical arguments); a handle, never input. */
export function subscriptionId(principal: string, url: string, name: string, args: string): string {
  return `sub_${createHash('sha256').update(JSON.stringify([principal, url, name, args])).digest('hex').slice(0, 32)}`;
}

type Params = Record<string, unknown>;

export interface EventsWire {
  /** Answers an events/* request (a JSON-RPC answer, or an SSE stream for events/stream). */
  answer(msg: { id?: unknown; method: string; params?: Params }, principal: string, authenticated: boolean, signal?: AbortSignal): Promise<Response>;
}

export function createEventsWire(o: EventsWireOptions): EventsWire {
  const { store } = o;
  const limit = o.maxSubscriptionsPerPrincipal ?? 100;
  const readEveryMs = o.readEveryMs ?? 250;
  const output: TaskOutputEvents = { store, bus: o.bus, recheckMs: o.recheckMs, fail: (code, message, data) => new EventsError(code, message, data) };
  const isOutput = (p: Params) => p.name === TASK_OUTPUT;

  const parseName = (p: Params): EventName => {
    if (typeof p.name !== 'string') throw new EventsError(EventErrorCode.InvalidParams, 'params.name must be an event name (see events/list)');
    if (!(EVENT_NAMES as readonly string[]).includes(p.name)) throw new EventsError(EventErrorCode.NotFound, `Unknown event ${JSON.stringify(p.name.slice(0, 100))}; this server offers ${[...EVENT_NAMES, TASK_OUTPUT].join(', ')}`, { kind: 'event' });
    return p.name as EventName;
  };

  const parseArgs = async (name: EventName, p: Params, principal: string): Promise<{ canonical: string; filter: EventFilter }> => {
    const a = p.arguments ?? {};
    if (typeof a !== 'object' || a === null || Array.isArray(a)) throw new EventsError(EventErrorCode.InvalidParams, 'params.arguments must be an object');
    const canonical = canonicalJson(a);
    if (canonical.length > MAX_ARGS_BYTES) throw new EventsError(EventErrorCode.InvalidParams, `params.arguments is larger than ${MAX_ARGS_BYTES} bytes; it only takes taskId and tool`);
    const allowed = name === TASK_STATUS ? ['taskId'] : ['taskId', 'tool'];
    for (const [k, v] of Object.entries(a)) {
      if (!allowed.includes(k)) throw new EventsError(EventErrorCode.InvalidParams, `Unknown argument "${k.slice(0, 100)}" for ${name}; it takes ${allowed.join(' and ')}`);
      if (typeof v !== 'string' || v.length === 0 || v.length > 256) throw new EventsError(EventErrorCode.InvalidParams, `Argument ${k} must be a non-empty string of at most 256 characters`);
    }
    const args = a as { taskId?: string; tool?: string };
    if (name === TASK_STATUS && args.taskId === undefined) throw new EventsError(EventErrorCode.InvalidParams, `${TASK_STATUS} needs a taskId argument (the task to follow)`);
    if (args.taskId !== undefined) {
      const t = await store.get(args.taskId);
      // Someone else's task reads exactly like an unknown one.
      if (t.state === 'missing' || (t.state === 'found' ? t.record.principal : t.principal) !== principal) throw new EventsError(EventErrorCode.InvalidParams, `Unknown task ${JSON.stringify(args.taskId)}`);
    }
    return { canonical, filter: { name, taskId: args.taskId ?? null, tool: args.tool ?? null } };
  };

  const parseCursor = async (c: unknown): Promise<number> => {
    if (c === null || c === undefined) return store.events.head();
    if (typeof c !== 'string' || !/^\d{1,15}$/.test(c)) throw new EventsError(EventErrorCode.InvalidParams, 'cursor must be null (from now) or a cursor this server returned');
    return Number(c);
  };

  const needPrincipal = (authenticated: boolean, what: string) => {
    if (!authenticated) throw new EventsError(EventErrorCode.Forbidden, `${what} needs an authenticated principal (webhooks are bound to who subscribed): send credentials`);
  };

  const webhookParams = (p: Params) => {
    const d = p.delivery;
    if (typeof d !== 'object' || d === null || Array.isArray(d)) throw new EventsError(EventErrorCode.InvalidParams, 'params.delivery must be {mode: "webhook", url, secret}');
    const delivery = d as Params;
    if (delivery.mode !== undefined && delivery.mode !== 'webhook') throw new EventsError(EventErrorCode.Unsupported, `Delivery mode ${JSON.stringify(delivery.mode)} is not served by events/subscribe; use webhook, or events/poll / events/stream`, { feature: 'deliveryMode', value: delivery.mode });
    const problem = callbackUrlProblem(delivery.url, o.policy);
    if (problem) throw new EventsError(EventErrorCode.InvalidParams, problem);
    return { url: new URL(delivery.url as string).toString(), secret: delivery.secret };
  };

  async function subscribe(p: Params, principal: string, authenticated: boolean) {
    needPrincipal(authenticated, 'events/subscribe');
    // A task's output: bound to the task's principal, its cursor the output's seq (null: from now; "0": from the start).
    const out = isOutput(p) ? await parseOutputRequest(output, p, principal) : undefined;
    const name = out ? TASK_OUTPUT : parseName(p);
    const { canonical, filter } = out ? { canonical: canonicalJson({ taskId: out.taskId }), filter: { taskId: out.taskId, tool: null } } : await parseArgs(name as EventName, p, principal);
    const { url, secret } = webhookParams(p);
    if (typeof secret !== 'string') throw new EventsError(EventErrorCode.InvalidParams, 'delivery.secret must be a whsec_ secret you generated');
    try {
      webhookKey(secret);
    } catch (e) {
      throw new EventsError(EventErrorCode.InvalidParams, `delivery.secret: ${(e as Error).message}`);
    }
    const now = Date.now();
    const ttl = typeof p.ttlMs === 'number' && Number.isFinite(p.ttlMs) && p.ttlMs > 0 ? p.ttlMs : p.ttlMs === null ? MAX_TTL : (o.defaultTtlMs ?? 86_400_000);
    const refreshBefore = now + Math.round(Math.min(MAX_TTL, Math.max(MIN_TTL, ttl)));
    const subId = subscriptionId(principal, url, name, canonical);
    const existing = await store.events.get(subId);
    // Limits before any POST leaves (a refresh at the limit still succeeds).
    if (!existing && (await store.events.live(principal, now)) >= limit) {
      throw new EventsError(EventErrorCode.ResourceExhausted, `You hold ${limit} live subscriptions, the most this server allows; unsubscribe some (or let them expire) first`, { limit: 'subscriptions', max: limit });
    }
    const verified = await store.events.verifiedAt(principal, url);
    const mustVerify = verified === null || now - verified > (o.verificationCacheMs ?? 3_600_000) || (existing && existing.secret !== secret);
    if (mustVerify) {
      try {
        await verifyCallback(url, secret, subId, { policy: o.policy, timeoutMs: o.challengeTimeoutMs ?? 10_000 });
      } catch (e) {
        const reason = e instanceof CallbackError ? e.reason : 'connection_refused';
        if (reason === 'blocked_address') throw new EventsError(EventErrorCode.InvalidParams, `delivery.url ${(e as Error).message.replace(/^refused: /, '')}; the operator must allow that host with --events-allow-host`);
        throw new EventsError(EventErrorCode.CallbackEndpointError, `The callback failed verification (${reason}); nothing was stored`, { reason });
      }
    }
    const outputAfter = out ? Math.min(out.after, out.latest) : undefined;
    const stored = await store.events.subscribe({ subId, principal, url, name, args: canonical, taskId: filter.taskId, tool: filter.tool, secret, refreshBefore, now, ...(out ? { outputAfter } : {}) }, limit);
    if (stored === 'limit') throw new EventsError(EventErrorCode.ResourceExhausted, `You hold ${limit} live subscriptions, the most this server allows`, { limit: 'subscriptions', max: limit });
    if (mustVerify) await store.events.markVerified(subId, Date.now());
    const head = await store.events.head();
    const asked = typeof p.cursor === 'string' && /^\d+$/.test(p.cursor) ? Number(p.cursor) : null;
    // Output subscriptions start at their cursor (decision 12 is for the change log); the rest from now.
    const result: Record<string, unknown> = out
      ? { id: subId, refreshBefore: new Date(refreshBefore).toISOString(), cursor: String(outputAfter), truncated: false }
      : { id: subId, refreshBefore: new Date(refreshBefore).toISOString(), cursor: String(head), truncated: asked !== null && asked < head };
    if (existing) result.deliveryStatus = { active: true, ...(existing.lastDeliveryAt ? { lastDeliveryAt: new Date(existing.lastDeliveryAt).toISOString() } : {}), ...(existing.lastError ? { lastError: existing.lastError } : {}) };
    return result;
  }

  async function unsubscribe(p: Params, principal: string, authenticated: boolean) {
    needPrincipal(authenticated, 'events/unsubscribe');
    const name = isOutput(p) ? TASK_OUTPUT : parseName(p);
    const a = p.arguments ?? {};
    const d = p.delivery as Params | undefined;
    if (typeof d?.url !== 'string') throw new EventsError(EventErrorCode.InvalidParams, 'params.delivery.url is required (the subscription is identified by name, arguments and url)');
    let url: string;
    try {
      url = new URL(d.url).toString();
    } catch {
      throw new EventsError(EventErrorCode.InvalidParams, 'delivery.url is not a valid URL');
    }
    // Idempotent (OpenAI's rule): an unknown key answers {} as well.
    await store.events.unsubscribe({ principal, url, name, args: canonicalJson(a) });
    return {};
  }

  const read = async (principal: string, filter: EventFilter, after: number, max: number) => store.events.read(principal, filter, after, max);
  const sleep = (ms: number, signal?: AbortSignal) => new Promise<void>((r) => {
    const t = setTimeout(r, ms);
    signal?.addEventListener('abort', () => { clearTimeout(t); r(); }, { once: true });
  });

  async function poll(p: Params, principal: string, signal?: AbortSignal) {
    const name = parseName(p);
    const { filter } = await parseArgs(name, p, principal);
    let after = await parseCursor(p.cursor);
    const max = typeof p.maxEvents === 'number' && p.maxEvents >= 1 ? Math.min(100, Math.floor(p.maxEvents)) : 100;
    const waitMs = typeof p.timeoutMs === 'number' && p.timeoutMs > 0 ? Math.min(30_000, p.timeoutMs) : 0;
    const deadline = Date.now() + waitMs;
    let rows: LoggedChange[] = [];
    for (;;) {
      rows = await read(principal, filter, after, max + 1);
      if (rows.length || Date.now() >= deadline || signal?.aborted) break;
      await sleep(readEveryMs, signal);
    }
    const hasMore = rows.length > max;
    rows = rows.slice(0, max);
    const events = [];
    for (const r of rows) events.push((await occurrenceOf(store, r, name, undefined, o.answerLinkOf)).occurrence);
    if (rows.length) after = rows[rows.length - 1]!.seq;
    return { events, cursor: String(after), truncated: false, hasMore, nextPollMs: 1000 };
  }

  async function stream(id: unknown, p: Params, principal: string, signal?: AbortSignal): Promise<Response> {
    const name = parseName(p);
    const { filter } = await parseArgs(name, p, principal);
    let after = await parseCursor(p.cursor);
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
            const rows = await read(principal, filter, after, 100);
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
          await sleep(readEveryMs, signal);
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

  const json = (status: number, v: unknown) => new Response(JSON.stringify(v), { status, headers: { 'content-type': 'application/json' } });

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
            result = await subscribe(p, principal, authenticated);
            break;
          case 'events/unsubscribe':
            result = await unsubscribe(p, principal, authenticated);
            break;
          case 'events/poll':
            result = isOutput(p) ? await pollOutput(output, p, principal, signal, sleep, readEveryMs) : await poll(p, principal, signal);
            break;
          case 'events/stream':
            return isOutput(p) ? await streamOutput(output, id, p, principal, o.heartbeatMs ?? 15_000, signal) : await stream(id, p, principal, signal);
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
