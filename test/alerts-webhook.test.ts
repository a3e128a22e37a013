/**
 * Alerts reach someone: a failure nobody reads past a short grace is delivered as exactly one accepted Standard
 * Webhook (verified with the `standardwebhooks` package), even when the receiver fails the first attempt and the
 * replica delivering the second is killed with SIGKILL before the receiver answers it. Two real processes on one
 * SQLite file; the receiver is a real HTTP server.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import Database from 'better-sqlite3';
import { Webhook } from 'standardwebhooks';
import { verifyWebhook } from '../src/client/index.js';
import { callTool, sleep, startServer, tempDir, until, type ServerProcess } from './helpers.js';

interface Delivery {
  headers: IncomingMessage['headers'];
  body: string;
  type: string;
  answered?: number;
}

describe('alert webhooks', () => {
  const servers: ServerProcess[] = [];
  const held: ServerResponse[] = [];
  let receiver: ReturnType<typeof createServer> | undefined;
  after(async () => {
    for (const r of held) r.destroy();
    receiver?.closeAllConnections();
    receiver?.close();
    for (const s of servers) await s.stop('SIGKILL');
  });

  it('an unread failure is delivered once, signed, through a failed attempt and the SIGKILL of the delivering replica', async () => {
    const secret = `whsec_${randomBytes(32).toString('base64')}`;
    const deliveries: Delivery[] = [];
    let unreadAttempts = 0;
    receiver = createServer((req, res) => {
      let body = '';
      req.on('data', (c) => (body += c));
      req.on('end', () => {
        const d: Delivery = { headers: req.headers, body, type: JSON.parse(body).type };
        deliveries.push(d);
        const answer = (status: number) => {
          d.answered = status;
          res.writeHead(status).end();
        };
        if (d.type !== 'outlast.task.failed_unread') return answer(204);
        unreadAttempts++;
        if (unreadAttempts === 1) return answer(500); // the receiver fails the first attempt
        if (unreadAttempts === 2) return void held.push(res); // never answered: its replica is killed meanwhile
        answer(204);
      });
    });
    await new Promise<void>((r) => receiver!.listen(0, '127.0.0.1', r));
    const hook = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
    const db = join(tempDir(), 'tasks.db');
    const args = ['--store', `sqlite:${db}`, '--dashboard', '--alert-webhook', hook, '--alert-webhook-secret', secret, '--alert-unread-after-ms', '500',
      '--alert-retry-ms', '300', '--alert-timeout-ms', '2000', '--heartbeat-ms', '500', '--lease-ms', '2000'];
    servers.push(await startServer(args), await startServer(args));

    const created = await callTool(servers[0]!.url, 'protocol_error_job', {});
    const taskId = created.result.taskId as string;
    assert.ok(taskId, 'a task was created');
    // Nobody reads it. The second attempt is held open; kill whichever replica holds its claim.
    await until('the second delivery attempt', () => unreadAttempts >= 2);
    const store = new Database(db, { readonly: true });
    const claim = store.prepare(`SELECT a.alert_id, r.pid FROM alerts a JOIN replicas r ON r.replica_id = a.claimed_by WHERE a.kind = 'failed-unread'`).get() as { alert_id: string; pid: number };
    const victim = servers.find((s) => s.pid === claim.pid)!;
    const survivor = servers.find((s) => s !== victim)!;
    assert.ok(victim, 'the claim is held by one of the two replicas');
    await victim.stop('SIGKILL');

    const accepted = await until('an accepted delivery', () => deliveries.find((d) => d.type === 'outlast.task.failed_unread' && d.answered === 204), 40_000);
    await sleep(1500); // nothing more arrives for it
    const attempts = deliveries.filter((d) => d.type === 'outlast.task.failed_unread');
    assert.ok(attempts.length >= 3, `${attempts.length} attempts`);
    assert.equal(attempts.filter((d) => d.answered === 204).length, 1, 'exactly one delivery was accepted');
    assert.deepEqual(new Set(attempts.map((d) => d.headers['webhook-id'])), new Set([claim.alert_id]), 'the same webhook-id on every attempt');

    const payload = new Webhook(secret).verify(accepted.body, accepted.headers as Record<string, string>) as { type: string; data: Record<string, unknown> };
    assert.equal(payload.type, 'outlast.task.failed_unread');
    assert.equal(payload.data.taskId, taskId);
    assert.equal(payload.data.tool, 'protocol_error_job');
    assert.match(String(payload.data.error), /worker pool is unavailable/);
    assert.equal(payload.data.args, undefined, 'thin: no arguments');
    // Outlast's own verifier agrees, and refuses a tampered body.
    assert.deepEqual(verifyWebhook(secret, accepted.body, accepted.headers as Record<string, string>), payload);
    assert.throws(() => verifyWebhook(secret, accepted.body.replace('failed', 'fixed'), accepted.headers as Record<string, string>), /signature/);

    const row = store.prepare(`SELECT state, attempts, last_status FROM alerts WHERE alert_id = ?`).get(claim.alert_id) as { state: string; attempts: number; last_status: number };
    assert.deepEqual([row.state, row.last_status], ['delivered', 204]);
    assert.equal(row.attempts, attempts.length);
    store.close();
    // The survivor noticed the dead replica too: an alert of its own, delivered.
    await until('the replica-lost delivery', () => deliveries.find((d) => d.type === 'outlast.replica.lost' && d.answered === 204), 20_000);
    const page = await (await fetch(survivor.url.replace(/\/mcp$/, '/dashboard/alerts'))).text();
    assert.match(page, new RegExp(`failed-unread[\\s\\S]*${taskId}[\\s\\S]*delivered[\\s\\S]*${attempts.length} attempts · last HTTP 204`));
  });
});
