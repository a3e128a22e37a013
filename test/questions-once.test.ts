/**
 * One question, asked once per person (2025-11-25 handle callers that declared elicitation), over two PostgreSQL
 * replicas: the demo's migrate asks its approval on the call's stream; the host follows the handle with two status
 * calls, the second on the other replica, and neither puts the question again. The person answers once, late (after
 * the wait is parked and both status calls went by), and the migration completes. A second answer to the answered
 * question is refused and records nothing. A stream the client cut (it restarted) gives the question back: the
 * restarted client's status call asks it again. Real clients: SDK v1, and the Vercel AI SDK's MCP client 2.x. The
 * person's hosts carry one bearer token: their principal across connections and restarts (without credentials each
 * connection would be its own session's principal, docs/configuration.md#who-is-anonymous).
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { createMCPClient, ElicitationRequestSchema } from '@ai-sdk/mcp';
import { Client as ClientV1 } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport as TransportV1 } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import { postgresStoreFromUrl } from '../src/store/postgres/index.js';
import type { TaskStore } from '../src/store/types.js';
import { ROOT, freePort, freshSchema, pgStoreUrl, startServer, textOf, type ServerProcess } from './helpers.js';
import { parkedApproval, row, until } from './questions-helpers.js';

const DEMO = join(ROOT, 'dist', 'demo', 'server.js');
type ToolResult = { content: Array<{ type: string; text?: string }>; structuredContent?: Record<string, any>; isError?: boolean };
type Answer = { action: 'accept'; content: { approve: boolean; reason: string } };
/** The person's credentials, the same on every host of theirs. */
const TOKEN = 'tok-person';
const AUTH = { authorization: `Bearer ${TOKEN}` };

/** A host's view of one MCP server: call a tool, and the questions the server put to it. */
interface Host {
  call(name: string, args: Record<string, unknown>): Promise<ToolResult>;
  asked: string[];
  close(): Promise<void>;
}

/** SDK v1 over stateless HTTP; `answer` is what the person does with a question shown to them. */
async function sdkV1(url: string, answer: (message: string) => Promise<Answer>): Promise<Host & { transport: TransportV1 }> {
  const client = new ClientV1({ name: 'v1-host', version: '1.32.2' }, { capabilities: { elicitation: {} } });
  const asked: string[] = [];
  client.setRequestHandler(ElicitRequestSchema, async (req) => {
    asked.push(String(req.params.message));
    return answer(String(req.params.message));
  });
  const transport = new TransportV1(new URL(url), { requestInit: { headers: AUTH } });
  await client.connect(transport);
  return {
    transport,
    asked,
    call: async (name, args) => (await client.callTool({ name, arguments: args }, undefined, { timeout: 120_000 })) as ToolResult,
    close: () => client.close(),
  };
}

/** The Vercel AI SDK's MCP client (2.x) on the 2025-11-25 wire (no server/discover probe), as a chat host runs it. */
async function aiSdk(url: string, answer: (message: string) => Promise<Answer>): Promise<Host> {
  const client = await createMCPClient({ transport: { type: 'http', url, headers: AUTH }, protocolVersionDiscovery: false, clientName: 'ai-sdk-host', capabilities: { elicitation: {} } });
  const asked: string[] = [];
  client.onElicitationRequest(ElicitationRequestSchema, async (req) => {
    asked.push(String(req.params.message));
    return answer(String(req.params.message));
  });
  return {
    asked,
    call: async (name, args) => (await client.callTool({ name, arguments: args, options: { timeout: 120_000 } })) as ToolResult,
    close: () => client.close(),
  };
}

