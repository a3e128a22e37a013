/**
 * The server side end to end: real `outlast serve` processes on the fixture server, SQLite files, real signals.
 * Every message the server sends is checked against the extension's and core's JSON schemas (helpers.rpc).
 */
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { describe, it } from 'node:test';
import {
  EXT,
  callTool,
  checkServerMessage,
  getTask,
  headersFor,
  metaFor,
  openListen,
  rpc,
  sleep,
  startServer,
  tempDir,
  textOf,
  validated,
  useServer,
  waitForTask,
} from './helpers.js';

const NO_TASKS = { elicitation: {} };
const key = (s: string) => ({ 'outlast/idempotencyKey': s });

describe('tools/call: inline or task, decided per request', () => {
  const srv = useServer([]);

  it('answers inline when the handler finishes within the budget', async () => {
    const r = await callTool(srv.url, 'sleep', { seconds: 0.1 });
    assert.equal(r.result.resultType, 'complete');
    assert.match(textOf(r.result), /Slept 0.1 s/);
  });

  it('returns a durable task when the handler outlasts the budget, and the task completes', async () => {
    const t0 = Date.now();
    const r = await callTool(srv.url, 'sleep', { seconds: 2 });
    assert.equal(r.result.resultType, 'task');
    assert.ok(Date.now() - t0 < 1900, 'the CreateTaskResult came back before the work finished');
    assert.equal(r.result.status, 'working');
    assert.ok(r.result.taskId.length >= 22, 'at least 128 random bits, base64url');
    const done = await waitForTask(srv.url, r.result.taskId);
    assert.equal(done.status, 'completed');
    assert.match(textOf(done.result), /Slept 2 s \(attempt 1\)/);
    assert.equal(done.result.resultType, 'complete');
  });

  it('never returns a task to a request that did not declare the extension', async () => {
    const r = await callTool(srv.url, 'sleep', { seconds: 1.5 }, { caps: NO_TASKS });
    assert.equal(r.result.resultType, 'complete');
    assert.match(textOf(r.result), /Slept 1.5 s/);
  });

  it('policy always: a tool that opts out of handles is -32021 without the extension (as the suite requires of a required tool); a task with it', async () => {
    const r = await callTool(srv.url, 'failing_job', {}, { caps: NO_TASKS });
    assert.equal(r.error?.code, -32021, JSON.stringify(r.error));
    assert.deepEqual(r.error?.data?.requiredCapabilities, { extensions: { 'io.modelcontextprotocol/tasks': {} } });
    const t = await callTool(srv.url, 'failing_job', {});
    assert.equal(t.result.resultType, 'task');
    const done = await waitForTask(srv.url, t.result.taskId);
    assert.equal(done.status, 'completed', 'a tool error is a completed task');
    assert.equal(done.result.isError, true);
  });

  it('policy never: greet is always inline, even with the extension', async () => {
    const r = await callTool(srv.url, 'greet', { name: 'Ada' });
    assert.equal(r.result.resultType, 'complete');
    assert.equal(textOf(r.result), 'Hello, Ada!');
  });

  it('a JSON-RPC error thrown by a handler makes the task failed, with error and statusMessage', async () => {
    const t = await callTool(srv.url, 'protocol_error_job', {});
    const done = await waitForTask(srv.url, t.result.taskId);
    assert.equal(done.status, 'failed');
    assert.equal(done.error.code, -32603);
    assert.match(done.error.message, /worker pool/);
    assert.equal(done.statusMessage, done.error.message);
    assert.equal(done.result, undefined);
  });

  it('statusMessage shows progress while the task runs', async () => {
    const t = await callTool(srv.url, 'sleep', { seconds: 3 });
    const seen = await waitForTask(srv.url, t.result.taskId, (x) => /sleep: \d+%/.test(x.statusMessage ?? ''));
    assert.equal(seen.status, 'working');
    assert.ok(seen.pollIntervalMs >= 250);
  });
});

