/**
 * The dashboard's event stream: one per browser tab, fed by the signal bus every replica shares (so a page on one
 * replica hears of work on all) and by a cheap look at the counts every few seconds (creations send no signal).
 * Events say only "something changed"; the page re-reads what it shows. Coalesced to at most one a second.
 */
import type { ServerResponse } from 'node:http';
import type { SignalBus } from '../../store/local-bus.js';
import type { TaskStore } from '../../store/types.js';

export interface LiveHubOptions {
  store: TaskStore;
  bus: SignalBus;
  /** How often the counts are compared, ms. Default 2000. */
  countsEveryMs?: number;
  keepAliveMs?: number;
  /** Open streams at most (a browser keeps one per tab). Default 200. */
  maxStreams?: number;
}

export class LiveHub {
  private readonly streams = new Set<ServerResponse>();
  private unsubscribe: (() => void) | undefined;
  private timers: NodeJS.Timeout[] = [];
  private pending = false;
  private lastSent = 0;
  private lastCounts = '';
  constructor(private readonly o: LiveHubOptions) {}

  /** Serves one event stream; false when too many are open. */
  open(res: ServerResponse, headers: Record<string, string>): boolean {
    if (this.streams.size >= (this.o.maxStreams ?? 200)) return false;
    res.writeHead(200, { ...headers, 'content-type': 'text/event-stream', 'cache-control': 'no-store', 'x-accel-buffering': 'no', connection: 'keep-alive' });
    res.write('retry: 3000\n\n');
    this.streams.add(res);
    res.on('close', () => {
      this.streams.delete(res);
      if (this.streams.size === 0) this.stop();
    });
    if (!this.unsubscribe) this.start();
    return true;
  }

  private start(): void {
    this.unsubscribe = this.o.bus.subscribeAll(() => this.changed());
    const counts = setInterval(() => void this.checkCounts(), this.o.countsEveryMs ?? 2000);
    const keepAlive = setInterval(() => {
      for (const s of this.streams) s.write(': keep-alive\n\n');
    }, this.o.keepAliveMs ?? 15_000);
    counts.unref();
    keepAlive.unref();
    this.timers.push(counts, keepAlive);
  }

  private stop(): void {
    this.unsubscribe?.();
    this.unsubscribe = undefined;
    for (const t of this.timers) clearInterval(t);
    this.timers = [];
  }

  private async checkCounts(): Promise<void> {
    try {
      const c = JSON.stringify((await this.o.store.ops.counts(1000)));
      if (this.lastCounts && c !== this.lastCounts) this.changed();
      this.lastCounts = c;
    } catch {
      /* the store is unreachable for now: the next look tries again */
    }
  }

  private changed(): void {
    if (this.pending) return;
    this.pending = true;
    const wait = Math.max(0, 1000 - (Date.now() - this.lastSent));
    setTimeout(() => {
      this.pending = false;
      this.lastSent = Date.now();
      for (const s of this.streams) s.write('data: changed\n\n');
    }, wait).unref();
  }

  close(): void {
    for (const s of [...this.streams]) s.end();
    this.streams.clear();
    this.stop();
  }
}
