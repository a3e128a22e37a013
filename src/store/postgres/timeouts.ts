/**
 * Deadlines on every PostgreSQL connection (the pool, the heartbeat lane, the signal bus): a database that stops
 * answering is a failure the caller hears about, never a wait. Set in the store URL; the defaults are below.
 */
import type pg from 'pg';

export interface PgTimeouts {
  /** Opening a connection, or waiting for a free one in the pool, ms. */
  connectTimeoutMs: number;
  /** Client side: a query with no answer after this fails and its connection is dropped (a black hole), ms. */
  queryTimeoutMs: number;
  /** Server side: a statement running longer (locks, a stalled disk) is cancelled on the server, ms. 0: off. Kept
   *  by this process (a cancel request past it: ./statements.ts), not set on the session, so it holds through a
   *  transaction-mode pooler. */
  statementTimeoutMs: number;
  /** TCP keep-alive: first probe after this much idle time, ms. 0: off. */
  keepAliveMs: number;
  /** The LISTEN connection is pinged this often and re-established when a ping is not answered in as long, ms. */
  signalPingMs: number;
}

export const DEFAULT_PG_TIMEOUTS: PgTimeouts = {
  connectTimeoutMs: 5_000,
  queryTimeoutMs: 10_000,
  statementTimeoutMs: 8_000,
  keepAliveMs: 10_000,
  signalPingMs: 5_000,
};

/** The store URL's query parameters, by setting. */
export const TIMEOUT_PARAMS: Record<string, keyof PgTimeouts> = {
  connect_timeout_ms: 'connectTimeoutMs',
  query_timeout_ms: 'queryTimeoutMs',
  statement_timeout_ms: 'statementTimeoutMs',
  keepalive_ms: 'keepAliveMs',
  signal_ping_ms: 'signalPingMs',
};

/** Takes the timeout parameters out of a store URL (they are Outlast's, not node-postgres's). */
export function takeTimeoutParams(u: URL, shown: string): Partial<PgTimeouts> {
  const out: Partial<PgTimeouts> = {};
  for (const [param, key] of Object.entries(TIMEOUT_PARAMS)) {
    const v = u.searchParams.get(param);
    if (v === null) continue;
    u.searchParams.delete(param);
    const n = Number(v);
    const min = key === 'statementTimeoutMs' || key === 'keepAliveMs' ? 0 : 1;
    if (!/^\d+$/.test(v) || n < min || n > 3_600_000) throw new Error(`Invalid store "${shown}": ${param} must be an integer number of milliseconds from ${min} to 3600000`);
    out[key] = n;
  }
  return out;
}

export function checkTimeouts(t: PgTimeouts): void {
  for (const [param, key] of Object.entries(TIMEOUT_PARAMS)) {
    const n = t[key];
    const min = key === 'statementTimeoutMs' || key === 'keepAliveMs' ? 0 : 1;
    if (!Number.isInteger(n) || n < min) throw new RangeError(`PostgreSQL ${param} must be an integer >= ${min} (ms), got ${n}`);
  }
}

/** node-postgres settings carrying the client-side deadlines (nothing on the session: the statement deadline is
 *  ./statements.ts's); `queryTimeoutMs` overrides the client-side query deadline. */
export function withTimeouts(config: pg.ClientConfig, t: PgTimeouts, queryTimeoutMs = t.queryTimeoutMs): pg.ClientConfig {
  return {
    ...config,
    connectionTimeoutMillis: t.connectTimeoutMs,
    query_timeout: queryTimeoutMs,
    keepAlive: t.keepAliveMs > 0,
    ...(t.keepAliveMs > 0 ? { keepAliveInitialDelayMillis: t.keepAliveMs } : {}),
  };
}

/**
 * Whether an error from node-postgres means the database could not be reached or did not answer in time (as
 * opposed to refusing the statement). Errors with no SQLSTATE are the driver's own: refused, reset, timed out.
 */
export function isUnreachable(e: unknown): boolean {
  const code = sqlStateOf(e);
  // 08 connection exception, 53 insufficient resources, 57 operator intervention (incl. 57014 statement timeout), 58 system error.
  if (code !== undefined) return /^(08|53|57|58)/.test(code);
  return e instanceof Error;
}

/** The SQLSTATE of an error the server sent; undefined for the driver's own errors (refused, reset, timed out). */
export function sqlStateOf(e: unknown): string | undefined {
  const code = (e as { code?: unknown } | null)?.code;
  return typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) ? code : undefined;
}
