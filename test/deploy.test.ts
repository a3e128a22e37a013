/**
 * A rolling deploy fails nothing that can go on (issue 42, item 8): two `outlast serve` replicas on one PostgreSQL
 * schema, one of them stopped with SIGTERM as an orchestrator stops it, while it runs a task of each kind. Its
 * readiness turns not ready at once; its durable and retry-safe tasks complete on the other replica right away (long
 * before its lease would let anyone take them); its task that is not safe to re-run finishes within the default
 * drain; one that outlasts the drain, or a second signal, ends failed naming the stop; nothing is left waiting.
 */
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { setTimeout as delay } from 'node:timers/promises';
import type { TaskContext } from '../src/runtime/context.js';
import { TaskRuntime } from '../src/runtime/runtime.js';
import { SqliteTaskStore } from '../src/store/sqlite/index.js';
import { ROOT, alive, getTask, rpc, sleep, tempDir, textOf, until } from './helpers.js';
import { created, startCluster, type Cluster } from './replicas.js';
import { finalStatus } from './replica-suites.js';
import type { RunEvent } from './drain-module.js';

const MODULE = join(ROOT, 'dist', 'test', 'drain-module.js');
const LEASE_MS = 20_000;

function events(c: Cluster): RunEvent[] {
  return existsSync(c.runLog) ? readFileSync(c.runLog, 'utf8').trim().split('\n').filter(Boolean).map((l) => JSON.parse(l) as RunEvent) : [];
}

const of = (c: Cluster, key: string) => events(c).filter((e) => e.key === key);

/** The first answer of `url`'s /readyz that is not "ready" (or `refused`: the connection was) within `ms`. */
async function firstNotReady(mcpUrl: string, ms: number): Promise<{ status: number; body: Record<string, unknown> } | 'refused'> {
  const url = mcpUrl.replace(/\/mcp$/, '/readyz');
  const end = Date.now() + ms;
  for (;;) {
    let res: Response;
    try {
      res = await fetch(url);
    } catch {
      return 'refused';
    }
    const body = (await res.json()) as Record<string, unknown>;
    if (res.status !== 200) return { status: res.status, body };
    if (Date.now() > end) assert.fail(`${url} still answered ready ${ms} ms after SIGTERM`);
    await sleep(20);
  }
}

async function withCluster(args: string[], run: (c: Cluster) => Promise<void>): Promise<void> {
  // No --drain-ms: the product's default (the test helpers' shorter one is for servers stopped only to clean up).
  const c = await startCluster(2, ['--lease-ms', String(LEASE_MS), ...args], { module: MODULE, drain: 'default' });
  try {
    await run(c);
  } finally {
    await c.stop();
  }
}

