/**
 * `outlast gateway`: an Outlast whose tools are an upstream MCP server's tools. Each call of one runs through the
 * runtime (inline within the budget, a durable task beyond it) on a connection leased from a bounded pool of
 * upstream connections (one call per connection at a time); the upstream's progress, questions and log messages
 * during the call belong to it. Prompts and resources pass through. See docs/gateway.md.
 */
import { McpServer, type Implementation } from '@modelcontextprotocol/server';
import type { Outlast } from '../outlast.js';
import type { ServerFactory } from '../front/index.js';
import type { Logger } from '../../runtime/types.js';
import { UpstreamPool } from './pool.js';
import { UpstreamConnection, describeUpstream, type UpstreamEvents, type UpstreamSpec } from './upstream.js';
import { ToolMirror } from './mirror.js';
import { passThrough } from './passthrough.js';

export { describeUpstream, type UpstreamSpec } from './upstream.js';

export interface GatewayOptions {
  upstream: UpstreamSpec;
  /** Connections to the upstream per replica, each serving one call at a time (default 4). */
  poolSize?: number;
  /** An upstream call not answered within this many ms fails saying so (default: no deadline but the task's TTL). */
  callTimeoutMs?: number;
  /** How long starting a connection (process start and initialize) may take (default 30000). */
  connectTimeoutMs?: number;
  /** Upstream tools safe to re-run after a lost replica whatever their annotations say. */
  retrySafeTools?: string[];
  log: Logger;
}

export interface MountedGateway {
  factory: ServerFactory;
  info: Implementation;
  /** Ends every upstream connection (their processes). */
  close(): Promise<void>;
}

/** Connects to the upstream, mirrors its tools into `outlast` (before it starts: a replica taking over tasks knows
 *  them), and returns the per-request factory. An upstream that cannot be reached is logged, not fatal: the gateway
 *  serves, answering tools/list with the reason, and tries again when asked. */
export async function mountGateway(outlast: Outlast, o: GatewayOptions): Promise<MountedGateway> {
  const { upstream, log } = o;
  const connectTimeoutMs = o.connectTimeoutMs ?? 30_000;
  let mirror: ToolMirror | undefined;
  const events: UpstreamEvents = {
    toolsChanged: () => void mirror?.refresh(),
    promptsChanged: () => outlast.notifier()?.promptsChanged(),
    resourcesChanged: () => outlast.notifier()?.resourcesChanged(),
    log,
  };
  const pool = new UpstreamPool(upstream, o.poolSize ?? 4, events, connectTimeoutMs);
  let control: Promise<UpstreamConnection> | undefined;
  let capabilities: Record<string, unknown> | undefined;
  let closed = false;
  const controlConnection = (): Promise<UpstreamConnection> => {
    if (closed) return Promise.reject(new Error('the gateway is shutting down'));
    const current = control;
    if (current) {
      // A broken control connection is replaced at the next use.
      return current.then((c) => (c.broken ? ((control = undefined), controlConnection()) : c), () => ((control = undefined), controlConnection()));
    }
    const opening = UpstreamConnection.open(upstream, events, connectTimeoutMs).then((c) => {
      capabilities = c.client.getServerCapabilities() as Record<string, unknown> | undefined;
      return c;
    });
    control = opening;
    opening.catch(() => {
      if (control === opening) control = undefined;
    });
    return opening;
  };
  mirror = new ToolMirror({ outlast, pool, control: controlConnection, retrySafeTools: new Set(o.retrySafeTools ?? []), callTimeoutMs: o.callTimeoutMs, log });
  await mirror.refresh();
  // One connection ready for the first call, when the upstream could be listed (else the first call says why).
  if (!(await mirror.unavailable())) await pool.warm();
  outlast.toolsUnavailable = () => mirror!.unavailable();
  const info: Implementation = { name: `outlast-gateway:${upstream.name}`, version: '1', description: `Outlast in front of ${describeUpstream(upstream)}` };
  const surface = { capabilities: () => capabilities, control: controlConnection };
  return {
    factory: () => {
      const mcp = new McpServer(info, { capabilities: { tools: { listChanged: true } } });
      passThrough(mcp, surface);
      return mcp;
    },
    info,
    async close() {
      closed = true;
      await pool.close();
      await control?.then((c) => c.close(), () => undefined);
    },
  };
}
