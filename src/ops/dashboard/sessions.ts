/**
 * A browser's sign-in to the dashboard: a random session id in the cookie, and a row in the store (keyed by a digest
 * of the id) that every replica and `outlast dashboard` read. A session ends when it is signed out (the row goes,
 * everywhere at once), when its lifetime or idle timeout passes (on the store's clock), or when the operator token it
 * was opened with is no longer configured (a rotated token). The id is also the key of the session's CSRF value.
 */
import { createHash, randomBytes } from 'node:crypto';
import type { OperatorSessionStore } from '../../store/types.js';

/** A sign-in lasts at most this long, however it is used. */
export const DEFAULT_SESSION_MS = 12 * 3_600_000;
/** A sign-in not used for this long ends. */
export const DEFAULT_SESSION_IDLE_MS = 3_600_000;
/** Sessions kept per operator token (a script signing in in a loop keeps no more). */
const KEEP_PER_TOKEN = 100;

export interface SessionPolicy {
  lifetimeMs: number;
  idleMs: number;
}

/** What the store keeps for a session id: a digest, so reading the store gives no one a cookie. */
function storedId(cookie: string): string {
  return createHash('sha256').update(`outlast-dashboard-session:${cookie}`).digest('base64url');
}

export class OperatorSessions {
  constructor(
    private readonly store: OperatorSessionStore,
    private readonly now: () => number,
    readonly policy: SessionPolicy,
  ) {}

  /** Opens a session for the operator behind `tokenDigest`; returns the cookie's value. */
  async open(operator: string, tokenDigest: string): Promise<string> {
    const cookie = randomBytes(32).toString('base64url');
    const now = this.now();
    await this.store.open({ id: storedId(cookie), operator, tokenDigest, createdAt: now, lastSeenAt: now, expiresAt: now + this.policy.lifetimeMs }, KEEP_PER_TOKEN);
    return cookie;
  }

  /** The token digest of a live session (its last use recorded), or undefined: unknown, signed out or expired. */
  async check(cookie: string): Promise<string | undefined> {
    if (!/^[A-Za-z0-9_-]{43}$/.test(cookie)) return undefined;
    const id = storedId(cookie);
    const s = await this.store.get(id);
    if (!s) return undefined;
    const now = this.now();
    if (now >= s.expiresAt || now - s.lastSeenAt >= this.policy.idleMs) {
      await this.store.end(id);
      return undefined;
    }
    // The last use is written at most every tenth of the idle timeout (and every minute): one write, not one per page.
    if (now - s.lastSeenAt >= Math.min(60_000, this.policy.idleMs / 10)) await this.store.touch(id, now);
    return s.tokenDigest;
  }

  /** Signs a session out, for every replica. */
  async end(cookie: string): Promise<void> {
    await this.store.end(storedId(cookie));
  }
}
