// test:quick: starts no process and no browser (npm run test:quick).
import assert from 'node:assert/strict';
import pg from 'pg';
import { MIGRATIONS } from '../src/store/postgres/schema.js';
import { describe, it } from 'node:test';
import { PgSignalBus, PostgresTaskStore, postgresStoreFromUrl } from '../src/store/postgres/index.js';
import type { TaskSignal } from '../src/store/local-bus.js';
import { KeptPool } from '../src/store/postgres/kept-pool.js';
import { newTask, runSignalBusKit, runStoreTestKit } from '../src/store/testkit/index.js';
import { PG_URL, freshSchema, sleep, until, withPgClient } from './helpers.js';

const connection = { connectionString: PG_URL };

runStoreTestKit('postgres', {
  async open(location) {
    const schema = location ?? freshSchema('kit');
    // Small pools: the kit keeps stores open across cases, and the database's connections are shared.
    return { store: new PostgresTaskStore({ connection, schema, poolSize: 3 }), location: schema };
  },
});

runSignalBusKit('postgres LISTEN/NOTIFY', { open: (channel) => new PgSignalBus({ connection, channel }) });

async function withStore<T>(fn: (s: PostgresTaskStore) => Promise<T>, schema = freshSchema()): Promise<T> {
  const s = new PostgresTaskStore({ connection, schema });
  await s.init();
  try {
    return await fn(s);
  } finally {
    await s.close();
  }
}

const admin = withPgClient;

