/**
 * Signals between replicas through PostgreSQL LISTEN/NOTIFY (the carrier of a RemoteSignalBus, ../remote-bus.ts):
 * one connection of its own LISTENs, sends go on another. NOTIFY is never sent inside a task write (a NOTIFY in a
 * transaction takes a global lock at commit); payloads stay under PostgreSQL's 8000-byte limit.
 *
 * LISTEN needs a session: through a transaction-mode pooler notifications are dropped. Such a deployment gives
 * `--bus` a direct (or session-mode) URL for this connection alone, or `--bus redis://…` (../redis/bus.ts).
 */
import pg from 'pg';
import { RemoteSignalBus, type BusTransport } from '../remote-bus.js';

export interface PgSignalBusOptions {
  connection: pg.ClientConfig;
  /** Channel name shared by the replicas of one deployment. */
  channel: string;
  /** Largest payload, bytes (PostgreSQL refuses 8000 and more). */
  maxPayloadBytes?: number;
  /** Least time between two sends while signals keep coming, ms. Default 2. */
  coalesceMs?: number;
  /** Period of the listening connection's ping, and its deadline, ms. Default 5000. */
  pingMs?: number;
  /** Longest wait between reconnection attempts, ms. Default 1000. */
  maxReconnectDelayMs?: number;
  onError?: (message: string) => void;
}

class PgTransport implements BusTransport {
  private listener: pg.Client | undefined;
  private notifier: pg.Pool | undefined;

  constructor(private readonly connection: pg.ClientConfig, private readonly channel: string) {}

  async listen(onMessage: (payload: string) => void, onLost: (why: string) => void): Promise<void> {
    if (!this.notifier) {
      this.notifier = new pg.Pool({ ...this.connection, max: 1 });
      this.notifier.on('error', () => undefined);
    }
    const client = new pg.Client(this.connection);
    this.listener = client;
    client.on('error', (e) => onLost(e.message));
    client.on('end', () => onLost('connection ended'));
    client.on('notification', (n) => {
      if (n.channel === this.channel && n.payload) onMessage(n.payload);
    });
    await client.connect();
    await client.query(`LISTEN ${quoteIdent(this.channel)}`);
  }

  async ping(): Promise<void> {
    if (!this.listener) throw new Error('not listening');
    await this.listener.query('SELECT 1');
  }

  async dropListener(): Promise<void> {
    const client = this.listener;
    this.listener = undefined;
    if (!client) return;
    // Destroyed, not ended: a connection into a black hole would wait for an answer to its goodbye for ever.
    (client as unknown as { connection?: { stream?: { destroy(): void } } }).connection?.stream?.destroy();
    await client.end().catch(() => undefined);
  }

  async send(payloads: string[]): Promise<void> {
    if (!this.notifier) throw new Error('not started');
    await this.notifier.query({ text: 'SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p', values: [this.channel, payloads] });
  }

  async close(): Promise<void> {
    await this.notifier?.end().catch(() => undefined);
  }
}

export class PgSignalBus extends RemoteSignalBus {
  readonly carrier = 'postgres';
  private readonly where: string;

  constructor(options: PgSignalBusOptions) {
    const { connection, channel, ...rest } = options;
    super(new PgTransport(connection, channel), { maxPayloadBytes: 7900, ...rest });
    this.where = describeConnection(connection);
  }

  protected override notHeard(ms: number): string {
    return `signals do not arrive through PostgreSQL ${this.where}: a NOTIFY this replica sent was not heard back within ${ms} ms. ` +
      'LISTEN cannot work through a transaction-mode pooler (PgBouncer, Supavisor, a Neon -pooler host): start with ' +
      '--bus postgres://… (a direct or session-mode URL, used for signals only) or --bus redis://HOST:PORT, or --bus none (other replicas re-read, with delays)';
  }
}

/** host:port/database of a connection, without credentials (for messages). */
export function describeConnection(c: pg.ClientConfig): string {
  if (c.connectionString) {
    try {
      const u = new URL(c.connectionString);
      return `${u.host}${u.pathname}`;
    } catch {
      return '(the given connection string)';
    }
  }
  return `${c.host ?? 'localhost'}:${c.port ?? 5432}/${c.database ?? ''}`;
}

/** A SQL identifier, quoted. */
export function quoteIdent(name: string): string {
  return `"${name.replace(/"/g, '""')}"`;
}
