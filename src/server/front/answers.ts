/** The front's own answers: JSON-RPC errors with an HTTP status, as web-standard responses. */

export function jsonRpcError(status: number, id: unknown, code: number, message: string, data?: unknown, headers: Record<string, string> = {}): Response {
  // MCP's schema has no null id: an error whose request id is unknown (unparsed body) carries none.
  const error = data === undefined ? { code, message } : { code, message, data };
  const body = JSON.stringify(id === undefined || id === null ? { jsonrpc: '2.0', error } : { jsonrpc: '2.0', id, error });
  return new Response(body, { status, headers: { 'content-type': 'application/json', ...headers } });
}

/** Retry-After in whole seconds (at least 1) for a wait in ms. */
export function retryAfter(waitMs: number): Record<string, string> {
  return { 'retry-after': String(Math.max(1, Math.ceil(waitMs / 1000))) };
}
