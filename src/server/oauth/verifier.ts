/**
 * Access-token verification for the OAuth resource server: JWT access tokens (RFC 9068) checked with jose against
 * the issuer's JWKS (discovered from its RFC 8414 / OIDC metadata), or opaque tokens by RFC 7662 introspection.
 * Produces the SDK's AuthInfo with the principal (issuer + subject) in `extra`; never stores or logs the token.
 */
import { createHash } from 'node:crypto';
import { createRemoteJWKSet, customFetch, decodeJwt, decodeProtectedHeader, errors as joseErrors, jwtVerify, type JWTPayload } from 'jose';
import { discoverAuthorizationServerMetadata } from '@modelcontextprotocol/client';
import { OAuthError, OAuthErrorCode, type AuthInfo, type OAuthTokenVerifier } from '@modelcontextprotocol/server';
import { principalOfClaims, type PrincipalKind } from './principal.js';

/** Asymmetric JWS algorithms a resource server accepts when the issuer's metadata names none (never `none`, never HMAC). */
const ASYMMETRIC_ALGS = ['RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', 'ES256', 'ES384', 'ES512', 'EdDSA', 'Ed25519'];
/** Largest token looked at; anything longer is refused before any parsing. */
const MAX_TOKEN_CHARS = 8192;

export interface IntrospectionCredentials {
  /** The resource server's own client at the authorization server (RFC 7662 §2.1). */
  clientId: string;
  clientSecret: string;
  /** How long an active answer is kept (capped by the token's exp). Default 60 000 ms. */
  cacheMs?: number;
}

export interface TokenVerifierOptions {
  /** Trusted issuers (exact RFC 8414 issuer identifiers). */
  issuers: string[];
  /** This server's resource identifier: the audience every token must carry (RFC 8707). */
  resource: string;
  /** The claim naming the person (default `sub`). */
  principalClaim?: string;
  /** Accept an http:// issuer on a loopback address (tests only). */
  allowHttp?: boolean;
  /** Clock tolerance for exp / nbf / iat, seconds. Default 5. */
  clockToleranceSec?: number;
  /** Minimum time between two JWKS fetches of one issuer (an unknown kid refetches at most this often). Default 30 000 ms. */
  jwksCooldownMs?: number;
  /** Opaque tokens: introspect them at the issuer's introspection_endpoint with these credentials. */
  introspection?: IntrospectionCredentials;
  /** A verified JWT's result is kept this long (capped by its exp; exp / nbf are still checked on every request),
   *  so a signature is checked once per token per replica. 0 verifies every request. Default 60 000 ms. */
  tokenCacheMs?: number;
  /** fetch used for discovery, JWKS and introspection (default globalThis.fetch). */
  fetch?: typeof fetch;
}

interface IssuerState {
  issuer: string;
  algorithms: string[];
  jwks?: ReturnType<typeof createRemoteJWKSet>;
  introspectionEndpoint?: string;
}

interface CachedIntrospection {
  until: number;
  info: AuthInfo | OAuthError;
}

function invalid(reason: string): OAuthError {
  return new OAuthError(OAuthErrorCode.InvalidToken, reason);
}

function isLoopback(hostname: string): boolean {
  return hostname === 'localhost' || hostname === '[::1]' || /^127\.\d+\.\d+\.\d+$/.test(hostname);
}

/** Refuses an issuer that is not https (or, with allowHttp, http on loopback), or carries a query / fragment. */
export function checkIssuer(issuer: string, allowHttp: boolean): void {
  let u: URL;
  try {
    u = new URL(issuer);
  } catch {
    throw new Error(`OAuth issuer "${issuer}" is not a URL`);
  }
  if (u.search || u.hash) throw new Error(`OAuth issuer "${issuer}" must not have a query or fragment (RFC 8414 §2)`);
  if (u.protocol === 'https:') return;
  if (u.protocol === 'http:' && allowHttp && isLoopback(u.hostname)) return;
  if (u.protocol === 'http:' && allowHttp) throw new Error(`OAuth issuer "${issuer}": --oauth-allow-http accepts http:// only on a loopback address`);
  throw new Error(`OAuth issuer "${issuer}" must be https:// (or http:// on loopback with --oauth-allow-http, for tests)`);
}

