/**
 * The 2025-11-25 wire in-process (serveHttp) where a test must look inside: a blocked tasks/result lets go of
 * everything it held once the client goes away; handle tool names cannot collide silently. And over stdio, where
 * a session carries the input request and its answer.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { McpServer } from '@modelcontextprotocol/server';
import { Client as ClientV1 } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import { Outlast } from '../src/server/outlast.js';
import { serveHttp } from '../src/server/http.js';
import { LocalSignalBus } from '../src/store/local-bus.js';
import { SqliteTaskStore } from '../src/store/sqlite/index.js';
import { BIN, FIXTURES, sleep, tempDir, textOf } from './helpers.js';

async function until(pred: () => boolean, timeoutMs = 5000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!pred()) {
    if (Date.now() > end) assert.fail('condition not reached in time');
    await sleep(20);
  }
}

describe('2025-11-25 wire in-process', () => {
  it('a blocked tasks/result is released when the client goes away: nothing stays subscribed', async () => {
    const bus = new LocalSignalBus();
    const outlast = new Outlast({ store: new SqliteTaskStore(join(tempDir(), 't.db')), bus });
    outlast.tool('forever', { policy: 'always' }, async (_a, ctx) => new Promise((_r, reject) => ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason))));
    const http = await serveHttp(outlast, () => new McpServer({ name: 't', version: '0' }), { port: 0 });
    try {
      const headers = { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-11-25' };
      const post = (body: object, signal?: AbortSignal) => fetch(http.url, { method: 'POST', headers, body: JSON.stringify(body), ...(signal ? { signal } : {}) });
      const created = await (await post({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'forever', arguments: {}, task: {} } })).text();
      const taskId = /"taskId":"([^"]+)"/.exec(created)![1]!;
      const baseline = bus.size;
      const ac = new AbortController();
      const res = await post({ jsonrpc: '2.0', id: 2, method: 'tasks/result', params: { taskId } }, ac.signal);
      assert.equal(res.status, 200);
      await until(() => bus.size > baseline);
      ac.abort();
      await until(() => bus.size === baseline);
      await outlast.runtime.cancelTask(taskId, 'anonymous');
    } finally {
      await http.close();
      await outlast.stop(500);
    }
  });

  it('a handle tool name that collides with a tool of the server is refused with a clear error', () => {
    const outlast = new Outlast({ store: new SqliteTaskStore(join(tempDir(), 't.db')), handles: { statusTool: 'status' } });
    assert.throws(() => outlast.tool('status', {}, async () => ({ content: [] })), /has the name of a handle tool/);
    const mcp = new McpServer({ name: 't', version: '0' });
    mcp.registerTool('status', {}, () => ({ content: [] }));
    assert.throws(() => outlast.attach(mcp), /The handle tool name "status" is taken by a tool of this server/);
    assert.throws(() => new Outlast({ store: new SqliteTaskStore(join(tempDir(), 't.db')), handles: { statusTool: 'has space' } }), /must be 1-64 letters/);
  });
});

describe('2025-11-25 wire over stdio (a session)', () => {
  it('an input reaches the client through the session and the task completes', async () => {
    const transport = new StdioClientTransport({ command: process.execPath, args: [BIN, 'serve', FIXTURES, '--stdio', '--store', `sqlite:${join(tempDir(), 's.db')}`], stderr: 'ignore' });
    const client = new ClientV1({ name: 'stdio-v1', version: '1' }, { capabilities: { elicitation: {} } });
    client.setRequestHandler(ElicitRequestSchema, async (req) => ({ action: 'accept', content: { answer: `over stdio to "${String(req.params.message)}"` } }));
    await client.connect(transport);
    const pid = transport.pid!;
    try {
      await client.listTools();
      const out: Array<{ type: string; result?: Record<string, any> }> = [];
      for await (const m of client.experimental.tasks.callToolStream({ name: 'ask', arguments: { message: 'Ready?' } })) out.push(m as never);
      assert.deepEqual(out.map((m) => m.type).filter((t) => t !== 'taskStatus'), ['taskCreated', 'result']);
      assert.match(textOf(out[out.length - 1]!.result!), /The answer is: over stdio to "Ready\?"/);
    } finally {
      await client.close();
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        /* already gone */
      }
    }
  });
});
