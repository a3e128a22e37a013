/**
 * Answer links reveal nothing (issue 40, finding 9): a real demo server behind static bearer tokens gives Alice's host
 * (SDK v1, no elicitation) the link to `migrate`'s approval; decoded in every way a reader could, the link shows
 * neither the principal, the question's key nor the task id. It is still bound to them: Bob is refused, a changed
 * character is 404, and it answers once.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { SqliteTaskStore } from '../src/store/sqlite/index.js';
import { connectV1 } from './generations.js';
import { textOf, type ServerProcess } from './helpers.js';
import { openForm, parkedApproval, postForm, row, startDemoWithPages, until } from './questions-helpers.js';

const ALICE = 'alice-token-security-links';
const BOB = 'bob-token-security-links';
const LINK = /https?:\/\/[^\s/<>]+\/answer\/[A-Za-z0-9_.-]+/;

/** Everything a reader can get out of a token without a key: the text, and each dot-separated part decoded from
 *  base64url and from base64, read as UTF-8 and as Latin-1. */
function readings(token: string): string[] {
  const out = [token];
  for (const part of token.split('.')) {
    for (const enc of ['base64url', 'base64'] as const) {
      const bytes = Buffer.from(part, enc);
      out.push(bytes.toString('utf8'), bytes.toString('latin1'));
    }
  }
  return out;
}

describe('answer links reveal nothing', () => {
  let server: ServerProcess;
  let store: SqliteTaskStore;
  before(async () => {
    // Flags rather than a token file, so that this test runs against a build from before the file form as well.
    ({ server, store } = await startDemoWithPages(['--bearer', `${ALICE}=alice`, '--bearer', `${BOB}=bob`, '--park-after-ms', '300', '--handle-after-ms', '1500']));
  });
  after(async () => {
    await store?.close();
    await server?.stop();
  });

  it('a link shows neither the principal, the question\'s key nor the task id; it still opens once, for its principal only, and a changed character is 404', async () => {
    const { client, close } = await connectV1(server.url, { token: ALICE });
    try {
      const handle = (await client.callTool({ name: 'migrate', arguments: { database: 'shop', migration: '0095_sealed' } })) as { structuredContent?: Record<string, any> };
      const text = textOf(handle as never);
      const link = LINK.exec(text)?.[0];
      assert.ok(link, `the handle text shows a link: ${text}`);
      const taskId = handle.structuredContent!.taskId as string;
      const token = new URL(link).pathname.slice('/answer/'.length);
      for (const r of readings(token)) {
        for (const secret of ['alice', 'approval', taskId, '"p"', '"k"', '"t"']) assert.ok(!r.includes(secret), `the link reveals ${secret}: ${JSON.stringify(r)}`);
      }
      await parkedApproval(store, '0095_sealed', 'alice');
      // Bound to its principal: Bob's credentials are refused, and a character changed anywhere is not a link.
      assert.equal((await fetch(link, { headers: { authorization: `Bearer ${BOB}` } })).status, 403, 'another principal');
      for (const at of [link.length - token.length + 3, link.indexOf('.', link.length - token.length) + 4, link.length - 5]) {
        const changed: string = link.slice(0, at) + (link[at] === 'A' ? 'B' : 'A') + link.slice(at + 1);
        assert.equal((await fetch(changed)).status, 404, `a character changed at ${at}`);
      }
      assert.equal((await row(store, taskId)).status, 'input_required', 'the refusals changed nothing');
      // It opens, records the answer, and is refused once answered.
      const form = await openForm(link);
      assert.equal(form.status, 200);
      const posted = await postForm(link, { csrf: form.csrf, action: 'accept', approve: 'true', reason: 'sealed link' }, { cookie: form.cookie });
      assert.equal(posted.status, 200, await posted.text());
      const replay = await fetch(link);
      assert.equal(replay.status, 410);
      assert.match(await replay.text(), /already been answered/);
      const done = await until('the migration completes', async () => {
        const r = await row(store, taskId);
        return r.status === 'completed' ? r : undefined;
      }, 60_000);
      assert.deepEqual(done.inputResponses.approval?.response, { action: 'accept', content: { approve: true, reason: 'sealed link' } });
    } finally {
      await close();
    }
  });

  it('answer pages: every answer (the form, a changed link, another principal, no CSRF, the recorded answer, the replay) forbids framing (X-Frame-Options: DENY) and caching (no-store) and allows no script', async () => {
    const { client, close } = await connectV1(server.url, { token: ALICE });
    try {
      const handle = await client.callTool({ name: 'migrate', arguments: { database: 'shop', migration: '0097_headers' } });
      const link = LINK.exec(textOf(handle as never))?.[0];
      assert.ok(link, 'the handle text shows a link');
      await parkedApproval(store, '0097_headers', 'alice');
      const guarded = (headers: Headers, what: string) => {
        assert.equal(headers.get('x-frame-options'), 'DENY', what);
        assert.equal(headers.get('cache-control'), 'no-store', what);
        assert.equal(headers.get('x-content-type-options'), 'nosniff', what);
        const csp = (headers.get('content-security-policy') ?? '').split(/;\s*/);
        for (const directive of ["default-src 'none'", "frame-ancestors 'none'", "base-uri 'none'", "form-action 'self'"]) assert.ok(csp.includes(directive), `${what}: ${directive} in ${csp.join('; ')}`);
        assert.ok(!csp.some((d) => /^script-src|unsafe-/.test(d)), `${what}: no script allowed: ${csp.join('; ')}`);
      };
      const at = link.length - 5;
      const changed = await fetch(link.slice(0, at) + (link[at] === 'A' ? 'B' : 'A') + link.slice(at + 1));
      assert.equal(changed.status, 404);
      guarded(changed.headers, 'a changed link (404)');
      const bob = await fetch(link, { headers: { authorization: `Bearer ${BOB}` } });
      assert.equal(bob.status, 403);
      guarded(bob.headers, 'another principal (403)');
      const form = await openForm(link);
      assert.equal(form.status, 200);
      guarded(form.headers, 'the form (200)');
      const fields = { csrf: form.csrf, action: 'accept', approve: 'true', reason: 'headers' };
      const noCsrf = await postForm(link, fields);
      assert.equal(noCsrf.status, 403);
      guarded(noCsrf.headers, 'no CSRF proof (403)');
      const posted = await postForm(link, fields, { cookie: form.cookie });
      assert.equal(posted.status, 200, await posted.text());
      guarded(posted.headers, 'the recorded answer (200)');
      const replay = await fetch(link);
      assert.equal(replay.status, 410);
      guarded(replay.headers, 'the replay (410)');
    } finally {
      await close();
    }
  });
});
