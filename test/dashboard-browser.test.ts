/**
 * The dashboard in a real browser (playwright-core + Debian's chromium) against real `outlast serve` processes:
 * seeded counts, live updates without reloads (one replica, and across two PostgreSQL replicas), cancel from the
 * page, CSRF and the read-only role, escaping, sign-in, and the refusal to serve a network without tokens.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Browser, Page } from 'playwright-core';
import { SqliteTaskStore } from '../src/store/sqlite/index.js';
import { HOST } from '../src/runtime/recovery.js';
import { TaskClient } from '../src/client/task-client.js';
import { TaskCancelledError } from '../src/client/errors.js';
import { BIN, FIXTURES, ROOT, sleep, tempDir } from './helpers.js';
import { startCluster, type Cluster } from './replicas.js';
import { artifact, countDialogs, launchBrowser, useDashboard } from './browser.js';

const ACT = 'act-token-0123456789';
const LOOK = 'look-token-0123456789';
const XSS = '<img src=x onerror="window.__pwned=1">';
const FAIL = { status: 'failed' as const, error: { code: -32603, message: 'disk full' } };

/** Seeds a store the way a running deployment would have left it, owned by a replica that looks alive. */
async function seed(path: string): Promise<{ failedUnread: string; xss: string }> {
  const store = new SqliteTaskStore(path);
  await store.init();
  const now = Date.now();
  await store.registerReplica({ replicaId: 'seeder', host: HOST, pid: process.pid, startedAt: now, heartbeatAt: now });
  let n = 0;
  const make = async (o: { status?: 'input_required'; message?: string } = {}) => {
    const { record } = await store.create({
      taskId: `seed-${n++}-${now}`, principal: 'alice', tool: 'seeded', args: {}, createdAt: now - 1000 + n, ttlMs: null, pollIntervalMs: 500,
      owner: 'seeder', retrySafe: false, clientCapabilities: {}, ...(o.message ? { statusMessage: o.message } : {}),
    });
    return record.taskId;
  };
  await make();
  const xss = await make();
  await store.setProgress(xss, 'seeder', XSS);
  const asks = await make();
  await store.requestInput(asks, 'seeder', { approve: { request: { method: 'elicitation/create', params: { mode: 'form', message: 'Ship release 4.2?', requestedSchema: { type: 'object', properties: {} } } }, deadline: now + 3_600_000 } }, now);
  const failedUnread = await make();
  await store.finish(failedUnread, 'seeder', FAIL, null, now);
  const failedRead = await make();
  await store.finish(failedRead, 'seeder', FAIL, null, now);
  await store.markRetrieved(failedRead, now);
  const done = await make();
  await store.finish(done, 'seeder', { status: 'completed', result: { content: [] } }, 'ok', now);
  await store.close();
  return { failedUnread, xss };
}

const count = (page: Page, state: string) => page.locator(`[data-testid=count-${state}]`).innerText();

async function signIn(page: Page, base: string, token: string): Promise<void> {
  await page.goto(`${base}/login`);
  await page.fill('input[name=token]', token);
  await Promise.all([page.waitForURL(`${base}`), page.click('button:has-text("Sign in")')]);
}

