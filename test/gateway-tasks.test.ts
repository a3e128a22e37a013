/**
 * `outlast gateway --http URL` in front of an upstream that itself answers long calls with tasks of the 2026-07-28
 * Tasks extension: Outlast's own `outlast serve` with the fixture tools, a real process, reached through an HTTP tap
 * (gateway-upstreams.ts `httptap`) that records what reached it. Driven by TaskClient (a 2026 client) and raw
 * requests, as a host would.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { ROOT, callTool, freePort, httpServiceProcess, rpc, startServer, tempDir, textOf, until, waitForTask, type ServerProcess } from './helpers.js';
import { reached } from './http-tap.js';
import { Journal, RpcError, TaskClient } from '../src/client/index.js';
import { lateAnswerer } from './late-answer.js';

const UPSTREAMS = join(ROOT, 'dist', 'test', 'gateway-upstreams.js');
const TASKS_EXTENSION = 'io.modelcontextprotocol/tasks';

/** The upstream task a call of `tool` became: the id the gateway polls after its tools/call. */
function upstreamTaskOf(log: string, tool: string, matches: (args: Record<string, any>) => boolean = () => true): string | undefined {
  const seen = reached(log);
  const call = seen.findLastIndex((r) => r.msg.method === 'tools/call' && r.msg.params?.name === tool && matches(r.msg.params.arguments ?? {}));
  if (call < 0) return undefined;
  return seen.slice(call + 1).find((r) => r.msg.method === 'tasks/get')?.msg.params.taskId;
}