describe("the fixtures' log files (busy, steps)", () => {
  const srv = useServer([]);

  it('any file under the temporary folder is written; a path elsewhere is refused with -32602 and nothing is written', async () => {
    const log = join(tempDir(), 'busy.txt');
    const ok = await callTool(srv.url, 'busy', { seconds: 0, log }, { caps: NO_TASKS });
    assert.equal(ok.error, undefined, JSON.stringify(ok.error));
    assert.match(readFileSync(log, 'utf8'), /^START - \d+ \d+\nEND - \d+ \d+\n$/);

    // Beside the temporary folder, not in it (the checkout itself may be under it).
    const outside = (name: string) => resolve(tmpdir(), '..', `outlast-${process.pid}-${name}`);
    for (const bad of [outside('busy.log'), 'relative/busy.log', `${tempDir()}/../../etc/busy.log`]) {
      const r = await callTool(srv.url, 'busy', { seconds: 0, log: bad }, { caps: NO_TASKS });
      assert.equal(r.error?.code, -32602, `${bad}: ${JSON.stringify(r)}`);
      assert.match(r.error!.message, /busy: log must be an absolute path of a file under /);
    }
    assert.equal(existsSync(outside('busy.log')), false, 'nothing written outside the temporary folder');

    const steps = await callTool(srv.url, 'steps', { log: outside('steps.log'), count: 1, stepSeconds: 0, gapSeconds: 0 });
    const failed = await waitForTask(srv.url, steps.result.taskId);
    assert.equal(failed.status, 'failed');
    assert.match(failed.statusMessage, /steps: log must be an absolute path of a file under /);
    assert.equal(existsSync(outside('steps.log')), false);
  });
});

describe('persist before acknowledging', () => {
  it('100 concurrent creations: each is readable at once, and all survive kill -9 of the server', async () => {
    const db = join(tempDir(), 't.db');
    const srv = await startServer(['--store', `sqlite:${db}`, '--inline-budget-ms', '50']);
    const ids = await Promise.all(
      Array.from({ length: 100 }, async (_, i) => {
        const r = await callTool(srv.url, 'sleep', { seconds: 60 }, { meta: key(`bulk-${i}`) });
        assert.equal(r.result.resultType, 'task');
        const g = await getTask(srv.url, r.result.taskId);
        assert.equal(g.result.taskId, r.result.taskId, 'tasks/get resolves right after the CreateTaskResult');
        return r.result.taskId as string;
      }),
    );
    assert.equal(new Set(ids).size, 100);
    const exit = await srv.stop('SIGKILL');
    assert.equal(exit.signal, 'SIGKILL');
    const again = await startServer(['--store', `sqlite:${db}`]);
    try {
      for (const id of ids) {
        const g = await getTask(again.url, id);
        assert.equal(g.error, undefined, `task ${id} survived`);
        assert.equal(g.result.status, 'failed', 'an unsafe-to-re-run task of a dead process is failed, never left working');
      }
    } finally {
      await again.stop();
    }
  });
});

describe('crash recovery: kill -9 and restart on the same file', () => {
  it('finished results survive; retry-safe tasks re-run to completion; others fail with the reason', async () => {
    const db = join(tempDir(), 't.db');
    const srv = await startServer(['--store', `sqlite:${db}`, '--inline-budget-ms', '100']);
    const quick = await callTool(srv.url, 'sleep', { seconds: 0.3 }, { meta: key('quick') });
    const quickDone = await waitForTask(srv.url, quick.result.taskId);
    assert.equal(quickDone.status, 'completed');
    const unsafe = await callTool(srv.url, 'sleep', { seconds: 30 });
    const safe = await callTool(srv.url, 'sleep_retryable', { seconds: 2 });
    const asking = await callTool(srv.url, 'ask', { message: 'Ship it?', timeoutSeconds: 60 });
    await waitForTask(srv.url, asking.result.taskId, (t) => t.status === 'input_required');
    await sleep(300);
    await srv.stop('SIGKILL');

    const again = await startServer(['--store', `sqlite:${db}`]);
    try {
      const q = await getTask(again.url, quick.result.taskId);
      assert.equal(q.result.status, 'completed');
      assert.deepEqual(q.result.result, quickDone.result);

      const u = await getTask(again.url, unsafe.result.taskId);
      assert.equal(u.result.status, 'failed');
      assert.match(u.result.error.message, /stopped before it finished; "sleep" is not declared safe to re-run/);
      assert.equal(u.result.error.data.reason, 'worker_lost');

      const s = await waitForTask(again.url, safe.result.taskId);
      assert.equal(s.status, 'completed');
      assert.match(textOf(s.result), /attempt 2/);

      const a = await getTask(again.url, asking.result.taskId);
      assert.equal(a.result.status, 'failed', 'ask is not retry-safe: failed, not stuck in input_required');
    } finally {
      await again.stop();
    }
  });

  it('a retry-safe handler is re-run after a crash and gets the answers given before it without asking again', async () => {
    const db = join(tempDir(), 't.db');
    const module = join(process.cwd(), 'dist', 'test', 'retry-input-module.js');
    const srv = await startServer(['--store', `sqlite:${db}`], { module });
    const t = await callTool(srv.url, 'approve', {});
    const asked = await waitForTask(srv.url, t.result.taskId, (x) => x.status === 'input_required');
    assert.deepEqual(Object.keys(asked.inputRequests), ['approval']);
    await rpc(srv.url, 'tasks/update', { taskId: t.result.taskId, inputResponses: { approval: { action: 'accept', content: { ok: true } } } });
    await waitForTask(srv.url, t.result.taskId, (x) => x.status === 'input_required' && !!x.inputRequests.second);
    await srv.stop('SIGKILL');

    const again = await startServer(['--store', `sqlite:${db}`], { module });
    try {
      const back = await waitForTask(again.url, t.result.taskId, (x) => x.status === 'input_required');
      assert.deepEqual(Object.keys(back.inputRequests), ['second'], 'the re-run got "approval" from the store and did not ask again');
      await rpc(again.url, 'tasks/update', { taskId: t.result.taskId, inputResponses: { second: { action: 'accept', content: { ok: true } } } });
      const final = await waitForTask(again.url, t.result.taskId);
      assert.equal(final.status, 'completed');
      assert.equal(textOf(final.result), 'accept/accept: approved on attempt 2');
    } finally {
      await again.stop();
    }
  });
});

