/**
 * SERVER spans on a stdio connection, the same as the HTTP front's (request-spans.ts): a transport that wraps the
 * real one, starts a request's span as it comes in, and ends it with the answer it sends back. The span reaches the
 * request's handling in the request's own `_meta` (its `traceparent` becomes the span's), not in the async context:
 * the SDK's stdio entry answers messages from one queue, in whichever context its pump started, so a request can be
 * handled in another request's context. Outlast reads a caller's context from `_meta`, so the handler's span and the
 * task it creates hang under the request's span.
 */
import type { Span, Context } from '@opentelemetry/api';
import type { Transport } from '@modelcontextprotocol/server';
import { w3cCarrier } from '../../protocol/trace-context.js';
import { endRequestSpan, startRequestSpan, type Answer } from '../telemetry/request-spans.js';
import { WrappedTransport, type Message, type OnMessage } from './wrapped-transport.js';

export class TracedTransport extends WrappedTransport {
  /** Spans of requests not answered yet, by JSON-RPC id. */
  private readonly open = new Map<string | number, Span>();

  constructor(
    inner: Transport,
    private readonly options: { polls?: boolean } = {},
  ) {
    super(inner);
  }

  override async send(message: Message, options?: Parameters<Transport['send']>[1]): Promise<void> {
    const m = message as { id?: string | number; method?: unknown };
    if (m.method === undefined && m.id !== undefined) {
      const span = this.open.get(m.id);
      if (span) {
        this.open.delete(m.id);
        endRequestSpan(span, message as Answer);
      }
    }
    return this.inner.send(message, options);
  }

  protected receive(message: Message, extra: Parameters<OnMessage>[1]): void {
    const started = startRequestSpan(message, { polls: this.options.polls, network: 'pipe' });
    if (!started) return this.deliver(message, extra);
    const id = (message as { id: string | number }).id;
    if (started.span.isRecording()) {
      this.open.get(id)?.end(); // a reused id: the earlier request is not answered any more
      this.open.set(id, started.span);
    }
    this.deliver(carrying(message, started.context), extra);
  }

  /** The connection ended: requests it never answered end their spans as they are. */
  protected override ended(): void {
    for (const span of this.open.values()) span.end();
    this.open.clear();
  }
}

/** `message` with its `_meta.traceparent`/`tracestate` naming `ctx`'s span (as is when there is none to name). */
function carrying(message: Message, ctx: Context): Message {
  const carrier = w3cCarrier(ctx);
  const m = message as { params?: unknown };
  if (!carrier || (m.params !== undefined && (m.params === null || typeof m.params !== 'object' || Array.isArray(m.params)))) return message;
  const params = (m.params ?? {}) as { _meta?: unknown };
  // A malformed _meta is left for the SDK to refuse as it would.
  if (params._meta !== undefined && (params._meta === null || typeof params._meta !== 'object' || Array.isArray(params._meta))) return message;
  const { tracestate: _old, ...rest } = (params._meta ?? {}) as Record<string, unknown>;
  return { ...message, params: { ...params, _meta: { ...rest, ...carrier } } } as Message;
}