describe('dashboard in a browser (SQLite)', () => {
  let seeded: { failedUnread: string; xss: string };
  const suite = useDashboard(async (db) => void (seeded = await seed(db)), ['--operator', `${ACT}=anna`, '--operator-readonly', `${LOOK}=lou`]);
  let browser: Browser;
  let base: string;
  let mcp: string;
  before(() => {
    ({ browser, base } = suite);
    mcp = suite.server.url;
  });

  it('without a token: 401 and the sign-in page, never data; a bad token is refused', async () => {
    const res = await fetch(base);
    assert.equal(res.status, 401);
    const body = await res.text();
    assert.match(body, /Sign in/);
    assert.doesNotMatch(body, /count-working|seeded/);
    assert.equal((await fetch(`${base}/tasks`, { headers: { authorization: 'Bearer wrong-token-123' } })).status, 401);
    const page = await browser.newPage();
    await page.goto(`${base}/login`);
    await page.fill('input[name=token]', 'not-a-real-token');
    await page.click('button:has-text("Sign in")');
    await page.waitForSelector('.error');
    assert.match(await page.locator('.error').innerText(), /Unknown operator token/);
    await page.close();
  });

  it('the overview shows the seeded counts, the unread failure, the waiting question; screenshot kept', async () => {
    const page = await browser.newPage();
    const errors: string[] = [];
    page.on('console', (m) => m.type() === 'error' && errors.push(m.text()));
    await signIn(page, base, ACT);
    assert.deepEqual(
      [await count(page, 'working'), await count(page, 'input_required'), await count(page, 'completed'), await count(page, 'failed'), await count(page, 'cancelled'), await count(page, 'unread')],
      ['2', '1', '1', '2', '0', '1'],
    );
    assert.equal(await page.locator('[data-testid=unread] tbody tr').count(), 1);
    assert.match(await page.locator('[data-testid=unread]').innerText(), new RegExp(`${seeded.failedUnread}[\\s\\S]*disk full`));
    assert.match(await page.locator('[data-testid=waiting]').innerText(), /Ship release 4\.2\?/);
    assert.match(await page.locator('[data-testid=replicas]').innerText(), /seeder/);
    assert.equal(await page.locator('[data-testid=operator]').innerText(), 'anna (may act)');
    await page.screenshot({ path: artifact('dashboard-overview.png'), fullPage: true });
    // The page's own security headers.
    const res = await page.request.get(base);
    assert.match(res.headers()['content-security-policy']!, /script-src 'self'/);
    assert.match(res.headers()['content-security-policy']!, /frame-ancestors 'none'/);
    assert.equal(res.headers()['x-frame-options'], 'DENY');
    const cookie = (await page.context().cookies()).find((c) => c.name === 'outlast_operator')!;
    assert.ok(cookie.httpOnly && cookie.sameSite === 'Strict', 'the sign-in cookie is HttpOnly and SameSite=Strict');
    assert.notEqual(cookie.value, ACT, 'the cookie holds a digest, not the token');
    assert.deepEqual(errors, []);
    await page.close();
  });

  it('a task started by a client appears and moves to completed without a reload', async () => {
    const page = await browser.newPage();
    await signIn(page, base, ACT);
    await page.goto(`${base}/tasks?tool=sleep`);
    await page.evaluate(() => ((window as unknown as { __noReload: number }).__noReload = 1));
    await page.waitForFunction(() => document.getElementById('live-state')?.textContent === 'live');
    const client = new TaskClient({ url: mcp });
    try {
      const call = await client.start('sleep', { seconds: 3 });
      assert.ok(call.taskId, 'the call became a task');
      const row = page.locator(`tr[data-task="${call.taskId}"]`);
      await row.waitFor({ timeout: 10_000 });
      assert.match(await row.innerText(), /working/);
      await call.result();
      await page.waitForFunction((id) => document.querySelector(`tr[data-task="${id}"]`)?.textContent?.includes('completed'), call.taskId, { timeout: 10_000 });
      assert.equal(await page.evaluate(() => (window as unknown as { __noReload?: number }).__noReload), 1, 'the page was not reloaded');
    } finally {
      await client.close();
      await page.close();
    }
  });

  it("cancel from the task page ends a running task cancelled, with who and why in its history", async () => {
    const page = await browser.newPage();
    await signIn(page, base, ACT);
    const client = new TaskClient({ url: mcp });
    try {
      const call = await client.start('sleep', { seconds: 120 });
      await page.goto(`${base}/tasks/${call.taskId}`);
      await page.fill('input[name=reason]', 'runaway: blocks the deploy');
      // The form's POST redirects back to the task page: its load ends before the page is reloaded (a reload while that
      // navigation ran failed "Not attached to an active page" on a loaded machine).
      await Promise.all([page.waitForEvent('load'), page.click('[data-action=cancel]')]);
      await assert.rejects(call.result(), (e: unknown) => e instanceof TaskCancelledError);
      await page.reload();
      await page.waitForFunction(() => document.querySelector('h1 .status')?.textContent === 'cancelled');
      const history = await page.locator('[data-testid=history]').innerText();
      assert.match(history, /cancel requested\s+operator:anna\s+runaway: blocks the deploy/);
      assert.match(await page.locator('.facts').innerText(), /by operator anna: runaway: blocks the deploy/);
    } finally {
      await client.close();
      await page.close();
    }
  });

  it('a POST without the CSRF value is refused, and so is an action of a read-only operator', async () => {
    const page = await browser.newPage();
    await signIn(page, base, ACT);
    const post = (body: string) => page.evaluate(async ([url, b]) => (await fetch(url!, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: b! })).status, [`${base}/tasks/${seeded.failedUnread}/acknowledge`, body]);
    assert.equal(await post(''), 403);
    assert.equal(await post('_csrf=forged'), 403);
    await page.close();
    const look = await browser.newPage();
    await signIn(look, base, LOOK);
    assert.equal(await look.locator('[data-testid=operator]').innerText(), 'lou (read-only)');
    assert.equal(await look.locator('[data-action]').count(), 0, 'no action buttons for a read-only operator');
    const csrf = await look.locator('input[name=_csrf]').first().inputValue();
    const status = await look.evaluate(async ([url, b]) => (await fetch(url!, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: b! })).status, [`${base}/tasks/${seeded.failedUnread}/acknowledge`, `_csrf=${csrf}`]);
    assert.equal(status, 403);
    await look.goto(base);
    assert.equal(await count(look, 'unread'), '1', 'nothing was acknowledged');
    await look.close();
  });

  it('a status message carrying markup renders as text', async () => {
    const page = await browser.newPage();
    const dialogs = countDialogs(page);
    await signIn(page, base, ACT);
    await page.goto(`${base}/tasks/${seeded.xss}`);
    assert.equal(await page.locator('[data-testid=status-message]').innerText(), XSS);
    await page.goto(`${base}/tasks?tool=seeded`);
    assert.equal(await page.locator('#live img').count(), 0);
    assert.equal(await page.evaluate(() => (window as unknown as { __pwned?: number }).__pwned), undefined);
    assert.equal(dialogs(), 0);
    await page.close();
  });

  it('acknowledge from the overview clears the unread failure and leaves retrievedAt to the client; works with JavaScript off', async () => {
    const ctx = await browser.newContext({ javaScriptEnabled: false });
    const page = await ctx.newPage();
    await signIn(page, base, ACT);
    assert.equal(await count(page, 'unread'), '1');
    // The POST redirects to the overview the page is already on: its load, not the URL, says the new page is there.
    await Promise.all([page.waitForEvent('load'), page.click('[data-testid=unread] [data-action=acknowledge]')]);
    await page.waitForURL(base);
    assert.equal(await count(page, 'unread'), '0');
    await page.goto(`${base}/tasks/${seeded.failedUnread}`);
    const facts = await page.locator('.facts').innerText();
    assert.match(facts, /Outcome read by the client\s+no/);
    assert.match(facts, /Acknowledged\s+\S+ by anna/);
    await ctx.close();
  });
});

