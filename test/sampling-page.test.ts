/**
 * Sampling questions answered on the answer page by a person: a tool's `sampling/createMessage` question (a server
 * module's durable tool) and an upstream's, relayed by `outlast gateway` from the official reference server over
 * stdio. A host that cannot sample gets the link in the handle text; the person opens it in Debian's chromium after
 * the wait is parked, reads the request as it is (escaped), writes the reply, and the tool (or the upstream) gets a
 * CreateMessageResult with model "human". An empty reply is refused and the question stays open; a page for an
 * answered question says so. URL mode: a host that declared it (and not sampling) is sent the link as a URL
 * elicitation, whose decline records nothing; one that declared sampling too is sent the request itself.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Browser } from 'playwright-core';
import { Client as ClientV1 } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport as TransportV1 } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CreateMessageRequestSchema, ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import type { SqliteTaskStore } from '../src/store/sqlite/index.js';
import type { TaskRecord, TaskStore } from '../src/store/types.js';
import { artifact, launchBrowser } from './browser.js';
import { connectV1 } from './generations.js';
import { ROOT, callTool, freePort, startServer, tempDir, textOf, type ServerProcess } from './helpers.js';
import { openForm, postForm, row, startModuleWithPages, until } from './questions-helpers.js';

const MODULE = join(ROOT, 'dist', 'test', 'sampling-module.js');
const EVERYTHING = join(ROOT, 'node_modules', '@modelcontextprotocol', 'server-everything', 'dist', 'index.js');
const LINK = /https?:\/\/[^\s/]+\/answer\/[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+/;
type ToolResult = { content: Array<{ type: string; text?: string }>; structuredContent?: Record<string, any>; isError?: boolean };

/** The draft_reply task about `topic` once its sampling question is asked and its wait parked (no process holds it),
 *  whoever asked (each anonymous v1 host is its own session's principal). */
function parkedDraft(store: TaskStore, topic: string): Promise<TaskRecord> {
  return until(`the draft about ${topic} is asked and its wait parked`, async () => {
    for (const t of (await store.ops.listTasks({ tool: 'draft_reply' }, undefined, 50)).rows) {
      if (t.tool !== 'draft_reply') continue;
      const r = await row(store, t.taskId);
      if ((r.args as { topic?: string }).topic === topic && r.inputRequests.draft && r.parkedAt !== null && r.owner === null) return r;
    }
    return undefined;
  });
}

/** The page's form posted with the browser's cookie. */
const post = (link: string, fields: Record<string, string>, cookie: string) => postForm(link, fields, { cookie });

/** An SDK v1 host over stateless HTTP that declared URL-mode elicitation (and sampling, with `sample`). */
async function urlHost(url: string, sample?: () => Record<string, unknown>) {
  const client = new ClientV1({ name: 'v1-url-host', version: '1.0.0' }, { capabilities: { elicitation: { url: {} }, ...(sample ? { sampling: {} } : {}) } });
  const transport = new TransportV1(new URL(url));
  const posted: Array<{ id: unknown }> = [];
  const send = transport.send.bind(transport);
  transport.send = async (m, o) => {
    await send(m, o);
    if ('result' in m || 'error' in m) posted.push(m as never);
  };
  if (sample) client.setRequestHandler(CreateMessageRequestSchema, async () => sample() as never);
  await client.connect(transport);
  return { client, posted };
}