function scopesOf(claims: Record<string, unknown>): string[] {
  if (typeof claims.scope === 'string') return claims.scope.split(' ').filter(Boolean);
  if (Array.isArray(claims.scp)) return claims.scp.filter((s): s is string => typeof s === 'string');
  return [];
}

function audiences(aud: unknown): string[] {
  if (typeof aud === 'string') return [aud];
  if (Array.isArray(aud)) return aud.filter((a): a is string => typeof a === 'string');
  return [];
}

/** Why jose refused a token, in words a client developer can act on. */
function joseReason(e: unknown): string {
  if (e instanceof joseErrors.JWTExpired) return 'Token has expired';
  if (e instanceof joseErrors.JWTClaimValidationFailed) {
    if (e.claim === 'nbf') return 'Token is not yet valid (nbf)';
    if (e.claim === 'aud') return 'Token was not issued for this resource (aud)';
    if (e.claim === 'iss') return 'Token was issued by another issuer (iss)';
    if (e.claim === 'typ') return 'Token is not a JWT access token (typ must be at+jwt, RFC 9068)';
    return `Token claim "${e.claim}" is invalid: ${e.reason}`;
  }
  if (e instanceof joseErrors.JOSEAlgNotAllowed) return 'Token is signed with an algorithm this issuer does not use';
  if (e instanceof joseErrors.JWKSNoMatchingKey) return 'Token is signed with a key the issuer does not publish';
  if (e instanceof joseErrors.JWSSignatureVerificationFailed) return 'Token signature is invalid';
  if (e instanceof joseErrors.JWSInvalid || e instanceof joseErrors.JWTInvalid) return 'Token is malformed';
  if (e instanceof joseErrors.JOSENotSupported) return 'Token uses an unsupported algorithm or key';
  return 'Token is invalid';
}

export class OAuthJwtVerifier implements OAuthTokenVerifier {
  private readonly issuers = new Map<string, IssuerState>();
  private readonly resource: string;
  private readonly principalClaim: string;
  private readonly clockTolerance: number;
  private readonly fetchFn: typeof fetch;
  private readonly introspectionCache = new Map<string, CachedIntrospection>();
  private readonly jwtCache = new Map<string, { until: number; info: AuthInfo; nbf: number | undefined }>();
  private readyPromise: Promise<void> | undefined;

  constructor(private readonly options: TokenVerifierOptions) {
    if (options.issuers.length === 0) throw new Error('OAuth needs at least one issuer (--oauth-issuer URL)');
    for (const i of options.issuers) checkIssuer(i, !!options.allowHttp);
    this.resource = options.resource;
    this.principalClaim = options.principalClaim ?? 'sub';
    this.clockTolerance = options.clockToleranceSec ?? 5;
    this.fetchFn = options.fetch ?? fetch;
  }

  /** Discovers every issuer's metadata (JWKS URI, algorithms, introspection endpoint). Fails with a clear message. */
  ready(): Promise<void> {
    this.readyPromise ??= this.discoverAll().catch((e) => {
      this.readyPromise = undefined; // a later request tries again
      throw e;
    });
    return this.readyPromise;
  }

