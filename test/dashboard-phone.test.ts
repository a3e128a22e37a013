/**
 * The dashboard on a phone (390 px wide) in a real chromium, against a real `outlast serve` of the demo server with
 * data in every table: a migration waiting for a human with a long question, a declined (completed) migration, a
 * failure with a long error nobody read, and its alert. Every page fits the screen and shows every cell; a finished
 * task shows its outcome, not the status it reported while running; an alert with no target says it is not sent and
 * why; a zero count is no alarm. And with a webhook, the dashboard says where alerts go without showing its secret path.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { TaskClient } from '../src/client/task-client.js';
import { ROOT, startServer, tempDir, until, type ServerProcess } from './helpers.js';
import { artifact, countDialogs, seedStore, useDashboard } from './browser.js';
import { receiver } from './webhook-receiver.js';

const DEMO = join(ROOT, 'dist', 'demo', 'server.js');
const ACT = 'act-token-0123456789';
const PHONE = { width: 390, height: 844 };
const LONG_MIGRATION = '0008_backfill_region_for_every_historic_order_since_2019_and_rebuild_the_orders_by_region_covering_index';
const LONG_ERROR = 'reindex failed: connection to postgres://search-primary.internal.example.com:5432/catalog_production_eu_west_1 refused after 5 attempts (ECONNREFUSED); the index at /var/lib/outlast/indexes/catalog_production_eu_west_1_v2_with_a_name_longer_than_any_phone_is_wide is unchanged';
/** --bad in the dashboard's stylesheet: the colour of a count that needs attention. */
const RED = 'rgb(180, 35, 24)';

/** A failure nobody read, with a long error, owned by a replica that looks alive (this process). */
async function seed(path: string): Promise<string> {
  const { store, now } = await seedStore(path);
  const { record } = await store.create({
    taskId: `task_${'f'.repeat(40)}`, principal: 'alice@example.com', tool: 'reindex', args: {}, createdAt: now - 5000, ttlMs: null, pollIntervalMs: 500,
    owner: 'seeder', retrySafe: false, clientCapabilities: {},
  });
  await store.setProgress(record.taskId, 'seeder', 'indexing shard 3 of 8');
  await store.finish(record.taskId, 'seeder', { status: 'failed', error: { code: -32603, message: LONG_ERROR } }, null, now);
  await store.close();
  return record.taskId;
}

/** Everything on the page that runs past the viewport: the document's width, and each table cell that is outside the
 *  screen or wider than its own box. */
async function overflow(page: Page): Promise<{ scrollWidth: number; cells: string[] }> {
  return page.evaluate(() => {
    const width = window.innerWidth;
    const cells: string[] = [];
    for (const td of Array.from(document.querySelectorAll('td'))) {
      const text = (td as HTMLElement).innerText.trim();
      if (!text) continue;
      const r = td.getBoundingClientRect();
      if (r.width === 0 || r.left < 0 || r.right > width + 0.5 || td.scrollWidth > td.clientWidth + 1) cells.push(`${text.slice(0, 60)} [${Math.round(r.left)}..${Math.round(r.right)}, scroll ${td.scrollWidth} > ${td.clientWidth}]`);
    }
    return { scrollWidth: document.documentElement.scrollWidth, cells };
  });
}

