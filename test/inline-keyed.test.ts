/**
 * A quick call answers inline through every client, exactly once (issue 42, item 1). Outlast's own client (TaskClient,
 * `outlast call`) sends an idempotency key with every call, and a keyed call is stored before it runs; it is still
 * answered with its plain result when it ends within the inline budget. A retry with the same key after a lost answer
 * gets the same answer and runs nothing again: inline for a call answered inline, the same task for one that outlasted
 * the budget. Real `outlast serve` processes (the demo and the fixtures), the CLI as a child process, TaskClient through
 * a loopback proxy that loses an answer after the server produced it.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import Database from 'better-sqlite3';
import { TaskClient } from '../src/client/index.js';
import { TaskProtocolError } from '../src/protocol/index.js';
import { TaskRuntime, type RuntimeAlert } from '../src/runtime/runtime.js';
import { SqliteTaskStore } from '../src/store/sqlite/index.js';
import { ROOT, sleep, tempDir, textOf, until, useServer } from './helpers.js';
import { busyEvents } from './busy-log.js';
import { runCli, startProxy } from './client-helpers.js';

const DEMO = join(ROOT, 'dist', 'demo', 'server.js');
const KEY = 'outlast/idempotencyKey';

/** The server's rows of `tool` (read from its SQLite file). */
function rows(db: string, tool: string): Array<{ task_id: string; status: string; status_message: string | null }> {
  const d = new Database(db, { readonly: true, fileMustExist: true });
  try {
    return d.prepare('SELECT task_id, status, status_message FROM tasks WHERE tool = ? ORDER BY created_at').all(tool) as never;
  } finally {
    d.close();
  }
}