  private async discoverAll(): Promise<void> {
    for (const issuer of this.options.issuers) {
      let meta: Awaited<ReturnType<typeof discoverAuthorizationServerMetadata>>;
      try {
        meta = await discoverAuthorizationServerMetadata(issuer, { fetchFn: this.fetchFn as never });
      } catch (e) {
        throw new Error(`OAuth issuer ${issuer}: metadata discovery failed (${(e as Error).message})`);
      }
      if (!meta) throw new Error(`OAuth issuer ${issuer}: no authorization server metadata at its well-known URLs`);
      const m = meta as Record<string, unknown>;
      const advertised = [
        ...(Array.isArray(m.id_token_signing_alg_values_supported) ? m.id_token_signing_alg_values_supported : []),
        ...(Array.isArray(m.access_token_signing_alg_values_supported) ? m.access_token_signing_alg_values_supported : []),
      ].filter((a): a is string => typeof a === 'string' && ASYMMETRIC_ALGS.includes(a));
      const jwksUri = typeof m.jwks_uri === 'string' ? m.jwks_uri : undefined;
      this.issuers.set(issuer, {
        issuer,
        algorithms: advertised.length ? [...new Set(advertised)] : ASYMMETRIC_ALGS,
        ...(jwksUri
          ? { jwks: createRemoteJWKSet(new URL(jwksUri), { cooldownDuration: this.options.jwksCooldownMs ?? 30_000, cacheMaxAge: 600_000, ...(this.options.fetch ? { [customFetch]: this.options.fetch } : {}) }) }
          : {}),
        ...(typeof m.introspection_endpoint === 'string' ? { introspectionEndpoint: m.introspection_endpoint } : {}),
      });
    }
  }

  async verifyAccessToken(token: string): Promise<AuthInfo> {
    if (token.length > MAX_TOKEN_CHARS) throw invalid(`Token is longer than ${MAX_TOKEN_CHARS} characters`);
    try {
      await this.ready();
    } catch (e) {
      throw new OAuthError(OAuthErrorCode.ServerError, (e as Error).message);
    }
    const parts = token.split('.');
    if (parts.length === 3) return this.cachedJwt(token);
    if (this.options.introspection) return this.introspect(token);
    throw invalid('Token is malformed (not a JWT, and this server does not introspect opaque tokens)');
  }

  private async cachedJwt(token: string): Promise<AuthInfo> {
    const cacheMs = this.options.tokenCacheMs ?? 60_000;
    if (cacheMs <= 0) return this.verifyJwt(token);
    const now = Date.now();
    const hit = this.jwtCache.get(token);
    if (hit && hit.until > now) {
      const sec = now / 1000;
      if ((hit.info.expiresAt as number) + this.clockTolerance < sec) throw invalid('Token has expired');
      if (hit.nbf !== undefined && hit.nbf - this.clockTolerance > sec) throw invalid('Token is not yet valid (nbf)');
      return hit.info;
    }
    const info = await this.verifyJwt(token);
    if (this.jwtCache.size >= 10_000) this.jwtCache.delete(this.jwtCache.keys().next().value!);
    this.jwtCache.set(token, { until: Math.min(now + cacheMs, (info.expiresAt as number) * 1000), info, nbf: (info.extra as { nbf?: number }).nbf });
    return info;
  }

  private async verifyJwt(token: string): Promise<AuthInfo> {
    let iss: unknown;
    try {
      decodeProtectedHeader(token);
      iss = decodeJwt(token).iss;
    } catch {
      throw invalid('Token is malformed');
    }
    const state = typeof iss === 'string' ? this.issuers.get(iss) : undefined;
    if (!state) throw invalid(typeof iss === 'string' ? 'Token was issued by an issuer this server does not trust (iss)' : 'Token has no issuer (iss)');
    if (!state.jwks) throw invalid('Token is a JWT but its issuer publishes no JWKS');
    let payload: JWTPayload;
    try {
      ({ payload } = await jwtVerify(token, state.jwks, {
        issuer: state.issuer,
        audience: this.resource,
        algorithms: state.algorithms,
        clockTolerance: this.clockTolerance,
        typ: 'at+jwt',
        requiredClaims: ['exp'],
      }));
    } catch (e) {
      if (e instanceof joseErrors.JWKSTimeout) throw new OAuthError(OAuthErrorCode.ServerError, `The issuer's JWKS did not answer in time`);
      if (!(e instanceof joseErrors.JOSEError)) throw new OAuthError(OAuthErrorCode.ServerError, `The issuer's JWKS could not be fetched`);
      throw invalid(joseReason(e));
    }
    return this.authInfo(token, state.issuer, payload as Record<string, unknown>);
  }

