/**
 * The OAuth tests' authorization server and "browser": starts fixtures/oidc-as.ts (oidc-provider) as a real process on
 * loopback, plays a person at its login and consent forms (a cookie-jar fetch that submits the forms it is shown), and
 * gets tokens the way a client does (authorization code + PKCE S256 with `resource`, refresh, client credentials).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { ROOT } from './helpers.js';

const AS = join(ROOT, 'dist', 'fixtures', 'oidc-as.js');
const started = new Set<ChildProcess>();
process.on('exit', () => {
  for (const p of started) if (p.exitCode === null) p.kill('SIGKILL');
});

export interface AuthServer {
  issuer: string;
  pid: number;
  stop(): Promise<void>;
  /** Signs `claims` with the AS's current signing key (a test control, to forge tokens the AS would not issue). */
  sign(claims: Record<string, unknown>, header?: Record<string, unknown>): Promise<string>;
  rotate(): Promise<void>;
  retireOldKey(): Promise<void>;
  jwksHits(): Promise<number>;
}

export async function startAuthServer(opts: { jwtResources?: string[]; opaqueResources?: string[]; accessTtlS?: number; registration?: boolean } = {}): Promise<AuthServer> {
  const proc = spawn(process.execPath, [AS], {
    cwd: ROOT,
    env: {
      ...process.env,
      NODE_ENV: 'test',
      OIDC_AS_JWT_RESOURCES: (opts.jwtResources ?? []).join(','),
      OIDC_AS_OPAQUE_RESOURCES: (opts.opaqueResources ?? []).join(','),
      ...(opts.accessTtlS ? { OIDC_AS_ACCESS_TTL_S: String(opts.accessTtlS) } : {}),
      ...(opts.registration === false ? { OIDC_AS_NO_REGISTRATION: '1' } : {}),
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  started.add(proc);
  let err = '';
  proc.stderr!.on('data', (d) => (err += d));
  const issuer = await new Promise<string>((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error(`oidc-as did not start in 20 s:\n${err}`)), 20_000);
    proc.stdout!.on('data', (d) => {
      out += d;
      const m = /oidc-as listening on (\S+)/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]!);
      }
    });
    proc.once('exit', (c) => reject(new Error(`oidc-as exited (${c}):\n${err}`)));
    if (process.env.OIDC_AS_DEBUG) proc.stderr!.pipe(process.stderr);
  });
  const post = async (path: string, body?: unknown) => (await fetch(issuer + path, { method: 'POST', ...(body ? { body: JSON.stringify(body) } : {}) })).json() as Promise<Record<string, any>>;
  const server: AuthServer = {
    issuer,
    pid: proc.pid!,
    async stop() {
      if (proc.exitCode !== null || proc.signalCode !== null) return;
      const gone = new Promise((r) => proc.once('exit', r));
      process.kill(proc.pid!, 'SIGTERM');
      await gone;
      started.delete(proc);
    },
    async sign(claims, header) {
      return (await post('/_test/sign', { claims, header })).token as string;
    },
    async rotate() {
      await post('/_test/rotate');
    },
    async retireOldKey() {
      await post('/_test/retire');
    },
    async jwksHits() {
      return ((await (await fetch(issuer + '/_test/jwks-hits')).json()) as { hits: number }).hits;
    },
  };
  return server;
}

/** A person at the browser: follows redirects from `url`, submits oidc-provider's login form as `user` and its
 *  consent form, and returns the URL the AS finally redirects to outside itself (the client's redirect_uri). */
