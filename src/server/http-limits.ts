/**
 * The node:http server's own limits, set rather than left at Node's defaults (headers 60 s, a whole request 300 s, no
 * connection cap), so a slow or silent client cannot hold a socket for minutes. `requestTimeout` covers receiving the
 * request only (Node stops its clock once the request is read), so a long answer (a listen stream, `events/stream`,
 * `tasks/stream`, a held `tools/call`) is never cut by it.
 */
import { createServer, type IncomingMessage, type RequestListener, type Server, type ServerResponse } from 'node:http';

export interface HttpLimits {
  /** A request's headers must arrive within this, ms (Node answers 408 and closes the socket). Default 15 000. */
  headersTimeoutMs?: number;
  /** A request (headers and body) must arrive within this, ms; at least `headersTimeoutMs`. Default 30 000. */
  requestTimeoutMs?: number;
  /** An idle kept-alive connection is closed after this, ms. Default 65 000: longer than the idle timeout of the
   *  clients and balancers in front (fetch keeps a socket for the server's advertised timeout less 1 s, on timers of
   *  about a second; with Node's 5 s, a client polling every few seconds on a busy machine sent requests on sockets
   *  the server had just closed). */
  keepAliveTimeoutMs?: number;
  /** Open connections past which a new one is closed at once. Default 10 000. */
  maxConnections?: number;
}

export const DEFAULT_HTTP_LIMITS: Required<HttpLimits> = { headersTimeoutMs: 15_000, requestTimeoutMs: 30_000, keepAliveTimeoutMs: 65_000, maxConnections: 10_000 };

/** The limits with their defaults, checked (a RangeError says which is wrong). */
export function resolveHttpLimits(limits: HttpLimits = {}): Required<HttpLimits> {
  const r = { ...DEFAULT_HTTP_LIMITS, ...Object.fromEntries(Object.entries(limits).filter(([, v]) => v !== undefined)) } as Required<HttpLimits>;
  for (const [name, v] of Object.entries(r)) {
    if (!Number.isInteger(v) || v < 1) throw new RangeError(`${name} must be an integer >= 1, got ${String(v)}`);
  }
  if (r.headersTimeoutMs > r.requestTimeoutMs) {
    throw new RangeError(`headersTimeoutMs (${r.headersTimeoutMs}) must not exceed requestTimeoutMs (${r.requestTimeoutMs}): the headers are part of the request`);
  }
  return r;
}

/** A node:http server with these limits. Node checks the two timeouts every `connectionsCheckingInterval` (30 s by
 *  default, which would let a slow client stay that much longer): a third of the header timeout here, 5 s at most. */
export function createLimitedServer(limits: HttpLimits, listener: RequestListener<typeof IncomingMessage, typeof ServerResponse>): Server {
  const l = resolveHttpLimits(limits);
  const server = createServer(
    {
      headersTimeout: l.headersTimeoutMs,
      requestTimeout: l.requestTimeoutMs,
      keepAliveTimeout: l.keepAliveTimeoutMs,
      connectionsCheckingInterval: Math.max(100, Math.min(5_000, Math.floor(l.headersTimeoutMs / 3))),
    },
    listener,
  );
  server.maxConnections = l.maxConnections;
  return server;
}
