/**
 * The 2025-11-25 Tasks wire, driven by the real clients of that generation (SDK v1 `experimental.tasks`, the
 * official requester `@modelcontextprotocol/ext-tasks`) against the fixture server on SQLite.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { CallToolResultSchema, McpError } from '@modelcontextprotocol/sdk/types.js';
import { callTool, getTask, rpc, sleep, textOf, useServer, waitForTask } from './helpers.js';
import { connectV1, extTasksV1, extTasksV2, mcpError } from './generations.js';

const ALICE = 'alice-token';
const BOB = 'bob-token';
const EXT = 'io.modelcontextprotocol/tasks';
const RELATED = 'io.modelcontextprotocol/related-task';

type StreamMessage = { type: string; task?: Record<string, any>; result?: Record<string, any>; error?: McpError };

/** Runs a v1 callToolStream to its end. `stopAfter` ends it early (the task keeps running on the server). */
async function stream(client: Awaited<ReturnType<typeof connectV1>>['client'], name: string, args: Record<string, unknown>, options: Record<string, unknown> = {}, stopAfter?: (m: StreamMessage) => boolean): Promise<StreamMessage[]> {
  const out: StreamMessage[] = [];
  for await (const m of client.experimental.tasks.callToolStream({ name, arguments: args }, undefined, options as never)) {
    out.push(m as StreamMessage);
    if (stopAfter?.(m as StreamMessage)) break;
  }
  return out;
}

/** A raw 2025-11-25 request (no 2026 `_meta` envelope), for inputs no real client would send. */
async function legacyPost(url: string, body: Record<string, unknown>, token = ALICE): Promise<{ status: number; body: Record<string, any> | undefined }> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-11-25', authorization: `Bearer ${token}` },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  if (!text) return { status: res.status, body: undefined };
  const data = text.startsWith('{') ? text : text.split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5)).pop()!;
  return { status: res.status, body: JSON.parse(data) };
}