  private authInfo(token: string, issuer: string, claims: Record<string, unknown>, introspected = false): AuthInfo {
    const who = principalOfClaims(issuer, claims, this.principalClaim, { subjectOptional: introspected });
    if (typeof who === 'string') throw invalid(who);
    const clientId = typeof claims.client_id === 'string' ? claims.client_id : typeof claims.azp === 'string' ? claims.azp : '';
    return {
      token,
      clientId,
      scopes: scopesOf(claims),
      expiresAt: claims.exp as number,
      resource: new URL(this.resource),
      extra: { principal: who.principal, kind: who.kind satisfies PrincipalKind, issuer, subject: who.subject, ...(typeof claims.nbf === 'number' ? { nbf: claims.nbf } : {}) },
    };
  }

  private async introspect(token: string): Promise<AuthInfo> {
    const key = createHash('sha256').update(token).digest('base64url');
    const now = Date.now();
    const hit = this.introspectionCache.get(key);
    if (hit && hit.until > now) {
      if (hit.info instanceof OAuthError) throw hit.info;
      return { ...hit.info, token };
    }
    const creds = this.options.introspection!;
    const state = [...this.issuers.values()].find((s) => s.introspectionEndpoint);
    if (!state) throw new OAuthError(OAuthErrorCode.ServerError, 'No trusted issuer advertises an introspection_endpoint');
    let body: Record<string, unknown>;
    try {
      const res = await this.fetchFn(state.introspectionEndpoint!, {
        method: 'POST',
        headers: {
          'content-type': 'application/x-www-form-urlencoded',
          accept: 'application/json',
          authorization: `Basic ${Buffer.from(`${encodeURIComponent(creds.clientId)}:${encodeURIComponent(creds.clientSecret)}`).toString('base64')}`,
        },
        body: new URLSearchParams({ token, token_type_hint: 'access_token' }),
        signal: AbortSignal.timeout(5000),
      });
      if (!res.ok) throw new Error(`HTTP ${res.status}`);
      body = (await res.json()) as Record<string, unknown>;
    } catch (e) {
      throw new OAuthError(OAuthErrorCode.ServerError, `Token introspection failed (${(e as Error).message})`);
    }
    const result = this.introspectionResult(token, state.issuer, body, now);
    // Refusals are kept briefly so junk cannot turn every request into a call to the issuer.
    const until = result instanceof OAuthError ? now + 5_000 : Math.min((result.expiresAt as number) * 1000, now + (creds.cacheMs ?? 60_000));
    if (this.introspectionCache.size > 10_000) this.introspectionCache.clear();
    this.introspectionCache.set(key, { until, info: result instanceof OAuthError ? result : { ...result, token: '' } });
    if (result instanceof OAuthError) throw result;
    return result;
  }

  private introspectionResult(token: string, issuer: string, body: Record<string, unknown>, now: number): AuthInfo | OAuthError {
    if (body.active !== true) return invalid('Token is not active (introspection)');
    if (body.iss !== undefined && body.iss !== issuer) return invalid('Token was issued by another issuer (iss)');
    if (!audiences(body.aud).includes(this.resource)) return invalid('Token was not issued for this resource (aud)');
    if (typeof body.exp !== 'number') return invalid('Token has no expiration time');
    if (body.exp + this.clockTolerance < now / 1000) return invalid('Token has expired');
    if (typeof body.nbf === 'number' && body.nbf - this.clockTolerance > now / 1000) return invalid('Token is not yet valid (nbf)');
    try {
      return this.authInfo(token, issuer, body, true);
    } catch (e) {
      return e as OAuthError;
    }
  }
}
