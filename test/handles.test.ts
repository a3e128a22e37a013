/**
 * Clients with no task support at all (plain `callTool`, as Claude Desktop, Cursor and Codex call tools): a long
 * call is answered with a handle, and plain tools follow it. Driven by the SDK v1 client itself.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { callTool, rpc, textOf, useServer } from './helpers.js';
import { connectV1 } from './generations.js';

const ALICE = 'alice-token';
const BOB = 'bob-token';
const DEMO = 'dist/demo/server.js';

type ToolResult = { content: Array<{ type: string; text?: string }>; structuredContent?: Record<string, any>; isError?: boolean };

describe('handles for clients without task support (fixture server)', () => {
  const server = useServer(['--bearer', `${ALICE}=alice`, '--bearer', `${BOB}=bob`, '--handle-after-ms', '300']);

  it('a short call answers inline; a long one answers a handle, which the status tool follows to the tool\'s own result', async () => {
    const { client, wire, close } = await connectV1(server.url, { token: ALICE });
    const { tools } = await client.listTools();
    const status = tools.find((t) => t.name === 'outlast_task_status')!;
    assert.ok(status, 'the status tool is listed');
    assert.equal(status.annotations?.readOnlyHint, true);
    assert.match(status.description ?? '', /Do not call the original tool again/);
    assert.match(tools.find((t) => t.name === 'sleep')!.description ?? '', /continues in the background and returns a taskId/);

    const quick = (await client.callTool({ name: 'sleep', arguments: { seconds: 0.05 } })) as ToolResult;
    assert.match(textOf(quick), /^Slept 0.05 s/);
    assert.equal(quick.structuredContent, undefined);

    const started = (await client.callTool({ name: 'sleep', arguments: { seconds: 2 } })) as ToolResult;
    const handle = started.structuredContent!;
    assert.equal(handle.status, 'working');
    assert.equal(handle.tool, 'sleep');
    assert.equal(handle.statusTool, 'outlast_task_status');
    assert.match(textOf(started), new RegExp(`as task ${handle.taskId}`));
    assert.match(textOf(started), /Do not call sleep again/);

    const progress: unknown[] = [];
    const early = (await client.callTool({ name: 'outlast_task_status', arguments: { taskId: handle.taskId, waitSeconds: 0.4 } }, undefined, { onprogress: (p) => progress.push(p) })) as ToolResult;
    assert.equal(early.structuredContent!.status, 'working');
    assert.match(textOf(early), /is still working: sleep: \d+%/);
    assert.match(textOf(early), /Do not call sleep again/);
    assert.ok(progress.length >= 1, 'progress while the status call waits');

    const done = (await client.callTool({ name: 'outlast_task_status', arguments: { taskId: handle.taskId } })) as ToolResult;
    assert.match(textOf(done), /^Slept 2 s \(attempt 1\)$/, "the tool's own result, as if it had run inline");
    assert.notEqual(done.isError, true);
    await close();
    await wire.assertClean();
  });

  it("another principal's task id reads as unknown in both tools; the cancel tool stops a running task", async () => {
    const alice = await connectV1(server.url, { token: ALICE });
    const bob = await connectV1(server.url, { token: BOB });
    const started = (await alice.client.callTool({ name: 'sleep', arguments: { seconds: 30 } })) as ToolResult;
    const taskId = started.structuredContent!.taskId as string;
    for (const tool of ['outlast_task_status', 'outlast_task_cancel']) {
      const r = (await bob.client.callTool({ name: tool, arguments: { taskId, waitSeconds: 0 } })) as ToolResult;
      assert.equal(r.isError, true);
      assert.equal(textOf(r), `Unknown task: ${taskId}. It may have expired, or the id may be wrong.`);
    }
    const stillRunning = (await alice.client.callTool({ name: 'outlast_task_status', arguments: { taskId, waitSeconds: 0 } })) as ToolResult;
    assert.equal(stillRunning.structuredContent!.status, 'working', "bob's cancel did not touch alice's task");
    const cancelled = (await alice.client.callTool({ name: 'outlast_task_cancel', arguments: { taskId } })) as ToolResult;
    assert.equal(textOf(cancelled), `Task ${taskId} (sleep) is cancelled.`);
    const after = (await alice.client.callTool({ name: 'outlast_task_status', arguments: { taskId } })) as ToolResult;
    assert.equal(after.isError, true);
    assert.match(textOf(after), /was cancelled before it finished/);
    await alice.close();
    await bob.close();
  });

  it('a repeated call with the same idempotency key follows the same task (a retry never starts the work twice)', async () => {
    const { client, close } = await connectV1(server.url, { token: ALICE });
    const call = () => client.callTool({ name: 'sleep', arguments: { seconds: 1.5 }, _meta: { 'outlast/idempotencyKey': 'nightly-1' } }) as Promise<ToolResult>;
    const first = await call();
    const second = await call();
    assert.equal(second.structuredContent!.taskId, first.structuredContent!.taskId);
    const done = (await client.callTool({ name: 'outlast_task_status', arguments: { taskId: first.structuredContent!.taskId } })) as ToolResult;
    assert.match(textOf(done), /Slept 1.5 s/);
    const third = await call();
    assert.match(textOf(third), /^Slept 1.5 s \(attempt 1\)$/, 'once done, the same key answers the result of the one run');
    await assert.rejects(client.callTool({ name: 'sleep', arguments: { seconds: 1 }, _meta: { 'outlast/idempotencyKey': 'nightly-1' } }), (e: { code?: number; message: string }) => {
      assert.equal(e.code, -32602);
      assert.match(e.message, /already used for this tool with different arguments/);
      return true;
    });
    await close();
  });

  it('a 2026-07-28 request without the extension gets a handle; with it, a task (never a handle)', async () => {
    // 3 s against the 1 s inline budget: a 1 s sleep raced the budget's timer, and a loaded CI run answered it inline.
    const plain = await callTool(server.url, 'sleep', { seconds: 3 }, { token: ALICE, caps: {} });
    assert.equal(plain.result.resultType, 'complete');
    assert.equal(plain.result.structuredContent.status, 'working');
    const declared = await callTool(server.url, 'sleep', { seconds: 3 }, { token: ALICE });
    assert.equal(declared.result.resultType, 'task');
    assert.equal(declared.result.structuredContent, undefined);
    const followed = await callTool(server.url, 'outlast_task_status', { taskId: plain.result.structuredContent.taskId }, { token: ALICE, caps: {} });
    assert.match(textOf(followed.result), /^Slept 3 s/);
    // A tool that asks a handle caller that declared elicitation: the question comes back as MRTR input_required.
    const ask = await callTool(server.url, 'ask', { message: 'Hello?' }, { token: ALICE, caps: { elicitation: {} } });
    assert.equal(ask.result?.resultType, 'input_required', JSON.stringify(ask).slice(0, 300));
    assert.equal(Object.values(ask.result.inputRequests as Record<string, { params: { message: string } }>)[0]!.params.message, 'Hello?');
    assert.match(ask.result.requestState, /^outlast-handle\./);
    const discover = await rpc(server.url, 'tools/list', {}, { token: ALICE, caps: {} });
    assert.ok(discover.result.tools.some((t: { name: string }) => t.name === 'outlast_task_cancel'));
  });
});

describe('handles on the demo server (on by default)', () => {
  const demo = useServer(['--handle-after-ms', '500'], { module: DEMO });

  it('a large reindex from a plain client answers a handle and completes through the status tool', async () => {
    const { client, close } = await connectV1(demo.url);
    const started = (await client.callTool({ name: 'reindex', arguments: { collection: 'docs', documents: 20_000 } })) as ToolResult;
    const taskId = started.structuredContent!.taskId as string;
    assert.ok(taskId);
    let last: ToolResult | undefined;
    for (let i = 0; i < 10; i++) {
      last = (await client.callTool({ name: 'outlast_task_status', arguments: { taskId } })) as ToolResult;
      if (!last.structuredContent) break;
    }
    assert.match(textOf(last!), /Reindexed 20,000 documents in "docs"/);
    await close();
  });
});
