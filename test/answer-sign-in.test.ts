/**
 * The answer page behind OAuth signs the person in (oidc-provider, fixtures/oidc-as.ts, its own process): a link
 * opened without a session goes to the authorization server and back; only the task's principal answers. Alice's
 * host has no elicitation (SDK v1 `callTool`); she answers in Debian's chromium after the wait is parked. Bob, signed
 * in, is refused and the task is untouched, until the same browser signs in again as Alice. A session that is forged,
 * a sign-in that comes back to another browser or with an error, and a POST without a session are refused. The page
 * signs in through a registered client (RFC 7591) or a configured one; an issuer with neither refuses to start.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Browser, Page } from 'playwright-core';
import { SqliteTaskStore } from '../src/store/sqlite/index.js';
import type { TaskStore } from '../src/store/types.js';
import { launchBrowser } from './browser.js';
import { connectV1 } from './generations.js';
import { ROOT, freePort, startServer, tempDir, textOf, type ServerProcess } from './helpers.js';
import { playBrowser, startAuthServer, userTokens, type AuthServer } from './oauth-harness.js';
import { parkedApproval, row, until } from './questions-helpers.js';

const DEMO = join(ROOT, 'dist', 'demo', 'server.js');
const LINK = /https?:\/\/[^\s/]+\/answer\/[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+/;
type ToolResult = { content: Array<{ type: string; text?: string }>; structuredContent?: Record<string, any>; isError?: boolean };

async function assertUntouched(store: TaskStore, taskId: string): Promise<void> {
  const r = await row(store, taskId);
  assert.equal(r.status, 'input_required');
  assert.ok(r.inputRequests.approval, 'still waiting for its approval');
  assert.equal(r.inputResponses.approval, undefined, 'no answer recorded');
}

/** The cookie pairs (name=value) a response sets. */
function setCookies(r: Response): string[] {
  return r.headers.getSetCookie().map((c) => c.split(';')[0]!);
}

/** oidc-provider's login form, then its consent form, as a person fills them in chromium. */
async function signInAt(page: Page, user: string): Promise<void> {
  await page.locator('input[name="login"]').fill(user);
  await page.locator('input[name="password"]').fill('any password');
  await page.locator('button[type="submit"]').click();
  await page.locator('button[type="submit"]').click(); // consent
}

