/**
 * Webhook delivery of a task's output (`outlast.task.output`) with real `outlast serve --events` processes and a real
 * receiver on loopback, every delivery verified with the `standardwebhooks` package. On SQLite (two replicas on one
 * file) and over two PostgreSQL replicas: every line of `emit_output` arrives once, in order, signed, then a signed
 * `terminated` envelope ends the subscription; a 500 is retried under the same webhook-id before the next line goes;
 * `kill -9` of the replica delivering mid-stream: the other goes on from the same line, nothing lost or delivered
 * twice; another principal's task and bad arguments are refused with nothing stored; a receiver behind the retained
 * output gets a `gap` envelope naming `events_gone` and the earliest retained seq, then the rest.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import Database from 'better-sqlite3';
import pg from 'pg';
import { PG_URL, TASKS_CAPS, callTool, freshSchema, getTask, pgStoreUrl, rpc, startServer, tempDir, until, type ServerProcess } from './helpers.js';
import { receiver, type Hit, type Receiver } from './webhook-receiver.js';

const EVENTS_CAPS: Record<string, unknown> = { ...TASKS_CAPS, extensions: { ...TASKS_CAPS.extensions, 'io.modelcontextprotocol/events': {} } };
const ALICE = { token: 'ta', caps: EVENTS_CAPS };
const BOB = { token: 'tb', caps: EVENTS_CAPS };
const FLAGS = ['--events', '--events-allow-host', '127.0.0.1', '--events-retry-ms', '200', '--events-timeout-ms', '2000', '--inline-budget-ms', '200',
  '--bearer', 'ta=alice', '--bearer', 'tb=bob', '--heartbeat-ms', '500', '--lease-ms', '2000'];
const lines = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => `line ${from + i}`);
const secretOf = () => `whsec_${randomBytes(32).toString('base64')}`;

async function startTask(url: string, args: Record<string, unknown>) {
  const c = await callTool(url, 'emit_output', args, ALICE);
  assert.equal(c.result.resultType, 'task', JSON.stringify(c.message).slice(0, 300));
  assert.equal(c.result.eventSource?.name, 'outlast.task.output');
  return c.result as { taskId: string; eventSource: { name: string; input: { taskId: string }; initialCursor: string } };
}

const subscribe = (url: string, hook: string, secret: string, args: Record<string, unknown>, who: { token: string } = ALICE, cursor: string | null = '0') =>
  rpc(url, 'events/subscribe', { name: 'outlast.task.output', arguments: args, cursor, delivery: { mode: 'webhook', url: hook, secret } }, who);

/** Waits for the subscription's end (the `terminated` envelope answered 2xx); then checks what a receiver deduping on
 *  webhook-id sees: each line exactly once accepted, in order, nothing after the end. Returns the accepted POSTs. */
async function delivered(r: Receiver, path: string, secret: string, taskId: string, expected: string[], timeoutMs = 30_000): Promise<Hit[]> {
  await until(`the end of ${path}`, () => r.received(path, secret).find((h) => h.json.type === 'terminated' && h.answered === 200), timeoutMs);
  const all = r.received(path, secret);
  const accepted = all.filter((h) => h.answered !== undefined && h.answered >= 200 && h.answered < 300);
  const ids = accepted.map((h) => String(h.headers['webhook-id']));
  assert.equal(new Set(ids).size, ids.length, `no webhook-id was accepted twice: ${ids.join(' ')}`);
  const items = accepted.filter((h) => h.json.name === 'outlast.task.output');
  assert.deepEqual(items.map((h) => h.json.data.data.text), expected);
  for (const h of items) {
    assert.equal(h.json.data.taskId, taskId);
    assert.equal(h.headers['webhook-id'], `evt_${taskId}_out_${h.json.data.seq}`);
    assert.equal(h.json.cursor, String(h.json.data.seq));
  }
  const end = accepted.at(-1)!;
  assert.equal(end.json.type, 'terminated', 'the terminated envelope is the last thing accepted');
  assert.equal(end.json.error.data.reason, 'task_terminal');
  assert.equal(end.json.error.data.status, 'completed');
  assert.equal(end.json.error.data.latestSeq, Number(expected.at(-1)!.slice('line '.length)));
  return accepted;
}

/** Two replicas on `store` (the flags above) and a receiver, for the suite; every process stopped by its pid after it. */
function useReplicas(store: () => string[]) {
  const r = receiver();
  const servers: ServerProcess[] = [];
  before(async () => {
    await r.start();
    servers.push(await startServer([...store(), ...FLAGS]));
    servers.push(await startServer([...store(), ...FLAGS]));
  });
  after(async () => {
    r.close();
    for (const s of servers) await s.stop('SIGKILL');
  });
  return { r, servers };
}

