/**
 * `outlast gateway`: an Outlast whose tools are upstream MCP servers' tools. Each call of one runs through the
 * runtime (inline within the budget, a durable task beyond it) on a connection leased from a bounded pool of
 * upstream connections (one call per connection at a time); the upstream's progress, questions and log messages
 * during the call belong to it. Prompts and resources pass through. One upstream keeps its names; several are each
 * mounted (mount.ts) under the prefix `NAME__`. See docs/gateway.md.
 */
import { McpServer, type Implementation } from '@modelcontextprotocol/server';
import type { Outlast } from '../server/outlast.js';
import type { ServerFactory } from '../server/front/index.js';
import type { Logger } from '../runtime/types.js';
import { describeUpstream, type UpstreamSpec } from './upstream.js';
import { mountUpstream, type MountedUpstream } from './mount.js';
import { passThrough } from './passthrough.js';
import { MergedSurface } from './merged.js';
import { redactorOf, withUserinfoAsHeader } from './secrets.js';

export { describeUpstream, type UpstreamSpec } from './upstream.js';

/** Default connections per upstream and replica: a stdio connection is a process, an HTTP one only a session. */
const STDIO_POOL = 4;
const HTTP_POOL = 16;

export interface GatewayOptions {
  /** One upstream keeps its tools' names; several serve each tool as `NAME__tool` (NAME: the upstream's name). */
  upstreams: UpstreamSpec[];
  /** Connections to each upstream per replica, each serving one call at a time (default: 4 stdio processes, 16 HTTP
   *  sessions, since a session costs the upstream no process). */
  poolSize?: number;
  /** An upstream call not answered within this many ms fails saying so (default: no deadline but the task's TTL). */
  callTimeoutMs?: number;
  /** How long starting a connection (process start and initialize) may take (default 30000). */
  connectTimeoutMs?: number;
  /** Tools (as served: prefixed when several) safe to re-run after a lost replica whatever their annotations say. */
  retrySafeTools?: string[];
  log: Logger;
}

/** Why `name` cannot prefix an upstream's tools and prompts beside others, if it cannot: the first "__" of a served
 *  name must end the upstream's name, so a name holds no "__" and does not end in "_" (no two served names clash). */
export function upstreamNameProblem(name: string): string | undefined {
  if (name.includes('__') || name.endsWith('_')) return `upstream "${name}": a name may not contain "__" or end in "_" ("__" separates it from its tools' and prompts' names)`;
  return undefined;
}

export interface MountedGateway {
  factory: ServerFactory;
  info: Implementation;
  /** Ends every upstream connection (their processes). */
  close(): Promise<void>;
}

/** Connects to the upstreams, mirrors their tools into `outlast` (before it starts: a replica taking over tasks knows
 *  them), and returns the per-request factory. An upstream that cannot be reached is logged, not fatal: the gateway
 *  serves the others, answering a call of its tools (or tools/list, when none can be reached) with the reason, and
 *  tries again when asked. Two tools served under one name, or a prefixed name too long, refuse the start. */
export async function mountGateway(outlast: Outlast, o: GatewayOptions): Promise<MountedGateway> {
  const { log } = o;
  const upstreams = o.upstreams.map(withUserinfoAsHeader);
  const several = upstreams.length > 1;
  if (several) {
    const problems = upstreams.flatMap((u) => upstreamNameProblem(u.name) ?? []);
    if (problems.length) throw new Error(`the gateway does not start: ${problems.join('; ')}`);
  }
  const owners = new Map<string, string>();
  const retrySafeTools = new Set(o.retrySafeTools ?? []);
  const mounts: MountedUpstream[] = upstreams.map((spec) =>
    mountUpstream(outlast, spec, {
      poolSize: o.poolSize ?? (spec.kind === 'http' ? HTTP_POOL : STDIO_POOL),
      callTimeoutMs: o.callTimeoutMs,
      connectTimeoutMs: o.connectTimeoutMs ?? 30_000,
      retrySafeTools,
      owners,
      log,
      ...(several ? { prefix: spec.name } : {}),
    }),
  );
  const close = async () => void (await Promise.all(mounts.map((m) => m.close())));
  // In parallel: an upstream slow to start delays the others' by nothing.
  await Promise.all(mounts.map((m) => m.start()));
  const problems = mounts.flatMap((m) => m.mirror.nameProblems);
  if (problems.length) {
    await close();
    throw new Error(`the upstreams' tools cannot all be served under their names, so the gateway does not start: ${problems.join('; ')}`);
  }
  if (several) {
    outlast.toolsUnavailable = (tool) => unavailable(mounts, tool);
    const merged = new MergedSurface(mounts.map((m) => ({ name: m.spec.name, surface: m.surface, redact: redactorOf(m.spec) })), log);
    const info: Implementation = { name: 'outlast-gateway', version: '1', description: `Outlast in front of ${upstreams.map(describeUpstream).join(', ')}` };
    return { factory: () => serverOf(info, (mcp) => merged.attach(mcp)), info, close };
  }
  const only = mounts[0]!;
  outlast.toolsUnavailable = () => only.mirror.unavailable();
  const info: Implementation = { name: `outlast-gateway:${only.spec.name}`, version: '1', description: `Outlast in front of ${describeUpstream(only.spec)}` };
  return { factory: () => serverOf(info, (mcp) => passThrough(mcp, only.surface)), info, close };
}

function serverOf(info: Implementation, attach: (mcp: McpServer) => void): McpServer {
  const mcp = new McpServer(info, { capabilities: { tools: { listChanged: true } } });
  attach(mcp);
  return mcp;
}

/** Of several upstreams: a call of an unknown tool of NAME__ gets NAME's reason; tools/list fails only when no upstream
 *  can be listed (the others are tried again meanwhile, without holding up the list). */
async function unavailable(mounts: MountedUpstream[], tool: string | undefined): Promise<string | undefined> {
  if (tool !== undefined) {
    const owner = mounts.filter((m) => tool.startsWith(`${m.spec.name}__`)).sort((a, b) => b.spec.name.length - a.spec.name.length)[0];
    return owner?.mirror.unavailable();
  }
  const down = mounts.filter((m) => m.mirror.reason() !== undefined);
  if (down.length < mounts.length) {
    for (const m of down) void m.mirror.unavailable();
    return undefined;
  }
  const reasons = await Promise.all(mounts.map((m) => m.mirror.unavailable()));
  return reasons.every((r) => r !== undefined) ? reasons.join('; ') : undefined;
}
