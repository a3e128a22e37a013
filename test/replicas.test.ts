// test:pg-replicas: starts PostgreSQL replicas (scripts/test.mjs runs at most three such files at once).
/**
 * Several real `outlast serve` processes on one PostgreSQL schema: any replica answers anything, signals cross
 * processes, and a replica killed (SIGKILL) or paused (SIGSTOP) past its lease loses nothing.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { callTool, getTask, openListen, rpc, textOf, waitForTask } from './helpers.js';
import { created, startCluster, started, useCluster } from './replicas.js';
import { dieOrPauseSuite } from './replica-suites.js';

const TERMINAL = ['completed', 'failed', 'cancelled'];

describe('three replicas on PostgreSQL: any replica answers anything (signals, default 5 s heartbeat)', () => {
  const c = useCluster(3);

  it('a round-robin front spreads one client over every replica, and the task still completes', async () => {
    const { front } = c.cluster;
    const before = [...front.counts];
    const id = await created(front.url, 'work', { key: 'rr-1', ms: 300 });
    const done = await waitForTask(front.url, id);
    assert.equal(done.status, 'completed');
    // A fast task can end within two requests; one read per replica more reaches each, and each says the same.
    for (let i = 0; i < front.counts.length; i++) {
      const again = await getTask(front.url, id);
      assert.equal(again.result?.status, 'completed', JSON.stringify(again));
    }
    assert.ok(front.counts.every((n, i) => n > before[i]!), `every replica served some of the requests: ${front.counts}`);
  });

  it('create on one, poll on another, cancel from a third: the handler stops at once', async () => {
    const [a, b, cc] = c.cluster.replicas;
    const id = await created(a!.url, 'work', { key: 'cancel-1', ms: 60_000 });
    await started(c.cluster.runs, 'cancel-1');
    const polled = await waitForTask(b!.url, id, (t) => /working on cancel-1/.test(t.statusMessage ?? ''));
    assert.equal(polled.status, 'working');
    assert.match(polled.statusMessage, new RegExp(`in ${a!.pid}$`));
    const t0 = Date.now();
    const cancel = await rpc(cc!.url, 'tasks/cancel', { taskId: id });
    assert.equal(cancel.error, undefined);
    const end = await waitForTask(b!.url, id, (t) => TERMINAL.includes(t.status), { timeoutMs: 4000 });
    const took = Date.now() - t0;
    assert.equal(end.status, 'cancelled');
    // The fallback re-read runs every heartbeat (5 s here); the cancel arrived by signal.
    assert.ok(took < 2000, `cancel reached the handler on another replica in ${took} ms`);
    assert.equal(c.cluster.runs().filter((r) => r.key === 'cancel-1').length, 1);
  });

  it('subscriptions/listen on one replica pushes the changes made on another', async () => {
    const [a, b] = c.cluster.replicas;
    const t0 = Date.now();
    const id = await created(a!.url, 'work', { key: 'push-1', ms: 800 });
    const stream = await openListen(b!.url, [id]);
    try {
      await stream.until((m) => m.some((x) => x.method === 'notifications/tasks' && x.params.status === 'completed'), 10_000);
    } finally {
      stream.close();
    }
    // The watch's fallback re-read runs every 5 s; the change arrived by signal.
    assert.ok(Date.now() - t0 < 800 + 1500, `completion pushed ${Date.now() - t0} ms after creating an 800 ms task`);
    assert.equal(stream.msgs[0]!.method, 'notifications/subscriptions/acknowledged');
    const last = stream.msgs[stream.msgs.length - 1]!;
    assert.equal(JSON.parse(textOf(last.params.result)).pid, a!.pid, 'the work ran on the other replica');
  });

  it('an input asked on one replica is answered through another and reaches the handler', async () => {
    const [a, b, cc] = c.cluster.replicas;
    const id = await created(a!.url, 'approve', { key: 'input-1' });
    const waiting = await waitForTask(b!.url, id, (t) => t.status === 'input_required');
    assert.deepEqual(Object.keys(waiting.inputRequests), ['approval']);
    const upd = await rpc(cc!.url, 'tasks/update', { taskId: id, inputResponses: { approval: { action: 'accept', content: { ok: true } } } });
    assert.equal(upd.error, undefined);
    const done = await waitForTask(b!.url, id, undefined, { timeoutMs: 4000 });
    assert.deepEqual(JSON.parse(textOf(done.result)), { key: 'input-1', pid: a!.pid, action: 'accept', content: { ok: true } });
  });

  it('idempotent creation holds across replicas: the same key on three replicas is one task', async () => {
    const ids = await Promise.all(
      c.cluster.replicas.map((r) => callTool(r.url, 'work', { key: 'idem-1', ms: 100 }, { meta: { 'outlast/idempotencyKey': 'deploy-42' } })),
    );
    assert.equal(new Set(ids.map((r) => r.result.taskId)).size, 1);
    await waitForTask(c.cluster.front.url, ids[0]!.result.taskId);
    assert.equal(c.cluster.runs().filter((r) => r.key === 'idem-1').length, 1, 'the work ran once');
  });
});

dieOrPauseSuite('replicas that die or pause', (args) => startCluster(3, args));
