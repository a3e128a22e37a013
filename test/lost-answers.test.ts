// test:quick: starts no process and no browser (npm run test:quick).
/**
 * A store write that commits while its answer is lost on the way back (a pooler restarted between the commit and the
 * reply, as in pooler-replicas "the pooler stopped and started again"): the replica must not end up owning a task
 * that nothing runs. The runtime runs in-process on a real PostgreSQL schema; the store is the real one, with one
 * answer dropped after its commit.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { TaskRuntime } from '../src/runtime/runtime.js';
import { PostgresTaskStore } from '../src/store/postgres/index.js';
import { StoreUnavailableError, type TaskStore } from '../src/store/types.js';
import { newTask } from '../src/store/testkit/new-task.js';
import { PG_URL, freshSchema, sleep } from './helpers.js';

const DECLARED = { principal: 'p', clientCapabilities: { extensions: { 'io.modelcontextprotocol/tasks': {} } }, tasksDeclared: true };

/** The real store, except that the first `method` call that `when` its answer is committed and then lost. */
function losingOneAnswer<K extends 'claimQueued' | 'takeOver'>(store: TaskStore, method: K, when: (answer: Awaited<ReturnType<TaskStore[K]>>) => boolean): { store: TaskStore; lost: () => boolean } {
  let lost = false;
  const wrapped = new Proxy(store, {
    get(target, key) {
      const value = Reflect.get(target, key, target);
      if (key !== method) return typeof value === 'function' ? value.bind(target) : value;
      return async (...args: unknown[]) => {
        const answer = await (value as (...a: unknown[]) => Promise<Awaited<ReturnType<TaskStore[K]>>>).apply(target, args);
        if (lost || !when(answer)) return answer;
        lost = true;
        throw new StoreUnavailableError('Connection terminated unexpectedly (the answer was lost after the commit)');
      };
    },
  });
  return { store: wrapped, lost: () => lost };
}

async function ended(store: TaskStore, taskId: string, timeoutMs: number): Promise<string> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const l = await store.get(taskId);
    const status = l.state === 'found' ? l.record.status : l.state;
    if (['completed', 'failed', 'cancelled'].includes(status) || Date.now() > deadline) return status;
    await sleep(50);
  }
}

describe('a store answer lost after its commit', () => {
  it('a claim of queued work: the tasks it took start once the store answers, each once', async () => {
    const schema = freshSchema('lostclaim');
    const real = new PostgresTaskStore({ connection: { connectionString: PG_URL }, schema });
    const { store, lost } = losingOneAnswer(real, 'claimQueued', (took) => took.length > 0);
    const rt = new TaskRuntime({ store, maxRunning: 1, queuePollMs: 200 });
    const runs = new Map<string, number>();
    rt.defineTool('work', {
      policy: 'always',
      handler: async (args, ctx) => {
        runs.set(String(args.key), (runs.get(String(args.key)) ?? 0) + 1);
        await ctx.status(`working on ${String(args.key)}`);
        await sleep(Number(args.ms));
        return { content: [{ type: 'text', text: String(args.key) }] };
      },
    });
    try {
      await rt.start();
      const first = await rt.call('work', { key: 'first', ms: 300 }, DECLARED);
      const queued = await rt.call('work', { key: 'queued', ms: 10 }, DECLARED);
      assert.ok(first.kind === 'task' && queued.kind === 'task');
      assert.match(queued.task.statusMessage ?? '', /^Queued/);
      assert.equal(await ended(real, queued.task.taskId, 10_000), 'completed', 'the task the unanswered claim took ran');
      assert.ok(lost(), 'the claim that took it lost its answer');
      assert.equal(await ended(real, first.task.taskId, 5000), 'completed');
      assert.deepEqual(Object.fromEntries(runs), { first: 1, queued: 1 });
    } finally {
      await rt.stop(1000);
      await real.close?.();
    }
  });

  it("a takeover of a dead replica's task: the task is taken back and re-run, not left owned by a live replica", async () => {
    const schema = freshSchema('losttake');
    const real = new PostgresTaskStore({ connection: { connectionString: PG_URL }, schema });
    const { store, lost } = losingOneAnswer(real, 'takeOver', () => true);
    const rt = new TaskRuntime({ store, leaseMs: 1200 });
    let ran = 0;
    rt.defineTool('work', { policy: 'always', retrySafe: true, handler: async () => (ran++, { content: [{ type: 'text', text: 'done' }] }) });
    try {
      await rt.start();
      // A retry-safe task whose replica is gone (no replica row: an orphan at once), found by the next heartbeat.
      const orphan = await real.create(newTask({ tool: 'work', owner: 'gone', retrySafe: true, args: { key: 'orphan', ms: 10 } }));
      assert.equal(await ended(real, orphan.record.taskId, 10_000), 'completed');
      assert.ok(lost(), 'the takeover lost its answer');
      assert.equal(ran, 1);
    } finally {
      await rt.stop(1000);
      await real.close?.();
    }
  });
});
