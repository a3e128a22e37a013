// test:quick: starts no process and no browser (npm run test:quick).
/** The runtime in-process, on a real SQLite file: policies, alerts, shutdown, poll intervals. */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { TaskRuntime, type RuntimeAlert, type RuntimeOptions } from '../src/runtime/runtime.js';
import { PollGovernor, advertisedPollInterval, DEFAULT_POLL_POLICY } from '../src/runtime/poll.js';
import { SqliteTaskStore } from '../src/store/sqlite/index.js';
import { newTaskId } from '../src/runtime/ids.js';
import { sleep, tempDir, until } from './helpers.js';

/** The task once it is no longer working (on a loaded machine its outcome is written late, not within a fixed sleep). */
const endOf = (rt: TaskRuntime, taskId: string) =>
  until('the task to end', async () => {
    const t = await rt.getTask(taskId, 'p');
    return t.status !== 'working' && t;
  });

const DECLARED = { principal: 'p', clientCapabilities: { extensions: { 'io.modelcontextprotocol/tasks': {} }, elicitation: {} }, tasksDeclared: true };

async function runtime(opts: Partial<RuntimeOptions> = {}, path = join(tempDir(), 'rt.db')) {
  const rt = new TaskRuntime({ store: new SqliteTaskStore(path), ...opts });
  return { rt, path };
}

function gate() {
  let open!: () => void;
  const p = new Promise<void>((r) => (open = r));
  return { p, open };
}

