/**
 * Signals between replicas through LISTEN/NOTIFY. The row stays the truth; a signal only says "re-read task X".
 *
 * - NOTIFY is never sent inside a task write (a NOTIFY in a transaction takes a global lock at commit): signals
 *   published during one event-loop turn are coalesced, deduplicated and sent afterwards on a connection of their
 *   own, packed into payloads under PostgreSQL's 8000-byte limit. While one send is in flight, the next batch
 *   gathers, and under load batches leave at most every `coalesceMs` (each NOTIFY is a commit that costs the
 *   database CPU the task writes need); a signal after a quiet spell leaves at once.
 * - One dedicated connection LISTENs. When it drops (database restart, network) or stops answering (a ping every
 *   `pingMs` must come back within as long: a black hole never ends a TCP connection by itself), it is destroyed and
 *   reconnected with backoff; while it is down every local subscriber re-reads once per `pingMs` (the fallback poll
 *   covering the gap), and once more after it is back, since signals sent meanwhile are lost.
 * - Signals reach this process's own subscribers at once, without the round trip; a replica ignores its own
 *   notifications.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { LocalSignalBus, type SignalBus, type SignalKind, type TaskSignal } from '../local-bus.js';

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
  /** Longest wait between reconnection attempts, ms. Default 5000. */
  maxReconnectDelayMs?: number;
  onError?: (message: string) => void;
}

const KIND_CODE: Record<SignalKind, string> = { changed: 'c', cancel: 'x', input: 'i', queue: 'q' };
const CODE_KIND: Record<string, SignalKind> = { c: 'changed', x: 'cancel', i: 'input', q: 'queue' };

export class PgSignalBus implements SignalBus {
  private readonly local = new LocalSignalBus();
  private readonly resyncListeners = new Set<() => void>();
  private readonly sender = randomBytes(6).toString('base64url');
  private readonly opts: Required<Omit<PgSignalBusOptions, 'onError'>> & Pick<PgSignalBusOptions, 'onError'>;
  private listener: pg.Client | undefined;
  private notifier: pg.Pool | undefined;
  /** Pending signals, deduplicated: kind code + task id. */
  private pending = new Set<string>();
  private sending = false;
  private scheduled = false;
  private closed = false;
  /** Sends are failing (database unreachable): reported once, not per batch. */
  private sendFailing = false;
  private reconnectTimer: NodeJS.Timeout | undefined;
  private reconnectDelay = 50;
  private pingTimer: NodeJS.Timeout | undefined;
  /** While the listening connection is down: the fallback re-reads. */
  private gapTimer: NodeJS.Timeout | undefined;
  /** Times the listening connection was (re)established; 1 after start. */
  connections = 0;

  constructor(options: PgSignalBusOptions) {
    this.opts = { maxPayloadBytes: 7900, maxReconnectDelayMs: 5000, coalesceMs: 2, pingMs: 5000, ...options };
  }

  async start(): Promise<void> {
    this.notifier = new pg.Pool({ ...this.opts.connection, max: 1 });
    this.notifier.on('error', () => undefined);
    await this.listen();
  }

  private async listen(): Promise<void> {
    const client = new pg.Client(this.opts.connection);
    let lost = false;
    const onLost = (why: string) => {
      if (lost) return;
      lost = true;
      if (this.listener === client) {
        this.listener = undefined;
        this.stopPing();
      }
      // Destroyed, not ended: a connection into a black hole would wait for an answer to its goodbye for ever.
      (client as unknown as { connection?: { stream?: { destroy(): void } } }).connection?.stream?.destroy();
      client.end().catch(() => undefined);
      if (this.closed) return;
      this.opts.onError?.(`signal connection lost (${why}); reconnecting, and re-reading every ${this.opts.pingMs} ms meanwhile`);
      this.startGapPoll();
      this.scheduleReconnect();
    };
    client.on('error', (e) => onLost(e.message));
    client.on('end', () => onLost('connection ended'));
    client.on('notification', (n) => {
      if (n.channel === this.opts.channel && n.payload) this.receive(n.payload);
    });
    await client.connect();
    await client.query(`LISTEN ${quoteIdent(this.opts.channel)}`);
    if (this.closed) {
      await client.end().catch(() => undefined);
      return;
    }
    this.listener = client;
    this.connections++;
    this.reconnectDelay = 50;
    this.stopGapPoll();
    this.startPing(client, onLost);
  }