describe('TTL: expired is not "not found"', () => {
  const srv = useServer(['--default-ttl-ms', '1500', '--sweep-interval-ms', '200', '--inline-budget-ms', '50']);

  it('a task past its TTL reads "Task has expired"; an id never issued reads "Task not found"; both -32602', async () => {
    const t = await callTool(srv.url, 'sleep', { seconds: 0.2 }, { meta: key('ttl') });
    assert.equal(t.result.ttlMs, 1500);
    const done = await waitForTask(srv.url, t.result.taskId);
    assert.equal(done.status, 'completed');
    await sleep(2200);
    const expired = await getTask(srv.url, t.result.taskId);
    assert.equal(expired.error?.code, -32602);
    assert.equal(expired.error?.message, 'Failed to retrieve task: Task has expired');
    const missing = await getTask(srv.url, 'AAAAAAAAAAAAAAAAAAAAAA');
    assert.equal(missing.error?.code, -32602);
    assert.equal(missing.error?.message, 'Failed to retrieve task: Task not found');
  });

  it('unfinished work is cancelled when its TTL passes', async () => {
    const t = await callTool(srv.url, 'sleep', { seconds: 30 });
    assert.equal(t.result.resultType, 'task');
    await sleep(2300);
    const g = await getTask(srv.url, t.result.taskId);
    assert.equal(g.error?.message, 'Failed to retrieve task: Task has expired');
  });

  it('the TTL grows while the task waits for a human', async () => {
    const t = await callTool(srv.url, 'ask', { message: 'Still there?', timeoutSeconds: 30 });
    await waitForTask(srv.url, t.result.taskId, (x) => x.status === 'input_required');
    await sleep(2500);
    const waiting = await getTask(srv.url, t.result.taskId);
    assert.equal(waiting.result.status, 'input_required', 'not expired while waiting for input');
    await rpc(srv.url, 'tasks/update', { taskId: t.result.taskId, inputResponses: { answer: { action: 'accept', content: { answer: 'yes' } } } });
    const done = await waitForTask(srv.url, t.result.taskId);
    assert.equal(done.status, 'completed');
    assert.ok(done.ttlMs >= 1500 + 2000, `ttlMs grew by the wait (now ${done.ttlMs})`);
  });
});