describe('runtime', () => {
  it('promotes at once when the replica is over its concurrency limit', async () => {
    const { rt } = await runtime({ concurrencyLimit: 2, inlineBudgetMs: 5000 });
    const g = gate();
    rt.defineTool('hold', { handler: async () => (await g.p, { content: [] }) });
    await rt.start();
    try {
      const first = rt.call('hold', {}, DECLARED);
      const second = rt.call('hold', {}, DECLARED);
      const t0 = Date.now();
      const third = await rt.call('hold', {}, DECLARED);
      assert.equal(third.kind, 'task', 'the third concurrent call did not wait for the 5 s budget');
      assert.ok(Date.now() - t0 < 1000);
      g.open();
      assert.equal((await first).kind, 'result');
      assert.equal((await second).kind, 'result');
    } finally {
      await rt.stop(1000);
    }
  });

  it('a waiter on the replica that runs a task gets its end from the finishing write, reading nothing', async () => {
    const store = new SqliteTaskStore(join(tempDir(), 'rt.db'));
    const rt = new TaskRuntime({ store });
    const g = gate();
    rt.defineTool('slow', { policy: 'always', handler: async () => (await g.p, { content: [{ type: 'text', text: 'built' }] }) });
    await rt.start();
    try {
      const created = await rt.call('slow', {}, DECLARED);
      assert.ok(created.kind === 'task');
      const view = store.view.bind(store);
      let reads = 0;
      store.view = (id) => (reads++, view(id));
      const ended = rt.untilTerminal(created.task.taskId, 'p', 10_000);
      g.open();
      const v = await ended;
      assert.equal(v?.status, 'completed');
      assert.deepEqual(v?.result, { content: [{ type: 'text', text: 'built' }], resultType: 'complete' });
      assert.equal(reads, 0, 'the run is here: no read when the wait began, none after the finish');
      // What it got is what reading the row gives (the row stays the truth; another replica reads it).
      const row = await view(created.task.taskId);
      assert.ok(row.state === 'found');
      assert.deepEqual(Object.fromEntries(Object.entries(v!).filter(([k]) => k in row.record)), row.record);
    } finally {
      await rt.stop(1000);
    }
  });

  it('a wait on a task running here: another principal is told it does not exist, an end written elsewhere is seen, one ended at creation answers at once', async () => {
    const store = new SqliteTaskStore(join(tempDir(), 'rt.db'));
    const rt = new TaskRuntime({ store, watchRecheckMs: 3000 });
    const g = gate();
    rt.defineTool('slow', { policy: 'always', handler: async () => (await g.p, { content: [] }) });
    rt.defineTool('quick', { policy: 'always', handler: async () => ({ content: [{ type: 'text', text: 'at once' }] }) });
    await rt.start();
    try {
      const created = await rt.call('slow', {}, DECLARED);
      assert.ok(created.kind === 'task');
      const id = created.task.taskId;
      const unknown = await rt.untilTerminal(newTaskId(), 'p', 1000).then(() => 'answered', (e: Error) => e.message);
      assert.match(unknown, /not found/i);
      assert.equal(await rt.untilTerminal(id, 'somebody-else', 1000).then(() => 'answered', (e: Error) => e.message), unknown, 'the same answer as for a task that does not exist');
      // An end this process did not write nor signal (another replica's, its signal lost): the wait's re-read finds it.
      const ended = rt.untilTerminal(id, 'p', 10_000);
      await store.finish(id, null, { status: 'cancelled' }, 'ended by another replica', store.now());
      assert.equal((await ended)?.status, 'cancelled');
      // Written finished in its creation: no signal will follow, and the wait answers from the row.
      const quick = await rt.call('quick', {}, DECLARED);
      assert.ok(quick.kind === 'task');
      const t0 = Date.now();
      assert.equal((await rt.untilTerminal(quick.task.taskId, 'p', 10_000))?.status, 'completed');
      assert.ok(Date.now() - t0 < 2500, `answered after ${Date.now() - t0} ms: not left to the re-read`);
    } finally {
      g.open();
      await rt.stop(1000);
    }
  });

  it('a handler can promote itself, and statusMessage given before promotion is kept', async () => {
    const { rt } = await runtime({ inlineBudgetMs: 10_000 });
    const g = gate();
    rt.defineTool('early', {
      handler: async (_a, ctx) => {
        await ctx.status('queued behind 3 builds');
        await ctx.promote();
        await g.p;
        return { content: [{ type: 'text', text: `task ${ctx.taskId}` }] };
      },
    });
    await rt.start();
    try {
      const r = await rt.call('early', {}, DECLARED);
      assert.equal(r.kind, 'task');
      if (r.kind !== 'task') return;
      assert.equal(r.task.statusMessage, 'queued behind 3 builds');
      g.open();
      const t = await endOf(rt, r.task.taskId);
      assert.equal(t.status, 'completed');
      assert.deepEqual((t as { result: unknown }).result, { content: [{ type: 'text', text: `task ${r.task.taskId}` }], resultType: 'complete' });
    } finally {
      await rt.stop();
    }
  });

  it('a handler that asks to promote and returns at once still ends as a finished task, never an orphan row', async () => {
    const { rt } = await runtime({ inlineBudgetMs: 10_000 });
    rt.defineTool('quick', {
      handler: (_a, ctx) => {
        void ctx.promote();
        return { content: [{ type: 'text', text: 'done' }] };
      },
    });
    await rt.start();
    try {
      const r = await rt.call('quick', {}, DECLARED);
      assert.equal(r.kind, 'task');
      if (r.kind !== 'task') return;
      const ended = await endOf(rt, r.task.taskId);
      assert.equal(ended.status, 'completed');
    } finally {
      await rt.stop();
    }
  });

  it('raises an alert when a failure expires without anyone reading it', async () => {
    const { rt } = await runtime({ defaultTtlMs: 200 });
    rt.defineTool('boom', { policy: 'always', handler: () => Promise.reject(Object.assign(new Error('disk full'), { code: -32603 })) });
    const alerts: RuntimeAlert[] = [];
    rt.on('alert', (a: RuntimeAlert) => alerts.push(a));
    await rt.start();
    try {
      const read = await rt.call('boom', {}, DECLARED);
      const unread = await rt.call('boom', {}, DECLARED);
      if (read.kind === 'task') {
        const ended = await endOf(rt, read.task.taskId);
        assert.equal(ended.status, 'failed');
      }
      await sleep(300);
      await rt.sweep();
      assert.deepEqual(
        alerts.map((a) => [a.kind, a.taskId]),
        [['failed-unretrieved', unread.kind === 'task' ? unread.task.taskId : '']],
      );
    } finally {
      await rt.stop();
    }
  });

  it('on stop, a task that outlasts the drain is failed with the reason unless it is safe to re-run', async () => {
    const { rt, path } = await runtime({ inlineBudgetMs: 10 });
    rt.defineTool('forever', { policy: 'always', handler: (_a, ctx) => new Promise((_r, rej) => ctx.signal.addEventListener('abort', () => rej(ctx.signal.reason))) });
    rt.defineTool('forever_safe', { policy: 'always', retrySafe: true, handler: (_a, ctx) => new Promise((_r, rej) => ctx.signal.addEventListener('abort', () => rej(ctx.signal.reason))) });
    await rt.start();
    const a = await rt.call('forever', {}, DECLARED);
    const b = await rt.call('forever_safe', {}, DECLARED);
    await rt.stop(100);
    const store = new SqliteTaskStore(path);
    await store.init();
    const ra = await store.get(a.kind === 'task' ? a.task.taskId : '');
    const rb = await store.get(b.kind === 'task' ? b.task.taskId : '');
    assert.ok(ra.state === 'found' && ra.record.status === 'failed' && /shut down before the task finished/.test(ra.record.error!.message));
    assert.ok(rb.state === 'found' && rb.record.status === 'working', 'left for the next start to re-run');
    await store.close();
  });

  it('refuses a tool defined twice, an unknown policy and a bad TTL', () => {
    const rt = new TaskRuntime({ store: new SqliteTaskStore(join(tempDir(), 'x.db')) });
    rt.defineTool('a', { handler: () => ({ content: [] }) });
    assert.throws(() => rt.defineTool('a', { handler: () => ({ content: [] }) }), /already defined/);
    assert.throws(() => rt.defineTool('b', { policy: 'sometimes' as never, handler: () => ({ content: [] }) }), /policy must be/);
    assert.throws(() => new TaskRuntime({ store: new SqliteTaskStore(':memory:'), defaultTtlMs: -5 }), /defaultTtlMs must be a positive integer/);
  });
});

