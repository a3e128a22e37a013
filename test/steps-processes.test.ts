// test:pg-replicas: starts PostgreSQL replicas (scripts/test.mjs runs at most three such files at once).
/**
 * Work that outlasts its process, with real server processes and real signals: durable steps across kill -9 (a
 * restarted SQLite server, and three PostgreSQL replicas), a paused owner (SIGSTOP past its lease, then SIGCONT) that
 * writes nothing after the takeover, parked waits that survive every replica that ran them, a durable sleep that wakes
 * at its original time, late answers refused after a recorded input timeout, and expiry read at once on every replica.
 * The `steps` and `park` fixtures are the contract's.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { postgresStoreFromUrl } from '../src/store/postgres/index.js';
import { SqliteTaskStore } from '../src/store/sqlite/index.js';
import type { TaskRecord, TaskStore } from '../src/store/types.js';
import { FIXTURES, callTool, getTask, pgStoreUrl, rpc, sleep, startServer, tempDir, textOf, waitForTask } from './helpers.js';
import { connectV1 } from './generations.js';
import { useCluster } from './replicas.js';
import { durableStepsSuite } from './replica-suites.js';
import { assertSurvivedKill, has, starts, stepEvents, untilLogged, untilStepStored } from './steps-log.js';

const FORM_ANSWER = (answer: string) => ({ answer: { action: 'accept', content: { answer } } });

async function created(url: string, tool: string, args: Record<string, unknown>): Promise<string> {
  const r = await callTool(url, tool, args);
  assert.equal(r.error, undefined, JSON.stringify(r.error));
  assert.equal(r.result.resultType, 'task');
  return r.result.taskId as string;
}

/** The task's row as the store has it (found), read through a store of the test's own. */
async function row(store: TaskStore, taskId: string): Promise<TaskRecord> {
  const l = await store.get(taskId);
  assert.equal(l.state, 'found');
  return (l as { record: TaskRecord }).record;
}

async function untilParked(store: TaskStore, taskId: string, timeoutMs = 10_000): Promise<TaskRecord> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const r = await row(store, taskId);
    if (r.parkedAt !== null) return r;
    if (Date.now() > end) assert.fail(`task ${taskId} was not parked in ${timeoutMs} ms (owner ${r.owner}, status ${r.status})`);
    await sleep(25);
  }
}

/** A fixture server on one SQLite file that can be killed and started again. */
function sqliteServer() {
  const path = join(tempDir(), 'tasks.db');
  const args = ['--store', `sqlite:${path}`, '--heartbeat-ms', '200', '--lease-ms', '1500', '--park-after-ms', '200', '--queue-poll-ms', '200'];
  return { path, start: () => startServer(args), store: () => new SqliteTaskStore(path) };
}

