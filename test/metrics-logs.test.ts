/**
 * Metrics, logs and pushes of a real `outlast serve`: Prometheus text at /metrics after a scripted run, one JSON
 * object per log line with the replica, a client's malformed requests logged at info (never error), and a push to
 * a configured destination that the client library verifies.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { TaskClient, verifyWebhook, RpcError } from '../src/client/index.js';
import { sleep, startServer, tempDir, type ServerProcess } from './helpers.js';
import { join } from 'node:path';

describe('metrics, logs and pushes', () => {
  const secret = `whsec_${randomBytes(32).toString('base64')}`;
  const pushes: Array<{ body: string; headers: Record<string, string> }> = [];
  const receiver = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      pushes.push({ body, headers: req.headers as Record<string, string> });
      res.writeHead(200).end();
    });
  });
  let server: ServerProcess;
  before(async () => {
    await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/push`;
    server = await startServer(['--store', `sqlite:${join(tempDir(), 'tasks.db')}`, '--metrics', '--log-format', 'json', '--push-destination', `ci=${url}`, '--push-secret', secret]);
  });
  after(async () => {
    await server?.stop();
    receiver.close();
  });

  it('after a scripted run, /metrics has the transition and tool call counters', async () => {
    const client = new TaskClient({ url: server.url });
    try {
      await client.callTool('greet', { name: 'Ada' });
      await client.callTool('slow_compute', { seconds: 0.4 });
      await client.callTool('slow_compute', { seconds: 0.4 });
    } finally {
      await client.close();
    }
    const text = await (await fetch(server.url.replace(/\/mcp$/, '/metrics'))).text();
    const value = (re: RegExp) => Number(re.exec(text)?.[1] ?? NaN);
    assert.equal(value(/^outlast_task_transitions_total\{[^}]*gen_ai_tool_name="slow_compute"[^}]*outlast_task_status="completed"[^}]*\} (\d+)/m), 2);
    assert.equal(value(/^outlast_task_transitions_total\{[^}]*gen_ai_tool_name="slow_compute"[^}]*outlast_task_status="working"[^}]*\} (\d+)/m), 2);
    assert.equal(value(/^outlast_tool_calls_total\{[^}]*gen_ai_tool_name="greet"[^}]*outlast_call_mode="inline"[^}]*\} (\d+)/m), 1);
    assert.equal(value(/^outlast_tool_calls_total\{[^}]*gen_ai_tool_name="slow_compute"[^}]*outlast_call_mode="task"[^}]*\} (\d+)/m), 2);
    assert.equal(value(/^outlast_task_duration_count\{[^}]*outlast_task_status="completed"[^}]*\} (\d+)/m), 2);
    assert.match(text, /^mcp_server_operation_duration(_seconds)?_count\{[^}]*mcp_method_name="tools\/call"/m);
    assert.match(text, /^outlast_task_count\{[^}]*outlast_task_status="completed"[^}]*\} \d+/m);
  });

  it('logs are JSON lines with the replica; a burst of malformed requests is logged at info, never as an error', async () => {
    for (let i = 0; i < 20; i++) {
      const res = await fetch(server.url, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2026-07-28' }, body: '{"jsonrpc":"2.0","id":1,"method":"tools/call"}' });
      assert.equal(res.status, 400);
      await res.text();
    }
    await sleep(200);
    const lines = server.stderr().trim().split('\n').map((l) => JSON.parse(l) as { level: string; msg: string; replica?: string });
    const rejected = lines.filter((l) => l.msg === 'client request rejected');
    assert.ok(rejected.length >= 20, `${rejected.length} rejections logged`);
    assert.ok(rejected.every((l) => l.level === 'info' && typeof l.replica === 'string'));
    assert.deepEqual(lines.filter((l) => l.level === 'error'), []);
  });

  it('a caller that asked for pushes gets each state change at its destination, signed; unknown destinations are refused', async () => {
    const client = new TaskClient({ url: server.url, push: 'ci' });
    let taskId: string | undefined;
    try {
      const call = await client.start('slow_compute', { seconds: 0.4 });
      taskId = call.taskId;
      await call.result();
    } finally {
      await client.close();
    }
    const deadline = Date.now() + 10_000;
    let mine: Array<{ data: { taskId: string; status: string } }> = [];
    while (Date.now() < deadline) {
      mine = pushes.map((p) => verifyWebhook(secret, p.body, p.headers) as { type: string; data: { taskId: string; status: string } }).filter((p) => p.data.taskId === taskId);
      if (mine.some((p) => p.data.status === 'completed')) break;
      await sleep(100);
    }
    assert.deepEqual(mine.map((p) => p.data.status), ['completed']);
    const stranger = new TaskClient({ url: server.url, push: 'elsewhere' });
    try {
      await assert.rejects(stranger.callTool('slow_compute', { seconds: 0.4 }), (e: unknown) => e instanceof RpcError && e.code === -32602 && /Unknown push destination "elsewhere" in _meta\["outlast\/push"\]; this server offers: ci/.test(e.message));
    } finally {
      await stranger.close();
    }
  });
});
