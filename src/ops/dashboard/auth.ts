/**
 * Who may use the dashboard. Operators are configured as token → name, either allowed to act or only to look.
 * A browser signs in once with its token and gets a session (sessions.ts: a random id in an HttpOnly, SameSite=Strict
 * cookie, kept in the store, so it works on every replica and ends everywhere when signed out or when its token is no
 * longer configured); a CSRF value derived from the session id guards every action.
 * Scripts send `Authorization: Bearer TOKEN` instead (no ambient credential, so no CSRF value is needed).
 * Without any token the dashboard serves loopback only, to one local operator who may act.
 */
import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { OperatorSessions } from './sessions.js';

export type OperatorRole = 'act' | 'look';

export interface Operator {
  name: string;
  role: OperatorRole;
  /** How the request proved it: a signed-in browser (needs the CSRF value), a bearer token, or loopback. */
  via: 'cookie' | 'bearer' | 'loopback';
  /** The key the CSRF value is derived from (a browser's: its session id, which signing out ends). */
  key: string;
}

export interface OperatorTokens {
  /** token → name: may act (cancel, acknowledge). */
  operators?: Record<string, string>;
  /** token → name: may look only. */
  readonly?: Record<string, string>;
}

export const COOKIE = 'outlast_operator';

function digest(token: string): string {
  return createHash('sha256').update(`outlast-operator:${token}`).digest('base64url');
}

function cookieOf(req: IncomingMessage, name: string): string | undefined {
  for (const part of (req.headers.cookie ?? '').split(';')) {
    const i = part.indexOf('=');
    if (i > 0 && part.slice(0, i).trim() === name) return part.slice(i + 1).trim();
  }
  return undefined;
}

function same(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

export class OperatorAuth {
  private readonly byDigest = new Map<string, { name: string; role: OperatorRole }>();
  /** Signs the local operator's CSRF value when no tokens are configured (one process; loopback only). */
  private readonly localKey = randomBytes(32).toString('base64url');

  /** `sessions`: where browsers' sign-ins are kept; without it only bearer tokens are taken (a scrape of /metrics). */
  constructor(tokens: OperatorTokens, private readonly sessions?: OperatorSessions) {
    for (const [token, name] of Object.entries(tokens.readonly ?? {})) this.add(token, name, 'look');
    for (const [token, name] of Object.entries(tokens.operators ?? {})) this.add(token, name, 'act');
  }

  private add(token: string, name: string, role: OperatorRole): void {
    if (token.length < 8) throw new Error(`Operator token for "${name}" is too short: use at least 8 characters (16 random bytes or more is better)`);
    this.byDigest.set(digest(token), { name, role });
  }

  /** Tokens are configured (so the dashboard may listen beyond loopback). */
  get configured(): boolean {
    return this.byDigest.size > 0;
  }

  /** The operator behind a sign-in token, with the cookie value of the session opened for it. */
  async signIn(token: string): Promise<{ operator: { name: string; role: OperatorRole }; cookie: string } | undefined> {
    const d = digest(token);
    const operator = this.byDigest.get(d);
    return operator && this.sessions ? { operator, cookie: await this.sessions.open(operator.name, d) } : undefined;
  }

  /** Ends a browser's session on every replica (signing out). */
  async signOut(op: Operator): Promise<void> {
    if (op.via === 'cookie') await this.sessions?.end(op.key);
  }

  async identify(req: IncomingMessage): Promise<Operator | undefined> {
    if (!this.configured) return { name: 'local', role: 'act', via: 'loopback', key: this.localKey };
    if (/^Bearer\s/i.test(req.headers.authorization ?? '')) return this.bearer(req);
    const c = cookieOf(req, COOKIE);
    const tokenDigest = c && this.sessions ? await this.sessions.check(c) : undefined;
    // A session of a token no longer configured (rotated, removed) is refused.
    const o = tokenDigest ? this.byDigest.get(tokenDigest) : undefined;
    return o ? { ...o, via: 'cookie', key: c! } : undefined;
  }

  /** The operator whose token a request sends as `Authorization: Bearer TOKEN` (scripts, a Prometheus scrape). */
  bearer(req: IncomingMessage): Operator | undefined {
    const m = /^Bearer\s+(\S+)$/i.exec(req.headers.authorization ?? '');
    if (!m) return undefined;
    const d = digest(m[1]!);
    const o = this.byDigest.get(d);
    return o ? { ...o, via: 'bearer', key: d } : undefined;
  }

  /** The CSRF value every form of this operator carries. */
  csrf(op: Operator): string {
    return createHmac('sha256', op.key).update('outlast-dashboard-csrf').digest('base64url');
  }

  /** Whether a state-changing request carries what proves it came from the dashboard itself. */
  csrfOk(op: Operator, field: string | undefined): boolean {
    if (op.via === 'bearer') return true;
    return typeof field === 'string' && same(field, this.csrf(op));
  }
}
