/**
 * The direct path for `tools/call` of Outlast's own tools: the SDK's dispatch, run on a McpServer kept for the
 * process (one per era) instead of one the SDK builds, registers and connects for every request.
 *
 * A call of an Outlast tool needs nothing of the application's per-request McpServer: its definition, schema and
 * handler are Outlast's (`outlast.tool`), the same on every request. So the request is handed to a kept McpServer
 * that has only Outlast attached (`attachForFront`, as for every request's server), through a loopback transport:
 * the SDK's own `_onrequest` lifts the envelope, validates the request for its era, runs the tools/call handler
 * (Outlast's, through the SDK's result checks and MRTR seam) and encodes the result or error, exactly as on the
 * per-request path. What is not the same is left to that path (the caller answers undefined): a call that may need
 * the request's stream (questions relayed on it, MRTR, a preflight: Outlast's tools/call declines it before
 * anything runs, see `declineDirectCall`), a `requestState` (the application's server verifies it), a tool with
 * OAuth scopes (the SDK's step-up challenge) or `x-mcp-header` declarations (the SDK's header checks).
 *
 * Request ids are replaced by ids of this path's own (clients reuse theirs, and the server keys its in-flight
 * requests by id) and restored on the answer. A client that leaves before the answer cancels the request, as the
 * per-request transport's close does.
 */
import { McpServer, type AuthInfo, type Implementation, type InboundLegacyRoute, type InboundModernRoute, type JSONRPCMessage, type Transport, type TransportSendOptions } from '@modelcontextprotocol/server';
import type { JsonObject } from '../../protocol/index.js';
import type { Outlast } from '../outlast.js';
import { newDirectCallId, takeDeclined } from './direct-call-ids.js';

type RequestId = string | number;

/** The JSON-RPC error the SDK wrote for one request. */
type WireError = { code: number; message: string; data?: unknown };

/** The call's answer: the SDK's JSON-RPC response (its id the caller's again), or the SSE stream it goes out on once
 *  the call sent something else first (a 2025-11-25 handle caller's questions, or a wait past `STREAM_AFTER_MS`). */
export type DirectCallAnswer = { message: JsonObject } | { stream: Response };

/** What the direct path knows of the HTTP request a call came on. */
export interface DirectCallRequest {
  headers: { get(name: string): string | null };
  /** Calls `left` if the client goes away before the answer (undefined: this runtime cannot tell). */
  onLeave?(left: () => void): void;
}

/** A 2025-11-25 call not answered within this many ms answers on an SSE stream, as the SDK's transport does from the
 *  start: its headers go out and keep-alives follow, so nothing between waits idle for the end of a long call. */
const STREAM_AFTER_MS = 1000;

interface Pending {
  /** The SDK's response to the call (its own id in it), or 'declined'. */
  answer(message: JsonObject | 'declined'): void;
  /** Something the SDK sent on the call's stream before its response (a notification, an input request). */
  event(message: JsonObject): void;
}

/** A transport that hands requests to a kept server and takes its answers back by id. */
class LoopbackTransport implements Transport {
  onmessage?: Transport['onmessage'];
  onclose?: () => void;
  onerror?: (error: Error) => void;
  readonly pending = new Map<string, Pending>();
  async start(): Promise<void> {}
  async close(): Promise<void> {
    // The front is closing: a call still in flight is answered so, not left hanging.
    for (const [id, p] of this.pending) p.answer({ jsonrpc: '2.0', id, error: { code: -32603, message: 'The server is shutting down' } });
    this.pending.clear();
    this.onclose?.();
  }
  async send(message: JSONRPCMessage, options?: TransportSendOptions): Promise<void> {
    const m = message as JsonObject;
    if (m.method === undefined && typeof m.id === 'string') {
      const wasDeclined = takeDeclined(m.id);
      const p = this.pending.get(m.id);
      if (!p) return;
      this.pending.delete(m.id);
      return p.answer(wasDeclined ? 'declined' : m);
    }
    const related = options?.relatedRequestId;
    const p = typeof related === 'string' ? this.pending.get(related) : undefined;
    if (p) return p.event(m);
    // As on the per-request path, whose stream has ended by then: nothing can carry it.
    throw new Error(`no stream to carry ${String(m.method ?? 'a response')}: its request was answered or its client left`);
  }
}