describe('principals: tasks are bound to the caller', () => {
  const srv = useServer(['--bearer', 'tok-a=alice', '--bearer', 'tok-b=bob']);

  it('no token or an unknown token gets 401', async () => {
    const r = await rpc(srv.url, 'server/discover', {}, { raw: true });
    assert.equal(r.status, 401);
    assert.match(r.headers.get('www-authenticate') ?? '', /Bearer/);
    const bad = await rpc(srv.url, 'server/discover', {}, { raw: true, token: 'nope' });
    assert.equal(bad.status, 401);
    assert.equal(bad.error?.message, 'Unknown bearer token');
  });

  it("another principal gets exactly the answer an unknown id gets, for get, update, cancel and listen", async () => {
    const t = await callTool(srv.url, 'sleep', { seconds: 5 }, { token: 'tok-a' });
    assert.equal(t.result.resultType, 'task');
    const mine = await getTask(srv.url, t.result.taskId, { token: 'tok-a' });
    assert.equal(mine.result.status, 'working');
    const theirs = await getTask(srv.url, t.result.taskId, { token: 'tok-b' });
    const unknown = await getTask(srv.url, 'BBBBBBBBBBBBBBBBBBBBBB', { token: 'tok-b' });
    assert.deepEqual(theirs.error, unknown.error);
    assert.equal(theirs.status, unknown.status);
    const cancel = await rpc(srv.url, 'tasks/cancel', { taskId: t.result.taskId }, { token: 'tok-b' });
    assert.equal(cancel.error?.message, 'Failed to retrieve task: Task not found');
    const upd = await rpc(srv.url, 'tasks/update', { taskId: t.result.taskId, inputResponses: {} }, { token: 'tok-b' });
    assert.equal(upd.error?.message, 'Failed to retrieve task: Task not found');
    const still = await getTask(srv.url, t.result.taskId, { token: 'tok-a' });
    assert.equal(still.result.status, 'working', "bob's cancel did not touch alice's task");
    await rpc(srv.url, 'tasks/cancel', { taskId: t.result.taskId }, { token: 'tok-a' });
  });

  it('idempotency keys are scoped per principal', async () => {
    // Longer than the inline budget: each is a task (a quick keyed call answers inline).
    const a = await callTool(srv.url, 'sleep', { seconds: 1.5 }, { token: 'tok-a', meta: key('same') });
    const b = await callTool(srv.url, 'sleep', { seconds: 1.5 }, { token: 'tok-b', meta: key('same') });
    assert.notEqual(a.result.taskId, b.result.taskId);
  });
});

describe('idempotent creation', () => {
  const srv = useServer([]);

  it('a duplicate returns the existing task instead of starting the work again; other arguments are an error', async () => {
    const first = await callTool(srv.url, 'sleep', { seconds: 2 }, { meta: key('deploy-42') });
    assert.equal(first.result.resultType, 'task', 'a keyed call that outlasts the inline budget is a task');
    const dup = await callTool(srv.url, 'sleep', { seconds: 2 }, { meta: key('deploy-42') });
    assert.equal(dup.result.taskId, first.result.taskId);
    const done = await waitForTask(srv.url, first.result.taskId);
    assert.match(textOf(done.result), /attempt 1/);
    const late = await callTool(srv.url, 'sleep', { seconds: 2 }, { meta: key('deploy-42') });
    assert.equal(late.result.taskId, first.result.taskId, 'after it finished too, the retry gets the task it became');
    assert.equal(late.result.status, 'completed');
    const conflict = await callTool(srv.url, 'sleep', { seconds: 3 }, { meta: key('deploy-42') });
    assert.equal(conflict.error?.code, -32602);
    assert.match(conflict.error!.message, /already used for this tool with different arguments/);
    assert.equal(conflict.error?.data.existingTaskId, first.result.taskId);
  });

  it('concurrent duplicates create one task', async () => {
    const rs = await Promise.all(Array.from({ length: 20 }, () => callTool(srv.url, 'sleep', { seconds: 2 }, { meta: key('burst') })));
    assert.equal(new Set(rs.map((r) => r.result.taskId)).size, 1);
  });

  it('a malformed key is refused clearly', async () => {
    const r = await callTool(srv.url, 'sleep', { seconds: 0.1 }, { meta: { 'outlast/idempotencyKey': 42 } });
    assert.equal(r.error?.code, -32602);
    assert.match(r.error!.message, /idempotencyKey.*must be a string/);
  });
});