  /** A ping that is not answered before the next one is due means the connection is gone, whatever TCP says. */
  private startPing(client: pg.Client, onLost: (why: string) => void): void {
    this.stopPing();
    let inFlight = false;
    this.pingTimer = setInterval(() => {
      if (inFlight) return onLost(`no answer to a ping within ${this.opts.pingMs} ms`);
      inFlight = true;
      client.query('SELECT 1').then(
        () => (inFlight = false),
        (e: Error) => onLost(e.message),
      );
    }, this.opts.pingMs);
    this.pingTimer.unref?.();
  }

  private stopPing(): void {
    if (this.pingTimer) clearInterval(this.pingTimer);
    this.pingTimer = undefined;
  }

  private startGapPoll(): void {
    if (this.gapTimer || this.closed) return;
    this.gapTimer = setInterval(() => this.resync(), this.opts.pingMs);
    this.gapTimer.unref?.();
  }

  private stopGapPoll(): void {
    if (this.gapTimer) clearInterval(this.gapTimer);
    this.gapTimer = undefined;
  }

  private scheduleReconnect(): void {
    if (this.reconnectTimer || this.closed) return;
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = undefined;
      this.listen().then(
        () => this.resync(),
        (e: Error) => {
          this.opts.onError?.(`signal connection: ${e.message}; retrying in ${this.reconnectDelay} ms`);
          this.reconnectDelay = Math.min(this.reconnectDelay * 2, this.opts.maxReconnectDelayMs);
          this.scheduleReconnect();
        },
      );
    }, this.reconnectDelay);
    this.reconnectTimer.unref?.();
  }

  /** After a gap in listening: every local subscriber re-reads, whatever it waits for. */
  private resync(): void {
    for (const taskId of this.local.taskIds()) {
      for (const kind of ['changed', 'cancel', 'input'] as const) this.local.publish({ taskId, kind });
    }
    for (const l of [...this.resyncListeners]) l();
  }

  onResync(listener: () => void): () => void {
    this.resyncListeners.add(listener);
    return () => void this.resyncListeners.delete(listener);
  }

  private receive(payload: string): void {
    const parts = payload.split(' ');
    if (parts[0] === this.sender) return;
    for (let i = 1; i < parts.length; i++) {
      const p = parts[i]!;
      const kind = CODE_KIND[p[0]!];
      if (kind) this.local.publish({ taskId: p.slice(1), kind });
    }
  }

  publish(signal: TaskSignal): void {
    this.local.publish(signal);
    if (this.closed) return;
    this.pending.add(KIND_CODE[signal.kind] + signal.taskId);
    if (!this.scheduled && !this.sending) {
      this.scheduled = true;
      setImmediate(() => void this.flush());
    }
  }

  private async flush(): Promise<void> {
    this.scheduled = false;
    if (this.sending || this.pending.size === 0 || !this.notifier) return;
    this.sending = true;
    const batch = [...this.pending];
    this.pending = new Set();
    const payloads: string[] = [];
    let current = this.sender;
    for (const s of batch) {
      if (Buffer.byteLength(current) + 1 + Buffer.byteLength(s) > this.opts.maxPayloadBytes) {
        payloads.push(current);
        current = this.sender;
      }
      current += ' ' + s;
    }
    payloads.push(current);
    try {
      await this.notifier.query({ text: 'SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p', values: [this.opts.channel, payloads] });
      if (this.sendFailing) {
        this.sendFailing = false;
        this.opts.onError?.('signals are being sent again');
      }
    } catch (e) {
      // Lost signals are covered by the subscribers' fallback re-reads; the rows hold the truth.
      if (!this.closed && !this.sendFailing) {
        this.sendFailing = true;
        this.opts.onError?.(`could not send signals (${(e as Error).message}); other replicas fall back to re-reading until this recovers`);
      }
    } finally {
      this.sending = false;
      if (this.pending.size > 0 && !this.closed && !this.scheduled) {
        this.scheduled = true;
        setTimeout(() => void this.flush(), this.opts.coalesceMs).unref?.();
      }
    }
  }

  subscribe(taskId: string, listener: (signal: TaskSignal) => void): () => void {
    return this.local.subscribe(taskId, listener);
  }

  subscribeAll(listener: (signal: TaskSignal) => void): () => void {
    return this.local.subscribeAll(listener);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    // Send what is queued before leaving.
    if (this.pending.size > 0 && !this.sending) await this.flush();
    this.closed = true;
    if (this.reconnectTimer) clearTimeout(this.reconnectTimer);
    this.stopPing();
    this.stopGapPoll();
    const l = this.listener;
    this.listener = undefined;
    await l?.end().catch(() => undefined);
    await this.notifier?.end().catch(() => undefined);
    await this.local.close();
  }
}

/** A SQL identifier, quoted. */
export function quoteIdent(name: string): string {
  return `"${name.replace(/"/g, '""')}"`;
}
