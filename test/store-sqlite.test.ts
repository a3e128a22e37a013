// test:quick: starts no process and no browser (npm run test:quick).
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import Database from 'better-sqlite3';
import { SqliteTaskStore, sqliteStoreFromUrl } from '../src/store/sqlite/index.js';
import { MIGRATIONS } from '../src/store/sqlite/schema.js';
import { openSqlite } from '../src/store/sqlite/open.js';
import { newTask, runStoreTestKit } from '../src/store/testkit/index.js';
import { tempDir } from './helpers.js';

runStoreTestKit('sqlite', {
  async open(location) {
    const path = location ?? join(tempDir(), 'tasks.db');
    return { store: new SqliteTaskStore(path), location: path };
  },
});

describe('sqlite store specifics', () => {
  it('a queued task\'s position follows every write, by this process or another on the file', async () => {
    const path = join(tempDir(), 'positions.db');
    const mine = new SqliteTaskStore(path);
    const other = new SqliteTaskStore(path);
    await mine.init();
    await other.init();
    const t0 = Date.now();
    const a = await mine.create(newTask({ queued: true, owner: null, createdAt: t0 }));
    const b = await mine.create(newTask({ queued: true, owner: null, createdAt: t0 + 1 }));
    const c = await mine.create(newTask({ queued: true, owner: null, createdAt: t0 + 2 }));
    assert.equal(await mine.queuePosition(c.record.taskId), 3);
    assert.equal(await mine.queuePosition(c.record.taskId), 3, 'asked again, nothing changed');
    // Another process on the file cancels the head: the next read here sees it.
    assert.ok(await other.cancelQueued(a.record.taskId, Date.now(), 'Cancelled before it started'));
    assert.equal(await mine.queuePosition(c.record.taskId), 2);
    // This process cancels the next one.
    assert.ok(await mine.cancelQueued(b.record.taskId, Date.now(), 'Cancelled before it started'));
    assert.equal(await mine.queuePosition(c.record.taskId), 1);
    assert.equal(await mine.queuePosition(b.record.taskId), undefined, 'no longer queued');
    await other.close();
    await mine.close();
  });

  it('uses WAL with synchronous=FULL by default, and NORMAL for durability "process"', async () => {
    const dir = tempDir();
    const full = new SqliteTaskStore(join(dir, 'a.db'));
    await full.init();
    const db = new Database(join(dir, 'a.db'));
    assert.equal(db.pragma('journal_mode', { simple: true }), 'wal');
    db.close();
    const s = (full as unknown as { db: Database.Database }).db;
    assert.equal(s.pragma('synchronous', { simple: true }), 2);
    assert.equal(s.pragma('temp_store', { simple: true }), 2, 'statement journals in memory, not spilled to temporary files');
    await full.close();
    const normal = new SqliteTaskStore(join(dir, 'b.db'), { durability: 'process' });
    await normal.init();
    assert.equal((normal as unknown as { db: Database.Database }).db.pragma('synchronous', { simple: true }), 1);
    await normal.close();
  });

  it('the database itself refuses a change to a terminal task, even from outside Outlast', async () => {
    const path = join(tempDir(), 'tasks.db');
    const store = new SqliteTaskStore(path);
    await store.init();
    const { record } = await store.create(newTask());
    await store.finish(record.taskId, 'replica-a', { status: 'completed', result: { ok: 1 } }, null, Date.now());
    const db = new Database(path);
    assert.throws(() => db.prepare("UPDATE tasks SET status = 'failed', version = version + 1 WHERE task_id = ?").run(record.taskId), /task is terminal/);
    assert.throws(() => db.prepare("UPDATE tasks SET result = '{}' WHERE task_id = ?").run(record.taskId), /task is terminal/);
    db.close();
    await store.close();
  });

  it('migrations are numbered, applied once, and re-opening keeps the data', async () => {
    const path = join(tempDir(), 'tasks.db');
    const a = new SqliteTaskStore(path);
    await a.init();
    const t = newTask();
    await a.create(t);
    await a.close();
    const b = new SqliteTaskStore(path);
    await b.init();
    assert.equal((await b.get(t.taskId)).state, 'found');
    const db = new Database(path);
    assert.deepEqual(db.prepare('SELECT version FROM outlast_migrations ORDER BY version').all(), MIGRATIONS.map((m) => ({ version: m.version })));
    db.close();
    await b.close();
  });

  it('a file written by the first release is upgraded in place: its tasks keep their data and read as 2026 tasks', async () => {
    const path = join(tempDir(), 'old.db');
    const old = openSqlite(path, { migrations: MIGRATIONS.slice(0, 1), migrationsTable: 'outlast_migrations', what: 'test' });
    old.prepare(`INSERT INTO tasks (task_id, principal, tool, args, status, created_at, updated_at, poll_interval_ms)
      VALUES ('old-1', 'alice', 'build', '{"n":1}', 'working', 1, 1, 500)`).run();
    old.close();
    const store = new SqliteTaskStore(path);
    await store.init();
    const l = await store.get('old-1');
    assert.ok(l.state === 'found');
    assert.deepEqual([l.record.args, l.record.origin, l.record.progressToken], [{ n: 1 }, 'extension', null]);
    assert.deepEqual((await store.listByPrincipal('alice', undefined, 5)).map((t) => t.taskId), ['old-1']);
    await store.close();
  });

  it('rejects a malformed store URL with a clear message, and use before init', async () => {
    assert.throws(() => sqliteStoreFromUrl('sqlite:'), /expected sqlite:PATH/);
    const s = new SqliteTaskStore(join(tempDir(), 'x.db'));
    assert.throws(() => s.create(newTask()), /call init\(\) first/);
  });
});