describe('cancel reaches the handler', () => {
  const srv = useServer([]);

  it('tasks/cancel acks empty; the handler aborts and the task reads cancelled', async () => {
    const t = await callTool(srv.url, 'sleep', { seconds: 60 });
    const t0 = Date.now();
    const ack = await rpc(srv.url, 'tasks/cancel', { taskId: t.result.taskId });
    assert.deepEqual(Object.keys(ack.result).filter((k) => k !== '_meta'), ['resultType']);
    const done = await waitForTask(srv.url, t.result.taskId, undefined, { timeoutMs: 5000 });
    assert.equal(done.status, 'cancelled');
    assert.ok(Date.now() - t0 < 3000, 'the sleeping handler stopped at once');
    const again = await rpc(srv.url, 'tasks/cancel', { taskId: t.result.taskId });
    assert.equal(again.result.resultType, 'complete', 'cancelling a terminal task acks the same');
  });

  it('work that finished first stays completed', async () => {
    const t = await callTool(srv.url, 'sleep', { seconds: 1.5 }, { meta: key('finish-first') });
    await waitForTask(srv.url, t.result.taskId);
    await rpc(srv.url, 'tasks/cancel', { taskId: t.result.taskId });
    const g = await getTask(srv.url, t.result.taskId);
    assert.equal(g.result.status, 'completed');
  });

  it('cancel reaches a handler waiting for input', async () => {
    const t = await callTool(srv.url, 'ask', { message: 'Go?' });
    await waitForTask(srv.url, t.result.taskId, (x) => x.status === 'input_required');
    await rpc(srv.url, 'tasks/cancel', { taskId: t.result.taskId });
    const done = await waitForTask(srv.url, t.result.taskId);
    assert.equal(done.status, 'cancelled');
    assert.equal(done.inputRequests, undefined);
  });
});

describe('input: input_required, answers, deadlines', () => {
  const srv = useServer([]);

  it('asks, takes the answer through tasks/update, completes with it', async () => {
    const t = await callTool(srv.url, 'ask', { message: 'Favourite colour?' });
    assert.equal(t.result.resultType, 'task');
    const w = await waitForTask(srv.url, t.result.taskId, (x) => x.status === 'input_required');
    assert.equal(w.inputRequests.answer.method, 'elicitation/create');
    assert.equal(w.inputRequests.answer.params.message, 'Favourite colour?');
    const ack = await rpc(srv.url, 'tasks/update', { taskId: t.result.taskId, inputResponses: { answer: { action: 'accept', content: { answer: 'teal' } } } });
    assert.equal(ack.result.resultType, 'complete');
    const done = await waitForTask(srv.url, t.result.taskId);
    assert.equal(done.status, 'completed');
    assert.match(textOf(done.result), /The answer is: teal/);
  });

  it('past its deadline the wait fails the task with the reason instead of hanging', async () => {
    const t = await callTool(srv.url, 'ask', { message: 'Quick!', timeoutSeconds: 1 });
    await waitForTask(srv.url, t.result.taskId, (x) => x.status === 'input_required');
    const done = await waitForTask(srv.url, t.result.taskId, undefined, { timeoutMs: 5000 });
    assert.equal(done.status, 'failed');
    assert.match(done.error.message, /No answer to input "answer" within 1 s/);
    assert.equal(done.error.data.reason, 'input_timeout');
    const late = await rpc(srv.url, 'tasks/update', { taskId: t.result.taskId, inputResponses: { answer: { action: 'accept', content: { answer: 'late' } } } });
    assert.equal(late.result.resultType, 'complete', 'a late answer is acked and ignored');
    assert.equal((await getTask(srv.url, t.result.taskId)).result.status, 'failed');
  });

  it('garbage inputResponses get -32602 and lose nothing; unknown keys are ignored; partial answers keep the rest', async () => {
    const t = await callTool(srv.url, 'multi_input', {});
    const w = await waitForTask(srv.url, t.result.taskId, (x) => x.status === 'input_required');
    assert.deepEqual(Object.keys(w.inputRequests).sort(), ['first', 'second']);
    for (const bad of ['nope', [1, 2], { first: 'yes' }, { first: { action: 'maybe' } }, { first: { action: 'accept', content: { first: { nested: 1 } } } }]) {
      const r = await rpc(srv.url, 'tasks/update', { taskId: t.result.taskId, inputResponses: bad });
      assert.equal(r.error?.code, -32602, `rejected: ${JSON.stringify(bad)}`);
      assert.ok(r.error!.message.length > 10);
    }
    const still = await getTask(srv.url, t.result.taskId);
    assert.deepEqual(Object.keys(still.result.inputRequests).sort(), ['first', 'second'], 'nothing was half-applied');
    await rpc(srv.url, 'tasks/update', { taskId: t.result.taskId, inputResponses: { nobody: { action: 'accept' }, first: { action: 'accept', content: { first: 'A' } } } });
    const half = await getTask(srv.url, t.result.taskId);
    assert.equal(half.result.status, 'input_required');
    assert.deepEqual(Object.keys(half.result.inputRequests), ['second']);
    await rpc(srv.url, 'tasks/update', { taskId: t.result.taskId, inputResponses: { second: { action: 'accept', content: { second: 'B' } } } });
    const done = await waitForTask(srv.url, t.result.taskId);
    assert.equal(textOf(done.result), 'Got A and B');
  });

  it('only asks for kinds the creating request declared: -32021 naming the missing capability', async () => {
    const r = await callTool(srv.url, 'ask', { message: 'Hi?' }, { caps: { extensions: { [EXT]: {} } } });
    assert.equal(r.status, 400);
    assert.equal(r.error?.code, -32021);
    assert.deepEqual(r.error?.data, { requiredCapabilities: { elicitation: {} } });
  });
});

