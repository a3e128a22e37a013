/**
 * The answer page, the fallback that works in any host: a client with no elicitation at all calls the demo's
 * `migrate`, reads the link from the handle text, and a person answers in a real browser (Debian's chromium) after
 * the wait is parked; the task completes. Page answers from another principal, after the deadline, replayed, without
 * CSRF, or that do not fit the schema are refused, and the task is untouched.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Browser } from 'playwright-core';
import type { TaskStore } from '../src/store/types.js';
import { artifact, launchBrowser } from './browser.js';
import { connectV1 } from './generations.js';
import { ROOT, freePort, startServer, tempDir, textOf, type ServerProcess } from './helpers.js';
import { openForm, parkedApproval, postForm as post, row, startDemoWithPages, until } from './questions-helpers.js';

const ALICE = 'alice-token-answer-page';
const BOB = 'bob-token-answer-page';
const LINK = /https?:\/\/[^\s/]+\/answer\/[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+/;
type ToolResult = { content: Array<{ type: string; text?: string }>; structuredContent?: Record<string, any>; isError?: boolean };

describe('answer pages on the demo server (a client without elicitation, SQLite)', () => {
  let server: ServerProcess;
  let store: TaskStore;
  let browser: Browser;
  before(async () => {
    ({ server, store } = await startDemoWithPages(['--bearer', `${ALICE}=alice`, '--bearer', `${BOB}=bob`, '--park-after-ms', '300', '--handle-after-ms', '1500', '--queue-poll-ms', '200']));
    browser = await launchBrowser();
  });
  after(async () => {
    await browser?.close().catch(() => undefined);
    await store?.close();
    await server?.stop();
  });

  /** Starts a migration from a host with no elicitation: the handle, its task id and the link it shows. */
  async function startMigration(migration: string, extra: Record<string, unknown> = {}) {
    const { client, close } = await connectV1(server.url, { token: ALICE });
    const handle = (await client.callTool({ name: 'migrate', arguments: { database: 'shop', migration, ...extra } })) as ToolResult;
    const text = textOf(handle as never);
    const link = LINK.exec(text)?.[0];
    assert.ok(link, `the handle text shows a link: ${text}`);
    assert.match(text, /show this link to the user/);
    assert.equal(handle.structuredContent?.answerLinks?.[0]?.url, link, 'structuredContent carries the link too');
    return { client, close, taskId: handle.structuredContent!.taskId as string, link };
  }

  /** Runs `body` with a migration started as above, and closes its client whatever happens. */
  async function withMigration(migration: string, extra: Record<string, unknown>, body: (m: Awaited<ReturnType<typeof startMigration>>) => Promise<void>) {
    const m = await startMigration(migration, extra);
    try {
      await body(m);
    } finally {
      await m.close();
    }
  }

  it('a person approves in chromium after the wait is parked; the status tool returns the applied migration', async () => {
    await withMigration('0060_page', {}, async (m) => {
      await parkedApproval(store, '0060_page', 'alice');
      const page = await browser.newPage({ viewport: { width: 390, height: 844 } });
      const response = await page.goto(m.link);
      assert.match(response!.headers()['content-security-policy']!, /default-src 'none'/);
      assert.match(await page.textContent('body') ?? '', /Apply migration "0060_page" to shop\?/);
      await page.getByLabel('Approve').check();
      await page.getByLabel('Reason').fill('looked at it <b>carefully</b>');
      await page.getByRole('button', { name: 'Submit' }).click();
      await page.getByText('Your answer is recorded').waitFor();
      await page.close();
      let last: ToolResult | undefined;
      await until('the migration completes', async () => {
        last = (await m.client.callTool({ name: 'outlast_task_status', arguments: { taskId: m.taskId } })) as ToolResult;
        return last.structuredContent?.taskId ? undefined : last;
      }, 60_000);
      assert.equal(textOf(last as never), 'Applied 0060_page to shop (approved: looked at it <b>carefully</b>).');
    });
  });

  it('refused, task untouched: without CSRF, with a forged CSRF, from another principal, not fitting the schema; then replayed', async () => {
    await withMigration('0061_refusals', {}, async (m) => {
      await parkedApproval(store, '0061_refusals', 'alice');
      const f = await openForm(m.link);
      assert.equal(f.status, 200);
      assert.ok(f.cookie && f.csrf);
      assert.doesNotMatch(f.html, /<script/i, 'no JavaScript on the page');
      const good = { csrf: f.csrf, action: 'accept', approve: 'true', reason: 'ok' };
      assert.equal((await post(m.link, good)).status, 403, 'no cookie: no CSRF proof');
      assert.equal((await post(m.link, { ...good, csrf: 'forged' }, { cookie: f.cookie })).status, 403, 'a forged CSRF field');
      const bob = await post(m.link, good, { cookie: f.cookie, authorization: `Bearer ${BOB}` });
      assert.equal(bob.status, 403, 'signed in as another principal');
      assert.match(await bob.text(), /asked of someone else/);
      const bad = await post(m.link, { ...good, approve: 'yes' }, { cookie: f.cookie });
      assert.equal(bad.status, 400, 'approve must be a checkbox value');
      assert.match(await bad.text(), /must be checked or left unchecked/);
      const untouched = await row(store, m.taskId);
      assert.equal(untouched.status, 'input_required');
      assert.ok(untouched.inputRequests.approval, 'still waiting for its approval');
      assert.equal(untouched.inputResponses.approval, undefined, 'no answer recorded');
      // The real answer, then the same POST again: single use.
      const ok = await post(m.link, { ...good, action: 'decline' }, { cookie: f.cookie, authorization: `Bearer ${ALICE}` });
      assert.equal(ok.status, 200);
      const replay = await post(m.link, good, { cookie: f.cookie });
      assert.equal(replay.status, 410);
      assert.match(await replay.text(), /already been answered/);
      const done = await until('the declined migration ends', async () => {
        const r = await row(store, m.taskId);
        return r.status === 'completed' ? r : undefined;
      });
      assert.deepEqual(done.inputResponses.approval?.response, { action: 'decline' }, 'the replay changed nothing');
      // Not the last character: in base64url its low bits may be padding, so changing it can leave the bytes as they were.
      const at = m.link.length - 5;
      const tampered = m.link.slice(0, at) + (m.link[at] === 'A' ? 'B' : 'A') + m.link.slice(at + 1);
      assert.equal((await fetch(tampered)).status, 404, 'a tampered link');
    });
  });

  it('the link copied with the punctuation a sentence puts after it opens the form for the token alone; a token changed inside gets 404', async () => {
    await withMigration('0063_copied', {}, async (m) => {
      await parkedApproval(store, '0063_copied', 'alice');
      const path = new URL(m.link).pathname;
      // What a sentence, a quote or a bracket leaves after a link; fetch sends quotes, `>`, braces and curly quotes
      // percent-encoded, as a browser does.
      const tails = ['.', ',', ';', ':', '!', '?', ')', ']', '}', '>', '"', "'", '\u2019', '\u201D', '").', '%22', '%E2%80%9D', '%3E'];
      for (const tail of tails) {
        const f = await openForm(m.link + tail);
        assert.equal(f.status, 200, `the link followed by ${JSON.stringify(tail)} opens the form`);
        assert.ok(f.html.includes(`action="${path}"`), `the form posts to the link without ${JSON.stringify(tail)}`);
        assert.match(f.html, /Apply migration &quot;0063_copied&quot; to shop\?/);
      }
      // Not the last character (see above): a character changed inside the token, with or without the full stop.
      const at = m.link.length - 5;
      const tampered = m.link.slice(0, at) + (m.link[at] === 'A' ? 'B' : 'A') + m.link.slice(at + 1);
      for (const tail of ['', '.', ')']) assert.equal((await fetch(tampered + tail)).status, 404, `a tampered token${tail ? ` followed by ${tail}` : ''}`);
      for (const tail of ['x', '.x', '/', '%E2%80']) assert.equal((await fetch(m.link + tail)).status, 404, `the token followed by ${JSON.stringify(tail)}, which no sentence adds`);
      // The form opened through a link with a full stop records the answer.
      const f = await openForm(`${m.link}.`);
      const ok = await post(new URL(path, m.link).href, { csrf: f.csrf, action: 'decline' }, { cookie: f.cookie });
      assert.equal(ok.status, 200);
      assert.deepEqual((await row(store, m.taskId)).inputResponses.approval?.response, { action: 'decline' });
    });
  });

  it('on a phone (chromium, 390 px) the page says which server and tool ask, when, and the deadline relative and in UTC', async () => {
    await withMigration('0064_phone', { approvalTimeoutSeconds: 540 }, async (m) => {
      const parked = await parkedApproval(store, '0064_phone', 'alice');
      const askedAt = parked.inputRequests.approval!.askedAt!;
      assert.ok(askedAt > 0 && askedAt <= Date.now(), 'the store kept when the question was asked');
      const page = await browser.newPage({ viewport: { width: 390, height: 844 }, deviceScaleFactor: 2, isMobile: true, hasTouch: true, locale: 'de-DE', timezoneId: 'Europe/Berlin' });
      await page.goto(m.link);
      const asker = await page.locator('dl.asker').innerText();
      assert.match(asker, /Server\s+outlast-demo/);
      assert.match(asker, /Tool\s+migrate/);
      assert.match(asker, /Asked\s+(now|\d+ seconds? ago) \(\d{4}-\d\d-\d\d \d\d:\d\d UTC\)/);
      assert.match(asker, /Deadline\s+in (9|8) minutes \(\d{4}-\d\d-\d\d \d\d:\d\d UTC\)/);
      const deadline = new Date(parked.inputRequests.approval!.deadline).toISOString();
      assert.ok(asker.includes(`${deadline.slice(0, 10)} ${deadline.slice(11, 16)} UTC`), `the UTC deadline ${deadline} is shown: ${asker}`);
      assert.equal(await page.locator('time').first().getAttribute('datetime'), new Date(askedAt).toISOString());
      // Readable at 390 px: nothing wider than the screen, text at least 15 px.
      assert.ok(await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth), 'no sideways scrolling');
      const smallest = await page.evaluate(() => Math.min(...Array.from(document.querySelectorAll('dt, dd, p, label, button')).map((e) => parseFloat(getComputedStyle(e).fontSize))));
      assert.ok(smallest >= 14, `smallest text ${smallest} px`);
      await page.screenshot({ path: artifact('answer-page-390.png'), fullPage: true });
      await page.close();
    });
  });

  it('after the deadline the page refuses, and the task ends with its timeout (no answer recorded)', async () => {
    await withMigration('0062_late', { approvalTimeoutSeconds: 5 }, async (m) => {
      const parked = await parkedApproval(store, '0062_late', 'alice');
      const f = await openForm(m.link);
      assert.equal(f.status, 200);
      await until('the deadline passes', async () => (Date.now() > parked.inputRequests.approval!.deadline + 200 ? true : undefined), 15_000);
      const late = await post(m.link, { csrf: f.csrf, action: 'accept', approve: 'true' }, { cookie: f.cookie });
      assert.equal(late.status, 410);
      assert.match(await late.text(), /deadline/);
      const ended = await until('the task ends at its deadline', async () => {
        const r = await row(store, m.taskId);
        return r.status === 'failed' || r.status === 'completed' ? r : undefined;
      });
      assert.equal(ended.inputResponses.approval?.timedOut, true, 'the timeout is what was recorded');
    });
  });
});

