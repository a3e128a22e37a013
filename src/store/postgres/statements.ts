/**
 * How the store sends a statement without relying on a session (design 19): a transaction-mode pooler hands each
 * transaction to whichever server connection is free, so nothing may outlive one.
 *
 * - Deadline: the statement deadline is kept by this process, not by a `statement_timeout` set at connect (a pooler
 *   refuses or forgets start-up parameters): past it, a cancel request goes to the address the connection was opened
 *   to (PostgreSQL, or the pooler, which forwards it to the server connection running the statement), and the
 *   statement fails with PostgreSQL's own 57014. The client-side `query_timeout` stays the black-hole deadline.
 *   The cancel is sent only once the database is seen to answer (a statement answered after this one was sent, or
 *   a probe): a cancel for a statement lost in a black hole cancels nothing, and through PgBouncer it costs the pool
 *   its one connection attempt and restarts its `server_login_retry` wait, so the pooler came back a retry later.
 * - Prepared statements: named ones (parsed once per connection) only when they are kept. `prepared_statements=on`
 *   (a direct connection, or a pooler that keeps them per client: PgBouncer ≥ 1.21 with `max_prepared_statements`),
 *   `off` (unnamed statements: parse, bind and execute in one round trip, which any pooler passes), or `auto` (the
 *   default): on only when the connection is seen to reach PostgreSQL itself (the server's own port and address are
 *   the ones this process connected to), off otherwise, so Debian's PgBouncer 1.18 works as configured by default.
 * - A migration under a running replica: a named statement whose result a migration changed under its plan (SQLSTATE
 *   0A000, "cached plan must not change result type") is prepared again and retried once, and its connection, whose
 *   other statements were planned before the migration too, is not reused. The store's statements name their columns,
 *   so an added column changes no result; this covers what the migration rule forbids and a release may still do.
 */
import { createConnection } from 'node:net';
import { performance } from 'node:perf_hooks';
import type pg from 'pg';
import type { KeptPool } from './kept-pool.js';
import { sqlStateOf } from './timeouts.js';
import { beginInSchema } from './schema-names.js';

export type PreparedMode = 'on' | 'off' | 'auto';
export const PREPARED_MODES: readonly PreparedMode[] = ['on', 'off', 'auto'];

interface ClientInternals {
  host?: string;
  port?: number;
  processID?: number | null;
  secretKey?: number | null;
  connection?: { stream?: { remoteAddress?: string; remotePort?: number } };
}

/**
 * Sends PostgreSQL's CancelRequest for whatever `client` is running (a new short connection to the same address).
 * Best effort: a database that cannot be reached is the query deadline's business.
 */
export function sendCancel(client: pg.ClientBase, timeoutMs = 2000): void {
  const c = client as unknown as ClientInternals;
  if (c.processID == null || c.secretKey == null) return;
  const msg = Buffer.alloc(16);
  msg.writeInt32BE(16, 0);
  msg.writeInt32BE(80877102, 4);
  msg.writeInt32BE(c.processID, 8);
  msg.writeInt32BE(c.secretKey, 12);
  const host = c.host ?? 'localhost';
  const port = c.port ?? 5432;
  const socket = host.startsWith('/') ? createConnection(`${host}/.s.PGSQL.${port}`) : createConnection(port, host);
  // Written, then held open until the other side closes it: PgBouncer drops a cancel whose sender hung up before
  // it was forwarded.
  const timer = setTimeout(() => socket.destroy(), timeoutMs);
  timer.unref?.();
  socket.on('error', () => undefined);
  socket.on('close', () => clearTimeout(timer));
  socket.on('end', () => socket.destroy());
  socket.on('connect', () => socket.write(msg));
}

/**
 * When the database last answered one of the store's statements, and whether it answers now: a statement past its
 * deadline is cancelled only if the database answered anything after that statement was sent (its connections are
 * alive, the statement is slow), else after `probe` (a trivial statement) is answered. One probe at a time.
 */
export class DatabaseAnswers {
  private lastAt = -Infinity;
  private probing: Promise<void> | undefined;

  constructor(private readonly probe: () => Promise<unknown>) {}

  /** A statement got an answer (rows, or an error from the server). */
  answered(): void {
    this.lastAt = performance.now();
  }

  /** Whether the database answered after `since` (performance.now()), probing it if nothing did. */
  async answeredSince(since: number): Promise<boolean> {
    if (this.lastAt > since) return true;
    this.probing ??= this.probe().then(
      () => this.answered(),
      () => undefined,
    ).finally(() => (this.probing = undefined));
    await this.probing;
    return this.lastAt > since;
  }
}

/**
 * Runs one statement on a connection of `pool`; past `deadlineMs` (0: none) it is cancelled on the server (once
 * `answers` says the database answers; without it, at once). Errors drop the connection, as `pool.query` does (a
 * timed-out one may be in any state), and so does a cancel sent; only the server's refusal of the statement alone
 * (severity ERROR: a duplicate key, a check) leaves the session as it was, and keeps it.
 */
