/**
 * Links made before the upgrade: answer links of format 1 (claims in clear, HMAC-SHA256 under the shared link key)
 * that a server of the earlier release put in a chat or a webhook still open until their question's deadline, so an
 * upgrade in the middle of a wait loses no answer; none is made any more. The format-1 link is made here as that
 * release made it, with the key the store holds.
 */
import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import type { SqliteTaskStore } from '../src/store/sqlite/index.js';
import { connectV1 } from './generations.js';
import type { ServerProcess } from './helpers.js';
import { openForm, parkedApproval, postForm, row, startDemoWithPages, until } from './questions-helpers.js';

/** A link as the release before format 2 signed it. */
function formatOneLink(base: string, secret: string, claims: { t: string; k: string; d: number; p: string }): string {
  const body = Buffer.from(JSON.stringify(claims)).toString('base64url');
  const mac = createHmac('sha256', secret).update(`outlast-answer-link\n${body}`).digest('base64url');
  return `${base}/answer/${body}.${mac}`;
}

describe('answer links made before the upgrade', () => {
  let server: ServerProcess;
  let store: SqliteTaskStore;
  before(async () => {
    ({ server, store } = await startDemoWithPages(['--park-after-ms', '300', '--handle-after-ms', '1500']));
  });
  after(async () => {
    await store?.close();
    await server?.stop();
  });

  it('a format-1 link still opens and records its answer until its deadline; past it, it is refused', async () => {
    const { client, close } = await connectV1(server.url);
    try {
      const handle = (await client.callTool({ name: 'migrate', arguments: { database: 'shop', migration: '0096_upgrade' } })) as { structuredContent?: Record<string, any> };
      const taskId = handle.structuredContent!.taskId as string;
      const waiting = await parkedApproval(store, '0096_upgrade');
      // The stored key (the value offered is stored only when there is none, and the server made one with the link).
      const secret = await store.sharedSecret('outlast-answer-links', () => 'not-the-key');
      assert.notEqual(secret, 'not-the-key');
      const base = new URL(server.url).origin;
      const claims = { t: taskId, k: 'approval', d: waiting.inputRequests.approval!.deadline, p: waiting.principal };
      const late = formatOneLink(base, secret, { ...claims, d: Date.now() - 1000 });
      assert.equal((await fetch(late)).status, 410, 'past its deadline');
      const link = formatOneLink(base, secret, claims);
      const form = await openForm(link);
      assert.equal(form.status, 200);
      assert.match(form.html, /Apply migration &quot;0096_upgrade&quot; to shop\?/);
      const posted = await postForm(link, { csrf: form.csrf, action: 'decline' }, { cookie: form.cookie });
      assert.equal(posted.status, 200, await posted.text());
      const done = await until('the declined migration ends', async () => {
        const r = await row(store, taskId);
        return r.status === 'completed' ? r : undefined;
      }, 60_000);
      assert.deepEqual(done.inputResponses.approval?.response, { action: 'decline' });
    } finally {
      await close();
    }
  });
});
