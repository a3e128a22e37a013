/** What the dashboard's pages and actions share: the options, the base path, operator auth, and the way they answer
 *  (every answer carries the security headers; pages are laid out with the operator's CSRF value). */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { COOKIE, OperatorAuth, type Operator } from './auth.js';
import { DEFAULT_SESSION_IDLE_MS, DEFAULT_SESSION_MS, OperatorSessions } from './sessions.js';
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
  /** The Set-Cookie value of a session (none: the cookie cleared); Secure when the public URL is https or the socket
   *  is TLS, kept by the browser no longer than the session lasts. */
  sessionCookie(req: IncomingMessage, session?: string): string;
  /** Whether a POST comes from the dashboard's own pages (not another site, not an opaque `null` origin). */
  sameOrigin(req: IncomingMessage): boolean;
  log: (msg: string, extra: Record<string, unknown>) => void;
  send(res: ServerResponse, status: number, body: Html | string, type?: string, extra?: Record<string, string>): void;
  redirect(res: ServerResponse, to: string, extra?: Record<string, string>): void;
  ctxOf(op: Operator): PageContext;
  layoutOf(op: Operator, pageTitle: string, body: Html, refresh?: boolean): Html;
}

export function dashboardScope(o: DashboardOptions): DashboardScope {
  const base = (o.basePath ?? '/dashboard').replace(/\/$/, '');
  const policy = { lifetimeMs: o.sessionMs ?? DEFAULT_SESSION_MS, idleMs: o.sessionIdleMs ?? DEFAULT_SESSION_IDLE_MS };
  const auth = new OperatorAuth(o, new OperatorSessions(o.store.operatorSessions, () => o.store.now(), policy));
  const publicOrigin = o.publicUrl ? new URL(o.publicUrl).origin : undefined;
  const secureUrl = publicOrigin?.startsWith('https:') ?? false;
  const title = o.title ?? `${o.store.backend} store`;
  const ctxOf = (op: Operator): PageContext => ({ base, operator: op, csrf: auth.csrf(op), title, now: Date.now(), alertTargets: o.alertTargets });
  return {
    o,
    base,
    auth,
    sessionCookie(req, session) {
      const secure = secureUrl || (req.socket as { encrypted?: boolean }).encrypted ? '; Secure' : '';
      return `${COOKIE}=${session ?? ''}; Path=${base}; HttpOnly; SameSite=Strict${secure}; Max-Age=${session ? Math.floor(policy.lifetimeMs / 1000) : 0}`;
    },
    sameOrigin(req) {
      // Browsers send Sec-Fetch-Site and Origin with every POST; a script without them carries no ambient cookie of ours
      // by accident (it signs in, or sends a bearer token, on purpose).
      const site = req.headers['sec-fetch-site'];
      if (site !== undefined && site !== 'same-origin' && site !== 'none') return false;
      const origin = req.headers.origin;
      if (origin === undefined) return true;
      try {
        const u = new URL(origin);
        return u.host === req.headers.host || u.origin === publicOrigin;
      } catch {
        return false; // `null` (a sandboxed frame, a data: page, a redirect across sites) and anything unreadable
      }
    },
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
