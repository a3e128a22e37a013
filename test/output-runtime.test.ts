// test:quick: starts no process and no browser (npm run test:quick).
/**
 * ctx.output in the runtime, on a real SQLite store: clear errors for a bad form or an oversized item (what was
 * written stays), output emitted while the call still ran inline written once it becomes a task, and the wire view
 * (tasks/get) carrying the latest seq.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { TaskRuntime } from '../src/runtime/runtime.js';
import { SqliteTaskStore } from '../src/store/sqlite/index.js';
import { sleep, tempDir } from './helpers.js';

const DECLARED = { principal: 'p', clientCapabilities: { extensions: { 'io.modelcontextprotocol/tasks': {} } }, tasksDeclared: true };

async function runtime(inlineBudgetMs: number) {
  const store = new SqliteTaskStore(join(tempDir(), 'out.db'));
  const rt = new TaskRuntime({ store, inlineBudgetMs });
  return { rt, store };
}

const texts = (items: Array<{ data: unknown }>) => items.map((i) => (i.data as { text?: string }).text ?? JSON.stringify(i.data));

describe('ctx.output', () => {
  it('refuses an unknown type form and an item over 64 KiB clearly, and keeps what was written', async () => {
    const { rt, store } = await runtime(10_000);
    const errors: string[] = [];
    rt.defineTool('emit', {
      handler: async (_a, ctx) => {
        await ctx.promote();
        await ctx.output('first');
        for (const bad of [{ type: 'progress', data: 1 }, { type: 'com.example/progress' }, { type: 'text' }, 42, 'x'.repeat(70_000)]) {
          try {
            await ctx.output(bad as never);
          } catch (e) {
            errors.push(`${(e as Error).name}: ${(e as Error).message}`);
          }
        }
        await ctx.output([{ type: 'com.example/progress', data: { done: 1 } }, { type: 'resource_link', uri: 'file:///log', name: 'log' }]);
        return { content: [] };
      },
    });
    await rt.start();
    try {
      const r = await rt.call('emit', {}, DECLARED);
      assert.equal(r.kind, 'task');
      if (r.kind !== 'task') return;
      const taskId = r.task.taskId;
      for (let i = 0; i < 50 && (await rt.getTask(taskId, 'p')).status !== 'completed'; i++) await sleep(50);
      assert.deepEqual(errors, [
        'OutputError: ctx.output: type "progress" is neither a content block (text, image, audio, resource_link, resource) nor vendor-prefixed (e.g. "com.example/progress")',
        'OutputError: ctx.output: an event of type "com.example/progress" needs data (any JSON value)',
        'OutputError: ctx.output: a text block needs text (a string)',
        'OutputError: ctx.output: expected a string, an MCP content block ({type: "text", text}, image, audio, resource_link, resource) or {type: "vendor.prefix/name", data}',
        'OutputError: ctx.output: one item is 70025 bytes of JSON; the limit is 65536 (split it, or store it elsewhere and emit a resource_link)',
      ]);
      const page = (await store.output.read(taskId, 'p', 0, 100))!;
      assert.deepEqual(page.items.map((i) => [i.seq, i.type]), [[1, 'text'], [2, 'com.example/progress'], [3, 'resource_link']]);
      assert.deepEqual(page.items[1]!.data, { done: 1 });
      const got = await rt.getTask(taskId, 'p');
      assert.deepEqual(got._meta, { 'outlast/outputSeq': 3 });
    } finally {
      await rt.stop();
    }
  });

  it('output emitted while the call ran inline is written once it becomes a task, before later output', async () => {
    const { rt, store } = await runtime(150);
    rt.defineTool('slow', {
      handler: async (_a, ctx) => {
        await ctx.output('while inline');
        await sleep(400);
        await ctx.output('as a task');
        return { content: [] };
      },
    });
    await rt.start();
    try {
      const r = await rt.call('slow', {}, DECLARED);
      assert.equal(r.kind, 'task');
      if (r.kind !== 'task') return;
      for (let i = 0; i < 50 && (await rt.getTask(r.task.taskId, 'p')).status !== 'completed'; i++) await sleep(50);
      const page = (await store.output.read(r.task.taskId, 'p', 0, 100))!;
      assert.deepEqual(texts(page.items), ['while inline', 'as a task']);
      assert.deepEqual(page.items.map((i) => i.seq), [1, 2]);
      // A call that finishes inline has no task: tasks/get of nothing, no stored output.
      const quick = await runtime(5000);
      quick.rt.defineTool('quick', { handler: async (_a, ctx) => (await ctx.output('gone with the inline result'), { content: [] }) });
      await quick.rt.start();
      try {
        assert.equal((await quick.rt.call('quick', {}, DECLARED)).kind, 'result');
      } finally {
        await quick.rt.stop();
      }
    } finally {
      await rt.stop();
    }
  });
  it('a handler emitting in a tight loop (no other I/O) still becomes a task at the inline budget, and its output is kept', async () => {
    const { rt, store } = await runtime(100);
    // It emits until the call has been a task for 100 items (a fixed count finished inside the budget on a quiet
    // machine); the cap ends it inline if the budget never fires, which the assertion below reports.
    let count = 0;
    rt.defineTool('burst', {
      handler: async (_a, ctx) => {
        let afterPromotion = 0;
        while (count < 2_000_000 && (ctx.taskId === undefined || ++afterPromotion <= 100)) await ctx.output(`line ${++count}`);
        return { content: [{ type: 'text', text: `emitted ${count}` }] };
      },
    });
    await rt.start();
    try {
      const r = await rt.call('burst', {}, DECLARED);
      assert.equal(r.kind, 'task', 'the inline budget fired while the handler emitted');
      if (r.kind !== 'task') return;
      for (let i = 0; i < 1200 && (await rt.getTask(r.task.taskId, 'p')).status !== 'completed'; i++) await sleep(50);
      assert.equal((await rt.getTask(r.task.taskId, 'p')).status, 'completed');
      const page = (await store.output.read(r.task.taskId, 'p', count - 3, 100))!;
      assert.deepEqual(texts(page.items), [`line ${count - 2}`, `line ${count - 1}`, `line ${count}`]);
      assert.equal(page.last, count, 'every item numbered, the newest kept');
    } finally {
      await rt.stop();
    }
  });
});
