/**
 * A signal bus between processes, whatever carries it (PostgreSQL LISTEN/NOTIFY, Redis pub/sub): the row stays the
 * truth; a signal only says "re-read task X". The carrier is a BusTransport; everything else is here, once:
 *
 * - Signals published during one event-loop turn are coalesced, deduplicated and sent afterwards, packed into
 *   payloads under the carrier's size limit. While one send is in flight the next batch gathers; under load batches
 *   leave at most every `coalesceMs`; a signal after a quiet spell leaves at once.
 * - The receiving side is one connection. When it drops, or a ping (every `pingMs`) is not answered within as long
 *   (a black hole never ends a TCP connection by itself), it is destroyed and reconnected with backoff; meanwhile
 *   every local subscriber re-reads once per `pingMs` (the fallback poll covering the gap), and once more after it
 *   is back, since signals sent meanwhile are lost.
 * - `roundTrip()` sends a probe that only this process acts on and waits for it to come back through the carrier:
 *   the start-up check that signals can arrive at all (LISTEN through a transaction-mode pooler cannot).
 * - Signals reach this process's own subscribers at once, without the round trip; a process ignores its own.
 * - A process that no other process listens with sends no signals: a lone replica (the usual deployment) would pay a
 *   NOTIFY per task change for nobody. Every bus says hello when it starts listening (the others answer at once) and
 *   that it is there with every ping; one that heard from no other process for three of their periods (and at least
 *   10 s), nor was told of one by `notePeers` (a replica of an earlier version, registered but silent), stops sending
 *   until it does.
 *   What a newcomer misses before its hello is heard is what any missed signal is: caught by re-reads.
 */
import { randomBytes } from 'node:crypto';
import { LocalSignalBus, type SignalBus, type SignalKind, type TaskSignal } from './local-bus.js';

/** What carries payloads between processes. */
export interface BusTransport {
  /** Connects the receiving side: `onMessage` per payload, `onLost` (once) when the connection is gone. */
  listen(onMessage: (payload: string) => void, onLost: (why: string) => void): Promise<void>;
  /** Is the receiving connection alive (rejects if not)? */
  ping(): Promise<void>;
  /** Ends the receiving side (after `onLost`, or at close); never waits on a dead peer. */
  dropListener(): Promise<void>;
  /** Sends payloads (each within the size limit). */
  send(payloads: string[]): Promise<void>;
  close(): Promise<void>;
}

export interface RemoteSignalBusOptions {
  /** Largest payload, bytes. */
  maxPayloadBytes: number;
  /** Least time between two sends while signals keep coming, ms. Default 2. */
  coalesceMs?: number;
  /** Period of the listening connection's ping, and its deadline, ms. Default 5000. */
  pingMs?: number;
  /** Longest wait between reconnection attempts, ms. Default 1000 (signals back within a second of a heal). */
  maxReconnectDelayMs?: number;
  onError?: (message: string) => void;
}

/** Longest presence period believed from another process, ms (a bad number must not keep signals flowing for ever). */
const MAX_PRESENCE_MS = 60_000;
/** Another process, once heard from, is counted as listening at least this long, ms (three of its presence periods
 *  if longer): a late timer on a loaded machine must not make a peer look gone. */
const PEER_MEMORY_MS = 10_000;
/** How long a bus listens before it may find itself alone, ms: the others answer its hello at once, and replicas are
 *  known sooner from their registry (the runtime's start reads it). */
const HELLO_ANSWERS_MS = 1_000;

const KIND_CODE: Record<SignalKind, string> = { changed: 'c', cancel: 'x', input: 'i', queue: 'q', output: 'o' };
const CODE_KIND: Record<string, SignalKind> = { c: 'changed', x: 'cancel', i: 'input', q: 'queue', o: 'output' };
/** A probe's code: other processes skip it (no kind has it). */
const PROBE = '?';
/** "Who is there?", sent on listening (with the sender's presence period, ms): every other process answers PRESENT. */
const HELLO = '!';
/** "I am here, and will say so again within this many ms". */
const PRESENT = '.';

