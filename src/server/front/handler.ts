/**
 * The front: everything Outlast adds in front of the SDK's createMcpHandler, on the neutral request and reply of
 * exchange.ts (a web `Request` and `Response` at heart), so every runtime serves all of it. It is a list of routes
 * (route.ts), each a module of its own: health, the node:http mounts, OAuth metadata, answer pages, and the MCP
 * endpoint, whose message routes are the front's own refusals (over-polling 429, no capacity 503, the `tasks/update`
 * shape), 2025-11-25 answers posted to any replica, the Events wire, `subscriptions/listen` with `taskIds`,
 * `tasks/stream`, and the direct path for the task methods of both eras, before the SDK's handler. Imports no
 * adapter: node.ts (node:http, Express, Fastify) and any fetch runtime wrap it.
 */
import { createMcpHandler } from '@modelcontextprotocol/server';
import { ErrorCode } from '../../protocol/index.js';
import type { Outlast } from '../outlast.js';
import { createDirectTaskPath, type DirectRequest } from '../direct/direct.js';
import { createDirectToolCall } from '../direct/direct-call.js';
import type { TaskRecord } from '../../store/types.js';
import { createEventsWire } from '../events/index.js';
import { jsonRpcError } from './answers.js';
import { Reply, fromWeb, toResponse, type Answer, type FrontRequest } from './exchange.js';
import { createFrontAuth } from './auth.js';
import { pathnameOf } from './body.js';
import type { ListenStream } from './listen.js';
import { taskListenRoute } from './listen.js';
import { taskStreamRoute } from './task-stream.js';
import { StreamSlots } from './stream-slots.js';
import type { MessageRoute, Route } from './route.js';
import { healthRoute } from './routes/health.js';
import { createMounts } from './routes/mounts.js';
import { oauthMetadataRoute } from './routes/oauth-metadata.js';
import { answerPagesRoute } from './routes/answer-pages.js';
import { mcpEndpointRoute } from './routes/mcp.js';
import { postedAnswersRoute } from './messages/posted-answers.js';
import { pollLimitRoute } from './messages/poll-limit.js';
import { capacityRoute } from './messages/capacity.js';
import { updateShapeRoute } from './messages/update-shape.js';
import { eventsRoute } from './messages/events.js';
import { DEFAULT_MAX_BODY_BYTES, type Front, type FrontExtra, type OutlastHandlerOptions, type ServerFactory } from './types.js';

export { DEFAULT_MAX_BODY_BYTES, type Front, type FrontExtra, type NodeMount, type OutlastHandlerOptions, type ServerFactory } from './types.js';

/** What the direct path reads of a request: its headers, whether its client left before the answer (node:http tells
 *  that without a web request), and how to mark an answer that streams. */
function directRequest(request: FrontRequest, streaming: (r: Response) => Response): DirectRequest {
  return {
    headers: request.headers,
    onLeave: (left) => (request.ended ? request.ended(left) : request.web().signal.addEventListener('abort', left, { once: true })),
    streaming,
  };
}

export function createFront(outlast: Outlast, factory: ServerFactory, options: OutlastHandlerOptions = {}): Front {
  const path = options.path ?? '/mcp';
  const maxBody = options.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES;
  const keepAliveMs = options.keepAliveMs ?? 15_000;
  const onerror = options.onerror ?? (() => undefined);
  const auth = createFrontAuth(outlast, options);
  const mounts = createMounts(outlast, options);
  const sdk = createMcpHandler(async (ctx) => outlast.attachForFront(await factory(ctx), ctx.era), { onerror, maxRequestBodySize: maxBody, keepAliveMs });
  outlast.servedBy({ notify: () => sdk.notify });
  const streams = new Set<ListenStream>();
  const streamHost = { runtime: outlast.runtime, bus: sdk.bus, keepAliveMs, streams };
  const toolCall = options.serverInfo && options.directTaskMethods !== false ? createDirectToolCall(outlast, options.serverInfo, { onerror, keepAliveMs }) : undefined;
  const direct = options.serverInfo && options.directTaskMethods !== false
    ? createDirectTaskPath(outlast.runtime, { serverInfo: options.serverInfo, onerror, legacy: outlast.legacy.methods, toolCall })
    : undefined;
  const events = options.events
    ? createEventsWire({ ...(outlast.answers ? { answerLinkOf: (t: TaskRecord, key: string) => outlast.answerLinks(t).find((l) => l.key === key)?.url } : {}), log: outlast.runtime.log, ...options.events, store: outlast.runtime.store, bus: outlast.runtime.bus, recheckMs: outlast.runtime.watchRecheckMs })
    : undefined;
  if (events) outlast.eventsOn = true;
  outlast.taskStreamOn = true;
  const answerPages = answerPagesRoute(outlast, options, auth);

  // The MCP endpoint's message routes, in order; the SDK's handler answers whatever none of them does.
  const messages: MessageRoute[] = [
    postedAnswersRoute(outlast),
    pollLimitRoute(outlast.runtime),
    capacityRoute(outlast),
    updateShapeRoute,
    ...(events ? [eventsRoute(events)] : []),
    taskListenRoute(streamHost),
    taskStreamRoute(streamHost),
    ...(direct ? [({ request, parsed, who, auth, streaming }) => direct.serve(directRequest(request, streaming), parsed, who, auth)] satisfies MessageRoute[] : []),
  ];
  const routes: Route[] = [
    // Liveness and readiness come before everything else: a balancer asks them without credentials.
    healthRoute(outlast),
    mounts.route,
    ...(auth.oauth ? [oauthMetadataRoute(auth.oauth)] : []),
    ...(answerPages ? [answerPages] : []),
    mcpEndpointRoute(outlast, { path, maxBody, auth, sdk, messages, tracePolls: options.tracePolls, streams: new StreamSlots(options.maxStreamsPerPrincipal) }),
  ];
  const notFound = new Reply(404, { 'content-type': 'text/plain' }, `Not found: the MCP endpoint is ${path}\n`);

  async function route(request: FrontRequest, extra: FrontExtra | undefined): Promise<Answer> {
    const pathname = pathnameOf(request.url);
    for (const route of routes) {
      const served = route.serve(request, extra, pathname);
      // Most routes pass synchronously: no await (and no microtask) for those.
      const r = served instanceof Promise ? await served : served;
      if (r) return r;
    }
    return notFound;
  }

  async function serve(request: FrontRequest, extra: FrontExtra | undefined): Promise<Answer> {
    try {
      return await route(request, extra);
    } catch (e) {
      onerror(e as Error);
      return jsonRpcError(500, null, ErrorCode.InternalError, 'Internal error');
    }
  }

  return {
    bodyCap: maxBody + 1,
    sdk,
    ready: async () => void (await Promise.all([auth.ready, answerPages?.ready()])),
    mount: (request) => mounts.mountOf(request, pathnameOf(request.url)),
    serve,
    fetch: async (request, extra) => toResponse(await serve(fromWeb(request), extra)),
    /** Ends listen streams and the dashboard's, closes the SDK handler (the runtime is stopped separately: outlast.stop). */
    async close() {
      for (const s of [...streams]) s.end();
      mounts.close();
      await toolCall?.close();
      await sdk.close();
    },
  };
}
