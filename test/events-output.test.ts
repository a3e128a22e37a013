/**
 * Task Event Sources with real `outlast serve` processes: with Events on both sides a task's creation result names its
 * output event (`outlast.task.output`, input {taskId}, initialCursor "0"), never without; the task's output arrives
 * through events/stream (in order, no gap, then `terminated` at the terminal status) and events/poll (cursor = seq,
 * pages, the end as an error), bound to the task's principal. On PostgreSQL, output written on replica A is streamed
 * by an events client of replica B.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { TASKS_CAPS, callTool, freshSchema, headersFor, metaFor, parseSse, pgStoreUrl, rpc, startServer, tempDir, type ServerProcess } from './helpers.js';
import { join } from 'node:path';

const EVENTS_CAPS: Record<string, unknown> = { ...TASKS_CAPS, extensions: { ...TASKS_CAPS.extensions, 'io.modelcontextprotocol/events': {} } };
const ALICE = { token: 'ta', caps: EVENTS_CAPS };
const BOB = { token: 'tb', caps: EVENTS_CAPS };
const FLAGS = ['--events', '--inline-budget-ms', '200', '--bearer', 'ta=alice', '--bearer', 'tb=bob'];

const lines = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => `line ${from + i}`);

/** Reads an events/stream to its end (the server closes it after `terminated`); every message, in order. */
async function streamAll(url: string, params: Record<string, unknown>, opts: { token: string }, timeoutMs = 30_000): Promise<Array<Record<string, any>>> {
  const full = { ...params, _meta: metaFor(EVENTS_CAPS) };
  const res = await fetch(url, { method: 'POST', headers: headersFor('events/stream', full, opts), body: JSON.stringify({ jsonrpc: '2.0', id: 'es-1', method: 'events/stream', params: full }), signal: AbortSignal.timeout(timeoutMs) });
  assert.equal(res.status, 200);
  return parseSse(await res.text()) as Array<Record<string, any>>;
}

async function start(url: string, args: Record<string, unknown>, opts = ALICE) {
  const c = await callTool(url, 'emit_output', args, opts);
  assert.equal(c.result.resultType, 'task', JSON.stringify(c.message).slice(0, 300));
  return c.result;
}

