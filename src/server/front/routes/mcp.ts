/**
 * The MCP endpoint: the checks every request gets (Host and Origin, credentials, the body limit), request metrics and
 * the server span, then the message routes in order; the first that answers wins, the SDK's handler last.
 */
import { context } from '@opentelemetry/api';
import type { McpHttpHandler } from '@modelcontextprotocol/server';
import type { Outlast } from '../../outlast.js';
import { urlModeSessionId } from '../../tasks-2025/url-elicitation.js';
import { PrincipalError, newSessionId, sessionIdOf } from '../../core/principals.js';
import { requestMetrics } from '../../telemetry/request-metrics.js';
import { requestSpans } from '../../telemetry/request-spans.js';
import type { FrontAuth } from '../auth.js';
import { parseBody } from '../body.js';
import { Reply, answerHeader, isAnswer, type Answer } from '../exchange.js';
import { jsonRpcError } from '../answers.js';
import { ErrorCode } from '../../../protocol/index.js';
import type { MessageRoute, Route, RpcCall, RpcMessage } from '../route.js';
import type { StreamSlots } from '../stream-slots.js';

export interface McpEndpointOptions {
  path: string;
  maxBody: number;
  auth: FrontAuth;
  sdk: McpHttpHandler;
  /** Tried in order before the SDK's handler. */
  messages: MessageRoute[];
  tracePolls: boolean | undefined;
  /** Per-principal bound on open streams (listen, tasks/stream, events/stream). */
  streams: StreamSlots;
}

export function mcpEndpointRoute(outlast: Outlast, o: McpEndpointOptions): Route {
  const { path, maxBody, auth, sdk, messages } = o;
  const observe = requestMetrics((name) => outlast.runtime.hasTool(name) || outlast.handles?.owns(name) === true);
  const traceRequest = requestSpans({ polls: o.tracePolls });
  /** Answers whose body may still be streaming (the SDK's, listen streams); the front's own are complete. */
  const streaming = new WeakSet<Response>();
  const markStreaming = (r: Response) => (streaming.add(r), r);
  let toldUnnamed = false;

  /** Credentials that name nobody (an app's AuthInfo without a subject): a JSON-RPC error that says what to set,
   *  never a principal guessed from the client id. */
  function unnamed(msg: RpcMessage, e: unknown): Answer {
    const message = e instanceof PrincipalError ? e.message : "The server could not name this request's principal (its principalOf threw; the server log says why)";
    if (!toldUnnamed) {
      toldUnnamed = true;
      // Said once, where it is seen whatever the app logs with (a library's default logger is silent).
      const told = `outlast: a request was refused: ${e instanceof Error ? e.message : String(e)}`;
      process.emitWarning(told, { code: 'OUTLAST_NO_PRINCIPAL' });
      outlast.runtime.log.error(told);
    }
    const id = msg && typeof msg === 'object' && !Array.isArray(msg) ? msg.id : undefined;
    return jsonRpcError(500, id, ErrorCode.InternalError, message);
  }

  async function answer(call: RpcCall): Promise<Answer> {
    for (const route of messages) {
      const answered = route(call);
      // Most message routes pass synchronously: no await (and no microtask) for those.
      const r = answered instanceof Promise ? await answered : answered;
      if (r) return r;
    }
    return markStreaming(await sdk.fetch(call.request.web(), { parsedBody: call.parsed, ...(call.auth ? { authInfo: call.auth } : {}) }));
  }

  return {
    async serve(request, extra, pathname) {
      if (pathname !== path) return undefined;
      const refused = auth.refusedHost(request);
      if (refused) return refused;
      // Both are at hand on the hot path (no OAuth, a body the adapter read): no await, and no microtask, for them.
      const authenticated = auth.authenticate(request, extra);
      const who = authenticated instanceof Promise ? await authenticated : authenticated;
      if (isAnswer(who)) return who;
      if (request.method !== 'POST') return sdk.fetch(request.web(), who ? { authInfo: who } : undefined);
      const read = parseBody(request, extra, maxBody);
      const body = read instanceof Promise ? await read : read;
      if (body instanceof Reply) return body;
      const msg = body.parsed as RpcMessage;
      const session = sessionIdOf(request.headers);
      let principal: string;
      try {
        principal = outlast.principalOfAuth(who, session);
      } catch (e) {
        return unnamed(msg, e);
      }
      const measured = observe(msg);
      const call: RpcCall = { request, msg, parsed: body.parsed, who: principal, auth: who, streaming: markStreaming };
      // A stream takes one of its principal's places first (or is refused), and holds it until its answer ends.
      const place = o.streams.take(call);
      if (place instanceof Reply) return measured ? measured(place, false) : place;
      // The request's server span (when it gets one) is the context it is answered in: a handler's span hangs under it.
      const traced = traceRequest(msg, request);
      let response: Answer;
      try {
        response = traced ? await context.with(traced.context, () => answer(call)) : await answer(call);
      } catch (e) {
        place?.();
        throw e;
      }
      if (place) response = o.streams.hold(call, response, place);
      // A 2025-11-25 client gets a session at initialize: without credentials its tasks are bound to it
      // (principals.ts); one that declared URL-mode elicitation carries that declaration in it on later requests.
      const newSession = sessionFor(msg, who === undefined);
      if (newSession && response.ok && answerHeader(response, 'mcp-session-id') === null) response = withHeader(response, 'mcp-session-id', newSession);
      const streams = response instanceof Reply ? false : streaming.has(response);
      if (traced) response = traced.answered(response);
      return measured ? measured(response, streams, request.ended?.bind(request)) : response;
    },
  };

  /** The Mcp-Session-Id to answer an `initialize` with, if any. */
  function sessionFor(msg: RpcMessage, anonymous: boolean): string | undefined {
    const urlSession = outlast.answers && outlast.handles ? urlModeSessionId(msg) : undefined;
    if (urlSession || !anonymous) return urlSession;
    return msg && typeof msg === 'object' && !Array.isArray(msg) && msg.method === 'initialize' ? newSessionId() : undefined;
  }

  /** The answer with one more header (a streaming one stays marked). */
  function withHeader(answer: Answer, name: string, value: string): Answer {
    if (answer instanceof Reply) return new Reply(answer.status, { ...answer.headers, [name]: value }, answer.body);
    const headers = new Headers(answer.headers);
    headers.set(name, value);
    const replaced = new Response(answer.body, { status: answer.status, statusText: answer.statusText, headers });
    if (streaming.has(answer)) streaming.add(replaced);
    return replaced;
  }
}
