// test:quick: starts no process and no browser (npm run test:quick).
/**
 * A task's creation on SQLite: the handler starts beside its row's write, and a run that has ended by then is
 * written finished in that one write (result or error, history and all). A run that wrote anything of its own first
 * (status, output) keeps all of it, and a creation the store refuses stops the run and says so.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import Database from 'better-sqlite3';
import { TaskRuntime } from '../src/runtime/runtime.js';
import { SqliteTaskStore } from '../src/store/sqlite/index.js';
import { tempDir, until } from './helpers.js';

const DECLARED = { principal: 'p', clientCapabilities: { extensions: { 'io.modelcontextprotocol/tasks': {} } }, tasksDeclared: true };

async function runtime() {
  const path = join(tempDir(), 'create.db');
  const store = new SqliteTaskStore(path);
  const rt = new TaskRuntime({ store, inlineBudgetMs: 10_000 });
  return { rt, store, path };
}

const text = (t: string) => ({ content: [{ type: 'text' as const, text: t }] });

describe('a creation on SQLite', () => {
  it('a run that ends before its row is written is stored finished in that write: result, error and history', async () => {
    const { rt, store, path } = await runtime();
    rt.defineTool('quick', { policy: 'always', handler: async ({ n }) => text(`done ${String(n)}`) });
    rt.defineTool('broken', { policy: 'always', handler: async () => Promise.reject(Object.assign(new Error('disk full'), { code: -32603 })) });
    await rt.start();
    try {
      const ok = await rt.call('quick', { n: 7 }, DECLARED);
      const bad = await rt.call('broken', {}, DECLARED);
      assert.ok(ok.kind === 'task' && bad.kind === 'task');
      // The caller's CreateTaskResult already says how it ended (the row was written so).
      assert.deepEqual([ok.task.status, bad.task.status], ['completed', 'failed']);
      const done = await rt.getTask(ok.task.taskId, 'p');
      assert.deepEqual((done as { result?: unknown }).result, { ...text('done 7'), resultType: 'complete' });
      const stored = await store.get(ok.task.taskId);
      const failed = await store.get(bad.task.taskId);
      assert.ok(stored.state === 'found' && failed.state === 'found');
      // One write: the row's version is still the one its insert gave it.
      assert.deepEqual([stored.record.version, failed.record.version], [1, 1]);
      assert.deepEqual(failed.record.error, { code: -32603, message: 'disk full' });
      assert.ok(stored.record.updatedAt >= stored.record.createdAt);
      // Its history says how it ended, as a task finished by a second write does.
      assert.deepEqual((await store.ops.history(ok.task.taskId, 10)).map((e) => e.kind), ['created', 'completed']);
      assert.deepEqual((await store.ops.history(bad.task.taskId, 10)).map((e) => e.kind), ['created', 'failed']);
      assert.equal((await store.ops.history(bad.task.taskId, 10))[1]!.detail, 'disk full');
      // ...read from its row: the creation wrote no history row of its own.
      const file = new Database(path, { readonly: true });
      try {
        assert.equal((file.prepare('SELECT count(*) AS n FROM task_events').get() as { n: number }).n, 0);
      } finally {
        file.close();
      }
    } finally {
      await rt.stop();
    }
  });

  it('a file from the release that wrote an event for a task created finished: the end is told once, and the trigger goes', async () => {
    const { rt, path } = await runtime();
    rt.defineTool('quick', { policy: 'always', handler: async () => text('done') });
    await rt.start();
    let taskId: string;
    try {
      const ok = await rt.call('quick', {}, DECLARED);
      assert.ok(ok.kind === 'task');
      taskId = ok.task.taskId;
    } finally {
      await rt.stop();
    }
    // What that release left: its trigger, and the event row it wrote for such a task.
    const file = new Database(path);
    file.exec(`CREATE TRIGGER tasks_history_finished_at_creation AFTER INSERT ON tasks WHEN NEW.status = 'completed' BEGIN SELECT 1; END`);
    file.prepare(`INSERT INTO task_events (task_id, at, kind, actor, detail) SELECT task_id, updated_at, status, owner, NULL FROM tasks WHERE task_id = ?`).run(taskId);
    file.close();
    const again = new SqliteTaskStore(path);
    await again.init();
    try {
      assert.deepEqual((await again.ops.history(taskId, 10)).map((e) => e.kind), ['created', 'completed']);
      const check = new Database(path, { readonly: true });
      try {
        assert.equal(check.prepare(`SELECT count(*) AS n FROM sqlite_master WHERE name = 'tasks_history_finished_at_creation'`).pluck().get(), 0);
      } finally {
        check.close();
      }
    } finally {
      await again.close();
    }
  });

  it('a run that set a status or emitted output before its row existed keeps both, and is finished by a second write', async () => {
    const { rt, store } = await runtime();
    rt.defineTool('chatty', {
      policy: 'always',
      handler: async (_a, ctx) => {
        await ctx.status('warming up');
        await ctx.output('first line');
        return text('said it');
      },
    });
    await rt.start();
    try {
      const r = await rt.call('chatty', {}, DECLARED);
      assert.ok(r.kind === 'task');
      const ended = await until('the task to end', async () => {
        const t = await store.get(r.task.taskId);
        return t.state === 'found' && t.record.status !== 'working' && t.record;
      });
      assert.equal(ended.status, 'completed');
      assert.ok(ended.version > 1, 'written, then finished');
      const page = (await store.output.read(r.task.taskId, 'p', 0, 10))!;
      assert.deepEqual(page.items.map((i) => (i.data as { text: string }).text), ['first line']);
      assert.deepEqual((ended.result as { content: unknown }).content, text('said it').content);
    } finally {
      await rt.stop();
    }
  });

  it('a creation the store refuses stops the run that started beside it, and says so', async () => {
    const { rt, path } = await runtime();
    let aborted: unknown;
    rt.defineTool('doomed', {
      policy: 'always',
      handler: (_a, ctx) =>
        new Promise((_resolve, reject) =>
          ctx.signal.addEventListener('abort', () => {
            aborted = ctx.signal.reason;
            reject(ctx.signal.reason);
          }),
        ),
    });
    await rt.start();
    // The database itself refuses this tool's rows (a real SQLite error inside the store's write).
    const db = new Database(path);
    db.exec(`CREATE TRIGGER refuse_doomed BEFORE INSERT ON tasks WHEN NEW.tool = 'doomed' BEGIN SELECT RAISE(ABORT, 'no room for this one'); END`);
    db.close();
    try {
      await assert.rejects(rt.call('doomed', {}, DECLARED), (e: Error) => {
        assert.equal(e.message, 'The task could not be stored; its run was stopped. Retry the call.');
        return true;
      });
      await until('the run to be stopped', () => aborted !== undefined);
      assert.equal((await rt.store.ops.listTasks({}, undefined, 10)).rows.length, 0, 'nothing was stored');
    } finally {
      await rt.stop();
    }
  });
});