describe('gateway in front of a 2026-07-28 upstream that answers with tasks (outlast serve over HTTP)', () => {
  let upstream: ServerProcess;
  let gw: ServerProcess;
  let tapUrl: string;
  const log = join(tempDir(), 'http-tap.log');
  const tap = { stop: async () => undefined } as { stop: () => Promise<void> };
  before(async () => {
    upstream = await startServer(['--store', `sqlite:${join(tempDir(), 'up.db')}`, '--poll-interval-ms', '300', '--park-after-ms', '300']);
    const port = await freePort();
    const svc = httpServiceProcess('httptap', process.execPath, [UPSTREAMS, 'httptap', log, String(port), upstream.url], `http://127.0.0.1:${port}/healthz`);
    await svc.start();
    tap.stop = () => svc.stop();
    tapUrl = `http://127.0.0.1:${port}/mcp`;
    gw = await startServer(['--store', `sqlite:${join(tempDir(), 'gw.db')}`, '--inline-budget-ms', '400', '--park-after-ms', '300', '--no-poll-limit'], {
      command: ['gateway', '--http', tapUrl, '--name', 'up'],
    });
  });
  after(async () => {
    await gw?.stop();
    await tap.stop();
    await upstream?.stop();
  });

  it('a long upstream call is a task the gateway follows at the upstream poll interval; a 2026 client polls the gateway to its result', async () => {
    const client = new TaskClient({ url: gw.url, status: 'poll' });
    try {
      assert.equal(textOf(await client.callTool('greet', { name: 'Ada' })), 'Hello, Ada!', 'a short call answers inline');
      const statuses: string[] = [];
      const outputs: Array<{ type: string; data: any }> = [];
      const call = await client.start('slow_compute', { seconds: 2.5, label: 'crunch' }, { onOutput: (e) => outputs.push(e as never) });
      call.on('task', (t) => t.statusMessage && statuses.push(t.statusMessage));
      const result = await call.result();
      assert.ok(call.taskId, 'a task at the gateway');
      assert.equal(textOf(result as never), 'Computed crunch after 2.5 s');
      assert.ok(statuses.some((s) => /^crunch: \d+%$/.test(s)), `the upstream task's status messages as the gateway task's status: ${statuses.join(' | ')}`);
      assert.ok(outputs.some((o) => o.type === 'outlast.gateway/progress' && /^crunch: \d+%$/.test(o.data.message)), `and as its output: ${JSON.stringify(outputs)}`);

      const sent = reached(log).find((r) => r.msg.method === 'tools/call' && r.msg.params?.name === 'slow_compute')!;
      assert.deepEqual(sent.msg.params._meta['io.modelcontextprotocol/clientCapabilities'].extensions, { [TASKS_EXTENSION]: {} }, 'called declaring the Tasks extension');
      assert.equal(sent.msg.params._meta['io.modelcontextprotocol/protocolVersion'], '2026-07-28');
      const upId = upstreamTaskOf(log, 'slow_compute')!;
      assert.ok(upId, 'the upstream answered with a task, which the gateway polls');
      const polls = reached(log).filter((r) => r.msg.method === 'tasks/get' && r.msg.params.taskId === upId).map((r) => r.at);
      assert.ok(polls.length >= 3, `polled ${polls.length} times`);
      const gaps = polls.slice(1).map((t, i) => t - polls[i]!);
      assert.ok(Math.min(...gaps) >= 270, `never faster than the upstream's pollIntervalMs (300): ${gaps.join(', ')} ms`);
      assert.equal(reached(log).filter((r) => r.msg.method === 'tools/call' && r.msg.params?.name === 'slow_compute').length, 1, 'called once');
    } finally {
      await client.close();
    }
  });

  it("a cancel of the gateway's task reaches the upstream task (tasks/cancel), whose work stops", async () => {
    const busyLog = join(tempDir(), 'busy.log');
    const r = await callTool(gw.url, 'busy', { seconds: 30, log: busyLog });
    const taskId = r.result.taskId as string;
    assert.equal(r.result.resultType, 'task');
    const upId = await until('the upstream task polled', () => upstreamTaskOf(log, 'busy', (a) => a.log === busyLog), 10_000);
    const cancel = await rpc(gw.url, 'tasks/cancel', { taskId });
    assert.equal(cancel.error, undefined);
    assert.equal((await waitForTask(gw.url, taskId)).status, 'cancelled');
    await until('tasks/cancel at the upstream', () => reached(log).find((x) => x.msg.method === 'tasks/cancel' && x.msg.params.taskId === upId), 5000);
    const ended = await until('the upstream work to stop', () => readFileSync(busyLog, 'utf8').split('\n').find((l) => l.startsWith(`END ${upId} `)), 5000);
    const started = Number(/^START \S+ \d+ (\d+)$/m.exec(readFileSync(busyLog, 'utf8'))![1]);
    assert.ok(Number(ended.split(' ')[3]) - started < 15_000, 'long before its 30 s');
    const upstreamTask = await waitForTask(upstream.url, upId);
    assert.equal(upstreamTask.status, 'cancelled');
  });

  it("the upstream task's question is the gateway task's; answered late by a person, the answer reaches the upstream task, which completes with it", async () => {
    const person = lateAnswerer(gw.url, { confirm: true }, 1500); // slower than either side's --park-after-ms
    const client = person.client;
    try {
      const seen: string[] = [];
      const call = await client.start('confirm_delete', { filename: 'notes.txt' });
      call.on('task', (t) => seen.push(t.status));
      const result = await call.result();
      assert.equal(textOf(result as never), 'Deleted notes.txt');
      assert.ok(seen.includes('input_required'), `the gateway's task asked: ${seen.join(',')}`);
      assert.equal(person.asked!.message, 'Delete notes.txt?');
      assert.equal(person.asked!.requestedSchema.properties.confirm.type, 'boolean');
      const upId = upstreamTaskOf(log, 'confirm_delete')!;
      const update = reached(log).find((x) => x.msg.method === 'tasks/update' && x.msg.params.taskId === upId);
      assert.deepEqual(update?.msg.params.inputResponses, { confirm: { action: 'accept', content: { confirm: true } } }, 'the answer went upstream with tasks/update, under the upstream key');
      assert.equal((await waitForTask(upstream.url, upId)).status, 'completed');
    } finally {
      await client.close();
    }
  });

  it('a question the upstream asks before it makes a task (an MRTR round of tools/call) is the gateway task\'s too', async () => {
    const person = lateAnswerer(gw.url, { name: 'Grace' }, 800);
    try {
      const result = await person.client.callTool('test_tool_with_task', {});
      assert.equal(textOf(result as never), 'Hello, Grace! Your task is done.');
      assert.equal(person.asked!.message, 'Your name?');
      const retry = reached(log).findLast((x) => x.msg.method === 'tools/call' && x.msg.params?.name === 'test_tool_with_task');
      assert.deepEqual(retry?.msg.params.inputResponses, { name: { action: 'accept', content: { name: 'Grace' } } }, 'the answer went upstream in the retried tools/call');
    } finally {
      await person.client.close();
    }
  });

  it("an upstream task that fails fails the gateway's call with the upstream's reason", async () => {
    const client = new TaskClient({ url: gw.url, status: 'poll' });
    try {
      // It fails within the inline budget, so the call is answered inline with the failure (a JSON-RPC error, kept
      // under the call's key); a slower one would be a failed task (TaskFailedError): the same code and reason.
      const err = await client.callTool('protocol_error_job', {}).then(() => undefined, (e: unknown) => e);
      assert.ok(err instanceof RpcError, String(err));
      assert.equal(err.code, -32603);
      assert.match(err.message, /the call of "protocol_error_job" on upstream "up" failed upstream: The job could not run: its worker pool is unavailable/);
      const upId = upstreamTaskOf(log, 'protocol_error_job')!;
      assert.equal((await waitForTask(upstream.url, upId)).status, 'failed');
    } finally {
      await client.close();
    }
  });

  it('--call-timeout-ms bounds the whole call, the upstream task included: the gateway task fails saying so, and the upstream task is cancelled', async () => {
    const timed = await startServer(['--store', `sqlite:${join(tempDir(), 'gw2.db')}`, '--inline-budget-ms', '300'], {
      command: ['gateway', '--http', tapUrl, '--name', 'up', '--call-timeout-ms', '2500'],
    });
    try {
      const busyLog = join(tempDir(), 'busy.log');
      const r = await callTool(timed.url, 'busy', { seconds: 30, log: busyLog });
      const failed = await waitForTask(timed.url, r.result.taskId as string);
      assert.equal(failed.status, 'failed');
      assert.match(failed.error.message, /the call of "busy" on upstream "up" did not answer within 2500 ms \(--call-timeout-ms\); the call was cancelled upstream/);
      assert.equal(failed.error.data.reason, 'upstream_timeout');
      const upId = upstreamTaskOf(log, 'busy', (a) => a.log === busyLog)!;
      assert.ok(upId, 'it had become an upstream task');
      await until('tasks/cancel at the upstream', () => reached(log).find((x) => x.msg.method === 'tasks/cancel' && x.msg.params.taskId === upId), 5000);
      assert.equal((await waitForTask(upstream.url, upId)).status, 'cancelled');
    } finally {
      await timed.stop();
    }
  });

  it("the upstream connection's client keeps nothing of a call once it ended (TaskClient.forgetAll): a long-lived gateway does not grow per call", async () => {
    const journal = new Journal(join(tempDir(), 'journal.db'));
    const client = new TaskClient({ url: upstream.url, status: 'poll', journal });
    try {
      await client.callTool('greet', { name: 'Ada' });
      await client.callTool('slow_compute', { seconds: 0.4 });
      await client.callTool('protocol_error_job', {}).catch(() => undefined);
      assert.equal(journal.list().length, 3);
      client.forgetAll();
      assert.deepEqual(journal.list(), []);
      assert.equal(textOf(await client.callTool('greet', { name: 'again' })), 'Hello, again!', 'and it serves the next call');
    } finally {
      await client.close();
      journal.close();
    }
  });
});