describe('dashboard refuses a network without operator tokens', () => {
  it('serve --host 0.0.0.0 --dashboard without a token exits non-zero and says why', () => {
    const r = spawnSync(process.execPath, [BIN, 'serve', FIXTURES, '--port', '0', '--host', '0.0.0.0', '--dashboard', '--store', `sqlite:${join(tempDir(), 'x.db')}`], { cwd: ROOT, encoding: 'utf8', timeout: 20_000 });
    assert.equal(r.status, 2);
    assert.match(r.stderr, /Refusing to serve the dashboard on 0\.0\.0\.0 without operator tokens/);
    assert.doesNotMatch(r.stdout, /listening/);
  });
});

describe('dashboard across two PostgreSQL replicas', () => {
  let cluster: Cluster;
  let browser: Browser;
  before(async () => {
    cluster = await startCluster(2, ['--dashboard'], { module: FIXTURES });
    browser = await launchBrowser();
  });
  after(async () => {
    await browser?.close();
    await cluster?.stop();
  });

  it('a page on replica A shows a task running on replica B, live, until it completes', async () => {
    const [a, b] = cluster.replicas;
    const page = await browser.newPage();
    await page.goto(a!.url.replace(/\/mcp$/, '/dashboard/tasks'));
    await page.waitForFunction(() => document.getElementById('live-state')?.textContent === 'live');
    const client = new TaskClient({ url: b!.url });
    try {
      const call = await client.start('sleep', { seconds: 3 });
      const row = page.locator(`tr[data-task="${call.taskId}"]`);
      await row.waitFor({ timeout: 10_000 });
      assert.match(await row.innerText(), /working/);
      assert.match(await row.innerText(), new RegExp(`:${b!.pid}:`), 'owned by replica B');
      await call.result();
      await page.waitForFunction((id) => document.querySelector(`tr[data-task="${id}"]`)?.textContent?.includes('completed'), call.taskId, { timeout: 10_000 });
      await sleep(10);
    } finally {
      await client.close();
      await page.close();
    }
  });
});

