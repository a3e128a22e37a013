/**
 * The dashboard's Tools page in a real browser against a real `outlast serve`: a seeded tool's count, failures and
 * p50/p95 of the last hour, a tool whose name is markup shown as text, a task still running or finished before the
 * window left out, and a window it does not offer refused.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { SqliteTaskStore } from '../src/store/sqlite/index.js';
import { HOST } from '../src/runtime/recovery.js';
import { artifact, countDialogs, useDashboard } from './browser.js';

const ACT = 'act-token-0123456789';
const XSS_TOOL = '<img src=x onerror="window.__pwned=1">';

/** reindex: 20 runs of 1..20 s ending in the last minutes (every fifth failed), one finished two hours ago, one
 *  running; the markup-named tool: one run of 250 ms. */
async function seed(path: string): Promise<void> {
  const store = new SqliteTaskStore(path);
  await store.init();
  const now = Date.now();
  // Owned by a replica that looks alive (this process), so the server does not take the running task over.
  await store.registerReplica({ replicaId: 'seeder', host: HOST, pid: process.pid, startedAt: now, heartbeatAt: now });
  let n = 0;
  const run = async (tool: string, tookMs: number, endedAt: number | undefined, failed = false) => {
    const createdAt = (endedAt ?? now) - tookMs;
    const { record } = await store.create({ taskId: `seed-${n++}-${now}`, principal: 'alice', tool, args: {}, createdAt, ttlMs: null, pollIntervalMs: 500, owner: 'seeder', retrySafe: false, clientCapabilities: {} });
    if (endedAt === undefined) return;
    await store.finish(record.taskId, 'seeder', failed ? { status: 'failed', error: { code: -32603, message: 'disk full' } } : { status: 'completed', result: { content: [] } }, null, endedAt);
  };
  for (let i = 1; i <= 20; i++) await run('reindex', i * 1000, now - 120_000 + i, i % 5 === 0);
  await run('reindex', 500, now - 2 * 3_600_000);
  await run('reindex', 60_000, undefined);
  await run(XSS_TOOL, 250, now - 5000);
  await store.close();
}

describe('dashboard: how long each tool takes', () => {
  const d = useDashboard(seed, ['--operator', `${ACT}=anna`]);

  it("the Tools page shows each tool's finished count, failures and p50/p95 of the last hour; a name with markup is text", async () => {
    const page = await d.browser.newPage();
    const dialogs = countDialogs(page);
    await page.setExtraHTTPHeaders({ authorization: `Bearer ${ACT}` });
    await page.goto(d.base);
    await page.click('nav a:has-text("Tools")');
    await page.waitForSelector('[data-testid=tools]');
    const cells = async (row: string) => page.locator(`${row} td`).allInnerTexts();
    assert.deepEqual(await cells('[data-testid=tools] tr[data-tool="reindex"]'), ['reindex', '20', '4', '0', '10 s', '19 s', '20 s']);
    const rows = page.locator('[data-testid=tools] tbody tr');
    assert.equal(await rows.count(), 2);
    assert.deepEqual(await rows.nth(1).locator('td').allInnerTexts(), [XSS_TOOL, '1', '0', '0', '250 ms', '250 ms', '250 ms']);
    assert.equal(await page.locator('#live img').count(), 0);
    assert.equal(await page.evaluate(() => (window as unknown as { __pwned?: number }).__pwned), undefined);
    assert.equal(dialogs(), 0);
    await page.screenshot({ path: artifact('dashboard-tools.png'), fullPage: true });
    // The tool name links to its tasks.
    await page.click('[data-testid=tools] tr[data-tool="reindex"] a');
    await page.waitForSelector('[data-testid=tasks]');
    assert.equal(await page.locator('[data-testid=tasks] tbody tr').count(), 22);
    await page.close();
  });

  it('a window it does not offer is refused; without a token nothing is shown', async () => {
    const bad = await fetch(`${d.base}/tools?window=__proto__`, { headers: { authorization: `Bearer ${ACT}` } });
    assert.equal(bad.status, 400);
    assert.match(await bad.text(), /The window is one of 15m, 1h, 24h/);
    const day = await fetch(`${d.base}/tools?window=24h`, { headers: { authorization: `Bearer ${ACT}` } });
    assert.match(await day.text(), /<td data-testid="finished"[^>]*>21<\/td>/, 'the run of two hours ago is in the last 24 hours');
    const anonymous = await fetch(`${d.base}/tools`);
    assert.equal(anonymous.status, 401);
    assert.doesNotMatch(await anonymous.text(), /reindex/);
  });
});
