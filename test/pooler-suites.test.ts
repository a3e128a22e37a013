// test:pg-replicas: starts PostgreSQL replicas (scripts/test.mjs runs at most three such files at once).
/**
 * The rest of the multi-replica suites (test/replica-suites.ts) through Debian's PgBouncer 1.18 in transaction mode
 * with its default settings, signals on `--bus` direct PostgreSQL and on `--bus` Redis (a Redis the test started): a
 * deployment-wide per-tool limit, a durable tool's steps resumed on another replica after kill -9 (or a SIGSTOP past
 * the lease), and events delivered by webhook from any replica. Each process keeps a pool of 4 connections to the
 * pooler. The same suites run directly in capacity.test.ts, steps-processes.test.ts and events-postgres.test.ts.
 */
import { PG_URL, freshSchema } from './helpers.js';
import { durableStepsSuite, eventsSuite, toolLimitSuite, type StoreSetup } from './replica-suites.js';
import { usePoolerAndRedis } from './pgbouncer.js';

const services = usePoolerAndRedis();

for (const variant of ['postgres', 'redis'] as const) {
  const title = `through PgBouncer (transaction mode), --bus ${variant === 'postgres' ? 'direct PostgreSQL' : 'Redis'}`;
  /** Called in each suite's `before`, once the pooler and the Redis are up: a fresh schema per suite. */
  const setup = (prefix: string) => (): StoreSetup => ({
    storeUrl: `${services.bouncer.through(PG_URL)}?schema=${freshSchema(`${prefix}${variant[0]}`)}&pool=4`,
    args: ['--bus', variant === 'postgres' ? PG_URL : services.redis.url],
  });
  toolLimitSuite(title, setup('pblim'));
  durableStepsSuite(title, setup('pbsteps'));
  eventsSuite(title, setup('pbev'));
}