describe("a tool's sampling question on the answer page (a server module, SQLite)", () => {
  let server: ServerProcess;
  let store: SqliteTaskStore;
  let browser: Browser;
  before(async () => {
    ({ server, store } = await startModuleWithPages(MODULE, ['--park-after-ms', '300', '--handle-after-ms', '1500', '--queue-poll-ms', '200']));
    browser = await launchBrowser();
  });
  after(async () => {
    await browser?.close().catch(() => undefined);
    await store?.close();
    await server?.stop();
  });

  /** draft_reply from a host with neither sampling nor elicitation: the handle, its task and the link it shows. */
  async function startDraft(topic: string) {
    const { client, close } = await connectV1(server.url);
    const handle = (await client.callTool({ name: 'draft_reply', arguments: { topic } })) as ToolResult;
    const text = textOf(handle as never);
    const link = LINK.exec(text)?.[0];
    assert.ok(link, `the handle text shows a link: ${text}`);
    assert.match(text, /"Write the reply to: Friendly, and mention the photo\. \[image \(image\/png\), not shown\]" \(key "draft"\): show this link to the user, who answers there: </);
    assert.equal(handle.structuredContent?.answerLinks?.[0]?.url, link, 'structuredContent carries the link too');
    return { client, close, taskId: handle.structuredContent!.taskId as string, link };
  }

  async function withDraft(topic: string, body: (d: Awaited<ReturnType<typeof startDraft>>) => Promise<void>) {
    const d = await startDraft(topic);
    try {
      await body(d);
    } finally {
      await d.close();
    }
  }

  it('a person reads the request in chromium after the wait is parked and writes the reply; the tool gets a CreateMessageResult', async () => {
    await withDraft('a late parcel', async (d) => {
      await parkedDraft(store, 'a late parcel');
      const page = await browser.newPage({ viewport: { width: 390, height: 844 } });
      const response = await page.goto(d.link);
      assert.equal(response!.status(), 200);
      assert.match(response!.headers()['content-security-policy']!, /default-src 'none'/);
      const body = (await page.textContent('body')) ?? '';
      assert.match(body, /System prompt\s*You write short, kind replies for the support desk\./);
      const messages = await page.locator('.msg').allInnerTexts();
      assert.deepEqual(messages.map((m) => m.replace(/\s+/g, ' ').trim()), [
        'user Draft a reply about: a late parcel',
        'assistant Which tone should it have?',
        'user Friendly, and mention the photo. [image (image/png), not shown]',
      ]);
      assert.equal(await page.locator('img').count(), 0, 'the image is named, not rendered');
      const facts = await page.locator('dl.asker').last().innerText();
      assert.match(facts, /Max tokens\s+300/);
      assert.match(facts, /Models hinted\s+claude-sonnet/);
      assert.match(facts, /Intelligence priority\s+0\.8/);
      assert.match(await page.locator('dl.asker').first().innerText(), /Tool\s+draft_reply/);
      assert.ok(await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth), 'no sideways scrolling on a phone');
      await page.getByLabel('Your reply').fill('Hello!\nYour parcel is on its way; the photo shows it at the depot.');
      await page.screenshot({ path: artifact('sampling-page-390.png'), fullPage: true });
      await page.getByRole('button', { name: 'Send reply' }).click();
      await page.getByText('Your reply is sent').waitFor();
      // The page for a question already answered says so.
      await page.goto(d.link);
      assert.match((await page.textContent('body')) ?? '', /This question has already been answered/);
      await page.close();
      let last: ToolResult | undefined;
      await until('the draft completes', async () => {
        last = (await d.client.callTool({ name: 'outlast_task_status', arguments: { taskId: d.taskId } })) as ToolResult;
        return last.structuredContent?.taskId ? undefined : last;
      }, 60_000);
      const received = JSON.parse(textOf(last as never).replace(/^Draft received: /, ''));
      assert.deepEqual(received, { role: 'assistant', content: { type: 'text', text: 'Hello!\nYour parcel is on its way; the photo shows it at the depot.' }, model: 'human', stopReason: 'endTurn' });
    });
  });

  it('markup in the request reads as text, never as markup', async () => {
    await withDraft('<script>alert(1)</script><img src=x>', async (d) => {
      const f = await openForm(d.link);
      assert.equal(f.status, 200);
      assert.ok(f.html.includes('Draft a reply about: &lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x&gt;'), f.html);
      assert.doesNotMatch(f.html, /<script|<img/i);
      const page = await browser.newPage();
      await page.goto(d.link);
      assert.equal(await page.locator('script, img').count(), 0);
      assert.equal((await page.locator('.msg .text').first().textContent()), 'Draft a reply about: <script>alert(1)</script><img src=x>');
      await page.close();
    });
  });

  it('an empty reply is refused with the reason, the question stays open, and a reply sent after it is recorded', async () => {
    await withDraft('an empty reply', async (d) => {
      await parkedDraft(store, 'an empty reply');
      const f = await openForm(d.link);
      assert.equal(f.status, 200);
      for (const reply of ['', '  \r\n\t ']) {
        const refused = await post(d.link, { csrf: f.csrf, action: 'accept', reply }, f.cookie);
        assert.equal(refused.status, 400, `the reply ${JSON.stringify(reply)} is refused`);
        const html = await refused.text();
        assert.match(html, /Write a reply before sending it: an empty reply is not sent, and the question stays open\./);
        assert.ok(html.includes(`<textarea name="reply" id="f-reply" rows="8" required>${reply}</textarea>`), 'what was typed is kept in the form');
      }
      const untouched = await row(store, d.taskId);
      assert.equal(untouched.status, 'input_required');
      assert.ok(untouched.inputRequests.draft, 'still waiting for its reply');
      assert.equal(untouched.inputResponses.draft, undefined, 'nothing recorded');
      // In chromium: a reply of blanks passes the browser's own check and is refused by the server, kept in the form.
      const page = await browser.newPage();
      await page.goto(d.link);
      await page.getByLabel('Your reply').fill('   ');
      await page.getByRole('button', { name: 'Send reply' }).click();
      await page.getByText('an empty reply is not sent').waitFor();
      await page.getByLabel('Your reply').fill('Sorry, it is fixed now.');
      await page.getByRole('button', { name: 'Send reply' }).click();
      await page.getByText('Your reply is sent').waitFor();
      await page.close();
      const done = await until('the draft completes', async () => {
        const r = await row(store, d.taskId);
        return r.status === 'completed' ? r : undefined;
      });
      assert.equal((done.inputResponses.draft?.response as { content?: { text?: string } }).content?.text, 'Sorry, it is fixed now.');
    });
  });

  it('URL mode: a host without sampling is sent the link as a URL elicitation, whose decline records nothing; a host that samples is sent the request', async () => {
    const { client, posted } = await urlHost(server.url);
    const asked: Array<Record<string, any>> = [];
    client.setRequestHandler(ElicitRequestSchema, async (req) => {
      asked.push(req.params);
      return { action: 'decline' };
    });
    try {
      const handle = (await client.callTool({ name: 'draft_reply', arguments: { topic: 'url mode' } }, undefined, { timeout: 60_000 })) as ToolResult;
      const taskId = handle.structuredContent?.taskId as string;
      assert.ok(taskId, textOf(handle as never));
      await until('the decline is posted', async () => (posted.some((m) => String(m.id).startsWith('outlast-input-url/')) ? true : undefined));
      assert.equal(asked.length, 1);
      assert.equal(asked[0]!.mode, 'url');
      assert.match(asked[0]!.message, /^Write the reply to: Friendly, and mention the photo\./);
      assert.equal(asked[0]!.url, handle.structuredContent?.answerLinks?.[0]?.url, 'the same link the handle shows');
      assert.equal(asked[0]!.messages, undefined, "the sampling request's own params stay out of the elicitation");
      const waiting = await row(store, taskId);
      assert.equal(waiting.status, 'input_required', 'a sampling request has no decline: it stays open for its page');
      assert.equal(waiting.inputResponses.draft, undefined);
      const f = await openForm(asked[0]!.url);
      assert.equal((await post(asked[0]!.url, { csrf: f.csrf, action: 'accept', reply: 'Written after a decline.' }, f.cookie)).status, 200);
      const done = await until('the draft completes', async () => {
        const r = await row(store, taskId);
        return r.status === 'completed' ? r : undefined;
      });
      assert.equal(done.inputResponses.draft?.response.model, 'human');
    } finally {
      await client.close();
    }

    const sampler = await urlHost(server.url, () => ({ role: 'assistant', content: { type: 'text', text: 'From the host model.' }, model: 'host-model' }));
    sampler.client.setRequestHandler(ElicitRequestSchema, async () => assert.fail('a host that samples is sent the sampling request, not its link'));
    try {
      const handle = (await sampler.client.callTool({ name: 'draft_reply', arguments: { topic: 'url mode, sampling' } }, undefined, { timeout: 60_000 })) as ToolResult;
      let r = handle;
      for (let i = 0; i < 20 && r.structuredContent?.taskId; i++) {
        r = (await sampler.client.callTool({ name: 'outlast_task_status', arguments: { taskId: handle.structuredContent!.taskId, waitSeconds: 2 } }, undefined, { timeout: 60_000 })) as ToolResult;
      }
      assert.ok(!r.structuredContent?.taskId, `the draft completed with the host's sample: ${textOf(r as never)}`);
      const received = JSON.parse(textOf(r as never).replace(/^Draft received: /, ''));
      assert.deepEqual(received, { role: 'assistant', content: { type: 'text', text: 'From the host model.' }, model: 'host-model' });
    } finally {
      await sampler.client.close();
    }
  });

  it('MRTR (2026-07-28, no Tasks, URL mode, no sampling): the sampling question is offered as its page link', async () => {
    const r = await callTool(server.url, 'draft_reply', { topic: 'mrtr' }, { caps: { elicitation: { url: {} } } });
    assert.equal(r.result.resultType, 'input_required', JSON.stringify(r.result));
    const offered = r.result.inputRequests.draft;
    assert.equal(offered.method, 'elicitation/create');
    assert.equal(offered.params.mode, 'url');
    assert.match(offered.params.message, /^Write the reply to: Friendly/);
    assert.match(offered.params.url, LINK);
    assert.equal((await openForm(offered.params.url)).status, 200);
  });
});