export class RemoteSignalBus implements SignalBus {
  private readonly local = new LocalSignalBus();
  private readonly resyncListeners = new Set<() => void>();
  private readonly sender = randomBytes(6).toString('base64url');
  private readonly opts: Required<Omit<RemoteSignalBusOptions, 'onError'>> & Pick<RemoteSignalBusOptions, 'onError'>;
  /** Pending signals, deduplicated: kind code + task id. */
  private pending = new Set<string>();
  private sending = false;
  private scheduled = false;
  private closed = false;
  /** Sends are failing (carrier unreachable): reported once, not per batch. */
  private sendFailing = false;
  private reconnectTimer: NodeJS.Timeout | undefined;
  private reconnectDelay = 50;
  private pingTimer: NodeJS.Timeout | undefined;
  /** While the listening connection is down: the fallback re-reads. */
  private gapTimer: NodeJS.Timeout | undefined;
  private readonly probes = new Map<string, () => void>();
  /** When the listening connection last came up (performance.now()); undefined while it is down (or not yet up). */
  private listeningSince: number | undefined;
  /** Until when another process is known to listen (performance.now()): heard from, or told of by notePeers. */
  private peersUntil = -Infinity;
  /** Signals published while no other process listened (heard here only). */
  unsentAlone = 0;
  /** Times the listening connection was (re)established; 1 after start. */
  connections = 0;

  constructor(private readonly transport: BusTransport, options: RemoteSignalBusOptions) {
    this.opts = { maxReconnectDelayMs: 1000, coalesceMs: 2, pingMs: 5000, ...options };
  }

  /** Listens, then checks that a signal sent comes back (within `checkMs`); throws `notHeard(ms)`'s message if not. */
  async start(): Promise<void> {
    await this.listen();
    try {
      await this.roundTrip(this.checkMs);
    } catch (e) {
      await this.close();
      throw new Error(this.notHeard(this.checkMs, (e as Error).message));
    }
  }

  /** How long start() waits for its probe, ms. */
  protected get checkMs(): number {
    return Math.min(3000, this.opts.pingMs);
  }

  /** The start-up refusal when a probe did not come back (a carrier names what to do). */
  protected notHeard(ms: number, why: string): string {
    return `signals do not arrive: ${why}`;
  }

  /** Whether the receiving connection is up now. */
  get connected(): boolean {
    return this.listeningSince !== undefined;
  }

  private async listen(): Promise<void> {
    let lost = false;
    const onLost = (why: string) => {
      if (lost) return;
      lost = true;
      this.listeningSince = undefined;
      this.stopPing();
      void this.transport.dropListener();
      if (this.closed) return;
      this.opts.onError?.(`signal connection lost (${why}); reconnecting, and re-reading every ${this.opts.pingMs} ms meanwhile`);
      this.startGapPoll();
      this.scheduleReconnect();
    };
    await this.transport.listen((p) => this.receive(p), onLost);
    if (this.closed) {
      await this.transport.dropListener();
      return;
    }
    this.listeningSince = performance.now();
    this.connections++;
    this.reconnectDelay = 50;
    this.stopGapPoll();
    this.startPing(onLost);
    // Before start()'s probe, on the same sending connection: the others have it by the time the probe is back.
    await this.announce(HELLO);
  }

  /** A ping that is not answered before the next one is due means the connection is gone, whatever TCP says. */
  private startPing(onLost: (why: string) => void): void {
    this.stopPing();
    let inFlight = false;
    this.pingTimer = setInterval(() => {
      if (inFlight) return onLost(`no answer to a ping within ${this.opts.pingMs} ms`);
      void this.announce(PRESENT);
      inFlight = true;
      this.transport.ping().then(
        () => (inFlight = false),
        (e: Error) => onLost(e.message),
      );
    }, this.opts.pingMs);
    this.pingTimer.unref?.();
  }

  private stopPing(): void {
    this.pingTimer = cleared(this.pingTimer);
  }