export async function playBrowser(url: string, user: string, opts: { follow?: boolean } = {}): Promise<string> {
  const jar = new Map<string, string>();
  const origin = new URL(url).origin;
  let next: { url: string; method: 'GET' | 'POST'; body?: URLSearchParams } = { url, method: 'GET' };
  for (let hop = 0; hop < 20; hop++) {
    const res = await fetch(next.url, {
      method: next.method,
      redirect: 'manual',
      headers: {
        cookie: [...jar].map(([k, v]) => `${k}=${v}`).join('; '),
        ...(next.body ? { 'content-type': 'application/x-www-form-urlencoded' } : {}),
      },
      ...(next.body ? { body: next.body } : {}),
    });
    for (const c of res.headers.getSetCookie()) {
      const [pair] = c.split(';');
      const i = pair!.indexOf('=');
      jar.set(pair!.slice(0, i), pair!.slice(i + 1));
    }
    if (res.status >= 300 && res.status < 400) {
      const location = new URL(res.headers.get('location')!, next.url).href;
      await res.arrayBuffer();
      if (new URL(location).origin !== origin) {
        if (opts.follow) await (await fetch(location)).arrayBuffer();
        return location;
      }
      next = { url: location, method: 'GET' };
      continue;
    }
    const html = await res.text();
    const action = /<form[^>]*action="([^"]+)"/.exec(html)?.[1];
    if (!action) throw new Error(`the authorization server showed no form (HTTP ${res.status}): ${html.slice(0, 500)}`);
    const form = new URLSearchParams();
    for (const [tag] of html.matchAll(/<input[^>]*>/g)) {
      const name = /name="([^"]+)"/.exec(tag)?.[1];
      if (name) form.set(name, /value="([^"]*)"/.exec(tag)?.[1] ?? '');
    }
    if (form.has('login')) form.set('login', user);
    if (form.has('password')) form.set('password', 'any');
    next = { url: new URL(action.replaceAll('&amp;', '&'), next.url).href, method: 'POST', body: form };
  }
  throw new Error('too many hops at the authorization server');
}

export interface Tokens {
  access_token: string;
  refresh_token?: string;
  scope?: string;
  expires_in?: number;
}

const b64url = (b: Buffer) => b.toString('base64url');

async function tokenRequest(issuer: string, form: Record<string, string>, basic?: [string, string]): Promise<Tokens> {
  const res = await fetch(`${issuer}/token`, {
    method: 'POST',
    headers: {
      'content-type': 'application/x-www-form-urlencoded',
      ...(basic ? { authorization: `Basic ${Buffer.from(`${basic[0]}:${basic[1]}`).toString('base64')}` } : {}),
    },
    body: new URLSearchParams(form),
  });
  const body = (await res.json()) as Tokens & { error?: string; error_description?: string };
  if (!res.ok) throw new Error(`token request failed: ${res.status} ${body.error}: ${body.error_description}`);
  return body;
}

/** A person's tokens for `resource` through the public client `app`: authorization code + PKCE S256. */
export async function userTokens(as: AuthServer, user: string, resource: string, scope = 'openid offline_access tasks'): Promise<Tokens> {
  const verifier = b64url(randomBytes(32));
  const challenge = b64url(createHash('sha256').update(verifier).digest());
  const redirect = 'http://127.0.0.1:1/callback';
  const state = b64url(randomBytes(8));
  const authorize = new URL(`${as.issuer}/auth`);
  for (const [k, v] of Object.entries({ client_id: 'app', response_type: 'code', redirect_uri: redirect, scope, resource, state, code_challenge: challenge, code_challenge_method: 'S256', prompt: 'consent' })) {
    authorize.searchParams.set(k, v);
  }
  const back = new URL(await playBrowser(authorize.href, user));
  const code = back.searchParams.get('code');
  if (!code || back.searchParams.get('state') !== state) throw new Error(`no code in the redirect: ${back.href}`);
  return tokenRequest(as.issuer, { grant_type: 'authorization_code', code, code_verifier: verifier, redirect_uri: redirect, client_id: 'app', resource });
}

export function refreshTokens(as: AuthServer, refreshToken: string, resource: string): Promise<Tokens> {
  return tokenRequest(as.issuer, { grant_type: 'refresh_token', refresh_token: refreshToken, client_id: 'app', resource });
}

export function machineToken(as: AuthServer, resource: string, scope = 'tasks'): Promise<Tokens> {
  return tokenRequest(as.issuer, { grant_type: 'client_credentials', resource, scope }, ['machine', 'machine-secret']);
}