export async function runStatement<R extends pg.QueryResultRow>(pool: KeptPool, config: pg.QueryConfig, deadlineMs: number, answers?: DatabaseAnswers): Promise<pg.QueryResult<R>> {
  const client = pool.take() ?? (await pool.connect());
  let timer: NodeJS.Timeout | undefined;
  let failed: Error | undefined;
  // A connection that dies while checked out emits 'error' (the pooler or the database went away): the query
  // fails with it; unheard, it would end the process.
  const onError = (e: Error) => (failed ??= e);
  client.on('error', onError);
  let cancelSent = false;
  let settled = false;
  let stalePlans = false;
  const sentAt = performance.now();
  try {
    if (deadlineMs > 0) {
      timer = setTimeout(() => {
        void (answers ? answers.answeredSince(sentAt) : Promise.resolve(true)).then((live) => {
          // Checked when sending: once released, the connection may run another caller's statement.
          if (!live || settled) return;
          cancelSent = true;
          sendCancel(client);
        });
      }, deadlineMs);
    }
    let result: pg.QueryResult<R>;
    try {
      result = await client.query<R>(config);
    } catch (e) {
      if (!planInvalidated(e)) throw e;
      // Planned before a migration changed its result (nothing ran): prepared again, unnamed (parsed and planned
      // afresh, through any pooler), once. The connection's other statements are as stale: it is not reused.
      answers?.answered();
      stalePlans = true;
      const { name: _stale, ...unnamed } = config;
      result = await client.query<R>(unnamed);
    }
    answers?.answered();
    return result;
  } catch (e) {
    failed = e as Error;
    // An error with a SQLSTATE is the server's answer, if a refusal.
    if (sqlStateOf(e) !== undefined) answers?.answered();
    throw e;
  } finally {
    settled = true;
    if (timer) clearTimeout(timer);
    client.removeListener('error', onError);
    // A cancel on its way may land on whatever this connection runs next: it is not reused.
    pool.release(client, cancelSent ? new Error('a cancel request was sent on this connection') : stalePlans ? STALE_PLANS : failed && !refusedAlone(failed) ? failed : undefined);
  }
}

const STALE_PLANS = new Error('this connection prepared statements before a migration changed their results');

/** The server refused the statement and nothing else: its session goes on (FATAL and PANIC end it). */
function refusedAlone(e: Error): boolean {
  return (e as { severity?: unknown }).severity === 'ERROR' && sqlStateOf(e) !== undefined;
}

/** PostgreSQL refused to run a prepared statement whose result a migration changed (nothing of it ran). */
export function planInvalidated(e: unknown): boolean {
  return sqlStateOf(e) === '0A000' && /cached plan must not change result type/i.test((e as Error).message);
}

/**
 * Runs `fn` in a transaction on a connection of `pool` that names its tables by `search_path` (./schema-names.ts).
 * A statement of it refused because a migration changed its result under its plan makes the transaction the thing
 * retried: rolled back, and run once more on another connection (nothing of the first committed).
 */
export async function runTransaction<T>(pool: KeptPool, schema: string, statementTimeoutMs: number, fn: (c: pg.PoolClient) => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    const c = await pool.connect();
    let lost: Error | undefined;
    const onError = (e: Error) => (lost ??= e);
    c.on('error', onError);
    try {
      await c.query(beginInSchema(schema, statementTimeoutMs));
      const out = await fn(c);
      await c.query('COMMIT');
      return out;
    } catch (e) {
      await c.query('ROLLBACK').catch(() => undefined);
      if (planInvalidated(e)) lost ??= STALE_PLANS;
      if (attempt > 1 || !planInvalidated(e)) throw e;
    } finally {
      c.removeListener('error', onError);
      pool.release(c, lost);
    }
  }
}

/** Whether `client` reaches PostgreSQL itself: the server's port and address are the ones it connected to. */
export async function reachesServerDirectly(client: pg.ClientBase): Promise<boolean> {
  const r = (await client.query<{ addr: string | null; port: string }>(`SELECT host(inet_server_addr()) AS addr, current_setting('port') AS port`)).rows[0];
  if (!r) return false;
  const c = client as unknown as ClientInternals;
  if (Number(r.port) !== Number(c.port ?? 5432)) return false;
  const remote = c.connection?.stream?.remoteAddress;
  if (r.addr === null) return remote === undefined;
  return remote !== undefined && normalise(remote) === normalise(r.addr);
}

function normalise(addr: string): string {
  return addr.replace(/^::ffff:/, '');
}

/** Whether a connection error is a pooler refusing a start-up parameter. */
export function poolerRefusal(message: string): string | undefined {
  const m = /unsupported startup parameter(?: in options)?: ?(\S+)/i.exec(message);
  if (!m) return undefined;
  return `a connection pooler refused the start-up parameter "${m[1]}" (Outlast sets none of its own: remove it from the store URL, or list it in the pooler's ignore_startup_parameters)`;
}
