/**
 * The dashboard shows the work no handler runs right now, in a real browser against a real `outlast serve` with one
 * handler slot: tasks waiting in the run queue (their place), a durable task parked on a question (no process holds
 * it: when it is due), and a durable task's steps and history (started, parked, resumed).
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { callTool, rpc, sleep, tempDir, waitForTask } from './helpers.js';
import { artifact, countDialogs, useDashboard } from './browser.js';

const ACT = 'act-token-0123456789';
const TOKEN = { token: 'client-token-0123', caps: { extensions: { 'io.modelcontextprotocol/tasks': {} }, elicitation: {} } };

describe('dashboard: queued work, parked waits and durable steps', () => {
  const d = useDashboard(async () => {}, ['--operator', `${ACT}=anna`, '--bearer', `${TOKEN.token}=carol`, '--max-running', '1', '--park-after-ms', '200']);

  it('the overview lists the queue (with places) and the parked task; a task page shows its steps, its place or its park, and the history', async () => {
    const url = d.server.url;
    const log = join(tempDir(), 'work.log');
    // A durable task parks on its question (its handler lets go of the only slot), a durable task runs its steps,
    // then three busy calls: one runs, two wait in the queue.
    const parked = (await callTool(url, 'park', { message: 'Ship <b>it</b>?', sleepSeconds: 0 }, TOKEN)).result.taskId as string;
    await waitForTask(url, parked, (t) => t.status === 'input_required', TOKEN);
    const stepsTask = (await callTool(url, 'steps', { log, count: 3, stepSeconds: 0.05, gapSeconds: 0 }, TOKEN)).result.taskId as string;
    await waitForTask(url, stepsTask, undefined, TOKEN);
    const busy: string[] = [];
    // The first holds the slot long enough for the page to see the queue on a loaded machine; it is cancelled after.
    for (const seconds of [20, 1, 1]) busy.push((await callTool(url, 'busy', { seconds, log }, TOKEN)).result.taskId as string);
    await sleep(300);

    const page = await d.browser.newPage();
    const dialogs = countDialogs(page);
    await page.setExtraHTTPHeaders({ authorization: `Bearer ${ACT}` });
    await page.goto(d.base);
    await page.waitForSelector('[data-testid=queued]');
    assert.match(await page.locator('[data-testid=queue-depth]').innerText(), /^2 tasks waiting/);
    const queuedIds = await page.locator('[data-testid=queued] tbody tr td:nth-child(2)').allInnerTexts();
    assert.deepEqual(queuedIds, busy.slice(1), 'the two later calls wait, oldest first');
    assert.deepEqual(await page.locator('[data-testid=queued] tbody tr td:first-child').allInnerTexts(), ['1', '2']);
    const parkedRow = page.locator('[data-testid=parked] tbody tr');
    assert.equal(await parkedRow.count(), 1);
    assert.deepEqual((await parkedRow.locator('td').allInnerTexts()).slice(0, 4), [parked, 'park', 'carol', 'input answer']);
    await page.screenshot({ path: artifact('dashboard-idle.png'), fullPage: true });

    // A queued task's page: its place.
    await page.goto(`${d.base}/tasks/${busy[2]}`);
    assert.match(await page.locator('[data-testid=queued-since]').innerText(), /place 2 in the queue/);
    assert.equal((await rpc(url, 'tasks/cancel', { taskId: busy[0] }, TOKEN)).error, undefined);
    // The durable task's page: its steps, never their values.
    await page.goto(`${d.base}/tasks/${stepsTask}`);
    const steps = page.locator('[data-testid=steps] tbody tr');
    assert.deepEqual(await steps.locator('td:first-child').allInnerTexts(), ['s1#1', 's2#1', 's3#1']);
    assert.deepEqual(await steps.locator('td:nth-child(3)').allInnerTexts(), ['completed', 'completed', 'completed']);
    assert.equal(await page.locator('[data-testid=steps]').innerText().then((t) => t.includes('"s1"')), false, 'step values stay hidden');
    // The parked task's page, then answered: it resumes (claimed again) and completes; its history says so.
    await page.goto(`${d.base}/tasks/${parked}`);
    assert.match(await page.locator('[data-testid=parked-since]').innerText(), /no process holds it/);
    assert.equal(await page.locator('#live b').count(), 0, 'the question is text');
    const answered = await rpc(url, 'tasks/update', { taskId: parked, inputResponses: { answer: { action: 'accept', content: { answer: 'yes' } } } }, TOKEN);
    assert.equal(answered.error, undefined);
    await waitForTask(url, parked, undefined, { ...TOKEN, timeoutMs: 30_000 });
    await page.goto(`${d.base}/tasks/${parked}`);
    const history = await page.locator('[data-testid=history] tbody tr td:nth-child(2)').allInnerTexts();
    for (const kind of ['created', 'input asked', 'parked', 'input answered', 'resumed', 'completed']) assert.ok(history.includes(kind), `history has "${kind}": ${history.join(', ')}`);
    await page.goto(`${d.base}/tasks/${busy[1]}`);
    await waitForTask(url, busy[1]!, undefined, { ...TOKEN, timeoutMs: 30_000 });
    await page.reload();
    assert.ok((await page.locator('[data-testid=history] tbody tr td:nth-child(2)').allInnerTexts()).includes('started'), 'a queued task records when it started');
    assert.equal(dialogs(), 0);
    await page.close();
  });
});
