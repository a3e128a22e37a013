/**
 * Multi-replica suites run on more than one setup (directly on PostgreSQL: replicas.test.ts; through PgBouncer in
 * transaction mode with --bus: pooler-replicas.test.ts).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { getTask, rpc, sleep, textOf, waitForTask } from './helpers.js';
import { created, started, useClusterFrom, type Cluster } from './replicas.js';

const LEASE_MS = 1500;
const HEARTBEAT_MS = 200;

/**
 * Three replicas with a short lease: a replica killed (SIGKILL) or paused (SIGSTOP) past its lease loses nothing.
 * `start(args)` starts the cluster with the lease flags given (the caller adds its store URL and other flags).
 */
export function dieOrPauseSuite(title: string, start: (args: string[]) => Promise<Cluster>): void {
  describe(`${title} (lease ${LEASE_MS} ms, heartbeat ${HEARTBEAT_MS} ms)`, () => {
    const c = useClusterFrom(() => start(['--lease-ms', String(LEASE_MS), '--heartbeat-ms', String(HEARTBEAT_MS)]));

    it('SIGKILL of the owner mid-run: every task ends terminal within the lease, re-runnable ones complete elsewhere, none runs twice unsafely', async () => {
      const [a, b] = c.cluster.replicas;
      const unsafe = ['k-u1', 'k-u2', 'k-u3'];
      const safe = ['k-s1', 'k-s2', 'k-s3'];
      const ids = new Map<string, string>();
      for (const key of unsafe) ids.set(key, await created(a!.url, 'work', { key, ms: 3000 }));
      for (const key of safe) ids.set(key, await created(a!.url, 'work_safe', { key, ms: 1000 }));
      for (const key of [...unsafe, ...safe]) await started(c.cluster.runs, key);
      const t0 = Date.now();
      await a!.stop('SIGKILL');
      const ends = new Map<string, Record<string, any>>();
      const terminalAt = new Map<string, number>();
      await Promise.all(
        [...ids].map(async ([key, id]) => {
          ends.set(key, await waitForTask(b!.url, id, undefined, { timeoutMs: LEASE_MS + 5000 }));
          terminalAt.set(key, Date.now() - t0);
        }),
      );
      for (const key of unsafe) {
        const t = ends.get(key)!;
        assert.equal(t.status, 'failed', key);
        assert.equal(t.error.data.reason, 'worker_lost');
        assert.match(t.error.message, /not declared safe to re-run/);
        assert.ok(terminalAt.get(key)! < LEASE_MS + 1000, `${key} failed ${terminalAt.get(key)} ms after the kill`);
      }
      for (const key of safe) {
        const t = ends.get(key)!;
        assert.equal(t.status, 'completed', key);
        const out = JSON.parse(textOf(t.result));
        assert.notEqual(out.pid, a!.pid);
        assert.equal(out.attempt, 2);
        // Taken over, then re-run for its 1000 ms.
        assert.ok(terminalAt.get(key)! < LEASE_MS + 1000 + 1000, `${key} completed ${terminalAt.get(key)} ms after the kill`);
      }
      const runs = c.cluster.runs();
      for (const key of unsafe) assert.equal(runs.filter((r) => r.key === key).length, 1, `${key} (not safe to re-run) ran once`);
      for (const key of safe) assert.equal(runs.filter((r) => r.key === key).length, 2, `${key} ran on the dead replica, then once elsewhere`);
      await c.cluster.add();
    });

    it('SIGSTOP of the owner past its lease, then SIGCONT: the new owner finishes, the late writes of the old one are refused', async () => {
      const b = c.cluster.replicas[1]!;
      const a = c.cluster.replicas[3]!; // the replica added after the kill above
      const safeId = await created(a.url, 'work_safe', { key: 'z-safe', ms: 2500 });
      const unsafeId = await created(a.url, 'work', { key: 'z-unsafe', ms: 2500 });
      await started(c.cluster.runs, 'z-safe');
      await started(c.cluster.runs, 'z-unsafe');
      process.kill(a.pid, 'SIGSTOP');
      const stoppedAt = Date.now();
      try {
        const failed = await waitForTask(b!.url, unsafeId, undefined, { timeoutMs: LEASE_MS + 5000 });
        assert.equal(failed.status, 'failed');
        assert.equal(failed.error.data.reason, 'worker_lost');
        assert.ok(Date.now() - stoppedAt >= LEASE_MS - HEARTBEAT_MS, 'a paused replica is not declared dead before its lease ran out');
        await started(c.cluster.runs, 'z-safe', 2);
      } finally {
        process.kill(a.pid, 'SIGCONT');
      }
      // The paused replica wakes: its timers fire, its handlers end and try to write.
      const done = await waitForTask(b!.url, safeId, undefined, { timeoutMs: 10_000 });
      assert.equal(done.status, 'completed');
      const winner = JSON.parse(textOf(done.result));
      assert.notEqual(winner.pid, a.pid, 'the result is the new owner\'s');
      await sleep(3000); // long past the old run's end
      const after = await getTask(b!.url, safeId);
      assert.deepEqual(after.result.result, done.result, 'the old owner could not overwrite the result');
      assert.equal((await getTask(b!.url, unsafeId)).result.status, 'failed', 'nor revive the failed task');
      assert.match(a.stderr(), /presumed dead/);
      // The woken replica is a healthy member again.
      const again = await created(a.url, 'work', { key: 'z-after', ms: 10 });
      assert.equal((await waitForTask(b!.url, again)).status, 'completed');
    });

    it('an input asked by a replica that is then killed is answered, and whoever holds the task completes it', async () => {
      const a = c.cluster.replicas[2]!;
      const b = c.cluster.replicas[1]!; // [0] was killed above, [3] paused and woken
      const id = await created(a.url, 'approve', { key: 'orphan-input' });
      await waitForTask(b.url, id, (t) => t.status === 'input_required');
      await a.stop('SIGKILL');
      const upd = await rpc(b.url, 'tasks/update', { taskId: id, inputResponses: { approval: { action: 'accept', content: { ok: true } } } });
      assert.equal(upd.error, undefined);
      const done = await waitForTask(b.url, id, undefined, { timeoutMs: LEASE_MS + 5000 });
      assert.equal(done.status, 'completed');
      const out = JSON.parse(textOf(done.result));
      assert.notEqual(out.pid, a.pid);
      assert.deepEqual([out.action, out.content], ['accept', { ok: true }]);
      assert.equal(c.cluster.runs().filter((r) => r.key === 'orphan-input').length, 2, 'asked once, re-run once with the stored answer');
    });

    it('with two of the three replicas behind the front killed, its clients are still served', async () => {
      const id = await created(c.cluster.front.url, 'work', { key: 'after-kill', ms: 10 });
      assert.equal((await waitForTask(c.cluster.front.url, id)).status, 'completed');
    });
  });
}
