/**
 * Fair to every caller: one principal flooding a real `outlast serve` is held to its own share. With default flags
 * its running handlers stop at the per-principal bound (not one per call); with --max-running 16 --max-queued 10000 on
 * PostgreSQL, its queue stops at its share, and another principal's inline calls and task calls are still served, its
 * queued task started by a claim that skips the flooder.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { EXT, PG_URL, callTool, freshSchema, getTask, pgStoreUrl, sleep, startServer, tempDir, type RpcReply, type ServerProcess } from './helpers.js';
import { busyEvents, maxConcurrent } from './busy-log.js';

const FLOOD = { token: 'flood-token' };
const BOB = { token: 'bob-token' };
const BEARERS = ['--bearer', 'flood-token=flooder', '--bearer', 'bob-token=bob', '--no-handles'];
// A client without the tasks extension, and handles off: its calls can only run inline (the harshest case: they cannot wait).
const PLAIN_CAPS = {};

/** `n` calls sent `concurrency` at a time; every reply kept. */
async function flood(url: string, n: number, concurrency: number, args: Record<string, unknown>): Promise<RpcReply[]> {
  const replies: RpcReply[] = [];
  let next = 0;
  await Promise.all(Array.from({ length: concurrency }, async () => {
    while (next < n) {
      next++;
      replies.push(await callTool(url, 'busy', args, FLOOD));
    }
  }));
  return replies;
}

async function waitFor<T>(what: string, read: () => T | Promise<T>, ok: (v: T) => boolean, timeoutMs = 60_000): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await read();
    if (ok(v)) return v;
    if (Date.now() > end) assert.fail(`${what}: still ${JSON.stringify(v)} after ${timeoutMs} ms`);
    await sleep(100);
  }
}

const started = (log: string) => busyEvents(log).filter((e) => e.kind === 'START').length;