  private startGapPoll(): void {
    if (this.gapTimer || this.closed) return;
    this.gapTimer = setInterval(() => this.resync(), this.opts.pingMs);
    this.gapTimer.unref?.();
  }

  private stopGapPoll(): void {
    this.gapTimer = cleared(this.gapTimer);
  }

  private scheduleReconnect(): void {
    if (this.reconnectTimer || this.closed) return;
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = undefined;
      this.listen().then(
        () => this.resync(),
        (e: Error) => {
          void this.transport.dropListener();
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
    if (parts[0] === this.sender) {
      if (parts[1]?.[0] === PROBE) this.probes.get(parts[1].slice(1))?.();
      return;
    }
    // Anything from another process says it listens: for its own presence period (a hello's or presence's number)
    // or, from one that names none (a signal; a process of an earlier version), for this bus's own.
    const code = parts[1]?.[0];
    const said = code === HELLO || code === PRESENT ? Number(parts[1]!.slice(1)) : NaN;
    this.notePeers(Math.max(PEER_MEMORY_MS, 3 * (Number.isFinite(said) && said > 0 ? Math.min(said, MAX_PRESENCE_MS) : this.opts.pingMs)));
    if (code === HELLO) void this.announce(PRESENT);
    for (let i = 1; i < parts.length; i++) {
      const p = parts[i]!;
      const kind = CODE_KIND[p[0]!];
      if (kind) this.local.publish({ taskId: p.slice(1), kind });
    }
  }

  /**
   * Sends a probe through the carrier and waits for it to come back to this process: ms it took. Rejects after
   * `timeoutMs` saying the signals do not arrive.
   */
  async roundTrip(timeoutMs: number): Promise<number> {
    const id = randomBytes(6).toString('base64url');
    const t0 = performance.now();
    let timer: NodeJS.Timeout | undefined;
    try {
      await Promise.race([
        new Promise<void>((resolve, reject) => {
          this.probes.set(id, resolve);
          this.transport.send([`${this.sender} ${PROBE}${id}`]).catch(reject);
        }),
        new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(new Error(`a signal sent did not come back within ${timeoutMs} ms`)), timeoutMs);
        }),
      ]);
      return performance.now() - t0;
    } finally {
      clearTimeout(timer);
      this.probes.delete(id);
    }
  }

  /** Another process listens for at least `forMs` more (heard from here, or registered as a replica). */
  notePeers(forMs: number): void {
    this.peersUntil = Math.max(this.peersUntil, performance.now() + forMs);
  }

  /**
   * No other process listens: this one has listened without a break long enough for its hello's answers and heard
   * of no other since. While the listening connection is down nothing is known, so signals are sent.
   */
  get alone(): boolean {
    if (this.listeningSince === undefined) return false;
    const now = performance.now();
    return now - this.listeningSince >= HELLO_ANSWERS_MS && now >= this.peersUntil;
  }

  /** Says hello or that this process is there, with its presence period; a send that fails is the carrier's outage,
   *  reported by the signals' own sends. */
  private async announce(code: typeof HELLO | typeof PRESENT): Promise<void> {
    await this.transport.send([`${this.sender} ${code}${this.opts.pingMs}`]).catch(() => undefined);
  }

  publish(signal: TaskSignal): void {
    this.local.publish(signal);
    if (this.closed) return;
    if (this.alone) {
      this.unsentAlone++;
      return;
    }
    this.pending.add(KIND_CODE[signal.kind] + signal.taskId);
    if (!this.scheduled && !this.sending) {
      this.scheduled = true;
      setImmediate(() => void this.flush());
    }
  }

  private async flush(): Promise<void> {
    this.scheduled = false;
    if (this.sending || this.pending.size === 0) return;
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
      await this.transport.send(payloads);
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
    this.listeningSince = undefined;
    await this.transport.dropListener();
    await this.transport.close();
    await this.local.close();
  }
}

/** Stops a periodic timer (if any); what its field holds afterwards. */
function cleared(timer: NodeJS.Timeout | undefined): undefined {
  if (timer) clearInterval(timer);
  return undefined;
}
