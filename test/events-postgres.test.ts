/**
 * MCP Events on PostgreSQL with two real replicas (the suite is test/replica-suites.ts's, run through the pooler too):
 * a webhook subscribed on one replica is delivered, signed, for a task finished on the other; a question (parked,
 * answered later) is seen as outlast.task.input_required by poll and webhook, and outlast.task.status follows that one
 * task through every change. A task finished on a replica that does not deliver wakes the replicas that do through the
 * bus: its webhook arrives long before their loop's next round, once. A replica killed after its task's terminal
 * commit (which claimed the webhook for it) and before its POST: the claim lapses and the other replica delivers it,
 * once. A server without --events answers events/* with -32601.
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
import { PG_URL, TASKS_CAPS, callTool, freshSchema, pgStoreUrl, rpc, sleep, startServer, tempDir, until, type ServerProcess } from './helpers.js';
import { EVENTS_MODULE, eventsSuite } from './replica-suites.js';
import { receiver } from './webhook-receiver.js';
import pg from 'pg';

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

describe('MCP Events: a replica killed between its commit and its POST', () => {
  it('the task it finished is delivered by the other replica once its claim lapses, once, signed', async () => {
    const schema = freshSchema('evkill');
    const hooks = receiver();
    await hooks.start();
    // `db` holds the lock in a transaction; `watch` looks at the server from outside it (pg_stat_activity is read once
    // per transaction).
    const [db, watch] = [new pg.Client({ connectionString: PG_URL }), new pg.Client({ connectionString: PG_URL })];
    await db.connect();
    await watch.connect();
    const args = ['--store', pgStoreUrl(schema), '--events', '--events-allow-host', '127.0.0.1', '--events-timeout-ms', '1000', '--bearer', 'ta=alice'];
    const servers: ServerProcess[] = [await startServer(args, { module: EVENTS_MODULE }), await startServer(args, { module: EVENTS_MODULE })];
    try {
      const secret = `whsec_${randomBytes(32).toString('base64')}`;
      const sub = await rpc(servers[0]!.url, 'events/subscribe', { name: TASK_FINISHED, arguments: {}, cursor: null, delivery: { mode: 'webhook', url: `${hooks.base}/kill`, secret } }, { token: 'ta' });
      assert.equal(sub.error, undefined, JSON.stringify(sub.error));
      // The change's log row cannot be written while this lock is held: the finishing statement waits inside the database.
      await db.query('BEGIN');
      await db.query(`LOCK TABLE ${schema}.event_log IN EXCLUSIVE MODE`);
      const call = await callTool(servers[1]!.url, 'work', { key: 'kill', ms: 0 }, { token: 'ta', caps: TASKS_CAPS });
      const taskId = call.result.taskId as string;
      assert.ok(taskId, JSON.stringify(call));
      await until('the finishing statement waiting on the lock', async () =>
        (await watch.query(`SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%UPDATE%tasks SET status%' AND position($1 IN query) > 0`, [schema])).rowCount, 10_000);
      const owner = (await db.query<{ owner: string; pid: number }>(`SELECT t.owner, r.pid FROM ${schema}.tasks t JOIN ${schema}.replicas r ON r.replica_id = t.owner WHERE t.task_id = $1`, [taskId])).rows[0]!;
      const victim = servers.find((s) => s.pid === owner.pid)!;
      assert.ok(victim, 'the replica running the task is one of the two');
      await victim.stop('SIGKILL');
      // Released: the statement of the dead replica goes on and commits (the database does not know its client is gone).
      await db.query('ROLLBACK');
      const row = await until('the commit of the dead replica', async () =>
        (await db.query<{ status: string; claimed_by: string | null; attempts: number }>(
          `SELECT t.status, d.claimed_by, d.attempts FROM ${schema}.tasks t JOIN ${schema}.event_log l ON l.task_id = t.task_id JOIN ${schema}.event_deliveries d ON d.seq = l.seq WHERE t.task_id = $1`, [taskId])).rows[0], 10_000);
      assert.deepEqual([row.status, row.claimed_by, row.attempts], ['completed', owner.owner, 1], 'committed with its delivery claimed by the replica that is gone');
      const hit = await until('the delivery by the other replica', () => hooks.received('/kill', secret).find((h) => h.json.data?.taskId === taskId), 20_000);
      assert.equal(hit.json.data.status, 'completed');
      await sleep(500);
      assert.equal(hooks.received('/kill', secret).length, 1, 'delivered once');
      const settled = (await db.query<{ state: string; attempts: number }>(`SELECT d.state, d.attempts FROM ${schema}.event_deliveries d JOIN ${schema}.event_log l ON l.seq = d.seq WHERE l.task_id = $1`, [taskId])).rows[0]!;
      assert.deepEqual([settled.state, settled.attempts], ['delivered', 2], 'the lapsed claim counted as an attempt');
    } finally {
      await db.query('ROLLBACK').catch(() => undefined);
      await db.end();
      await watch.end();
      for (const s of servers) await s.stop('SIGKILL');
      hooks.close();
    }
  });
});
