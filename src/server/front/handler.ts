/**
 * The front: everything Outlast adds in front of the SDK's createMcpHandler, web-standard (`Request` → `Response`),
 * so every runtime serves all of it: the body limit with a JSON-RPC error, static bearer tokens, Host/Origin
 * validation, request metrics and server spans, 2025-11-25 input answers posted to any replica, refusal of
 * over-polling (429 with Retry-After), refusal of calls there is no capacity for (503 with Retry-After), the
 * `tasks/update` shape check, `subscriptions/listen` with `taskIds`, `tasks/stream` (task output), and the direct path for the task methods of both
 * eras. Imports no adapter: node.ts (node:http, Express, Fastify) and any fetch runtime wrap it.
 */
import { context } from '@opentelemetry/api';
import {
  createMcpHandler,
  hostHeaderValidationResponse,
  originValidationResponse,
  type AuthInfo,
  type Implementation,
  type McpHttpHandler,
  type McpRequestContext,
  type McpServer,
} from '@modelcontextprotocol/server';
import { CLIENT_CAPABILITIES_META, ErrorCode, RATE_LIMITED_CODE, TASKS_STREAM_METHOD, declaresTasks } from '../../protocol/index.js';
import type { Outlast } from '../outlast.js';
import { answerPostedResponse, isInputResponse } from '../legacy.js';
import { answerPostedUrlResponse, parseUrlResponse, urlModeSessionId } from '../url-elicitation.js';
import { createDirectTaskPath } from '../direct.js';
import { requestMetrics } from '../request-metrics.js';
import { requestSpans } from '../request-spans.js';
import { checkDashboardExposure, createDashboard, type Dashboard, type DashboardOptions } from '../../ops/dashboard/index.js';
import { HEALTH_PATHS, healthResponse } from '../health.js';
import type { TaskRecord } from '../../store/types.js';
import { createOAuthResourceServer, type OAuthFrontOptions } from '../oauth/index.js';
import { jsonRpcError, retryAfter } from './answers.js';
import { serveTaskListen, type ListenRequest, type ListenStream } from './listen.js';
import { serveTaskStream, type TaskStreamRequest } from './task-stream.js';
import { EVENT_METHODS, createEventsWire, type EventsWireOptions } from '../events/index.js';
import { ANSWER_PATH, createAnswerPage, createAnswerSignIn } from '../answers/index.js';

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
  fetch(request: Request, extra?: FrontExtra): Promise<Response>;
  /** Resolves once what the front needs before its first request is there (the OAuth issuers' metadata); rejects with why not. */
  ready(): Promise<void>;
  /** The node:http handler that owns this request (the dashboard, /metrics), after the Host check; a refusal; or undefined. */
  mount(request: Request): NodeMount | Response | undefined;
  /** Reads at most this many bytes of a body before calling it too large. */
  readonly bodyCap: number;
  /** The SDK's handler behind the front (its notifier and bus). */
  readonly sdk: McpHttpHandler;
  close(): Promise<void>;
}

type RpcMessage = { id?: unknown; method?: unknown; params?: Record<string, unknown> } | null;

/** Reads a web-standard body, stopping once it is longer than `limit`. */
async function readLimited(request: Request, limit: number): Promise<Uint8Array | 'too-large'> {
  const declared = Number(request.headers.get('content-length'));
  if (Number.isFinite(declared) && declared > limit) return 'too-large';
  if (!request.body) return new Uint8Array(0);
  const reader = request.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > limit) {
      void reader.cancel().catch(() => undefined);
      return 'too-large';
    }
    chunks.push(value);
  }
  return chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks);
}

const decoder = new TextDecoder();

/** The path of a request URL, without building a URL object (the hot path parses none). */
function pathnameOf(url: string): string {
  const start = url.indexOf('/', url.indexOf('//') + 2);
  if (start < 0) return '/';
  let end = url.length;
  const q = url.indexOf('?', start);
  if (q >= 0) end = q;
  const h = url.indexOf('#', start);
  if (h >= 0 && h < end) end = h;
  return url.slice(start, end);
}

