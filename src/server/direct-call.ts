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
import { McpServer, type AuthInfo, type Implementation, type InboundLegacyRoute, type InboundModernRoute, type JSONRPCMessage, type Transport } from '@modelcontextprotocol/server';
import type { JsonObject } from '../protocol/index.js';
import type { Outlast } from './outlast.js';

type RequestId = string | number;

/** The JSON-RPC response the SDK wrote for one request (its id the original one again). */
export type DirectCallAnswer = { result: JsonObject } | { error: { code: number; message: string; data?: unknown } };

/** What the direct path knows of the HTTP request a call came on. */
export interface DirectCallRequest {
  headers: { get(name: string): string | null };
  /** Calls `left` if the client goes away before the answer (undefined: this runtime cannot tell). */
  onLeave?(left: () => void): void;
}

const ID_PREFIX = 'outlast-direct:';
let nextId = 0;
/** Ids whose call Outlast's tools/call declined (it needs the per-request path); read once, by the dispatcher. */
const declined = new Set<string>();

/** Whether a request in the SDK's dispatch came through this path. */
export function isDirectCall(id: unknown): boolean {
  return typeof id === 'string' && id.startsWith(ID_PREFIX);
}

/** Marks a direct call as declined and returns the error that ends its dispatch (its answer is never sent). */
export function declineDirectCall(id: unknown): Error {
  declined.add(id as string);
  return new Error('outlast: this call needs the per-request path');
}

interface Pending {
  id: RequestId;
  settle(answer: DirectCallAnswer | 'declined' | 'gone'): void;
}

/** A transport that hands requests to a kept server and takes its answers back by id. */
class LoopbackTransport implements Transport {
  onmessage?: Transport['onmessage'];
  onclose?: () => void;
  onerror?: (error: Error) => void;
  readonly pending = new Map<string, Pending>();
  constructor(private readonly report: (e: Error) => void) {}
  async start(): Promise<void> {}
  async close(): Promise<void> {
    for (const p of this.pending.values()) p.settle('gone');
    this.pending.clear();
    this.onclose?.();
  }
  async send(message: JSONRPCMessage): Promise<void> {
    const m = message as { id?: unknown; method?: unknown; result?: JsonObject; error?: { code: number; message: string; data?: unknown } };
    if (m.method !== undefined || typeof m.id !== 'string') {
      // Outlast's tools/call sends nothing on a direct call's stream (the calls that would are declined first).
      this.report(new Error(`direct tools/call: a message with no stream to carry it was not sent: ${JSON.stringify(message).slice(0, 200)}`));
      return;
    }
    const wasDeclined = declined.delete(m.id);
    const p = this.pending.get(m.id);
    if (!p) return;
    this.pending.delete(m.id);
    if (wasDeclined) return p.settle('declined');
    p.settle(m.error !== undefined ? { error: m.error } : { result: m.result! });
  }
}

/** One era's kept server, rebuilt when Outlast's tools change. */
interface Kept {
  version: number;
  mcp: McpServer;
  transport: LoopbackTransport;
  /** Tools whose input schema declares `x-mcp-header` (left to the per-request path's header checks). */
  headerBound: Map<string, boolean>;
}

export interface DirectToolCall {
  /** Whether a tools/call of `name` may take this path (an Outlast tool the kept server serves as the SDK would). */
  takes(name: unknown, params: Record<string, unknown>): boolean;
  /** The SDK's answer to the call, or undefined to leave it to the per-request path (nothing ran). */
  call(era: 'modern' | 'legacy', route: InboundModernRoute | InboundLegacyRoute, msg: JsonObject, authInfo: AuthInfo | undefined, request: DirectCallRequest): Promise<DirectCallAnswer | undefined>;
  close(): Promise<void>;
}

export function createDirectToolCall(outlast: Outlast, serverInfo: Implementation, onerror: (e: Error) => void = () => undefined): DirectToolCall {
  const kept: Partial<Record<'modern' | 'legacy', Kept>> = {};

  async function serverFor(era: 'modern' | 'legacy'): Promise<Kept> {
    const have = kept[era];
    if (have && have.version === outlast.toolsVersion) return have;
    if (have) void have.mcp.close().catch(() => undefined);
    const mcp = outlast.attachForFront(new McpServer(serverInfo), era);
    // The era the SDK's entry gives each per-request server of a 2026-07-28 request; a 2025-11-25 one stays unset.
    if (era === 'modern') (mcp.server as unknown as { _negotiatedProtocolVersion?: string })._negotiatedProtocolVersion = '2026-07-28';
    const transport = new LoopbackTransport(onerror);
    await mcp.connect(transport);
    const next: Kept = { version: outlast.toolsVersion, mcp, transport, headerBound: new Map() };
    kept[era] = next;
    return next;
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

  return {
    takes(name, params) {
      if (typeof name !== 'string' || !outlast.directCallable(name)) return false;
      // A retry's requestState is verified by the application's own server (its codec); inputResponses ride with it.
      return params.requestState === undefined && params.inputResponses === undefined;
    },
    async call(era, route, msg, authInfo, request) {
      const k = await serverFor(era);
      if (headerBound(k, (msg.params as JsonObject).name as string)) return undefined;
      const id = `${ID_PREFIX}${++nextId}`;
      const answer = await new Promise<DirectCallAnswer | 'declined' | 'gone'>((settle) => {
        k.transport.pending.set(id, { id: msg.id as RequestId, settle });
        request.onLeave?.(() => {
          if (!k.transport.pending.delete(id)) return;
          settle('gone');
          // As the per-request transport's close: the handler's signal aborts (an inline call not yet a task stops).
          k.transport.onmessage?.({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: id, reason: 'the client left' } });
        });
        const extra = {
          ...(authInfo !== undefined ? { authInfo } : {}),
          // ctx.http is set on every HTTP request (its headers are what Outlast's tools/call reads of it).
          request: { headers: request.headers } as unknown as Request,
          ...(route.kind === 'modern' ? { classification: route.classification } : {}),
        };
        k.transport.onmessage?.({ ...msg, id } as unknown as JSONRPCMessage, extra as never);
      });
      if (answer === 'declined') return undefined;
      // Nobody reads this answer; it must not send the call on to the per-request path, which would run it again.
      if (answer === 'gone') return { error: { code: -32603, message: 'The client left before the answer' } };
      return answer;
    },
    async close() {
      for (const k of Object.values(kept)) await k?.mcp.close().catch(() => undefined);
    },
  };
}
