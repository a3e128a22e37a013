/**
 * The shape of the front's routes (hono's `app.route`): the front is a list of routes tried in order, and the MCP
 * endpoint a list of message routes, so a new route is a new file and the hot path reads top to bottom in handler.ts.
 * Routes read the neutral request and answer plain replies or web responses (exchange.ts).
 */
import type { AuthInfo } from '@modelcontextprotocol/server';
import type { Answer, FrontRequest } from './exchange.js';
import type { FrontExtra } from './types.js';

/** One route of the front: its answer to a request, or undefined to let the next route try. */
export interface Route {
  serve(request: FrontRequest, extra: FrontExtra | undefined, pathname: string): Promise<Answer | undefined> | Answer | undefined;
}

export type RpcMessage = { id?: unknown; method?: unknown; params?: Record<string, unknown> } | null;

/** A JSON-RPC message on the MCP endpoint, past the checks every request gets (host, credentials, body limit). */
export interface RpcCall {
  request: FrontRequest;
  /** The parsed body as a message (a batch or a scalar is still here, for the SDK to refuse). */
  msg: RpcMessage;
  parsed: unknown;
  /** The principal the caller's credentials name. */
  who: string;
  auth: AuthInfo | undefined;
  /** Marks an answer whose body may still be streaming (request metrics time it to its end). */
  streaming(response: Response): Response;
}

/** One step of the MCP endpoint: an answer, or undefined to pass the message on. */
export type MessageRoute = (call: RpcCall) => Promise<Answer | undefined> | Answer | undefined;

/** The message as an object with a method (not a response, a batch or a scalar). */
export function isRequestObject(msg: RpcMessage): msg is { id?: unknown; method?: unknown; params?: Record<string, unknown> } {
  return msg !== null && typeof msg === 'object' && !Array.isArray(msg);
}