describe('pollIntervalMs is a load contract', () => {
  const srv = useServer(['--poll-interval-ms', '400']);

  it('polling at the advertised interval is never refused', async () => {
    const t = await callTool(srv.url, 'sleep', { seconds: 4 });
    let polls = 0;
    for (;;) {
      const g = await getTask(srv.url, t.result.taskId);
      polls += 1;
      assert.equal(g.status, 200);
      assert.equal(g.error, undefined);
      if (g.result.status === 'completed') break;
      await sleep(g.result.pollIntervalMs);
    }
    assert.ok(polls >= 5);
  });

  it('polls far faster than advertised get HTTP 429, Retry-After and data.retryAfterMs', async () => {
    const t = await callTool(srv.url, 'sleep', { seconds: 10 });
    let refused: Awaited<ReturnType<typeof getTask>> | undefined;
    for (let i = 0; i < 40 && !refused; i++) {
      const g = await getTask(srv.url, t.result.taskId);
      if (g.status === 429) refused = g;
    }
    assert.ok(refused, 'a tight loop of polls was refused');
    assert.ok(Number(refused.headers.get('retry-after')) >= 1);
    assert.ok(refused.error!.data.retryAfterMs > 0);
    assert.match(refused.error!.message, /faster than the advertised pollIntervalMs/);
    await sleep(refused.error!.data.retryAfterMs + 50);
    const ok = await getTask(srv.url, t.result.taskId);
    assert.equal(ok.status, 200, 'coming back when told works');
    await rpc(srv.url, 'tasks/cancel', { taskId: t.result.taskId });
  });
});

describe('subscriptions/listen with taskIds pushes notifications/tasks', () => {
  const srv = useServer([]);

  async function listen(taskIds: string[], caps: Record<string, unknown>, until: (msgs: Array<Record<string, any>>) => boolean) {
    const stream = await openListen(srv.url, taskIds, caps);
    await stream.until(until).finally(() => stream.close());
    return stream;
  }

  it('acks first, then sends the full task state on every change until completed', async () => {
    const t = await callTool(srv.url, 'sleep', { seconds: 2 });
    const { msgs } = await listen([t.result.taskId, 'not-a-task'], { extensions: { [EXT]: {} } }, (m) => m.some((x) => x.params?.status === 'completed'));
    assert.equal(msgs[0]!.method, 'notifications/subscriptions/acknowledged');
    assert.deepEqual(msgs[0]!.params.notifications, { taskIds: [t.result.taskId] }, 'unknown ids are not honoured');
    for (const m of msgs) {
      assert.equal(m.params._meta['io.modelcontextprotocol/subscriptionId'], 'listen-1');
    }
    const statuses = msgs.slice(1).map((m) => m.params.status);
    assert.equal(statuses[statuses.length - 1], 'completed');
    assert.ok(msgs.slice(1).some((m) => m.params.status === 'working' && /sleep/.test(m.params.statusMessage ?? '')));
    const last = msgs[msgs.length - 1]!;
    const polled = await getTask(srv.url, t.result.taskId);
    assert.deepEqual(last.params.result, polled.result.result, 'the notification carries what tasks/get returns');
  });

  it('a client that did not declare the extension gets -32021 (HTTP 400)', async () => {
    const { res, msgs } = await listen(['x'], {}, (m) => m.length > 0); // schema-checked by openListen
    assert.equal(res.status, 400);
    assert.equal(msgs[0]!.error.code, -32021);
  });
});

