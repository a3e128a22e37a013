/**
 * One upstream mounted into an Outlast: its pool of call connections, its control connection (listing, prompts,
 * resources), and its tool mirror refreshed on its list_changed. A gateway is one of these per upstream (index.ts).
 */
import type { Outlast } from '../server/outlast.js';
import type { Logger } from '../runtime/types.js';
import { UpstreamPool } from './pool.js';
import type { UpstreamConnection, UpstreamEvents, UpstreamSpec } from './upstream.js';
import { ToolMirror } from './mirror.js';
import { redactingLogger, redactorOf } from './secrets.js';
import type { UpstreamSurface } from './passthrough.js';

export interface MountOptions {
  poolSize: number;
  callTimeoutMs: number | undefined;
  connectTimeoutMs: number;
  retrySafeTools: Set<string>;
  /** Its tools are served as `${prefix}__${name}`. */
  prefix?: string;
  /** Served tool name → whose it is, shared by the gateway's mounts. */
  owners: Map<string, string>;
  log: Logger;
}

export interface MountedUpstream {
  spec: UpstreamSpec;
  mirror: ToolMirror;
  surface: UpstreamSurface;
  /** Lists its tools, and opens one call connection when it could (else the first call says why). */
  start(): Promise<void>;
  close(): Promise<void>;
}

export function mountUpstream(outlast: Outlast, spec: UpstreamSpec, o: MountOptions): MountedUpstream {
  // Everything logged about this upstream (its stderr, its errors, its calls') has its secrets redacted.
  const log = redactingLogger(o.log, redactorOf(spec));
  let mirror: ToolMirror | undefined;
  const events: UpstreamEvents = {
    toolsChanged: () => void mirror?.refresh(),
    promptsChanged: () => outlast.notifier()?.promptsChanged(),
    resourcesChanged: () => outlast.notifier()?.resourcesChanged(),
    log,
  };
  const pool = new UpstreamPool(spec, o.poolSize, events, o.connectTimeoutMs);
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
    const opening = pool.connect().then((c) => {
      capabilities = c.client.getServerCapabilities() as Record<string, unknown> | undefined;
      return c;
    });
    control = opening;
    opening.catch(() => {
      if (control === opening) control = undefined;
    });
    return opening;
  };
  const m = new ToolMirror({
    outlast,
    pool,
    control: controlConnection,
    retrySafeTools: o.retrySafeTools,
    callTimeoutMs: o.callTimeoutMs,
    log,
    owners: o.owners,
    ...(o.prefix !== undefined ? { prefix: o.prefix } : {}),
  });
  mirror = m;
  return {
    spec,
    mirror: m,
    surface: { capabilities: () => capabilities, control: controlConnection },
    async start() {
      await m.refresh();
      if (!(await m.unavailable())) await pool.warm();
    },
    async close() {
      closed = true;
      await pool.close();
      await control?.then((c) => c.close(), () => undefined);
    },
  };
}
