/**
 * The operations dashboard: server-rendered pages over the store's operator queries (views.ts), plain POST forms for
 * actions, each with a CSRF value (actions.ts), and an event stream that keeps open pages current (live.ts). Mounted
 * by `serveHttp({dashboard})` at /dashboard, or served alone by `outlast dashboard --store URL`.
 */
import type { OperatorTokens } from './auth.js';
import { LIVE_JS, STYLE_CSS } from './assets.js';
import { LiveHub } from './live.js';
import { errorPage, loginPage } from './pages.js';
import type { Dashboard, DashboardOptions } from './options.js';
import { SECURITY_HEADERS, dashboardScope } from './scope.js';
import { dashboardViews } from './views.js';
import { dashboardActions } from './actions.js';

export { OperatorAuth, type Operator, type OperatorTokens } from './auth.js';
export type { Dashboard, DashboardOptions } from './options.js';

export function isLoopbackHost(host: string): boolean {
  return host === '127.0.0.1' || host === 'localhost' || host === '::1' || host.startsWith('127.');
}

/** Throws (with what to do) when the dashboard would be open to a network without operator tokens. */
export function checkDashboardExposure(host: string, tokens: OperatorTokens): void {
  const any = Object.keys(tokens.operators ?? {}).length + Object.keys(tokens.readonly ?? {}).length > 0;
  if (!any && !isLoopbackHost(host)) {
    throw new Error(`Refusing to serve the dashboard on ${host} without operator tokens: anyone who can reach it could cancel tasks. Add --operator TOKEN=NAME (or --operator-readonly), or listen on 127.0.0.1`);
  }
}

export function createDashboard(o: DashboardOptions): Dashboard {
  checkDashboardExposure(o.host, o);
  const scope = dashboardScope(o);
  const { base, auth, log, send, ctxOf } = scope;
  const hub = new LiveHub({ store: o.store, bus: o.bus });
  const views = dashboardViews(scope);
  const { post } = dashboardActions(scope);
  /** The pages by path (a task's page is matched below). */
  const pages: Record<string, (typeof views)['list']> = { '/': views.overview, '': views.overview, '/tasks': views.list, '/alerts': views.alerts, '/tools': views.tools, '/subscriptions': views.subscriptions };

  return {
    basePath: base,
    owns: (pathname) => pathname === base || pathname.startsWith(`${base}/`),
    async handle(req, res) {
      try {
        const url = new URL(req.url ?? '/', 'http://dashboard');
        const rest = url.pathname.slice(base.length) || '/';
        if (req.method === 'GET' && rest === '/assets/live.js') return send(res, 200, LIVE_JS, 'text/javascript; charset=utf-8');
        if (req.method === 'GET' && rest === '/assets/style.css') return send(res, 200, STYLE_CSS, 'text/css; charset=utf-8');
        if (req.method === 'GET' && rest === '/login') return send(res, 200, loginPage(base));
        if (req.method === 'POST') return await post(req, res, rest);
        if (req.method !== 'GET' && req.method !== 'HEAD') return send(res, 405, 'Method not allowed\n', 'text/plain; charset=utf-8', { allow: 'GET, POST' });
        const op = await auth.identify(req);
        if (!op) return send(res, 401, loginPage(base), 'text/html; charset=utf-8', { 'www-authenticate': 'Bearer realm="outlast-dashboard"' });
        const page = Object.hasOwn(pages, rest) ? pages[rest] : undefined;
        if (page) return await page(res, op, url.searchParams);
        if (rest === '/events') {
          if (!hub.open(res, SECURITY_HEADERS)) send(res, 503, 'Too many open dashboard streams\n', 'text/plain; charset=utf-8', { 'retry-after': '10' });
          return;
        }
        const m = /^\/tasks\/([^/]{1,200})$/.exec(rest);
        if (m) return await views.task(res, op, decodeURIComponent(m[1]!));
        send(res, 404, errorPage(base, ctxOf(op), 'Not found', 'No such page.'));
      } catch (e) {
        log('dashboard request failed', { error: String(e) });
        if (!res.headersSent) send(res, 500, 'The dashboard could not read the store; retry shortly\n', 'text/plain; charset=utf-8');
        else res.end();
      }
    },
    close: () => hub.close(),
  };
}
