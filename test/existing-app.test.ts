/**
 * Outlast in an existing app: every stack of docs/existing-app.md, run as written (the block read from the doc) in
 * its own process on a fresh SQLite file, driven by real clients: SDK v1 `experimental.tasks` (an elicitation
 * answered after its wait parked, tasks/list, cancel), TaskClient on 2026-07-28 with subscriptions/listen, the poll
 * limit (429), the body limit (JSON-RPC 413), bad JSON, a full replica (503), the demo's tools, and a drain on SIGTERM.
 */
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import Database from 'better-sqlite3';
import { TaskClient } from '../src/client/index.js';
import { FIXTURES, ROOT, TASKS_CAPS, callTool, getTask, rpc, tempDir, textOf, waitForTask } from './helpers.js';
import { connectV1 } from './generations.js';
import { docBlock } from './doc-blocks.js';
import { RUN_DIR, startApp as startScript, writeScript, type App } from './doc-apps.js';

const DOC = 'docs/existing-app.md';
const RELATED = 'io.modelcontextprotocol/related-task';

/** A fetch route module served the way a runtime serves one: each method's export gets the Request (test-only). */
const ROUTE_BRIDGE = `import { serve } from '@hono/node-server';
import * as route from './fetch-route.mjs';
const server = serve({ fetch: (req) => (route[req.method] ? route[req.method](req) : new Response('Method Not Allowed', { status: 405 })), port: Number(process.env.PORT), hostname: '127.0.0.1' }, (info) => console.log(\`listening on http://127.0.0.1:\${info.port}/mcp\`));
process.once('SIGTERM', () => { server.close(); process.exit(0); });
`;

/** Writes the doc's block (and the route bridge for fetch-route) into dist/doc-run, where `outlast/server` resolves to this package. */
function scriptFor(stack: string): string {
  const file = writeScript(stack, docBlock(DOC, stack).code);
  if (stack !== 'fetch-route') return file;
  const bridge = join(RUN_DIR, 'fetch-route-bridge.mjs');
  writeFileSync(bridge, ROUTE_BRIDGE);
  return bridge;
}

const startApp = (stack: string, env: Record<string, string>): Promise<App> => startScript(scriptFor(stack), env, stack);

/** Waits until the store shows the task's wait parked (no process holds it). */
async function waitParked(dbPath: string, taskId: string, timeoutMs = 20_000): Promise<void> {
  const db = new Database(dbPath, { readonly: true, fileMustExist: true });
  try {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const row = db.prepare('SELECT parked_at FROM tasks WHERE task_id = ?').get(taskId) as { parked_at: number | null } | undefined;
      if (row?.parked_at != null) return;
      if (Date.now() > deadline) throw new Error(`task ${taskId} did not park in ${timeoutMs} ms`);
      await new Promise((r) => setTimeout(r, 100));
    }
  } finally {
    db.close();
  }
}

type StreamMessage = { type: string; task?: Record<string, any>; result?: Record<string, any>; error?: Error };

const STACKS = process.env.DOC_STACKS ? process.env.DOC_STACKS.split(',') : ['node-http', 'express', 'fastify', 'hono', 'fetch-route'];

