// test:pg-replicas: starts PostgreSQL replicas (scripts/test.mjs runs at most three such files at once).
/**
 * A PostgreSQL crash and restart under load, with three replicas and a round-robin front: no acknowledged task is
 * lost, and every one of them still reaches its end.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { callTool, getTask, rpc, sleep, waitForTask } from './helpers.js';

/** Waits until `cond()` holds, checking every 20 ms (counts, never a fixed window: the machine may be loaded). */
async function until(what: string, cond: () => boolean, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}
import { startPrivatePostgres, type PrivatePostgres } from './pg-private.js';
import { startCluster, type Cluster } from './replicas.js';

describe('PostgreSQL restart mid-run (private cluster, crash-stop)', () => {
  let pg: PrivatePostgres;
  let c: Cluster;
  before(async () => {
    pg = await startPrivatePostgres();
    // Default heartbeat (5 s): a cancel that lands within a second after the restart came by signal, so the
    // LISTEN connections are back.
    c = await startCluster(3, [], { storeUrl: `${pg.url}?schema=restart` });
  });
  after(async () => {
    await c?.stop();
    pg?.stop();
  });

  it('loses no acknowledged task; creations during the outage are refused, not acknowledged', async (t) => {
    const acked: string[] = [];
    const refused: string[] = [];
    let stop = false;
    let n = 0;
    const client = async () => {
      while (!stop) {
        const key = `load-${n++}`;
        try {
          const r = await callTool(c.front.url, 'work_safe', { key, ms: 300 });
          if (r.result.resultType === 'task') acked.push(r.result.taskId);
          else refused.push(r.error?.message ?? `HTTP ${r.status}`);
        } catch (e) {
          refused.push(String(e));
        }
        await sleep(20);
      }
    };
    const clients = [client(), client(), client()];
    await until('more than 10 acknowledged creations before the crash', () => acked.length > 10);
    const ackedBefore = acked.length;
    const refusedBefore = refused.length;
    pg.crash();
    await until('a creation refused during the outage', () => refused.length > refusedBefore);
    pg.start();
    const ackedAtRestart = acked.length;
    await until('10 acknowledged creations after the restart', () => acked.length >= ackedAtRestart + 10);
    stop = true;
    await Promise.all(clients);
    assert.ok(ackedBefore > 10, `tasks were created before the crash (${ackedBefore})`);
    assert.ok(acked.length > ackedBefore, 'creations resumed after the restart');
    assert.ok(refused.length > 0, 'creations during the outage were refused');
    assert.ok(refused.every((m) => /could not be stored|store is unreachable|Internal|HTTP 5/.test(m)), `refusals say what happened: ${refused.slice(0, 3)}`);
    const ends = await Promise.all(acked.map((id) => waitForTask(c.front.url, id, undefined, { timeoutMs: 30_000 })));
    assert.equal(ends.length, acked.length);
    assert.deepEqual([...new Set(ends.map((t) => t.status))], ['completed'], 'every acknowledged task completed');
    const again = await getTask(c.front.url, acked[0]!);
    assert.equal(again.result.status, 'completed');
    for (const r of c.replicas) assert.equal(r.proc.exitCode, null, 'every replica survived the outage');
    // Signals flow again: a cancel sent to one replica reaches a handler on another at once.
    const held = await callTool(c.replicas[0]!.url, 'work', { key: 'after-restart', ms: 60_000 });
    const heldId = held.result.taskId as string;
    await waitForTask(c.replicas[1]!.url, heldId, (x) => /working on after-restart/.test(x.statusMessage ?? ''));
    const t0 = Date.now();
    await rpc(c.replicas[2]!.url, 'tasks/cancel', { taskId: heldId });
    assert.equal((await waitForTask(c.replicas[1]!.url, heldId, undefined, { timeoutMs: 4000 })).status, 'cancelled');
    assert.ok(Date.now() - t0 < 1500, `cancel after the restart took ${Date.now() - t0} ms`);
    // Visible in the operators' logs.
    assert.ok(c.replicas.some((r) => /signal connection lost/.test(r.stderr())));
    t.diagnostic(`acked ${acked.length} (before crash ${ackedBefore}), refused ${refused.length}: ${[...new Set(refused)].slice(0, 4).join(" / ")}`);
  });
});