describe('durable steps across kill -9 and a restart (one SQLite file)', () => {
  it('killed between steps B and C: the task completes with A, B, C each run once', async () => {
    const s = sqliteServer();
    const log = join(tempDir(), 'between.log');
    let srv = await s.start();
    try {
      // A gap of 4 s: the kill lands in it even when a loaded machine is slow to see B's end in the log.
      const id = await created(srv.url, 'steps', { log, count: 3, stepSeconds: 0.2, gapSeconds: 4 });
      await untilLogged([log], has('END', 's2'), 'B ended');
      const store = s.store();
      await store.init();
      try {
        await untilStepStored(store, id, 's2#1');
      } finally {
        await store.close();
      }
      await srv.stop('SIGKILL');
      assert.equal(has('START', 's3')(stepEvents(log)), false, 'killed before C started');
      srv = await s.start();
      const done = await waitForTask(srv.url, id);
      assert.equal(done.status, 'completed');
      assert.equal(textOf(done.result), 'Steps done: s1, s2, s3 (attempt 2)');
      assert.deepEqual(starts(log), { s1: 1, s2: 1, s3: 1 });
    } finally {
      await srv.stop();
    }
  });

  it('killed inside B: not idempotent, the task fails naming B (B ran once, C never); idempotent, B runs twice and the task completes', async () => {
    const s = sqliteServer();
    const strict = join(tempDir(), 'strict.log');
    const redo = join(tempDir(), 'redo.log');
    let srv = await s.start();
    try {
      // Steps of 3 s: both runs are still inside B when a loaded machine is slow to see them start it.
      const args = { count: 3, stepSeconds: 3, gapSeconds: 0.1 };
      const strictId = await created(srv.url, 'steps', { ...args, log: strict });
      const redoId = await created(srv.url, 'steps', { ...args, log: redo, idempotent: true });
      await untilLogged([strict, redo], has('START', 's2'), 'B running');
      await srv.stop('SIGKILL');
      assert.equal([strict, redo].some((p) => has('END', 's2')(stepEvents(p))), false, 'killed inside B');
      srv = await s.start();
      const failed = await waitForTask(srv.url, strictId);
      assert.equal(failed.status, 'failed');
      assert.deepEqual([failed.error.data.reason, failed.error.data.step], ['step_interrupted', 's2#1']);
      assert.match(failed.error.message, /Step "s2#1" was running when the server running this task stopped; it is not marked idempotent/);
      const done = await waitForTask(srv.url, redoId);
      assert.equal(textOf(done.result), 'Steps done: s1, s2, s3 (attempt 2)');
      assert.deepEqual(starts(strict), { s1: 1, s2: 1 }, 'B once, C never');
      assert.deepEqual(starts(redo), { s1: 1, s2: 2, s3: 1 }, 'the idempotent B twice');
    } finally {
      await srv.stop();
    }
  });

  it('16 runs stepping at once (their step commits grouped) killed at any moment: no step runs twice unless idempotent, an interrupted one is named', async () => {
    const s = sqliteServer();
    const count = 30;
    const runs = Array.from({ length: 16 }, (_, i) => ({ log: join(tempDir(), `many-${i}.log`), idempotent: i % 3 === 2 }));
    let srv = await s.start();
    try {
      const ids = await Promise.all(runs.map((r) => created(srv.url, 'steps', { log: r.log, count, stepSeconds: 0.1, gapSeconds: 0, idempotent: r.idempotent })));
      await untilLogged(runs.map((r) => r.log), (e) => e.filter((x) => x.kind === 'START').length >= 5, 'every run past its fifth step');
      await srv.stop('SIGKILL');
      srv = await s.start();
      const ends = await Promise.all(ids.map((id) => waitForTask(srv.url, id)));
      runs.forEach((r, i) => assertSurvivedKill(r.log, ends[i]!, count, r.idempotent));
      assert.ok(ends.some((t) => t.status === 'failed'), `the kill hit inside a step not marked idempotent: ${ends.map((t) => t.status + ' ' + textOf(t.result ?? {})).join('; ')}`);
    } finally {
      await srv.stop();
    }
  });

  it('a parked wait for input survives kill -9: answered after the restart, it completes without re-running its finished step', async () => {
    const s = sqliteServer();
    const store = s.store();
    await store.init();
    let srv = await s.start();
    const firstPid = srv.pid;
    try {
      const id = await created(srv.url, 'park', { message: 'Ship it?', sleepSeconds: 0 });
      const parked = await untilParked(store, id);
      assert.deepEqual([parked.owner, parked.status], [null, 'input_required']);
      await srv.stop('SIGKILL');
      srv = await s.start();
      const waiting = await getTask(srv.url, id);
      assert.equal(waiting.result.status, 'input_required');
      const upd = await rpc(srv.url, 'tasks/update', { taskId: id, inputResponses: FORM_ANSWER('after the crash') });
      assert.equal(upd.error, undefined);
      const done = await waitForTask(srv.url, id);
      assert.match(textOf(done.result), new RegExp(`^The answer is: after the crash \\(prepared in ${firstPid} at \\d+; woke at \\d+ in ${srv.pid}; attempt 1\\)$`));
    } finally {
      await srv.stop();
      await store.close();
    }
  });

  it('a durable sleep across kill -9 wakes at its original time', async () => {
    const s = sqliteServer();
    const store = s.store();
    await store.init();
    // Parked only after 60 s: the 3 s sleep is held in memory when the process is killed.
    let srv = await startServer(['--store', `sqlite:${s.path}`, '--heartbeat-ms', '200', '--lease-ms', '1500', '--park-after-ms', '60000']);
    try {
      const id = await created(srv.url, 'park', { message: 'Nap?', sleepSeconds: 3 });
      await waitForTask(srv.url, id, (t) => t.status === 'input_required');
      const answeredAt = Date.now();
      await rpc(srv.url, 'tasks/update', { taskId: id, inputResponses: FORM_ANSWER('nap') });
      await waitForTask(srv.url, id, (t) => t.statusMessage === 'answered; sleeping');
      await sleep(800);
      await srv.stop('SIGKILL');
      srv = await s.start();
      const restartedAt = Date.now();
      const done = await waitForTask(srv.url, id);
      const woke = Number(/woke at (\d+)/.exec(textOf(done.result))![1]);
      const nap = (await store.listSteps(id)).find((r) => r.key === 'nap#1')!;
      const due = JSON.parse(nap.result!).wakeAt as number;
      assert.equal(nap.kind, 'sleep');
      assert.ok(due - answeredAt >= 3000 && due - answeredAt < 3000 + 1000, `the wake time was recorded ${due - answeredAt} ms after the answer`);
      assert.ok(woke >= due && woke - due < 700, `woke ${woke - due} ms after its recorded time`);
      assert.ok(woke < restartedAt + 3000 - 500, 'not a fresh 3 s sleep from the restart');
      assert.match(textOf(done.result), /attempt 2\)$/);
    } finally {
      await srv.stop();
      await store.close();
    }
  });
});

