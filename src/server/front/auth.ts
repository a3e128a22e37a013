/**
 * Who may reach the front: DNS-rebinding protection (Host and Origin, as the SDK's adapters check them) and the
 * caller's credentials (a configured bearer token, else a verified OAuth token, else what the app's own
 * authentication gave).
 */
import { hostHeaderValidationResponse, originValidationResponse, type AuthInfo } from '@modelcontextprotocol/server';
import { ErrorCode } from '../../protocol/index.js';
import type { Outlast } from '../outlast.js';
import { createOAuthResourceServer, type OAuthResourceServer } from '../oauth/index.js';
import { jsonRpcError } from './answers.js';
import type { Answer, FrontRequest } from './exchange.js';
import type { FrontExtra, OutlastHandlerOptions } from './types.js';

export interface FrontAuth {
  /** A refusal (403) when the Host or Origin is not allowed, else undefined. */
  refusedHost(request: FrontRequest): Response | undefined;
  /** The caller's auth, or the refusal (401) to answer; at once unless an OAuth token is to be verified. */
  authenticate(request: FrontRequest, extra: FrontExtra | undefined): Promise<AuthInfo | Answer | undefined> | AuthInfo | Answer | undefined;
  /** The OAuth resource server in front, when configured. */
  readonly oauth: OAuthResourceServer | undefined;
  /** Resolves once the OAuth issuers' metadata is there (at once without OAuth). */
  readonly ready: Promise<void> | undefined;
}

/** Host header values the SDK's check passed are remembered, at most this many (the header is the caller's). */
const HOST_VALUES_MAX = 256;

export function createFrontAuth(outlast: Outlast, options: OutlastHandlerOptions): FrontAuth {
  const bearer = options.bearer && Object.keys(options.bearer).length > 0 ? new Map(Object.entries(options.bearer)) : undefined;
  const oauth = options.oauth ? createOAuthResourceServer(options.oauth) : undefined;
  // Discovery starts now; the first request waits for it (and serveHttp before it listens).
  const ready = oauth?.ready();
  ready?.catch(() => undefined);
  /** A client sends the same Host on every request, and the check parses a URL each time. Full, it is emptied;
   *  refusals are never remembered. */
  const allowedHostValues = new Set<string>();

  function refusedHost(request: FrontRequest): Response | undefined {
    if (options.allowedHosts) {
      const host = request.headers.get('host');
      if (host === null || !allowedHostValues.has(host)) {
        const refused = hostHeaderValidationResponse(request.web(), options.allowedHosts);
        if (refused) return refused;
        if (host !== null) {
          if (allowedHostValues.size >= HOST_VALUES_MAX) allowedHostValues.clear();
          allowedHostValues.add(host);
        }
      }
    }
    // No Origin passes the SDK's check (non-browser clients send none): only a present one is checked.
    return (options.allowedOrigins && request.headers.get('origin') && originValidationResponse(request.web(), options.allowedOrigins)) || undefined;
  }

  async function viaOAuth(oauth: OAuthResourceServer, request: FrontRequest): Promise<AuthInfo | Answer> {
    await ready;
    const verdict = await oauth.authenticate(request.web());
    if ('authInfo' in verdict) return verdict.authInfo;
    // The reason only (the SDK puts it in the challenge); never the token.
    outlast.runtime.log.debug('OAuth: request refused', { status: verdict.response.status, reason: challengeReason(verdict.response) });
    return verdict.response;
  }

  function authenticate(request: FrontRequest, extra: FrontExtra | undefined): Promise<AuthInfo | Answer> | AuthInfo | Answer | undefined {
    if (!bearer && !oauth) return extra?.authInfo;
    const m = /^Bearer\s+(.+)$/i.exec(request.headers.get('authorization') ?? '');
    const principal = m && bearer ? bearer.get(m[1]!.trim()) : undefined;
    if (!principal && oauth) return viaOAuth(oauth, request);
    if (!principal) {
      return jsonRpcError(401, null, ErrorCode.InvalidRequest, m ? 'Unknown bearer token' : 'Authorization: Bearer <token> is required', undefined, {
        'www-authenticate': 'Bearer realm="outlast"',
      });
    }
    return { token: m![1]!.trim(), clientId: principal, scopes: [], extra: { principal } };
  }

  return { refusedHost, authenticate, oauth, ready };
}

/** The error_description of a refusal's Bearer challenge, if it carries one. */
export function challengeReason(response: Response): string | null {
  return /error_description="([^"]*)"/.exec(response.headers.get('www-authenticate') ?? '')?.[1] ?? null;
}
