/**
 * A bounded pool of connections to one upstream, per gateway replica, started on demand. A lease is exclusive: a
 * connection serves one call at a time, so what the upstream sends during a call (its progress, its questions) belongs
 * to that call and no other. A connection that broke, or whose call was cut off (cancelled, timed out), is closed
 * when given back and the next lease starts a fresh one.
 */
import { UpstreamConnection, type UpstreamEra, type UpstreamEvents, type UpstreamSession, type UpstreamSpec } from './upstream.js';

export interface Lease {
  conn: UpstreamConnection;
  /** Gives the connection back (closed instead when it broke or was retired). */
  release(): void;
}

interface Waiter {
  resolve(l: Lease): void;
  reject(e: unknown): void;
  signal: AbortSignal | undefined;
  onAbort: () => void;
}

export class UpstreamPool {
  private readonly idle: UpstreamConnection[] = [];
  private readonly all = new Set<UpstreamConnection>();
  private opening = 0;
  private readonly waiters: Waiter[] = [];
  private closed = false;
  /** What the first connection to a stdio upstream learned of its revision: later ones skip the probe. */
  private era: UpstreamEra | undefined;

  constructor(
    readonly spec: UpstreamSpec,
    readonly size: number,
    private readonly events: UpstreamEvents,
    private readonly connectTimeoutMs: number,
  ) {}

  /** Connections open or opening (at most `size`). */
  get count(): number {
    return this.all.size + this.opening;
  }

  /** The next free connection: an idle one, a new one while under the bound, else the first to be given back. */
  async lease(signal?: AbortSignal): Promise<Lease> {
    signal?.throwIfAborted();
    if (this.closed) throw new Error('the gateway is shutting down');
    for (let conn = this.idle.pop(); conn; conn = this.idle.pop()) {
      if (!conn.broken) return this.leaseOf(conn);
      this.drop(conn);
    }
    if (this.count < this.size) return this.leaseOf(await this.openOne());
    return new Promise<Lease>((resolve, reject) => {
      const w: Waiter = {
        resolve,
        reject,
        signal,
        onAbort: () => {
          this.waiters.splice(this.waiters.indexOf(w), 1);
          reject(signal!.reason);
        },
      };
      signal?.addEventListener('abort', w.onAbort, { once: true });
      this.waiters.push(w);
    });
  }

  /** A connection of its own in an existing session of an HTTP upstream (one another replica opened, which a call
   *  resumed here must speak in), closed (its session ended) when given back. */
  async join(session: UpstreamSession): Promise<Lease> {
    if (this.closed) throw new Error('the gateway is shutting down');
    const conn = await UpstreamConnection.open(this.spec, this.events, this.connectTimeoutMs, session);
    return { conn, release: () => void conn.close() };
  }

  /** Opens one connection ahead of the first call (so it does not pay the upstream's start); a failure is left to
   *  the call that needs it. */
  async warm(): Promise<void> {
    if (this.count > 0) return;
    try {
      this.idle.push(await this.openOne());
    } catch {
      /* said again by the first call */
    }
  }

  /**
   * A new connection, outside the pool's bound (the gateway's control connection uses it too). The first connection
   * to a stdio upstream probes its revision; the ones after it reuse what it learned.
   */
  async connect(): Promise<UpstreamConnection> {
    let conn: UpstreamConnection;
    try {
      conn = await UpstreamConnection.open(this.spec, this.events, this.connectTimeoutMs, undefined, this.era);
    } catch (e) {
      // Some 2025-11-25 servers end their process on any request before initialize (the probe): once more, without.
      if (this.spec.kind !== 'stdio' || this.era !== undefined) throw e;
      this.events.log.debug(`${(e as Error).message}; connecting again without the 2026-07-28 probe`);
      conn = await UpstreamConnection.open(this.spec, this.events, this.connectTimeoutMs, undefined, 'legacy');
    }
    if (this.spec.kind === 'stdio' && this.era === undefined) {
      this.era = conn.era;
      this.events.log.info(`upstream "${this.spec.name}" speaks ${conn.era === 'modern' ? '2026-07-28' : '2025-11-25'}`);
    }
    return conn;
  }

  private async openOne(): Promise<UpstreamConnection> {
    this.opening++;
    try {
      const conn = await this.connect();
      this.all.add(conn);
      return conn;
    } finally {
      this.opening--;
    }
  }

  private leaseOf(conn: UpstreamConnection): Lease {
    let given = false;
    return {
      conn,
      release: () => {
        if (given) return;
        given = true;
        conn.relay = undefined;
        this.giveBack(conn);
      },
    };
  }

  private giveBack(conn: UpstreamConnection): void {
    if (conn.broken || this.closed) {
      this.drop(conn);
      // A waiter gets a fresh connection in the place of the closed one.
      const w = this.takeWaiter();
      if (w) this.openOne().then((c) => w.resolve(this.leaseOf(c)), (e) => w.reject(e));
      // Restarted ahead of the next call, as at start.
      else if (!this.closed && this.count === 0) void this.warm();
      return;
    }
    const w = this.takeWaiter();
    if (w) w.resolve(this.leaseOf(conn));
    else this.idle.push(conn);
  }

  private takeWaiter(): Waiter | undefined {
    const w = this.waiters.shift();
    w?.signal?.removeEventListener('abort', w.onAbort);
    return w;
  }

  private drop(conn: UpstreamConnection): void {
    this.all.delete(conn);
    void conn.close();
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const w of this.waiters.splice(0)) w.reject(new Error('the gateway is shutting down'));
    await Promise.all([...this.all].map((c) => c.close()));
    this.all.clear();
    this.idle.length = 0;
  }
}
