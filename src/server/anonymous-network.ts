/**
 * Listening on a network address without authentication lets anyone who reaches it call every tool as `anonymous`.
 * serveHttp (so `outlast serve` and `outlast gateway`) refuses to, unless the operator opts in for a network they
 * trust, which is logged loudly. An app that mounts outlastHandler binds its own server and authenticates itself
 * (its middleware hands the front an AuthInfo): the front cannot see that address, so it makes no such check.
 */
import { isLoopbackHost } from '../ops/dashboard/index.js';

export interface NetworkAuthOptions {
  bearer?: Record<string, string>;
  oauth?: unknown;
  /** Serve a non-loopback host without authentication anyway (a trusted network). */
  allowAnonymousNetwork?: boolean;
}

/** For serving `host` with these options: a refusal that says what to do, a warning to log, or nothing to say. */
export function anonymousNetwork(host: string, o: NetworkAuthOptions): { refuse: string } | { warn: string } | undefined {
  const authenticated = (o.bearer !== undefined && Object.keys(o.bearer).length > 0) || o.oauth !== undefined;
  if (authenticated || isLoopbackHost(host)) return undefined;
  if (!o.allowAnonymousNetwork) {
    return {
      refuse:
        `Refusing to serve on ${host} without authentication: anyone who reaches it could call every tool as "anonymous". ` +
        `Add --bearer-file PATH (or $OUTLAST_BEARER_TOKENS, --bearer TOKEN=NAME) or --oauth-issuer URL (serveHttp: bearer, oauth), listen on 127.0.0.1, or pass --allow-anonymous-network (allowAnonymousNetwork) if only a network you trust reaches ${host}`,
    };
  }
  return {
    warn:
      `WARNING: serving on ${host} WITHOUT AUTHENTICATION (--allow-anonymous-network): anyone who reaches this address can call every tool. ` +
      'Callers are anonymous: a 2025-11-25 session keeps its tasks to itself, a 2026-07-28 task is reachable by whoever holds its id. Add --bearer or --oauth-issuer unless only a trusted network reaches it.',
  };
}
