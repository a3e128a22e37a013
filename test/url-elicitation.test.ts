/**
 * URL-mode elicitation for hosts without task support: an SDK v1 client (2025-11-25, stateless HTTP) that declared
 * `elicitation.url` gets the demo's `migrate` approval as a URL elicitation of the question's answer link, on the
 * inline call's stream and on the status tool's stream. Its `accept` records nothing (the task stays input_required);
 * the person, opening the link AFTER the wait is parked, submits the form and the migration is applied. `decline` is
 * recorded as the answer; a client that declared form mode only still gets the form.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Client as ClientV1 } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport as TransportV1 } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ElicitRequestSchema, ElicitationCompleteNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { Client as ClientV2, StreamableHTTPClientTransport as TransportV2 } from '@modelcontextprotocol/client';
import type { TaskRecord, TaskStore } from '../src/store/types.js';
import { textOf, type ServerProcess } from './helpers.js';
import { parkedApproval, startDemoWithPages, until } from './questions-helpers.js';

const LINK = /^https?:\/\/127\.0\.0\.1:\d+\/answer\/[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/;
type ElicitParams = { mode?: string; url?: string; elicitationId?: string; message: string; requestedSchema?: unknown };
type ToolResult = { content: Array<{ type: string; text?: string }>; structuredContent?: Record<string, any>; isError?: boolean };

async function row(store: TaskStore, taskId: string): Promise<TaskRecord> {
  const l = await store.get(taskId);
  assert.equal(l.state, 'found');
  return (l as { record: TaskRecord }).record;
}

/** What the person does with the link: opens the page (its cookie and CSRF field), then submits the form. */
async function answerOnPage(link: string, fields: Record<string, string>): Promise<number> {
  const page = await fetch(link);
  const html = await page.text();
  assert.equal(page.status, 200, html);
  const cookie = (page.headers.get('set-cookie') ?? '').split(';')[0]!;
  const csrf = /name="csrf" value="([^"]+)"/.exec(html)?.[1];
  assert.ok(cookie && csrf, 'the page sets a CSRF cookie and field');
  const posted = await fetch(link, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded', cookie },
    body: new URLSearchParams({ csrf, ...fields }).toString(),
    redirect: 'manual',
  });
  return posted.status;
}

/** An SDK v1 client over stateless HTTP whose responses to the server's requests can be awaited once posted. */
async function connect(url: string, elicitation: Record<string, unknown>) {
  const client = new ClientV1({ name: 'v1-url-host', version: '1.0.0' }, { capabilities: { elicitation } });
  const transport = new TransportV1(new URL(url));
  const posted: Array<{ id: unknown; result?: unknown }> = [];
  const send = transport.send.bind(transport);
  transport.send = async (m, o) => {
    await send(m, o);
    if ('result' in m || 'error' in m) posted.push(m as never);
  };
  const completed: string[] = [];
  client.setNotificationHandler(ElicitationCompleteNotificationSchema, (n) => void completed.push(n.params.elicitationId));
  await client.connect(transport);
  return { client, posted, completed };
}

/** Once the client's accept of the URL elicitation is posted: nothing recorded, the task still waits for it. */
async function acceptRecordedNothing(store: TaskStore, posted: Array<{ id: unknown }>, migration: string): Promise<TaskRecord> {
  await until('the accept is posted', async () => (posted.some((m) => String(m.id).startsWith('outlast-input-url/')) ? true : undefined));
  const waiting = await parkedApproval(store, migration);
  const r = await row(store, waiting.taskId);
  assert.equal(r.status, 'input_required', 'accept of a URL elicitation only means the person went to the page');
  assert.ok(r.inputRequests.approval, 'the approval is still outstanding');
  return r;
}