describe('bad input gets a clear error and the server keeps serving', () => {
  const srv = useServer(['--max-body-bytes', '4096']);

  /** Posts a raw body; the JSON-RPC error that comes back is schema-checked. */
  const post = async (body: string, headers: Record<string, string> = {}) => {
    const res = await fetch(srv.url, { method: 'POST', headers: { ...headersFor('tools/call', { name: 'greet' }), ...headers }, body });
    const json = await res.json();
    checkServerMessage('tools/call', json);
    return { status: res.status, json: async () => json };
  };

  it('malformed JSON: HTTP 400, -32700', async () => {
    const res = await post('{"jsonrpc":"2.0","id":1,"method":');
    assert.equal(res.status, 400);
    const body = await res.json();
    assert.equal(body.error.code, -32700);
    assert.match(body.error.message, /not valid JSON/);
  });

  it('a body over the documented limit: HTTP 413 with a JSON-RPC error', async () => {
    const res = await post(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'greet', arguments: { name: 'x'.repeat(5000) } } }));
    assert.equal(res.status, 413);
    const body = await res.json();
    assert.match(body.error.message, /exceeds 4096 bytes/);
  });

  it('wrong types and unknown ids: -32602 with a message that says what is wrong', async () => {
    const num = await rpc(srv.url, 'tasks/get', { taskId: 5 }, { headers: { 'mcp-name': '5' }, raw: true });
    assert.equal(num.error?.code, -32602);
    assert.match(num.error!.message, /taskId must be a non-empty string/);
    const unknown = await getTask(srv.url, 'does-not-exist');
    assert.equal(unknown.error?.message, 'Failed to retrieve task: Task not found');
    const args = await callTool(srv.url, 'sleep', { seconds: 'soon' });
    assert.equal(args.result.isError, true, 'bad tool arguments are a tool error the model can correct');
    assert.match(textOf(args.result), /Invalid arguments for tool sleep/);
    const upd = await rpc(srv.url, 'tasks/update', { taskId: 'does-not-exist' });
    assert.equal(upd.error?.code, -32602);
  });

  it('missing _meta: -32602 and HTTP 400', async () => {
    const res = await post(JSON.stringify({ jsonrpc: '2.0', id: 9, method: 'tools/call', params: { name: 'greet', arguments: { name: 'x' } } }));
    assert.equal(res.status, 400);
    assert.equal((await res.json()).error.code, -32602);
  });

  it('tasks/result is -32601; tasks/* without the extension is -32021', async () => {
    const r = await rpc(srv.url, 'tasks/result', { taskId: 'x' }, { headers: { 'mcp-name': 'x' } });
    assert.equal(r.error?.code, -32601);
    const g = await getTask(srv.url, 'x', { caps: {} });
    assert.equal(g.error?.code, -32021);
  });

  it('after all that, the server still serves', async () => {
    const r = await callTool(srv.url, 'greet', { name: 'still here' });
    assert.equal(textOf(r.result), 'Hello, still here!');
  });
});

