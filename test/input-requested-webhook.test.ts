/**
 * Reaching a person who is not looking: a new question emits one `outlast.input.requested` Standard Webhook with
 * the answer link; the link works (the form opens, the answer posted on it completes the task), and the stale-input
 * alert carries the link too. A real server (the demo's migrate from a client without elicitation), a real receiver.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { Webhook } from 'standardwebhooks';
import { SqliteTaskStore } from '../src/store/sqlite/index.js';
import { connectV1 } from './generations.js';
import { ROOT, freePort, startServer, tempDir, textOf, type ServerProcess } from './helpers.js';
import { parkedApproval, until } from './questions-helpers.js';

const DEMO = join(ROOT, 'dist', 'demo', 'server.js');

describe('input.requested webhook', () => {
  let server: ServerProcess | undefined;
  let receiver: ReturnType<typeof createServer> | undefined;
  let store: SqliteTaskStore | undefined;
  after(async () => {
    receiver?.closeAllConnections();
    receiver?.close();
    await store?.close();
    await server?.stop();
  });

  it('delivers the question with an answer link that works; the stale-input alert carries it too', async () => {
    const secret = `whsec_${randomBytes(32).toString('base64')}`;
    const deliveries: Array<{ type: string; data: Record<string, any>; headers: Record<string, unknown>; body: string }> = [];
    receiver = createServer((req, res) => {
      let body = '';
      req.on('data', (c) => (body += c));
      req.on('end', () => {
        const parsed = JSON.parse(body) as { type: string; data: Record<string, any> };
        deliveries.push({ ...parsed, headers: req.headers, body });
        res.writeHead(204).end();
      });
    });
    await new Promise<void>((r) => receiver!.listen(0, '127.0.0.1', r));
    const hook = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
    const db = join(tempDir(), 'tasks.db');
    const port = await freePort();
    server = await startServer(
      ['--store', `sqlite:${db}`, '--port', String(port), '--public-url', `http://127.0.0.1:${port}`, '--alert-webhook', hook, '--alert-webhook-secret', secret,
        '--park-after-ms', '300', '--handle-after-ms', '500'],
      { module: DEMO },
    );
    store = new SqliteTaskStore(db);
    await store.init();
    const { client, close } = await connectV1(server.url);
    try {
      // approvalTimeoutSeconds 8: the stale-input alert (80 % of the deadline) comes about 6.4 s after the question.
      const handle = (await client.callTool({ name: 'migrate', arguments: { database: 'shop', migration: '0070_hook', approvalTimeoutSeconds: 8 } })) as { structuredContent?: Record<string, any> };
      const taskId = handle.structuredContent!.taskId as string;
      const requested = await until('input.requested is delivered', async () => deliveries.find((d) => d.type === 'outlast.input.requested'), 20_000);
      new Webhook(secret).verify(requested.body, requested.headers as Record<string, string>);
      assert.equal(requested.data.taskId, taskId);
      assert.equal(requested.data.key, 'approval');
      assert.match(requested.data.question, /Apply migration "0070_hook" to shop\?/);
      const link = requested.data.answerUrl as string;
      assert.match(link, new RegExp(`^http://127\\.0\\.0\\.1:${port}/answer/`));
      const stale = await until('the stale-input alert is delivered', async () => deliveries.find((d) => d.type === 'outlast.task.input_stale'), 20_000);
      assert.equal(stale.data.answerUrl, link, 'the stale-input alert carries the same link');
      // The link works, after the wait is parked: the form opens, and the answer posted on it completes the task.
      await parkedApproval(store, '0070_hook');
      const form = await fetch(link);
      assert.equal(form.status, 200);
      const html = await form.text();
      const cookie = (form.headers.get('set-cookie') ?? '').split(';')[0]!;
      const csrf = /name="csrf" value="([^"]+)"/.exec(html)![1]!;
      const posted = await fetch(link, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded', cookie },
        body: new URLSearchParams({ csrf, action: 'accept', approve: 'true', reason: 'from the pager' }).toString(),
      });
      assert.equal(posted.status, 200);
      type Result = { content: Array<{ text?: string }>; structuredContent?: Record<string, any> };
      const last = await until('the migration completes', async () => {
        const r = (await client.callTool({ name: 'outlast_task_status', arguments: { taskId } })) as Result;
        return r.structuredContent?.taskId ? undefined : r;
      }, 60_000);
      assert.equal(textOf(last as never), 'Applied 0070_hook to shop (approved: from the pager).');
      assert.equal(deliveries.filter((d) => d.type === 'outlast.input.requested').length, 1, 'one input.requested for the question');
    } finally {
      await close();
    }
  });
});