describe('task ids', () => {
  it('are 22 base64url characters, distinct, and never begin with "-" (a shell would take the id for a flag)', () => {
    const ids = Array.from({ length: 20_000 }, newTaskId); // 1 in 64 random draws begins with "-"
    for (const id of ids) assert.match(id, /^[A-Za-z0-9_][A-Za-z0-9_-]{21}$/);
    assert.equal(new Set(ids).size, ids.length);
    assert.ok(ids.some((id) => id.startsWith('_')), 'the other 63 first characters are all still drawn');
  });
});

describe('poll interval and governor', () => {
  it('the advertised interval starts at the tool granularity and grows with age', () => {
    const now = 1_000_000;
    const young = advertisedPollInterval({ pollIntervalMs: 500, createdAt: now - 1000, status: 'working' }, now, DEFAULT_POLL_POLICY);
    const mid = advertisedPollInterval({ pollIntervalMs: 500, createdAt: now - 60_000, status: "working" }, now, DEFAULT_POLL_POLICY);
    const old = advertisedPollInterval({ pollIntervalMs: 500, createdAt: now - 600_000, status: 'working' }, now, DEFAULT_POLL_POLICY);
    const ancient = advertisedPollInterval({ pollIntervalMs: 500, createdAt: now - 86_400_000, status: 'working' }, now, DEFAULT_POLL_POLICY);
    assert.equal(young, 500);
    assert.equal(mid, 6000, "a minute old: polled every 6 s");
    assert.equal(old, 30_000, "ten minutes old: a tenth of its age, capped at maxMs");
    assert.equal(ancient, DEFAULT_POLL_POLICY.maxMs);
    const slowTool = advertisedPollInterval({ pollIntervalMs: 5000, createdAt: now - 1000, status: 'working' }, now, DEFAULT_POLL_POLICY);
    assert.equal(slowTool, 5000);
  });

  it('allows a burst, then holds polls to `factor` times the advertised rate, with bounded memory', () => {
    const g = new PollGovernor({ factor: 4, burst: 3, maxEntries: 2 });
    assert.equal(g.check('p', 't', 0), 0, 'a task never advertised to this caller is not limited');
    g.advertised('p', 't', 1000, 0);
    assert.equal(g.check('p', 't', 1), 0);
    assert.equal(g.check('p', 't', 2), 0);
    const wait = g.check('p', 't', 3);
    assert.ok(wait > 0 && wait <= 250, `wait ${wait}`);
    assert.equal(g.check('p', 't', 3 + 250), 0, 'coming back after the wait is allowed');
    g.advertised('p', 'u', 1000, 0);
    g.advertised('p', 'v', 1000, 0);
    assert.equal(g.size, 2);
    assert.equal(g.check('p', 't', 300), 0, 'the oldest entry was evicted');
  });
});

