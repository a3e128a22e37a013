// test:quick: starts no process and no browser (npm run test:quick).
/** The run queue in-process, on a real SQLite file: a tool's own limits, the shared secret, derived leases. */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { TaskRuntime } from '../src/runtime/runtime.js';
import { SqliteTaskStore } from '../src/store/sqlite/index.js';
import { sleep, tempDir } from './helpers.js';

const DECLARED = { principal: 'p', clientCapabilities: { extensions: { 'io.modelcontextprotocol/tasks': {} } }, tasksDeclared: true };

describe('run queue (in-process)', () => {
  it('a tool\'s own limit per replica holds while other tools use the rest of maxRunning', async () => {
    const rt = new TaskRuntime({ store: new SqliteTaskStore(join(tempDir(), 'q.db')), maxRunning: 4, inlineBudgetMs: 20 });
    let now = 0;
    let max = 0;
    const release: Array<() => void> = [];
    rt.defineTool('render', {
      policy: 'always',
      limit: { perReplica: 2 },
      handler: async () => {
        max = Math.max(max, ++now);
        await new Promise<void>((r) => release.push(r));
        now--;
        return { content: [] };
      },
    });
    let lints = 0;
    rt.defineTool('lint', { policy: 'always', handler: async () => (lints++, { content: [] }) });
    await rt.start();
    try {
      const renders = await Promise.all(Array.from({ length: 6 }, () => rt.call('render', {}, DECLARED)));
      assert.ok(renders.every((r) => r.kind === 'task'));
      await sleep(100);
      assert.equal(now, 2, 'two renders run, four wait');
      const queued = renders.filter((r) => r.kind === 'task' && /^Queued/.test(r.task.statusMessage ?? ''));
      assert.equal(queued.length, 4);
      // Another tool still has room (4 slots, 2 taken by renders).
      const lint = await rt.call('lint', {}, DECLARED);
      assert.equal(lint.kind, 'task');
      for (let i = 0; i < 40 && lints === 0; i++) await sleep(10);
      assert.equal(lints, 1);
      while (release.length > 0 || now > 0) {
        release.shift()?.();
        await sleep(20);
      }
      for (const r of renders) {
        if (r.kind !== 'task') continue;
        assert.equal((await rt.getTask(r.task.taskId, 'p')).status, 'completed');
      }
      assert.equal(max, 2, 'never more than two renders at once');
    } finally {
      await rt.stop(1000);
    }
  });

  it('sharedSecret: one value per store, usable before start, across runtimes on the file', async () => {
    const path = join(tempDir(), 's.db');
    const a = new TaskRuntime({ store: new SqliteTaskStore(path) });
    const b = new TaskRuntime({ store: new SqliteTaskStore(path) });
    const [x, y] = await Promise.all([a.sharedSecret('mrtr'), b.sharedSecret('mrtr')]);
    assert.equal(x, y);
    assert.ok(Buffer.from(x, 'base64url').length >= 32);
    assert.notEqual(await a.sharedSecret('other'), x);
    await assert.rejects(a.sharedSecret('no spaces'), /name must be/);
    await a.stop();
    await b.stop();
  });

  it('a lease given alone derives its heartbeat (a sixth, at most 5 s); a heartbeat alone, its lease; both given must agree', () => {
    const store = new SqliteTaskStore(join(tempDir(), 'l.db'));
    const opts = (rt: TaskRuntime) => (rt as unknown as { opts: { heartbeatMs: number; leaseMs: number } }).opts;
    assert.deepEqual(opts(new TaskRuntime({ store, leaseMs: 1200 })), { ...opts(new TaskRuntime({ store, leaseMs: 1200 })), heartbeatMs: 200, leaseMs: 1200 });
    assert.equal(opts(new TaskRuntime({ store, leaseMs: 120_000 })).heartbeatMs, 5000);
    assert.equal(opts(new TaskRuntime({ store, heartbeatMs: 20_000 })).leaseMs, 120_000);
    assert.equal(opts(new TaskRuntime({ store })).leaseMs, 30_000);
    assert.throws(() => new TaskRuntime({ store, leaseMs: 1000, heartbeatMs: 800 }), /at least twice/);
    assert.throws(() => new TaskRuntime({ store, maxRunning: 0 }), /maxRunning must be an integer >= 1/);
  });
});