describe('one question, asked once per person, over two PostgreSQL replicas', () => {
  const replicas: ServerProcess[] = [];
  let store: TaskStore;
  before(async () => {
    const storeUrl = pgStoreUrl(freshSchema('once'));
    const start = async () =>
      startServer(['--store', storeUrl, '--bearer', `${TOKEN}=person`, '--port', String(await freePort()), '--park-after-ms', '300', '--handle-after-ms', '800',
        '--heartbeat-ms', '300', '--lease-ms', '2000', '--queue-poll-ms', '200'], { module: DEMO });
    replicas.push(await start(), await start());
    store = postgresStoreFromUrl(storeUrl);
    await store.init();
  });
  after(async () => {
    await store?.close();
    await Promise.all(replicas.map((r) => r.stop()));
  });

  /**
   * The call on the first replica, then status calls on the first and on the second (each waits 2 s), while the
   * person has not answered yet; then the person answers and the host follows until the result.
   */
  async function followOnce(connect: (url: string, answer: (m: string) => Promise<Answer>) => Promise<Host>, migration: string): Promise<{ first: Host; second: Host; taskId: string; result: ToolResult; statusCalls: number }> {
    let statusCalls = 0;
    // The person: sees the question, comes back after the wait is parked and the model followed the task twice.
    const person = async (message: string): Promise<Answer> => {
      assert.match(message, new RegExp(`Apply migration "${migration}"`));
      await parkedApproval(store, migration);
      await until('two status calls while the question is open', async () => (statusCalls >= 2 ? true : undefined), 60_000);
      return { action: 'accept', content: { approve: true, reason: `once ${migration}` } };
    };
    const first = await connect(replicas[0]!.url, person);
    const second = await connect(replicas[1]!.url, person);
    const handle = await first.call('migrate', { database: 'shop', migration });
    const taskId = handle.structuredContent?.taskId as string;
    assert.ok(taskId, `a handle: ${textOf(handle as never)}`);
    assert.equal((await row(store, taskId)).status, 'input_required');
    const status = async (host: Host) => {
      const r = await host.call('outlast_task_status', { taskId, waitSeconds: 2 });
      statusCalls++;
      return r;
    };
    let result: ToolResult | undefined;
    for (const host of [first, second]) {
      const r = await status(host);
      assert.ok(r.structuredContent?.taskId, 'still waiting for the person');
    }
    result = await until('the migration completes', async () => {
      const r = await status(second);
      return r.structuredContent?.taskId ? undefined : r;
    }, 60_000);
    return { first, second, taskId, result, statusCalls };
  }

  it('SDK v1: one elicitation/create across the call and two status calls on two replicas; a second answer is refused, nothing recorded', async () => {
    const { first, second, taskId, result, statusCalls } = await followOnce(sdkV1, '0090_once_v1');
    try {
      assert.equal(textOf(result as never), 'Applied 0090_once_v1 to shop (approved: once 0090_once_v1).');
      assert.deepEqual([first.asked.length, second.asked.length], [1, 0], `asked once (on the call), not again on ${statusCalls} status calls`);
      // The same client sends a second answer to the same request id: refused, and the recorded answer stays.
      const again = (first as Awaited<ReturnType<typeof sdkV1>>).transport.send({
        jsonrpc: '2.0',
        id: `outlast-input/${taskId}/approval`,
        result: { action: 'accept', content: { approve: false, reason: 'second thoughts' } },
      });
      await assert.rejects(again, /-32602.*Question \\"approval\\" was already answered at .*this answer was not recorded/);
      const r = await row(store, taskId);
      assert.equal(r.status, 'completed');
      assert.deepEqual(r.inputResponses.approval?.response, { action: 'accept', content: { approve: true, reason: 'once 0090_once_v1' } });
    } finally {
      await first.close();
      await second.close();
    }
  });

  it('AI SDK 2.x (2025-11-25): one elicitation/create across the call and two status calls on two replicas', async () => {
    const { first, second, result, statusCalls } = await followOnce(aiSdk, '0091_once_ai');
    try {
      assert.equal(textOf(result as never), 'Applied 0091_once_ai to shop (approved: once 0091_once_ai).');
      assert.deepEqual([first.asked.length, second.asked.length], [1, 0], `asked once (on the call), not again on ${statusCalls} status calls`);
    } finally {
      await first.close();
      await second.close();
    }
  });

  it('a stream the client cut gives the question back: the restarted client is asked again on its status call, and answers', async () => {
    const migration = '0092_cut';
    // The first host shows the question, then goes away before anyone answers (its process restarts).
    const gone = await sdkV1(replicas[0]!.url, () => new Promise<Answer>(() => undefined));
    const call = gone.call('migrate', { database: 'shop', migration }).catch((e: unknown) => e);
    await until('the question reaches the first host', async () => (gone.asked.length === 1 ? true : undefined));
    await gone.close();
    await call;
    const waiting = await parkedApproval(store, migration);
    // The restarted host follows the task (its id from the host's journal) on the other replica.
    const restarted = await sdkV1(replicas[1]!.url, async () => ({ action: 'accept', content: { approve: true, reason: 'after restart' } }));
    try {
      const result = await until('the migration completes', async () => {
        const r = await restarted.call('outlast_task_status', { taskId: waiting.taskId, waitSeconds: 5 });
        return r.structuredContent?.taskId ? undefined : r;
      }, 60_000);
      assert.equal(textOf(result as never), 'Applied 0092_cut to shop (approved: after restart).');
      assert.deepEqual([gone.asked.length, restarted.asked.length], [1, 1], 'asked again once the stream that asked was cut');
    } finally {
      await restarted.close();
    }
  });
});