describe(`SIGTERM of a replica during a rolling deploy (two PostgreSQL replicas, lease ${LEASE_MS / 1000} s)`, () => {
  it('default drain: not ready at once; its durable and retry-safe tasks complete on the other replica while it still drains (no step cut or run twice); its unsafe task finishes', async () => {
    await withCluster([], async (c) => {
      const [a, b] = c.replicas;
      const unsafe = await created(a!.url, 'unsafe', { key: 'u', ms: 12_000 });
      const safe = await created(a!.url, 'safe', { key: 's', ms: 3000 });
      const durable = await created(a!.url, 'durable', { key: 'd', steps: 3, stepMs: 2000 });
      await until('every run started on the first replica', () => of(c, 'u').length && of(c, 's').length && of(c, 'd').length, 10_000);
      await sleep(500); // inside the durable task's first step, which is not idempotent
      const stoppedAt = Date.now();
      process.kill(a!.pid, 'SIGTERM');
      const readiness = firstNotReady(a!.url, 5000);

      const done: Record<string, Record<string, any>> = {};
      for (const [key, id] of [['s', safe], ['d', durable]] as const) {
        const t = (done[key] = await finalStatus(b!.url, id, {}, LEASE_MS));
        const doneAt = Date.now() - stoppedAt;
        assert.equal(t.status, 'completed', `${key}: ${JSON.stringify(t)}`);
        assert.equal(JSON.parse(textOf(t.result)).pid, b!.pid, `${key} completed on the other replica`);
        assert.ok(doneAt < LEASE_MS / 2, `${key} completed ${doneAt} ms after SIGTERM, not after a lease`);
        assert.ok(alive(a!.pid) && !of(c, 'u').some((e) => e.event === 'end'), `${key} completed while the stopped replica still drained its unsafe task`);
      }
      // The retry-safe task started again on the other replica at once; the durable one once its step had ended there.
      const movedAt = (key: string) => of(c, key).find((e) => e.pid === b!.pid)!.at - stoppedAt;
      assert.ok(movedAt('s') < 5000, `the retry-safe task started on the other replica ${movedAt('s')} ms after SIGTERM`);
      const steps = of(c, 'd').filter((e) => e.event === 'step');
      assert.deepEqual(steps.map((e) => e.step), ['s1', 's2', 's3'], 'each durable step ran once: the one running at SIGTERM was not cut');
      assert.equal(steps[0]!.pid, a!.pid);
      assert.deepEqual(steps.slice(1).map((e) => e.pid), [b!.pid, b!.pid]);
      assert.deepEqual(JSON.parse(textOf(done.d!.result)).stepPids, [a!.pid, b!.pid, b!.pid]);

      // Its readiness turned at once (while it went on serving: not a refused connection).
      const ready = await readiness;
      assert.notEqual(ready, 'refused', '/readyz still answers while the replica drains');
      if (ready !== 'refused') assert.deepEqual([ready.status, ready.body.status, ready.body.reason], [503, 'not ready', 'shutting down']);

      const u = await finalStatus(b!.url, unsafe, {}, 20_000);
      assert.equal(u.status, 'completed', `the unsafe task finished within the drain: ${JSON.stringify(u)}`);
      assert.equal(JSON.parse(textOf(u.result)).pid, a!.pid);
      const exit = await a!.stop();
      assert.equal(exit.code, 0);
      assert.ok(Date.now() - stoppedAt < 20_000, 'the replica exited once its last task was done, not at the end of the drain');
      assert.equal(of(c, 'u').filter((e) => e.event === 'start').length, 1, 'the unsafe task ran once');
      assert.equal(of(c, 's').filter((e) => e.event === 'start').length, 2, 'the retry-safe task: stopped on the first replica, run again on the second');
    });
  });

  it('a task that outlasts the drain ends failed naming the stop; a question of a tool that is not durable answered during the drain completes; a call reaching the draining replica is refused with a retry time', async () => {
    await withCluster(['--drain-ms', '3000'], async (c) => {
      const [a, b] = c.replicas;
      const long = await created(a!.url, 'unsafe', { key: 'long', ms: 60_000 });
      const ask = await created(a!.url, 'ask', { key: 'q' });
      await until('both started', () => of(c, 'long').length && of(c, 'q').length, 10_000);
      await until('the question is asked', async () => (await getTask(b!.url, ask)).result.status === 'input_required', 10_000);
      const stoppedAt = Date.now();
      process.kill(a!.pid, 'SIGTERM');
      await firstNotReady(a!.url, 5000);

      const refused = await rpc(a!.url, 'tools/call', { name: 'safe', arguments: { key: 'late', ms: 10 } });
      assert.equal(refused.status, 503);
      assert.equal(refused.error?.code, -31503);
      assert.equal(refused.error?.data?.reason, 'shutting_down');
      assert.ok(refused.headers.get('retry-after'), 'a retry time');

      // The question's answer goes through the other replica; the handler waiting on the stopping one finishes.
      const upd = await rpc(b!.url, 'tasks/update', { taskId: ask, inputResponses: { go: { action: 'accept', content: { ok: true } } } });
      assert.equal(upd.error, undefined);
      const q = await finalStatus(b!.url, ask, {}, 10_000);
      assert.equal(q.status, 'completed', JSON.stringify(q));
      assert.deepEqual([JSON.parse(textOf(q.result)).pid, JSON.parse(textOf(q.result)).action], [a!.pid, 'accept']);

      const t = await finalStatus(b!.url, long, {}, 15_000);
      assert.equal(t.status, 'failed', JSON.stringify(t));
      assert.equal(t.error.data.reason, 'shutdown');
      assert.match(t.error.message, /^The server shut down before the task finished: its drain ended [\d.]+ s after the stop began \(--drain-ms\); the tool is not declared safe to re-run$/);
      assert.ok(Date.now() - stoppedAt < LEASE_MS / 2, 'ended by the stopping replica itself, not by a takeover after its lease');
      assert.equal((await a!.stop()).code, 0);
    });
  });

  it('a second SIGTERM ends the drain now: the replica exits at once and its unsafe task fails naming the stop', async () => {
    await withCluster(['--drain-ms', '25000'], async (c) => {
      const [a, b] = c.replicas;
      const long = await created(a!.url, 'unsafe', { key: 'long', ms: 60_000 });
      await until('it started', () => of(c, 'long').length, 10_000);
      process.kill(a!.pid, 'SIGTERM');
      await firstNotReady(a!.url, 5000);
      await sleep(500);
      assert.ok(alive(a!.pid), 'still draining');
      const secondAt = Date.now();
      process.kill(a!.pid, 'SIGTERM');
      assert.equal((await a!.stop()).code, 0);
      assert.ok(Date.now() - secondAt < 5000, `exited ${Date.now() - secondAt} ms after the second SIGTERM`);
      const t = (await getTask(b!.url, long)).result;
      assert.equal(t.status, 'failed', JSON.stringify(t));
      assert.equal(t.error.data.reason, 'shutdown');
      assert.match(t.error.message, /shut down before the task finished/);
      assert.match(a!.stderr(), /SIGTERM again: ending the drain now/);
    });
  });
});

