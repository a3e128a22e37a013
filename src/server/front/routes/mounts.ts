/**
 * The node:http mounts (the dashboard, /metrics): handlers that serve a node:http request themselves. The node
 * adapter asks `mountOf` first and hands them the request; a fetch runtime reaching one gets 501 saying why.
 */
import { hostHeaderValidationResponse } from '@modelcontextprotocol/server';
import type { Outlast } from '../../outlast.js';
import { checkDashboardExposure, createDashboard, type Dashboard } from '../../../ops/dashboard/index.js';
import type { FrontRequest } from '../exchange.js';
import type { Route } from '../route.js';
import type { NodeMount, OutlastHandlerOptions } from '../types.js';

export interface Mounts {
  /** The node:http handler that owns a request's path (after the Host check), a refusal, or undefined. */
  mountOf(request: FrontRequest, pathname: string): NodeMount | Response | undefined;
  /** For fetch runtimes: a mounted path is answered 501 (or the Host refusal). */
  readonly route: Route;
  close(): void;
}

export function createMounts(outlast: Outlast, options: OutlastHandlerOptions): Mounts {
  let dashboard: Dashboard | undefined;
  if (options.dashboard) {
    const host = options.dashboard.host ?? 'an unknown interface (dashboard.host not given)';
    checkDashboardExposure(host, options.dashboard);
    dashboard = createDashboard({ ...options.dashboard, store: outlast.runtime.store, bus: outlast.runtime.bus, host });
  }

  function mountOf(request: FrontRequest, pathname: string): NodeMount | Response | undefined {
    const mount: NodeMount | undefined = dashboard?.owns(pathname)
      ? (req, res) => dashboard!.handle(req, res)
      : options.metrics && pathname === '/metrics' && request.method === 'GET' ? options.metrics : undefined;
    // On loopback, the Host is checked before either (a DNS-rebinding page must not read them).
    if (mount && options.allowedHosts) {
      const refused = hostHeaderValidationResponse(request.web(), options.allowedHosts);
      if (refused) return refused;
    }
    return mount;
  }

  const route: Route = {
    serve(request, _extra, pathname) {
      const mounted = mountOf(request, pathname);
      if (mounted === undefined || mounted instanceof Response) return mounted;
      const what = pathname === '/metrics' ? '/metrics' : 'The dashboard';
      return new Response(`${what} is served through handler.node() (node:http, Express, Fastify, Hono on @hono/node-server); this runtime called handler.fetch(). Run \`outlast dashboard --store URL\` beside it for the dashboard.\n`, {
        status: 501,
        headers: { 'content-type': 'text/plain; charset=utf-8' },
      });
    },
  };
  return { mountOf, route, close: () => dashboard?.close() };
}
