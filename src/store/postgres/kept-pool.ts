/**
 * The store's connections: a `pg` pool that keeps its last connection at hand. Statements sent one after another (a
 * handler stepping, a workflow's writes) take it and give it back without pg-pool's checkout and release, which cost
 * about 20 µs of a 150 µs round trip on loopback (a promise, a tick, a timer and several events each way). The kept
 * connection goes to whoever asks first, transactions included, and back to the pool whenever somebody waits there,
 * so it never stands idle while a caller waits. Every statement is still its own transaction (design 19): keeping a
 * connection between them is what any pooler client does.
 */
import type pg from 'pg';

/** Whether a client may run another statement; pg-pool reads the same two fields before it keeps one idle. */
function queryable(c: pg.PoolClient): boolean {
  const state = c as unknown as { _queryable?: boolean; _ending?: boolean };
  return state._queryable !== false && state._ending !== true;
}

export class KeptPool {
  private kept: pg.PoolClient | undefined;
  private ended = false;
  /** A kept connection that dies while idle (the server restarted, a pooler closed it) is dropped, not kept. */
  private readonly keptFailed = (e: Error): void => this.take()?.release(e);

  constructor(readonly pool: pg.Pool) {}

  /** The kept connection, now, if it is idle (the caller gives it back with `release`). */
  take(): pg.PoolClient | undefined {
    const c = this.kept;
    if (!c) return undefined;
    this.kept = undefined;
    c.removeListener('error', this.keptFailed);
    return c;
  }

  /** A connection: the kept one if idle, else one of the pool's (waiting for it when all are busy). */
  connect(): Promise<pg.PoolClient> {
    const c = this.take();
    return c ? Promise.resolve(c) : this.pool.connect();
  }

  /**
   * Gives a connection back: kept when none is and nobody waits for the pool, else released to it; with `error`
   * (the connection failed, or may be in any state) it is dropped, as pg-pool's `release(error)` does.
   */
  release(c: pg.PoolClient, error?: Error): void {
    if (error || this.kept || this.ended || this.pool.waitingCount > 0 || !queryable(c)) return c.release(error);
    c.on('error', this.keptFailed);
    this.kept = c;
  }

  /** One statement outside the store's deadlines (the clock's samples). */
  async query<R extends pg.QueryResultRow>(text: string): Promise<pg.QueryResult<R>> {
    const c = await this.connect();
    let failed: Error | undefined;
    try {
      return await c.query<R>(text);
    } catch (e) {
      failed = e as Error;
      throw e;
    } finally {
      this.release(c, failed);
    }
  }

  /** Closes every connection (the kept one first: the pool ends only when all are back). */
  end(): Promise<void> {
    this.ended = true;
    this.take()?.release();
    return this.pool.end();
  }
}
