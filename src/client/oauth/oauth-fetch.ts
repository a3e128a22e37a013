/**
 * OAuth for every request a client sends: a fetch that adds the stored access token, and on a 401 challenge or a
 * 403 insufficient_scope runs the SDK's `auth()` (discovery, registration, PKCE, refresh, step-up scope union) once
 * for all requests waiting on it, then retries the request once. An interactive provider finishes the redirect
 * through its loopback callback; a provider that cannot ends in a clear error.
 */
import {
  UnauthorizedError,
  auth,
  computeScopeUnion,
  extractWWWAuthenticateParams,
  isStrictScopeSuperset,
  type FetchLike,
  type OAuthClientProvider,
} from '@modelcontextprotocol/client';

/** An OAuthClientProvider that can also receive the authorization redirect itself (see LoopbackOAuthProvider). */
export interface InteractiveOAuthProvider extends OAuthClientProvider {
  /** Readies the redirect target (binds the loopback port) before any authorization request names it. */
  prepare?(): Promise<void>;
  /** The code (and RFC 9207 `iss`) of the redirect that follows `redirectToAuthorization`. */
  waitForAuthorizationCode?(): Promise<{ code: string; iss?: string }>;
  /** Serialises authorizations across processes sharing the credentials (a refresh rotates the refresh token). */
  withLock?<T>(fn: () => Promise<T>): Promise<T>;
}

export class OAuthAuthorizationError extends Error {
  override readonly name = 'OAuthAuthorizationError';
  /** The OAuth error code of the authorization response, when the authorization server sent one. */
  constructor(message: string, readonly code?: string) {
    super(message);
  }
}

function needsAuthorization(res: Response): boolean {
  if (res.status === 401) return true;
  return res.status === 403 && /error="?insufficient_scope/.test(res.headers.get('www-authenticate') ?? '');
}

export function oauthFetch(provider: InteractiveOAuthProvider, server: string | URL, base: FetchLike = fetch): FetchLike {
  let inflight: Promise<void> | undefined;
  /** Scopes asked for so far (a step-up asks for their union with the challenge, never fewer). */
  let requested: string | undefined;

  const authorize = async (res: Response, sentToken: string | undefined): Promise<void> => {
    const serverUrl = new URL(server);
    const challenge = extractWWWAuthenticateParams(res);
    let scope = challenge.scope;
    let forceReauthorization = false;
    if (res.status === 403) {
      const current = (await provider.tokens())?.scope;
      scope = computeScopeUnion(requested, current, challenge.scope);
      // A refresh cannot widen a grant (RFC 6749 §6): a wider set needs a new authorization.
      forceReauthorization = isStrictScopeSuperset(scope, current);
    } else if (sentToken) {
      // A token that worked before is refused: the server may have moved to another authorization server.
      await provider.invalidateCredentials?.('discovery');
    }
    if (scope) requested = scope;
    await provider.prepare?.();
    const options = {
      serverUrl,
      ...(challenge.resourceMetadataUrl ? { resourceMetadataUrl: challenge.resourceMetadataUrl } : {}),
      ...(scope ? { scope } : {}),
      fetchFn: base,
      forceReauthorization,
    };
    for (let attempt = 1; ; attempt++) {
      let result = await auth(provider, options);
      if (result === 'REDIRECT') {
        if (!provider.waitForAuthorizationCode) {
          throw new OAuthAuthorizationError(`${serverUrl.href} needs you to sign in; run \`outlast login ${serverUrl.href}\` (or give the client an interactive OAuth provider)`);
        }
        let answer: { code: string; iss?: string };
        try {
          answer = await provider.waitForAuthorizationCode();
        } catch (e) {
          // A registered client is limited to the scopes it registered with: a step-up registers again, once.
          if (attempt === 1 && res.status === 403 && e instanceof OAuthAuthorizationError && e.code === 'invalid_scope') {
            await provider.invalidateCredentials?.('client');
            continue;
          }
          throw e;
        }
        result = await auth(provider, { ...options, forceReauthorization: false, authorizationCode: answer.code, ...(answer.iss !== undefined ? { iss: answer.iss } : {}) });
      }
      if (result !== 'AUTHORIZED') throw new UnauthorizedError('authorization did not complete');
      return;
    }
  };

  return async (url, init) => {
    const send = async () => {
      const token = (await provider.tokens())?.access_token;
      const headers = new Headers(init?.headers);
      if (token) headers.set('authorization', `Bearer ${token}`);
      return { token, res: await base(url, { ...init, headers }) };
    };
    const first = await send();
    if (!needsAuthorization(first.res)) return first.res;
    await first.res.arrayBuffer().catch(() => undefined);
    // Requests refused together share one authorization; processes sharing the credentials take turns, and one that
    // finds a token other than the one refused (another process refreshed it) just uses it.
    const once = async () => {
      const current = (await provider.tokens())?.access_token;
      if (first.res.status === 401 && current && current !== first.token) return;
      await authorize(first.res, first.token);
    };
    inflight ??= (provider.withLock ? provider.withLock(once) : once()).finally(() => (inflight = undefined));
    await inflight;
    return (await send()).res;
  };
}