describe('URL-mode elicitation on the demo server (SDK v1, stateless HTTP, SQLite)', () => {
  let inline: ServerProcess;
  let handles: ServerProcess;
  let inlineStore: TaskStore;
  let handleStore: TaskStore;
  before(async () => {
    const start = (extra: string[]) => startDemoWithPages(['--park-after-ms', '300', '--queue-poll-ms', '200', ...extra]);
    ({ server: inline, store: inlineStore } = await start([]));
    ({ server: handles, store: handleStore } = await start(['--handle-after-ms', '1000']));
  });
  after(async () => {
    await inlineStore?.close();
    await handleStore?.close();
    await inline?.stop();
    await handles?.stop();
  });

  it('on the inline call: a URL elicitation of the answer link; accept records nothing; the page answer applies the migration', async () => {
    const { client, posted, completed } = await connect(inline.url, { url: {} });
    const asked: ElicitParams[] = [];
    let pageAnswered: Promise<number> | undefined;
    client.setRequestHandler(ElicitRequestSchema, async (req) => {
      const p = req.params as ElicitParams;
      asked.push(p);
      await parkedApproval(inlineStore, '0060_url');
      // The person opens the link once the host has shown it (after the accept is posted), as a browser would.
      pageAnswered = acceptRecordedNothing(inlineStore, posted, '0060_url').then(() => answerOnPage(p.url!, { action: 'accept', approve: 'true', reason: 'url ok' }));
      return { action: 'accept' };
    });
    try {
      const r = (await client.callTool({ name: 'migrate', arguments: { database: 'shop', migration: '0060_url' } }, undefined, { timeout: 60_000 })) as ToolResult;
      assert.equal(await pageAnswered, 200);
      assert.equal(textOf(r as never), 'Applied 0060_url to shop (approved: url ok).');
      assert.equal(asked.length, 1);
      assert.equal(asked[0]!.mode, 'url');
      assert.match(asked[0]!.url!, LINK);
      assert.match(asked[0]!.message, /Apply migration "0060_url" to shop\?/);
      assert.equal(asked[0]!.requestedSchema, undefined);
      assert.equal(typeof asked[0]!.elicitationId, 'string');
      assert.deepEqual(completed, [asked[0]!.elicitationId], 'notifications/elicitation/complete once the page recorded the answer');
    } finally {
      await client.close();
    }
  });

  it('decline of the URL elicitation is recorded as the answer: nothing is migrated', async () => {
    const { client } = await connect(inline.url, { url: {} });
    client.setRequestHandler(ElicitRequestSchema, async (req) => {
      assert.equal((req.params as ElicitParams).mode, 'url');
      await parkedApproval(inlineStore, '0061_url');
      return { action: 'decline' };
    });
    try {
      const r = await client.callTool({ name: 'migrate', arguments: { database: 'shop', migration: '0061_url' } }, undefined, { timeout: 60_000 });
      assert.equal(textOf(r as never), 'Migration 0061_url was not approved (decline); nothing was changed.');
    } finally {
      await client.close();
    }
  });

  it('a response to a URL elicitation that is not accept, decline or cancel is refused with the reason; the task still waits', async () => {
    const { client } = await connect(inline.url, { url: {} });
    const refusals: Array<{ status: number; message: string }> = [];
    client.setRequestHandler(ElicitRequestSchema, async () => {
      const waiting = await parkedApproval(inlineStore, '0065_url');
      const id = `outlast-input-url/${waiting.taskId}/approval`;
      for (const body of [{ jsonrpc: '2.0', id, result: { action: 'maybe' } }, { jsonrpc: '2.0', id, error: { message: 'no code' } }]) {
        const r = await fetch(inline.url, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' }, body: JSON.stringify(body) });
        refusals.push({ status: r.status, message: ((await r.json()) as { error: { message: string } }).error.message });
      }
      const after = await row(inlineStore, waiting.taskId);
      assert.equal(after.status, 'input_required');
      assert.ok(after.inputRequests.approval, 'nothing was recorded');
      return { action: 'cancel' };
    });
    try {
      const r = await client.callTool({ name: 'migrate', arguments: { database: 'shop', migration: '0065_url' } }, undefined, { timeout: 60_000 });
      assert.deepEqual(refusals.map((x) => x.status), [400, 400]);
      assert.match(refusals[0]!.message, /action "accept", "decline" or "cancel"/);
      assert.match(refusals[1]!.message, /numeric code/);
      assert.equal(textOf(r as never), 'Migration 0065_url was not approved (cancel); nothing was changed.');
    } finally {
      await client.close();
    }
  });

  it('a client that declared form mode only still gets the form question, answered in the client', async () => {
    const { client } = await connect(inline.url, { form: {} });
    const asked: ElicitParams[] = [];
    client.setRequestHandler(ElicitRequestSchema, async (req) => {
      asked.push(req.params as ElicitParams);
      await parkedApproval(inlineStore, '0062_form');
      return { action: 'accept', content: { approve: true, reason: 'form ok' } };
    });
    try {
      const r = await client.callTool({ name: 'migrate', arguments: { database: 'shop', migration: '0062_form' } }, undefined, { timeout: 60_000 });
      assert.equal(textOf(r as never), 'Applied 0062_form to shop (approved: form ok).');
      assert.equal(asked.length, 1);
      assert.notEqual(asked[0]!.mode, 'url');
      assert.ok(asked[0]!.requestedSchema, 'the form carries its schema');
    } finally {
      await client.close();
    }
  });

  it('after the handle: the URL elicitation asked on the call is not put again on outlast_task_status; the page answer completes migrate', async () => {
    const { client, posted } = await connect(handles.url, { url: {} });
    const asked: Array<{ params: ElicitParams; onStatus: boolean }> = [];
    let following = false;
    let statusCalls = 0;
    let pageAnswered: Promise<number> | undefined;
    client.setRequestHandler(ElicitRequestSchema, async (req) => {
      const p = req.params as ElicitParams;
      asked.push({ params: p, onStatus: following });
      // The host shows the question once; the person opens the link later, once the wait is parked and the model
      // has followed the handle twice.
      await parkedApproval(handleStore, '0063_url');
      await until('two status calls while the question is open', async () => (statusCalls >= 2 ? true : undefined));
      pageAnswered = acceptRecordedNothing(handleStore, posted, '0063_url').then(() => answerOnPage(p.url!, { action: 'accept', approve: 'true', reason: 'status ok' }));
      return { action: 'accept' };
    });
    try {
      const handle = (await client.callTool({ name: 'migrate', arguments: { database: 'shop', migration: '0063_url' } }, undefined, { timeout: 60_000 })) as ToolResult;
      const taskId = handle.structuredContent?.taskId as string;
      assert.ok(taskId, `a handle: ${textOf(handle as never)}`);
      following = true;
      let r: ToolResult | undefined;
      for (let i = 0; i < 10 && !r; i++) {
        const s = (await client.callTool({ name: 'outlast_task_status', arguments: { taskId, waitSeconds: 2 } }, undefined, { timeout: 60_000 })) as ToolResult;
        statusCalls++;
        if (!s.structuredContent?.taskId) r = s;
      }
      assert.equal(await pageAnswered, 200);
      assert.equal(textOf(r as never), 'Applied 0063_url to shop (approved: status ok).');
      assert.ok(statusCalls >= 2, 'the status tool was called while the question was open');
      assert.equal(asked.length, 1, `one URL elicitation for one question across the call and ${statusCalls} status calls`);
      assert.equal(asked[0]!.onStatus, false, 'asked on the call that became the handle');
      assert.equal(asked[0]!.params.mode, 'url');
      assert.match(asked[0]!.params.url!, LINK);
    } finally {
      await client.close();
    }
  });

  it('SDK v2 on 2026-07-28 without the Tasks extension, URL mode declared: MRTR offers the answer link; the page answer applies the migration', async () => {
    const client = new ClientV2({ name: 'v2-url-host', version: '2.0.0' }, { capabilities: { elicitation: { url: {} } }, versionNegotiation: { mode: { pin: '2026-07-28' } } } as never);
    const asked: ElicitParams[] = [];
    let pageAnswered: Promise<number> | undefined;
    // The retry with the accept leaves the task input_required (a form answer without content would be refused).
    client.setRequestHandler('elicitation/create' as never, (async (req: { params: ElicitParams }) => {
      asked.push(req.params);
      const waiting = await parkedApproval(inlineStore, '0064_url');
      // The person answers on the page once the retry (with this accept) is waiting for it.
      pageAnswered = until('the retry carries the accept', async () => (retried ? true : undefined))
        .then(() => row(inlineStore, waiting.taskId))
        .then((r) => {
          assert.equal(r.status, 'input_required');
          return answerOnPage(req.params.url!, { action: 'accept', approve: 'true', reason: 'mrtr ok' });
        });
      return { action: 'accept' };
    }) as never);
    const transport = new TransportV2(new URL(inline.url));
    let retried = false;
    const send = transport.send.bind(transport);
    transport.send = async (m: any, o?: any) => {
      if (m?.method === 'tools/call' && m.params?.inputResponses) retried = true;
      return send(m, o);
    };
    await client.connect(transport);
    try {
      const r = await client.callTool({ name: 'migrate', arguments: { database: 'shop', migration: '0064_url' } }, { timeout: 60_000 } as never);
      assert.equal(await pageAnswered, 200);
      assert.equal(textOf(r as never), 'Applied 0064_url to shop (approved: mrtr ok).');
      assert.equal(asked.length, 1, 'the accepted URL question is not offered again while the retry waits');
      assert.equal(asked[0]!.mode, 'url');
      assert.match(asked[0]!.url!, LINK);
    } finally {
      await client.close();
    }
  });
});
