/** Liveness and readiness come before everything else: a balancer asks them without credentials. */
import type { Outlast } from '../../outlast.js';
import { HEALTH_PATHS, healthResponse } from '../../health.js';
import type { Route } from '../route.js';

export function healthRoute(outlast: Outlast): Route {
  return { serve: (request, _extra, pathname) => (HEALTH_PATHS.has(pathname) ? healthResponse(outlast, request.web()) : undefined) };
}
