import assert from 'node:assert/strict';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import Database from 'better-sqlite3';
import { SqliteTaskStore, sqliteStoreFromUrl } from '../src/store/sqlite/index.js';
import { newTask, runStoreTestKit } from '../src/store/testkit/index.js';
import { tempDir } from './helpers.js';

runStoreTestKit('sqlite', {
  async open(location) {
    const path = location ?? join(tempDir(), 'tasks.db');
    return { store: new SqliteTaskStore(path), location: path };
  },
});

describe('sqlite store specifics', () => {
  it('uses WAL with synchronous=FULL by default, and NORMAL for durability "process"', async () => {
    const dir = tempDir();
    const full = new SqliteTaskStore(join(dir, 'a.db'));
    await full.init();
    const db = new Database(join(dir, 'a.db'));
    assert.equal(db.pragma('journal_mode', { simple: true }), 'wal');
    db.close();
    const s = (full as unknown as { db: Database.Database }).db;
    assert.equal(s.pragma('synchronous', { simple: true }), 2);
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
    assert.deepEqual(db.prepare('SELECT version FROM outlast_migrations ORDER BY version').all(), [{ version: 1 }, { version: 3 }]);
    db.close();
    await b.close();
  });

  it('rejects a malformed store URL with a clear message, and use before init', async () => {
    assert.throws(() => sqliteStoreFromUrl('sqlite:'), /expected sqlite:PATH/);
    const s = new SqliteTaskStore(join(tempDir(), 'x.db'));
    assert.throws(() => s.create(newTask()), /call init\(\) first/);
  });
});
