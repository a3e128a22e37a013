/**
 * A real host library: LangChain's MultiServerMCPClient (SDK v1 underneath, no elicitation, no Tasks) uses the demo
 * server's tools as an agent would (tool calls in, ToolMessages out). `migrate` becomes a handle; the client follows
 * it with `outlast_task_status`; a person opens the answer link exactly as an ordinary URL pattern takes it out of the
 * handle's text, in chromium, and approves once the wait is parked, as a person would (not at once); `migrate`
 * completes and the status tool returns its result.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { ToolMessage } from '@langchain/core/messages';
import type { StructuredToolInterface } from '@langchain/core/tools';
import { MultiServerMCPClient } from '@langchain/mcp-adapters';
import type { Browser } from 'playwright-core';
import { SqliteTaskStore } from '../src/store/sqlite/index.js';
import { launchBrowser } from './browser.js';
import type { ServerProcess } from './helpers.js';
import { parkedApproval, startDemoWithPages, until } from './questions-helpers.js';

/** The pattern a chat client, a linkifier or a script uses to find a URL in text. */
const URL_IN_TEXT = /https?:\/\/[^\s<>"']+/;
const PARK_AFTER_MS = 300;

/** The text of a ToolMessage, whichever shape the adapter gave its content (a string, or text blocks). */
function textOf(m: ToolMessage): string {
  if (typeof m.content === 'string') return m.content;
  return (m.content as Array<{ type: string; text?: string }>).map((b) => (b.type === 'text' ? (b.text ?? '') : '')).join('\n');
}

describe("LangChain's MultiServerMCPClient follows a handle; a person answers on the page", () => {
  let server: ServerProcess;
  let store: SqliteTaskStore;
  let browser: Browser;
  let client: MultiServerMCPClient;
  before(async () => {
    ({ server, store } = await startDemoWithPages(['--handles', '--park-after-ms', String(PARK_AFTER_MS), '--handle-after-ms', '1000']));
    browser = await launchBrowser();
    client = new MultiServerMCPClient({ mcpServers: { demo: { transport: 'http', url: server.url } } });
  });
  after(async () => {
    await client?.close().catch(() => undefined);
    await browser?.close().catch(() => undefined);
    await store?.close();
    await server?.stop();
  });

  it('migrate → handle → outlast_task_status; the link taken out of the text by a URL pattern; approved after the wait is parked; migrate completes', async () => {
    const tools = await client.getTools();
    const tool = (name: string) => tools.find((t) => t.name === name) as StructuredToolInterface;
    let calls = 0;
    const call = async (name: string, args: Record<string, unknown>) => (await tool(name).invoke({ type: 'tool_call', id: `call-${++calls}`, name, args })) as ToolMessage;

    const handle = await call('migrate', { database: 'shop', migration: '0090_langchain' });
    const said = textOf(handle);
    assert.match(said, /continues in the background as task/, said);
    // What the adapter hands the model: the text block with its structuredContent, JSON-encoded.
    const taskId = /as task ([A-Za-z0-9_-]+)\./.exec(said)?.[1];
    assert.ok(taskId, `the handle names its task: ${said}`);
    const link = URL_IN_TEXT.exec(said)?.[0];
    assert.ok(link?.includes('/answer/'), `the handle shows the answer link: ${said}`);

    // The person comes later: the wait is parked first (no process holds it), then some more time goes by.
    const parked = await parkedApproval(store, '0090_langchain');
    assert.equal(parked.taskId, taskId);
    const waiting = await call('outlast_task_status', { taskId, waitSeconds: 1 });
    assert.match(textOf(waiting), /is still waiting/);
    assert.equal(URL_IN_TEXT.exec(textOf(waiting))?.[0], link, 'the status text shows the same link');

    const page = await browser.newPage({ viewport: { width: 390, height: 844 } });
    const opened = await page.goto(link!);
    assert.equal(opened?.status(), 200);
    assert.match((await page.textContent('body')) ?? '', /Apply migration "0090_langchain" to shop\?/);
    await page.getByLabel('Approve').check();
    await page.getByLabel('Reason').fill('checked by a person, later');
    await page.getByRole('button', { name: 'Submit' }).click();
    await page.getByText('Your answer is recorded').waitFor();
    await page.close();

    const done = await until('migrate completes through outlast_task_status', async () => {
      const r = await call('outlast_task_status', { taskId, waitSeconds: 10 });
      return /continues in the background|is still (working|waiting)/.test(textOf(r)) ? undefined : r;
    }, 60_000);
    assert.equal(textOf(done), 'Applied 0090_langchain to shop (approved: checked by a person, later).');
  });
});
