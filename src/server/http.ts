/**
 * Streamable HTTP for Outlast on its own node:http server: a thin listener over the front (`front/`), which holds
 * everything Outlast adds to the SDK's handler. In an app that has its own server, mount `outlastHandler` instead.
 */
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { localhostAllowedHostnames, localhostAllowedOrigins, type McpHttpHandler } from '@modelcontextprotocol/server';
import type { Outlast } from './outlast.js';
import { checkDashboardExposure, isLoopbackHost } from '../ops/dashboard/index.js';
import { outlastHandler, type OutlastHandler, type OutlastHandlerOptions, type ServerFactory } from './front/index.js';
import { refuseServingDuringServeImport } from './module/served-module.js';
import { createLimitedServer, resolveHttpLimits, type HttpLimits } from './http-limits.js';
import { anonymousNetwork } from './anonymous-network.js';

export { DEFAULT_MAX_BODY_BYTES, type ServerFactory } from './front/index.js';

export { DEFAULT_HTTP_LIMITS, type HttpLimits } from './http-limits.js';

/** With the node:http server's limits (http-limits.ts): header, request and keep-alive timeouts and a connection cap. */
export interface HttpServeOptions extends Omit<OutlastHandlerOptions, 'dashboard' | 'allowedHosts' | 'allowedOrigins'>, HttpLimits {
  /** Port; 0 picks a free one. Default 3000. */
  port?: number;
  /** Interface to bind. Default 127.0.0.1; on loopback, Host and Origin are checked (DNS-rebinding protection).
   *  Another interface needs `bearer` or `oauth` (else serveHttp throws), or `allowAnonymousNetwork`. */
  host?: string;
  /** Serve a non-loopback `host` without `bearer` or `oauth` (a network you trust): every caller is anonymous. Logged
   *  as a warning at start. */
  allowAnonymousNetwork?: boolean;
  /** The operations dashboard at /dashboard (off by default; see src/ops/dashboard). */
  dashboard?: Omit<NonNullable<OutlastHandlerOptions['dashboard']>, 'host'>;
}

export interface RunningHttpServer {
  url: string;
  port: number;
  server: Server;
  /** The SDK's handler behind the front. */
  handler: McpHttpHandler;
  /** The front itself. */
  front: OutlastHandler;
  /** Ends listen streams, stops accepting, closes the SDK handler (the runtime is stopped separately). */
  close(): Promise<void>;
}

export async function serveHttp(outlast: Outlast, factory: ServerFactory, options: HttpServeOptions = {}): Promise<RunningHttpServer> {
  refuseServingDuringServeImport('serveHttp');
  const { port: wantedPort, host: wantedHost, dashboard, allowAnonymousNetwork, headersTimeoutMs, requestTimeoutMs, keepAliveTimeoutMs, maxConnections, ...frontOptions } = options;
  const limits = resolveHttpLimits({ headersTimeoutMs, requestTimeoutMs, keepAliveTimeoutMs, maxConnections });
  const host = wantedHost ?? '127.0.0.1';
  const path = options.path ?? '/mcp';
  const loopback = isLoopbackHost(host);
  if (dashboard) checkDashboardExposure(host, dashboard);
  const exposed = anonymousNetwork(host, { ...frontOptions, allowAnonymousNetwork });
  if (exposed && 'refuse' in exposed) throw new Error(exposed.refuse);
  if (exposed) {
    // A library's default logger is silent: a process warning is seen whatever the app logs with.
    process.emitWarning(exposed.warn, { code: 'OUTLAST_ANONYMOUS_NETWORK' });
    outlast.runtime.log.warn(exposed.warn);
  }
  await outlast.start();
  const front = outlastHandler(outlast, factory, {
    ...frontOptions,
    ...(dashboard ? { dashboard: { ...dashboard, host } } : {}),
    ...(loopback ? { allowedHosts: localhostAllowedHostnames(), allowedOrigins: localhostAllowedOrigins() } : {}),
  });
  try {
    await front.ready();
  } catch (e) {
    await front.close();
    throw e;
  }
  const server = createLimitedServer(limits, (req, res) => void front.node(req, res));
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(wantedPort ?? 3000, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;
  const shownHost = host.includes(':') ? `[${host}]` : host;
  return {
    url: `http://${shownHost}:${port}${path}`,
    port,
    server,
    handler: front.sdk,
    front,
    async close() {
      // Listen streams end first, so the server's connections can close.
      const closing = front.close();
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeIdleConnections?.();
        setTimeout(() => server.closeAllConnections?.(), 2000).unref();
      });
      await closing;
    },
  };
}
