/**
 * The subscriber's side of MCP Events: TaskClient.subscribeWebhook with a receiver built from webhookReceiver on a
 * real node:http server (verifies, answers the challenge, drops a redelivery, refuses a forged body), and
 * `outlast call --notify URL --detach`, whose finished task arrives at the receiver after the CLI has exited.
 */
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Webhook } from 'standardwebhooks';
import { TaskClient, generateWebhookSecret, webhookReceiver, type WebhookEvent } from '../src/client/index.js';
import { ROOT, sleep, startServer, tempDir, until, type ServerProcess } from './helpers.js';
import { runCli } from './client-helpers.js';

const MODULE = join(ROOT, 'dist', 'test', 'events-module.js');

describe('MCP Events: client side', () => {
  let server: ServerProcess;
  const secret = generateWebhookSecret();
  const received: WebhookEvent[] = [];
  const receiver = createServer(webhookReceiver({ secret, onEvent: (e) => void received.push(e) }));
  let hook = '';
  before(async () => {
    await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
    hook = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
    server = await startServer(['--store', `sqlite:${join(tempDir(), 'tasks.db')}`, '--events', '--events-allow-host', '127.0.0.1', '--bearer', 'ta=alice',
      '--dashboard', '--operator', 'optoken-1=ops', '--operator-readonly', 'rotoken-1=viewer'], { module: MODULE });
  });
  after(async () => {
    receiver.closeAllConnections();
    receiver.close();
    await server.stop('SIGTERM');
  });

  it('TaskClient subscribes a webhook; the receiver verifies, answers the challenge, drops redeliveries, refuses forgeries', async () => {
    assert.match(secret, /^whsec_/);
    const client = new TaskClient({ url: server.url, bearer: 'ta' });
    try {
      const sub = await client.subscribeWebhook({ url: hook, secret, arguments: { tool: 'work' } });
      assert.match(sub.id, /^sub_/);
      const r = await client.callTool('work', { key: 'c1', ms: 1200 });
      assert.equal(r.isError, undefined);
      const e = await until('the delivery', () => received.find((x) => x.data.tool === 'work'));
      assert.equal(e.name, 'outlast.task.finished');
      assert.equal(e.subscriptionId, sub.id);
      // A redelivery of the same webhook-id is acknowledged and not handed on again; a forged body is refused.
      const body = JSON.stringify({ eventId: e.eventId, name: e.name, timestamp: e.timestamp, data: e.data });
      const sign = (b: string, id: string) => ({ 'webhook-id': id, 'webhook-timestamp': String(Math.floor(Date.now() / 1000)), 'webhook-signature': new Webhook(secret).sign(id, new Date(), b), 'x-mcp-subscription-id': sub.id });
      const again = await fetch(hook, { method: 'POST', headers: sign(body, e.eventId), body });
      assert.equal(again.status, 200);
      const forged = await fetch(hook, { method: 'POST', headers: sign(body, 'evt_other'), body: body.replace('completed', 'failed') });
      assert.equal(forged.status, 401);
      assert.equal(received.filter((x) => x.eventId === e.eventId).length, 1);
      await client.unsubscribeWebhook(sub);
    } finally {
      await client.close();
    }
  });

  it('outlast call --notify URL --detach: the task finishes after the CLI exits and the receiver is told', async () => {
    const cli = runCli(['call', server.url, 'work', '{"key":"cli","ms":1500}', '--bearer', 'ta', '--detach', '--notify', hook, '--notify-secret', secret]);
    const { code } = await cli.exited;
    assert.equal(code, 0, cli.stderr());
    const taskId = cli.stdout().trim();
    assert.match(cli.stderr(), new RegExp(`notify: ${hook.replace(/[/.]/g, '\\$&')} subscribed \\(sub_[0-9a-f]+\\) to task ${taskId}`));
    const e = await until('the CLI task\'s delivery', () => received.find((x) => x.data.taskId === taskId));
    assert.equal(e.data.status, 'completed');
    const bad = runCli(['call', server.url, 'work', '{"key":"bad","ms":1500}', '--bearer', 'ta', '--detach', '--notify', 'ftp://nowhere', '--notify-secret', secret]);
    await bad.exited;
    assert.match(bad.stderr(), /notify: could not subscribe ftp:\/\/nowhere: .*https/);
  });

  it('dashboard: subscriptions per principal with their delivery state; an operator deactivates one, a viewer cannot', async () => {
    const client = new TaskClient({ url: server.url, bearer: 'ta' });
    const sub = await client.subscribeWebhook({ url: `${hook}/dash`, secret, arguments: { tool: 'big' } });
    await client.close();
    const dash = server.url.replace(/\/mcp$/, '/dashboard');
    const page = async (token: string) => (await fetch(`${dash}/subscriptions?principal=alice`, { headers: { authorization: `Bearer ${token}` } })).text();
    const before = await page('optoken-1');
    assert.match(before, new RegExp(`data-subscription="${sub.id}"[\\s\\S]*?alice[\\s\\S]*?outlast.task.finished[\\s\\S]*?active`));
    assert.doesNotMatch(await page('rotoken-1'), /data-action="deactivate"/, 'a viewer gets no button');
    const form = (token: string) => ({ method: 'POST', headers: { authorization: `Bearer ${token}`, 'content-type': 'application/x-www-form-urlencoded' }, body: '', redirect: 'manual' as const });
    assert.equal((await fetch(`${dash}/subscriptions/${sub.id}/deactivate`, form('rotoken-1'))).status, 403, 'a viewer may not act');
    assert.match(await page('optoken-1'), new RegExp(`data-subscription="${sub.id}"[\\s\\S]*?>active<`));
    assert.equal((await fetch(`${dash}/subscriptions/${sub.id}/deactivate`, form('optoken-1'))).status, 303);
    assert.match(await page('optoken-1'), new RegExp(`data-subscription="${sub.id}"[\\s\\S]*?deactivated by ops`));
    // Deactivated: a finished big task is not delivered there.
    const c2 = new TaskClient({ url: server.url, bearer: 'ta' });
    await c2.callTool('big', {});
    await c2.close();
    await sleep(800);
    assert.equal(received.filter((x) => x.data.tool === 'big').length, 0);
  });
});
