/**
 * MCP Events on PostgreSQL with two real replicas (the suite is test/replica-suites.ts's, run through the pooler too):
 * a webhook subscribed on one replica is delivered, signed, for a task finished on the other; a question (parked,
 * answered later) is seen as outlast.task.input_required by poll and webhook, and outlast.task.status follows that one
 * task through every change. A task finished on a replica that does not deliver wakes the replicas that do through the
 * bus: its webhook arrives long before their loop's next round, once. A server without --events answers events/* with
 * -32601.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { Webhook } from 'standardwebhooks';
import { EventDelivery } from '../src/ops/events/index.js';
import { silentLogger } from '../src/runtime/types.js';
import { subscriptionId } from '../src/server/events/index.js';
import { TASK_FINISHED } from '../src/store/events.js';
import { PostgresTaskStore } from '../src/store/postgres/index.js';
import { PG_URL, TASKS_CAPS, callTool, freshSchema, pgStoreUrl, rpc, sleep, startServer, tempDir, until } from './helpers.js';
import { EVENTS_MODULE, eventsSuite } from './replica-suites.js';
import { receiver } from './webhook-receiver.js';

eventsSuite('on PostgreSQL', () => ({ storeUrl: pgStoreUrl(freshSchema('ev')), args: [] }));

describe('MCP Events off', () => {
  it('a server without --events answers events/* with -32601 and does not advertise them', async () => {
    const plain = await startServer(['--store', `sqlite:${join(tempDir(), 't.db')}`], { module: EVENTS_MODULE });
    try {
      const r = await rpc(plain.url, 'events/list', {});
      assert.equal(r.error?.code, -32601);
      const d = await rpc(plain.url, 'server/discover', {});
      assert.equal(d.result.capabilities.events, undefined);
    } finally {
      await plain.stop('SIGTERM');
    }
  });
});

describe('MCP Events: the commit wakes the delivery', () => {
  it('a task finished on a replica without --events reaches the webhook long before the loop would claim it, once, though two deliverers were woken', async () => {
    const schema = freshSchema('evwake');
    const hooks = receiver();
    await hooks.start();
    // Two deliverers, each with its own pool and LISTEN/NOTIFY connection, their claim loops 60 s apart: within this
    // test only a signal from the committing replica can start a round.
    const deliverers = [0, 1].map((i) => {
      const store = new PostgresTaskStore({ connection: { connectionString: PG_URL }, schema, poolSize: 2 });
      return { store, bus: store.createSignalBus(), delivery: undefined as EventDelivery | undefined, i };
    });
    const committer = await startServer(['--store', pgStoreUrl(schema), '--bearer', 'ta=alice'], { module: EVENTS_MODULE });
    try {
      for (const d of deliverers) {
        await d.store.init();
        await d.bus.start();
        d.delivery = new EventDelivery({ store: d.store, bus: d.bus, replicaId: `deliverer-${d.i}`, log: silentLogger, policy: { allowHosts: new Set(['127.0.0.1']) }, everyMs: 60_000 });
        d.delivery.start();
      }
      const url = `${hooks.base}/wake`;
      const secret = `whsec_${randomBytes(32).toString('base64')}`;
      const sub = { principal: 'alice', url, name: TASK_FINISHED, args: '{}' } as const;
      await deliverers[0]!.store.events.subscribe({ ...sub, subId: subscriptionId(sub.principal, url, sub.name, sub.args), taskId: null, tool: null, secret, refreshBefore: null, now: Date.now() }, 100);
      const t0 = Date.now();
      const done = await callTool(committer.url, 'work', { key: 'wake', ms: 0 }, { token: 'ta', caps: TASKS_CAPS });
      const taskId = done.result.taskId as string;
      assert.ok(taskId, JSON.stringify(done));
      const hit = await until('the webhook of the task finished on the other replica', () => hits(taskId)[0], 20_000);
      const waited = Date.now() - t0;
      assert.ok(waited < 10_000, `the webhook arrived ${waited} ms after the call, where the loop's next round was 60 s away`);
      const body = new Webhook(secret).verify(hit.body, hit.headers as Record<string, string>) as { data: { status: string } };
      assert.equal(body.data.status, 'completed');
      await sleep(300); // a second deliverer, woken by the same signal, would have sent by now
      assert.equal(hits(taskId).length, 1, 'both deliverers were woken; the claim gave the delivery to one');
    } finally {
      await committer.stop('SIGTERM');
      for (const d of deliverers) {
        await d.delivery?.stop();
        await d.bus.close();
        await d.store.close();
      }
      hooks.close();
    }

    function hits(taskId: string) {
      return hooks.hits.filter((h) => h.json.data?.taskId === taskId);
    }
  });
});