describe("the gateway: an upstream's sampling request answered on the page (server-everything over stdio)", () => {
  let gw: ServerProcess;
  let browser: Browser;
  before(async () => {
    const port = await freePort();
    gw = await startServer(['--store', `sqlite:${join(tempDir(), 'gw.db')}`, '--port', String(port), '--public-url', `http://127.0.0.1:${port}`, '--handle-after-ms', '1000', '--no-poll-limit'], {
      command: ['gateway', '--stdio', `${process.execPath} ${EVERYTHING} stdio`, '--name', 'everything'],
    });
    browser = await launchBrowser();
  });
  after(async () => {
    await browser?.close().catch(() => undefined);
    await gw?.stop();
  });

  it('a 2026 host without sampling gets the link; the person writes the reply in chromium; the upstream gets it and the result carries it', async () => {
    const caps = {}; // 2026-07-28, no Tasks, no sampling, no elicitation: a plain host
    const call = await callTool(gw.url, 'trigger-sampling-request', { prompt: 'Which planet is <b>largest</b>?' }, { caps });
    assert.equal(call.error, undefined, JSON.stringify(call.error));
    const taskId = call.result.structuredContent?.taskId as string;
    assert.ok(taskId, `a handle: ${textOf(call.result)}`);
    let text = textOf(call.result);
    for (let i = 0; i < 20 && !LINK.test(text); i++) text = textOf((await callTool(gw.url, 'outlast_task_status', { taskId, waitSeconds: 1 }, { caps })).result);
    const link = LINK.exec(text)?.[0];
    assert.ok(link, `the status text shows the link: ${text}`);
    assert.match(text, /"Write the reply to: Resource trigger-sampling-request context: Which planet is <b>largest<\/b>\?" \(key "upstream-1-1"\): show this link to the user/);

    const page = await browser.newPage();
    await page.goto(link);
    assert.match((await page.textContent('body')) ?? '', /System prompt\s*You are a helpful test server\./);
    assert.equal(await page.locator('.msg .text').first().textContent(), 'Resource trigger-sampling-request context: Which planet is <b>largest</b>?');
    assert.equal(await page.locator('b', { hasText: 'largest' }).count(), 0, 'the upstream\'s markup is text');
    assert.match(await page.locator('dl.asker').last().innerText(), /Max tokens\s+100[\s\S]*Temperature\s+0\.7/);
    await page.getByLabel('Your reply').fill('Jupiter, by far.');
    await page.getByRole('button', { name: 'Send reply' }).click();
    await page.getByText('Your reply is sent').waitFor();
    await page.close();

    let done: ToolResult | undefined;
    await until('the call completes', async () => {
      const s = (await callTool(gw.url, 'outlast_task_status', { taskId, waitSeconds: 2 }, { caps })).result as ToolResult;
      return s.structuredContent?.taskId ? undefined : (done = s);
    }, 60_000);
    const result = textOf(done as never);
    assert.match(result, /^LLM sampling result: /, 'the upstream\'s own answer');
    const sampled = JSON.parse(result.replace(/^LLM sampling result: \n/, ''));
    assert.deepEqual(sampled, { role: 'assistant', content: { type: 'text', text: 'Jupiter, by far.' }, model: 'human', stopReason: 'endTurn' });
  });
});