describe('the CLI', () => {
  it('prints the URL when ready and exits 0 on SIGTERM', async () => {
    const srv = await startServer(['--store', `sqlite:${join(tempDir(), 't.db')}`]);
    assert.match(srv.url, /^http:\/\/127\.0\.0\.1:\d+\/mcp$/);
    const exit = await srv.stop('SIGTERM');
    assert.equal(exit.code, 0);
  });

  it('serves stdio: discover, a task, and tasks/get', async () => {
    const { spawn } = await import('node:child_process');
    const { BIN, FIXTURES } = await import('./helpers.js');
    const proc = spawn(process.execPath, [BIN, 'serve', FIXTURES, '--stdio', '--store', `sqlite:${join(tempDir(), 't.db')}`], { stdio: ['pipe', 'pipe', 'pipe'] });
    const lines: Array<Record<string, any>> = [];
    let buf = '';
    proc.stdout.on('data', (d) => {
      buf += d;
      let i;
      while ((i = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, i).trim();
        buf = buf.slice(i + 1);
        if (line) lines.push(JSON.parse(line));
      }
    });
    const sent = new Map<number, string>();
    const send = (id: number, method: string, params: Record<string, unknown>) =>
      sent.set(id, method) &&
      proc.stdin.write(JSON.stringify({ jsonrpc: '2.0', id, method, params: { ...params, _meta: metaFor({ extensions: { [EXT]: {} } }) } }) + '\n');
    const reply = async (id: number) => {
      for (let i = 0; i < 200; i++) {
        const m = lines.find((l) => l.id === id);
        if (m) {
          checkServerMessage(sent.get(id)!, m);
          return m;
        }
        await sleep(25);
      }
      throw new Error(`no reply to ${id}`);
    };
    try {
      send(1, 'server/discover', {});
      assert.deepEqual((await reply(1)).result.capabilities.extensions, { [EXT]: {} });
      send(2, 'tools/call', { name: 'sleep', arguments: { seconds: 1.5 } });
      const created = (await reply(2)).result;
      assert.equal(created.resultType, 'task');
      send(3, 'tasks/get', { taskId: created.taskId });
      assert.equal((await reply(3)).result.taskId, created.taskId);
    } finally {
      process.kill(proc.pid!, 'SIGTERM');
      await new Promise((r) => proc.once('exit', r));
    }
  });

  it('runs as npx outlast from the repository root', async () => {
    const { spawnSync } = await import('node:child_process');
    const { ROOT, tempDir } = await import('./helpers.js');
    // A cache of its own: a shared npx cache half-written by a concurrent run would answer for another user's setup.
    // No scripts: with a fresh cache npx links the package and runs its `prepare` (a whole tsc build, ~40 s), which
    // `npm test` has just done; the bin's wiring is what this checks.
    const env = { ...process.env, npm_config_cache: tempDir('npm-cache-'), npm_config_ignore_scripts: 'true' };
    const r = spawnSync('npx', ['--no-install', 'outlast', 'help'], { cwd: ROOT, encoding: 'utf8', env });
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stdout, /outlast serve MODULE/);
  });

  it('refuses bad flags with a clear message and exit code 2', async () => {
    const { spawnSync } = await import('node:child_process');
    const { BIN, FIXTURES } = await import('./helpers.js');
    const r = spawnSync(process.execPath, [BIN, 'serve', FIXTURES, '--bearer', 'no-equals-sign'], { encoding: 'utf8' });
    assert.equal(r.status, 2);
    assert.match(r.stderr, /--bearer must be TOKEN=PRINCIPAL/);
    const s = spawnSync(process.execPath, [BIN, 'serve', FIXTURES, '--store', 'mysql://x'], { encoding: 'utf8' });
    assert.equal(s.status, 2);
    assert.match(s.stderr, /unsupported --store/);
  });
});

describe('schema checks ran', () => {
  it('validated server messages against the extension schemas', () => {
    for (const def of ['ext#CreateTaskResult', 'ext#GetTaskResult', 'ext#UpdateTaskResult', 'ext#CancelTaskResult', 'ext#TaskStatusNotification', 'core#CallToolResult', 'core#JSONRPCErrorResponse']) {
      assert.ok((validated.get(def) ?? 0) > 0, `${def} checked at least once`);
    }
  });
});

describe('two processes on one SQLite file', () => {
  const db = join(tempDir(), 'shared.db');
  const a = useServer(['--store', `sqlite:${db}`, '--heartbeat-ms', '200']);
  const b = useServer(['--store', `sqlite:${db}`, '--heartbeat-ms', '200']);

  it('either answers a poll; a cancel and an answer given to one reach the handler running in the other', async () => {
    const t = await callTool(a.url, 'sleep', { seconds: 60 });
    assert.equal((await getTask(b.url, t.result.taskId)).result.status, 'working');
    await rpc(b.url, 'tasks/cancel', { taskId: t.result.taskId });
    const cancelled = await waitForTask(b.url, t.result.taskId, undefined, { timeoutMs: 5000 });
    assert.equal(cancelled.status, 'cancelled');

    const q = await callTool(a.url, 'ask', { message: 'Which region?' });
    await waitForTask(b.url, q.result.taskId, (x) => x.status === 'input_required');
    await rpc(b.url, 'tasks/update', { taskId: q.result.taskId, inputResponses: { answer: { action: 'accept', content: { answer: 'eu-west' } } } });
    const done = await waitForTask(a.url, q.result.taskId, undefined, { timeoutMs: 5000 });
    assert.equal(textOf(done.result), 'The answer is: eu-west');
  });
});
