/**
 * Streamable HTTP for Outlast: node:http in front of the SDK's createMcpHandler. Adds what the SDK has no seam
 * for: static bearer tokens, a documented body limit with a JSON-RPC error, refusal of over-polling (HTTP 429
 * with Retry-After), refusal of calls the server has no capacity for (HTTP 503 with Retry-After), and
 * `subscriptions/listen` with `taskIds` pushing `notifications/tasks`.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { context } from '@opentelemetry/api';
import type { AddressInfo } from 'node:net';
import { toNodeHandler, localhostHostValidation, localhostOriginValidation } from '@modelcontextprotocol/node';
import { createMcpHandler, type McpHttpHandler, type AuthInfo, type Implementation, type McpRequestContext, type McpServer } from '@modelcontextprotocol/server';
import {
  CLIENT_CAPABILITIES_META,
  ErrorCode,
  PROTOCOL_VERSION,
  PROTOCOL_VERSION_META,
  RATE_LIMITED_CODE,
  SUBSCRIPTION_ID_META,
  TaskProtocolError,
  declaresTasks,
  missingTasksCapability,
  type JsonObject,
} from '../protocol/index.js';
import type { Outlast } from './outlast.js';
import { answerPostedResponse, isInputResponse } from './legacy.js';
import { ANSWER_PATH, createAnswerPage } from './answers/index.js';
import { serveWeb } from './answers/node-adapter.js';
import { createDirectTaskPath } from './direct.js';
import { requestMetrics } from './request-metrics.js';
import { requestSpans } from './request-spans.js';
import { checkDashboardExposure, createDashboard, isLoopbackHost, type Dashboard, type DashboardOptions } from '../ops/dashboard/index.js';

/** Largest request body accepted, in bytes (1 MiB). Larger bodies get HTTP 413 and a JSON-RPC error. */
export const DEFAULT_MAX_BODY_BYTES = 1024 * 1024;

export interface HttpServeOptions {
  /** Port; 0 picks a free one. Default 3000. */
  port?: number;
  /** Interface to bind. Default 127.0.0.1. */
  host?: string;
  /** Endpoint path. Default /mcp. */
  path?: string;
  /** Static bearer tokens: token → principal. When set, requests without a listed token get 401. */
  bearer?: Record<string, string>;
  /** Default DEFAULT_MAX_BODY_BYTES. */
  maxBodyBytes?: number;
  /** SSE keep-alive comment period on listen streams. Default 15 000 ms. */
  keepAliveMs?: number;
  /** Called for errors nobody else reports. */
  onerror?: (e: Error) => void;
  /** The identity your factory's McpServer is built with. Given, task methods take the direct path (`direct.ts`):
   *  answered from the store with the SDK's checks and answers, no McpServer built. */
  serverInfo?: Implementation;
  /** false: task methods go through the SDK's per-request McpServer even with `serverInfo`. Default true. */
  directTaskMethods?: boolean;
  /** The operations dashboard at /dashboard (off by default; see src/ops/dashboard). */
  dashboard?: Omit<DashboardOptions, 'store' | 'bus' | 'host'>;
  /** Serves GET /metrics (e.g. the Prometheus exporter's handler). */
  metrics?: (req: IncomingMessage, res: ServerResponse) => void;
  /** A server span for every tasks/get too (default false: polls are the hot path; other requests always get one
   *  once the application registers an OpenTelemetry tracer provider). */
  tracePolls?: boolean;
}

export type ServerFactory = (ctx: McpRequestContext) => McpServer | Promise<McpServer>;

export interface RunningHttpServer {
  url: string;
  port: number;
  server: Server;
  handler: McpHttpHandler;
  /** Ends listen streams, stops accepting, closes the SDK handler (the runtime is stopped separately). */
  close(): Promise<void>;
}

function jsonRpcError(res: ServerResponse, status: number, id: unknown, code: number, message: string, data?: unknown, headers: Record<string, string> = {}): void {
  // MCP's schema has no null id: an error whose request id is unknown (unparsed body) carries none.
  const error = data === undefined ? { code, message } : { code, message, data };
  const body = JSON.stringify(id === undefined || id === null ? { jsonrpc: '2.0', error } : { jsonrpc: '2.0', id, error });
  if (res.headersSent) {
    res.end();
    return;
  }
  res.writeHead(status, { 'content-type': 'application/json', ...headers });
  res.end(body);
}