/** A task whose output carries markup and a structured event, written the way a run writes it (under its fence). */
async function seedOutput(path: string): Promise<string> {
  const store = new SqliteTaskStore(path);
  await store.init();
  const now = Date.now();
  await store.registerReplica({ replicaId: 'seeder', host: HOST, pid: process.pid, startedAt: now, heartbeatAt: now });
  const { record } = await store.create({
    taskId: `out-${now}`, principal: 'alice', tool: 'seeded', args: {}, createdAt: now, ttlMs: null, pollIntervalMs: 500,
    owner: 'seeder', retrySafe: false, clientCapabilities: {},
  });
  await store.output.append(record.taskId, { owner: 'seeder', epoch: record.epoch }, [
    { type: 'text', data: JSON.stringify({ type: 'text', text: XSS }), key: null },
    { type: 'com.example/progress', data: JSON.stringify({ done: 3, of: 10 }), key: null },
  ], { maxItems: 100, maxBytes: 1_000_000 }, now);
  await store.close();
  return record.taskId;
}

describe("dashboard in a browser: a task's output (payloads on)", () => {
  let seededTask: string;
  const suite = useDashboard(async (db) => void (seededTask = await seedOutput(db)), ['--operator', `${ACT}=anna`, '--dashboard-payloads', '--inline-budget-ms', '200']);

  it('output carrying markup renders as text; a structured item as its JSON', async () => {
    const page = await suite.browser.newPage();
    const dialogs = countDialogs(page);
    await signIn(page, suite.base, ACT);
    await page.goto(`${suite.base}/tasks/${seededTask}`);
    assert.equal(await page.locator('[data-testid=output] tr[data-seq="1"] td.msg').innerText(), XSS);
    assert.match(await page.locator('[data-testid=output] tr[data-seq="2"]').innerText(), /com\.example\/progress[\s\S]*"done": 3/);
    assert.match(await page.locator('[data-testid=output-count]').innerText(), /2 items \(latest seq 2\)/);
    assert.equal(await page.locator('#live img').count(), 0);
    assert.equal(await page.evaluate(() => (window as unknown as { __pwned?: number }).__pwned), undefined);
    assert.equal(dialogs(), 0);
    await page.close();
  });

  it("the task page shows a running task's output as it is written, without a reload, until it completes", async () => {
    const page = await suite.browser.newPage();
    await signIn(page, suite.base, ACT);
    const client = new TaskClient({ url: suite.server.url });
    try {
      const call = await client.start('emit_output', { count: 12, intervalMs: 250 });
      assert.ok(call.taskId, 'the call became a task');
      await page.goto(`${suite.base}/tasks/${call.taskId}`);
      await page.evaluate(() => ((window as unknown as { __noReload: number }).__noReload = 1));
      await page.waitForFunction(() => document.getElementById('live-state')?.textContent === 'live');
      const rows = () => page.locator('[data-testid=output] tbody tr').count();
      const early = await rows();
      assert.ok(early < 12, `the page opened mid-run (${early} lines)`);
      await page.waitForFunction(() => document.querySelector('[data-testid=output] tr[data-seq="12"]')?.textContent?.includes('line 12'), undefined, { timeout: 15_000 });
      await call.result();
      await page.waitForFunction(() => document.querySelector('h1')?.textContent?.includes('completed'), undefined, { timeout: 10_000 });
      const texts = await page.locator('[data-testid=output] td.msg').allInnerTexts();
      assert.deepEqual(texts, Array.from({ length: 12 }, (_, i) => `line ${i + 1}`));
      assert.equal(await page.evaluate(() => (window as unknown as { __noReload?: number }).__noReload), 1, 'the page was not reloaded');
    } finally {
      await client.close();
      await page.close();
    }
  });
});
