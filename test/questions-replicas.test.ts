// test:pg-replicas: starts PostgreSQL replicas (scripts/test.mjs runs at most three such files at once).
/**
 * Over three PostgreSQL replicas: the demo's migrate asks its question on one replica (the one the client called),
 * the answer page is served by another (the link's host), and the answer is posted to a third, which records it;
 * the parked wait resumes from the store and the task completes, read through the third replica's status tool. The
 * person's two connections carry one bearer token, their principal on every replica.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { postgresStoreFromUrl } from '../src/store/postgres/index.js';
import type { TaskStore } from '../src/store/types.js';
import { connectV1 } from './generations.js';
import { ROOT, freePort, freshSchema, pgStoreUrl, startServer, startTogether, textOf, type ServerProcess } from './helpers.js';
import { parkedApproval, until } from './questions-helpers.js';

const DEMO = join(ROOT, 'dist', 'demo', 'server.js');
const TOKEN = 'tok-q3';
const LINK = /https?:\/\/[^\s/]+\/answer\/[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+/;

describe('questions over three PostgreSQL replicas', () => {
  const replicas: ServerProcess[] = [];
  const ports: number[] = [];
  let store: TaskStore;
  before(async () => {
    const storeUrl = pgStoreUrl(freshSchema('q3'));
    for (let i = 0; i < 3; i++) ports.push(await freePort());
    // Every replica builds links on the second one's address: the page is served by a replica that did not ask.
    const start = (port: number) =>
      startServer(['--store', storeUrl, '--bearer', `${TOKEN}=person`, '--port', String(port), '--public-url', `http://127.0.0.1:${ports[1]}`, '--park-after-ms', '300', '--handle-after-ms', '800',
        '--heartbeat-ms', '300', '--lease-ms', '2000', '--queue-poll-ms', '200'], { module: DEMO });
    replicas.push(await start(ports[0]!));
    replicas.push(...(await startTogether([start(ports[1]!), start(ports[2]!)])));
    store = postgresStoreFromUrl(storeUrl);
    await store.init();
  });
  after(async () => {
    await store?.close();
    await Promise.all(replicas.map((r) => r.stop()));
  });

  it('asked on the first, page served by the second, answer posted to the third: the migration completes', async () => {
    const asker = await connectV1(replicas[0]!.url, { token: TOKEN });
    const third = await connectV1(replicas[2]!.url, { token: TOKEN });
    try {
      const handle = (await asker.client.callTool({ name: 'migrate', arguments: { database: 'shop', migration: '0080_three' } })) as { content: Array<{ text?: string }>; structuredContent?: Record<string, any> };
      const taskId = handle.structuredContent!.taskId as string;
      const link = LINK.exec(textOf(handle as never))![0];
      assert.equal(new URL(link).port, String(ports[1]), 'the link names the second replica');
      await parkedApproval(store, '0080_three');
      const form = await fetch(link);
      assert.equal(form.status, 200, 'the second replica serves the page');
      const html = await form.text();
      assert.match(html, /Apply migration &quot;0080_three&quot; to shop\?/);
      const cookie = (form.headers.get('set-cookie') ?? '').split(';')[0]!;
      const csrf = /name="csrf" value="([^"]+)"/.exec(html)![1]!;
      const onThird = link.replace(`:${ports[1]}/`, `:${ports[2]}/`);
      const posted = await fetch(onThird, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded', cookie },
        body: new URLSearchParams({ csrf, action: 'accept', approve: 'true', reason: 'three replicas' }).toString(),
      });
      assert.equal(posted.status, 200, `the third replica records it: ${await posted.clone().text()}`);
      type Result = { content: Array<{ text?: string }>; structuredContent?: Record<string, any> };
      const last = await until('the migration completes', async () => {
        const r = (await third.client.callTool({ name: 'outlast_task_status', arguments: { taskId } })) as Result;
        return r.structuredContent?.taskId ? undefined : r;
      }, 60_000);
      assert.equal(textOf(last as never), 'Applied 0080_three to shop (approved: three replicas).');
    } finally {
      await asker.close();
      await third.close();
    }
  });
});
