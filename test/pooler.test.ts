/**
 * The PostgreSQL store through Debian's PgBouncer in transaction mode with its default settings (design 19): the
 * store kit passes through it, `?schema=` holds (rows in that schema, nothing in `public`), a statement past its
 * deadline is cancelled through it, and a start-up parameter it refuses is named with what to do.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { PostgresTaskStore, postgresStoreFromUrl } from '../src/store/postgres/index.js';
import { StoreUnavailableError } from '../src/store/types.js';
import { newTask, runSignalBusKit, runStoreTestKit } from '../src/store/testkit/index.js';
import { RedisSignalBus } from '../src/store/redis/bus.js';
import { PG_URL, freshSchema, withPgClient } from './helpers.js';
import { usePoolerAndRedis } from './pgbouncer.js';

const services = usePoolerAndRedis();

runSignalBusKit('redis pub/sub', { open: (channel) => new RedisSignalBus({ url: services.redis.url, channel }) });

runStoreTestKit('postgres through PgBouncer (transaction mode)', {
  async open(location) {
    const schema = location ?? freshSchema('kitpb');
    return { store: postgresStoreFromUrl(`${services.bouncer.through(PG_URL)}?schema=${schema}`), location: schema };
  },
});

describe('the store through PgBouncer in transaction mode', () => {
  it('keeps ?schema=: the rows are in that schema and nothing is in public', async () => {
    const schema = freshSchema('pbschema');
    const store = postgresStoreFromUrl(`${services.bouncer.through(PG_URL)}?schema=${schema}`);
    await store.init();
    try {
      assert.equal(store.prepared, false, 'no named prepared statements through the pooler (auto)');
      const { record } = await store.create(newTask());
      await store.finish(record.taskId, 'replica-a', { status: 'completed', result: { ok: true } }, null, Date.now());
      const rows = await withPgClient((c) => c.query(`SELECT status FROM "${schema}".tasks WHERE task_id = $1`, [record.taskId]));
      assert.deepEqual(rows.rows, [{ status: 'completed' }]);
      const events = await withPgClient((c) => c.query(`SELECT kind FROM "${schema}".task_events WHERE task_id = $1`, [record.taskId]));
      assert.deepEqual(events.rows.map((r) => r.kind), ['completed'], 'the triggers wrote in the schema too');
      const inPublic = await withPgClient((c) => c.query(`SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'`));
      assert.deepEqual(inPublic.rows, [], 'nothing in public');
    } finally {
      await store.close();
    }
  });

  it('uses named prepared statements on a direct connection (auto), and none when told off', async () => {
    const a = new PostgresTaskStore({ connection: { connectionString: PG_URL }, schema: freshSchema('prep') });
    const b = postgresStoreFromUrl(`${PG_URL}?schema=${freshSchema('prep')}&prepared_statements=off`);
    await a.init();
    await b.init();
    try {
      assert.equal(a.prepared, true);
      assert.equal(b.prepared, false);
      assert.throws(() => postgresStoreFromUrl(`${PG_URL}?prepared_statements=sometimes`), /prepared_statements must be on, off or auto/);
    } finally {
      await a.close();
      await b.close();
    }
  });

  it('cancels a statement past its deadline through the pooler', async () => {
    const schema = freshSchema('pbdead');
    const store = postgresStoreFromUrl(`${services.bouncer.through(PG_URL)}?schema=${schema}&statement_timeout_ms=400&query_timeout_ms=3000`);
    await store.init();
    try {
      await withPgClient(async (c) => {
        await c.query('BEGIN');
        await c.query(`INSERT INTO "${schema}".settings (name, value, created_at) VALUES ('held', 'x', 0)`);
        const t0 = Date.now();
        const err = await store.sharedSecret('held', () => 'y').then(() => undefined, (e: unknown) => e);
        const waited = Date.now() - t0;
        await c.query('ROLLBACK');
        assert.ok(err instanceof StoreUnavailableError && /canceling statement/.test(err.message), `cancelled on the server, got ${String(err)}`);
        assert.ok(waited >= 350 && waited < 1500, `cancelled after ${waited} ms (deadline 400 ms)`);
      });
      assert.equal(await store.sharedSecret('held', () => 'z'), 'z', 'the store goes on');
    } finally {
      await store.close();
    }
  });

  it('names the pooler and what to do when it refuses a start-up parameter', async () => {
    const store = postgresStoreFromUrl(`${services.bouncer.through(PG_URL)}?schema=${freshSchema('pbopt')}&options=-c%20work_mem%3D8MB&connect_timeout_ms=2000`);
    await assert.rejects(store.init(), (e: Error) => {
      assert.match(e.message, /connection pooler refused the start-up parameter "options"/);
      assert.match(e.message, /ignore_startup_parameters/);
      return true;
    });
  });
});
