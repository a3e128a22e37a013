/**
 * W3C Trace Context as it travels in a request's `_meta` (SEP-414): what the application's propagator writes for a
 * context. Shared by the client (which sends it) and the runtime (which keeps it with a task).
 */
import { isSpanContextValid, propagation, trace, type Context } from '@opentelemetry/api';

export interface W3cCarrier {
  traceparent: string;
  tracestate?: string;
  baggage?: string;
}

/**
 * The W3C carrier of `ctx`'s span, or undefined (no valid span, or no propagator registered). `tracestate` is left
 * out when empty or longer than `maxTracestate`; `baggage` only when asked for (it belongs to the request).
 */
export function w3cCarrier(ctx: Context | undefined, opts: { baggage?: boolean; maxTracestate?: number } = {}): W3cCarrier | undefined {
  const sc = ctx && trace.getSpanContext(ctx);
  if (!sc || !isSpanContextValid(sc)) return undefined;
  const out: Record<string, string> = {};
  propagation.inject(ctx, out);
  if (typeof out.traceparent !== 'string') return undefined;
  const carrier: W3cCarrier = { traceparent: out.traceparent };
  if (typeof out.tracestate === 'string' && out.tracestate && out.tracestate.length <= (opts.maxTracestate ?? Infinity)) carrier.tracestate = out.tracestate;
  if (opts.baggage && typeof out.baggage === 'string' && out.baggage) carrier.baggage = out.baggage;
  return carrier;
}
