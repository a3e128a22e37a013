/**
 * A SERVER span for each MCP request the HTTP front answers (MCP semantic conventions, ../shared/ops.md §2), on the
 * direct path and the SDK path alike: named `{mcp.method.name} {target}`, parented from the request's
 * `_meta.traceparent`/`tracestate` (SEP-414, read by the application's propagator) or else from the ambient context
 * (an HTTP server span of the application's own instrumentation, then linked). `error.type` is the answer's JSON-RPC
 * error code, or `tool_error` for a tool result with `isError`, read from the response as it is written and only
 * while the span records. `tasks/get` gets no span unless `polls` is on: polling is the hot path, and a span per poll
 * says little. Nothing of the arguments or results is recorded. stdio-spans.ts puts the same spans on a stdio
 * connection.
 */
import { SpanKind, SpanStatusCode, context, isSpanContextValid, trace, type Attributes, type Context, type Span } from '@opentelemetry/api';
import { PROTOCOL_VERSION_META } from '../../protocol/index.js';
import { contextOf } from '../../runtime/tracing.js';
import { whenAnswered } from './response-end.js';
import { answerHeader, type Answer as FrontAnswer } from '../front/exchange.js';

const tracer = trace.getTracer('outlast');

/** Response bytes read for the error code; a longer answer is judged by its HTTP status only. */
const READ_LIMIT = 64 * 1024;

/** Longest name or id put on a span (they come from the caller). */
const MAX_TEXT = 200;
const clip = (s: string) => (s.length > MAX_TEXT ? `${s.slice(0, MAX_TEXT)}…` : s);

/** Starts the request's span (when it is a request worth one): the context to answer it in, and what ends the span
 *  with the answer (the response to send in its place). */
export type RequestSpans = (msg: unknown, request: { headers: { get(name: string): string | null } }) => { context: Context; answered(response: FrontAnswer): FrontAnswer } | undefined;

interface RpcRequest {
  id?: unknown;
  method?: unknown;
  params?: { name?: unknown; taskId?: unknown; _meta?: Record<string, unknown> } | null;
}

/** The context a request's dispatch runs in: its server span when one is active (the front made it), else the
 *  caller's `_meta` context (stdio has no front), else undefined. */
export function requestTraceContext(meta: Record<string, unknown> | undefined): Context | undefined {
  const active = context.active();
  return trace.getSpan(active) ? active : contextOf(meta);
}

export function requestSpans(options: { polls?: boolean } = {}): RequestSpans {
  return (msg, request) => {
    const started = startRequestSpan(msg, { polls: options.polls, version: request.headers.get('mcp-protocol-version') ?? undefined, network: 'tcp' });
    if (!started) return undefined;
    const { span } = started;
    const id = (msg as RpcRequest).id;
    return {
      context: started.context,
      answered: (response) =>
        span.isRecording()
          ? whenAnswered(response, READ_LIMIT, (text) => endRequestSpan(span, text === undefined ? undefined : answerIn(text, answerHeader(response, 'content-type') ?? '', id), response.status))
          : (span.end(), response),
    };
  };
}

/**
 * Starts the SERVER span of a JSON-RPC request (none for a notification, a response, or a poll unless `polls`), under
 * the caller's `_meta` context, else the ambient one. Returns it with the context to answer the request in.
 */
export function startRequestSpan(msg: unknown, how: { polls?: boolean; version?: unknown; network: 'tcp' | 'pipe' }): { span: Span; context: Context } | undefined {
  const m = msg as RpcRequest | null;
  if (!m || typeof m !== 'object' || typeof m.method !== 'string' || m.id === undefined || m.id === null) return undefined;
  if (m.method === 'tasks/get' && !how.polls) return undefined;
  const params = m.params && typeof m.params === 'object' ? m.params : undefined;
  const meta = params?._meta && typeof params._meta === 'object' ? params._meta : undefined;
  const attrs: Attributes = { 'mcp.method.name': m.method, 'jsonrpc.request.id': clip(String(m.id)), 'network.transport': how.network };
  let target: string | undefined;
  if (m.method === 'tools/call' && typeof params?.name === 'string') {
    target = clip(params.name);
    attrs['gen_ai.tool.name'] = target;
    attrs['gen_ai.operation.name'] = 'execute_tool';
  } else if (m.method === 'prompts/get' && typeof params?.name === 'string') {
    target = clip(params.name);
    attrs['gen_ai.prompt.name'] = target;
  }
  if (m.method.startsWith('tasks/') && typeof params?.taskId === 'string') attrs['outlast.task.id'] = clip(params.taskId);
  const version = how.version ?? meta?.[PROTOCOL_VERSION_META];
  if (typeof version === 'string') attrs['mcp.protocol.version'] = clip(version);

  const ambient = context.active();
  const caller = contextOf(meta);
  const ambientSpan = trace.getSpanContext(ambient);
  const link = caller && ambientSpan && isSpanContextValid(ambientSpan) ? [{ context: ambientSpan }] : undefined;
  const span = tracer.startSpan(target ? `${m.method} ${target}` : m.method, { kind: SpanKind.SERVER, attributes: attrs, ...(link ? { links: link } : {}) }, caller ?? ambient);
  return { span, context: trace.setSpan(caller ?? ambient, span) };
}

/** Sets what the answer to the span's request says (an error code, a tool error, the task it created) and ends it;
 *  without an answer, an HTTP status of 400 or more is the error. */
export function endRequestSpan(span: Span, answer: Answer | undefined, httpStatus?: number): void {
  const code = answer?.error && typeof answer.error.code === 'number' ? String(answer.error.code) : undefined;
  const errorType = code ?? (answer?.result?.isError === true ? 'tool_error' : !answer && httpStatus !== undefined && httpStatus >= 400 ? String(httpStatus) : undefined);
  const taskId = answer?.result?.taskId ?? answer?.result?.task?.taskId;
  if (typeof taskId === 'string') span.setAttribute('outlast.task.id', clip(taskId));
  if (code) span.setAttribute('rpc.response.status_code', code);
  if (errorType) {
    span.setAttribute('error.type', errorType);
    span.setStatus({ code: SpanStatusCode.ERROR });
  }
  span.end();
}

/** A JSON-RPC response, as far as a span reads it. */
export interface Answer {
  id?: unknown;
  error?: { code?: unknown };
  result?: { isError?: unknown; taskId?: unknown; task?: { taskId?: unknown } };
}

/** The JSON-RPC response to request `id` in a JSON body or an SSE stream, or undefined. */
function answerIn(text: string, type: string, id: unknown): Answer | undefined {
  const parse = (s: string): Answer | undefined => {
    try {
      const v = JSON.parse(s) as unknown;
      return v && typeof v === 'object' && !Array.isArray(v) ? (v as Answer) : undefined;
    } catch {
      return undefined;
    }
  };
  if (!type.includes('text/event-stream')) return parse(text);
  const lines = text.split('\n');
  for (let i = lines.length - 1; i >= 0; i--) {
    if (!lines[i]!.startsWith('data:')) continue;
    const a = parse(lines[i]!.slice(5));
    if (a && a.id === id && ('result' in a || 'error' in a)) return a;
  }
  return undefined;
}