function readBody(req: IncomingMessage, limit: number): Promise<Buffer | 'too-large'> {
  const declared = Number(req.headers['content-length']);
  if (Number.isFinite(declared) && declared > limit) return Promise.resolve('too-large');
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) {
        req.off('data', onData);
        resolve('too-large');
        return;
      }
      chunks.push(chunk);
    };
    req.on('data', onData);
    req.once('end', () => resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks)));
    req.once('error', reject);
  });
}

interface ListenStream {
  end(): void;
}

export async function serveHttp(outlast: Outlast, factory: ServerFactory, options: HttpServeOptions = {}): Promise<RunningHttpServer> {
  const host = options.host ?? '127.0.0.1';
  const path = options.path ?? '/mcp';
  const maxBody = options.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES;
  const keepAliveMs = options.keepAliveMs ?? 15_000;
  const bearer = options.bearer && Object.keys(options.bearer).length > 0 ? new Map(Object.entries(options.bearer)) : undefined;
  const onerror = options.onerror ?? (() => undefined);

  if (options.dashboard) checkDashboardExposure(host, options.dashboard);
  await outlast.start();
  const dashboard: Dashboard | undefined = options.dashboard
    ? createDashboard({ ...options.dashboard, store: outlast.runtime.store, bus: outlast.runtime.bus, host })
    : undefined;
  const handler = createMcpHandler(
    async (ctx) => {
      const mcp = await factory(ctx);
      return outlast.attach(mcp, ctx.era);
    },
    { onerror, maxRequestBodySize: maxBody, keepAliveMs },
  );
  const nodeHandler = toNodeHandler(handler, { onerror, maxRequestBodySize: maxBody });
  const hostCheck = isLoopbackHost(host) ? localhostHostValidation() : undefined;
  const originCheck = isLoopbackHost(host) ? localhostOriginValidation() : undefined;
  const streams = new Set<ListenStream>();
  const direct =
    options.serverInfo && options.directTaskMethods !== false ? createDirectTaskPath(outlast.runtime, { serverInfo: options.serverInfo, onerror, legacy: outlast.legacy.methods }) : undefined;
  const observe = requestMetrics();
  const traceRequest = requestSpans({ polls: options.tracePolls });

  // A request that carries credentials must be the task's principal; one without them is answered on the link alone.
  const signedIn = (r: Request) => {
    const m = /^Bearer\s+(.+)$/i.exec(r.headers.get('authorization') ?? '');
    return m ? (bearer?.get(m[1]!.trim()) ?? '(unknown token)') : undefined;
  };
  const answerPage = outlast.answers
    ? createAnswerPage({ runtime: outlast.runtime, secret: () => outlast.answers!.key(), secureCookie: outlast.answers.base.startsWith('https:'), principalOf: signedIn })
    : undefined;
  const server = createServer(async (req, res) => {
    try {
      const raw = req.url ?? '/';
      const q = raw.indexOf('?');
      const pathname = q < 0 ? raw : raw.slice(0, q);
      if (dashboard?.owns(pathname)) {
        if (hostCheck && !hostCheck(req, res)) return;
        return void (await dashboard.handle(req, res));
      }
      if (options.metrics && pathname === '/metrics' && req.method === 'GET') return options.metrics(req, res);
      if (answerPage && pathname.startsWith(ANSWER_PATH)) {
        if (hostCheck && !hostCheck(req, res)) return;
        if (await serveWeb(answerPage, req, res, 65_536)) return;
      }
      if (pathname !== path) {
        res.writeHead(404, { 'content-type': 'text/plain' }).end(`Not found: the MCP endpoint is ${path}\n`);
        return;
      }
      // DNS-rebinding protection when bound to loopback.
      if (hostCheck && !hostCheck(req, res)) return;
      if (originCheck && !originCheck(req, res)) return;

      if (bearer) {
        let principal: string | undefined;
        const m = /^Bearer\s+(.+)$/i.exec(req.headers.authorization ?? '');
        principal = m ? bearer.get(m[1]!.trim()) : undefined;
        if (!principal) {
          jsonRpcError(res, 401, null, ErrorCode.InvalidRequest, m ? 'Unknown bearer token' : 'Authorization: Bearer <token> is required', undefined, {
            'www-authenticate': 'Bearer realm="outlast"',
          });
          return;
        }
        (req as IncomingMessage & { auth?: unknown }).auth = { token: m![1]!.trim(), clientId: principal, scopes: [], extra: { principal } };
      }

      if (req.method !== 'POST') return void (await nodeHandler(req, res));
      const who = outlast.principalOfAuth((req as IncomingMessage & { auth?: AuthInfo }).auth);

      const body = await readBody(req, maxBody);
      if (body === 'too-large') {
        jsonRpcError(res, 413, null, ErrorCode.InvalidRequest, `Request body exceeds ${maxBody} bytes; send less (large inputs belong in resources)`);
        req.resume();
        return;
      }
      let parsed: unknown;
      try {
        parsed = JSON.parse(body.toString('utf8'));
      } catch (e) {
        jsonRpcError(res, 400, null, ErrorCode.ParseError, `Parse error: the body is not valid JSON (${(e as Error).message})`);
        return;
      }
      const msg = parsed as { id?: unknown; method?: unknown; params?: Record<string, unknown> } | null;
      observe(msg, res);
      // The request's server span (when it gets one) is the context it is answered in: a handler's span hangs under it.
      const traced = traceRequest(msg, req, res);
      if (traced) await context.with(traced, () => answer(req, res, msg, parsed, who));
      else await answer(req, res, msg, parsed, who);
    } catch (e) {
      onerror(e as Error);
      jsonRpcError(res, 500, null, ErrorCode.InternalError, 'Internal error');
    }
  });

  /** A parsed request, past the front's checks of every request: the front's own refusals, the direct path, or the SDK. */
  async function answer(req: IncomingMessage, res: ServerResponse, msg: { id?: unknown; method?: unknown; params?: Record<string, unknown> } | null, parsed: unknown, who: string): Promise<void> {
    if (isInputResponse(msg)) {
      // A 2025-11-25 client answering an input request sent on some replica's tasks/result stream.
      const r = await answerPostedResponse(outlast.runtime, msg, who);
      if (r.status === 202) res.writeHead(202).end();
      else jsonRpcError(res, 400, null, r.error.code, r.error.message);
      return;
    }
    if (msg && typeof msg === 'object' && !Array.isArray(msg)) {
      if (msg.method === 'tasks/get' && typeof msg.params?.taskId === 'string') {
        const waitMs = outlast.runtime.pollBackoff(msg.params.taskId, who);
        if (waitMs > 0) {
          jsonRpcError(res, 429, msg.id, RATE_LIMITED_CODE, `Polling faster than the advertised pollIntervalMs; retry in ${waitMs} ms`, { retryAfterMs: waitMs }, {
            'retry-after': String(Math.max(1, Math.ceil(waitMs / 1000))),
          });
          return;
        }
      }
      if (msg.method === 'tools/call' && typeof msg.params?.name === 'string') {
        // No capacity for it now (nothing stored): 503 with Retry-After before the SDK dispatches it. The caller can
        // wait in the run queue if it follows tasks (2026 extension, 2025-11-25 task-augmented call) or handles.
        const caps = (msg.params._meta as Record<string, unknown> | undefined)?.[CLIENT_CAPABILITIES_META];
        const canWait = declaresTasks(caps) || msg.params.task !== undefined || outlast.handles !== undefined;
        const busy = outlast.runtime.capacityRefusal(msg.params.name, canWait);
        if (busy) {
          const waitMs = (busy.data as { retryAfterMs: number }).retryAfterMs;
          jsonRpcError(res, 503, msg.id, busy.code, busy.message, busy.data, { 'retry-after': String(Math.max(1, Math.ceil(waitMs / 1000))) });
          return;
        }
      }
      if (msg.method === 'tasks/update' && msg.params && 'inputResponses' in msg.params) {
        const ir = msg.params.inputResponses;
        if (typeof ir !== 'object' || ir === null || Array.isArray(ir)) {
          // The SDK turns a non-object inputResponses into {} before any handler sees it: refuse it here.
          jsonRpcError(res, 400, msg.id, ErrorCode.InvalidParams, 'Invalid inputResponses: expected an object mapping each input request key to its response');
          return;
        }
      }
      const taskIds = (msg.params?.notifications as { taskIds?: unknown } | undefined)?.taskIds;
      if (msg.method === 'subscriptions/listen' && taskIds !== undefined) {
        await serveTaskListen(req, res, msg as ListenRequest, who);
        return;
      }
    }
    if (direct && (await direct.serve(req, res, parsed, who))) return;
    await nodeHandler(req, res, parsed);
  }

  interface ListenRequest {
    id?: unknown;
    params: { _meta?: Record<string, unknown>; notifications: Record<string, unknown> };
  }

  async function serveTaskListen(req: IncomingMessage, res: ServerResponse, msg: ListenRequest, principal: string): Promise<void> {
    const id = msg.id;
    if (id === undefined || id === null) return jsonRpcError(res, 400, null, ErrorCode.InvalidRequest, 'subscriptions/listen must be a request with an id');
    const meta = msg.params?._meta;
    const version = meta?.[PROTOCOL_VERSION_META];
    const caps = meta?.[CLIENT_CAPABILITIES_META];
    if (typeof version !== 'string' || caps === undefined || typeof caps !== 'object') {
      return jsonRpcError(res, 400, id, ErrorCode.InvalidParams, `params._meta must carry "${PROTOCOL_VERSION_META}" and "${CLIENT_CAPABILITIES_META}"`);
    }
    if (version !== PROTOCOL_VERSION) {
      return jsonRpcError(res, 400, id, ErrorCode.UnsupportedProtocolVersion, 'Unsupported protocol version', { supported: [PROTOCOL_VERSION], requested: version });
    }
    const header = req.headers['mcp-protocol-version'];
    if (header !== version) return jsonRpcError(res, 400, id, ErrorCode.HeaderMismatch, 'MCP-Protocol-Version header must match _meta protocolVersion');
    if (!declaresTasks(caps)) {
      const e = missingTasksCapability();
      return jsonRpcError(res, 400, id, e.code, e.message, e.data);
    }
    const wanted = msg.params.notifications.taskIds;
    if (!Array.isArray(wanted) || !wanted.every((t) => typeof t === 'string') || wanted.length > 1000) {
      return jsonRpcError(res, 400, id, ErrorCode.InvalidParams, 'notifications.taskIds must be an array of at most 1000 task id strings');
    }
    const subMeta = { [SUBSCRIPTION_ID_META]: id };
    const unsubscribers: Array<() => void> = [];
    const honoured: string[] = [];
    const pending: JsonObject[] = [];
    let open = true;
    const send = (m: JsonObject) => {
      if (!open) return;
      res.write(`event: message\ndata: ${JSON.stringify(m)}\n\n`);
    };
    const onTask = (task: JsonObject) => {
      const n = { jsonrpc: '2.0', method: 'notifications/tasks', params: { _meta: subMeta, ...task } };
      if (acked) send(n);
      else pending.push(n);
    };
    let acked = false;
    for (const taskId of new Set(wanted as string[])) {
      try {
        unsubscribers.push(await outlast.runtime.watch(taskId, principal, (t) => onTask(t as unknown as JsonObject)));
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
      unsubscribers.push(handler.bus.subscribe((ev) => ev.kind === kind && send({ jsonrpc: '2.0', method, params: { _meta: subMeta } })));
    }
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', 'x-accel-buffering': 'no', connection: 'keep-alive' });
    send({ jsonrpc: '2.0', method: 'notifications/subscriptions/acknowledged', params: { _meta: subMeta, notifications: ack } });
    acked = true;
    for (const n of pending.splice(0)) send(n);
    const keepAlive = setInterval(() => open && res.write(': keep-alive\n\n'), keepAliveMs);
    const stream: ListenStream = {
      end() {
        if (!open) return;
        send({ jsonrpc: '2.0', id, result: { resultType: 'complete', _meta: subMeta } });
        cleanup();
        res.end();
      },
    };
    const cleanup = () => {
      open = false;
      clearInterval(keepAlive);
      for (const u of unsubscribers) u();
      streams.delete(stream);
    };
    streams.add(stream);
    res.on('close', cleanup);
  }

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 3000, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;
  const shownHost = host.includes(':') ? `[${host}]` : host;
  return {
    url: `http://${shownHost}:${port}${path}`,
    port,
    server,
    handler,
    async close() {
      for (const s of [...streams]) s.end();
      dashboard?.close();
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeIdleConnections?.();
        setTimeout(() => server.closeAllConnections?.(), 2000).unref();
      });
      await handler.close();
    },
  };
}
