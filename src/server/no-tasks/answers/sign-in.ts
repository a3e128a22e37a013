/**
 * Sign-in for the answer page on a front with OAuth: the page is an OAuth client of the front's first issuer
 * (authorization code + PKCE, RFC 8707 `resource` = this server), so the person who answers is verified exactly as
 * the MCP endpoint verifies a bearer, and must be the task's principal. The access token is checked and dropped; the
 * browser keeps an encrypted session cookie (principal, expiry) and nothing is kept on the server, so any replica
 * serves the page. The SDK's client helpers do discovery, registration and the code exchange; jose seals the cookies.
 */
import { createHash, randomBytes } from 'node:crypto';
import { discoverAuthorizationServerMetadata, exchangeAuthorization, registerClient, startAuthorization } from '@modelcontextprotocol/client';
import { EncryptJWT, jwtDecrypt } from 'jose';
import { notice } from './html.js';
import { ANSWER_PATH, cookieValue } from './links.js';

/** Where the authorization server sends the browser back (no '.' in it, so never an answer-link token). */
export const SIGNED_IN_PATH = `${ANSWER_PATH}signed-in`;
const SESSION_COOKIE = 'outlast_answer_session';
const FLOW_COOKIE = 'outlast_answer_sign_in';
/** How long a person may take at the authorization server's login and consent. */
const FLOW_TTL_S = 600;
/** A page session lasts at most this long, and never past the access token it was made from. */
const SESSION_MAX_S = 3600;

/** The page's client at the authorization server. Without one, the page registers itself (RFC 7591) when the server
 *  advertises a registration endpoint. */
export interface SignInClient {
  clientId: string;
  /** A confidential client's secret (sent as the server's metadata says); none: a public client with PKCE. */
  clientSecret?: string;
}

export interface AnswerSignInOptions {
  /** The authorization server people sign in at (the front's first issuer). */
  issuer: string;
  /** This server's resource identifier: the audience of the token the sign-in gets. */
  resource: string;
  /** Scopes the MCP endpoint requires (the token must carry them to be verified). */
  scopes: string[];
  client?: SignInClient;
  /** The answer links' base (the public URL): the redirect URI is `${base}/answer/signed-in`. */
  base: string;
  /** The shared link key (the cookies are sealed with a key derived from it). */
  secret: () => string | undefined;
  /** Verifies an access token as the MCP endpoint does: its principal and expiry (s since the epoch), or why not. */
  verify: (accessToken: string) => Promise<{ principal: string; expiresAt?: number } | { reason: string }>;
  secureCookie: boolean;
  log: { info(m: string, f?: Record<string, unknown>): void; warn(m: string, f?: Record<string, unknown>): void };
}

export interface AnswerSignIn {
  /** Discovers the issuer and, without a configured client, registers one; rejects with what to configure. */
  ready(): Promise<void>;
  /** The principal of this browser's page session, if it has a valid one. */
  principalOf(request: Request): Promise<string | undefined>;
  /** Sends the browser to sign in, then back to the answer link `token`; `again`: ask the server to log in anew. */
  start(token: string, again?: boolean): Promise<Response>;
  /** The redirect back from the authorization server (GET /answer/signed-in). */
  callback(request: Request): Promise<Response>;
}

type Metadata = NonNullable<Awaited<ReturnType<typeof discoverAuthorizationServerMetadata>>>;
type ClientInformation = Parameters<typeof startAuthorization>[1]['clientInformation'];


