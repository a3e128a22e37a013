/**
 * Capacity on SQLite, with real `outlast serve` processes: a call over --max-running waits queued (a real task,
 * readable, cancellable, expiring without ever starting), back-pressure past --max-queued refuses with a retry time
 * and loses nothing accepted, and the processes on one file (an HTTP replica and a --no-http worker) share limits.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import Database from 'better-sqlite3';
import { BIN, FIXTURES, ROOT, callTool, getTask, rpc, sleep, startServer, tempDir, textOf, useServer, waitForTask } from './helpers.js';
import { busy, busyEvents, maxConcurrent, waitForEnds } from './busy-log.js';

const NO_TASKS = { elicitation: {} };
const BUSY_CODE = -31503;

describe('a call over --max-running waits in the run queue as a task', () => {
  // Handles off: a client without task support can follow nothing, so it is refused while the replica is full.
  const srv = useServer(['--max-running', '1', '--inline-budget-ms', '100', '--sweep-interval-ms', '200', '--no-handles']);

  it('reads working with its position, starts when the slot frees, and a cancel ends it at once without starting', async () => {
    const log = join(tempDir(), 'busy.log');
    // Long enough that a loaded machine still reads the queue while the first runs (1.5 s once ended first).
    const first = await busy(srv.url, 5, log);
    const second = await busy(srv.url, 0.2, log);
    const third = await busy(srv.url, 0.2, log);
    assert.ok(first.taskId && second.taskId && third.taskId);
    assert.equal(second.reply.result.status, 'working');
    assert.match(second.reply.result.statusMessage, /^Queued: position 1/);
    const t3 = await getTask(srv.url, third.taskId);
    assert.equal(t3.result.status, 'working');
    assert.match(t3.result.statusMessage, /^Queued: position 2,/);
    assert.deepEqual(busyEvents(log).map((e) => e.kind), ['START'], 'one slot: only the first runs');

    const cancel = await rpc(srv.url, 'tasks/cancel', { taskId: second.taskId });
    assert.equal(cancel.error, undefined);
    const cancelled = await getTask(srv.url, second.taskId);
    assert.equal(cancelled.result.status, 'cancelled', 'cancelled at once: nothing was running');
    assert.equal(cancelled.result.statusMessage, 'Cancelled before it started');
    assert.match((await getTask(srv.url, third.taskId)).result.statusMessage, /^Queued: position 1,/, 'the position is fresh on every read');

    const done = await waitForTask(srv.url, third.taskId, undefined, { timeoutMs: 30_000 });
    assert.equal(done.status, 'completed');
    assert.equal((await waitForTask(srv.url, first.taskId)).status, 'completed');
    const events = busyEvents(log);
    assert.equal(events.filter((e) => e.kind === 'START').length, 2, 'the cancelled task never started');
    assert.deepEqual(events.filter((e) => e.kind === 'END').map((e) => e.taskId), [first.taskId, third.taskId]);
    assert.equal(maxConcurrent(events), 1);
  });

  it('a call that cannot become a task is refused with a retry time while every slot is taken (never accepted and dropped)', async () => {
    const log = join(tempDir(), 'busy.log');
    const running = await busy(srv.url, 1, log);
    assert.ok(running.taskId);
    const r = await callTool(srv.url, 'busy', { seconds: 0.1, log }, { caps: NO_TASKS });
    assert.equal(r.status, 503);
    assert.equal(r.error?.code, BUSY_CODE);
    assert.equal(r.error?.data.reason, 'busy');
    assert.ok(r.error!.data.retryAfterMs >= 500);
    assert.ok(Number(r.headers.get('retry-after')) >= 1);
    await waitForTask(srv.url, running.taskId);
    const later = await callTool(srv.url, 'busy', { seconds: 0.1, log }, { caps: NO_TASKS });
    assert.equal(later.result.resultType, 'complete', 'with the slot free it runs inline');
    assert.equal(busyEvents(log).filter((e) => e.kind === 'START').length, 2);
  });

  it('a queued task whose TTL passes is removed without ever starting', async () => {
    const log = join(tempDir(), 'busy.log');
    const running = await busy(srv.url, 2, log);
    const r = await callTool(srv.url, 'busy', { seconds: 0.1, log }, { meta: { 'outlast/idempotencyKey': 'ttl-queued' } });
    // The fixture's default TTL is a day: age this one by hand in the file, as if a day had passed.
    const db = new Database(srv.sqlitePath!);
    db.prepare('UPDATE tasks SET expires_at = ? WHERE task_id = ?').run(Date.now() - 1, r.result.taskId);
    db.close();
    const deadline = Date.now() + 5000;
    let t = await getTask(srv.url, r.result.taskId);
    while (!t.error && Date.now() < deadline) {
      await sleep(100);
      t = await getTask(srv.url, r.result.taskId);
    }
    assert.match(t.error?.message ?? '', /Task has expired/);
    await waitForTask(srv.url, running.taskId!);
    await sleep(300);
    assert.equal(busyEvents(log).filter((e) => e.kind === 'START').length, 1, 'only the running call started');
    assert.deepEqual(busyEvents(log).filter((e) => e.kind === 'END').map((e) => e.taskId), [running.taskId]);
    assert.match(srv.process.stderr(), /reached its TTL while still queued \(it never started\)/);
  });
});

describe('with handles on, a client without task support waits in the queue too', () => {
  const srv = useServer(['--max-running', '1', '--inline-budget-ms', '100', '--handle-after-ms', '300']);

  it('is answered a handle to its queued task at once, and the status tool follows it to the tool\'s own result', async () => {
    const log = join(tempDir(), 'busy.log');
    const running = await busy(srv.url, 1, log);
    assert.ok(running.taskId);
    const t0 = Date.now();
    const plain = await callTool(srv.url, 'busy', { seconds: 0.2, log }, { caps: NO_TASKS });
    assert.ok(Date.now() - t0 < 500, 'answered without waiting for a slot');
    const handle = plain.result.structuredContent;
    assert.equal(handle.status, 'working');
    assert.match(handle.statusMessage, /^Queued: position 1/);
    assert.match(textOf(plain.result), /is waiting for a free slot on the server; it continues in the background as task/);
    const done = await rpc(srv.url, 'tools/call', { name: 'outlast_task_status', arguments: { taskId: handle.taskId, waitSeconds: 10 } }, { caps: NO_TASKS });
    assert.match(textOf(done.result), /^Busy for 0.2 s in \d+$/);
    const events = busyEvents(log);
    assert.equal(maxConcurrent(events), 1);
    assert.deepEqual(events.filter((e) => e.kind === 'END').map((e) => e.taskId), [running.taskId, handle.taskId]);
  });
});

describe('back-pressure past --max-queued', () => {
  const srv = useServer(['--max-running', '1', '--max-queued', '3', '--inline-budget-ms', '50']);

  it('refuses the calls past the bound with a retry time, stores nothing for them, and every accepted call completes', async () => {
    const log = join(tempDir(), 'busy.log');
    const replies = await Promise.all(Array.from({ length: 12 }, () => callTool(srv.url, 'busy', { seconds: 0.3, log })));
    const accepted = replies.filter((r) => !r.error);
    const refused = replies.filter((r) => r.error);
    assert.ok(refused.length >= 6, `${refused.length} of 12 refused`);
    for (const r of refused) {
      assert.equal(r.error!.code, BUSY_CODE);
      assert.equal(r.error!.data.reason, 'queue_full');
      assert.ok(r.error!.data.retryAfterMs >= 1000);
      assert.match(r.error!.message, /run queue is full .* nothing was stored/);
      if (r.status === 503) assert.ok(Number(r.headers.get('retry-after')) >= 1);
    }
    assert.ok(accepted.length >= 4 && accepted.length <= 5, `${accepted.length} accepted: one running, three queued (one more may slip past a concurrent read)`);
    const ids = accepted.map((r) => r.result.taskId as string);
    for (const id of ids) assert.equal((await waitForTask(srv.url, id, undefined, { timeoutMs: 10_000 })).status, 'completed');
    const events = busyEvents(log);
    assert.equal(events.filter((e) => e.kind === 'START').length, accepted.length, 'exactly the accepted calls ran');
    const db = new Database(srv.sqlitePath!, { readonly: true });
    const stored = (db.prepare("SELECT count(*) AS n FROM tasks WHERE tool = 'busy'").get() as { n: number }).n;
    db.close();
    assert.equal(stored, accepted.length, 'nothing stored for a refused call');
    assert.equal(maxConcurrent(events), 1);
  });
});

describe('the processes on one SQLite file share the limits (an HTTP replica and a --no-http worker)', () => {
  it('--max-running 2 each and --tool-limit busy=3: never more than 3 at once, never more than 2 in one process, both run some', async () => {
    const dir = tempDir();
    const store = ['--store', `sqlite:${join(dir, 'tasks.db')}`];
    const limits = ['--max-running', '2', '--tool-limit', 'busy=3', '--queue-poll-ms', '100', '--inline-budget-ms', '50', '--no-handles'];
    const http = await startServer([...store, ...limits]);
    const worker = await startServer([...store, ...limits, '--no-http']);
    try {
      assert.match(worker.url, /^replica /);
      const log = join(dir, 'busy.log');
      const calls = await Promise.all(Array.from({ length: 12 }, () => busy(http.url, 0.4, log)));
      assert.ok(calls.every((c) => c.taskId), 'a tool limited across the deployment always runs as a task');
      const events = await waitForEnds(log, 12, 20_000);
      assert.ok(maxConcurrent(events) <= 3, `${maxConcurrent(events)} ran at once`);
      assert.equal(maxConcurrent(events), 3, 'the limit is used');
      for (const pid of [http.pid, worker.pid]) {
        const mine = events.filter((e) => e.pid === pid);
        assert.ok(mine.length > 0, `process ${pid} ran some`);
        assert.ok(maxConcurrent(mine) <= 2, `process ${pid} ran ${maxConcurrent(mine)} at once`);
      }
      for (const c of calls) assert.equal((await getTask(http.url, c.taskId!)).result.status, 'completed');
      // Without the extension (and handles off), a tool limited across the deployment is refused: it runs only as a task.
      const plain = await callTool(http.url, 'busy', { seconds: 0.1, log }, { caps: NO_TASKS });
      assert.equal(plain.error?.code, -32021);
      assert.match(plain.error!.message, /limited across the deployment/);
    } finally {
      await worker.stop();
      await http.stop();
    }
  });
});

describe('processes on one store share the key that seals MRTR requestState (kept in the store)', () => {
  it('a second round carried to another process of the store is accepted; one sent to another store is refused', async () => {
    const dir = tempDir();
    const [a, b, other] = await Promise.all([
      startServer(['--store', `sqlite:${join(dir, 'tasks.db')}`]),
      startServer(['--store', `sqlite:${join(dir, 'tasks.db')}`]),
      startServer(['--store', `sqlite:${join(dir, 'other.db')}`]),
    ]);
    try {
      const tool = 'test_input_required_result_request_state';
      const first = await callTool(a.url, tool, {}, { caps: NO_TASKS });
      assert.equal(first.result.resultType, 'input_required');
      const second = { name: tool, arguments: {}, inputResponses: { confirm: { action: 'accept', content: { ok: true } } }, requestState: first.result.requestState };
      const onB = await rpc(b.url, 'tools/call', second, { caps: NO_TASKS });
      assert.match(textOf(onB.result), /^state-ok: requestState verified/);
      const elsewhere = await rpc(other.url, 'tools/call', second, { caps: NO_TASKS });
      assert.equal(elsewhere.error?.code, -32602, 'another store holds another key');
    } finally {
      await Promise.all([a.stop(), b.stop(), other.stop()]);
    }
  });
});

describe('capacity flags', () => {
  const serve = (args: string[]) => spawnSync(process.execPath, [BIN, 'serve', FIXTURES, '--port', '0', '--store', `sqlite:${join(tempDir(), 't.db')}`, ...args], { cwd: ROOT, encoding: 'utf8', timeout: 15_000 });

  it('refuse what they cannot honour, with a clear message', () => {
    for (const [args, message] of [
      [['--tool-limit', 'nope=2'], /limit names tool "nope", which this server does not define/],
      [['--tool-limit', 'busy=0'], /--tool-limit must be TOOL=N with N >= 1/],
      [['--tool-limit', 'busy'], /--tool-limit must be TOOL=N/],
      [['--tool-limit', 'greet=2'], /Tool "greet" has a deployment-wide limit but policy "never"/],
      [['--max-running', '0'], /--max-running must be an integer >= 1/],
      [['--max-queued', 'x'], /--max-queued must be an integer >= 1/],
      [['--no-http', '--stdio'], /exclude each other/],
      [['--lease-ms', '1000', '--heartbeat-ms', '800'], /leaseMs \(1000\) must be at least twice heartbeatMs \(800\)/],
    ] as const) {
      const r = serve([...args]);
      assert.notEqual(r.status, 0, `${args.join(' ')} was accepted`);
      assert.match(r.stderr, message, `${args.join(' ')}: ${r.stderr}`);
    }
  });

  it('--lease-ms alone derives its heartbeat: a replica killed with kill -9 is taken over within the lease', async () => {
    const dir = tempDir();
    const store = ['--store', `sqlite:${join(dir, 'tasks.db')}`];
    const a = await startServer([...store, '--lease-ms', '1200']);
    const b = await startServer([...store, '--lease-ms', '1200']);
    try {
      const r = await callTool(a.url, 'sleep_retryable', { seconds: 30 });
      assert.equal(r.result.resultType, 'task');
      await a.stop('SIGKILL');
      // Same host: the dead pid is seen at b's next heartbeat (a sixth of the lease, 200 ms; the default is 5 s).
      const t0 = Date.now();
      const db = new Database(join(dir, 'tasks.db'), { readonly: true });
      const row = () => db.prepare('SELECT owner, attempts FROM tasks WHERE task_id = ?').get(r.result.taskId) as { owner: string; attempts: number };
      while (row().attempts < 2 && Date.now() - t0 < 5000) await sleep(50);
      const taken = row();
      db.close();
      assert.equal(taken.attempts, 2, 're-run by b');
      assert.ok(Date.now() - t0 < 1500, `taken over ${Date.now() - t0} ms after the kill`);
      const cancel = await rpc(b.url, 'tasks/cancel', { taskId: r.result.taskId });
      assert.equal(cancel.error, undefined);
      assert.equal((await waitForTask(b.url, r.result.taskId)).status, 'cancelled');
    } finally {
      await b.stop();
      await a.stop();
    }
  });
});