durableStepsSuite('on PostgreSQL', () => ({ storeUrl: pgStoreUrl(), args: [] }));

describe('parked waits and durable time on three PostgreSQL replicas (park after 300 ms)', () => {
  const c = useCluster(3, ['--lease-ms', '4000', '--heartbeat-ms', '250', '--park-after-ms', '300', '--queue-poll-ms', '500'], { module: FIXTURES });

  it('cancel of a parked task through another replica ends it at once', async () => {
    const [a, b] = c.cluster.replicas;
    const store = postgresStoreFromUrl(c.cluster.storeUrl);
    await store.init();
    try {
      const id = await created(a!.url, 'park', { message: 'Cancel me?', sleepSeconds: 0 });
      await untilParked(store, id);
      const t0 = Date.now();
      const r = await rpc(b!.url, 'tasks/cancel', { taskId: id });
      assert.equal(r.error, undefined);
      const t = (await getTask(a!.url, id)).result;
      assert.deepEqual([t.status, t.statusMessage], ['cancelled', 'Cancelled while parked (no handler was running)']);
      assert.ok(Date.now() - t0 < 1000);
    } finally {
      await store.close();
    }
  });

  it('a late answer after the input deadline is refused on every replica, even while the replica that asked is paused and cannot time it out', async () => {
    const [a, b, cc] = c.cluster.replicas;
    const store = postgresStoreFromUrl(c.cluster.storeUrl);
    await store.init();
    try {
      const id = await created(a!.url, 'ask', { message: 'Quick?', timeoutSeconds: 1 });
      await waitForTask(b!.url, id, (t) => t.status === 'input_required');
      process.kill(a!.pid, 'SIGSTOP');
      try {
        await sleep(1400); // past the deadline; the asking replica's timer cannot fire
        for (const r of [b!, cc!]) {
          const upd = await rpc(r.url, 'tasks/update', { taskId: id, inputResponses: FORM_ANSWER('too late') });
          assert.equal(upd.error, undefined, 'acknowledged (keys not outstanding are ignored), not taken');
        }
        const rec = await row(store, id);
        assert.equal(rec.inputResponses.answer?.timedOut, true, 'the store recorded the timeout instead of the answer');
      } finally {
        process.kill(a!.pid, 'SIGCONT');
      }
      const done = await waitForTask(b!.url, id);
      assert.deepEqual([done.status, done.error.data.reason], ['failed', 'input_timeout']);
      // A 2025-11-25 client answering late: its posted answer is refused by whichever replica takes it.
      const v1 = await connectV1(c.cluster.front.url, { elicit: async () => (await sleep(1500), { action: 'accept', content: { answer: 'late too' } }) });
      try {
        const err = await v1.client.experimental.tasks.callToolStream({ name: 'ask', arguments: { message: 'Now?', timeoutSeconds: 1 } }, undefined, { task: {} } as never);
        const msgs: Array<{ type: string; error?: { message: string } }> = [];
        for await (const m of err) msgs.push(m as never);
        assert.equal(msgs.at(-1)!.type, 'error');
        assert.match(msgs.at(-1)!.error!.message, /No answer to input "answer" within 1 s/);
        const end = Date.now() + 5000;
        while (!v1.wire.posted.some((p) => String(p.id).startsWith('outlast-input/')) && Date.now() < end) await sleep(50);
        const posted = v1.wire.posted.filter((p) => String(p.id).startsWith('outlast-input/'));
        assert.equal(posted.length, 1);
        assert.equal(posted[0]!.status, 400, 'the replica that took the late answer refused it');
        assert.match(posted[0]!.body, /Input \\?"answer\\?" timed out at .*the answer came too late and was not taken/);
      } finally {
        await v1.close();
      }
    } finally {
      await store.close();
    }
  });

  it('tasks/get right after the TTL says expired on every replica, on both wires, with no sweep in between', async () => {
    const { front, replicas } = c.cluster;
    const v1 = await connectV1(front.url);
    let taskId = '';
    let createdAt = 0;
    for await (const m of v1.client.experimental.tasks.callToolStream({ name: 'sleep', arguments: { seconds: 60 } }, undefined, { task: { ttl: 2000 } } as never)) {
      if (m.type === 'taskCreated') {
        taskId = m.task.taskId;
        createdAt = Date.parse(m.task.createdAt);
        break;
      }
    }
    await v1.close();
    // The same caller on every replica: without credentials, that is its session (docs/configuration.md#who-is-anonymous).
    const session = v1.sessionId;
    assert.ok(session, 'an anonymous v1 client is given a session');
    const clients = await Promise.all(replicas.map((r) => connectV1(r.url, { sessionId: session })));
    const asCaller = { headers: { 'mcp-session-id': session } };
    try {
      await sleep(Math.max(0, createdAt + 1500 - Date.now()));
      const before = await Promise.all(replicas.map((r) => getTask(r.url, taskId, asCaller)));
      assert.deepEqual(before.map((g) => g.result.status), ['working', 'working', 'working']);
      await sleep(Math.max(0, createdAt + 2000 + 50 - Date.now()));
      const modern = await Promise.all(replicas.map((r) => getTask(r.url, taskId, asCaller)));
      const legacy = await Promise.all(clients.map((x) => x.client.experimental.tasks.getTask(taskId).then(() => 'found', (e: Error) => e.message)));
      // Soon after the TTL, against a sweep every 30 s per replica (a loaded CI machine took over 950 ms for these six reads).
      assert.ok(Date.now() - createdAt < 2000 + 3000, `read ${Date.now() - createdAt - 2000} ms after the TTL`);
      for (const g of modern) {
        assert.equal(g.error?.code, -32602);
        assert.match(g.error?.message ?? '', /Task has expired/);
      }
      for (const m of legacy) assert.match(m, /Task has expired/);
    } finally {
      await Promise.all(clients.map((x) => x.close()));
    }
  });

  it('a parked task survives every replica that ran it being killed: answered through another, it completes without re-running its step, and its durable sleep wakes at its original time', async () => {
    const [a, b, cc] = c.cluster.replicas;
    const store = postgresStoreFromUrl(c.cluster.storeUrl);
    await store.init();
    try {
      const id = await created(a!.url, 'park', { message: 'Deploy?', sleepSeconds: 3 });
      await untilParked(store, id);
      await a!.stop('SIGKILL');
      const answeredAt = Date.now();
      const upd = await rpc(b!.url, 'tasks/update', { taskId: id, inputResponses: FORM_ANSWER('yes') });
      assert.equal(upd.error, undefined);
      // Resumed by a claim (B or C), then parked again in its 3 s sleep.
      await waitForTask(b!.url, id, (t) => t.statusMessage === 'answered; sleeping', { timeoutMs: 5000 });
      const sleeping = await untilParked(store, id);
      const due = sleeping.wakeAt!;
      assert.ok(due - answeredAt >= 3000 && due - answeredAt < 3000 + 1000, `due ${due - answeredAt} ms after the answer`);
      await Promise.all([b!.stop('SIGKILL'), cc!.stop('SIGKILL')]);
      const d = await c.cluster.add();
      // No replica is up between the kills and D's start: on a loaded machine D may come up after the wake time, and
      // then the wake is owed at once.
      const dUpAt = Date.now();
      const done = await waitForTask(d.url, id, undefined, { timeoutMs: 15_000 });
      const text = textOf(done.result);
      assert.match(text, new RegExp(`^The answer is: yes \\(prepared in ${a!.pid} at \\d+; woke at \\d+ in ${d.pid}; attempt 1\\)$`), 'the step ran once, on the first replica');
      const woke = Number(/woke at (\d+)/.exec(text)![1]);
      const owed = Math.max(due, dUpAt);
      assert.ok(woke >= due && woke - owed < 700, `woke ${woke - due} ms after its recorded time, ${woke - dUpAt} ms after a replica was up again`);
    } finally {
      await store.close();
    }
  });
});

