/**
 * MCP Events on PostgreSQL with two real replicas: a webhook subscribed on one replica is delivered, signed, for a task
 * finished on the other; a question (parked, answered later) is seen as outlast.task.input_required by poll and
 * webhook, and outlast.task.status follows that one task through every change. A server without --events answers
 * events/* with -32601.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Webhook } from 'standardwebhooks';
import { callTool, freshSchema, pgStoreUrl, ROOT, rpc, sleep, startServer, TASKS_CAPS, tempDir, until, type ServerProcess } from './helpers.js';

const MODULE = join(ROOT, 'dist', 'test', 'events-module.js');

/** The deployment's public address the answer links are built on (never fetched: the test opens the path on a replica). */
const PUBLIC_URL = 'https://outlast.example/';

describe('MCP Events on PostgreSQL, two replicas', () => {
  const servers: ServerProcess[] = [];
  const hits: Array<{ headers: Record<string, string>; body: string; json: any }> = [];
  const receiver = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      const json = JSON.parse(body);
      if (json.type === 'verification') return res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ challenge: json.challenge }));
      hits.push({ headers: req.headers as Record<string, string>, body, json });
      res.writeHead(204).end();
    });
  });
  let hook = '';
  const alice = { token: 'ta' };
  before(async () => {
    await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
    hook = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/pg`;
    const args = ['--store', pgStoreUrl(freshSchema('ev')), '--events', '--events-allow-host', '127.0.0.1', '--bearer', 'ta=alice', '--bearer', 'tb=bob', '--park-after-ms', '200', '--handles', '--public-url', PUBLIC_URL];
    servers.push(await startServer(args, { module: MODULE }));
    servers.push(...(await Promise.all([startServer(args, { module: MODULE }), startServer(['--store', `sqlite:${join(tempDir(), 't.db')}`], { module: MODULE })])));
  });
  after(async () => {
    receiver.closeAllConnections();
    receiver.close();
    for (const s of servers) await s.stop('SIGTERM');
  });

  it('a task finished on the other replica is delivered, signed; input_required and status are seen by poll and webhook', async () => {
    const secret = `whsec_${randomBytes(32).toString('base64')}`;
    const sub = await rpc(servers[0]!.url, 'events/subscribe', { name: 'outlast.task.finished', arguments: {}, delivery: { mode: 'webhook', url: hook, secret }, cursor: null }, alice);
    assert.equal(sub.error, undefined, JSON.stringify(sub.error));
    const asks = await rpc(servers[0]!.url, 'events/subscribe', { name: 'outlast.task.input_required', arguments: { tool: 'ask' }, delivery: { mode: 'webhook', url: hook, secret }, cursor: null }, alice);
    assert.equal(asks.error, undefined);
    const done = await callTool(servers[1]!.url, 'work', { key: 'pg', ms: 0 }, { ...alice, caps: TASKS_CAPS });
    const bobs = await callTool(servers[1]!.url, 'work', { key: 'bob', ms: 0 }, { token: 'tb', caps: TASKS_CAPS });
    const got = await until('the delivery', () => hits.find((h) => h.json.data?.taskId === done.result.taskId));
    const body = new Webhook(secret).verify(got.body, got.headers) as any;
    assert.equal(body.data.status, 'completed');

    const cursor = (await rpc(servers[1]!.url, 'events/poll', { name: 'outlast.task.input_required', arguments: {}, cursor: null }, alice)).result.cursor;
    const created = await callTool(servers[1]!.url, 'ask', {}, { ...alice, caps: TASKS_CAPS });
    const taskId = created.result.taskId as string;
    assert.ok(taskId);
    const status = await rpc(servers[0]!.url, 'events/poll', { name: 'outlast.task.status', arguments: { taskId }, cursor: '0', maxEvents: 1 }, alice);
    const polled = await rpc(servers[0]!.url, 'events/poll', { name: 'outlast.task.input_required', arguments: {}, cursor, timeoutMs: 10_000 }, alice);
    assert.equal(polled.result.events.length, 1, JSON.stringify(polled.result));
    const ev = polled.result.events[0];
    assert.equal(ev.data.taskId, taskId);
    const { answerUrl, ...asked } = ev.data.inputRequests.deploy;
    assert.deepEqual(asked, { method: 'elicitation/create', message: 'Deploy now?' });
    // With answer pages on, the event carries the question's link, and the link opens the answer form on any replica.
    assert.match(answerUrl, /^https:\/\/outlast\.example\/answer\//);
    const page = await fetch(new URL(new URL(answerUrl).pathname, servers[0]!.url));
    assert.equal(page.status, 200);
    assert.match(await page.text(), /Deploy now\?/);
    const hooked = await until('the input_required webhook', () => hits.find((h) => h.json.name === 'outlast.task.input_required' && h.json.data.taskId === taskId));
    assert.equal(hooked.json.eventId, ev.eventId, 'poll and webhook name the same event');
    // Answer after the wait is parked, as a person would; then the status stream of that task shows every change.
    await sleep(400);
    const answered = await rpc(servers[1]!.url, 'tasks/update', { taskId, inputResponses: { deploy: { action: 'accept', content: { ok: true } } } }, { ...alice, caps: TASKS_CAPS });
    assert.equal(answered.error, undefined, JSON.stringify(answered.error));
    await until('the finished webhook of the asked task', () => hits.find((h) => h.json.name === 'outlast.task.finished' && h.json.data.taskId === taskId));
    const all = await rpc(servers[0]!.url, 'events/poll', { name: 'outlast.task.status', arguments: { taskId }, cursor: status.result.cursor }, alice);
    const seen = [...status.result.events, ...all.result.events].map((e: any) => e.data.status);
    assert.deepEqual(seen, ['input_required', 'working', 'completed'], 'every change of that task, in order');
    assert.equal(hits.filter((h) => h.json.data?.taskId === bobs.result.taskId).length, 0, "bob's task never reached alice's webhook");
    // Someone else's task reads like an unknown one.
    const foreign = await rpc(servers[0]!.url, 'events/poll', { name: 'outlast.task.status', arguments: { taskId }, cursor: null }, { token: 'tb' });
    assert.equal(foreign.error?.code, -32602);
    assert.match(foreign.error!.message, /Unknown task/);
  });

  it('a server without --events answers events/* with -32601 and does not advertise them', async () => {
    const plain = servers[2]!;
    const r = await rpc(plain.url, 'events/list', {});
    assert.equal(r.error?.code, -32601);
    const d = await rpc(plain.url, 'server/discover', {});
    assert.equal(d.result.capabilities.events, undefined);
  });
});
