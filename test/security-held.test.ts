/**
 * What the security review found holding, kept holding: another principal's task id reads exactly like an id that
 * does not exist — the same status, the same bytes (the id aside) and the same time within noise — on every method
 * of both wires, in listen and in the handle tools. Sent as an attacker would: raw HTTP for the 2026-07-28 wire, the
 * SDK v1 client for the 2025-11-25 one and the handle tools.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { describe, it } from 'node:test';
import { callTool, headersFor, metaFor, TASKS_CAPS, textOf, useServer } from './helpers.js';
import { connectV1 } from './generations.js';

const ALICE = 'held-alice-token';
const BOB = 'held-bob-token';

/** The raw answer to one 2026-07-28 request: status, content type and body text (as an attacker reads it). */
async function raw(url: string, method: string, params: Record<string, unknown>, token: string, id: number): Promise<{ status: number; type: string; body: string; ms: number }> {
  const started = performance.now();
  const res = await fetch(url, {
    method: 'POST',
    headers: headersFor(method, params, { token }),
    body: JSON.stringify({ jsonrpc: '2.0', id, method, params: { ...params, _meta: metaFor(TASKS_CAPS) } }),
  });
  // A listen stream that were opened would not end: read only its first event.
  const reader = res.body!.getReader();
  let body = '';
  const decoder = new TextDecoder();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    body += decoder.decode(value, { stream: true });
    if (method === 'subscriptions/listen' && body.includes('\n\n')) break;
  }
  await reader.cancel().catch(() => undefined);
  return { status: res.status, type: res.headers.get('content-type') ?? '', body, ms: performance.now() - started };
}

