/** The front's own answers: JSON-RPC errors with an HTTP status, as plain replies (exchange.ts). */
import { jsonReply, type Reply } from './exchange.js';

export function jsonRpcError(status: number, id: unknown, code: number, message: string, data?: unknown, headers?: Record<string, string>): Reply {
  // MCP's schema has no null id: an error whose request id is unknown (unparsed body) carries none.
  const error = data === undefined ? { code, message } : { code, message, data };
  return jsonReply(status, id === undefined || id === null ? { jsonrpc: '2.0', error } : { jsonrpc: '2.0', id, error }, headers);
}

/** Retry-After in whole seconds (at least 1) for a wait in ms. */
export function retryAfter(waitMs: number): Record<string, string> {
  return { 'retry-after': String(Math.max(1, Math.ceil(waitMs / 1000))) };
}
