/**
 * Prompts and resources pass through plainly: each request is forwarded to the upstream on the control connection
 * and its answer returned as it is (no task, no question relay: they are quick reads). Registered on every request's
 * McpServer only when the upstream has them.
 */
import { McpServer } from '@modelcontextprotocol/server';
import type { JsonObject } from '../protocol/index.js';
import { ANY_RESULT, asGatewayResult, type UpstreamConnection } from './upstream.js';


const METHODS = {
  prompts: ['prompts/list', 'prompts/get'],
  resources: ['resources/list', 'resources/templates/list', 'resources/read'],
} as const;

export interface UpstreamSurface {
  /** The upstream's capabilities (from its initialize), or undefined before it was reached. */
  capabilities(): Record<string, unknown> | undefined;
  control(): Promise<UpstreamConnection>;
}

export function passThrough(mcp: McpServer, upstream: UpstreamSurface): void {
  const caps = upstream.capabilities();
  if (!caps) return;
  for (const kind of ['prompts', 'resources'] as const) {
    if (!caps[kind]) continue;
    mcp.server.registerCapabilities({ [kind]: { listChanged: true } });
    for (const method of METHODS[kind]) {
      mcp.server.setRequestHandler(method as 'prompts/list', (async (req: { params?: Record<string, unknown> }) => {
        const conn = await upstream.control();
        const { _meta: _m, ...params } = req.params ?? {};
        return asGatewayResult((await conn.client.request({ method, params } as never, ANY_RESULT)) as JsonObject);
      }) as never);
    }
  }
}
