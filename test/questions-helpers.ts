/** Waiting for the demo's migrate questions as a person would see them: asked, then parked. */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { SqliteTaskStore } from '../src/store/sqlite/index.js';
import type { TaskRecord, TaskStore } from '../src/store/types.js';
import { ROOT, freePort, sleep, startServer, tempDir, type ServerProcess } from './helpers.js';

/** The demo server with answer pages on its own address (`--public-url`) and a SQLite file, that file's store open
 *  beside it (to see a question asked and its wait parked, as a person's delay); `args`: more flags. */
export async function startDemoWithPages(args: string[]): Promise<{ server: ServerProcess; store: SqliteTaskStore }> {
  const db = join(tempDir(), 'demo.db');
  const port = await freePort();
  const server = await startServer(['--store', `sqlite:${db}`, '--port', String(port), '--public-url', `http://127.0.0.1:${port}`, ...args], { module: join(ROOT, 'dist', 'demo', 'server.js') });
  const store = new SqliteTaskStore(db);
  await store.init();
  return { server, store };
}

export async function until<T>(what: string, read: () => Promise<T | undefined>, timeoutMs = 20_000): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await read();
    if (v !== undefined) return v;
    if (Date.now() > end) assert.fail(`${what}: not within ${timeoutMs} ms`);
    await sleep(25);
  }
}

/** The newest migrate task that waits for its approval, once that wait is parked (no process holds it). */
export async function parkedApproval(store: TaskStore, migration: string, principal = 'anonymous'): Promise<TaskRecord> {
  return until(`the approval of ${migration} is asked and its wait parked`, async () => {
    const page = await store.listByPrincipal(principal, undefined, 50);
    for (const t of page) {
      if (t.tool !== 'migrate') continue;
      const l = await store.get(t.taskId);
      if (l.state !== 'found') continue;
      const r = l.record;
      if ((r.args as { migration?: string }).migration === migration && r.inputRequests.approval && r.parkedAt !== null && r.owner === null) return r;
    }
    return undefined;
  });
}

