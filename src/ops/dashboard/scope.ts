/** What the dashboard's pages and actions share: the options, the base path, operator auth, and the way they answer
 *  (every answer carries the security headers; pages are laid out with the operator's CSRF value). */
import type { ServerResponse } from 'node:http';
import { OperatorAuth, type Operator } from './auth.js';
import type { Html } from './html.js';
import { layout } from './pages.js';
import type { PageContext } from './format.js';
import type { DashboardOptions } from './options.js';

export const PAGE_SIZE = 50;
export const SECURITY_HEADERS: Record<string, string> = {
  'content-security-policy': "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
  'x-frame-options': 'DENY',
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'same-origin',
  'cache-control': 'no-store',
};

export interface DashboardScope {
  o: DashboardOptions;
  base: string;
  auth: OperatorAuth;
  log: (msg: string, extra: Record<string, unknown>) => void;
  send(res: ServerResponse, status: number, body: Html | string, type?: string, extra?: Record<string, string>): void;
  redirect(res: ServerResponse, to: string, extra?: Record<string, string>): void;
  ctxOf(op: Operator): PageContext;
  layoutOf(op: Operator, pageTitle: string, body: Html, refresh?: boolean): Html;
}

export function dashboardScope(o: DashboardOptions): DashboardScope {
  const base = (o.basePath ?? '/dashboard').replace(/\/$/, '');
  const auth = new OperatorAuth(o);
  const title = o.title ?? `${o.store.backend} store`;
  const ctxOf = (op: Operator): PageContext => ({ base, operator: op, csrf: auth.csrf(op), title, now: Date.now(), alertTargets: o.alertTargets });
  return {
    o,
    base,
    auth,
    log: o.log ?? (() => undefined),
    send(res, status, body, type = 'text/html; charset=utf-8', extra = {}) {
      res.writeHead(status, { ...SECURITY_HEADERS, 'content-type': type, ...extra });
      res.end(typeof body === 'string' ? body : body.value);
    },
    redirect(res, to, extra = {}) {
      res.writeHead(303, { ...SECURITY_HEADERS, location: to, ...extra });
      res.end();
    },
    ctxOf,
    layoutOf: (op, pageTitle, body, refresh = false) => layout(ctxOf(op), base, pageTitle, body, { refresh }),
  };
}