describe('the answer page shows who asks, escaped (a server whose name and question carry markup)', () => {
  let server: ServerProcess;
  before(async () => {
    const port = await freePort();
    server = await startServer(['--store', `sqlite:${join(tempDir(), 'asker.db')}`, '--port', String(port), '--public-url', `http://127.0.0.1:${port}`, '--handle-after-ms', '300'], {
      module: join(ROOT, 'dist', 'test', 'asker-module.js'),
    });
  });
  after(async () => {
    await server?.stop();
  });

  it('the server name, the tool and the question read as text, never as markup', async () => {
    const { client, close } = await connectV1(server.url);
    try {
      const handle = (await client.callTool({ name: 'approve_deploy', arguments: {} })) as ToolResult;
      const link = handle.structuredContent?.answerLinks?.[0]?.url as string;
      assert.ok(link, textOf(handle as never));
      const html = await (await fetch(link)).text();
      assert.ok(html.includes('<dt>Server</dt><dd><b>Deploys &lt;b&gt;&amp;&lt;/b&gt; &quot;Co&quot;</b></dd>'), html);
      assert.ok(html.includes('<dt>Tool</dt><dd><code>approve_deploy</code></dd>'));
      assert.ok(html.includes('Deploy &lt;img src=x&gt; to production?'));
      assert.doesNotMatch(html, /<img|<b>&/);
    } finally {
      await close();
    }
  });
});