/** The delivering replica (the one `claimedBy` names while item `heldAt` is held open) killed with SIGKILL: the other
 *  replica must send that item again under its webhook-id, then the rest, each accepted once. */
async function killMidStream(r: Receiver, servers: ServerProcess[], path: string, count: number, heldAt: number, claimedBy: () => Promise<number>): Promise<void> {
  r.plans.set(path, (n) => (n === heldAt ? 'hold' : 200));
  const task = await startTask(servers[0]!.url, { count, intervalMs: 30 });
  await completed(servers[0]!.url, task.taskId);
  const secret = secretOf();
  assert.equal((await subscribe(servers[1]!.url, `${r.base}${path}`, secret, task.eventSource.input)).error, undefined);
  await until('the held attempt', () => r.received(path, secret).length >= heldAt);
  const pid = await claimedBy();
  const victim = servers.find((s) => s.pid === pid)!;
  assert.ok(victim, 'one of the replicas holds the claim');
  await victim.stop('SIGKILL');
  servers.splice(servers.indexOf(victim), 1);
  await delivered(r, path, secret, task.taskId, lines(1, count));
  const again = r.received(path, secret).filter((h) => h.json.data?.seq === heldAt);
  assert.equal(again.length, 2, 'the held line was sent again');
  assert.equal(again[0]!.headers['webhook-id'], again[1]!.headers['webhook-id']);
}

async function completed(url: string, taskId: string): Promise<void> {
  await until('the task to complete', async () => (await getTask(url, taskId, ALICE)).result?.status === 'completed');
}

describe('Task output by webhook on SQLite, two replicas', () => {
  const db = join(tempDir(), 'tasks.db');
  const { r, servers } = useReplicas(() => ['--store', `sqlite:${db}`]);

  it('events/list offers webhook delivery; every line arrives once, in order, signed, then terminated ends the subscription', async () => {
    const list = await rpc(servers[0]!.url, 'events/list', {}, ALICE);
    assert.deepEqual(list.result.events.find((e: { name: string }) => e.name === 'outlast.task.output').delivery, ['poll', 'push', 'webhook']);
    const task = await startTask(servers[1]!.url, { count: 30, intervalMs: 20 });
    const secret = secretOf();
    const sub = await subscribe(servers[0]!.url, `${r.base}/all`, secret, task.eventSource.input, ALICE, task.eventSource.initialCursor);
    assert.equal(sub.error, undefined, JSON.stringify(sub.error));
    assert.match(sub.result.id, /^sub_[0-9a-f]{32}$/);
    assert.equal(sub.result.cursor, '0');
    const accepted = await delivered(r, '/all', secret, task.taskId, lines(1, 30));
    assert.equal(accepted.at(-1)!.headers['x-mcp-subscription-id'], sub.result.id);
    // Removed once the server has read the receiver's answer to the last delivery, which may come after we see it.
    const store = new Database(db, { readonly: true });
    try {
      await until('the ended subscription is removed', () => (store.prepare(`SELECT count(*) AS n FROM event_subscriptions WHERE sub_id = ?`).get(sub.result.id) as { n: number }).n === 0, 10_000);
    } finally {
      store.close();
    }
  });

  it('a 500 is retried under the same webhook-id before the next line goes', async () => {
    r.plans.set('/fail', (n) => (n === 3 ? 500 : 200));
    const task = await startTask(servers[0]!.url, { count: 8, intervalMs: 40 });
    const secret = secretOf();
    assert.equal((await subscribe(servers[1]!.url, `${r.base}/fail`, secret, task.eventSource.input)).error, undefined);
    await delivered(r, '/fail', secret, task.taskId, lines(1, 8));
    const all = r.received('/fail', secret);
    assert.deepEqual(all.slice(0, 5).map((h) => [h.json.data?.data.text, h.answered]), [['line 1', 200], ['line 2', 200], ['line 3', 500], ['line 3', 200], ['line 4', 200]]);
    assert.equal(all[2]!.headers['webhook-id'], all[3]!.headers['webhook-id']);
  });

  it('another principal cannot subscribe to the task\'s output; bad input gets a clear error and stores nothing', async () => {
    const task = await startTask(servers[0]!.url, { count: 2, intervalMs: 300 });
    const secret = secretOf();
    const before = r.hits.length;
    const bobs = await subscribe(servers[0]!.url, `${r.base}/bob`, secret, { taskId: task.taskId }, BOB);
    assert.equal(bobs.error?.code, -32602);
    assert.match(bobs.error!.message, /Unknown task/);
    const unknown = await subscribe(servers[0]!.url, `${r.base}/bad`, secret, { taskId: 'no-such-task' });
    assert.equal(unknown.error?.code, -32602);
    assert.match(unknown.error!.message, /Unknown task/);
    const missing = await subscribe(servers[0]!.url, `${r.base}/bad`, secret, {});
    assert.equal(missing.error?.code, -32602);
    assert.match(missing.error!.message, /needs a taskId/);
    const extra = await subscribe(servers[0]!.url, `${r.base}/bad`, secret, { taskId: task.taskId, tool: 'emit_output' });
    assert.match(extra.error!.message, /Unknown argument "tool"/);
    const anonymous = await rpc(servers[0]!.url, 'events/subscribe', { name: 'outlast.task.output', arguments: { taskId: task.taskId }, delivery: { mode: 'webhook', url: `${r.base}/bad`, secret } }, { caps: EVENTS_CAPS });
    assert.ok(anonymous.error, 'no subscription without credentials');
    assert.equal(r.hits.length, before, 'no challenge left for a refused subscription');
    const store = new Database(db, { readonly: true });
    const n = store.prepare(`SELECT count(*) AS n FROM event_subscriptions WHERE url LIKE '%/bob' OR url LIKE '%/bad'`).get() as { n: number };
    store.close();
    assert.equal(n.n, 0);
  });

  it('a receiver behind the retained output gets a gap envelope naming events_gone and the earliest seq, then the rest', async () => {
    const bounded = await startServer(['--store', `sqlite:${join(tempDir(), 'bounded.db')}`, ...FLAGS, '--max-output-per-task', '5']);
    try {
      const task = await startTask(bounded.url, { count: 20, intervalMs: 15 });
      await completed(bounded.url, task.taskId);
      const secret = secretOf();
      assert.equal((await subscribe(bounded.url, `${r.base}/behind`, secret, task.eventSource.input, ALICE, '0')).error, undefined);
      const accepted = await delivered(r, '/behind', secret, task.taskId, lines(16, 20));
      const gap = accepted[0]!;
      assert.deepEqual(gap.json, { type: 'gap', cursor: '0', reason: 'events_gone', earliestSeq: 16, latestSeq: 20 });
      assert.match(String(gap.headers['webhook-id']), /^msg_gap_/);
    } finally {
      await bounded.stop('SIGTERM');
    }
  });

  it('kill -9 of the replica delivering mid-stream: the other goes on from the same line, nothing lost or accepted twice', async () => {
    await killMidStream(r, servers, '/kill', 12, 5, async () => {
      const store = new Database(db, { readonly: true });
      try {
        return (store.prepare(`SELECT r.pid FROM event_output_cursors c JOIN replicas r ON r.replica_id = c.claimed_by JOIN event_subscriptions s ON s.sub_id = c.sub_id WHERE s.url LIKE '%/kill'`).get() as { pid: number }).pid;
      } finally {
        store.close();
      }
    });
  });
});