export function createAnswerSignIn(o: AnswerSignInOptions): AnswerSignIn {
  const redirectUri = `${o.base}${SIGNED_IN_PATH}`;
  const cookieAttributes = `Path=${ANSWER_PATH}; HttpOnly; SameSite=Lax${o.secureCookie ? '; Secure' : ''}`;
  let setup: Promise<{ metadata: Metadata; client: ClientInformation; scope: string }> | undefined;

  function prepare(): Promise<{ metadata: Metadata; client: ClientInformation; scope: string }> {
    setup ??= (async () => {
      const metadata = await discoverAuthorizationServerMetadata(o.issuer);
      if (!metadata) throw new Error(`answer-page sign-in: no authorization server metadata for ${o.issuer}`);
      // OpenID providers (oidc-provider among them) want `openid` on every authorization request.
      const scope = [...new Set([...(metadata.scopes_supported?.includes('openid') ? ['openid'] : []), ...o.scopes])].join(' ');
      if (o.client) {
        const client = { client_id: o.client.clientId, ...(o.client.clientSecret ? { client_secret: o.client.clientSecret } : {}) };
        return { metadata, client, scope };
      }
      if (!metadata.registration_endpoint) {
        throw new Error(
          `answer pages behind OAuth sign people in at ${o.issuer}, which offers no dynamic client registration: register a client with redirect URI ${redirectUri} and give its id (--oauth-sign-in-client-id, secret in $OUTLAST_OAUTH_SIGN_IN_CLIENT_SECRET), or turn the pages off (--no-answer-pages)`,
        );
      }
      const client = await registerClient(o.issuer, {
        metadata,
        clientMetadata: {
          client_name: 'Outlast answer page',
          redirect_uris: [redirectUri],
          grant_types: ['authorization_code'],
          response_types: ['code'],
          token_endpoint_auth_method: 'none',
          ...(scope ? { scope } : {}),
        },
      });
      o.log.info('answer-page sign-in: registered a client at the authorization server', { issuer: o.issuer, clientId: client.client_id });
      return { metadata, client, scope };
    })();
    // A failed discovery or registration is tried again at the next sign-in, not remembered.
    setup.catch(() => (setup = undefined));
    return setup;
  }

  /** The cookies' key, derived from the shared link key (every replica derives the same). */
  function key(): Uint8Array {
    const secret = o.secret();
    if (!secret) throw new Error('answer-page sign-in: the link key is not loaded yet');
    return createHash('sha256').update(`outlast-answer-sign-in\n${secret}`).digest();
  }

  async function seal(claims: Record<string, unknown>, ttlS: number, purpose: string): Promise<string> {
    return new EncryptJWT(claims).setProtectedHeader({ alg: 'dir', enc: 'A256GCM' }).setAudience(purpose).setExpirationTime(Math.floor(Date.now() / 1000) + ttlS).encrypt(key());
  }

  async function open(value: string | undefined, purpose: string): Promise<Record<string, unknown> | undefined> {
    if (!value || value.length > 8000) return undefined;
    try {
      return (await jwtDecrypt(value, key(), { audience: purpose, keyManagementAlgorithms: ['dir'], contentEncryptionAlgorithms: ['A256GCM'] })).payload;
    } catch {
      return undefined; // tampered, expired, sealed by another deployment's key: not signed in
    }
  }

  return {
    ready: async () => void (await prepare()),

    async principalOf(request) {
      const session = await open(cookieValue(request, SESSION_COOKIE), 'session');
      return typeof session?.p === 'string' ? session.p : undefined;
    },

    async start(token, again) {
      const { metadata, client, scope } = await prepare();
      const state = randomBytes(32).toString('base64url');
      const { authorizationUrl, codeVerifier } = await startAuthorization(o.issuer, { metadata, clientInformation: client, redirectUrl: redirectUri, scope, state, resource: o.resource });
      if (again) authorizationUrl.searchParams.set('prompt', 'login');
      // The client is named in the flow: a registered (public) client of another replica can be redeemed by this one.
      const flow = await seal({ s: state, v: codeVerifier, t: token, c: client.client_id, ...(o.client ? {} : { r: 1 }) }, FLOW_TTL_S, 'flow');
      return new Response(null, {
        status: 303,
        headers: { location: authorizationUrl.href, 'set-cookie': `${FLOW_COOKIE}=${flow}; Max-Age=${FLOW_TTL_S}; ${cookieAttributes}`, 'cache-control': 'no-store' },
      });
    },

    async callback(request) {
      const url = new URL(request.url);
      const flow = await open(cookieValue(request, FLOW_COOKIE), 'flow');
      const clear = `${FLOW_COOKIE}=; Max-Age=0; ${cookieAttributes}`;
      if (!flow || typeof flow.s !== 'string' || typeof flow.v !== 'string' || typeof flow.t !== 'string') {
        return notice(400, 'Sign-in expired', 'This sign-in was not started in this browser, or took too long. Open the answer link again.', { headers: { 'set-cookie': clear } });
      }
      // The state binds the answer to the browser that started the sign-in (no logging someone into another's session).
      if (url.searchParams.get('state') !== flow.s) return notice(400, 'Sign-in not recognised', 'The state does not match this browser\'s sign-in. Open the answer link again.', { headers: { 'set-cookie': clear } });
      const error = url.searchParams.get('error');
      if (error) {
        return notice(401, 'Not signed in', `The authorization server said ${error}${url.searchParams.get('error_description') ? ` (${url.searchParams.get('error_description')})` : ''}. Open the answer link to try again.`, { headers: { 'set-cookie': clear } });
      }
      const code = url.searchParams.get('code');
      if (!code) return notice(400, 'Not signed in', 'The authorization server sent no code. Open the answer link again.', { headers: { 'set-cookie': clear } });
      const { metadata, client: ours } = await prepare();
      let client = ours;
      if (typeof flow.c === 'string' && flow.c !== ours.client_id) {
        // Started on a replica that registered its own client: a public client, redeemed with its id and the verifier.
        if (flow.r !== 1) return notice(500, 'Not signed in', 'The replicas of this server sign in as different configured clients; give every replica the same --oauth-sign-in-client-id.', { headers: { 'set-cookie': clear } });
        client = { client_id: flow.c };
      }
      let accessToken: string;
      try {
        const iss = url.searchParams.get('iss');
        const tokens = await exchangeAuthorization(o.issuer, { metadata, clientInformation: client, authorizationCode: code, codeVerifier: flow.v, redirectUri, resource: o.resource, ...(iss ? { iss } : {}) });
        accessToken = tokens.access_token;
      } catch (e) {
        o.log.warn('answer-page sign-in: the code exchange failed', { error: (e as Error).message });
        return notice(401, 'Not signed in', `The authorization server refused the sign-in (${(e as Error).message}). Open the answer link again.`, { headers: { 'set-cookie': clear } });
      }
      const verdict = await o.verify(accessToken);
      if ('reason' in verdict) return notice(403, 'Not signed in', `The sign-in's token is not accepted by this server (${verdict.reason}).`, { headers: { 'set-cookie': clear } });
      const now = Math.floor(Date.now() / 1000);
      const ttl = Math.max(1, Math.min(SESSION_MAX_S, (verdict.expiresAt ?? now + SESSION_MAX_S) - now));
      const session = await seal({ p: verdict.principal }, ttl, 'session');
      const headers = new Headers({ location: `${o.base}${ANSWER_PATH}${encodeURIComponent(flow.t)}`, 'cache-control': 'no-store' });
      headers.append('set-cookie', clear);
      headers.append('set-cookie', `${SESSION_COOKIE}=${session}; Max-Age=${ttl}; ${cookieAttributes}`);
      return new Response(null, { status: 303, headers });
    },
  };
}