describe('runtime: cancel that must be final (2025-11-25), and handles', () => {
  it('cancelNow ends a task whose handler ignores the signal after the grace, and refuses its late outcome', async () => {
    const { rt } = await runtime();
    const g = gate();
    let finished = false;
    rt.defineTool('stubborn', {
      policy: 'always',
      handler: async () => {
        await g.p; // ignores ctx.signal
        finished = true;
        return { content: [{ type: 'text', text: 'done anyway' }] };
      },
    });
    await rt.start();
    try {
      const r = await rt.call('stubborn', {}, DECLARED);
      assert.equal(r.kind, 'task');
      if (r.kind !== 'task') return;
      const t0 = Date.now();
      const view = await rt.cancelNow(r.task.taskId, 'p', 300);
      assert.equal(view.status, 'cancelled');
      assert.equal(view.statusMessage, 'Cancelled by the caller');
      assert.ok(Date.now() - t0 >= 290, 'it waited the grace first');
      g.open();
      await sleep(100);
      assert.ok(finished);
      const after = await rt.getTask(r.task.taskId, 'p');
      assert.equal(after.status, 'cancelled', 'the late outcome was refused: terminal is final');
      await assert.rejects(rt.cancelNow(r.task.taskId, 'p', 300), /already in terminal status 'cancelled'/);
      await assert.rejects(rt.cancelNow(r.task.taskId, 'someone-else', 300), /Task not found/);
    } finally {
      await rt.stop(100);
    }
  });

  it('a call from a client that cannot receive a task answers inline when quick and a handle when not; keyed, a retry finds the same task', async () => {
    const { rt } = await runtime({ inlineBudgetMs: 50 });
    rt.defineTool('nap', { handler: async ({ ms }) => (await sleep(Number(ms)), { content: [{ type: 'text', text: `napped ${String(ms)}` }] }) });
    await rt.start();
    try {
      const plain = { principal: 'p', clientCapabilities: {}, tasksDeclared: false, handleAfterMs: 300 };
      const quick = await rt.call('nap', { ms: 100 }, plain);
      assert.equal(quick.kind, 'result', 'within the handle budget (longer than the 50 ms inline budget): inline');
      const slow = await rt.call('nap', { ms: 800 }, plain);
      assert.equal(slow.kind, 'handle');
      if (slow.kind !== 'handle') return;
      assert.equal(slow.record.origin, 'handle');
      const keyed = { ...plain, idempotencyKey: 'k-1' };
      const [a, b] = await Promise.all([rt.call('nap', { ms: 800 }, keyed), rt.call('nap', { ms: 800 }, keyed)]);
      assert.equal(a.kind, 'handle');
      assert.equal(b.kind, 'handle');
      if (a.kind !== 'handle' || b.kind !== 'handle') return;
      assert.equal(a.record.taskId, b.record.taskId);
      const fast = await rt.call('nap', { ms: 10 }, { ...plain, idempotencyKey: 'k-2' });
      assert.equal(fast.kind, 'result', 'a keyed call that finishes in time answers inline');
      const again = await rt.call('nap', { ms: 10 }, { ...plain, idempotencyKey: 'k-2' });
      assert.equal(again.kind, 'handle', 'and its retry finds the task that holds its outcome');
      if (again.kind === 'handle') assert.equal(again.record.status, 'completed');
    } finally {
      await rt.stop(2000);
    }
  });
});