describe('Task output by webhook on PostgreSQL, two replicas', () => {
  const schema = freshSchema('ow');
  const { r, servers } = useReplicas(() => ['--store', `${pgStoreUrl(schema)}&pool=3`]);

  it('output written on replica A, subscribed on B: every line once, in order, signed; a 500 retried under one webhook-id', async () => {
    r.plans.set('/pg', (n) => (n === 4 ? 500 : 200));
    const task = await startTask(servers[0]!.url, { count: 25, intervalMs: 20 });
    const secret = secretOf();
    const sub = await subscribe(servers[1]!.url, `${r.base}/pg`, secret, task.eventSource.input);
    assert.equal(sub.error, undefined, JSON.stringify(sub.error));
    await delivered(r, '/pg', secret, task.taskId, lines(1, 25));
    const fourth = r.received('/pg', secret).filter((h) => h.json.data?.seq === 4);
    assert.deepEqual(fourth.map((h) => h.answered), [500, 200]);
    assert.equal(fourth[0]!.headers['webhook-id'], fourth[1]!.headers['webhook-id']);
    const bobs = await subscribe(servers[0]!.url, `${r.base}/pg-bob`, secret, task.eventSource.input, BOB);
    assert.match(bobs.error!.message, /Unknown task/);
  });

  it('kill -9 of the replica delivering mid-stream: the other replica goes on, nothing lost or accepted twice', async () => {
    await killMidStream(r, servers, '/pg-kill', 15, 6, async () => {
      const c = new pg.Client({ connectionString: PG_URL });
      await c.connect();
      try {
        return (await c.query<{ pid: number }>(`SELECT r.pid FROM "${schema}".event_output_cursors o JOIN "${schema}".replicas r ON r.replica_id = o.claimed_by`)).rows[0]!.pid;
      } finally {
        await c.end();
      }
    });
  });
});
