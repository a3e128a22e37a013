/**
 * PgBouncer (fixtures/pgbouncer.ts) and a Redis (fixtures/redis-server.ts) for the tests of the store through a
 * transaction-mode pooler: in a temporary folder, stopped by their process ids when the file's tests end.
 */
import { after, before } from 'node:test';
import { PG_URL, tempDir } from './helpers.js';
import { startPgBouncer as startOn, type PgBouncer } from '../fixtures/pgbouncer.js';
export { pgBouncerLoginDeadlines } from '../fixtures/pgbouncer.js';
import { startRedis, type RedisServer } from '../fixtures/redis-server.js';
import { stopAllServices } from '../fixtures/service-process.js';

export type { PgBouncer } from '../fixtures/pgbouncer.js';
export type { RedisServer } from '../fixtures/redis-server.js';

after(stopAllServices);

/** PgBouncer in front of the test PostgreSQL, or of `upstreamUrl` (e.g. a fault proxy to it). */
export function startPgBouncer(settings: Record<string, string> = {}, upstreamUrl = PG_URL): Promise<PgBouncer> {
  return startOn(upstreamUrl, tempDir('outlast-pgbouncer-'), settings);
}

/** A PgBouncer and a Redis started before the tests of the file and stopped after them. */
export function usePoolerAndRedis(): { readonly bouncer: PgBouncer; readonly redis: RedisServer } {
  let bouncer: PgBouncer | undefined;
  let redis: RedisServer | undefined;
  before(async () => {
    bouncer = await startPgBouncer();
    redis = await startRedis();
  });
  after(async () => {
    await bouncer?.stop();
    await redis?.stop();
  });
  return {
    get bouncer() {
      return bouncer!;
    },
    get redis() {
      return redis!;
    },
  };
}