const encoder = new TextEncoder();
const SSE_HEADERS = { 'cache-control': 'no-cache, no-transform', connection: 'keep-alive', 'content-type': 'text/event-stream', 'x-accel-buffering': 'no' };

/** One call's SSE answer, as the SDK's 2025-11-25 transport writes it: events, keep-alive comments, the response last. */
class CallStream {
  readonly response: Response;
  private out!: ReadableStreamDefaultController<Uint8Array>;
  private keepAlive: ReturnType<typeof setInterval> | undefined;
  private open = true;
  constructor(keepAliveMs: number, onCancel: () => void) {
    const body = new ReadableStream<Uint8Array>({
      start: (c) => void (this.out = c),
      cancel: () => {
        this.stop();
        onCancel();
      },
    });
    this.response = new Response(body, { status: 200, headers: SSE_HEADERS });
    if (Number.isFinite(keepAliveMs) && keepAliveMs >= 1) {
      this.keepAlive = setInterval(() => this.enqueue(': keepalive\n\n'), keepAliveMs);
      this.keepAlive.unref?.();
    }
  }
  event(message: JsonObject): void {
    this.enqueue(`event: message\ndata: ${JSON.stringify(message)}\n\n`);
  }
  end(message: JsonObject): void {
    this.event(message);
    this.stop();
    try {
      this.out.close();
    } catch {
      // already cancelled by the client
    }
  }
  private enqueue(text: string): void {
    if (!this.open) return;
    try {
      this.out.enqueue(encoder.encode(text));
    } catch {
      this.stop();
    }
  }
  private stop(): void {
    this.open = false;
    clearInterval(this.keepAlive);
  }
}

/** One era's kept server, rebuilt when Outlast's tools change. */
interface Kept {
  version: number;
  mcp: McpServer;
  transport: LoopbackTransport;
  /** Tools whose input schema declares `x-mcp-header` (left to the per-request path's header checks). */
  headerBound: Map<string, boolean>;
  /** Replaced after a change of tools: closed once its calls in flight are answered (closing aborts them). */
  retired: boolean;
  /** The kept server's handling of one inbound request (the SDK's `_onrequest`, what its transport hook calls). */
  dispatch(request: JSONRPCMessage, extra: object): void;
}

export interface DirectToolCall {
  /** Whether a tools/call of `name` may take this path (an Outlast tool the kept server serves as the SDK would). */
  takes(name: unknown, params: Record<string, unknown>): boolean;
  /** The SDK's answer to the call, or undefined to leave it to the per-request path (nothing ran). */
  call(era: 'modern' | 'legacy', route: InboundModernRoute | InboundLegacyRoute, msg: JsonObject, authInfo: AuthInfo | undefined, request: DirectCallRequest): Promise<DirectCallAnswer | undefined>;
  close(): Promise<void>;
}

