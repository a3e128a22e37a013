/**
 * Signals between replicas through Redis (or Valkey) pub/sub: the carrier of a RemoteSignalBus (../remote-bus.ts)
 * that needs no PostgreSQL session, for a store reached through a transaction-mode pooler (`--bus redis://…`).
 * One connection SUBSCRIBEs (pinged; re-established by the bus with backoff when lost), another PUBLISHes (it
 * reconnects by itself; while it is down a send fails at once instead of queueing, and the subscribers' re-reads
 * cover the gap). Redis holds no state of Outlast's: only "re-read task X" passes through it.
 */
import type { createClient as CreateClient } from '@redis/client';
import { RemoteSignalBus, type BusTransport } from '../remote-bus.js';

export interface RedisSignalBusOptions {
  /** redis://[USER:PASSWORD@]HOST:PORT[/DB] or rediss://… */
  url: string;
  /** Channel shared by the replicas of one deployment. */
  channel: string;
  /** Opening a connection, and waiting for a PUBLISH, ms. Default 5000. */
  connectTimeoutMs?: number;
  coalesceMs?: number;
  pingMs?: number;
  maxReconnectDelayMs?: number;
  onError?: (message: string) => void;
}

// The client library is loaded by the first bus that listens: a server without a Redis bus never pays its start-up
// (about a fifth of a process's module loading).
let redisClient: Promise<typeof CreateClient> | undefined;
const loadRedis = () => (redisClient ??= import('@redis/client').then((m) => m.createClient));

/** A client that fails a command at once while disconnected (no offline queue); `reconnect`: by itself, with backoff. */
function newClient(createClient: typeof CreateClient, url: string, timeoutMs: number, reconnect: boolean) {
  return createClient({
    url,
    disableOfflineQueue: true,
    socket: { connectTimeout: timeoutMs, reconnectStrategy: reconnect ? (retries: number) => Math.min(50 * 2 ** retries, 500) : false },
  });
}
type Client = ReturnType<typeof newClient>;

class RedisTransport implements BusTransport {
  private subscriber: Client | undefined;
  private publisher: Client | undefined;
  private publisherReady: Promise<unknown> | undefined;

  constructor(private readonly url: string, private readonly channel: string, private readonly timeoutMs: number) {}

  async listen(onMessage: (payload: string) => void, onLost: (why: string) => void): Promise<void> {
    const createClient = await loadRedis();
    if (!this.publisher) {
      const pub = newClient(createClient, this.url, this.timeoutMs, true);
      pub.on('error', () => undefined);
      this.publisher = pub;
      this.publisherReady = pub.connect().catch(() => undefined);
    }
    const sub = newClient(createClient, this.url, this.timeoutMs, false);
    this.subscriber = sub;
    sub.on('error', (e: Error) => onLost(e.message));
    sub.on('end', () => onLost('connection ended'));
    await sub.connect();
    await sub.subscribe(this.channel, (message: string) => onMessage(message));
    await this.publisherReady;
  }

  async ping(): Promise<void> {
    if (!this.subscriber) throw new Error('not listening');
    await this.subscriber.ping();
  }

  async dropListener(): Promise<void> {
    const sub = this.subscriber;
    this.subscriber = undefined;
    if (sub?.isOpen) sub.destroy();
  }

  async send(payloads: string[]): Promise<void> {
    const pub = this.publisher;
    if (!pub?.isReady) throw new Error(`Redis ${redact(this.url)} is not connected`);
    let timer: NodeJS.Timeout | undefined;
    try {
      await Promise.race([
        Promise.all(payloads.map((p) => pub.publish(this.channel, p))),
        new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`no answer from Redis within ${this.timeoutMs} ms`)), this.timeoutMs))),
      ]);
    } finally {
      clearTimeout(timer);
    }
  }

  async close(): Promise<void> {
    const pub = this.publisher;
    this.publisher = undefined;
    if (pub?.isOpen) pub.destroy();
  }
}

export class RedisSignalBus extends RemoteSignalBus {
  readonly carrier = 'redis';

  constructor(options: RedisSignalBusOptions) {
    const { url, channel, connectTimeoutMs, ...rest } = options;
    // Redis has no payload limit worth the name; batches stay the size PostgreSQL's would.
    super(new RedisTransport(url, channel, connectTimeoutMs ?? 5000), { maxPayloadBytes: 7900, ...rest });
    this.where = redact(url);
  }

  private readonly where: string;

  protected override notHeard(ms: number, why: string): string {
    return `signals do not arrive through Redis ${this.where}: ${why} (is it a Redis or Valkey server, reachable from every replica?)`;
  }
}

/** A Redis URL without its password (for messages). */
export function redact(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return 'the given Redis URL';
  }
}
