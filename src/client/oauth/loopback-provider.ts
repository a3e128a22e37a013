/**
 * The OAuthClientProvider of `outlast call` / `login` and of TaskClient users who want a person to sign in: the
 * authorization code flow with PKCE S256 and a loopback redirect (RFC 8252: 127.0.0.1, an ephemeral port, one
 * callback, `state` checked), client registration by pre-registered id, Client ID Metadata Document or dynamic
 * registration (the SDK picks, in the spec's order), or client credentials for machines. Credentials are kept per
 * resource and issuer in a CredentialStore (0600) or in memory; the verifier, state and discovery stay in memory.
 */
import { randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type {
  OAuthClientInformationContext,
  OAuthClientMetadata,
  OAuthDiscoveryState,
  StoredOAuthClientInformation,
  StoredOAuthTokens,
} from '@modelcontextprotocol/client';
import type { CredentialStore, IssuerCredentials } from './credential-store.js';
import { OAuthAuthorizationError, type InteractiveOAuthProvider } from './oauth-fetch.js';

export interface LoopbackOAuthOptions {
  /** The MCP server (the protected resource) these credentials are for: the store's key. */
  serverUrl: string | URL;
  /** Persist client registrations and tokens here; default: memory only (gone with the process). */
  store?: CredentialStore;
  /** Shows the person the authorization URL (print it, open a browser, or, in tests, play the browser). */
  onAuthorizationUrl?: (url: URL) => void | Promise<void>;
  /** A pre-registered client (takes precedence over registration). */
  clientId?: string;
  clientSecret?: string;
  /** A Client ID Metadata Document URL (https, used when the authorization server supports them). */
  clientMetadataUrl?: string;
  /** Machines: the client credentials grant with clientId / clientSecret, no person, no browser. */
  clientCredentials?: boolean;
  /** How long to wait for the person to finish signing in. Default 300 000 ms. */
  callbackTimeoutMs?: number;
  clientName?: string;
}

function isLoopbackUrl(u: URL): boolean {
  return u.protocol === 'http:' && (u.hostname === '127.0.0.1' || u.hostname === 'localhost' || u.hostname === '[::1]');
}

const DONE_PAGE = '<!doctype html><meta charset="utf-8"><title>Outlast</title><p>Signed in. You can close this tab and return to the terminal.</p>\n';
const FAILED_PAGE = '<!doctype html><meta charset="utf-8"><title>Outlast</title><p>Sign-in did not complete. Return to the terminal for the reason.</p>\n';

export class LoopbackOAuthProvider implements InteractiveOAuthProvider {
  readonly clientMetadataUrl: string | undefined;
  private readonly resource: string;
  private readonly memory = new Map<string, IssuerCredentials>();
  private verifier: string | undefined;
  private expectedState: string | undefined;
  private discovery: OAuthDiscoveryState | undefined;
  private server: Server | undefined;
  private port: number | undefined;
  private callback: { resolve(v: { code: string; iss?: string }): void; reject(e: Error): void } | undefined;
  private callbackResult: Promise<{ code: string; iss?: string }> | undefined;

  constructor(private readonly options: LoopbackOAuthOptions) {
    this.resource = URL.canParse(String(options.serverUrl)) ? new URL(options.serverUrl).href : String(options.serverUrl); // a bad URL is the client's to report
    this.clientMetadataUrl = options.clientMetadataUrl;
    if (options.clientCredentials && (!options.clientId || !options.clientSecret)) throw new Error('client credentials need a client id and secret');
  }

  get redirectUrl(): string | undefined {
    if (this.options.clientCredentials) return undefined;
    return `http://127.0.0.1${this.port ? `:${this.port}` : ''}/callback`;
  }

  get clientMetadata(): OAuthClientMetadata {
    if (this.options.clientCredentials) {
      return { client_name: this.options.clientName ?? 'Outlast', redirect_uris: [], grant_types: ['client_credentials'], token_endpoint_auth_method: 'client_secret_basic' };
    }
    // No scope here: the server's challenge or metadata says which to ask for.
    return {
      client_name: this.options.clientName ?? 'Outlast',
      redirect_uris: [this.redirectUrl!],
      application_type: 'native',
      token_endpoint_auth_method: this.options.clientSecret ? 'client_secret_basic' : 'none',
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
    } as OAuthClientMetadata;
  }

  /** Binds the loopback callback (an ephemeral port on 127.0.0.1) before any authorization request names it. */
  async prepare(): Promise<void> {
    if (this.options.clientCredentials || this.server) return;
    const server = createServer((req, res) => {
      const u = new URL(req.url ?? '/', 'http://127.0.0.1');
      if (u.pathname !== '/callback' || !this.callback) return void res.writeHead(404, { 'content-type': 'text/plain' }).end('Not found\n');
      const { resolve, reject } = this.callback;
      const state = u.searchParams.get('state');
      const code = u.searchParams.get('code');
      const error = u.searchParams.get('error');
      if (state !== this.expectedState) {
        res.writeHead(400, { 'content-type': 'text/html; charset=utf-8' }).end(FAILED_PAGE);
        return reject(new OAuthAuthorizationError('The authorization response carries the wrong state (another sign-in, or a forged redirect); nothing was used'));
      }
      this.callback = undefined;
      if (error || !code) {
        res.writeHead(400, { 'content-type': 'text/html; charset=utf-8' }).end(FAILED_PAGE);
        // error_description is not shown: the response's issuer is not checked yet (RFC 9207).
        return reject(new OAuthAuthorizationError(`The authorization server refused the sign-in (${error ?? 'no code'})`, error ?? undefined));
      }
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end(DONE_PAGE);
      const iss = u.searchParams.get('iss');
      resolve({ code, ...(iss !== null ? { iss } : {}) });
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => resolve());
    });
    server.unref();
    this.server = server;
    this.port = (server.address() as AddressInfo).port;
  }

  /** Stops the loopback listener (idempotent). */
  close(): void {
    this.server?.close();
    this.server?.closeAllConnections?.();
    this.server = undefined;
    this.port = undefined;
  }

  /** With a store: one process at a time signs in or refreshes for these credentials. */
  withLock<T>(fn: () => Promise<T>): Promise<T> {
    return this.options.store ? this.options.store.withLock(fn) : fn();
  }

  state(): string {
    this.expectedState = randomBytes(16).toString('base64url');
    return this.expectedState;
  }

  private entry(issuer: string | undefined): IssuerCredentials {
    if (this.options.store) {
      if (issuer) return this.options.store.get(this.resource, issuer);
      return this.options.store.latest(this.resource)?.entry ?? {};
    }
    if (issuer) return this.memory.get(issuer) ?? {};
    return [...this.memory.values()].filter((e) => e.tokens).at(-1) ?? {};
  }

  private change(issuer: string, f: (e: IssuerCredentials) => IssuerCredentials): void {
    if (this.options.store) this.options.store.update(this.resource, issuer, f);
    else this.memory.set(issuer, f(this.memory.get(issuer) ?? {}));
  }

  clientInformation(ctx?: OAuthClientInformationContext): StoredOAuthClientInformation | undefined {
    if (this.options.clientId) {
      // Registered in advance at the authorization server being asked: stamped with its issuer (SEP-2352).
      return { client_id: this.options.clientId, ...(this.options.clientSecret ? { client_secret: this.options.clientSecret } : {}), ...(ctx?.issuer ? { issuer: ctx.issuer } : {}) } as StoredOAuthClientInformation;
    }
    return this.entry(ctx?.issuer).client as StoredOAuthClientInformation | undefined;
  }

  saveClientInformation(info: StoredOAuthClientInformation, ctx?: OAuthClientInformationContext): void {
    const issuer = ctx?.issuer ?? (info as { issuer?: string }).issuer ?? 'unknown';
    this.change(issuer, (e) => ({ ...e, client: info as unknown as Record<string, unknown> }));
  }

  tokens(ctx?: OAuthClientInformationContext): StoredOAuthTokens | undefined {
    const t = this.entry(ctx?.issuer).tokens;
    if (!t) return undefined;
    const { saved_at: _s, ...tokens } = t;
    return tokens as unknown as StoredOAuthTokens;
  }

  saveTokens(tokens: StoredOAuthTokens, ctx?: OAuthClientInformationContext): void {
    const issuer = ctx?.issuer ?? (tokens as { issuer?: string }).issuer ?? 'unknown';
    this.change(issuer, (e) => ({ ...e, tokens: { ...(tokens as unknown as Record<string, unknown>), saved_at: Date.now() } }));
  }

  async redirectToAuthorization(url: URL): Promise<void> {
    // Only a real authorization endpoint is ever shown to a person (no javascript:, file:, or remote http:).
    if (url.protocol !== 'https:' && !isLoopbackUrl(url)) throw new OAuthAuthorizationError(`Refusing to open an authorization URL that is not https: ${url.protocol}//${url.host}`);
    const methods = (this.discovery?.authorizationServerMetadata as { code_challenge_methods_supported?: string[] } | undefined)?.code_challenge_methods_supported;
    if (this.discovery?.authorizationServerMetadata && !methods?.includes('S256')) {
      throw new OAuthAuthorizationError('The authorization server does not advertise PKCE S256 (code_challenge_methods_supported); refusing to authorize');
    }
    this.callbackResult = new Promise((resolve, reject) => (this.callback = { resolve, reject }));
    this.callbackResult.catch(() => undefined);
    const timeoutMs = this.options.callbackTimeoutMs ?? 300_000;
    const timer = setTimeout(() => this.callback?.reject(new OAuthAuthorizationError(`Sign-in did not finish within ${Math.round(timeoutMs / 1000)} s`)), timeoutMs);
    timer.unref();
    // The listener keeps the process alive only while a person is signing in.
    this.server?.ref();
    void this.callbackResult
      .finally(() => {
        clearTimeout(timer);
        this.server?.unref();
      })
      .catch(() => undefined);
    if (this.options.onAuthorizationUrl) await this.options.onAuthorizationUrl(url);
    else process.stderr.write(`Open this URL to sign in:\n  ${url.href}\n`);
  }

  async waitForAuthorizationCode(): Promise<{ code: string; iss?: string }> {
    if (!this.callbackResult) throw new OAuthAuthorizationError('No sign-in is in progress');
    try {
      return await this.callbackResult;
    } finally {
      this.callbackResult = undefined;
    }
  }

  saveCodeVerifier(v: string): void {
    this.verifier = v;
  }
  codeVerifier(): string {
    if (!this.verifier) throw new OAuthAuthorizationError('No PKCE verifier saved for this sign-in');
    return this.verifier;
  }
  saveDiscoveryState(state: OAuthDiscoveryState): void {
    this.discovery = state;
  }
  discoveryState(): OAuthDiscoveryState | undefined {
    return this.discovery;
  }

  prepareTokenRequest(scope?: string): URLSearchParams | undefined {
    if (!this.options.clientCredentials) return undefined;
    return new URLSearchParams({ grant_type: 'client_credentials', ...(scope ? { scope } : {}) });
  }

  invalidateCredentials(scope: 'all' | 'client' | 'tokens' | 'verifier' | 'discovery'): void {
    if (scope === 'verifier' || scope === 'all') this.verifier = undefined;
    if (scope === 'discovery' || scope === 'all') this.discovery = undefined;
    if (scope === 'verifier' || scope === 'discovery') return;
    const issuers = this.options.store ? undefined : [...this.memory.keys()];
    if (scope === 'all' && this.options.store) return void this.options.store.forget(this.resource);
    if (this.options.store) {
      const known = (this.discovery?.authorizationServerMetadata as { issuer?: string } | undefined)?.issuer;
      const issuer = known ?? this.options.store.latest(this.resource)?.issuer;
      if (issuer) this.options.store.update(this.resource, issuer, (e) => (scope === 'client' ? { ...e, client: undefined } : { ...e, tokens: undefined }));
      return;
    }
    for (const i of issuers!) {
      const e = this.memory.get(i)!;
      this.memory.set(i, scope === 'all' ? {} : scope === 'client' ? { ...e, client: undefined } : { ...e, tokens: undefined });
    }
  }
}
