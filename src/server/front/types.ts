/** The front's vocabulary: the options `outlastHandler` takes, what an adapter hands the front, and the front itself. */
import type { AuthInfo, Implementation, McpHttpHandler, McpRequestContext, McpServer } from '@modelcontextprotocol/server';
import type { DashboardOptions } from '../../ops/dashboard/index.js';
import type { OAuthFrontOptions } from '../oauth/index.js';
import type { EventsWireOptions } from '../events/index.js';
import type { Answer, FrontRequest } from './exchange.js';

/** Largest request body accepted, in bytes (1 MiB). Larger bodies get HTTP 413 and a JSON-RPC error. */
export const DEFAULT_MAX_BODY_BYTES = 1024 * 1024;

export type ServerFactory = (ctx: McpRequestContext) => McpServer | Promise<McpServer>;

/** A handler that serves a node:http request itself (the dashboard, a Prometheus exporter). */
export type NodeMount = (req: import('node:http').IncomingMessage, res: import('node:http').ServerResponse) => void | Promise<void>;

export interface OutlastHandlerOptions {
  /** Endpoint path. Default /mcp. */
  path?: string;
  /** Static bearer tokens: token → principal. When set, requests without a listed token get 401. */
  bearer?: Record<string, string>;
  /** An OAuth 2.1 resource server in front (src/server/oauth): tasks are bound to the token's issuer + subject. A
   *  listed static bearer token still wins (operators' tokens beside OAuth). */
  oauth?: OAuthFrontOptions;
  /** Default DEFAULT_MAX_BODY_BYTES; a body a framework already parsed is measured on its JSON text. */
  maxBodyBytes?: number;
  /** SSE keep-alive comment period on listen streams. Default 15 000 ms. */
  keepAliveMs?: number;
  /** Called for errors nobody else reports. */
  onerror?: (e: Error) => void;
  /** The identity your factory's McpServer is built with. Given, task methods take the direct path (`direct.ts`):
   *  answered from the store with the SDK's checks and answers, no McpServer built. Its name is also what the answer
   *  page shows as the server that asks. */
  serverInfo?: Implementation;
  /** false: task methods go through the SDK's per-request McpServer even with `serverInfo`. Default true. */
  directTaskMethods?: boolean;
  /** The operations dashboard at /dashboard (off by default; see src/ops/dashboard). Served through `node()`. Without
   *  operator tokens it needs `host`, the loopback interface the app listens on. */
  dashboard?: Omit<DashboardOptions, 'store' | 'bus' | 'host'> & { host?: string };
  /** Serves GET /metrics (e.g. the Prometheus exporter's handler), through `node()`. */
  metrics?: NodeMount;
  /** A server span for every tasks/get too (default false: polls are the hot path; other requests always get one
   *  once the application registers an OpenTelemetry tracer provider). */
  tracePolls?: boolean;
  /** DNS-rebinding protection as the SDK's adapters give it: requests whose Host hostname is not listed get 403
   *  (e.g. `localhostAllowedHostnames()` for an app on loopback). Default: not checked. */
  allowedHosts?: string[];
  /** Requests with an Origin whose hostname is not listed get 403 (no Origin: allowed). Default: not checked. */
  allowedOrigins?: string[];
  /** Streams one principal may hold open on this replica at once (`subscriptions/listen`, `tasks/stream`,
   *  `events/stream`); past it a new one is refused with JSON-RPC `-31503` (`principal_streams`). Default 16. */
  maxStreamsPerPrincipal?: number;
  /** The MCP Events wire (events/list, subscribe, unsubscribe, poll, stream; src/server/events). Off by default. */
  events?: Omit<EventsWireOptions, 'store' | 'bus' | 'recheckMs'>;
}

/** What an adapter may hand the front besides the Request. */
export interface FrontExtra {
  /** Who the caller is, when the app authenticated it (a bearer token configured here takes precedence). */
  authInfo?: AuthInfo;
  /** The body a framework already parsed (still held to maxBodyBytes, measured on its JSON text). */
  parsedBody?: unknown;
  /** The raw body an adapter read itself (at most maxBodyBytes + 1 bytes of it: more means too large). */
  rawBody?: Uint8Array | 'too-large';
  /** The body stream was read before the adapter saw it (a body parser) and its result not handed over. */
  bodyConsumed?: boolean;
}

export interface Front {
  /** The front itself, on the neutral request and answer (exchange.ts) an adapter maps its runtime to. */
  serve(request: FrontRequest, extra?: FrontExtra): Promise<Answer>;
  fetch(request: Request, extra?: FrontExtra): Promise<Response>;
  /** Resolves once what the front needs before its first request is there (the OAuth issuers' metadata); rejects with why not. */
  ready(): Promise<void>;
  /** The node:http handler that owns this request (the dashboard, /metrics), after the Host check; a refusal; or undefined. */
  mount(request: FrontRequest): NodeMount | Response | undefined;
  /** Reads at most this many bytes of a body before calling it too large. */
  readonly bodyCap: number;
  /** The SDK's handler behind the front (its notifier and bus). */
  readonly sdk: McpHttpHandler;
  close(): Promise<void>;
}
