/**
 * Traces through @opentelemetry/api (a no-op until the application registers an SDK's tracer provider): an INTERNAL
 * span `execute_tool {tool}` for each handler attempt, with the task's state changes as its events, and the trace
 * context kept with the task, so a run started from the stored row (a queue claim, a re-run after a takeover on any
 * replica) is tied to the call that created it. Arguments and results are never recorded. Names follow
 * ../shared/ops.md §2 (GenAI/MCP semantic conventions; `outlast.*` for what they lack).
 */
import { ROOT_CONTEXT, SpanKind, SpanStatusCode, context, isSpanContextValid, propagation, trace, type Context, type Link, type Span } from '@opentelemetry/api';
import { w3cCarrier } from '../protocol/trace-context.js';
import type { TraceCarrier } from '../store/types.js';
import type { TaskCancelledError } from './context.js';
import { taskOutcome, type HandlerEnd } from './outcome.js';

const tracer = trace.getTracer('outlast');

/** The longest `tracestate` kept (W3C allows 32 members; more than this is not worth storing). */
const MAX_TRACESTATE = 512;

/** What the application's propagator writes for `ctx`'s span (W3C `traceparent`/`tracestate`), or null (no valid span,
 *  or no propagator registered). */
export function carrierOf(ctx: Context | undefined): TraceCarrier | null {
  return w3cCarrier(ctx, { maxTracestate: MAX_TRACESTATE }) ?? null;
}

/** The longest W3C `baggage` read from a request (the limit W3C sets for the header). */
const MAX_BAGGAGE = 8192;

/** The context a carrier names (W3C through the application's propagator, `baggage` included when the request has
 *  one: it lives with the request, and is never kept with the task), or undefined when it names no trace. */
export function contextOf(carrier: { traceparent?: unknown; tracestate?: unknown; baggage?: unknown } | null | undefined): Context | undefined {
  if (!carrier || typeof carrier.traceparent !== 'string') return undefined;
  const strings: Record<string, string> = { traceparent: carrier.traceparent };
  if (typeof carrier.tracestate === 'string') strings.tracestate = carrier.tracestate;
  if (typeof carrier.baggage === 'string' && carrier.baggage.length <= MAX_BAGGAGE) strings.baggage = carrier.baggage;
  const ctx = propagation.extract(ROOT_CONTEXT, strings);
  const sc = trace.getSpanContext(ctx);
  return sc && isSpanContextValid(sc) ? ctx : undefined;
}

/** Where an attempt's span hangs: under the request that runs it, or (started from the stored row) under or linked
 *  to the call that created the task. */
export type AttemptOrigin = { parent: Context | undefined } | { stored: TraceCarrier | null; attempt: number };

/** One handler attempt's span. */
export class AttemptSpan {
  private readonly span: Span;
  /** The context the handler runs in (its own spans are children of this one). */
  readonly context: Context;
  private ended = false;

  constructor(tool: string, attempt: number, taskId: string | undefined, origin: AttemptOrigin) {
    let parent: Context = ROOT_CONTEXT;
    let links: Link[] | undefined;
    if ('parent' in origin) parent = origin.parent ?? context.active();
    else {
      const stored = contextOf(origin.stored);
      // The first run of a queued task continues its creating call's trace; a re-run after a takeover is a trace of
      // its own, linked to it (the call ended long ago, maybe on a replica that is gone).
      if (stored && origin.attempt <= 1) parent = stored;
      else if (stored) links = [{ context: trace.getSpanContext(stored)!, attributes: { 'outlast.link': 'created_by' } }];
    }
    this.span = tracer.startSpan(`execute_tool ${tool}`, {
      kind: SpanKind.INTERNAL,
      attributes: {
        'gen_ai.operation.name': 'execute_tool',
        'gen_ai.tool.name': tool,
        'outlast.attempt': attempt,
        ...(taskId ? { 'outlast.task.id': taskId } : {}),
      },
      ...(links ? { links } : {}),
    }, parent);
    this.context = trace.setSpan(parent, this.span);
  }

  /** The call became a task (a row now exists). */
  persisted(taskId: string, status: string): void {
    if (this.ended) return;
    this.span.setAttribute('outlast.task.id', taskId);
    this.status(status);
  }

  /** A state change of the task while this attempt runs it. */
  status(status: string): void {
    if (!this.ended) this.span.addEvent('outlast.task.status', { 'outlast.task.status': status });
  }

  /** Another replica took the task over: this attempt stops without writing. */
  lost(): void {
    if (!this.ended) this.span.addEvent('outlast.task.taken_over');
  }

  /** The task was parked: this attempt ends here (the handler never settles); a claim resumes the task later. */
  parked(wakeAt: number | null): void {
    if (this.ended) return;
    this.ended = true;
    this.span.addEvent('outlast.task.parked', wakeAt !== null ? { 'outlast.wake_at': new Date(wakeAt).toISOString() } : {});
    this.span.end();
  }

  /** The handler ended; `task`: how it ended is the task's terminal state. */
  end(r: HandlerEnd, cancel: TaskCancelledError | undefined, task: boolean): void {
    if (this.ended) return;
    this.ended = true;
    if (!this.span.isRecording()) return this.span.end();
    let errorType: string | undefined;
    let message: string | undefined;
    if (cancel && cancel.reason !== 'cancelled') {
      // Stopped for a reason of the server's (shutdown, takeover, expiry, a caller gone before promotion): this attempt
      // wrote no outcome.
      errorType = cancel.reason;
      message = cancel.message;
    } else {
      const outcome = taskOutcome(r, cancel);
      if (task) this.span.addEvent('outlast.task.status', { 'outlast.task.status': outcome.status });
      if (outcome.status === 'failed') [errorType, message] = [String(outcome.error.code), outcome.error.message];
      else if (outcome.status === 'completed' && outcome.result.isError === true) errorType = 'tool_error';
    }
    if (errorType) {
      this.span.setAttribute('error.type', errorType);
      this.span.setStatus({ code: SpanStatusCode.ERROR, ...(message ? { message } : {}) });
    }
    this.span.end();
  }
}
