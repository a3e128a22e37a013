/**
 * The front as an OAuth 2.1 resource server (MCP authorization, RFC 9728 / 6750 / 8707), on web-standard Request and
 * Response only so any front (node:http, Fetch, Express, Hono) calls the same two functions: `metadata(request)` for
 * the protected-resource metadata document, `authenticate(request)` for every request to the MCP endpoint.
 * The SDK's helpers do the parsing, challenges and documents; Outlast adds the verifier and the principal.
 */
import {
  bearerAuthChallengeResponse,
  buildOAuthProtectedResourceMetadata,
  getOAuthProtectedResourceMetadataUrl,
  oauthMetadataResponse,
  verifyBearerToken,
  type AuthInfo,
  type OAuthMetadata,
  type OAuthTokenVerifier,
} from '@modelcontextprotocol/server';
import { OAuthJwtVerifier, checkIssuer, type IntrospectionCredentials } from './verifier.js';

/** The front's `oauth` option (and `outlast serve --oauth-*`). */
export interface OAuthFrontOptions {
  /** Trusted authorization servers (issuer identifiers); the first is advertised first. `--oauth-issuer` (repeatable). */
  issuers: string[];
  /** This server's resource identifier: the audience every token must carry, and the metadata's `resource`. `--oauth-resource`. */
  resource: string;
  /** Scopes every request needs (also advertised as scopes_supported). `--oauth-scopes a,b`. */
  scopes?: string[];
  /** The claim that names the person (default `sub`). `--oauth-principal-claim`. */
  principalClaim?: string;
  /** Accept http:// issuers on loopback (tests only). `--oauth-allow-http`. */
  allowHttp?: boolean;
  /** Opaque access tokens: RFC 7662 introspection with the resource server's own client. */
  introspection?: IntrospectionCredentials;
  /** Minimum gap between two JWKS fetches of an issuer (default 30 000 ms). */
  jwksCooldownMs?: number;
  /** A verified JWT is remembered this long, capped by its exp (0: verify the signature on every request). Default 60 000 ms. */
  tokenCacheMs?: number;
  /** Clock tolerance for exp / nbf, seconds (default 5). */
  clockToleranceSec?: number;
  /** Advertised as resource_name. */
  resourceName?: string;
  /** The answer page's client at the first issuer, for signing people in (redirect URI `<public URL>/answer/signed-in`).
   *  Without it the page registers itself (RFC 7591) if the issuer offers registration. `--oauth-sign-in-client-id`,
   *  its secret (none for a public client) in $OUTLAST_OAUTH_SIGN_IN_CLIENT_SECRET. */
  signInClient?: { clientId: string; clientSecret?: string };
  /** Another verifier (e.g. an in-house one); replaces the JWT / introspection verifier. */
  verifier?: OAuthTokenVerifier;
}

export interface OAuthResourceServer {
  /** The RFC 9728 path-aware metadata URL for the resource (what 401 challenges point to). */
  readonly metadataUrl: string;
  /** Discovers the issuers' metadata now (startup fails fast on a wrong issuer). */
  ready(): Promise<void>;
  /** The protected-resource metadata answer when `request` asks for it, else undefined. */
  metadata(request: Request): Response | undefined;
  /** A verified token's AuthInfo (principal in `extra.principal`), or the 401 / 403 / 500 answer to send instead. */
  authenticate(request: Request): Promise<{ authInfo: AuthInfo } | { response: Response }>;
  /** The same from the Authorization header's value alone (for fronts that have no Request at hand). */
  authenticateHeader(authorization: string | null | undefined): Promise<{ authInfo: AuthInfo } | { response: Response }>;
}

export function createOAuthResourceServer(options: OAuthFrontOptions): OAuthResourceServer {
  const allowHttp = !!options.allowHttp;
  for (const issuer of options.issuers) checkIssuer(issuer, allowHttp);
  let resourceUrl: URL;
  try {
    resourceUrl = new URL(options.resource);
  } catch {
    throw new Error(`--oauth-resource "${options.resource}" is not a URL`);
  }
  if (resourceUrl.hash) throw new Error(`--oauth-resource "${options.resource}" must not have a fragment`);
  const requiredScopes = options.scopes ?? [];
  const verifier = options.verifier ?? new OAuthJwtVerifier(options);
  const metadataUrl = getOAuthProtectedResourceMetadataUrl(resourceUrl);
  const metadataOptions = (issuer: string) => ({
    // Only `issuer` is read for the resource metadata; the authorization-server mirror is never served (see below).
    oauthMetadata: { issuer } as OAuthMetadata,
    resourceServerUrl: resourceUrl,
    ...(requiredScopes.length ? { scopesSupported: requiredScopes } : {}),
    ...(options.resourceName ? { resourceName: options.resourceName } : {}),
    dangerouslyAllowInsecureIssuerUrl: allowHttp,
  });
  // Built once: validates every issuer the SDK's way, and lists them all (the SDK's builder names one).
  const documents = options.issuers.map((i) => buildOAuthProtectedResourceMetadata(metadataOptions(i)));
  const document = { ...documents[0]!, resource: options.resource, authorization_servers: [...options.issuers] };
  const metadataPath = new URL(metadataUrl).pathname;
  const bearerOptions = { verifier, requiredScopes, resourceMetadataUrl: metadataUrl, expectedResource: resourceUrl };

  async function authenticateHeader(authorization: string | null | undefined): Promise<{ authInfo: AuthInfo } | { response: Response }> {
    // As the SDK's web gate: only the credentials before a comma (one Authorization header's first value).
    const [header] = (authorization ?? '').split(',');
    try {
      return { authInfo: await verifyBearerToken(header || undefined, bearerOptions) };
    } catch (e) {
      return { response: bearerAuthChallengeResponse(e, bearerOptions) };
    }
  }

  return {
    metadataUrl,
    ready: () => (verifier instanceof OAuthJwtVerifier ? verifier.ready() : Promise.resolve()),
    metadata(request) {
      const path = new URL(request.url).pathname.replace(/(.)\/$/, '$1');
      // The authorization-server mirror the SDK also answers is not ours to serve: only the resource's own document.
      if (path !== metadataPath) return undefined;
      const answer = oauthMetadataResponse(request, metadataOptions(options.issuers[0]!))!;
      if (answer.status !== 200 || request.method !== 'GET') return answer;
      return Response.json(document, { headers: answer.headers });
    },
    authenticate(request) {
      return authenticateHeader(request.headers.get('authorization'));
    },
    authenticateHeader,
  };
}
