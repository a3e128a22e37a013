/**
 * Every question reaches a person, in every host: the demo's `migrate` (policy 'always', asks for approval) called
 * by clients without task support, answered by a person AFTER the wait is parked. SDK v1 with an elicitation handler
 * and plain callTool (the question comes on the call's own stream); an SDK v2 client on 2026-07-28 with elicitation
 * but without the Tasks extension (MRTR input_required, the retry carries the answer).
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Client as ClientV1 } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport as TransportV1 } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import { Client as ClientV2, StreamableHTTPClientTransport as TransportV2 } from '@modelcontextprotocol/client';
import { SqliteTaskStore } from '../src/store/sqlite/index.js';
import type { TaskRecord, TaskStore } from '../src/store/types.js';
import { FIXTURES, ROOT, startServer, tempDir, textOf, type ServerProcess } from './helpers.js';
import { connectV1 } from './generations.js';
import { parkedApproval, until } from './questions-helpers.js';

type ToolResult = { content: Array<{ type: string; text?: string }>; structuredContent?: Record<string, any>; isError?: boolean };

const DEMO = join(ROOT, 'dist', 'demo', 'server.js');
const PARK_AFTER_MS = 300;

describe("the demo's migrate from hosts without task support (one SQLite server)", () => {
  let server: ServerProcess;
  let store: TaskStore;
  before(async () => {
    const path = join(tempDir(), 'demo.db');
    server = await startServer(['--store', `sqlite:${path}`, '--park-after-ms', String(PARK_AFTER_MS), '--queue-poll-ms', '200'], { module: DEMO });
    store = new SqliteTaskStore(path);
    await store.init();
  });
  after(async () => {
    await store?.close();
    await server?.stop();
  });

  it('SDK v1 (2025-11-25), elicitation handler, plain callTool: the approval comes on the call and the migration is applied', async () => {
    const client = new ClientV1({ name: 'v1-host', version: '1.32.2' }, { capabilities: { elicitation: {} } });
    const asked: string[] = [];
    client.setRequestHandler(ElicitRequestSchema, async (req) => {
      asked.push(String(req.params.message));
      await parkedApproval(store, '0050_v1');
      return { action: 'accept', content: { approve: true, reason: 'v1 ok' } };
    });
    await client.connect(new TransportV1(new URL(server.url)));
    try {
      const { tools } = await client.listTools();
      const migrate = tools.find((t) => t.name === 'migrate')!;
      // What tools/list says is what this client can call: SDK v1 refuses a "required" tool when it declared no tasks.
      assert.notEqual((migrate as { execution?: { taskSupport?: string } }).execution?.taskSupport, 'required');
      const r = await client.callTool({ name: 'migrate', arguments: { database: 'shop', migration: '0050_v1' } }, undefined, { timeout: 60_000 });
      assert.equal(textOf(r as never), 'Applied 0050_v1 to shop (approved: v1 ok).');
      assert.equal(asked.length, 1);
      assert.match(asked[0]!, /Apply migration "0050_v1" to shop\?/);
    } finally {
      await client.close();
    }
  });

  it('SDK v2 on 2026-07-28, elicitation declared, no Tasks extension: MRTR input_required, the retry applies the migration', async () => {
    const client = new ClientV2({ name: 'v2-host', version: '2.0.0' }, { capabilities: { elicitation: {} }, versionNegotiation: { mode: { pin: '2026-07-28' } } } as never);
    const asked: string[] = [];
    client.setRequestHandler('elicitation/create' as never, (async (req: { params: { message: string } }) => {
      asked.push(String(req.params.message));
      await parkedApproval(store, '0051_v2');
      return { action: 'accept', content: { approve: true, reason: 'v2 ok' } };
    }) as never);
    await client.connect(new TransportV2(new URL(server.url)));
    try {
      const r = await client.callTool({ name: 'migrate', arguments: { database: 'shop', migration: '0051_v2' } }, { timeout: 60_000 } as never);
      assert.equal(textOf(r as never), 'Applied 0051_v2 to shop (approved: v2 ok).');
      assert.equal(asked.length, 1);
    } finally {
      await client.close();
    }
  });
});

const OPERATOR = 'operator-token-questions';

describe("answeredBy: who may answer (fixture durable_input, SDK v1 without elicitation)", () => {
  let server: ServerProcess;
  let store: TaskStore;
  before(async () => {
    const path = join(tempDir(), 'answered-by.db');
    server = await startServer(['--store', `sqlite:${path}`, '--park-after-ms', String(PARK_AFTER_MS), '--handle-after-ms', '800', '--queue-poll-ms', '200',
      '--dashboard', '--operator', `${OPERATOR}=olga`], { module: FIXTURES });
    store = new SqliteTaskStore(path);
    await store.init();
  });
  after(async () => {
    await store?.close();
    await server?.stop();
  });

  async function parked(taskId: string): Promise<TaskRecord> {
    return until(`task ${taskId} waits parked`, async () => {
      const l = await store.get(taskId);
      return l.state === 'found' && l.record.inputRequests.answer && l.record.parkedAt !== null && l.record.owner === null ? l.record : undefined;
    });
  }

  it("'any': the model passes on the user's answer with outlast_task_answer and the task completes", async () => {
    const { client, close } = await connectV1(server.url);
    try {
      const handle = (await client.callTool({ name: 'durable_input', arguments: { kind: 'elicitation', message: 'Which region?', answeredBy: 'any' } })) as ToolResult;
      const taskId = handle.structuredContent!.taskId as string;
      assert.match(textOf(handle as never), /pass it on with outlast_task_answer/);
      assert.deepEqual(handle.structuredContent!.questions.map((q: { key: string; answeredBy: string }) => [q.key, q.answeredBy]), [['answer', 'any']]);
      await parked(taskId);
      const off = (await client.callTool({ name: 'outlast_task_answer', arguments: { taskId, key: 'answer', content: { answer: 3 } } })) as ToolResult;
      assert.equal(off.isError, true, 'a number where the question wants a string');
      assert.match(textOf(off as never), /answer must be a string.*Nothing was recorded/);
      const ok = (await client.callTool({ name: 'outlast_task_answer', arguments: { taskId, key: 'answer', content: { answer: 'eu-west' } } })) as ToolResult;
      assert.equal(ok.isError, undefined, textOf(ok as never));
      let last: ToolResult | undefined;
      await until('the task completes', async () => {
        last = (await client.callTool({ name: 'outlast_task_status', arguments: { taskId } })) as ToolResult;
        return last.structuredContent?.taskId ? undefined : last;
      }, 30_000);
      assert.match(textOf(last as never), /^elicitation answered: eu-west/);
    } finally {
      await close();
    }
  });

  it("'person' (the default): outlast_task_answer is refused with the reason, and the task is untouched", async () => {
    const { client, close } = await connectV1(server.url);
    try {
      const handle = (await client.callTool({ name: 'durable_input', arguments: { kind: 'elicitation', message: 'Really delete?' } })) as ToolResult;
      const taskId = handle.structuredContent!.taskId as string;
      await parked(taskId);
      const refused = (await client.callTool({ name: 'outlast_task_answer', arguments: { taskId, key: 'answer', content: { answer: 'yes' } } })) as ToolResult;
      assert.equal(refused.isError, true);
      assert.match(textOf(refused as never), /must be answered by the user themself/);
      const l = await store.get(taskId);
      assert.ok(l.state === 'found' && l.record.status === 'input_required' && l.record.inputResponses.answer === undefined, 'nothing recorded');
      await client.callTool({ name: 'outlast_task_cancel', arguments: { taskId } });
    } finally {
      await close();
    }
  });

  it("'operator': the dashboard's waiting question is answered by an operator, logged with the operator's name", async () => {
    const { client, close } = await connectV1(server.url);
    try {
      const handle = (await client.callTool({ name: 'durable_input', arguments: { kind: 'elicitation', message: 'Open the firewall?', answeredBy: 'operator' } })) as ToolResult;
      const taskId = handle.structuredContent!.taskId as string;
      assert.match(textOf(handle as never), /an operator answers it on the server's dashboard/);
      await parked(taskId);
      const refused = (await client.callTool({ name: 'outlast_task_answer', arguments: { taskId, key: 'answer', content: { answer: 'yes' } } })) as ToolResult;
      assert.equal(refused.isError, true, 'the model may not answer an operator question');
      const base = new URL(server.url).origin + '/dashboard';
      const login = await fetch(`${base}/login`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded', origin: new URL(server.url).origin }, body: `token=${OPERATOR}`, redirect: 'manual' });
      const cookie = (login.headers.get('set-cookie') ?? '').split(';')[0]!;
      const page = await (await fetch(`${base}/tasks/${taskId}`, { headers: { cookie } })).text();
      assert.match(page, /data-testid="operator-answer"/);
      const csrf = /name="_csrf" value="([^"]+)"/.exec(page)![1]!;
      const posted = await fetch(`${base}/tasks/${taskId}/answer`, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded', cookie, origin: new URL(server.url).origin },
        body: new URLSearchParams({ _csrf: csrf, key: 'answer', answer: 'opened by ops', action: 'accept' }).toString(),
        redirect: 'manual',
      });
      assert.equal(posted.status, 303, await posted.clone().text());
      let last: ToolResult | undefined;
      await until('the task completes', async () => {
        last = (await client.callTool({ name: 'outlast_task_status', arguments: { taskId } })) as ToolResult;
        return last.structuredContent?.taskId ? undefined : last;
      }, 30_000);
      assert.match(textOf(last as never), /^elicitation answered: opened by ops/);
      await until('the answer is logged with the operator', async () => (/operator answered a question.*olga|olga.*operator answered a question/.test(server.stderr()) ? true : undefined), 5000);
    } finally {
      await close();
    }
  });
});