for (const stack of STACKS) {
  describe(`docs/existing-app.md, ${stack}: the fixture server mounted as written`, () => {
    let app: App;
    let db: string;
    before(async () => {
      db = join(tempDir(), 'tasks.db');
      app = await startApp(stack, { OUTLAST_MODULE: FIXTURES, OUTLAST_STORE: `sqlite:${db}` });
    });
    after(async () => {
      const end = await app.stop();
      assert.deepEqual(end, { code: 0, signal: null }, `${stack} drains and exits 0 on SIGTERM:\n${app.stderr()}`);
    });

    it('SDK v1: an elicitation answered after its wait parked completes the task; tasks/list lists it; cancel cancels', async () => {
      const asked: Array<Record<string, any>> = [];
      const { client, wire, close } = await connectV1(app.url, {
        elicit: async (params) => {
          asked.push(params);
          await waitParked(db, params._meta[RELATED].taskId);
          return { action: 'accept', content: { answer: `answered on ${stack}` } };
        },
      });
      try {
        const msgs: StreamMessage[] = [];
        for await (const m of client.experimental.tasks.callToolStream({ name: 'park', arguments: { message: 'Ship it?', sleepSeconds: 0 } }, undefined, {} as never)) msgs.push(m as StreamMessage);
        const taskId = msgs[0]!.task!.taskId as string;
        assert.equal(asked.length, 1);
        const last = msgs[msgs.length - 1]!;
        assert.equal(last.type, 'result', JSON.stringify(last));
        assert.match(textOf(last.result!), new RegExp(`The answer is: answered on ${stack}`));
        assert.ok(wire.posted.length >= 1 && wire.posted.every((p) => p.status === 202), `the answer was taken: ${JSON.stringify(wire.posted)}`);

        const listed = await client.experimental.tasks.listTasks();
        assert.ok(listed.tasks.some((t) => t.taskId === taskId && t.status === 'completed'));

        const started: StreamMessage[] = [];
        for await (const m of client.experimental.tasks.callToolStream({ name: 'sleep', arguments: { seconds: 60 } }, undefined, {} as never)) {
          started.push(m as StreamMessage);
          if ((m as StreamMessage).type === 'taskCreated') break;
        }
        const long = started[0]!.task!.taskId as string;
        const cancelled = await client.experimental.tasks.cancelTask(long);
        assert.equal(cancelled.status, 'cancelled');
        assert.equal((await client.experimental.tasks.getTask(long)).status, 'cancelled');
        await wire.assertClean();
      } finally {
        await close();
      }
    });

    it('TaskClient (2026-07-28): status pushed over subscriptions/listen, an elicitation answered, the result delivered', async () => {
      const seen: Array<{ method: string; status: number; type: string }> = [];
      const recording: typeof fetch = async (input, init) => {
        const res = await fetch(input, init);
        const method = typeof init?.body === 'string' ? (JSON.parse(init.body) as { method?: string }).method : undefined;
        if (method) seen.push({ method, status: res.status, type: res.headers.get('content-type') ?? '' });
        return res;
      };
      const client = new TaskClient({ url: app.url, fetch: recording, elicitation: async () => ({ action: 'accept', content: { answer: 'pushed' } }) });
      try {
        const r = await client.callTool('ask', { message: 'Via listen?', thenSeconds: 1 });
        assert.match(textOf(r), /The answer is: pushed/);
        const listens = seen.filter((s) => s.method === 'subscriptions/listen');
        assert.ok(listens.length >= 1, `listen was used: ${JSON.stringify(seen)}`);
        assert.ok(listens.every((s) => s.status === 200 && s.type.includes('text/event-stream')), JSON.stringify(listens));
        assert.ok(seen.some((s) => s.method === 'tasks/update' && s.status === 200));
      } finally {
        await client.close();
      }
    });

    it('the front refuses what it must, with JSON-RPC errors: over-polling (429), a body over the limit (413), bad JSON (400), a stray answer (400, not 202)', async () => {
      const created = await callTool(app.url, 'sleep', { seconds: 30 });
      const taskId = created.result.taskId as string;
      assert.ok(taskId, JSON.stringify(created.message));
      const polls = await Promise.all(Array.from({ length: 20 }, () => getTask(app.url, taskId)));
      const limited = polls.filter((p) => p.status === 429);
      assert.ok(limited.length > 0, `over-polling is refused: ${polls.map((p) => p.status).join(',')}`);
      assert.equal(limited[0]!.error!.code, -31429);
      assert.ok(Number(limited[0]!.headers.get('retry-after')) >= 1);
      await rpc(app.url, 'tasks/cancel', { taskId });

      const big = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'greet', arguments: { name: 'x'.repeat(2 * 1024 * 1024) } } });
      const tooLarge = await fetch(app.url, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' }, body: big });
      assert.equal(tooLarge.status, 413);
      assert.match(tooLarge.headers.get('content-type') ?? '', /application\/json/);
      const tl = (await tooLarge.json()) as { error: { code: number; message: string } };
      assert.equal(tl.error.code, -32600);
      assert.match(tl.error.message, /exceeds 1048576 bytes/);

      const bad = await fetch(app.url, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' }, body: '{"jsonrpc":' });
      assert.equal(bad.status, 400);
      assert.equal(((await bad.json()) as { error: { code: number } }).error.code, -32700);

      // An answer to an input request of a task that does not exist: refused, saying why; never a silent 202.
      const stray = await fetch(app.url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-11-25' },
        body: JSON.stringify({ jsonrpc: '2.0', id: `outlast-input/${'0'.repeat(32)}/answer`, result: { action: 'accept', content: {} } }),
      });
      const strayBody = await stray.text();
      assert.notEqual(stray.status, 202, strayBody);
      assert.equal(stray.status, 400, strayBody);
      assert.ok((JSON.parse(strayBody) as { error?: { message?: string } }).error?.message, strayBody);
    });

    it('a full replica: one caller\'s 6 running (its share of maxRunning 8) and 32 queued, the next calls are refused queue_full with the wait (503 with Retry-After, or in-band while handled) and nothing is stored', async () => {
      // One principal may hold 3/4 of maxRunning (the per-principal default), so 6 run and the queue's 32 wait.
      const calls = await Promise.all(Array.from({ length: 40 }, (_, i) => callTool(app.url, 'sleep', { seconds: 120 + i }, { caps: TASKS_CAPS })));
      const accepted = calls.filter((c) => c.result.resultType === 'task');
      assert.equal(accepted.length, 38, `6 running + 32 queued: ${calls.map((c) => c.status).join(',')}`);
      // Refused as the later calls below are: 503, or in-band when the queue is found full only while handling.
      const burstRefused = calls.filter((c) => c.result?.resultType !== 'task');
      assert.deepEqual(burstRefused.map((c) => [c.error?.data.reason, c.status === 503 || c.status === 200]), [['queue_full', true], ['queue_full', true]]);
      for (let i = 0; i < 3; i++) {
        const refused = await callTool(app.url, 'sleep', { seconds: 1 }, { caps: TASKS_CAPS });
        assert.equal(refused.error?.code, -31503, JSON.stringify(refused.message));
        assert.equal(refused.error!.data.reason, 'queue_full');
        assert.ok(refused.error!.data.retryAfterMs >= 1);
        // docs/deployment.md: 503 with Retry-After, or in-band (200) when the depth is found full only while handling.
        if (refused.status === 503) assert.ok(Number(refused.headers.get('retry-after')) >= 1);
        else assert.equal(refused.status, 200, JSON.stringify(refused.message));
      }
      const rows = new Database(db, { readonly: true });
      try {
        const n = (rows.prepare("SELECT count(*) AS n FROM tasks WHERE tool = 'sleep' AND status = 'working'").get() as { n: number }).n;
        assert.equal(n, 38, 'the refused calls stored nothing');
      } finally {
        rows.close();
      }
      await Promise.all(accepted.map((c) => rpc(app.url, 'tasks/cancel', { taskId: c.result.taskId })));
    });
  });

  describe(`docs/existing-app.md, ${stack}: the demo's tools`, () => {
    let app: App;
    before(async () => {
      app = await startApp(stack, { OUTLAST_MODULE: join(ROOT, 'dist', 'demo', 'server.js'), OUTLAST_STORE: `sqlite:${join(tempDir(), 'demo.db')}` });
    });
    after(async () => {
      await app.stop();
    });

    it('reindex answers a small collection inline and runs a large one as a task to completion', async () => {
      const client = new TaskClient({ url: app.url });
      try {
        assert.match(textOf(await client.callTool('reindex', { collection: 'docs', documents: 500 })), /Reindexed 500 documents/);
        const call = await client.start('reindex', { collection: 'books', documents: 20_000 });
        const statuses: string[] = [];
        call.on('task', (t) => statuses.push(t.status));
        assert.match(textOf(await call.result()), /Reindexed 20,000 documents in "books"/);
        assert.ok(call.taskId, 'it ran as a task');
      } finally {
        await client.close();
      }
    });
  });
}

