/**
 * A bus URL as `--bus` takes it → the SignalBus of a PostgreSQL store's replicas, on a connection of its own
 * (design 19: signals need no session of the store's):
 *   - `postgres://…` LISTEN/NOTIFY on that URL (a direct or session-mode one; the store may go through a pooler);
 *   - `redis://…` / `rediss://…` Redis or Valkey pub/sub;
 *   - `none`: nothing between replicas; each one sees the others' changes when it re-reads (the delays are logged).
 * The channel is the store's (one per schema), so deployments sharing a database or a Redis do not hear each other.
 */
import { LocalSignalBus, type SignalBus } from './local-bus.js';
import { PgSignalBus, PostgresTaskStore } from './postgres/index.js';
import { takeTimeoutParams, withTimeouts } from './postgres/timeouts.js';
import { RedisSignalBus } from './redis/bus.js';
import type { TaskStore } from './types.js';

/** `--bus none`: signals reach this process's own subscribers only. */
export class NoSignalBus extends LocalSignalBus {
  readonly carrier = 'none';
}

export function signalBusFromUrl(url: string, store: TaskStore, onError?: (message: string) => void): SignalBus {
  if (!(store instanceof PostgresTaskStore)) {
    throw new Error(`unsupported bus "${url}" for a ${store.backend} store: a bus carries signals between replicas of a PostgreSQL store (SQLite's processes share the file)`);
  }
  if (url === 'none') return new NoSignalBus();
  const t = store.timeouts;
  if (url.startsWith('postgres://') || url.startsWith('postgresql://')) {
    const u = new URL(url);
    const own = { ...t, ...takeTimeoutParams(u, url) };
    return new PgSignalBus({ connection: withTimeouts({ connectionString: u.toString() }, own), channel: store.channel, pingMs: own.signalPingMs, ...(onError ? { onError } : {}) });
  }
  if (url.startsWith('redis://') || url.startsWith('rediss://')) {
    return new RedisSignalBus({ url, channel: store.channel, connectTimeoutMs: t.connectTimeoutMs, pingMs: t.signalPingMs, ...(onError ? { onError } : {}) });
  }
  throw new Error(`unsupported bus "${url}": use postgres://USER@HOST:PORT/DATABASE (a direct or session-mode URL), redis://HOST:PORT, or none`);
}