describe('stop while a caller still waits inline for its call (in-process, SQLite)', () => {
  it('retry-safe runs handed over answer their waiting callers with their task, or for a client without task support a handle, at once: never an error', async () => {
    const path = join(tempDir(), 'rt.db');
    const rt = new TaskRuntime({ store: new SqliteTaskStore(path), inlineBudgetMs: 20_000 });
    rt.defineTool('long', { retrySafe: true, handler: (_a, ctx) => new Promise((_r, reject) => ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason))) });
    await rt.start();
    const caps = { extensions: { 'io.modelcontextprotocol/tasks': {} } };
    const waiting = [
      rt.call('long', {}, { principal: 'p', clientCapabilities: caps, tasksDeclared: true, idempotencyKey: 'k' }), // stored from its start
      rt.call('long', {}, { principal: 'p', clientCapabilities: caps, tasksDeclared: true }), // not stored yet
      rt.call('long', {}, { principal: 'p', clientCapabilities: {}, tasksDeclared: false, handleAfterMs: 20_000 }), // a handle caller
    ];
    await sleep(300);
    const t0 = Date.now();
    const stopping = rt.stop(3000);
    const [a, c, b] = await Promise.all(waiting);
    assert.ok(Date.now() - t0 < 2000, `answered ${Date.now() - t0} ms after the stop`);
    assert.deepEqual([a!.kind, c!.kind, b!.kind], ['task', 'task', 'handle']);
    await stopping;
    // Both left for the next replica to claim at once: no owner, due now.
    const store = new SqliteTaskStore(path);
    await store.init();
    try {
      for (const id of [a, c, b].map((o) => (o!.kind === 'result' ? '' : o!.record.taskId))) {
        const l = await store.get(id);
        assert.ok(l.state === 'found' && l.record.status === 'working' && l.record.owner === null && l.record.queuedAt !== null, JSON.stringify(l));
      }
    } finally {
      await store.close();
    }
  });
});

describe('stop of a replica alone with a durable task (in-process, SQLite)', () => {
  it('its step not marked idempotent is let finish (the drain waits for it), then the task is handed over: the next replica resumes it after that step, each step run once', async () => {
    const path = join(tempDir(), 'rt.db');
    const ran: string[] = [];
    const spec = {
      policy: 'always' as const,
      durable: true,
      handler: async (_a: unknown, ctx: TaskContext) => {
        for (const s of ['s1', 's2', 's3']) await ctx.step(s, async ({ signal }) => (ran.push(s), await delay(2000, undefined, { signal }), s));
        return { content: [{ type: 'text' as const, text: `done on attempt ${ctx.attempt}` }] };
      },
    };
    const a = new TaskRuntime({ store: new SqliteTaskStore(path), replicaId: 'a' });
    a.defineTool('job', spec);
    await a.start();
    const r = await a.call('job', {}, { principal: 'p', clientCapabilities: { extensions: { 'io.modelcontextprotocol/tasks': {} } }, tasksDeclared: true });
    assert.equal(r.kind, 'task');
    const id = r.kind === 'task' ? r.task.taskId : '';
    await until('s1 running', () => ran.length === 1, 5000);
    await a.stop(5000);
    assert.deepEqual(ran, ['s1'], 'stopped between s1 and s2');
    const b = new TaskRuntime({ store: new SqliteTaskStore(path), replicaId: 'b' });
    b.defineTool('job', spec);
    await b.start();
    try {
      const done = await until('completed', async () => {
        const t = await b.getTask(id, 'p');
        return ['completed', 'failed'].includes(t.status) && t;
      }, 15_000);
      assert.equal(done.status, 'completed', JSON.stringify(done));
      assert.deepEqual(ran, ['s1', 's2', 's3'], 'each step ran once: s1 was not cut');
    } finally {
      await b.stop(0);
    }
  });
});