export function createFront(outlast: Outlast, factory: ServerFactory, options: OutlastHandlerOptions = {}): Front {
  const path = options.path ?? '/mcp';
  const maxBody = options.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES;
  const keepAliveMs = options.keepAliveMs ?? 15_000;
  const bearer = options.bearer && Object.keys(options.bearer).length > 0 ? new Map(Object.entries(options.bearer)) : undefined;
  const onerror = options.onerror ?? (() => undefined);
  const oauth = options.oauth ? createOAuthResourceServer(options.oauth) : undefined;
  // Discovery starts now; the first request waits for it (and serveHttp before it listens).
  const oauthReady = oauth?.ready();
  oauthReady?.catch(() => undefined);

  let dashboard: Dashboard | undefined;
  if (options.dashboard) {
    const host = options.dashboard.host ?? 'an unknown interface (dashboard.host not given)';
    checkDashboardExposure(host, options.dashboard);
    dashboard = createDashboard({ ...options.dashboard, store: outlast.runtime.store, bus: outlast.runtime.bus, host });
  }
  const sdk = createMcpHandler(async (ctx) => outlast.attachForFront(await factory(ctx), ctx.era), { onerror, maxRequestBodySize: maxBody, keepAliveMs });
  outlast.servedBy({ notify: () => sdk.notify });
  const streams = new Set<ListenStream>();
  const direct =
    options.serverInfo && options.directTaskMethods !== false ? createDirectTaskPath(outlast.runtime, { serverInfo: options.serverInfo, onerror, legacy: outlast.legacy.methods }) : undefined;
  const events = options.events ? createEventsWire({ ...(outlast.answers ? { answerLinkOf: (t: TaskRecord, key: string) => outlast.answerLinks(t).find((l) => l.key === key)?.url } : {}), ...options.events, store: outlast.runtime.store, bus: outlast.runtime.bus, recheckMs: outlast.runtime.watchRecheckMs }) : undefined;
  if (events) outlast.eventsOn = true;
  outlast.taskStreamOn = true;
  const observe = requestMetrics();
  const traceRequest = requestSpans({ polls: options.tracePolls });
  const listenHost = { runtime: outlast.runtime, bus: sdk.bus, keepAliveMs, streams };
  /** Answers whose body may still be streaming (the SDK's, listen streams); the front's own are complete. */
  const streaming = new WeakSet<Response>();
  const mayStream = (r: Response) => (streaming.add(r), r);

  /** Host header values the SDK's check passed: a client sends the same one on every request, and the check parses a
   *  URL each time. Bounded (the header is the caller's): full, it is emptied. Refusals are never remembered. */
  const allowedHostValues = new Set<string>();
  const HOST_VALUES_MAX = 256;

  /** DNS-rebinding protection, as the SDK's adapters check it. */
  function refusedHost(request: Request): Response | undefined {
    if (options.allowedHosts) {
      const host = request.headers.get('host');
      if (host === null || !allowedHostValues.has(host)) {
        const refused = hostHeaderValidationResponse(request, options.allowedHosts);
        if (refused) return refused;
        if (host !== null) {
          if (allowedHostValues.size >= HOST_VALUES_MAX) allowedHostValues.clear();
          allowedHostValues.add(host);
        }
      }
    }
    return (options.allowedOrigins && originValidationResponse(request, options.allowedOrigins)) || undefined;
  }

  /** The principal's auth: a configured bearer token, else a verified OAuth token, else what the app's own authentication gave. */
  async function authenticate(request: Request, extra: FrontExtra | undefined): Promise<AuthInfo | Response | undefined> {
    if (!bearer && !oauth) return extra?.authInfo;
    const m = /^Bearer\s+(.+)$/i.exec(request.headers.get('authorization') ?? '');
    const principal = m && bearer ? bearer.get(m[1]!.trim()) : undefined;
    if (!principal && oauth) {
      await oauthReady;
      const verdict = await oauth.authenticate(request);
      if ('authInfo' in verdict) return verdict.authInfo;
      // The reason only (the SDK puts it in the challenge); never the token.
      outlast.runtime.log.debug('OAuth: request refused', { status: verdict.response.status, reason: /error_description="([^"]*)"/.exec(verdict.response.headers.get('www-authenticate') ?? '')?.[1] ?? null });
      return verdict.response;
    }
    if (!principal) {
      return jsonRpcError(401, null, ErrorCode.InvalidRequest, m ? 'Unknown bearer token' : 'Authorization: Bearer <token> is required', undefined, {
        'www-authenticate': 'Bearer realm="outlast"',
      });
    }
    return { token: m![1]!.trim(), clientId: principal, scopes: [], extra: { principal } };
  }

  // Answer pages: a request that carries credentials must be the task's principal. Behind OAuth the page signs the
  // person in itself; otherwise a browser without credentials is answered on the link.
  const signIn =
    outlast.answers && oauth && options.oauth
      ? createAnswerSignIn({
          issuer: options.oauth.issuers[0]!,
          resource: options.oauth.resource,
          scopes: options.oauth.scopes ?? [],
          ...(options.oauth.signInClient ? { client: options.oauth.signInClient } : {}),
          base: outlast.answers.base,
          secret: () => outlast.answers!.key(),
          secureCookie: outlast.answers.base.startsWith('https:'),
          log: outlast.runtime.log,
          verify: async (accessToken) => {
            await oauthReady;
            const verdict = await oauth.authenticateHeader(`Bearer ${accessToken}`);
            if ('response' in verdict) return { reason: /error_description="([^"]*)"/.exec(verdict.response.headers.get('www-authenticate') ?? '')?.[1] ?? `HTTP ${verdict.response.status}` };
            return { principal: outlast.principalOfAuth(verdict.authInfo), ...(verdict.authInfo.expiresAt ? { expiresAt: verdict.authInfo.expiresAt } : {}) };
          },
        })
      : undefined;
  const signInReady = signIn?.ready();
  signInReady?.catch(() => undefined);
  const answerPage = outlast.answers
    ? createAnswerPage({
        runtime: outlast.runtime,
        secret: () => outlast.answers!.key(),
        secureCookie: outlast.answers.base.startsWith('https:'),
        ...(options.serverInfo ? { serverName: options.serverInfo.name } : {}),
        ...(signIn ? { signIn } : {}),
        principalOf: async (request) => {
          if (!request.headers.get('authorization')) return undefined;
          const auth = await authenticate(request, undefined);
          return auth instanceof Response ? '(refused credentials)' : outlast.principalOfAuth(auth);
        },
      })
    : undefined;

  /** The body as JSON, held to the limit whichever way it came. */
  async function parseBody(request: Request, extra: FrontExtra | undefined): Promise<{ parsed: unknown } | Response> {
    const tooLarge = () => jsonRpcError(413, null, ErrorCode.InvalidRequest, `Request body exceeds ${maxBody} bytes; send less (large inputs belong in resources)`);
    if (extra?.parsedBody !== undefined) {
      // Parsed by a framework: its JSON text is what the client sent, near enough to hold it to the same limit.
      const text = JSON.stringify(extra.parsedBody);
      return text !== undefined && Buffer.byteLength(text) > maxBody ? tooLarge() : { parsed: extra.parsedBody };
    }
    if (extra?.bodyConsumed) {
      return jsonRpcError(400, null, ErrorCode.InvalidRequest, 'The request body was already read by a body parser and not handed over: pass it on, e.g. handler.node(req, res, req.body)');
    }
    const body = extra?.rawBody ?? (await readLimited(request, maxBody));
    if (body === 'too-large' || body.byteLength > maxBody) return tooLarge();
    try {
      return { parsed: JSON.parse(decoder.decode(body)) };
    } catch (e) {
      return jsonRpcError(400, null, ErrorCode.ParseError, `Parse error: the body is not valid JSON (${(e as Error).message})`);
    }
  }

  async function serve(request: Request, extra: FrontExtra | undefined): Promise<Response> {
    const pathname = pathnameOf(request.url);
    // Liveness and readiness come before everything else: a balancer asks them without credentials.
    if (HEALTH_PATHS.has(pathname)) return (await healthResponse(outlast, request))!;
    const mounted = mountOf(request, pathname);
    if (mounted instanceof Response) return mounted;
    if (mounted) {
      const what = pathname === '/metrics' ? '/metrics' : 'The dashboard';
      return new Response(`${what} is served through handler.node() (node:http, Express, Fastify, Hono on @hono/node-server); this runtime called handler.fetch(). Run \`outlast dashboard --store URL\` beside it for the dashboard.\n`, {
        status: 501,
        headers: { 'content-type': 'text/plain; charset=utf-8' },
      });
    }
    if (oauth && pathname.startsWith('/.well-known/')) {
      const metadata = oauth.metadata(request);
      if (metadata) return metadata;
    }
    if (answerPage && pathname.startsWith(ANSWER_PATH)) {
      const refusedPage = refusedHost(request);
      if (refusedPage) return refusedPage;
      if (extra?.rawBody === 'too-large') return new Response('The answer is too long.\n', { status: 413, headers: { 'content-type': 'text/plain' } });
      const page = await answerPage(request, extra?.rawBody ?? (typeof extra?.parsedBody === 'string' ? extra.parsedBody : undefined));
      if (page) return page;
    }
    if (pathname !== path) return new Response(`Not found: the MCP endpoint is ${path}\n`, { status: 404, headers: { 'content-type': 'text/plain' } });
    const refused = refusedHost(request);
    if (refused) return refused;
    const auth = await authenticate(request, extra);
    if (auth instanceof Response) return auth;
    if (request.method !== 'POST') return sdk.fetch(request, auth ? { authInfo: auth } : undefined);
    const who = outlast.principalOfAuth(auth);

    const body = await parseBody(request, extra);
    if (body instanceof Response) return body;
    const msg = body.parsed as RpcMessage;
    const measured = observe(msg);
    // The request's server span (when it gets one) is the context it is answered in: a handler's span hangs under it.
    const traced = traceRequest(msg, request);
    let response = traced
      ? await context.with(traced.context, () => answer(request, msg, body.parsed, who, auth))
      : await answer(request, msg, body.parsed, who, auth);
    // A client that declared URL-mode elicitation carries that declaration on its later stateless requests.
    const urlSession = outlast.answers && outlast.handles ? urlModeSessionId(msg) : undefined;
    if (urlSession && response.ok && !response.headers.has('mcp-session-id')) {
      const headers = new Headers(response.headers);
      headers.set('mcp-session-id', urlSession);
      const tracked = streaming.has(response);
      response = new Response(response.body, { status: response.status, statusText: response.statusText, headers });
      if (tracked) streaming.add(response);
    }
    const streams = streaming.has(response);
    if (traced) response = traced.answered(response);
    return measured ? measured(response, streams) : response;
  }

  /** The node:http handler that owns a request's path (after the Host check), or undefined. */
  function mountOf(request: Request, pathname: string): NodeMount | Response | undefined {
    let handler: NodeMount | undefined;
    if (dashboard?.owns(pathname)) {
      if (options.allowedHosts) {
        const refused = hostHeaderValidationResponse(request, options.allowedHosts);
        if (refused) return refused;
      }
      handler = (req, res) => dashboard!.handle(req, res);
    } else if (options.metrics && pathname === '/metrics' && request.method === 'GET') handler = options.metrics;
    return handler;
  }

  /** A parsed request, past the front's checks of every request: the front's own refusals, the direct path, or the SDK. */
  async function answer(request: Request, msg: RpcMessage, parsed: unknown, who: string, auth: AuthInfo | undefined): Promise<Response> {
    const urlTarget = parseUrlResponse(msg);
    if (urlTarget) {
      // A 2025-11-25 client answering a URL elicitation (accept: the person went to the answer page).
      const r = await answerPostedUrlResponse(outlast.runtime, urlTarget, msg as { result?: unknown; error?: unknown }, who);
      return r.status === 202 ? new Response(null, { status: 202 }) : jsonRpcError(400, null, r.error.code, r.error.message);
    }
    if (isInputResponse(msg)) {
      // A 2025-11-25 client answering an input request sent on some replica's tasks/result stream.
      const r = await answerPostedResponse(outlast.runtime, msg, who);
      return r.status === 202 ? new Response(null, { status: 202 }) : jsonRpcError(400, null, r.error.code, r.error.message);
    }
    if (msg && typeof msg === 'object' && !Array.isArray(msg)) {
      if (msg.method === 'tasks/get' && typeof msg.params?.taskId === 'string') {
        const waitMs = outlast.runtime.pollBackoff(msg.params.taskId, who);
        if (waitMs > 0) {
          return jsonRpcError(429, msg.id, RATE_LIMITED_CODE, `Polling faster than the advertised pollIntervalMs; retry in ${waitMs} ms`, { retryAfterMs: waitMs }, retryAfter(waitMs));
        }
      }
      if (msg.method === 'tools/call' && typeof msg.params?.name === 'string') {
        // No capacity for it now (nothing stored): 503 with Retry-After before the SDK dispatches it. The caller can
        // wait in the run queue if it follows tasks (2026 extension, 2025-11-25 task-augmented call) or handles.
        const caps = (msg.params._meta as Record<string, unknown> | undefined)?.[CLIENT_CAPABILITIES_META];
        const canWait = declaresTasks(caps) || msg.params.task !== undefined || outlast.handles !== undefined;
        const busy = outlast.runtime.capacityRefusal(msg.params.name, canWait, who);
        if (busy) {
          const waitMs = (busy.data as { retryAfterMs: number }).retryAfterMs;
          return jsonRpcError(503, msg.id, busy.code, busy.message, busy.data, retryAfter(waitMs));
        }
      }
      if (msg.method === 'tasks/update' && msg.params && 'inputResponses' in msg.params) {
        const ir = msg.params.inputResponses;
        if (typeof ir !== 'object' || ir === null || Array.isArray(ir)) {
          // The SDK turns a non-object inputResponses into {} before any handler sees it: refuse it here.
          return jsonRpcError(400, msg.id, ErrorCode.InvalidParams, 'Invalid inputResponses: expected an object mapping each input request key to its response');
        }
      }
      if (events && typeof msg.method === 'string' && EVENT_METHODS.has(msg.method)) return mayStream(await events.answer(msg as { method: string }, who, auth !== undefined, request.signal));
      const taskIds = (msg.params?.notifications as { taskIds?: unknown } | undefined)?.taskIds;
      if (msg.method === 'subscriptions/listen' && taskIds !== undefined) return mayStream(await serveTaskListen(listenHost, request, msg as ListenRequest, who));
      if (msg.method === TASKS_STREAM_METHOD) return mayStream(await serveTaskStream(listenHost, request, msg as TaskStreamRequest, who));
    }
    const directAnswer = direct && (await direct.serve(request, parsed, who));
    if (directAnswer) return directAnswer;
    return mayStream(await sdk.fetch(request, { parsedBody: parsed, ...(auth ? { authInfo: auth } : {}) }));
  }

  return {
    bodyCap: maxBody + 1,
    sdk,
    ready: async () => void (await Promise.all([oauthReady, signInReady])),
    mount: (request) => mountOf(request, pathnameOf(request.url)),
    async fetch(request, extra) {
      try {
        return await serve(request, extra);
      } catch (e) {
        onerror(e as Error);
        return jsonRpcError(500, null, ErrorCode.InternalError, 'Internal error');
      }
    },
    /** Ends listen streams and the dashboard's, closes the SDK handler (the runtime is stopped separately: outlast.stop). */
    async close() {
      for (const s of [...streams]) s.end();
      dashboard?.close();
      await sdk.close();
    },
  };
}
