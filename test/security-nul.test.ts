/**
 * PostgreSQL cannot store U+0000 in text or JSON. A caller that sends one (in arguments, an idempotency key, an answer
 * or a task id) gets a clear -32602 naming it, or exactly the unknown-id answer, never "retry" nor the database's own
 * words; and callers whose creations share its group commit are not affected. Real `outlast serve` on PostgreSQL.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { callTool, getTask, pgStoreUrl, rpc, TASKS_CAPS, useServer, waitForTask } from './helpers.js';
import { connectV1 } from './generations.js';

const TOKEN = 'nul-caller-token';
const key = (k: string) => ({ 'outlast/idempotencyKey': k });

describe('U+0000 from a caller, on PostgreSQL', () => {
  const server = useServer(['--store', pgStoreUrl(), '--bearer', `${TOKEN}=carol`]);

  it('in arguments or an idempotency key: -32602 naming the character, nothing stored; a call committed beside it is stored', async () => {
    const [bad, good, badKey] = await Promise.all([
      callTool(server.url, 'ask', { message: 'approve a\u0000b?' }, { token: TOKEN, meta: key('nul-args') }),
      callTool(server.url, 'sleep', { seconds: 2 }, { token: TOKEN, meta: key('fine-beside-it') }),
      callTool(server.url, 'sleep', { seconds: 2 }, { token: TOKEN, meta: key('k\u0000') }),
    ]);
    for (const [what, r] of [['arguments', bad], ['idempotency key', badKey]] as const) {
      assert.equal(r.error?.code, -32602, `${what}: ${JSON.stringify(r.message)}`);
      assert.match(r.error!.message, /nothing was started: .*U\+0000/, what);
      assert.doesNotMatch(r.error!.message, /retry|unsupported Unicode|invalid byte sequence|UTF8/i, `${what}: no retry advice, no database words`);
    }
    assert.equal(good.result.resultType, 'task', JSON.stringify(good.message));
    assert.equal((await waitForTask(server.url, good.result.taskId, undefined, { token: TOKEN })).status, 'completed');
    // The same key, now without the character, is free: nothing was stored under the refused call.
    const again = await callTool(server.url, 'sleep', { seconds: 2 }, { token: TOKEN, meta: key('nul-args') });
    assert.equal(again.result.resultType, 'task', JSON.stringify(again.message));
  });

  it('in an answer: -32602, the task still waits, and an answer without it completes the task', async () => {
    const created = await callTool(server.url, 'ask', { message: 'ship it?' }, { token: TOKEN, caps: TASKS_CAPS });
    assert.equal(created.result.resultType, 'task');
    const taskId = created.result.taskId as string;
    const waiting = await waitForTask(server.url, taskId, (t) => t.status === 'input_required', { token: TOKEN });
    const [inputKey] = Object.keys(waiting.inputRequests);
    const refused = await rpc(server.url, 'tasks/update', { taskId, inputResponses: { [inputKey!]: { action: 'accept', content: { answer: 'y\u0000es' } } } }, { token: TOKEN });
    assert.equal(refused.error?.code, -32602, JSON.stringify(refused.message));
    assert.match(refused.error!.message, /the task still waits: .*U\+0000/);
    assert.doesNotMatch(refused.error!.message, /unsupported Unicode|invalid byte sequence/);
    assert.equal((await getTask(server.url, taskId, { token: TOKEN })).result.status, 'input_required');
    const ok = await rpc(server.url, 'tasks/update', { taskId, inputResponses: { [inputKey!]: { action: 'accept', content: { answer: 'yes' } } } }, { token: TOKEN });
    assert.equal(ok.error, undefined, JSON.stringify(ok.message));
    const done = await waitForTask(server.url, taskId, undefined, { token: TOKEN });
    assert.equal(done.status, 'completed');
  });

  it('in a task id (2025-11-25, SDK v1): read exactly as an unknown id', async () => {
    const v1 = await connectV1(server.url, { token: TOKEN });
    try {
      const failure = async (id: string) => {
        try {
          await v1.client.experimental.tasks.getTask(id);
        } catch (e) {
          return { code: (e as { code?: number }).code, message: (e as Error).message.replaceAll(id, 'ID') };
        }
        assert.fail('a task was read');
      };
      assert.deepEqual(await failure('AAAAAAAAAAAAAAAAAAA\u0000AA'), await failure('AAAAAAAAAAAAAAAAAAAAAA'));
    } finally {
      await v1.close();
    }
  });
});