describe('docs/existing-app.md: SIGTERM drains a running handler (node-http)', () => {
  it('a task running at SIGTERM finishes within the drain; the process exits 0; a restart on the same store reads it completed', async () => {
    const db = join(tempDir(), 'drain.db');
    const env = { OUTLAST_MODULE: FIXTURES, OUTLAST_STORE: `sqlite:${db}` };
    const app = await startApp('node-http', env);
    const created = await callTool(app.url, 'sleep', { seconds: 1.5 }, { caps: TASKS_CAPS });
    const taskId = created.result.taskId as string;
    assert.ok(taskId, JSON.stringify(created.message));
    const end = await app.stop('SIGTERM');
    assert.deepEqual(end, { code: 0, signal: null }, app.stderr());
    const again = await startApp('node-http', env);
    try {
      const t = await waitForTask(again.url, taskId, undefined, { timeoutMs: 5000 });
      assert.equal(t.status, 'completed', 'finished within the drain, not taken over later');
      assert.match(textOf(t.result), /Slept 1.5 s \(attempt 1\)/);
    } finally {
      await again.stop();
    }
  });
});

describe('docs/existing-app.md: own tools without a module', () => {
  it('outlastHandler over a plain McpServer factory serves the tool, with the direct path for tasks/get', async () => {
    const app = await startApp('own-tools', { OUTLAST_DB: join(tempDir(), 'own.db') });
    try {
      const r = await callTool(app.url, 'reindex', { documents: 3 });
      assert.equal(r.status, 200);
      assert.match(textOf(r.result), /Reindexed 3 documents/);
      const unknown = await getTask(app.url, 'no-such-task');
      assert.equal(unknown.error?.code, -32602);
    } finally {
      await app.stop('SIGKILL');
    }
  });
});
