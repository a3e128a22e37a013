/**
 * Task output on one SQLite server (a real `outlast serve` process): what a tool emits with ctx.output is streamed by
 * `tasks/stream` in order with no gap and ends with the task; a dropped client resumes after its last seq; a cursor
 * older than what is kept gets events_gone; another caller reads nothing; bad cursors and oversized items get clear
 * errors; tasks/get says output exists; a host without task support reads new output on each status call.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { callTool, getTask, textOf, useServer, waitForTask } from './helpers.js';
import { expected, lines, openTaskStream } from './output-helpers.js';

const ALICE = { token: 'alice-token' };
const BOB = { token: 'bob-token' };
const FLAGS = ['--inline-budget-ms', '200', '--handle-after-ms', '300', '--bearer', 'alice-token=alice', '--bearer', 'bob-token=bob'];

async function startEmitting(url: string, args: Record<string, unknown>, tool = 'emit_output'): Promise<string> {
  const c = await callTool(url, tool, args, ALICE);
  assert.equal(c.result.resultType, 'task', `the call outlasts the inline budget: ${JSON.stringify(c.message).slice(0, 300)}`);
  return c.result.taskId as string;
}

describe('task output on SQLite', () => {
  const server = useServer(FLAGS);

  it('output is streamed in order with no gap while it is written, and the stream ends with the task; tasks/get carries the latest seq', async () => {
    const taskId = await startEmitting(server.url, { count: 20, intervalMs: 50 });
    const s = await openTaskStream(server.url, taskId, undefined, ALICE);
    assert.equal(s.status, 200);
    await s.ended();
    assert.deepEqual(s.events.map((e) => e.seq), Array.from({ length: 20 }, (_, i) => i + 1));
    assert.deepEqual(lines(s.events), expected(1, 20));
    for (const e of s.events) {
      assert.equal(e.taskId, taskId);
      assert.equal(e.type, 'text');
    }
    const { _meta, ...end } = s.final?.result ?? {};
    assert.deepEqual(end, { resultType: 'complete', taskId, status: 'completed', latestSeq: 20 });
    assert.equal(_meta['io.modelcontextprotocol/subscriptionId'], s.id);
    for (const e of s.events as Array<{ _meta?: Record<string, unknown> }>) assert.equal(e._meta?.['io.modelcontextprotocol/subscriptionId'], s.id);
    const got = await getTask(server.url, taskId, ALICE);
    assert.equal(got.result._meta['outlast/outputSeq'], 20, 'a poller sees that output exists');
    assert.equal(textOf(got.result.result), 'emitted 20');
  });

  it('a replay longer than a page (the stream waits for the client between pages) arrives whole, in order, and ends', async () => {
    const taskId = await startEmitting(server.url, { count: 2500, intervalMs: 1 });
    await waitForTask(server.url, taskId, (t) => t.status === 'completed', { ...ALICE, timeoutMs: 60_000 });
    const s = await openTaskStream(server.url, taskId, 0, ALICE);
    await s.ended(30_000);
    assert.deepEqual(s.events.map((e) => e.seq), Array.from({ length: 2500 }, (_, i) => i + 1));
    assert.deepEqual(lines(s.events), expected(1, 2500));
    assert.equal(s.final?.result?.latestSeq, 2500);
  });

  it('a client that drops mid-stream resumes after its last seq and gets the rest, each once', async () => {
    const taskId = await startEmitting(server.url, { count: 30, intervalMs: 60 });
    const first = await openTaskStream(server.url, taskId, 0, ALICE);
    await first.untilEvents(8);
    first.close();
    await first.ended();
    const last = first.events.at(-1)!.seq;
    assert.ok(last >= 8 && last < 30, `dropped mid-stream, at ${last}`);
    const second = await openTaskStream(server.url, taskId, last, ALICE);
    await second.ended();
    const all = [...first.events, ...second.events];
    assert.deepEqual(all.map((e) => e.seq), Array.from({ length: 30 }, (_, i) => i + 1), 'every seq once, in order');
    assert.deepEqual(lines(all), expected(1, 30));
    assert.equal(second.final?.result?.status, 'completed');
  });

  it('another caller can neither stream nor read the output: the task reads as unknown', async () => {
    const taskId = await startEmitting(server.url, { count: 5, intervalMs: 80 });
    const bob = await openTaskStream(server.url, taskId, 0, BOB);
    await bob.ended();
    assert.equal(bob.events.length, 0);
    const unknown = await openTaskStream(server.url, 'no-such-task', 0, ALICE);
    await unknown.ended();
    assert.equal(bob.final?.error?.code, -32602);
    assert.equal(bob.final?.error?.message, unknown.final?.error?.message, 'exactly what an unknown id gets');
    const status = await callTool(server.url, 'outlast_task_status', { taskId, waitSeconds: 0 }, { ...BOB, caps: {} });
    assert.match(textOf(status.result), /^Unknown task/);
    assert.equal(status.result.structuredContent?.output, undefined);
    const own = await openTaskStream(server.url, taskId, 0, ALICE);
    await own.ended();
    assert.deepEqual(lines(own.events), expected(1, 5));
  });

  it('bad cursors and oversized items get clear errors, and nothing written is lost', async () => {
    const taskId = await startEmitting(server.url, { count: 6, intervalMs: 50 });
    for (const after of [-1, 1.5, '3', {}]) {
      const r = await openTaskStream(server.url, taskId, after, ALICE);
      await r.ended();
      assert.equal(r.events.length, 0);
      assert.equal(r.final?.error?.code, -32602, `after ${JSON.stringify(after)}`);
      assert.match(r.final?.error?.message, /^after must be an integer >= 0/);
    }
    const whole = await openTaskStream(server.url, taskId, 0, ALICE);
    await whole.ended();
    assert.deepEqual(lines(whole.events), expected(1, 6), 'the refused streams took nothing away');

    // One item over 64 KiB: the handler's ctx.output throws, saying so; the task fails with that message.
    const big = await callTool(server.url, 'emit_output', { count: 2, intervalMs: 300, bytes: 70_000 }, ALICE);
    const said = JSON.stringify(big.message);
    assert.match(said, /one item is \d+ bytes of JSON; the limit is 65536/);
  });

  it('a host without task support reads new output on each status call, each item once', async () => {
    const c = await callTool(server.url, 'emit_output', { count: 40, intervalMs: 100 }, { ...ALICE, caps: {} });
    const taskId = c.result.structuredContent?.taskId as string;
    assert.ok(taskId, `a handle: ${JSON.stringify(c.result).slice(0, 300)}`);
    let after: number | undefined;
    const seen: string[] = [];
    let newOnCalls = 0;
    for (let call = 0; call < 40; call++) {
      const args = { taskId, waitSeconds: 1, ...(after !== undefined ? { outputAfter: after } : {}) };
      const r = await callTool(server.url, 'outlast_task_status', args, { ...ALICE, caps: {} });
      const sc = r.result.structuredContent;
      const items = (sc?.output?.items ?? []) as Array<{ seq: number; data: { text: string } }>;
      if (items.length > 0) newOnCalls++;
      seen.push(...items.map((i) => i.data.text));
      const text = textOf(r.result);
      if (items.length > 0) assert.match(r.result.content.at(-1).text, new RegExp(`line ${items.at(-1)!.seq}$`), 'the tail is in the text the model reads');
      if (sc?.taskId === undefined) {
        // Finished: the tool's own result (and any output not yet read).
        assert.match(r.result.content[0].text, /^emitted 40$/);
        const tail = r.result.content.slice(1).map((b: { text: string }) => b.text).join('\n');
        for (const l of tail.split('\n').slice(1)) seen.push(l);
        break;
      }
      assert.equal(sc.nextCall.arguments.outputAfter, sc.outputAfter, 'the next call passes the cursor back');
      assert.ok(text.length > 0);
      after = sc.outputAfter;
    }
    assert.deepEqual(seen, expected(1, 40), 'all output, in order, none twice');
    assert.ok(newOnCalls >= 2, `new output on several calls (${newOnCalls})`);
  });
});

describe('task output past the per-task bound', () => {
  const server = useServer([...FLAGS, '--max-output-per-task', '5']);

  it('the oldest are dropped: an older cursor gets events_gone with the earliest retained seq; the rest is intact', async () => {
    const taskId = await startEmitting(server.url, { count: 12, intervalMs: 60 });
    const done = await waitForTask(server.url, taskId, (t) => t.status === 'completed', { ...ALICE });
    assert.equal(textOf(done.result), 'emitted 12', 'the flood past the bound does not fail the task');
    const old = await openTaskStream(server.url, taskId, 0, ALICE);
    await old.ended();
    assert.equal(old.events.length, 0);
    assert.equal(old.final?.error?.code, -32602);
    assert.match(old.final?.error?.message, /^events_gone: /);
    assert.deepEqual(old.final?.error?.data, { reason: 'events_gone', earliestSeq: 8, latestSeq: 12 });
    const fromKept = await openTaskStream(server.url, taskId, 7, ALICE);
    await fromKept.ended();
    assert.deepEqual(fromKept.events.map((e) => e.seq), [8, 9, 10, 11, 12]);
    assert.deepEqual(lines(fromKept.events), expected(8, 12));
  });
});