/** An id of the same shape and length as a real one, that no task has. */
function unknownLike(taskId: string): string {
  return randomBytes(taskId.length).toString('base64url').slice(0, taskId.length);
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

describe('held: another principal\'s task reads exactly like an unknown id', () => {
  const server = useServer(['--bearer', `${ALICE}=alice`, '--bearer', `${BOB}=bob`, '--handle-after-ms', '300']);

  it('2026-07-28: tasks/get, tasks/update, tasks/cancel and subscriptions/listen give the same status and the same bytes (the id aside)', async () => {
    const created = await callTool(server.url, 'sleep', { seconds: 30 }, { token: ALICE });
    assert.equal(created.result.resultType, 'task');
    const taskId = created.result.taskId as string;
    const other = unknownLike(taskId);
    const cases: Array<[string, (id: string) => Record<string, unknown>]> = [
      ['tasks/get', (id) => ({ taskId: id })],
      ['tasks/update', (id) => ({ taskId: id, inputResponses: { k: { action: 'accept', content: {} } } })],
      ['tasks/cancel', (id) => ({ taskId: id })],
      ['subscriptions/listen', (id) => ({ notifications: { tasks: { taskIds: [id] } } })],
    ];
    for (const [method, params] of cases) {
      const theirs = await raw(server.url, method, params(taskId), BOB, 7);
      const unknown = await raw(server.url, method, params(other), BOB, 7);
      assert.equal(theirs.status, unknown.status, `${method}: status`);
      assert.equal(theirs.type, unknown.type, `${method}: content type`);
      assert.equal(theirs.body.length, unknown.body.length, `${method}: body size`);
      assert.equal(theirs.body.replaceAll(taskId, 'ID'), unknown.body.replaceAll(other, 'ID'), `${method}: the same body`);
      assert.ok(!theirs.body.includes('alice') && !theirs.body.includes('sleep'), `${method}: nothing of the task shows`);
    }
    const mine = await raw(server.url, 'tasks/get', { taskId }, ALICE, 8);
    assert.match(mine.body, /"status":"working"/, "alice's task was touched by none of it");
  });

  it('2026-07-28: tasks/get of another principal\'s id takes the time an unknown id takes (medians of alternating requests)', async () => {
    const created = await callTool(server.url, 'sleep', { seconds: 30 }, { token: ALICE });
    const taskId = created.result.taskId as string;
    const theirs: number[] = [];
    const unknown: number[] = [];
    for (let i = 0; i < 60; i++) {
      // Alternating, so a load spike on this shared machine falls on both sides alike.
      const first = i % 2 === 0;
      const a = await raw(server.url, 'tasks/get', { taskId: first ? taskId : unknownLike(taskId) }, BOB, i);
      const b = await raw(server.url, 'tasks/get', { taskId: first ? unknownLike(taskId) : taskId }, BOB, i);
      (first ? theirs : unknown).push(a.ms);
      (first ? unknown : theirs).push(b.ms);
    }
    const [t, u] = [median(theirs), median(unknown)];
    // Within noise: the same store read answers both (a found row of another principal is refused like a miss).
    assert.ok(Math.abs(t - u) < Math.max(1, 0.5 * Math.min(t, u)), `medians ${t.toFixed(2)} ms (another's) and ${u.toFixed(2)} ms (unknown)`);
  });

  it('2025-11-25 (SDK v1): tasks/get, tasks/result and tasks/cancel of another principal\'s id fail as an unknown id does; tasks/list shows none of it', async () => {
    const alice = await connectV1(server.url, { token: ALICE });
    const bob = await connectV1(server.url, { token: BOB });
    try {
      let taskId: string | undefined;
      for await (const m of alice.client.experimental.tasks.callToolStream({ name: 'sleep', arguments: { seconds: 30 } })) {
        if (m.type === 'taskCreated') {
          taskId = m.task.taskId;
          break;
        }
      }
      assert.ok(taskId, 'alice has a task');
      const other = unknownLike(taskId);
      const failure = async (p: Promise<unknown>, id: string) => {
        try {
          await p;
        } catch (e) {
          const err = e as { code?: number; message: string };
          return { code: err.code, message: err.message.replaceAll(id, 'ID') };
        }
        assert.fail('bob read a task');
      };
      const tasks = bob.client.experimental.tasks;
      for (const [what, call] of [
        ['tasks/get', (id: string) => tasks.getTask(id)],
        ['tasks/result', (id: string) => tasks.getTaskResult(id, undefined as never)],
        ['tasks/cancel', (id: string) => tasks.cancelTask(id)],
      ] as const) {
        assert.deepEqual(await failure(call(taskId), taskId), await failure(call(other), other), what);
      }
      const listed = await tasks.listTasks();
      assert.ok(!listed.tasks.some((t) => t.taskId === taskId), "alice's task is not in bob's list");
      assert.equal((await alice.client.experimental.tasks.getTask(taskId)).status, 'working');
    } finally {
      await alice.close();
      await bob.close();
    }
  });

  it('handle tools (SDK v1 plain callTool): status and cancel of another principal\'s id answer the unknown-id text', async () => {
    const alice = await connectV1(server.url, { token: ALICE });
    const bob = await connectV1(server.url, { token: BOB });
    try {
      const started = (await alice.client.callTool({ name: 'sleep', arguments: { seconds: 30 } })) as { structuredContent?: Record<string, any> };
      const taskId = started.structuredContent!.taskId as string;
      const other = unknownLike(taskId);
      for (const tool of ['outlast_task_status', 'outlast_task_cancel']) {
        const theirs = (await bob.client.callTool({ name: tool, arguments: { taskId, waitSeconds: 0 } })) as Record<string, any>;
        const unknown = (await bob.client.callTool({ name: tool, arguments: { taskId: other, waitSeconds: 0 } })) as Record<string, any>;
        assert.equal(theirs.isError, unknown.isError, tool);
        assert.equal(textOf(theirs).replaceAll(taskId, 'ID'), textOf(unknown).replaceAll(other, 'ID'), tool);
        assert.deepEqual(theirs.structuredContent, unknown.structuredContent, tool);
      }
    } finally {
      await alice.close();
      await bob.close();
    }
  });
});