describe('postgres store specifics', () => {
  it('replicas starting together apply the migrations once, in the schema given in the URL', async () => {
    const schema = freshSchema('mig');
    const stores = Array.from({ length: 4 }, () => postgresStoreFromUrl(`${PG_URL}?schema=${schema}&pool=2`));
    await Promise.all(stores.map((s) => s.init()));
    const applied = await admin((c) => c.query(`SELECT version FROM "${schema}".outlast_migrations ORDER BY version`));
    assert.deepEqual(applied.rows.map((r) => r.version), MIGRATIONS.map((m) => m.version));
    const { record } = await stores[0]!.create(newTask());
    const seen = await stores[3]!.get(record.taskId);
    assert.equal(seen.state, 'found');
    // Another schema is another deployment: it does not see the task.
    await withStore(async (other) => assert.deepEqual(await other.get(record.taskId), { state: 'missing' }));
    for (const s of stores) await s.close();
  });

  it('the database itself refuses a change to a terminal task, even from outside Outlast', async () => {
    const schema = freshSchema();
    await withStore(async (store) => {
      const { record } = await store.create(newTask());
      await store.finish(record.taskId, 'replica-a', { status: 'completed', result: { ok: 1 } }, null, Date.now());
      await assert.rejects(
        admin((c) => c.query(`UPDATE "${schema}".tasks SET status = 'failed', version = version + 1 WHERE task_id = $1`, [record.taskId])),
        /is terminal/,
      );
      await admin((c) => c.query(`UPDATE "${schema}".tasks SET retrieved_at = 1 WHERE task_id = $1`, [record.taskId]));
    }, schema);
  });

  it('several replicas sweeping at once expire each task exactly once', async () => {
    const schema = freshSchema('sweep');
    const stores = [0, 1, 2].map(() => new PostgresTaskStore({ connection, schema }));
    await Promise.all(stores.map((s) => s.init()));
    const t0 = Date.now();
    const ids = new Set<string>();
    for (let i = 0; i < 300; i++) ids.add((await stores[i % 3]!.create(newTask({ createdAt: t0 - 10_000, ttlMs: 1000 }))).record.taskId);
    const results = await Promise.all(stores.map((s) => s.sweep(t0, 60_000, 40)));
    const more = await Promise.all(stores.map((s) => s.sweep(t0, 60_000, 1000)));
    const expired = [...results, ...more].flatMap((r) => r.expired.map((e) => e.taskId));
    assert.equal(expired.length, 300, 'no task is reported twice');
    assert.deepEqual(new Set(expired), ids);
    assert.deepEqual(await stores[0]!.count(), { tasks: 0, tombstones: 300 });
    for (const s of stores) await s.close();
  });

  it('creations in one turn share one commit, and a bad row or a taken id fails alone', async () => {
    await withStore(async (store) => {
      const { record: first } = await store.create(newTask());
      const tasks = Array.from({ length: 30 }, () => newTask());
      tasks[7] = newTask({ taskId: first.taskId }); // an id that exists
      tasks[19] = newTask({ args: { text: 'nul \u0000 byte' } }); // PostgreSQL's jsonb refuses U+0000: the whole INSERT fails
      const results = await Promise.allSettled(tasks.map((t) => store.create(t)));
      const failed = results.map((r, i) => [r.status, i] as const).filter(([st]) => st === 'rejected').map(([, i]) => i);
      assert.deepEqual(failed, [7, 19]);
      assert.match(String((results[7] as PromiseRejectedResult).reason), /already exists/);
      assert.match(String((results[19] as PromiseRejectedResult).reason), /could not be stored: PostgreSQL cannot store the character U\+0000/);
      for (const [i, r] of results.entries()) {
        if (r.status !== 'fulfilled') continue;
        assert.equal(r.value.created, true);
        assert.equal((await store.get(tasks[i]!.taskId)).state, 'found');
      }
      assert.equal((await store.count()).tasks, 29);
    });
  });

  it('the connection kept between statements: dropped when killed while idle, and handed on to whoever waits for a pool of one', async () => {
    const schema = freshSchema('kept');
    const store = new PostgresTaskStore({ connection, schema, poolSize: 1 });
    await store.init();
    try {
      const { record } = await store.create(newTask());
      // The pool's one connection, idle and kept, its last statement the creation.
      const kept = await admin(async (c) => (await c.query<{ pid: number }>(
        `SELECT pid FROM pg_stat_activity WHERE state = 'idle' AND position($1 IN query) > 0 AND query LIKE 'INSERT INTO%'`, [`"${schema}".tasks`])).rows);
      assert.equal(kept.length, 1);
      await admin(async (c) => {
        await c.query('SELECT pg_terminate_backend($1)', [kept[0]!.pid]);
        await until('the killed backend gone', async () => (await c.query('SELECT 1 FROM pg_stat_activity WHERE pid = $1', [kept[0]!.pid])).rowCount === 0, 5000);
      });
      // The next statement runs on a new connection: nothing fails for the one that died.
      assert.equal((await store.get(record.taskId)).state, 'found');
      // Forty statements at once on a pool of one: the kept connection goes back to the pool while anyone waits there.
      const all = await Promise.all(Array.from({ length: 40 }, (_, i) => (i % 2 ? store.get(record.taskId).then((l) => l.state) : store.create(newTask()).then((r) => String(r.created)))));
      assert.deepEqual(new Set(all), new Set(['found', 'true']));
      assert.equal((await store.count()).tasks, 21);
    } finally {
      await store.close();
    }
  });

  it('a statement the server refuses alone (a duplicate key) keeps its connection; one that ends the session does not', async () => {
    const schema = freshSchema('kept');
    const store = new PostgresTaskStore({ connection, schema, poolSize: 1 });
    await store.init();
    const backends = () => admin(async (c) => (await c.query<{ pid: number }>(
      `SELECT pid FROM pg_stat_activity WHERE position($1 IN query) > 0 AND pid <> pg_backend_pid()`, [`"${schema}".`])).rows.map((r) => r.pid));
    try {
      const { record } = await store.create(newTask({ owner: 'a' }));
      const step = { key: 's#1', name: 's', kind: 'step' as const, seq: 1, state: 'completed' as const, tries: 1, idempotent: true, result: '1', error: null, bytes: 1, startedAt: 0, finishedAt: 0, firstWrite: true };
      await store.writeStep(record.taskId, { owner: 'a', epoch: 1 }, step);
      const before = await backends();
      assert.equal(before.length, 1);
      // The key's row is there: the first write's INSERT is refused (23505) and the upsert replaces the row.
      await store.writeStep(record.taskId, { owner: 'a', epoch: 1 }, { ...step, result: '2' });
      assert.deepEqual((await store.listSteps(record.taskId)).map((r) => r.result), ['2']);
      assert.deepEqual(await backends(), before);
      // A session ended by the server (FATAL) is not kept: the next statement opens another.
      await admin((c) => c.query('SELECT pg_terminate_backend($1)', [before[0]]));
      await until('the killed backend gone', async () => !(await backends()).includes(before[0]!), 5000);
      assert.equal((await store.get(record.taskId)).state, 'found');
      const after = await backends();
      assert.equal(after.length, 1);
      assert.notEqual(after[0], before[0]);
    } finally {
      await store.close();
    }
  });

  it('the kept connection: a healthy one is kept after its statement, one that is closing never is', async () => {
    const pool = new KeptPool(new pg.Pool({ connectionString: PG_URL, max: 2 }));
    try {
      const closing = await pool.connect();
      const ended = closing.end();
      pool.release(closing);
      assert.equal(pool.take(), undefined);
      await ended;
      const healthy = await pool.connect();
      assert.equal((await healthy.query<{ n: number }>('SELECT 1 AS n')).rows[0]!.n, 1);
      pool.release(healthy);
      const again = pool.take();
      assert.equal(again, healthy);
      pool.release(again!);
    } finally {
      await pool.end();
    }
  });

  it('bad store URLs get a clear error', async () => {
    assert.throws(() => postgresStoreFromUrl('postgres://h/db?schema=bad-name;drop'), /Invalid schema name/);
    assert.throws(() => postgresStoreFromUrl('postgres://h/db?pool=0'), /pool must be an integer/);
    assert.throws(() => postgresStoreFromUrl('mysql://h/db'), /not a postgres:\/\/ URL/);
    const s = postgresStoreFromUrl('postgres://postgres@127.0.0.1:1/test?schema=x');
    await assert.rejects(s.init(), /Cannot connect to PostgreSQL \(127\.0\.0\.1:1\/test\)/);
  });
});