describe('keyed calls answer inline when they finish within the inline budget', () => {
  const demo = useServer([], { module: DEMO });
  const fixtures = useServer(['--poll-interval-ms', '300']);
  const patient = useServer(['--inline-budget-ms', '5000']);

  test("`outlast call` of the demo's small reindex answers inline: the CLI says so and prints no task line", async () => {
    const journal = join(tempDir(), 'journal.db');
    const call = runCli(['call', demo.url, 'reindex', '{"collection":"docs","documents":100}', '--journal', journal]);
    const { code } = await call.exited;
    assert.equal(code, 0, call.stderr());
    assert.equal(call.stdout(), 'Reindexed 100 documents in "docs" (attempt 1).\n');
    assert.match(call.stderr(), /reindex: answered inline \(it finished within the server's inline budget; no task\)/);
    assert.doesNotMatch(call.stderr(), /task \S+ (created|working|completed)/, 'no task line');
    // The keyed call's row holds its outcome for a retry, marked answered inline; the journal has it done.
    assert.deepEqual(rows(demo.sqlitePath!, 'reindex').map((r) => [r.status, r.status_message]), [['completed', 'Answered inline']]);
    const tasks = runCli(['tasks', '--journal', journal, '--json']);
    assert.equal((await tasks.exited).code, 0, tasks.stderr());
    const entries = JSON.parse(tasks.stdout()) as Array<Record<string, unknown>>;
    assert.equal(entries.length, 1);
    assert.equal(entries[0]!.state, 'completed');
    assert.equal(entries[0]!.inline, true);
  });

  test('an answer lost on the wire: the retry with the same key gets the same answer and the handler runs once; inline when it was answered inline, the same (finished) task when it outlasted the budget', async () => {
    for (const { seconds, inline } of [{ seconds: 0.05, inline: true }, { seconds: 2, inline: false }]) {
      const log = join(tempDir(), 'busy.log');
      const journal = join(tempDir(), 'journal.db');
      const proxy = await startProxy(fixtures.url);
      try {
        const first = new TaskClient({ url: proxy.url, journal, status: 'poll', retry: { attempts: 1 } });
        proxy.dropNext((s) => s.method === 'tools/call');
        await assert.rejects(first.callTool('busy', { seconds, log }), /gave up after 1 attempt/);
        await first.close();
        // The retry comes once the run has ended: the slow call's task is finished by then (read with tasks/get).
        await until('the first run ended', () => busyEvents(log).some((e) => e.kind === 'END'), 10_000);

        const second = new TaskClient({ url: proxy.url, journal, status: 'poll' });
        const [resumed] = await second.resume();
        assert.ok(resumed, 'the journal still holds the unanswered call');
        const result = await resumed.result();
        await second.close();

        const calls = proxy.seen.filter((s) => s.method === 'tools/call');
        assert.equal(calls.length, 2);
        assert.equal(calls[1]!.body.params._meta[KEY], calls[0]!.body.params._meta[KEY], 'the retry carries the same key');
        const starts = busyEvents(log).filter((e) => e.kind === 'START');
        assert.equal(starts.length, 1, `${seconds} s: the handler ran once (${JSON.stringify(busyEvents(log))})`);
        assert.equal(textOf(result), `Busy for ${seconds} s in ${starts[0]!.pid}`);
        assert.equal(resumed.inline, inline, `${seconds} s: answered ${inline ? 'inline' : 'as a task'} on the retry too`);
        if (inline) assert.equal(resumed.taskId, undefined);
        else assert.equal(resumed.taskId, starts[0]!.taskId, 'the retry got the task the first call became');
      } finally {
        await proxy.close();
      }
    }
  });

  test('with --inline-budget-ms 5000, a 2 s call of TaskClient.start answers inline', async () => {
    const log = join(tempDir(), 'busy.log');
    const client = new TaskClient({ url: patient.url, journal: join(tempDir(), 'journal.db'), status: 'poll' });
    try {
      const call = await client.start('busy', { seconds: 2, log });
      assert.equal(call.inline, true);
      assert.equal(call.taskId, undefined);
      assert.match(textOf(await call.result()), /^Busy for 2 s in \d+$/);
      assert.equal(busyEvents(log).filter((e) => e.kind === 'START').length, 1);
    } finally {
      await client.close();
    }
  });
});

describe('a keyed call answered inline, in-process (SQLite)', () => {
  const DECLARED = { principal: 'p', clientCapabilities: { extensions: { 'io.modelcontextprotocol/tasks': {} }, elicitation: {} }, tasksDeclared: true };
  const keyed = (idempotencyKey: string) => ({ ...DECLARED, idempotencyKey });

  test('a retry gets the same result or error inline (its own caller only), a 2025-11-25 params.task the task; a handler that asks or promotes gives its caller the task at once; a failure answered inline raises no unread-failure alert', async () => {
    const rt = new TaskRuntime({ store: new SqliteTaskStore(join(tempDir(), 'rt.db')), inlineBudgetMs: 3000 });
    let runs = 0;
    rt.defineTool('quick', { handler: async () => ({ content: [{ type: 'text', text: `run ${++runs}` }] }) });
    rt.defineTool('refuse', {
      ttlMs: 300,
      handler: async () => {
        runs++;
        throw new TaskProtocolError(-32602, 'no such collection', { collection: 'x' });
      },
    });
    rt.defineTool('asks', { handler: async (_a, ctx) => (await ctx.elicit('Go?', { type: 'object', properties: {} }), { content: [] }) });
    rt.defineTool('promotes', { handler: async (_a, ctx) => (await ctx.promote(), await sleep(200), { content: [] }) });
    const alerts: RuntimeAlert[] = [];
    rt.on('alert', (a: RuntimeAlert) => alerts.push(a));
    await rt.start();
    try {
      const first = await rt.call('quick', {}, keyed('a'));
      assert.deepEqual(first, { kind: 'result', result: { content: [{ type: 'text', text: 'run 1' }] } });
      assert.deepEqual(await rt.call('quick', {}, keyed('a')), first, 'the retry: the same result, inline, not run again');
      const other = await rt.call('quick', {}, { ...keyed('a'), principal: 'q' });
      assert.deepEqual(other, { kind: 'result', result: { content: [{ type: 'text', text: 'run 2' }] } }, "another caller's key is its own: it runs, and never reads the first caller's answer");
      const legacy = await rt.call('quick', {}, { ...keyed('a'), taskRequested: {} });
      assert.equal(legacy.kind, 'task', 'params.task asks for a task: it gets the one that holds the answer');
      if (legacy.kind === 'task') assert.deepEqual([legacy.record.status, legacy.record.statusMessage], ['completed', 'Answered inline']);
      assert.equal(runs, 2);

      const refused = (e: unknown) => e instanceof TaskProtocolError && e.code === -32602 && e.message === 'no such collection' && (e.data as { collection?: string }).collection === 'x';
      await assert.rejects(rt.call('refuse', {}, keyed('b')), refused);
      await assert.rejects(rt.call('refuse', {}, keyed('b')), refused, 'the retry: the same JSON-RPC error');
      assert.equal(runs, 3);

      for (const tool of ['asks', 'promotes']) {
        const t0 = Date.now();
        const r = await rt.call(tool, {}, keyed(`${tool}-1`));
        assert.equal(r.kind, 'task', `${tool}: the caller gets the task at once`);
        assert.ok(Date.now() - t0 < 2000, `${tool}: not after the 3 s budget`);
      }

      // An unread failure of a task raises the alert once its TTL passes; the one answered inline was read.
      const unread = await rt.call('refuse', {}, { ...keyed('c'), taskRequested: {} });
      await sleep(500);
      await rt.sweep();
      assert.deepEqual(alerts.map((a) => [a.kind, a.taskId]), [['failed-unretrieved', unread.kind === 'task' ? unread.task.taskId : '']]);
    } finally {
      await rt.stop(1000);
    }
  });
});
