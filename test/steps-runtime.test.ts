// test:quick: starts no process and no browser (npm run test:quick).
/**
 * Durable steps, parked waits and durable time in-process, on real SQLite files (and PostgreSQL where the backend
 * matters). A "crash" here is a runtime stopped without writing its run's outcome and without handing its task over
 * (`CRASH`: its durable task is left for the next start), then another runtime on the same file taking the task over:
 * the real kill -9 tests are in test/steps-processes.test.ts.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { StepFailedError, TaskRuntime, type RuntimeOptions, type ToolSpec } from '../src/runtime/index.js';
import { PostgresTaskStore } from '../src/store/postgres/index.js';
import { SqliteTaskStore } from '../src/store/sqlite/index.js';
import type { TaskStore } from '../src/store/types.js';
import { RATE_LIMITED_CODE, STORE_UNAVAILABLE_CODE, TaskProtocolError } from '../src/protocol/index.js';
import { PG_URL, freshSchema, sleep, tempDir } from './helpers.js';

const DECLARED = { principal: 'p', clientCapabilities: { extensions: { 'io.modelcontextprotocol/tasks': {} }, elicitation: {} }, tasksDeclared: true };
const FORM = { type: 'object', properties: { answer: { type: 'string' } }, required: ['answer'] };
const text = (t: string) => ({ content: [{ type: 'text', text: t }] });
/** stop() as a crash leaves things: the run's outcome unwritten, its task not handed over (taken over later). */
const CRASH = { handOff: false };

/** A durable tool that always runs as a task. */
const durable = (handler: ToolSpec['handler'], more: Partial<ToolSpec> = {}): ToolSpec => ({ policy: 'always', durable: true, handler, ...more });
/** A durable tool that takes one step, then waits an hour for an answer. */
const stepThenQuestion = () =>
  durable(async (_a, ctx) => {
    await ctx.step('prepare', () => ({ at: Date.now() }));
    const r = await ctx.elicit('Go?', FORM, { key: 'go', timeoutMs: 3_600_000 });
    return text(String(r.action));
  });

/** Warnings a runtime logged (step-divergence among them). */
function capture() {
  const warnings: string[] = [];
  return { warnings, log: { debug() {}, info() {}, warn: (m: string) => warnings.push(m), error: (m: string) => warnings.push(m) } };
}

/** Two runtimes in turn on one SQLite file: the first is "crashed" (stopped without writing the run's outcome). */
function onFile(opts: Partial<RuntimeOptions> = {}) {
  const path = join(tempDir(), 'steps.db');
  let n = 0;
  return {
    path,
    runtime(tools: Record<string, ToolSpec>, more: Partial<RuntimeOptions> = {}) {
      const rt = new TaskRuntime({ store: new SqliteTaskStore(path), replicaId: `r${++n}`, heartbeatMs: 50, leaseMs: 200, ...(process.env.DEBUG_STEPS ? { log: { debug() {}, info: console.log, warn: console.log, error: console.log } } : {}), ...opts, ...more });
      for (const [name, spec] of Object.entries(tools)) rt.defineTool(name, spec);
      return rt;
    },
  };
}

/**
 * `call`, tried again while the runtime refuses it with a retry time and nothing stored, as a client does: with the
 * 200 ms lease of these runtimes, a heartbeat held up on a loaded machine makes the store look unreachable for a moment.
 */
async function retried<T>(call: () => Promise<T>, timeoutMs = 10_000): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    try {
      return await call();
    } catch (e) {
      const refusal = e instanceof TaskProtocolError && (e.code === STORE_UNAVAILABLE_CODE || e.code === RATE_LIMITED_CODE) && (e.data as { stored?: string } | undefined)?.stored === 'no';
      if (!refusal || Date.now() > end) throw e;
      await sleep(Number((e.data as { retryAfterMs?: number }).retryAfterMs ?? 50));
    }
  }
}

async function taskOf(rt: TaskRuntime, tool: string, args: Record<string, unknown> = {}): Promise<string> {
  const r = await retried(() => rt.call(tool, args, DECLARED));
  assert.equal(r.kind, 'task');
  return r.kind === 'task' ? r.task.taskId : '';
}