describe('postgres signal bus', () => {
  const channel = () => `outlast_${freshSchema('bus')}`;
  async function bus(ch: string): Promise<PgSignalBus> {
    const b = new PgSignalBus({ connection, channel: ch });
    await b.start();
    return b;
  }
  function collect(b: PgSignalBus, taskId: string): TaskSignal[] {
    const got: TaskSignal[] = [];
    b.subscribe(taskId, (s) => got.push(s));
    return got;
  }
  async function until(cond: () => boolean, ms = 3000): Promise<void> {
    const end = Date.now() + ms;
    while (!cond()) {
      if (Date.now() > end) assert.fail('condition not reached in time');
      await sleep(5);
    }
  }

  it('delivers signals to other processes, coalesced; a replica does not hear its own echo twice', async () => {
    const ch = channel();
    const a = await bus(ch);
    const b = await bus(ch);
    const atA = collect(a, 'T1');
    const atB = collect(b, 'T1');
    const manyAtB = collect(b, 'T2');
    a.publish({ taskId: 'T1', kind: 'cancel' });
    for (let i = 0; i < 50; i++) a.publish({ taskId: 'T2', kind: 'changed' });
    await until(() => atB.length >= 1 && manyAtB.length >= 1);
    await sleep(100);
    assert.deepEqual(atB, [{ taskId: 'T1', kind: 'cancel' }]);
    assert.equal(manyAtB.length, 1, 'fifty identical signals in one turn travel as one');
    assert.deepEqual(atA, [{ taskId: 'T1', kind: 'cancel' }], 'local delivery once, no echo');
    await a.close();
    await b.close();
  });

  it('packs large bursts under the payload limit', async () => {
    const ch = channel();
    const a = await bus(ch);
    const b = await bus(ch);
    const ids = Array.from({ length: 2000 }, (_, i) => `task-${i}-${'x'.repeat(20)}`);
    let seen = 0;
    for (const id of ids) b.subscribe(id, () => seen++);
    for (const id of ids) a.publish({ taskId: id, kind: 'changed' });
    await until(() => seen === ids.length, 5000);
    await a.close();
    await b.close();
  });

  it('a bus no other process listens with sends nothing on the wire; a newcomer\'s hello makes it send again at once', async () => {
    const ch = channel();
    // What crosses the wire, seen by a plain LISTEN (not a bus: it says nothing, so it does not count as a listener).
    const wire: string[] = [];
    const observer = new pg.Client(connection);
    await observer.connect();
    observer.on('notification', (n) => void (n.channel === ch && wire.push(n.payload ?? '')));
    await observer.query(`LISTEN "${ch}"`);
    const a = new PgSignalBus({ connection, channel: ch, pingMs: 300 });
    await a.start();
    try {
      // Its hello, with its presence period: the sender id of everything it sends.
      await until(() => wire.some((w) => / !300$/.test(w)), 3000);
      const sender = wire.find((w) => / !300$/.test(w))!.split(' ')[0]!;
      const fromA = () => wire.filter((p) => p.split(' ')[0] === sender);
      a.publish({ taskId: 'early', kind: 'changed' });
      await until(() => fromA().some((p) => p.endsWith(' cearly')), 3000);
      await until(() => a.alone, 5000);
      const before = fromA().length;
      a.publish({ taskId: 'lonely', kind: 'changed' });
      assert.equal(a.unsentAlone, 1);
      // Its next presence (every 300 ms) is on the wire after anything the publish would have sent.
      await until(() => fromA().slice(before).some((p) => / \.300$/.test(p)), 3000);
      assert.deepEqual(fromA().filter((p) => p.includes('lonely')), [], 'nothing sent for nobody');

      const b = new PgSignalBus({ connection, channel: ch });
      await b.start();
      try {
        const atB = collect(b, 'heard');
        await until(() => !a.alone, 3000);
        a.publish({ taskId: 'heard', kind: 'input' });
        await until(() => atB.length === 1, 3000);
        assert.deepEqual(atB, [{ taskId: 'heard', kind: 'input' }]);
      } finally {
        await b.close();
      }
    } finally {
      await a.close();
      await observer.end();
    }
  });

  it('a bus told of another listener (a registered replica of an earlier version, silent) keeps sending', async () => {
    const ch = channel();
    const a = new PgSignalBus({ connection, channel: ch, pingMs: 300 });
    await a.start();
    try {
      await until(() => a.alone, 5000);
      a.notePeers(60_000);
      assert.equal(a.alone, false);
      const silent = new pg.Client(connection);
      await silent.connect();
      const heard: string[] = [];
      silent.on('notification', (n) => void heard.push(n.payload ?? ''));
      await silent.query(`LISTEN "${ch}"`);
      a.publish({ taskId: 'told', kind: 'cancel' });
      await until(() => heard.some((p) => p.endsWith(' xtold')), 3000);
      await silent.end();
    } finally {
      await a.close();
    }
  });

  it('reconnects after its connection is killed and makes every subscriber re-read', async () => {
    const ch = channel();
    const a = await bus(ch);
    const b = await bus(ch);
    const atB = collect(b, 'T9');
    await admin((c) => c.query(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = $1`, [`LISTEN "${ch}"`]));
    await until(() => b.connections === 2 && a.connections === 2, 10_000);
    await until(() => atB.some((s) => s.kind === 'input'));
    assert.ok(atB.some((s) => s.kind === 'cancel') && atB.some((s) => s.kind === 'changed'), 'resync tells every kind of subscriber to re-read');
    atB.length = 0;
    a.publish({ taskId: 'T9', kind: 'input' });
    await until(() => atB.length === 1);
    assert.deepEqual(atB, [{ taskId: 'T9', kind: 'input' }]);
    await a.close();
    await b.close();
  });
});