describe('dashboard on a phone (390 px), demo server, no --alert-webhook', () => {
  let failed: string;
  const d = useDashboard(async (db) => void (failed = await seed(db)), ['--operator', `${ACT}=anna`, '--alert-unread-after-ms', '1'], { module: DEMO });
  const clients: TaskClient[] = [];
  let completed: string;
  let waiting: string;
  let phone: BrowserContext;
  let browser: Browser;

  before(async () => {
    browser = d.browser;
    const url = d.server.url;
    // A migration declined: it completes, and its last running status was "waiting for approval to run …".
    const decliner = new TaskClient({ url, elicitation: async () => ({ action: 'decline' }) });
    clients.push(decliner);
    const declined = await decliner.start('migrate', { database: 'orders', migration: '0007_drop_col' });
    await declined.result();
    completed = declined.taskId!;
    // A migration nobody answers: it waits for a human, with a long question.
    let asked!: () => void;
    const question = new Promise<void>((r) => (asked = r));
    const asker = new TaskClient({ url, elicitation: (_p, { signal }) => (asked(), new Promise((_r, reject) => signal.addEventListener('abort', () => reject(signal.reason)))) });
    clients.push(asker);
    waiting = (await asker.start('migrate', { database: 'orders_production_eu_west_1', migration: LONG_MIGRATION })).taskId!;
    await question;
    // The unread failure's alert is written by the server's scan.
    const headers = { authorization: `Bearer ${ACT}` };
    await until('the failed-unread alert', async () => (await (await fetch(`${d.base}/alerts`, { headers })).text()).includes('failed-unread'));
    phone = await browser.newContext({ viewport: PHONE, extraHTTPHeaders: headers });
  });
  after(async () => {
    await phone?.close();
    for (const c of clients) await c.close();
  });

  it('every page fits 390 px: no horizontal scroll, every table cell inside the screen; the question is shown whole, labelled', async () => {
    const page = await phone.newPage();
    const dialogs = countDialogs(page);
    const pages: Record<string, string> = {
      overview: d.base, tasks: `${d.base}/tasks`, 'task-waiting': `${d.base}/tasks/${waiting}`, 'task-failed': `${d.base}/tasks/${failed}`,
      'task-completed': `${d.base}/tasks/${completed}`, alerts: `${d.base}/alerts`, tools: `${d.base}/tools`, subscriptions: `${d.base}/subscriptions`,
    };
    for (const [name, href] of Object.entries(pages)) {
      await page.goto(href);
      const o = await overflow(page);
      assert.ok(o.scrollWidth <= PHONE.width, `${name}: the page is ${o.scrollWidth} px wide on a ${PHONE.width} px screen`);
      assert.deepEqual(o.cells, [], `${name}: cells outside the screen`);
      await page.screenshot({ path: artifact(`dashboard-phone-${name}.png`), fullPage: true });
    }
    // Each table has rows here (the overview's waiting, unread, parked, replicas and alerts; the tasks; the history).
    await page.goto(d.base);
    for (const t of ['unread', 'waiting', 'replicas', 'alerts']) assert.ok((await page.locator(`[data-testid=${t}] tbody tr`).count()) > 0, `the ${t} table has rows`);
    const questionCell = page.locator('[data-testid=waiting] tbody tr td').nth(3);
    assert.match(await questionCell.innerText(), new RegExp(LONG_MIGRATION));
    assert.equal(await questionCell.evaluate((td) => getComputedStyle(td, '::before').content), '"Question"', 'each cell is labelled with its column on a phone');
    const box = (await questionCell.boundingBox())!;
    assert.ok(box.x >= 0 && box.x + box.width <= PHONE.width, `the question is inside the screen (${box.x}..${box.x + box.width})`);
    const errorCell = page.locator('[data-testid=unread] tbody tr td').nth(4);
    assert.match(await errorCell.innerText(), /catalog_production_eu_west_1_v2_with_a_name_longer_than_any_phone_is_wide is unchanged/);
    assert.equal(dialogs(), 0);
    await page.close();
  });

  it('a completed migrate shows "completed", not the status it reported while running (that only labelled as such)', async () => {
    const page = await phone.newPage();
    await page.goto(`${d.base}/tasks?tool=migrate`);
    // The row's last cell: an unfinished task's status, a finished one's outcome.
    const line = (id: string) => page.locator(`tr[data-task="${id}"] td:last-child`).innerText();
    const row = page.locator(`tr[data-task="${completed}"]`);
    assert.equal(await line(completed), 'completed');
    assert.doesNotMatch(await row.innerText(), /waiting for approval/);
    // An unfinished task still shows its running status; a failed one its error.
    assert.match(await line(waiting), /^waiting for approval to run 0008_backfill/);
    await page.goto(`${d.base}/tasks?tool=reindex`);
    assert.equal(await line(failed), LONG_ERROR);
    await page.goto(`${d.base}/tasks/${completed}`);
    assert.equal(await page.locator('[data-testid=outcome]').innerText(), 'completed');
    assert.equal(await page.locator('[data-testid=status-message]').count(), 0, 'no "Status message" for a finished task');
    const facts = await page.locator('.facts').innerText();
    assert.match(facts, /Last status while running\s+waiting for approval to run 0007_drop_col on orders/);
    assert.doesNotMatch(facts.replace(/Last status while running\s+waiting for approval[^\n]*/, ''), /waiting for approval/, 'the old status appears only under its label');
    assert.match(await page.locator('[data-testid=history]').innerText(), /completed[\s\S]*last status: waiting for approval to run 0007_drop_col/);
    await page.goto(`${d.base}/tasks/${failed}`);
    assert.equal(await page.locator('[data-testid=outcome]').innerText(), 'failed, with the error above');
    assert.doesNotMatch(await page.locator('.facts').innerText(), /indexing shard 3 of 8/);
    await page.close();
  });

  it('an alert with no --alert-webhook says it is not sent and why; the overview says alerts go nowhere', async () => {
    const page = await phone.newPage();
    await page.goto(`${d.base}/alerts`);
    const delivery = await page.locator('[data-testid=alerts] tbody tr', { hasText: failed }).locator('[data-testid=delivery]').innerText();
    assert.equal(delivery, 'not sent (no --alert-webhook configured on this server)');
    assert.match(await page.locator('[data-testid=alert-target]').innerText(), /recorded here only: this server has no --alert-webhook/);
    await page.goto(d.base);
    assert.match(await page.locator('[data-testid=alert-target]').innerText(), /this server has no --alert-webhook, so nobody is told/);
    assert.doesNotMatch(await page.locator('[data-testid=alerts]').innerText(), /pending|0 attempts/);
    await page.close();
  });

  it('a count above zero that needs attention is red; "0 failed, unread" (after an acknowledge on the phone) and other zeros are not', async () => {
    const page = await phone.newPage();
    await page.goto(d.base);
    const colour = (state: string) => page.locator(`[data-testid=count-${state}]`).evaluate((e) => getComputedStyle(e).color);
    assert.equal(await page.locator('[data-testid=count-unread]').innerText(), '1');
    assert.equal(await colour('unread'), RED, 'one unread failure is an alarm');
    assert.equal(await page.locator('[data-testid=count-cancelled]').innerText(), '0');
    assert.notEqual(await colour('cancelled'), RED);
    await Promise.all([page.waitForURL(d.base), page.locator('[data-testid=unread] [data-action=acknowledge]').click()]);
    assert.equal(await page.locator('[data-testid=count-unread]').innerText(), '0');
    assert.notEqual(await colour('unread'), RED, '"0 failed, unread" is no alarm');
    assert.doesNotMatch(await page.locator('[data-testid=count-unread]').evaluate((e) => e.closest('a')!.className), /s-unread/);
    await page.close();
  });
});

