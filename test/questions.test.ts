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
import type { TaskStore } from '../src/store/types.js';
import { ROOT, startServer, tempDir, textOf, type ServerProcess } from './helpers.js';
import { parkedApproval } from './questions-helpers.js';

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
