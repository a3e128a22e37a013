/**
 * Health endpoints, web-standard (Request → Response) so every HTTP adapter serves them the same way:
 * `GET /healthz` (live: the process answers) and `GET /readyz` (ready: the store answers within its deadline and
 * the replica is neither self-fenced nor shutting down), so a balancer stops sending traffic to a replica that cannot serve it.
 * Unauthenticated, as balancers probe them; they tell nothing but the state and its reason.
 */
import type { Outlast } from './outlast.js';

export const HEALTH_PATHS: ReadonlySet<string> = new Set(['/healthz', '/readyz']);

export interface HealthOptions {
  /** How long /readyz waits for the store, ms. Default 2000. */
  storeDeadlineMs?: number;
}

function json(status: number, body: unknown, headers: Record<string, string> = {}): Response {
  return new Response(JSON.stringify(body), { status, headers: { 'content-type': 'application/json', 'cache-control': 'no-store', ...headers } });
}

/** The answer for a health path, or undefined when `request` is for another path. */
export async function healthResponse(outlast: Outlast, request: Request, options: HealthOptions = {}): Promise<Response | undefined> {
  const { pathname } = new URL(request.url);
  if (!HEALTH_PATHS.has(pathname)) return undefined;
  if (request.method !== 'GET' && request.method !== 'HEAD') {
    return json(405, { status: 'error', reason: `${pathname} answers GET and HEAD only` }, { allow: 'GET, HEAD' });
  }
  if (pathname === '/healthz') return json(200, { status: 'ok' });
  const r = await outlast.runtime.ready(options.storeDeadlineMs ?? 2000);
  return json(r.ready ? 200 : 503, { status: r.ready ? 'ready' : 'not ready', ...r }, r.ready ? {} : { 'retry-after': '1' });
}