export function createDirectToolCall(outlast: Outlast, serverInfo: Implementation, options: { onerror?: (e: Error) => void; keepAliveMs: number }): DirectToolCall {
  const kept: Partial<Record<'modern' | 'legacy', Kept>> = {};
  const report = options.onerror ?? (() => undefined);

  async function serverFor(era: 'modern' | 'legacy'): Promise<Kept> {
    const have = kept[era];
    if (have && have.version === outlast.toolsVersion) return have;
    if (have) {
      have.retired = true;
      closeIfDone(have);
    }
    const mcp = outlast.attachForFront(new McpServer(serverInfo), era);
    // The era the SDK's entry gives each per-request server of a 2026-07-28 request; a 2025-11-25 one stays unset.
    if (era === 'modern') (mcp.server as unknown as { _negotiatedProtocolVersion?: string })._negotiatedProtocolVersion = '2026-07-28';
    const transport = new LoopbackTransport();
    // What the SDK's dispatch reports (a response it could not send) goes where the front's own reports go.
    mcp.server.onerror = report;
    await mcp.connect(transport);
    const protocol = mcp.server as unknown as { _onrequest(request: JSONRPCMessage, extra: object): void };
    const next: Kept = { version: outlast.toolsVersion, mcp, transport, headerBound: new Map(), retired: false, dispatch: (r, e) => protocol._onrequest(r, e) };
    kept[era] = next;
    return next;
  }

  function closeIfDone(k: Kept): void {
    if (k.retired && k.transport.pending.size === 0) void k.mcp.close().catch(() => undefined);
  }

  function headerBound(k: Kept, name: string): boolean {
    let bound = k.headerBound.get(name);
    if (bound === undefined) {
      const schema = (k.mcp as unknown as { toolInputSchemaJson(n: string): unknown }).toolInputSchemaJson(name);
      bound = schema !== undefined && JSON.stringify(schema).includes('"x-mcp-header"');
      k.headerBound.set(name, bound);
    }
    return bound;
  }

  /** The SDK's message with the caller's id in place of ours (in the SDK's field order: result first, error last). */
  function restored(m: JsonObject, callerId: RequestId): JsonObject {
    return m.error !== undefined ? { jsonrpc: '2.0', id: callerId, error: m.error as WireError } : { result: m.result as JsonObject, jsonrpc: '2.0', id: callerId };
  }

  return {
    takes(name, params) {
      if (typeof name !== 'string' || !outlast.directCallable(name)) return false;
      // A retry's requestState is verified by the application's own server (its codec); inputResponses ride with it.
      return params.requestState === undefined && params.inputResponses === undefined;
    },
    async call(era, route, msg, authInfo, request) {
      const k = await serverFor(era);
      if (headerBound(k, (msg.params as JsonObject).name as string)) return undefined;
      const id = newDirectCallId();
      const callerId = msg.id as RequestId;
      const cancel = () => {
        if (!k.transport.pending.delete(id)) return;
        // As the per-request transport's close: the handler's signal aborts (an inline call not yet a task stops).
        k.transport.onmessage?.({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: id, reason: 'the client left' } });
      };
      return new Promise<DirectCallAnswer | undefined>((settle) => {
        let stream: CallStream | undefined;
        let timer: ReturnType<typeof setTimeout> | undefined;
        const streaming = (): CallStream => {
          if (!stream) {
            clearTimeout(timer);
            stream = new CallStream(options.keepAliveMs, cancel);
            settle({ stream: stream.response });
          }
          return stream;
        };
        k.transport.pending.set(id, {
          answer(m) {
            clearTimeout(timer);
            closeIfDone(k);
            if (m === 'declined') return settle(undefined);
            if (stream) stream.end(restored(m, callerId));
            else settle({ message: restored(m, callerId) });
          },
          event(m) {
            streaming().event(m);
          },
        });
        // Only the 2025-11-25 era answers on a stream; a 2026-07-28 call's answer is one JSON response.
        if (era === 'legacy') timer = setTimeout(streaming, Math.min(STREAM_AFTER_MS, options.keepAliveMs));
        request.onLeave?.(() => {
          clearTimeout(timer);
          if (!k.transport.pending.has(id)) return;
          cancel();
          closeIfDone(k);
          // Nobody reads this answer; it must not send the call on to the per-request path, which would run it again.
          settle({ message: restored({ error: { code: -32603, message: 'The client left before the answer' } }, callerId) });
        });
        const extra = {
          ...(authInfo !== undefined ? { authInfo } : {}),
          // ctx.http is set on every HTTP request (its headers are what Outlast's tools/call reads of it).
          request: { headers: request.headers } as unknown as Request,
          ...(route.kind === 'modern' ? { classification: route.classification } : {}),
        };
        // Straight to the SDK's request dispatch: its transport hook would try the message as a response twice (two
        // failed schema parses, 2.4 % of a creation's CPU) before finding it a request, as the classification did (its
        // schemas are strict: a body with a method and a result is neither, and is refused before it gets here).
        k.dispatch({ ...msg, id } as unknown as JSONRPCMessage, extra);
      });
    },
    async close() {
      for (const k of Object.values(kept)) await k?.mcp.close().catch(() => undefined);
    },
  };
}
