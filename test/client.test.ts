/**
 * TaskClient against real `outlast serve` processes (fixture server), through a real loopback proxy that
 * counts requests server-side, drops responses and cuts listen streams.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { Journal, TaskClient, TaskFailedError, TaskGoneError, type StatusNote } from '../src/client/index.js';
import { startServer, tempDir, textOf, sleep, useServer, type ServerProcess } from './helpers.js';
import { serverTaskCount, startProxy } from './client-helpers.js';

const EXT = 'io.modelcontextprotocol/tasks';

describe('TaskClient', () => {
  const server = useServer(['--poll-interval-ms', '300']);
  const db = () => server.sqlitePath!;

  test('callTool returns the final CallToolResult whichever shape the server chose; a failed task throws its JSON-RPC error', async () => {
    const proxy = await startProxy(server.url);
    const client = new TaskClient({ url: proxy.url, status: 'poll' });
    try {
      const inline = await client.callTool('greet', { name: 'Ada' });
      assert.equal(textOf(inline), 'Hello, Ada!');
      const call = await client.start('slow_compute', { seconds: 0.8 });
      assert.equal(call.inline, false);
      assert.ok(call.taskId, 'the server made it a task');
      const statuses: string[] = [];
      call.on('task', (t) => statuses.push(t.status));
      const r = await call.result();
      assert.equal(textOf(r), 'Computed result after 0.8 s');
      assert.equal(statuses.at(-1), 'completed');
      const toolError = await client.callTool('failing_job', {});
      assert.equal(toolError.isError, true, 'a tool error is a completed task with isError');
      await assert.rejects(client.callTool('protocol_error_job', {}), (e: unknown) => e instanceof TaskFailedError && e.code === -32603);
      // Every request declared the extension; none declared elicitation or sampling (no handlers were given).
      for (const s of proxy.seen) {
        const caps = s.body.params._meta['io.modelcontextprotocol/clientCapabilities'];
        assert.deepEqual(caps, { extensions: { [EXT]: {} } }, `${s.method} declares exactly the extension`);
        assert.equal(s.body.params._meta['io.modelcontextprotocol/protocolVersion'], '2026-07-28');
      }
      // Each logical call carried its own idempotency key.
      const keys = proxy.seen.filter((s) => s.method === 'tools/call').map((s) => s.body.params._meta['outlast/idempotencyKey']);
      assert.equal(new Set(keys).size, keys.length);
    } finally {
      await client.close();
      await proxy.close();
    }
  });

  test('a response lost on the wire is retried with the same key and does not create a second task', async () => {
    const proxy = await startProxy(server.url);
    proxy.dropNext((s) => s.method === 'tools/call');
    const client = new TaskClient({ url: proxy.url, status: 'poll', retry: { baseDelayMs: 50 } });
    try {
      const before = serverTaskCount(db(), 'sleep_retryable');
      const notes: StatusNote[] = [];
      const r = await client.callTool('sleep_retryable', { seconds: 1.2 });
      assert.match(textOf(r), /Slept 1.2 s \(attempt 1\)/);
      const calls = proxy.seen.filter((s) => s.method === 'tools/call');
      assert.equal(calls.length, 2, 'the call was sent twice');
      assert.equal(calls[0]!.dropped, true, 'the first answer was lost after the server handled it');
      assert.equal(calls[0]!.body.params._meta['outlast/idempotencyKey'], calls[1]!.body.params._meta['outlast/idempotencyKey']);
      assert.equal(serverTaskCount(db(), 'sleep_retryable') - before, 1, 'exactly one task on the server');
      void notes;
    } finally {
      await client.close();
      await proxy.close();
    }
  });

  test('polling honours the advertised pollIntervalMs (counted at the proxy)', async () => {
    const proxy = await startProxy(server.url);
    const client = new TaskClient({ url: proxy.url, status: 'poll' });
    try {
      const r = await client.callTool('sleep', { seconds: 3 });
      assert.match(textOf(r), /Slept 3 s/);
      const gets = proxy.seen.filter((s) => s.method === 'tasks/get' || s.method === 'tools/call');
      assert.ok(gets.length >= 3, `polled ${gets.length - 1} times`);
      for (let i = 1; i < gets.length; i++) {
        const gap = gets[i]!.at - gets[i - 1]!.at;
        const advertised = gets[i - 1]!.advertisedMs!;
        assert.ok(advertised >= 300, `advertised ${advertised}`);
        assert.ok(gap >= advertised - 15, `poll ${i} came ${gap} ms after the previous one; ${advertised} ms was advertised`);
      }
      assert.equal(proxy.seen.filter((s) => s.status === 429).length, 0, 'never rate-limited');
      assert.ok(client.stats.byMethod['tasks/get']! <= Math.ceil(3000 / 300) + 1);
    } finally {
      await client.close();
      await proxy.close();
    }
  });

  test('input requests reach the handler once per key and are answered with tasks/update; only declared capabilities are sent', async () => {
    const proxy = await startProxy(server.url);
    const asked: string[] = [];
    const client = new TaskClient({
      url: proxy.url,
      status: 'poll',
      elicitation: async (params, ctx) => {
        asked.push(ctx.key);
        await sleep(700); // several polls see the request while we "think"
        const field = Object.keys((params.requestedSchema as { properties: object }).properties)[0]!;
        return { action: 'accept', content: { [field]: field === 'confirm' ? true : `${field}-value` } };
      },
    });
    try {
      assert.equal(textOf(await client.callTool('confirm_delete', { filename: 'report.pdf' })), 'Deleted report.pdf');
      assert.equal(textOf(await client.callTool('multi_input', {})), 'Got first-value and second-value');
      assert.deepEqual(asked.sort(), ['confirm', 'first', 'second'], 'each key asked exactly once');
      const updates = proxy.seen.filter((s) => s.method === 'tasks/update');
      assert.equal(updates.length, 3);
      for (const s of proxy.seen) assert.deepEqual(s.body.params._meta['io.modelcontextprotocol/clientCapabilities'], { extensions: { [EXT]: {} }, elicitation: {} });
    } finally {
      await client.close();
      await proxy.close();
    }
  });

  test('notifications/tasks is used when offered; when the stream is cut the client polls and still gets the result', async () => {
    const proxy = await startProxy(server.url);
    const client = new TaskClient({ url: proxy.url });
    try {
      const r = await client.callTool('sleep', { seconds: 2 });
      assert.match(textOf(r), /Slept 2 s/);
      assert.equal(proxy.count('subscriptions/listen'), 1);
      assert.equal(proxy.count('tasks/get'), 0, 'no polling while the stream is up');
    } finally {
      await client.close();
    }
    proxy.cutListenAfterMs = 300;
    const cut = new TaskClient({ url: proxy.url, listen: { relistenMinMs: 60_000 } });
    try {
      const notes: StatusNote[] = [];
      const call = await cut.start('sleep', { seconds: 2.5 });
      call.on('note', (n) => notes.push(n));
      const r = await call.result();
      assert.match(textOf(r), /Slept 2.5 s/);
      assert.ok(notes.some((n) => n.kind === 'fallback' && /cut/.test(n.reason)), JSON.stringify(notes));
      assert.ok(proxy.count('tasks/get') >= 2, `fell back to polling (${proxy.count('tasks/get')} polls)`);
    } finally {
      await cut.close();
      await proxy.close();
    }
  });

  test('journal: a detached task is resumed by a new client; expired and not found are told apart', async () => {
    const dir = tempDir();
    const path = join(dir, 'journal.db');
    const first = new TaskClient({ url: server.url, journal: path, status: 'poll' });
    const call = await first.start('sleep', { seconds: 1.5 });
    const taskId = call.taskId!;
    call.detach();
    await assert.rejects(call.result(), /Stopped following/);
    await first.close();

    const second = new TaskClient({ url: server.url, journal: path });
    try {
      const [h] = await second.resume();
      assert.equal(h!.taskId, taskId);
      assert.match(textOf(await h!.result()), /Slept 1.5 s/);
      assert.equal(second.journal.get(h!.callId)!.readAt !== undefined, true, 'the outcome is marked read');
      assert.deepEqual(await second.resume(), [], 'nothing left');
      await assert.rejects(second.getTask('no-such-task-id'), (e: unknown) => e instanceof TaskGoneError && e.reason === 'not_found');
    } finally {
      await second.close();
    }
  });

  test('followTask: a task another client started, followed by its id with this client answering its question; an unknown id is TaskGoneError', async () => {
    // The starter declares elicitation (the server asks only a client that can answer) but stops following at once.
    const starter = new TaskClient({ url: server.url, status: 'poll', elicitation: async () => assert.fail('the starter is not following the task') });
    const asked: string[] = [];
    const follower = new TaskClient({
      url: server.url,
      status: 'poll',
      elicitation: async (p) => {
        asked.push(String(p.message));
        await sleep(2100); // as a person answers: after the server's default --park-after-ms (2000)
        return { action: 'accept', content: { confirm: true } };
      },
    });
    try {
      const started = await starter.start('confirm_delete', { filename: 'b.txt' }, { follow: false });
      const taskId = started.taskId!;
      assert.ok(taskId);
      const call = await follower.followTask(taskId, { tool: 'confirm_delete' });
      assert.equal(call.taskId, taskId);
      assert.equal(textOf(await call.result()), 'Deleted b.txt');
      assert.deepEqual(asked, ['Delete b.txt?'], "the follower's handler answered the task's question");
      assert.equal(follower.journal.find(taskId)[0]?.state, 'completed', 'journaled from when it was followed');
      await assert.rejects(follower.followTask('no-such-task-id'), (e: unknown) => e instanceof TaskGoneError && e.reason === 'not_found');
    } finally {
      await starter.close();
      await follower.close();
    }
  });
});

describe('TaskClient: expiry', () => {
  let server: ServerProcess;
  before(async () => {
    server = await startServer(['--store', `sqlite:${join(tempDir(), 'tasks.db')}`, '--default-ttl-ms', '1500', '--sweep-interval-ms', '200']);
  });
  after(async () => {
    await server.stop();
  });

  test('a task whose TTL passed while the client was away is reported expired, and kept in the journal as such', async () => {
    const journal = new Journal(':memory:');
    const client = new TaskClient({ url: server.url, journal, status: 'poll' });
    try {
      const call = await client.start('sleep', { seconds: 30 }, { follow: false });
      call.detach();
      await sleep(2500);
      const [h] = await client.resume(call.taskId!);
      await assert.rejects(h!.result(), (e: unknown) => e instanceof TaskGoneError && e.reason === 'expired' && /expired/.test(e.message));
      assert.equal(journal.get(call.callId)!.state, 'expired');
    } finally {
      await client.close();
      journal.close();
    }
  });
});