describe('Task Event Sources on SQLite', () => {
  let server: ServerProcess;
  let plain: ServerProcess;
  before(async () => {
    [server, plain] = await Promise.all([
      startServer(['--store', `sqlite:${join(tempDir(), 'tasks.db')}`, ...FLAGS]),
      startServer(['--store', `sqlite:${join(tempDir(), 'plain.db')}`, ...FLAGS.slice(1)]),
    ]);
  });
  after(async () => {
    await server.stop('SIGTERM');
    await plain.stop('SIGTERM');
  });

  it('the creation result names the output event only when both sides declare Events; events/list describes it', async () => {
    const task = await start(server.url, { count: 3, intervalMs: 100 });
    assert.deepEqual(task.eventSource, { name: 'outlast.task.output', input: { taskId: task.taskId }, initialCursor: '0' });
    const noCaps = await start(server.url, { count: 3, intervalMs: 100 }, { token: 'ta', caps: TASKS_CAPS });
    assert.equal(noCaps.eventSource, undefined, 'a client that did not declare Events gets no eventSource');
    const off = await start(plain.url, { count: 3, intervalMs: 100 });
    assert.equal(off.eventSource, undefined, 'a server without --events names none');
    const list = await rpc(server.url, 'events/list', {}, ALICE);
    const d = list.result.events.find((e: { name: string }) => e.name === 'outlast.task.output');
    assert.deepEqual(d.inputSchema.required, ['taskId']);
    assert.deepEqual(d.delivery, ['poll', 'push', 'webhook']);
  });

  it('events/stream from the initial cursor delivers every item in order, then terminated at the terminal status', async () => {
    const task = await start(server.url, { count: 25, intervalMs: 40 });
    const msgs = await streamAll(server.url, { name: task.eventSource.name, arguments: task.eventSource.input, cursor: task.eventSource.initialCursor }, ALICE);
    assert.equal(msgs[0]!.method, 'notifications/events/active');
    const events = msgs.filter((m) => m.method === 'notifications/events/event').map((m) => m.params);
    assert.deepEqual(events.map((e) => e.data.seq), Array.from({ length: 25 }, (_, i) => i + 1));
    assert.deepEqual(events.map((e) => e.data.data.text), lines(1, 25));
    assert.deepEqual(events.map((e) => e.cursor), events.map((e) => String(e.data.seq)));
    assert.equal(new Set(events.map((e) => e.eventId)).size, 25, 'an eventId per item');
    for (const e of events) assert.equal(e._meta['io.modelcontextprotocol/subscriptionId'], 'es-1');
    const last = msgs.at(-1)!;
    assert.equal(last.method, 'notifications/events/terminated');
    assert.equal(last.params.error.data.reason, 'task_terminal');
    assert.equal(last.params.error.data.status, 'completed');
    assert.equal(last.params.error.data.latestSeq, 25);
    // Resuming from a cursor replays only what follows it; the task is done, so the stream ends at once.
    const rest = await streamAll(server.url, { name: 'outlast.task.output', arguments: { taskId: task.taskId }, cursor: '20' }, ALICE);
    assert.deepEqual(rest.filter((m) => m.method === 'notifications/events/event').map((m) => m.params.data.seq), [21, 22, 23, 24, 25]);
  });

  it('events/stream replays more than a page (waiting for the client between pages) whole and in order', async () => {
    const task = await start(server.url, { count: 2500, intervalMs: 1 });
    const deadline = Date.now() + 60_000;
    while ((await rpc(server.url, 'tasks/get', { taskId: task.taskId }, ALICE)).result?.status === 'working' && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));
    const msgs = await streamAll(server.url, { name: 'outlast.task.output', arguments: { taskId: task.taskId }, cursor: '0' }, ALICE);
    const events = msgs.filter((m) => m.method === 'notifications/events/event').map((m) => m.params);
    assert.deepEqual(events.map((e) => e.data.seq), Array.from({ length: 2500 }, (_, i) => i + 1));
    assert.equal(msgs.at(-1)!.params.error.data.latestSeq, 2500);
  });

  it('events/poll pages with the cursor, then answers the end; another principal and bad arguments are refused', async () => {
    const task = await start(server.url, { count: 12, intervalMs: 20 });
    const got: number[] = [];
    let cursor: string | null = '0';
    let ended: { code: number; data?: any } | undefined;
    for (let i = 0; i < 50 && !ended; i++) {
      const r = await rpc(server.url, 'events/poll', { name: 'outlast.task.output', arguments: { taskId: task.taskId }, cursor, maxEvents: 5, timeoutMs: 2000 }, ALICE);
      if (r.error) ended = r.error;
      else {
        got.push(...r.result.events.map((e: any) => e.data.seq));
        assert.ok(r.result.events.length <= 5);
        cursor = r.result.cursor;
      }
    }
    assert.deepEqual(got, Array.from({ length: 12 }, (_, i) => i + 1), 'each item once, in order');
    assert.equal(ended?.code, -32011);
    assert.equal(ended?.data.reason, 'task_terminal');
    const foreign = await rpc(server.url, 'events/poll', { name: 'outlast.task.output', arguments: { taskId: task.taskId }, cursor: '0' }, BOB);
    assert.equal(foreign.error?.code, -32602);
    assert.match(foreign.error!.message, /Unknown task/);
    const foreignStream = await rpc(server.url, 'events/stream', { name: 'outlast.task.output', arguments: { taskId: task.taskId }, cursor: '0' }, BOB);
    assert.equal(foreignStream.error?.code, -32602, 'nothing of another principal is streamed');
    const noTask = await rpc(server.url, 'events/poll', { name: 'outlast.task.output', arguments: {}, cursor: '0' }, ALICE);
    assert.match(noTask.error!.message, /needs a taskId/);
    const badCursor = await rpc(server.url, 'events/poll', { name: 'outlast.task.output', arguments: { taskId: task.taskId }, cursor: '-1' }, ALICE);
    assert.equal(badCursor.error?.code, -32602);
    const hook = await rpc(server.url, 'events/subscribe', { name: 'outlast.task.output', arguments: { taskId: task.taskId }, delivery: { mode: 'webhook', url: 'https://hooks.example/x', secret: 'whsec_' + Buffer.alloc(32, 1).toString('base64') } }, ALICE);
    assert.equal(hook.error?.code, -32015, 'a webhook for output goes through the challenge (an endpoint that fails it stores nothing)');
    const sse = await rpc(server.url, 'events/subscribe', { name: 'outlast.task.output', arguments: { taskId: task.taskId }, delivery: { mode: 'sse', url: 'https://hooks.example/x' } }, ALICE);
    assert.equal(sse.error?.code, -32014, 'a delivery mode events/subscribe does not serve is refused, not silently dropped');
  });

  it('a cursor of null follows from now: a poll on a running task gets only what comes after', async () => {
    const task = await start(server.url, { count: 30, intervalMs: 60 });
    const first = await rpc(server.url, 'events/poll', { name: 'outlast.task.output', arguments: { taskId: task.taskId }, cursor: null }, ALICE);
    const from = Number(first.result.cursor);
    assert.deepEqual(first.result.events, []);
    const next = await rpc(server.url, 'events/poll', { name: 'outlast.task.output', arguments: { taskId: task.taskId }, cursor: first.result.cursor, timeoutMs: 5000 }, ALICE);
    assert.ok(next.result.events.length >= 1);
    assert.equal(next.result.events[0].data.seq, from + 1);
  });
});

describe('Task Event Sources on PostgreSQL, two replicas', () => {
  const servers: ServerProcess[] = [];
  before(async () => {
    const args = ['--store', pgStoreUrl(freshSchema('eo')), ...FLAGS];
    servers.push(await startServer(args));
    servers.push(await startServer(args));
  });
  after(async () => {
    for (const s of servers) await s.stop('SIGTERM');
  });

  it('output written on replica A is streamed live, in order, by an events client of replica B', async () => {
    const task = await start(servers[0]!.url, { count: 40, intervalMs: 30 });
    const msgs = await streamAll(servers[1]!.url, { name: 'outlast.task.output', arguments: task.eventSource.input, cursor: task.eventSource.initialCursor }, ALICE);
    const events = msgs.filter((m) => m.method === 'notifications/events/event').map((m) => m.params);
    assert.deepEqual(events.map((e) => e.data.data.text), lines(1, 40));
    assert.equal(msgs.at(-1)!.method, 'notifications/events/terminated');
  });
});