async function until<T>(what: string, read: () => Promise<T>, ok: (v: T) => boolean, timeoutMs = 10_000): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await retried(read, timeoutMs);
    if (ok(v)) return v;
    if (Date.now() > end) assert.fail(`${what}: still ${JSON.stringify(v).slice(0, 400)} after ${timeoutMs} ms`);
    await sleep(20);
  }
}

/** The text of a completed task's result. */
const resultText = (t: unknown) => (t as { result: { content: Array<{ text: string }> } }).result.content[0]!.text;

const parkedIn = (rt: TaskRuntime, id: string) => until(`task ${id} parked`, () => rt.store.get(id), (l) => l.state === 'found' && l.record.parkedAt !== null);

const terminal = (rt: TaskRuntime, id: string) => until(`task ${id}`, () => rt.getTask(id, 'p'), (t) => ['completed', 'failed', 'cancelled'].includes(t.status));

describe('durable steps in-process', () => {
  it('identity name#n: loops and parallel steps pair with their stored values after a crash, whatever order they finish in', async () => {
    const f = onFile();
    const ran: string[] = [];
    let crashAfter = true;
    const spec: ToolSpec = durable(async (_a, ctx) => {
      const fetched: number[] = [];
      for (let i = 1; i <= 3; i++) fetched.push(await ctx.step('fetch', ({ key }) => (ran.push(key), i * 10)));
      // Parallel, random latencies: completion order differs between runs; identity does not.
      const [a, b] = await Promise.all([
        ctx.step('a', async ({ key }) => (ran.push(key), await sleep(Math.random() * 30), 'A')),
        ctx.step('b', async ({ key }) => (ran.push(key), await sleep(Math.random() * 30), 'B')),
      ]);
      if (crashAfter) await new Promise(() => undefined); // the process "dies" here
      const last = await ctx.step('last', ({ key }) => (ran.push(key), `${a}${b}`));
      return text(JSON.stringify({ fetched, a, b, last, attempt: ctx.attempt }));
    });
    const first = f.runtime({ job: spec });
    await first.start();
    const id = await taskOf(first, 'job');
    await until('the first run\'s five steps', () => first.store.listSteps(id), (rows) => rows.filter((r) => r.state === 'completed').length === 5);
    await first.stop(0, CRASH);
    crashAfter = false;
    const second = f.runtime({ job: spec });
    await second.start();
    try {
      const done = await terminal(second, id);
      assert.equal(done.status, 'completed', JSON.stringify(done));
      assert.deepEqual(JSON.parse(resultText(done)), { fetched: [10, 20, 30], a: 'A', b: 'B', last: 'AB', attempt: 2 });
      assert.deepEqual(ran.sort(), ['a#1', 'b#1', 'fetch#1', 'fetch#2', 'fetch#3', 'last#1'], 'every step ran once');
      const rows = await second.store.listSteps(id);
      assert.deepEqual(rows.map((r) => r.key), ['fetch#1', 'fetch#2', 'fetch#3', 'a#1', 'b#1', 'last#1'], 'seq is call order');
    } finally {
      await second.stop(0);
    }
  });

  it('what is stored is what is returned: a Date is its ISO string on the first run and on a replay; values JSON cannot carry fail clearly, nothing left started', async () => {
    const f = onFile();
    const firstSeen: unknown[] = [];
    let hold = true;
    const errors: string[] = [];
    const spec: ToolSpec = durable(async (_a, ctx) => {
      const when = await ctx.step('when', () => ({ at: new Date(Date.UTC(2026, 0, 2, 3, 4, 5)), skip: undefined }));
      firstSeen.push(when);
      for (const [name, value] of [['big', 10n], ['map', new Map([['a', 1]])], ['nan', { ratio: NaN }], ['fn', () => 1]] as const) {
        try {
          await ctx.step(name, () => value as never);
        } catch (e) {
          assert.ok(e instanceof StepFailedError);
          errors.push(`${e.step}|${(e.data as { reason: string }).reason}|${e.message}`);
        }
      }
      if (hold) await new Promise(() => undefined);
      return text('ok');
    });
    const a = f.runtime({ job: spec });
    await a.start();
    const id = await taskOf(a, 'job');
    await until('the first run', async () => errors.length, (n) => n === 4);
    await a.stop(0, CRASH);
    hold = false;
    const b = f.runtime({ job: spec });
    await b.start();
    try {
      assert.equal((await terminal(b, id)).status, 'completed');
      assert.deepEqual(firstSeen, [{ at: '2026-01-02T03:04:05.000Z' }, { at: '2026-01-02T03:04:05.000Z' }], 'the same plain value on the first run and the replay');
      assert.equal(errors.length, 8, 'each refusal is replayed as the same error');
      assert.deepEqual(errors.slice(4), errors.slice(0, 4));
      assert.match(errors[0]!, /^big#1\|step_result_not_json\|the value of step "big#1" is not JSON: value is a BigInt; the step ran/);
      assert.match(errors[1]!, /map#1\|step_result_not_json\|.*value is a Map \(use Object.fromEntries\)/);
      assert.match(errors[2]!, /nan#1\|step_result_not_json\|.*value\.ratio is NaN/);
      assert.match(errors[3]!, /fn#1\|step_result_not_json\|.*value is a function/);
      const rows = await b.store.listSteps(id);
      assert.deepEqual(rows.map((r) => r.state), ['completed', 'failed', 'failed', 'failed', 'failed'], 'no step left started');
    } finally {
      await b.stop(0);
    }
  });

  it('a value over the limit fails the step (step_result_too_large, recorded failed); a thrown error is replayed with its class, code and data; retries', async () => {
    const f = onFile();
    const rt = f.runtime({
      job: durable(async (_a, ctx) => {
        const out: string[] = [];
        try {
          await ctx.step('huge', () => 'x'.repeat(2000), { maxResultBytes: 1000 });
        } catch (e) {
          out.push(`${(e as StepFailedError).code}:${JSON.stringify((e as StepFailedError).data)}`);
        }
        let tries = 0;
        const flaky = await ctx.step('flaky', ({ tries: t }) => {
          tries = t;
          if (t < 3) throw new Error(`try ${t} failed`);
          return 'third time';
        }, { retries: { max: 2, backoffMs: 5 } });
        out.push(`${flaky} after ${tries}`);
        try {
          await ctx.step('coded', () => {
            throw Object.assign(new Error('card declined'), { code: -32099, data: { card: 'visa' } });
          });
        } catch (e) {
          out.push(`${(e as Error).name}:${(e as StepFailedError).code}:${e instanceof Error && e.message}:${JSON.stringify((e as StepFailedError).data)}`);
        }
        await ctx.step('plain', () => {
          throw new Error('disk full');
        });
        return text(out.join('\n'));
      }),
    }, { maxStepResultBytes: 256 * 1024 });
    await rt.start();
    try {
      const id = await taskOf(rt, 'job');
      const done = await terminal(rt, id);
      // An uncaught step error ends the task as the original error would: a plain Error is a tool error (completed, isError).
      assert.equal(done.status, 'completed');
      const result = (done as unknown as { result: { isError?: boolean; content: Array<{ text: string }> } }).result;
      assert.equal(result.isError, true);
      assert.equal(result.content[0]!.text, 'disk full');
      const rows = await rt.store.listSteps(id);
      const huge = rows.find((r) => r.key === 'huge#1')!;
      assert.deepEqual([huge.state, huge.result, (huge.error!.data as { reason: string; bytes: number }).reason], ['failed', null, 'step_result_too_large']);
      assert.equal(rows.find((r) => r.key === 'flaky#1')?.tries, 3);
      assert.deepEqual(rows.find((r) => r.key === 'coded#1')?.error, { code: -32099, message: 'card declined', name: 'Error', data: { card: 'visa' } });
    } finally {
      await rt.stop(0);
    }
  });

  it('a step not marked idempotent that was running at a crash throws StepInterruptedError (the task fails naming it; the next step never runs); an idempotent one runs again', async () => {
    for (const idempotent of [false, true]) {
      const f = onFile();
      const ran: string[] = [];
      const spec: ToolSpec = durable(async (_a, ctx) => {
        await ctx.step('A', () => void ran.push('A'));
        await ctx.step('B', async () => {
          ran.push(`B${ctx.attempt}`);
          if (ctx.attempt === 1) await new Promise(() => undefined); // "killed" in here
        }, { idempotent });
        await ctx.step('C', () => void ran.push('C'));
        return text(`done on attempt ${ctx.attempt}`);
      });
      const a = f.runtime({ job: spec });
      await a.start();
      const id = await taskOf(a, 'job');
      await until('B running', async () => ran.join(','), (r) => r === 'A,B1');
      const stopping = a.stop(0, CRASH); // B's run ends without its outcome: "killed" inside B
      const b = f.runtime({ job: spec });
      await b.start();
      try {
        const done = await terminal(b, id);
        if (idempotent) {
          assert.equal(done.status, 'completed');
          assert.deepEqual(ran, ['A', 'B1', 'B2', 'C'], 'B ran twice, A once');
        } else {
          assert.equal(done.status, 'failed');
          const error = (done as { error: { code: number; message: string; data: Record<string, unknown> } }).error;
          assert.equal(error.data.reason, 'step_interrupted');
          assert.equal(error.data.step, 'B#1');
          assert.match(error.message, /Step "B#1" was running when the server running this task stopped/);
          assert.deepEqual(ran, ['A', 'B1'], 'B ran once, C never');
          assert.equal((await b.store.listSteps(id)).find((r) => r.key === 'B#1')?.state, 'failed', 'the interruption is recorded: a later run takes the same path');
        }
      } finally {
        await b.stop(0);
        await stopping;
      }
    }
  });

  it('a run whose task was claimed again under the same replica id (a new epoch) writes nothing more: no step, no status, no outcome', async () => {
    const f = onFile();
    const gate = { open: () => {} };
    const reached = new Promise<void>((r) => (gate.open = r));
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    const rt = f.runtime({
      job: durable(async (_a, ctx) => {
        await ctx.step('A', async () => {
          gate.open();
          await held;
          return 'a';
        });
        await ctx.status('after A');
        return text('done');
      }),
      plain: { policy: 'always', handler: async () => (await held, text('late outcome')) },
    });
    await rt.start();
    try {
      const id = await taskOf(rt, 'job');
      const plain = await taskOf(rt, 'plain');
      await rt.store.takeOver(plain, rt.replicaId, rt.replicaId, Date.now());
      await reached;
      // The same replica id claims it again (as after being presumed dead and registering again): epoch 2.
      const again = await rt.store.takeOver(id, rt.replicaId, rt.replicaId, Date.now());
      assert.equal(again.epoch, 2);
      release();
      await sleep(300);
      const l = await rt.store.get(id);
      assert.ok(l.state === 'found');
      assert.deepEqual([l.record.status, l.record.statusMessage, l.record.epoch], ['working', null, 2], 'no outcome, no status from the old run');
      assert.deepEqual((await rt.store.listSteps(id)).map((r) => [r.key, r.state, r.epoch]), [['A#1', 'started', 1]], 'its step was not recorded completed');
      const p = await rt.store.get(plain);
      assert.ok(p.state === 'found' && p.record.status === 'working', 'the outcome of a run of an older epoch is refused');
    } finally {
      await rt.stop(0);
    }
  });

  it('steps do not nest; cancellation is checked before every step', async () => {
    const f = onFile();
    const ran: string[] = [];
    let nested = '';
    const rt = f.runtime({
      nest: {
        policy: 'always',
        handler: async (_a, ctx) => {
          await ctx.step('outer', async () => {
            await ctx.step('inner', () => 1).catch((e: Error) => (nested = e.message));
          });
          return text('x');
        },
      },
      job: durable(async (_a, ctx) => {
        await ctx.step('A', () => void ran.push('A'));
        await ctx.step('B', async ({ signal }) => {
          ran.push('B');
          await sleep(300);
          return signal.aborted ? 'saw the cancel' : 'ok';
        });
        await ctx.step('C', () => void ran.push('C'));
        return text('finished');
      }),
    });
    await rt.start();
    try {
      await terminal(rt, await taskOf(rt, 'nest'));
      assert.equal(nested, 'ctx.step cannot be called inside step "outer#1": steps do not nest; call it between steps');
      const id = await taskOf(rt, 'job');
      await until('B running', async () => ran.length, (n) => n === 2);
      await retried(() => rt.cancelTask(id, 'p'));
      assert.equal((await terminal(rt, id)).status, 'cancelled');
      assert.deepEqual(ran, ['A', 'B'], 'C never started');
    } finally {
      await rt.stop(0);
    }
  });

  it('reordered code is detected on replay (step-divergence warning), not silently mis-paired', async () => {
    const f = onFile();
    let order = ['x', 'y', 'z'];
    let hold = true;
    const spec: ToolSpec = durable(async (_a, ctx) => {
      const got: string[] = [];
      for (const n of order) got.push(await ctx.step(n, () => n.toUpperCase()));
      if (hold) await new Promise(() => undefined);
      return text(got.join(''));
    });
    const a = f.runtime({ job: spec });
    await a.start();
    const id = await taskOf(a, 'job');
    await until('the first run', () => a.store.listSteps(id), (rows) => rows.filter((r) => r.state === 'completed').length === 3);
    await a.stop(0, CRASH);
    hold = false;
    order = ['z', 'x']; // a deploy that reordered and removed steps
    const c = capture();
    const b = f.runtime({ job: spec }, { log: c.log });
    await b.start();
    try {
      const done = await terminal(b, id);
      assert.equal(resultText(done), 'ZX', 'each name still gets its own value');
      await until('the warnings', async () => c.warnings.filter((w) => w.startsWith('step-divergence')).length, (n) => n === 2);
    } finally {
      await b.stop(0);
    }
  });
});

describe('task results', () => {
  it('a result over maxResultBytes or not JSON fails the task saying why; nothing of it is stored', async () => {
    const f = onFile();
    const rt = f.runtime({
      big: { policy: 'always', handler: () => text('y'.repeat(5000)) },
      bigint: { policy: 'always', handler: () => ({ content: [], structuredContent: { n: 1n } }) },
    }, { maxResultBytes: 4096 });
    await rt.start();
    try {
      const big = await terminal(rt, await taskOf(rt, 'big'));
      assert.equal(big.status, 'failed');
      const bytes = Buffer.byteLength(JSON.stringify({ ...text('y'.repeat(5000)), resultType: 'complete' }));
      assert.deepEqual((big as { error: { data: unknown } }).error.data, { reason: 'result_too_large', bytes, limit: 4096 });
      const bad = await terminal(rt, await taskOf(rt, 'bigint'));
      assert.equal(bad.status, 'failed');
      assert.match((bad as { error: { message: string } }).error.message, /the tool's result is not JSON: value\.structuredContent\.n is a BigInt/);
    } finally {
      await rt.stop(0);
    }
  });
});

describe('parked waits in-process', () => {
  it('a durable wait for input holds nothing: no run, no slot; an answer resumes it from its steps; cancel of a parked task ends it at once', async () => {
    const f = onFile();
    const ran: string[] = [];
    const spec: ToolSpec = durable(async (_a, ctx) => {
      const before = await ctx.step('before', () => (ran.push('before'), 'b'));
      const r = await ctx.elicit('Go?', FORM, { key: 'go' });
      const after = await ctx.step('after', () => (ran.push('after'), 'a'));
      return text(`${before}${after}:${String(r.content?.answer)}:${ctx.attempt}`);
    });
    const rt = f.runtime({ job: spec }, { parkAfterMs: 0, maxRunning: 1 });
    await rt.start();
    try {
      const id = await taskOf(rt, 'job');
      const parked = await parkedIn(rt, id);
      assert.ok(parked.state === 'found');
      assert.deepEqual([parked.record.owner, parked.record.status, parked.record.wakeAt! - parked.record.inputRequests.go!.deadline], [null, 'input_required', 0]);
      assert.equal(rt.executions.size, 0, 'no handler in memory');
      assert.equal(rt.running.size, 0);
      // The only slot is free: another task runs meanwhile.
      const other = await taskOf(rt, 'job');
      await parkedIn(rt, other);
      assert.deepEqual((await retried(() => rt.getTask(id, 'p'))).status, 'input_required');
      await retried(() => rt.updateTask(id, 'p', { go: { action: 'accept', content: { answer: 'yes' } } }));
      const done = await terminal(rt, id);
      assert.equal(resultText(done), 'ba:yes:1', 'resumed (not a crash: attempt 1)');
      assert.deepEqual(ran.filter((r) => r === 'before').length, 2, 'one run of "before" per task; the resume replayed it');
      const t0 = Date.now();
      await retried(() => rt.cancelTask(other, 'p'));
      const cancelled = await retried(() => rt.getTask(other, 'p'));
      assert.deepEqual([cancelled.status, cancelled.statusMessage], ['cancelled', 'Cancelled while parked (no handler was running)']);
      assert.ok(Date.now() - t0 < 500);
    } finally {
      await rt.stop(0);
    }
  });

  it('1,000 parked tasks add under 5 MB to the heap of the process that parked them', async () => {
    setFlagsFromString('--expose-gc');
    const gc = runInNewContext('gc') as () => void;
    const f = onFile();
    const rt = f.runtime({
      job: stepThenQuestion(),
    }, { parkAfterMs: 0, pollLimit: false });
    await rt.start();
    try {
      const park = async (n: number) => {
        const ids: string[] = [];
        for (let i = 0; i < n; i++) ids.push(await taskOf(rt, 'job'));
        // Once few are left, what each run still in memory is doing: a run that never parks says why in the failure.
        const inMemory = async () => (rt.executions.size > 3 ? rt.executions.size : Promise.all([...rt.executions].map(async (e: any) => {
          const stored = e.taskId ? await rt.store.get(e.taskId) : undefined;
          const row = stored?.state === 'found' ? { status: stored.record.status, owner: stored.record.owner, epoch: stored.record.epoch, parkedAt: stored.record.parkedAt } : stored?.state;
          return { taskId: e.taskId, epoch: e.epoch, stepsRunning: e.steps?.running, waits: e.waitsOfRun?.pending?.size, parking: e.waitsOfRun?.parking, timer: Boolean(e.waitsOfRun?.timer), aborted: e.signal?.aborted, row };
        })));
        await until(`${n} parked`, inMemory, (s) => Array.isArray(s) && s.length === 0, 60_000);
        return ids;
      };
      await park(200); // warm-up: code paths compiled, pools sized
      gc();
      const before = process.memoryUsage().heapUsed;
      const ids = await park(1000);
      await sleep(100);
      gc();
      const grown = (process.memoryUsage().heapUsed - before) / 2 ** 20;
      assert.equal(rt.running.size, 0);
      const sample = await rt.store.get(ids[999]!);
      assert.ok(sample.state === 'found' && sample.record.parkedAt !== null && sample.record.owner === null);
      assert.ok(grown < 5, `1,000 parked tasks grew the heap by ${grown.toFixed(2)} MB`);
    } finally {
      await rt.stop(0);
    }
  });

  it('a handler looping over 20,000 steps holds none of their values in memory (the heap grows under 5 MB)', async () => {
    setFlagsFromString('--expose-gc');
    const gc = runInNewContext('gc') as () => void;
    const page = 'x'.repeat(600); // 13 MB of step data in all, under the 16 MiB a task may hold
    let grown = NaN;
    // durability 'process': commits without fsync, so 22,000 of them take seconds; what is kept in memory is the same.
    const rt = new TaskRuntime({ store: new SqliteTaskStore(join(tempDir(), 'loop.db'), { durability: 'process' }), pollLimit: false });
    rt.defineTool('loop', durable(async (_a, ctx) => {
      for (let i = 0; i < 2000; i++) await ctx.step('page', () => page + i, { idempotent: true }); // warm-up
      gc();
      const before = process.memoryUsage().heapUsed;
      for (let i = 0; i < 20_000; i++) await ctx.step('page', () => page + i, { idempotent: true });
      gc();
      grown = (process.memoryUsage().heapUsed - before) / 2 ** 20;
      return text('done');
    }));
    await rt.start();
    try {
      const id = await taskOf(rt, 'loop');
      await until('the loop', async () => (await retried(() => rt.getTask(id, 'p'))).status, (s) => s !== 'working', 120_000);
      assert.equal((await retried(() => rt.getTask(id, 'p'))).status, 'completed');
      assert.ok(grown < 5, `20,000 steps of 600 bytes grew the heap by ${grown.toFixed(2)} MB`);
    } finally {
      await rt.stop(0);
    }
  });

  it('a run that loses its task while it waits for input leaves memory and frees its slot (its wait never settles now)', async () => {
    const f = onFile();
    const rt = f.runtime({
      job: stepThenQuestion(),
    }, { parkAfterMs: 3_600_000 });
    await rt.start();
    try {
      const taskId = await taskOf(rt, 'job');
      await until('the run waits for input', async () => (await rt.getTask(taskId, 'p')).status, (s) => s === 'input_required');
      assert.equal(rt.executions.size, 1);
      // What a takeover elsewhere (or this replica's self-fencing) does to the run here.
      for (const e of rt.executions) (e as unknown as { lostOwnership(): void }).lostOwnership();
      assert.equal(rt.executions.size, 0, 'the run is gone from memory');
      assert.equal(rt.running.size, 0, 'and from the runs of this replica');
    } finally {
      await rt.stop(0);
    }
  });

  it('a durable sleep parks and wakes at its recorded time; a sleep past the TTL is refused at once', async () => {
    const f = onFile();
    const rt = f.runtime({
      nap: durable(async ({ ms }, ctx) => {
        const from = await ctx.step('from', () => Date.now());
        await ctx.sleep('nap', Number(ms));
        return text(JSON.stringify({ from, woke: Date.now() }));
      }),
      long: durable(async (_a, ctx) => (await ctx.sleep('forever', 120_000), text('no')), { ttlMs: 60_000 }),
    }, { parkAfterMs: 0, queuePollMs: 100 });
    await rt.start();
    try {
      const id = await taskOf(rt, 'nap', { ms: 1200 });
      await parkedIn(rt, id);
      assert.equal(rt.executions.size, 0);
      const done = await terminal(rt, id);
      const { from, woke } = JSON.parse(resultText(done));
      assert.ok(woke - from >= 1200 && woke - from < 1200 + 400, `woke ${woke - from} ms after a 1200 ms sleep began`);
      const long = await terminal(rt, await taskOf(rt, 'long'));
      assert.equal(long.status, 'completed');
      assert.match(resultText(long), /ctx\.sleep\("forever", 120000\): the task's TTL ends at .* before the sleep would/);
    } finally {
      await rt.stop(0);
    }
  });
});

describe('durable time in-process', () => {
  it('an input deadline is recorded in the store: the wait fails input_timeout, and a late answer is refused', async () => {
    const f = onFile();
    const rt = f.runtime({
      ask: { policy: 'always', handler: async (_a, ctx) => text(String((await ctx.elicit('Quick?', FORM, { key: 'q', timeoutMs: 300 })).action)) },
    });
    await rt.start();
    try {
      const id = await taskOf(rt, 'ask');
      const done = await terminal(rt, id);
      assert.equal(done.status, 'failed');
      assert.equal((done as { error: { data: { reason: string } } }).error.data.reason, 'input_timeout');
      const l = await rt.store.get(id);
      assert.ok(l.state === 'found' && l.record.inputResponses.q?.timedOut === true, 'the timeout is in the row');
      await assert.rejects(rt.answerFromClient(id, 'p', 'q', { result: { action: 'accept', content: { answer: 'late' } } }), /Input "q" timed out at .*; the answer came too late and was not taken/);
      assert.deepEqual(await retried(() => rt.updateTask(id, 'p', { q: { action: 'accept', content: { answer: 'late' } } })), { accepted: [] });
    } finally {
      await rt.stop(0);
    }
  });
});

describe('durable steps on PostgreSQL', () => {
  it('U+0000 in a step value round-trips exactly; a task result holding it fails the task clearly instead of retrying forever', async () => {
    const store: TaskStore = new PostgresTaskStore({ connection: { connectionString: PG_URL }, schema: freshSchema('steps') });
    const rt = new TaskRuntime({ store });
    let seen: unknown;
    rt.defineTool('nul', durable(async (_a, ctx) => {
      seen = await ctx.step('s', () => ({ z: 'a\u0000b', a: 1 }));
      return text('has a \u0000 byte');
    }));
    await rt.start();
    try {
      const id = await taskOf(rt, 'nul');
      const done = await terminal(rt, id);
      assert.deepEqual(seen, { z: 'a\u0000b', a: 1 });
      assert.equal((await store.listSteps(id))[0]!.result, '{"z":"a\\u0000b","a":1}', 'the exact text, key order kept');
      assert.equal(done.status, 'failed');
      assert.deepEqual((done as { error: { message: string; data: unknown } }).error, {
        code: -32603,
        message: "The tool's result could not be stored: PostgreSQL cannot store the character U+0000 in a JSON value",
        data: { reason: 'result_unstorable' },
      });
    } finally {
      await rt.stop(0);
    }
  });
});
