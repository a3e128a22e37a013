/**
 * `outlastHandler`: the front (handler.ts, web-standard) with its node:http face (node.ts). `fetch` serves any
 * fetch runtime (Hono, Next.js route handlers, Bun, Deno, Workers); `node` serves node:http, Express and Fastify.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AuthInfo, McpHttpHandler } from '@modelcontextprotocol/server';
import type { Outlast } from '../outlast.js';
import { createFront } from './handler.js';
import type { OutlastHandlerOptions, ServerFactory } from './types.js';
import { nodeAdapter } from './node.js';

export { DEFAULT_MAX_BODY_BYTES, type OutlastHandlerOptions, type ServerFactory, type NodeMount } from './types.js';

export interface OutlastHandler {
  /** Serves one web-standard request. `authInfo`: who the caller is, when your app authenticated it. */
  fetch(request: Request, extra?: { authInfo?: AuthInfo }): Promise<Response>;
  /** Serves one node:http request; `parsedBody`: the body a framework already parsed (e.g. Express's `req.body`). */
  node(req: IncomingMessage, res: ServerResponse, parsedBody?: unknown): Promise<void>;
  /** Ends listen streams and closes the SDK's handler. The runtime is stopped by `outlast.stop(drainMs)`. */
  close(): Promise<void>;
  /** The SDK's handler behind the front (e.g. `notify` for list-changed notifications). */
  readonly sdk: McpHttpHandler;
  /** Resolves once the front can serve (the OAuth issuers' metadata discovered); rejects, saying why, when it cannot. */
  ready(): Promise<void>;
}

/** Outlast's HTTP front for your own stack. Does not start the runtime: `await outlast.start()` does. */
export function outlastHandler(outlast: Outlast, factory: ServerFactory, options: OutlastHandlerOptions = {}): OutlastHandler {
  const front = createFront(outlast, factory, options);
  const node = nodeAdapter(front);
  return {
    fetch: (request, extra) => front.fetch(request, extra?.authInfo !== undefined ? { authInfo: extra.authInfo } : undefined),
    node,
    close: () => front.close(),
    sdk: front.sdk,
    ready: () => front.ready(),
  };
}