describe('answer pages behind OAuth: the person signs in, and must be the task\'s principal', () => {
  let as: AuthServer;
  let server: ServerProcess;
  let store: TaskStore;
  let browser: Browser;
  let resource: string;
  let db: string;
  const principal = (user: string) => `oauth:${as.issuer}#${user}`;
  const serverArgs = (port: number, publicUrl = `http://127.0.0.1:${port}`) => [
    '--store', `sqlite:${db}`, '--port', String(port), '--public-url', publicUrl,
    '--oauth-issuer', as.issuer, '--oauth-resource', resource, '--oauth-scopes', 'tasks', '--oauth-allow-http',
    '--park-after-ms', '300', '--handle-after-ms', '1500', '--queue-poll-ms', '200',
  ];

  before(async () => {
    const port = await freePort();
    resource = `http://127.0.0.1:${port}/mcp`;
    as = await startAuthServer({ jwtResources: [resource] });
    db = join(tempDir(), 'sign-in.db');
    server = await startServer(serverArgs(port), { module: DEMO });
    store = new SqliteTaskStore(db);
    await store.init();
    browser = await launchBrowser();
  });
  after(async () => {
    await browser?.close().catch(() => undefined);
    await store?.close();
    await server?.stop();
    await as?.stop();
  });

  /** Alice's host (no elicitation, no tasks) starts a migration with her access token: the handle's link. */
  async function startMigration(migration: string) {
    const tokens = await userTokens(as, 'alice', resource, 'openid tasks');
    const { client, close } = await connectV1(server.url, { token: tokens.access_token });
    const handle = (await client.callTool({ name: 'migrate', arguments: { database: 'shop', migration } })) as ToolResult;
    const link = LINK.exec(textOf(handle as never))?.[0];
    assert.ok(link, `the handle text shows a link: ${textOf(handle as never)}`);
    await parkedApproval(store, migration, principal('alice'));
    return { client, close, taskId: handle.structuredContent!.taskId as string, link };
  }

  it('Alice opens the link in chromium, signs in at the authorization server, approves; the migration completes', async () => {
    const m = await startMigration('0070_sign_in');
    try {
      const context = await browser.newContext({ viewport: { width: 390, height: 844 } });
      const page = await context.newPage();
      await page.goto(m.link);
      assert.equal(new URL(page.url()).origin, as.issuer, 'sent to sign in first');
      await signInAt(page, 'alice');
      await page.getByText('Apply migration "0070_sign_in" to shop?').waitFor();
      assert.equal(page.url(), m.link, 'back on the link after signing in');
      const session = (await context.cookies()).find((c) => c.name === 'outlast_answer_session');
      assert.ok(session, 'a page session');
      assert.equal(session.httpOnly, true);
      assert.equal(session.sameSite, 'Lax');
      assert.equal(session.path, '/answer/');
      assert.ok(!session.value.includes('alice'), 'the session is sealed, not readable');
      await page.getByLabel('Approve').check();
      await page.getByLabel('Reason').fill('signed in and checked');
      await page.getByRole('button', { name: 'Submit' }).click();
      await page.getByText('Your answer is recorded').waitFor();
      await context.close();
      let last: ToolResult | undefined;
      await until('the migration completes', async () => {
        last = (await m.client.callTool({ name: 'outlast_task_status', arguments: { taskId: m.taskId } })) as ToolResult;
        return last.structuredContent?.taskId ? undefined : last;
      }, 60_000);
      assert.equal(textOf(last as never), 'Applied 0070_sign_in to shop (approved: signed in and checked).');
    } finally {
      await m.close();
    }
  });

  it('Bob, signed in, is refused and the task untouched; the same browser signs in again as Alice and declines', async () => {
    const m = await startMigration('0071_someone_else');
    try {
      const context = await browser.newContext();
      const page = await context.newPage();
      await page.goto(m.link);
      await signInAt(page, 'bob');
      await page.getByText('This question was asked of someone else').waitFor();
      await assertUntouched(store, m.taskId);
      await page.getByRole('link', { name: 'Sign in as someone else' }).click();
      assert.equal(new URL(page.url()).origin, as.issuer, 'asked to log in anew');
      await signInAt(page, 'alice');
      await page.getByRole('button', { name: 'Decline' }).click();
      await page.getByText('You declined').waitFor();
      await context.close();
      const done = await until('the declined migration ends', async () => {
        const r = await row(store, m.taskId);
        return r.status === 'completed' ? r : undefined;
      });
      assert.deepEqual(done.inputResponses.approval?.response, { action: 'decline' });
    } finally {
      await m.close();
    }
  });

  it('refused, task untouched: no session, a forged session, a sign-in returning to another browser, or with an error', async () => {
    const m = await startMigration('0072_refusals');
    try {
      const start = await fetch(m.link, { redirect: 'manual' });
      assert.equal(start.status, 303, 'no session: off to sign in');
      const authorize = new URL(start.headers.get('location')!);
      assert.equal(authorize.origin + authorize.pathname, `${as.issuer}/auth`);
      assert.equal(authorize.searchParams.get('resource'), resource);
      assert.equal(authorize.searchParams.get('code_challenge_method'), 'S256');
      assert.equal(authorize.searchParams.get('redirect_uri'), `${new URL(m.link).origin}/answer/signed-in`);
      const flow = setCookies(start).find((c) => c.startsWith('outlast_answer_sign_in='))!;
      assert.ok(flow);

      const forged = await fetch(m.link, { redirect: 'manual', headers: { cookie: 'outlast_answer_session=eyJhbGciOiJkaXIiLCJlbmMiOiJBMjU2R0NNIn0..AAAA.BBBB.CCCC' } });
      assert.equal(forged.status, 303, 'a forged session is no session');
      const post = await fetch(m.link, { method: 'POST', redirect: 'manual', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: 'csrf=x&action=accept&approve=true' });
      assert.equal(post.status, 401);
      assert.match(await post.text(), /Sign in first/);

      // The authorization server's answer, delivered to a browser that did not start this sign-in.
      const callback = new URL(await playBrowser(authorize.href, 'alice'));
      assert.equal(callback.pathname, '/answer/signed-in');
      const elsewhere = await fetch(callback, { redirect: 'manual' });
      assert.equal(elsewhere.status, 400);
      assert.match(await elsewhere.text(), /not started in this browser/);
      const wrongState = new URL(callback);
      wrongState.searchParams.set('state', 'another');
      const mismatch = await fetch(wrongState, { redirect: 'manual', headers: { cookie: flow } });
      assert.equal(mismatch.status, 400);
      assert.match(await mismatch.text(), /state does not match/);
      const denied = new URL(`${callback.origin}/answer/signed-in`);
      denied.searchParams.set('state', authorize.searchParams.get('state')!);
      denied.searchParams.set('error', 'access_denied');
      denied.searchParams.set('error_description', 'the <person> said no');
      const refused = await fetch(denied, { redirect: 'manual', headers: { cookie: flow } });
      assert.equal(refused.status, 401);
      const html = await refused.text();
      assert.match(html, /access_denied/);
      assert.ok(html.includes('the &lt;person&gt; said no'), 'escaped');
      await assertUntouched(store, m.taskId);

      // The real one: the callback in the browser that started it gives a session that opens the form.
      const back = await fetch(callback, { redirect: 'manual', headers: { cookie: flow } });
      assert.equal(back.status, 303);
      assert.equal(back.headers.get('location'), m.link);
      const session = setCookies(back).find((c) => c.startsWith('outlast_answer_session='))!;
      const form = await fetch(m.link, { headers: { cookie: session } });
      assert.equal(form.status, 200);
      assert.match(await form.text(), /Apply migration &quot;0072_refusals&quot; to shop\?/);
      const reused = await fetch(callback, { redirect: 'manual', headers: { cookie: flow } });
      assert.equal(reused.status, 401, 'the code is single use at the authorization server');
      await assertUntouched(store, m.taskId);
    } finally {
      await m.close();
    }
  });

  /** The whole sign-in as a browser does it, with fetch: the link, the authorization server, the callback, the form. */
  async function answerWithFetch(startAt: string, user: string, fields: Record<string, string>): Promise<{ authorize: URL; answered: Response }> {
    const start = await fetch(startAt, { redirect: 'manual' });
    assert.equal(start.status, 303);
    const authorize = new URL(start.headers.get('location')!);
    const flow = setCookies(start).find((c) => c.startsWith('outlast_answer_sign_in='))!;
    const callback = new URL(await playBrowser(authorize.href, user));
    const back = await fetch(callback, { redirect: 'manual', headers: { cookie: flow } });
    assert.equal(back.status, 303, await back.clone().text());
    const session = setCookies(back).find((c) => c.startsWith('outlast_answer_session='))!;
    const form = await fetch(startAt, { headers: { cookie: session } });
    const csrfCookie = setCookies(form).find((c) => c.startsWith('outlast_answer_csrf='))!;
    const csrf = /name="csrf" value="([^"]+)"/.exec(await form.text())![1]!;
    const answered = await fetch(startAt, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded', cookie: `${session}; ${csrfCookie}` },
      body: new URLSearchParams({ csrf, ...fields }).toString(),
    });
    return { authorize, answered };
  }

  it('two replicas, each with its own registered client: a sign-in started on one completes on the public URL\'s', async () => {
    const replica = await startServer(serverArgs(await freePort(), new URL(server.url).origin), { module: DEMO });
    try {
      const m = await startMigration('0073_second_replica');
      try {
        // The link names the public URL (the first replica); the second serves the same link on its own port.
        const link = m.link.replace(new URL(m.link).origin, new URL(replica.url).origin);
        const { answered } = await answerWithFetch(link, 'alice', { action: 'accept', approve: 'true', reason: 'second replica' });
        assert.equal(answered.status, 200, await answered.clone().text());
        const done = await until('the migration completes', async () => {
          const r = await row(store, m.taskId);
          return r.status === 'completed' ? r : undefined;
        }, 60_000);
        assert.deepEqual(done.inputResponses.approval?.response, { action: 'accept', content: { approve: true, reason: 'second replica' } });
      } finally {
        await m.close();
      }
    } finally {
      await replica.stop();
    }
  });

  it('a deployment with a configured client (--oauth-sign-in-client-id) signs in as that client', async () => {
    const port = await freePort();
    const ownResource = `http://127.0.0.1:${port}/mcp`;
    const own = await startAuthServer({ jwtResources: [ownResource], registration: false });
    const ownDb = join(tempDir(), 'configured.db');
    const configured = await startServer(
      ['--store', `sqlite:${ownDb}`, '--port', String(port), '--public-url', `http://127.0.0.1:${port}`, '--oauth-issuer', own.issuer, '--oauth-resource', ownResource,
        '--oauth-scopes', 'tasks', '--oauth-allow-http', '--oauth-sign-in-client-id', 'answer-page', '--park-after-ms', '300', '--handle-after-ms', '1500'],
      { module: DEMO },
    );
    const ownStore = new SqliteTaskStore(ownDb);
    await ownStore.init();
    try {
      const tokens = await userTokens(own, 'carol', ownResource, 'openid tasks');
      const { client, close } = await connectV1(configured.url, { token: tokens.access_token });
      try {
        const handle = (await client.callTool({ name: 'migrate', arguments: { database: 'shop', migration: '0074_configured' } })) as ToolResult;
        const link = LINK.exec(textOf(handle as never))![0];
        await parkedApproval(ownStore, '0074_configured', `oauth:${own.issuer}#carol`);
        const { authorize, answered } = await answerWithFetch(link, 'carol', { action: 'accept', approve: 'true', reason: 'configured client' });
        assert.equal(authorize.searchParams.get('client_id'), 'answer-page');
        assert.equal(answered.status, 200, await answered.clone().text());
        const done = await until('the migration completes', async () => {
          const r = await row(ownStore, handle.structuredContent!.taskId as string);
          return r.status === 'completed' ? r : undefined;
        }, 60_000);
        assert.equal(done.inputResponses.approval?.response.action, 'accept');
      } finally {
        await close();
      }
    } finally {
      await ownStore.close();
      await configured.stop();
      await own.stop();
    }
  });

  it('an issuer without registration and no configured client: the server refuses to start, naming the flag', async () => {
    const closed = await startAuthServer({ jwtResources: [resource], registration: false });
    try {
      await assert.rejects(
        startServer(['--store', `sqlite:${join(tempDir(), 'closed.db')}`, '--public-url', 'http://127.0.0.1:1', '--oauth-issuer', closed.issuer, '--oauth-resource', resource, '--oauth-allow-http'], { module: DEMO }),
        /offers no dynamic client registration.*--oauth-sign-in-client-id/s,
      );
    } finally {
      await closed.stop();
    }
  });
});