describe('2025-11-25 Tasks (SDK v1 client and ext-tasks) on SQLite', () => {
  const server = useServer(['--bearer', `${ALICE}=alice`, '--bearer', `${BOB}=bob`, '--handle-after-ms', '400', '--sweep-interval-ms', '200']);

  it('initialize advertises capabilities.tasks and tools/list shows each tool\'s taskSupport; the 2026 era shows neither', async () => {
    const { client, wire, close } = await connectV1(server.url, { token: ALICE });
    assert.deepEqual(client.getServerCapabilities()?.tasks, { list: {}, cancel: {}, requests: { tools: { call: {} } } });
    const { tools } = await client.listTools();
    const support = Object.fromEntries(tools.map((t) => [t.name, (t as { execution?: { taskSupport?: string } }).execution?.taskSupport]));
    assert.deepEqual([support.greet, support.slow_compute, support.protocol_error_job, support.sleep], ['forbidden', 'optional', 'optional', 'optional'], 'with handles on, an always tool is listed optional: a client without tasks calls it plainly');
    assert.equal(support.failing_job, 'required', 'an always tool that opts out of handles (handles: false) is listed required');
    assert.equal(support.test_simple_text, undefined, 'a plain SDK tool declares nothing');
    await close();
    await wire.assertClean();
    const discover = await rpc(server.url, 'server/discover', {}, { token: ALICE });
    assert.equal(discover.result.capabilities.tasks, undefined);
    assert.deepEqual(discover.result.capabilities.extensions?.[EXT], {});
    const modernTools = await rpc(server.url, 'tools/list', {}, { token: ALICE });
    assert.ok(modernTools.result.tools.length > 10);
    assert.ok(modernTools.result.tools.every((t: Record<string, unknown>) => t.execution === undefined));
  });

  it('callToolStream: a long call is a task, polled to completion; tasks/result answers the tool result with related-task; the 2026 wire reads the same task', async () => {
    const { client, wire, close } = await connectV1(server.url, { token: ALICE });
    const progress: unknown[] = [];
    const msgs = await stream(client, 'sleep', { seconds: 1.5 }, { onprogress: (p: unknown) => progress.push(p) });
    const created = msgs[0]!;
    assert.equal(created.type, 'taskCreated');
    assert.equal(created.task!.status, 'working');
    assert.equal(created.task!.ttl, 86_400_000);
    assert.ok(created.task!.pollInterval >= 250);
    assert.ok(msgs.filter((m) => m.type === 'taskStatus').length >= 2);
    const last = msgs[msgs.length - 1]!;
    assert.equal(last.type, 'result');
    assert.match(textOf(last.result!), /Slept 1.5 s \(attempt 1\)/);
    assert.deepEqual(last.result!._meta?.[RELATED], { taskId: created.task!.taskId });
    await close();
    await wire.assertClean();
    assert.ok(wire.seen.some((s) => s.method === 'tasks/result'));
    const modern = await getTask(server.url, created.task!.taskId, { token: ALICE });
    assert.equal(modern.result.status, 'completed');
    assert.match(textOf(modern.result.result), /Slept 1.5 s/);
  });

  it('input: the elicitation arrives on the tasks/result stream with related-task, the answer is recorded, the task completes', async () => {
    const asked: Array<Record<string, any>> = [];
    const { client, wire, close } = await connectV1(server.url, {
      token: ALICE,
      elicit: (params) => {
        asked.push(params);
        return { action: 'accept', content: { answer: 'forty-two' } };
      },
    });
    const msgs = await stream(client, 'ask', { message: 'The answer?' });
    const taskId = msgs[0]!.task!.taskId;
    assert.equal(asked.length, 1);
    assert.equal(asked[0]!.message, 'The answer?');
    assert.deepEqual(asked[0]!._meta?.[RELATED], { taskId });
    assert.ok(msgs.some((m) => m.type === 'taskStatus' && m.task!.status === 'input_required'));
    assert.match(textOf(msgs[msgs.length - 1]!.result!), /The answer is: forty-two/);
    await close();
    await wire.assertClean();
    assert.ok(wire.seen.some((s) => s.method === 'notifications/tasks/status'), 'status notifications ride the tasks/result stream');
  });

  it('a client without elicitation answers the request with -32601: the task fails and says why', async () => {
    const { client, close } = await connectV1(server.url, { token: ALICE });
    const msgs = await stream(client, 'ask', { message: 'Anyone?' });
    const taskId = msgs[0]!.task!.taskId;
    const end = msgs[msgs.length - 1]!;
    assert.equal(end.type, 'error');
    const t = await client.experimental.tasks.getTask(taskId);
    assert.equal(t.status, 'failed');
    assert.match(t.statusMessage ?? '', /could not answer input "answer"/);
    await close();
  });

  it('progress on the tasks/result stream keeps a client alive through long work after an input; without it the client times out and the task still completes', async () => {
    const answer = () => ({ action: 'accept', content: { answer: 'go' } });
    const a = await connectV1(server.url, { token: ALICE, elicit: answer });
    const progress: unknown[] = [];
    const kept = await stream(a.client, 'ask', { message: 'Go?', thenSeconds: 3 }, { timeout: 1500, resetTimeoutOnProgress: true, onprogress: (p: unknown) => progress.push(p) });
    assert.match(textOf(kept[kept.length - 1]!.result!), /The answer is: go/, JSON.stringify(kept.slice(-1)));
    assert.ok(progress.length >= 3, `progress notifications: ${progress.length}`);
    await a.close();
    await a.wire.assertClean();
    const b = await connectV1(server.url, { token: ALICE, elicit: answer });
    const lost = await stream(b.client, 'ask', { message: 'Go?', thenSeconds: 3 }, { timeout: 1500 });
    const end = lost[lost.length - 1]!;
    assert.equal(end.type, 'error');
    assert.equal(end.error!.code, -32001, 'the client gave up on tasks/result');
    const done = await waitForTask(server.url, lost[0]!.task!.taskId, undefined, { token: ALICE });
    assert.equal(done.status, 'completed');
    await b.close();
  });

  it('tasks/cancel answers with the task cancelled by its handler; cancelling a terminal task is -32602', async () => {
    const { client, wire, close } = await connectV1(server.url, { token: ALICE });
    const msgs = await stream(client, 'sleep', { seconds: 30 }, {}, (m) => m.type === 'taskCreated');
    const taskId = msgs[0]!.task!.taskId;
    const cancelled = await client.experimental.tasks.cancelTask(taskId);
    assert.equal(cancelled.status, 'cancelled');
    assert.equal(cancelled.statusMessage, 'The task was cancelled by the caller', 'the handler stopped (not ended by force)');
    assert.equal((await client.experimental.tasks.getTask(taskId)).status, 'cancelled');
    const again = await mcpError(client.experimental.tasks.cancelTask(taskId));
    assert.equal(again.code, -32602);
    assert.match(again.message, /already in terminal status 'cancelled'/);
    await close();
    await wire.assertClean();
  });

  it("tasks/list pages through the caller's tasks only; another principal sees none of them; a garbage cursor is -32602", async () => {
    const alice = await connectV1(server.url, { token: ALICE });
    const bob = await connectV1(server.url, { token: BOB });
    const bobs: string[] = [];
    for (let i = 0; i < 3; i++) bobs.push((await stream(bob.client, 'sleep', { seconds: 0 }, {}, (m) => m.type === 'taskCreated'))[0]!.task!.taskId);
    const alices: string[] = [];
    for (let i = 0; i < 52; i++) alices.push((await stream(alice.client, 'sleep', { seconds: 0 }, {}, (m) => m.type === 'taskCreated'))[0]!.task!.taskId);
    const first = await alice.client.experimental.tasks.listTasks();
    assert.equal(first.tasks.length, 50);
    assert.ok(first.nextCursor);
    const second = await alice.client.experimental.tasks.listTasks(first.nextCursor);
    const listed = [...first.tasks, ...second.tasks].map((t) => t.taskId);
    assert.equal(new Set(listed).size, listed.length, 'no task on two pages');
    for (const id of alices) assert.ok(listed.includes(id), `alice's ${id} is listed`);
    for (const id of bobs) assert.ok(!listed.includes(id), "bob's tasks never show to alice");
    const bobsList = await bob.client.experimental.tasks.listTasks();
    assert.deepEqual(bobsList.tasks.map((t) => t.taskId).sort(), [...bobs].sort());
    assert.equal(bobsList.nextCursor, undefined);
    const bad = await mcpError(alice.client.experimental.tasks.listTasks('not-a-cursor!'));
    assert.equal(bad.code, -32602);
    assert.match(bad.message, /Invalid cursor/);
    // Another principal's task reads as unknown on every method.
    for (const call of [() => bob.client.experimental.tasks.getTask(alices[0]!), () => bob.client.experimental.tasks.cancelTask(alices[0]!)]) {
      const e = await mcpError(call());
      assert.equal(e.code, -32602);
      assert.match(e.message, /Task not found/);
    }
    await alice.close();
    await bob.close();
    await alice.wire.assertClean();
  });

  it("a failed task carries its error text in statusMessage (v1 never reads tasks/result on failed); tasks/result answers the error", async () => {
    const { client, wire, close } = await connectV1(server.url, { token: ALICE });
    const msgs = await stream(client, 'protocol_error_job', {});
    const failed = msgs.filter((m) => m.type === 'taskStatus').pop()!;
    assert.equal(failed.task!.status, 'failed');
    assert.equal(failed.task!.statusMessage, 'The job could not run: its worker pool is unavailable');
    assert.equal(msgs[msgs.length - 1]!.type, 'error');
    const e = await mcpError(client.experimental.tasks.getTaskResult(failed.task!.taskId, CallToolResultSchema));
    assert.equal(e.code, -32603);
    assert.match(e.message, /worker pool is unavailable/);
    await close();
    await wire.assertClean();
  });

  it('unknown and expired ids are -32602 as on the 2026 wire; a requested shorter TTL is honoured; required and forbidden tools are -32601 on the wrong call', async () => {
    const { client, close } = await connectV1(server.url, { token: ALICE });
    const unknown = await mcpError(client.experimental.tasks.getTask('no-such-task'));
    assert.deepEqual([unknown.code, /Task not found/.test(unknown.message)], [-32602, true]);
    const short = await stream(client, 'sleep', { seconds: 0 }, { task: { ttl: 300 } }, (m) => m.type === 'taskCreated');
    assert.equal(short[0]!.task!.ttl, 300, 'the TTL asked for is the one reported');
    await sleep(900);
    const expired = await mcpError(client.experimental.tasks.getTask(short[0]!.task!.taskId));
    assert.deepEqual([expired.code, /Task has expired/.test(expired.message)], [-32602, true]);
    const forbidden = await stream(client, 'greet', { name: 'x' }, { task: {} });
    assert.equal(forbidden[0]!.type, 'error');
    assert.equal(forbidden[0]!.error!.code, -32601);
    assert.match(forbidden[0]!.error!.message, /taskSupport is "forbidden"/);
    await close();
    // A plain call to a policy-always tool that opts out of handles is refused as required (the handle path of an
    // always tool is driven by questions.test.ts: SDK v1's plain callTool completes the demo's migrate).
    const fresh = await connectV1(server.url, { token: ALICE, noToolList: true });
    await assert.rejects(fresh.client.callTool({ name: 'failing_job', arguments: {} }), (e: { code?: number; message?: string }) => e.code === -32601 && /taskSupport is "required"/.test(e.message ?? ''));
    await fresh.close();
  });

  it('bad input gets a clear error and loses nothing: a malformed params.task, responses posted for unknown or foreign inputs, malformed answers', async () => {
    const id = 1000;
    for (const task of ['soon', { ttl: -5 }, [1]]) {
      const r = await legacyPost(server.url, { jsonrpc: '2.0', id, method: 'tools/call', params: { name: 'sleep', arguments: { seconds: 0 }, task } });
      assert.equal(r.body?.error?.code, -32602, JSON.stringify(r.body));
      assert.match(r.body!.error.message, /params\.task/);
    }
    // A question asked of alice.
    const ask = await legacyPost(server.url, { jsonrpc: '2.0', id: 7, method: 'tools/call', params: { name: 'ask', arguments: { message: 'Colour?' }, task: {} } });
    const taskId = ask.body!.result.task.taskId as string;
    await waitForTask(server.url, taskId, (t) => t.status === 'input_required', { token: ALICE });
    const respond = (rid: string, result: unknown, token = ALICE) => legacyPost(server.url, { jsonrpc: '2.0', id: rid, result }, token);
    const unknown = await respond('outlast-input/no-such-task/answer', { action: 'accept', content: { answer: 'x' } });
    assert.equal(unknown.status, 400);
    assert.match(unknown.body!.error.message, /Task not found/);
    const foreign = await respond(`outlast-input/${taskId}/answer`, { action: 'accept', content: { answer: 'from bob' } }, BOB);
    assert.equal(foreign.status, 400, "bob cannot answer alice's question");
    assert.match(foreign.body!.error.message, /Task not found/);
    const malformed = await respond(`outlast-input/${taskId}/answer`, { action: 'perhaps' });
    assert.equal(malformed.status, 400);
    assert.match(malformed.body!.error.message, /"action" must be "accept", "decline" or "cancel"/);
    assert.equal((await getTask(server.url, taskId, { token: ALICE })).result.status, 'input_required', 'still waiting: nothing was lost');
    const good = await respond(`outlast-input/${taskId}/answer`, { action: 'accept', content: { answer: 'blue' } });
    assert.equal(good.status, 202);
    const done = await waitForTask(server.url, taskId, undefined, { token: ALICE });
    assert.match(textOf(done.result), /The answer is: blue/);
    // The server kept serving throughout.
    assert.match(textOf((await callTool(server.url, 'greet', { name: 'still here' }, { token: ALICE })).result), /Hello, still here!/);
  });

  it('ext-tasks on the 2025-11-25 generation: a long call, a listing and a cancel', async () => {
    const { session, wire, close } = await extTasksV1(server.url, { token: ALICE });
    const ex = await session.callTool('sleep', { seconds: 1 }, { task: { preference: 'prefer' } });
    const statuses: string[] = [];
    const { outcome } = await ex.settle({ onEvent: (e) => void (e.type === 'task' && statuses.push(e.task.status)) });
    assert.equal(outcome.status, 'completed');
    assert.match(textOf((outcome as { result: Record<string, any> }).result), /Slept 1 s/);
    assert.ok(statuses.includes('working'));
    const page = await session.listTasks();
    assert.ok(page.tasks.length > 0 && page.tasks.every((t) => typeof t.taskId === 'string'));
    const long = await session.callTool('sleep', { seconds: 30 }, { task: { preference: 'prefer' } });
    const first = await new Promise<string>((resolve) => void long.settle({ onEvent: (e) => void (e.type === 'task' && resolve(e.task.taskId)) }));
    await session.cancelTask(first as never);
    const t = await waitForTask(server.url, first, undefined, { token: ALICE });
    assert.equal(t.status, 'cancelled');
    await close();
    await wire.assertClean();
  });

  it('ext-tasks on the 2026-07-28 generation (raw dispatch): a long call and an input through tasks/update', async () => {
    const { session, wire, close } = await extTasksV2(server.url, { token: ALICE, elicit: () => ({ action: 'accept', content: { answer: 'v2' } }) });
    const ex = await session.callTool('ask', { message: 'Which?', thenSeconds: 0.5 });
    const { outcome } = await ex.settle();
    assert.equal(outcome.status, 'completed', JSON.stringify(outcome));
    assert.match(textOf((outcome as { result: Record<string, any> }).result), /The answer is: v2/);
    await close();
    await wire.assertClean();
  });
});
