/**
 * Capacity across real replicas on one PostgreSQL schema: a burst sent to one replica is run by all of them within
 * --max-running, a deployment-wide --tool-limit holds across replicas (a --no-http worker among them), two
 * principals share the queue fairly, and kill -9 of a replica holding running and queued work loses nothing.
 * Concurrency is counted by the handlers themselves (the `busy` fixture's START/END log).
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { FIXTURES, getTask, pgStoreUrl, tempDir, textOf } from './helpers.js';
import { busy, busyEvents, maxConcurrent, waitForEnds } from './busy-log.js';
import { useCluster } from './replicas.js';
import { finalStatus, toolLimitSuite } from './replica-suites.js';

const ALICE = { token: 'alice-token' };
const BOB = { token: 'bob-token' };

describe('three replicas on PostgreSQL, --max-running 5 each (lease 1500 ms given alone)', () => {
  const c = useCluster(3, ['--max-running', '5', '--lease-ms', '1500', '--bearer', 'alice-token=alice', '--bearer', 'bob-token=bob'], { module: FIXTURES });

  it('150 calls of a 1 s tool sent to one replica: never more than 15 at once, all complete, every replica runs a share', async (t) => {
    const [a] = c.cluster.replicas;
    const log = join(tempDir(), 'burst.log');
    const calls = await Promise.all(Array.from({ length: 150 }, () => busy(a!.url, 1, log, ALICE)));
    const events = await waitForEnds(log, 150, 60_000);
    assert.equal(events.filter((e) => e.kind === 'START').length, 150, 'each call ran once');
    assert.ok(maxConcurrent(events) <= 15, `${maxConcurrent(events)} ran at once`);
    assert.ok(maxConcurrent(events) >= 12, `the capacity of all three was used (${maxConcurrent(events)} at once)`);
    const pids = c.cluster.replicas.map((r) => r.pid);
    const share = pids.map((pid) => events.filter((e) => e.kind === 'START' && e.pid === pid).length);
    t.diagnostic(`at most ${maxConcurrent(events)} at once; started per replica ${share.join(' / ')}; ${events.at(-1)!.at - events[0]!.at} ms from first start to last end; ${calls.filter((c) => !c.taskId).length} answered inline`);
    for (const pid of pids) {
      const mine = events.filter((e) => e.pid === pid);
      assert.ok(maxConcurrent(mine) <= 5, `replica ${pid} ran ${maxConcurrent(mine)} at once`);
      assert.ok(mine.filter((e) => e.kind === 'START').length >= 25, `replica ${pid} ran ${mine.length / 2}`);
    }
    const ids = calls.map((x) => x.taskId).filter((id): id is string => id !== undefined);
    // A call that found a free slot and nothing waiting ran at once, and may have finished within its inline budget.
    for (const x of calls.filter((c) => c.taskId === undefined)) assert.match(textOf(x.reply.result), /^Busy for 1 s/);
    const statuses = await Promise.all(ids.map((id) => finalStatus(c.cluster.front.url, id, ALICE)));
    assert.deepEqual([...new Set(statuses.map((t) => t.status))], ['completed']);
  });

  it('two principals: one with 200 queued tasks, one with a single one, which starts before the backlog drains', async (t) => {
    const [, b, cc] = c.cluster.replicas;
    const log = join(tempDir(), 'fair.log');
    // 1 s each: about 13 s of backlog for 15 slots, so some is left when bob calls however slowly a loaded machine
    // creates alice's 200.
    const alice = await Promise.all(Array.from({ length: 200 }, () => busy(b!.url, 1, log, ALICE)));
    const bobCall = await busy(cc!.url, 1, log, BOB);
    const bobCalledAt = Date.now();
    const events = await waitForEnds(log, 201, 90_000);
    const bobStart = events.find((e) => e.kind === 'START' && e.taskId === bobCall.taskId);
    assert.ok(bobStart, 'bob\'s task ran');
    const aliceIds = new Set(alice.map((x) => x.taskId));
    const aliceStarts = events.filter((e) => e.kind === 'START' && aliceIds.has(e.taskId));
    // Fair: bob's one task starts within a turn of the slots, ahead of most of the backlog waiting when he called.
    const backlog = aliceStarts.filter((e) => e.at > bobCalledAt).length;
    const after = aliceStarts.filter((e) => e.at > bobStart.at).length;
    t.diagnostic(`${backlog} of alice's 200 tasks waited when bob called; ${after} started after bob's`);
    assert.ok(backlog >= 30, `a backlog to be fair in (${backlog} of alice's tasks not yet started when bob called)`);
    assert.ok(after >= backlog / 2, `only ${after} of the ${backlog} alice tasks waiting when bob called started after his`);
    // Each principal sees only its own tasks, queued or not.
    assert.match((await getTask(cc!.url, alice[199]!.taskId!, BOB)).error?.message ?? '', /Task not found/);
    assert.equal((await finalStatus(cc!.url, bobCall.taskId!, BOB)).status, 'completed');
  });

  it('kill -9 of a replica holding running and queued work: queued work runs elsewhere, running work follows the recovery rules', async () => {
    const [a, b, cc] = c.cluster.replicas;
    const log = join(tempDir(), 'kill.log');
    const calls = await Promise.all(Array.from({ length: 30 }, () => busy(a!.url, 2, log, ALICE)));
    const ids = calls.map((x) => x.taskId!);
    assert.ok(ids.every(Boolean));
    const queuedBefore = (await Promise.all(ids.map((id) => getTask(b!.url, id, ALICE)))).filter((t) => /^Queued/.test(t.result.statusMessage ?? '')).length;
    assert.ok(queuedBefore >= 10, `${queuedBefore} were queued`);
    // What a runs now (inline starts are logged before their promotion, so counted by pid, not by id).
    const onA = busyEvents(log).filter((e) => e.kind === 'START' && e.pid === a!.pid).length;
    assert.ok(onA >= 1 && onA <= 5, `${onA} running on the replica to kill`);
    await a!.stop('SIGKILL');
    const events = await waitForEnds(log, 30 - onA, 30_000);
    const ends = await Promise.all(ids.map((id) => finalStatus(cc!.url, id, ALICE, 10_000)));
    const failed = ends.filter((t) => t.status === 'failed');
    assert.equal(failed.length, onA, 'exactly the work running on the killed replica failed');
    for (const t of failed) {
      assert.equal(t.error.data.reason, 'worker_lost');
      assert.match(t.error.message, /not declared safe to re-run/);
    }
    assert.equal(ends.filter((t) => t.status === 'completed').length, 30 - onA, 'everything else completed');
    assert.equal(events.filter((e) => e.kind === 'START').length, 30, 'every call started once (busy is not safe to re-run)');
    assert.ok(events.filter((e) => e.kind === 'START' && e.pid === b!.pid).length > 0 && events.filter((e) => e.kind === 'START' && e.pid === cc!.pid).length > 0);
  });
});

toolLimitSuite('on PostgreSQL', () => ({ storeUrl: pgStoreUrl(), args: [] }));
