/**
 * Dashboard sign-ins kept where every replica and `outlast dashboard` read them: one row per session, keyed by a
 * digest of the browser's random session id (the id itself, the cookie, is stored nowhere), with the operator's
 * name, a digest of the operator token it was opened with (a session whose token is no longer configured is refused,
 * so rotating a token ends its sessions), and its times on the store's clock. Signing out deletes the row, so the
 * cookie stops working on every replica at once. Both backends implement OperatorSessionStore.
 */

/** The migration that adds the sessions (both backends). */
export const OPERATOR_SESSIONS_MIGRATION = 15;

export interface OperatorSession {
  /** A digest of the session id the cookie carries. */
  id: string;
  /** The operator's name when the session was opened (for the log). */
  operator: string;
  /** A digest of the operator token the session was opened with. */
  tokenDigest: string;
  createdAt: number;
  /** The last request seen (written at most every so often: see the dashboard's idle timeout). */
  lastSeenAt: number;
  /** When it ends however it is used. */
  expiresAt: number;
}

export interface OperatorSessionStore {
  /** Records a new session; in the same write, removes sessions that expired by `session.createdAt` and, past
   *  `keepPerToken`, the oldest sessions of the same token (a script signing in in a loop keeps a bounded number). */
  open(session: OperatorSession, keepPerToken: number): Promise<void>;
  /** The session, or undefined when there is none (never opened, signed out, or removed). */
  get(id: string): Promise<OperatorSession | undefined>;
  /** Records a request of the session at `now`. */
  touch(id: string, now: number): Promise<void>;
  /** Ends a session (signing out); false when there was none. */
  end(id: string): Promise<boolean>;
}

/** The session table of migration 15, in a backend's column types. */
export function operatorSessionsTable(t: { text: string; time: string }): string {
  return `
CREATE TABLE operator_sessions (
  session_id   ${t.text} PRIMARY KEY,
  operator     ${t.text} NOT NULL,
  token_digest ${t.text} NOT NULL,
  created_at   ${t.time} NOT NULL,
  last_seen_at ${t.time} NOT NULL,
  expires_at   ${t.time} NOT NULL
);
-- Used by: the bound of sessions per token (the newest kept), and the purge of expired ones.
CREATE INDEX operator_sessions_token ON operator_sessions (token_digest, created_at);
CREATE INDEX operator_sessions_expiry ON operator_sessions (expires_at);
`;
}

/** A row as both backends read it. */
export interface OperatorSessionRow {
  session_id: string;
  operator: string;
  token_digest: string;
  created_at: number | string;
  last_seen_at: number | string;
  expires_at: number | string;
}

export function toOperatorSession(r: OperatorSessionRow): OperatorSession {
  return { id: r.session_id, operator: r.operator, tokenDigest: r.token_digest, createdAt: Number(r.created_at), lastSeenAt: Number(r.last_seen_at), expiresAt: Number(r.expires_at) };
}

/** The statements, the same text on both backends but for the placeholders. */
export function operatorSessionStatements(p: (i: number) => string): Record<'insert' | 'purgeExpired' | 'keepNewest' | 'get' | 'touch' | 'end', string> {
  return {
    insert: `INSERT INTO operator_sessions (session_id, operator, token_digest, created_at, last_seen_at, expires_at) VALUES (${p(1)}, ${p(2)}, ${p(3)}, ${p(4)}, ${p(4)}, ${p(5)})`,
    purgeExpired: `DELETE FROM operator_sessions WHERE expires_at <= ${p(1)}`,
    keepNewest: `DELETE FROM operator_sessions WHERE token_digest = ${p(1)} AND session_id NOT IN
      (SELECT session_id FROM operator_sessions WHERE token_digest = ${p(1)} ORDER BY created_at DESC, session_id LIMIT ${p(2)})`,
    get: `SELECT session_id, operator, token_digest, created_at, last_seen_at, expires_at FROM operator_sessions WHERE session_id = ${p(1)}`,
    touch: `UPDATE operator_sessions SET last_seen_at = ${p(2)} WHERE session_id = ${p(1)} AND last_seen_at < ${p(2)}`,
    end: `DELETE FROM operator_sessions WHERE session_id = ${p(1)}`,
  };
}
