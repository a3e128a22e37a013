/**
 * The client's side of traces (MCP semantic conventions, ../shared/ops.md §2): a CLIENT span `{mcp.method.name}
 * {target}` for each request the dispatcher sends, whose context goes out in `_meta.traceparent`/`tracestate`
 * (and `baggage`; SEP-414) so the server's span, and the task it creates, hang under it. `tasks/get` polls and
 * listen streams get no span of their own (as on the server, a span per poll says little) but still carry the
 * caller's context. Everything
 * goes through @opentelemetry/api: with no SDK registered nothing is recorded and nothing is added to `_meta`.
 * Arguments and results are never recorded.
 */
import { SpanKind, SpanStatusCode, context, trace, type Attributes, type Context, type Span } from '@opentelemetry/api';
import type { JsonObject } from '../protocol/index.js';
import { w3cCarrier } from '../protocol/trace-context.js';
import { RpcError } from './errors.js';

const tracer = trace.getTracer('outlast-client');

/** Longest name put on a span (tool names come from the application, but may be anything). */
const MAX_TEXT = 200;
const clip = (s: string) => (s.length > MAX_TEXT ? `${s.slice(0, MAX_TEXT)}…` : s);

/** Methods sent many times per logical call: they carry the caller's context but get no span. */
const UNSPANNED = new Set(['tasks/get', 'subscriptions/listen']);

/** One request's span, or none; `meta` is what to add to the request's `_meta`. */
export interface ClientRequestSpan {
  readonly meta: JsonObject | undefined;
  /** Records the request id and protocol version of an attempt (a -32022 retry is a second attempt). */
  attempt(id: number, version: string): void;
  ok(result: JsonObject): void;
  failed(error: unknown): void;
}

const NONE: ClientRequestSpan = { meta: undefined, attempt() {}, ok() {}, failed() {} };

/**
 * Starts the span of `method` (under the active context) and returns it with the trace context to send. A caller
 * that put its own `traceparent` in the request's `_meta` keeps it (and gets no span: it owns the trace).
 */
export function startClientRequestSpan(method: string, params: JsonObject, url: URL | undefined, callerMeta: JsonObject | undefined): ClientRequestSpan {
  if (callerMeta && typeof callerMeta.traceparent === 'string') return NONE;
  const active = context.active();
  if (UNSPANNED.has(method)) {
    const meta = carrier(active);
    return meta ? { ...NONE, meta } : NONE;
  }
  // No URL: a server spoken to over its stdin and stdout (a pipe, no address).
  const attributes: Attributes = { 'mcp.method.name': method, 'network.transport': url ? 'tcp' : 'pipe' };
  if (url) attributes['server.address'] = url.hostname;
  if (url?.port) attributes['server.port'] = Number(url.port);
  let target: string | undefined;
  if (method === 'tools/call' && typeof params.name === 'string') {
    target = clip(params.name);
    attributes['gen_ai.tool.name'] = target;
    attributes['gen_ai.operation.name'] = 'execute_tool';
  } else if (method === 'prompts/get' && typeof params.name === 'string') {
    target = clip(params.name);
    attributes['gen_ai.prompt.name'] = target;
  }
  if (method.startsWith('tasks/') && typeof params.taskId === 'string') attributes['outlast.task.id'] = clip(params.taskId);
  const span = tracer.startSpan(target ? `${method} ${target}` : method, { kind: SpanKind.CLIENT, attributes }, active);
  if (!span.isRecording()) {
    // A sampler said no, or no SDK: the span still has a context worth sending when a parent was sampled elsewhere.
    const meta = carrier(trace.setSpan(active, span));
    span.end();
    return meta ? { ...NONE, meta } : NONE;
  }
  return recording(span, carrier(trace.setSpan(active, span)));
}

function recording(span: Span, meta: JsonObject | undefined): ClientRequestSpan {
  return {
    meta,
    attempt(id, version) {
      span.setAttribute('jsonrpc.request.id', String(id));
      span.setAttribute('mcp.protocol.version', version);
    },
    ok(result) {
      if (typeof result.taskId === 'string') span.setAttribute('outlast.task.id', clip(result.taskId));
      if (result.isError === true) {
        span.setAttribute('error.type', 'tool_error');
        span.setStatus({ code: SpanStatusCode.ERROR });
      }
      span.end();
    },
    failed(error) {
      const type = error instanceof RpcError ? String(error.code) : error instanceof Error ? error.name : 'unknown';
      if (error instanceof RpcError) span.setAttribute('rpc.response.status_code', String(error.code));
      span.setAttribute('error.type', type);
      span.setStatus({ code: SpanStatusCode.ERROR, message: error instanceof Error ? clip(error.message) : undefined });
      span.end();
    },
  };
}

/** The trace context to send for `ctx` (baggage included), or undefined. */
function carrier(ctx: Context): JsonObject | undefined {
  return w3cCarrier(ctx, { baggage: true }) as JsonObject | undefined;
}
