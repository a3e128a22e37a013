/**
 * Security review, finding 8 (issue 40): nothing bounded how many streams one principal held open (200 of them took
 * the server from 2 to 46 CPU ticks per 6 s). A real `outlast serve --events`: one principal opens its limit of
 * streams of every kind (listen with task ids, a plain listen, tasks/stream, events/stream); the next is refused with
 * a JSON-RPC error naming the limit and how many are open, another principal is not affected, and closing one lets a
 * new one open.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { TASKS_CAPS, callTool, headersFor, metaFor, startServer, tempDir, until, type ServerProcess } from './helpers.js';

const ALICE = 'alice-token-0001';
const BOB = 'bob-token-000001';

interface OpenStream {
  status: number;
  contentType: string;
  /** The JSON body of an answer that is not a stream (a refusal). */
  body: Record<string, any> | undefined;
  close(): void;
}

let nextId = 1;

/** POSTs a stream request and keeps its SSE body open (read in the background) until `close`. */
async function open(url: string, token: string, method: string, params: Record<string, unknown>): Promise<OpenStream> {
  const ac = new AbortController();
  const full = { ...params, _meta: metaFor(TASKS_CAPS) };
  const res = await fetch(url, {
    method: 'POST',
    headers: headersFor(method, full, { token }),
    body: JSON.stringify({ jsonrpc: '2.0', id: `s-${nextId++}`, method, params: full }),
    signal: ac.signal,
  });
  const contentType = res.headers.get('content-type') ?? '';
  if (!contentType.includes('text/event-stream')) return { status: res.status, contentType, body: (await res.json()) as Record<string, any>, close: () => undefined };
  const reader = res.body!.getReader();
  void (async () => {
    try {
      for (;;) if ((await reader.read()).done) break;
    } catch {
      /* closed by us */
    }
  })();
  return { status: res.status, contentType, body: undefined, close: () => ac.abort() };
}

describe('security: open streams per principal', () => {
  let server: ServerProcess;
  let aliceTask: string;
  let bobTask: string;
  before(async () => {
    server = await startServer(['--store', `sqlite:${join(tempDir(), 'tasks.db')}`, '--events', '--bearer', `${ALICE}=alice`, '--bearer', `${BOB}=bob`]);
    const a = await callTool(server.url, 'sleep', { seconds: 600 }, { token: ALICE, caps: TASKS_CAPS });
    const b = await callTool(server.url, 'sleep', { seconds: 600 }, { token: BOB, caps: TASKS_CAPS });
    aliceTask = a.result.taskId;
    bobTask = b.result.taskId;
    assert.ok(aliceTask && bobTask);
  });
  after(async () => {
    await server?.stop();
  });

  /** One stream of each kind, in turn. */
  const kinds: Array<(token: string, taskId: string) => Promise<OpenStream>> = [
    (token, taskId) => open(server.url, token, 'subscriptions/listen', { notifications: { taskIds: [taskId] } }),
    (token) => open(server.url, token, 'subscriptions/listen', { notifications: { toolsListChanged: true } }),
    (token, taskId) => open(server.url, token, 'tasks/stream', { taskId }),
    (token) => open(server.url, token, 'events/stream', { name: 'outlast.task.finished', arguments: {} }),
  ];

  it('streams: one principal past --max-streams-per-principal (default 16) is refused with a JSON-RPC error; others are not affected; a closed stream frees its place', async () => {
    const held: OpenStream[] = [];
    try {
      for (let i = 0; i < 16; i++) {
        const s = await kinds[i % kinds.length]!(ALICE, aliceTask);
        held.push(s);
        assert.equal(s.status, 200, `stream ${i + 1}: ${JSON.stringify(s.body)}`);
        assert.match(s.contentType, /text\/event-stream/);
      }
      for (const kind of kinds) {
        const refused = await kind(ALICE, aliceTask);
        assert.equal(refused.status, 503);
        assert.equal(refused.body?.error?.code, -31503, JSON.stringify(refused.body));
        assert.match(refused.body!.error.message, /already has 16 open streams .*--max-streams-per-principal 16/);
        assert.equal(refused.body!.error.data.reason, 'principal_streams');
        assert.equal(refused.body!.error.data.limit, 16);
        assert.equal(refused.body!.error.data.open, 16);
      }
      // Bob is not affected.
      const bobs: OpenStream[] = [];
      for (const kind of kinds) {
        const s = await kind(BOB, bobTask);
        bobs.push(s);
        assert.equal(s.status, 200, JSON.stringify(s.body));
      }
      for (const s of bobs) s.close();
      // Alice closes one: a new one opens once the server saw it go.
      held.shift()!.close();
      const again = await until('a place freed by the closed stream', async () => {
        const s = await kinds[0]!(ALICE, aliceTask);
        if (s.status === 200) return s;
        assert.equal(s.body?.error?.data?.reason, 'principal_streams');
        return undefined;
      });
      held.push(again);
      const past = await kinds[2]!(ALICE, aliceTask);
      assert.equal(past.body?.error?.data?.reason, 'principal_streams', 'and the limit holds again');
    } finally {
      for (const s of held) s.close();
    }
  });

  it('streams: --max-streams-per-principal sets the limit; a refused request holds no place', async () => {
    const small = await startServer(['--store', `sqlite:${join(tempDir(), 'tasks.db')}`, '--bearer', `${ALICE}=alice`, '--max-streams-per-principal', '2']);
    const held: OpenStream[] = [];
    try {
      const task = (await callTool(small.url, 'sleep', { seconds: 600 }, { token: ALICE, caps: TASKS_CAPS })).result.taskId as string;
      // A stream request answered at once (an error) frees its place at once.
      for (let i = 0; i < 5; i++) {
        const bad = await open(small.url, ALICE, 'tasks/stream', { taskId: 'no-such-task' });
        assert.equal(bad.body?.error?.code, -32602, JSON.stringify(bad.body));
      }
      held.push(await open(small.url, ALICE, 'subscriptions/listen', { notifications: { taskIds: [task] } }));
      held.push(await open(small.url, ALICE, 'tasks/stream', { taskId: task }));
      assert.deepEqual(held.map((s) => s.status), [200, 200]);
      const third = await open(small.url, ALICE, 'subscriptions/listen', { notifications: { taskIds: [task] } });
      assert.match(third.body?.error?.message ?? '', /already has 2 open streams .*--max-streams-per-principal 2/);
    } finally {
      for (const s of held) s.close();
      await small.stop();
    }
  });
});