describe('dashboard with --alert-webhook: says where alerts go, never the secret part of the URL', () => {
  const hooks = receiver();
  let server: ServerProcess;
  const secretPath = '/services/T0001/B0002/XyZsecretPathPart';

  before(async () => {
    await hooks.start();
    const db = join(tempDir(), 'tasks.db');
    await seed(db);
    server = await startServer(['--store', `sqlite:${db}`, '--dashboard', '--alert-webhook', `${hooks.base}${secretPath}?token=qs-secret-123`,
      '--alert-webhook-secret', 'whsec_cGhvbmUtdGVzdC1zZWNyZXQtcGhvbmUtdGVzdA==', '--alert-unread-after-ms', '1'], { module: DEMO });
  });
  after(async () => {
    await server?.stop();
    hooks.close();
  });

  it('the overview and the alerts page name the webhook by its origin; the delivered alert says so', async () => {
    await until('the delivered alert', () => hooks.hits.find((h) => h.json.type === 'outlast.task.failed_unread'));
    const base = server.url.replace(/\/mcp$/, '/dashboard');
    const alerts = await until('the alert shown delivered', async () => {
      const text = await (await fetch(`${base}/alerts`)).text();
      return text.includes('delivered') && text;
    });
    const overview = await (await fetch(base)).text();
    for (const text of [overview, alerts]) {
      assert.match(text, new RegExp(`Alerts go to the webhook at ${hooks.base.replace(/[.]/g, '\\.')} \\(<code>--alert-webhook</code>; the rest of its URL is not shown\\)`));
      assert.doesNotMatch(text, /XyZsecretPathPart|qs-secret-123|T0001/);
    }
    assert.match(alerts, /delivered<\/span> 1 attempt · last HTTP 200/);
  });
});