describe('fair to every caller', () => {
  const servers: ServerProcess[] = [];
  after(async () => {
    // Their handlers hold for minutes: stopped at once.
    await Promise.all(servers.map((s) => s.stop('SIGKILL')));
  });

  it('default flags: a principal sending 400 long calls runs 256 handlers at once, not 400; the rest wait queued', async () => {
    const server = await startServer(['--store', `sqlite:${join(tempDir(), 'flood.db')}`, ...BEARERS]);
    servers.push(server);
    const log = join(tempDir(), 'flood.log');
    const replies = await flood(server.url, 400, 100, { seconds: 600, log });
    assert.deepEqual(replies.filter((r) => r.error).map((r) => r.error), [], 'every call was accepted (as a task)');
    assert.equal(replies.filter((r) => r.result.resultType === 'task').length, 400);
    await waitFor('handlers started', () => started(log), (n) => n >= 256);
    // Give a claim every chance to start more: several queue polls (1 s) later, still 256.
    await sleep(2500);
    assert.equal(started(log), 256, 'the flooder runs exactly its --max-running-per-principal default (256)');
    assert.equal(maxConcurrent(busyEvents(log)), 256);
    const queued = replies.filter((r) => /^Queued/.test(r.result.statusMessage ?? '')).length;
    assert.equal(queued, 400 - 256, 'the others wait in the queue');
    // Another principal is served at once, inline.
    const bob = await callTool(server.url, 'busy', { seconds: 0, log }, { ...BOB, caps: PLAIN_CAPS });
    assert.equal(bob.error, undefined, JSON.stringify(bob.error));
    assert.match(bob.result.content[0].text, /^Busy for 0 s/);
  });

  it('--max-tasks-per-principal 5: past its stored tasks a caller is refused until its next task expires; another caller is not', async () => {
    const server = await startServer(['--store', `sqlite:${join(tempDir(), 'stored.db')}`, '--max-tasks-per-principal', '5', '--default-ttl-ms', '600000', ...BEARERS]);
    servers.push(server);
    let accepted = 0;
    let refusal: RpcReply['error'];
    for (let attempt = 0; attempt < 30 && !refusal; attempt++) {
      const r = await callTool(server.url, 'failing_job', {}, FLOOD);
      if (r.error) refusal = r.error;
      else accepted++;
      if (accepted >= 5) await sleep(200); // the count is re-read at most once a second
    }
    assert.ok(refusal, 'a call past the bound was refused');
    assert.ok(accepted >= 5 && accepted <= 7, `${accepted} tasks stored before the refusal (bound 5)`);
    assert.equal(refusal.code, -31503);
    assert.equal(refusal.data.reason, 'principal_tasks');
    assert.match(refusal.message, /--max-tasks-per-principal 5\).*nothing was stored.*next task expires in \d+ ms: retry then/);
    assert.ok(refusal.data.retryAfterMs > 500_000 && refusal.data.retryAfterMs <= 600_000, `retry in ${refusal.data.retryAfterMs} ms (the TTL is 10 min)`);
    const other = await callTool(server.url, 'failing_job', {}, BOB);
    assert.equal(other.error, undefined, JSON.stringify(other.error));
    assert.equal(other.result.resultType, 'task');
  });

  it('--max-running 16 --max-queued 10000 on PostgreSQL: the flooder fills only its share; another principal is served inline and as tasks', async (t) => {
    const schema = freshSchema('fair');
    const server = await startServer(['--store', pgStoreUrl(schema), '--max-running', '16', '--max-queued', '10000', '--queue-poll-ms', '500', ...BEARERS]);
    servers.push(server);
    const log = join(tempDir(), 'fair.log');
    const replies = await flood(server.url, 3000, 100, { seconds: 600, log });
    const accepted = replies.filter((r) => r.result.resultType === 'task');
    const refused = replies.filter((r) => r.error);
    t.diagnostic(`flooder: ${accepted.length} accepted, ${refused.length} refused`);
    for (const r of refused) {
      assert.equal(r.error!.code, -31503);
      assert.equal(r.error!.data?.reason, 'principal_queued', JSON.stringify(r.error));
      assert.match(r.error!.message, /--max-queued-per-principal 2500.*nothing was stored.*Retry in \d+ ms/);
      assert.ok(r.error!.data.retryAfterMs >= 1000);
      if (r.status === 503) assert.ok(Number(r.headers.get('retry-after')) >= 1, 'a 503 says when to retry');
    }
    // 12 running (3/4 of 16) and 2,500 queued (a quarter of 10,000); a re-read of the counts may miss creations in flight.
    assert.ok(accepted.length >= 2512 && accepted.length <= 2512 + 100, `${accepted.length} accepted`);
    assert.ok(refused.length >= 3000 - 2612, `${refused.length} refused`);
    await waitFor('flooder handlers started', () => started(log), (n) => n >= 12);

    // Bob, meanwhile: 24 inline calls (no tasks extension), four at a time, are served at once in the 4 slots the flooder
    // cannot take.
    const inline: RpcReply[] = [];
    for (let wave = 0; wave < 6; wave++) {
      inline.push(...(await Promise.all(Array.from({ length: 4 }, () => callTool(server.url, 'busy', { seconds: 0.2, log }, { ...BOB, caps: PLAIN_CAPS })))));
    }
    assert.deepEqual(inline.map((r) => r.error), inline.map(() => undefined), JSON.stringify(inline.map((r) => r.error)));
    for (const r of inline) assert.match(r.result.content[0].text, /^Busy for 0.2 s/);
    // Task calls are accepted (queued behind the flooder's backlog) and each starts, claimed before the flooder's tasks.
    const tasks = await Promise.all(Array.from({ length: 8 }, () => callTool(server.url, 'busy', { seconds: 0.2, log }, { ...BOB, caps: { extensions: { [EXT]: {} } } })));
    assert.deepEqual(tasks.map((r) => r.error), tasks.map(() => undefined), JSON.stringify(tasks.map((r) => r.error)));
    const ids = tasks.filter((r) => r.result.resultType === 'task').map((r) => r.result.taskId as string);
    for (const id of ids) {
      const done = await waitFor(`bob's task ${id}`, async () => (await getTask(server.url, id, BOB)).result.status, (s) => s === 'completed', 30_000);
      assert.equal(done, 'completed');
    }
    // The flooder never ran more than its share, though Bob's handlers freed slots while its backlog waited: the store
    // holds 12 of its tasks owned by a replica, the rest queued.
    await sleep(1500); // three queue polls after Bob's last task freed its slot
    const { default: pg } = await import('pg');
    const db = new pg.Client({ connectionString: PG_URL });
    await db.connect();
    try {
      const r = await db.query(`SELECT count(*) FILTER (WHERE owner IS NOT NULL)::int AS running, count(*) FILTER (WHERE queued_at IS NOT NULL)::int AS queued
        FROM ${schema}.tasks WHERE principal = 'flooder' AND status IN ('working','input_required')`);
      t.diagnostic(`flooder in the store: ${JSON.stringify(r.rows[0])}`);
      assert.equal(r.rows[0].running, 12, 'the flooder runs its share (3/4 of 16), no more');
      assert.equal(r.rows[0].queued, accepted.length - 12);
    } finally {
      await db.end();
    }
  });
});
