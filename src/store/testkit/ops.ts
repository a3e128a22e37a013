/**
 * The operator side of the store test kit: listings and their filters, counts, history, operator cancel and
 * acknowledge, and the alert outbox. Called by runStoreTestKit, so every backend runs it.
 */
import assert from 'node:assert/strict';
import { it } from 'node:test';
import type { OpsTaskFilter, TaskStore } from '../types.js';
import { newAlertId } from '../ops-rows.js';
import { newTask } from './new-task.js';

const ELICIT = { method: 'elicitation/create' as const, params: { mode: 'form', message: 'Deploy?', requestedSchema: { type: 'object', properties: {} } } };
const FAIL = { status: 'failed' as const, error: { code: -32603, message: 'disk full' } };

type Open = () => Promise<{ store: TaskStore; location: string }>;

export function opsKit(open: Open, openAt: (location: string) => Promise<{ store: TaskStore }>): void {

  it('ops: queued and parked tasks are listed for the overview (oldest queued first, soonest due first); history records start, park and resume', async () => {
    const { store } = await open();
    const now = Date.now();
    const q1 = await store.create(newTask({ tool: 'render', queued: true, owner: null, createdAt: now - 3000, ttlMs: null }));
    const q2 = await store.create(newTask({ tool: 'render', queued: true, owner: null, createdAt: now - 2000, ttlMs: null }));
    const running = await store.create(newTask({ tool: 'render', owner: 'r1', ttlMs: null }));
    assert.deepEqual((await store.ops.queued(10)).map((t) => t.taskId), [q1.record.taskId, q2.record.taskId]);
    assert.equal((await store.ops.queued(1)).length, 1, 'bounded by the limit');
    // Park the running one on an input (due in a minute) and another on a sleep (due sooner).
    await store.requestInput(running.record.taskId, 'r1', { q: { request: ELICIT, deadline: now + 60_000 } }, now, 1);
    const parkedInput = await store.park(running.record.taskId, { owner: 'r1', epoch: 1 }, { wakeAt: now + 60_000, awaiting: ['q'] }, now);
    assert.equal(parkedInput.outcome, 'parked');
    const sleeper = await store.create(newTask({ tool: 'nap', owner: 'r1', ttlMs: null }));
    assert.equal((await store.park(sleeper.record.taskId, { owner: 'r1', epoch: 1 }, { wakeAt: now + 30_000, awaiting: [] }, now)).outcome, 'parked');
    const parked = await store.ops.parked(10);
    assert.deepEqual(parked.map((t) => [t.taskId, t.inputKeys]), [[sleeper.record.taskId, []], [running.record.taskId, ['q']]]);
    assert.ok(parked.every((t) => t.parkedAt !== null && t.queuedAt > now));
    assert.deepEqual((await store.ops.queued(10)).map((t) => t.taskId), [q1.record.taskId, q2.record.taskId], 'a parked task is not waiting for capacity');
    // A claim starts the oldest queued task; an answer makes the parked one due, and a claim resumes it.
    const [started] = await store.claimQueued({ owner: 'r2', now: Date.now(), room: { render: 1 }, max: 1, limits: {} });
    assert.equal(started?.taskId, q1.record.taskId);
    await store.answerInput(running.record.taskId, { q: { action: 'accept', content: {} } }, Date.now());
    const resumed = await store.claimQueued({ owner: 'r3', now: Date.now() + 1, room: { render: 5 }, max: 5, limits: {} });
    assert.ok(resumed.some((t) => t.taskId === running.record.taskId), 'the answered task was claimed again');
    const kinds = async (id: string) => (await store.ops.history(id, 50)).map((e) => [e.kind, e.actor]);
    const startedHistory = await kinds(q1.record.taskId);
    assert.deepEqual(startedHistory.map((k) => k[0]), ['created', 'started']);
    assert.equal(startedHistory[1]![1], 'r2');
    const parkedHistory = (await kinds(running.record.taskId)).map((k) => k[0]);
    assert.deepEqual(parkedHistory.slice(0, 4), ['created', 'input_asked', 'parked', 'input_answered']);
    assert.ok(parkedHistory.includes('resumed'), `history: ${parkedHistory.join(', ')}`);
  });
  it('ops: listings filter by status, tool, principal, unread and age, newest first, keyset-paged; counts are exact', async () => {
    const { store } = await open();
    const t0 = Date.now() - 100_000;
    const made: Array<{ id: string; at: number; tool: string; principal: string; end?: 'completed' | 'failed' | 'read' | 'acked' }> = [];
    for (let i = 0; i < 24; i++) {
      const tool = i % 3 === 0 ? 'deploy' : 'build';
      const principal = i % 2 === 0 ? 'alice' : 'bob';
      const at = t0 + i * 1000 - (i === 7 ? 1000 : 0); // 6 and 7 share a creation time: the id breaks the tie
      const { record } = await store.create(newTask({ tool, principal, createdAt: at, ttlMs: null }));
      const end = i % 4 === 1 ? 'completed' : i % 4 === 2 ? 'failed' : undefined;
      if (end === 'completed') await store.finish(record.taskId, 'replica-a', { status: 'completed', result: {} }, null, at + 10);
      if (end === 'failed') await store.finish(record.taskId, 'replica-a', FAIL, null, at + 10);
      made.push({ id: record.taskId, at, tool, principal, ...(end ? { end } : {}) });
    }
    // One failure read by its client, one acknowledged by an operator: neither is unread any more.
    const failed = made.filter((m) => m.end === 'failed');
    await store.markRetrieved(failed[0]!.id, Date.now());
    assert.equal(await store.ops.acknowledge(failed[1]!.id, 'ops-anna', Date.now()), true);
    assert.equal(await store.ops.acknowledge(failed[1]!.id, 'ops-anna', Date.now()), false, 'acknowledged once');
    assert.equal(await store.ops.acknowledge(made[0]!.id, 'ops-anna', Date.now()), false, 'only a failure can be acknowledged');
    failed[0]!.end = 'read';
    failed[1]!.end = 'acked';

    const order = (xs: typeof made) => [...xs].sort((a, b) => b.at - a.at || (a.id < b.id ? 1 : -1)).map((m) => m.id);
    const all = async (f: OpsTaskFilter, pageSize = 5) => {
      const out: string[] = [];
      let after: { createdAt: number; taskId: string } | undefined;
      for (let pages = 0; pages < 50; pages++) {
        const page = await store.ops.listTasks(f, after, pageSize);
        out.push(...page.rows.map((r) => r.taskId));
        if (!page.next) return out;
        after = page.next;
      }
      assert.fail('paging did not end');
    };
    const status = (m: (typeof made)[number]) => (m.end === 'completed' ? 'completed' : m.end ? 'failed' : 'working');
    assert.deepEqual(await all({}), order(made));
    assert.deepEqual(await all({ status: 'failed' }), order(made.filter((m) => status(m) === 'failed')));
    assert.deepEqual(await all({ tool: 'deploy' }), order(made.filter((m) => m.tool === 'deploy')));
    assert.deepEqual(await all({ principal: 'bob', status: 'working' }), order(made.filter((m) => m.principal === 'bob' && status(m) === 'working')));
    assert.deepEqual(await all({ unread: true }, 2), order(made.filter((m) => m.end === 'failed')));
    assert.deepEqual(await all({ unread: true, status: 'completed' }), [], 'unread means failed');
    assert.deepEqual(await all({ createdBefore: t0 + 5000 }), order(made.filter((m) => m.at <= t0 + 5000)));
    const row = (await store.ops.listTasks({ status: 'failed' }, undefined, 1)).rows[0]!;
    assert.equal(row.errorMessage, 'disk full');
    assert.equal(row.owner, 'replica-a');

    const counts = await store.ops.counts(1000);
    assert.deepEqual(counts.byStatus, { working: 12, input_required: 0, completed: 6, failed: 6, cancelled: 0 });
    assert.equal(counts.unreadFailures, 4);
    const capped = await store.ops.counts(3);
    assert.deepEqual([capped.unreadFailures, capped.unreadCapped], [3, true]);
    // Counts follow every change, and the sweeper.
    const w = await store.create(newTask({ createdAt: Date.now() - 10_000, ttlMs: 1000 }));
    await store.requestInput(w.record.taskId, 'replica-a', { q: { request: ELICIT, deadline: Date.now() + 60_000 } }, Date.now());
    assert.equal((await store.ops.counts(10)).byStatus.input_required, 1);
    assert.deepEqual((await store.ops.waiting(10)).map((t) => [t.taskId, Object.keys(t.inputRequests)]), [[w.record.taskId, ['q']]]);
    await store.answerInput(w.record.taskId, { q: { action: 'accept', content: {} } }, Date.now());
    await store.sweep(Date.now(), 1000, 100);
    assert.deepEqual((await store.ops.counts(10)).byStatus, { working: 12, input_required: 0, completed: 6, failed: 6, cancelled: 0 });
    // The swept task was still working: that is an alert, written by the sweep itself.
    const expiredAlert = (await store.ops.listAlerts(undefined, 10)).find((a) => a.taskId === w.record.taskId);
    assert.equal(expiredAlert?.kind, 'expired-unfinished');
    assert.equal(expiredAlert?.state, 'pending');
  });

  it('ops: combined filters read a bounded number of rows a page and say where to go on', async () => {
    const { store } = await open();
    const t0 = Date.now() - 1_000_000;
    const old = await store.create(newTask({ principal: 'zed', createdAt: t0, ttlMs: null }));
    await store.finish(old.record.taskId, 'replica-a', { status: 'completed', result: {} }, null, t0 + 1);
    await Promise.all(Array.from({ length: 1100 }, (_, i) => store.create(newTask({ principal: 'zed', createdAt: t0 + 10 + i, ttlMs: null }))));
    const first = await store.ops.listTasks({ principal: 'zed', status: 'completed' }, undefined, 50);
    assert.deepEqual(first.rows, [], 'the newest 1,000 of zed\'s tasks hold no completed one');
    assert.equal(first.scanned, 1000);
    assert.ok(first.next, 'the page says where to go on');
    const second = await store.ops.listTasks({ principal: 'zed', status: 'completed' }, first.next, 50);
    assert.deepEqual(second.rows.map((r) => r.taskId), [old.record.taskId]);
    assert.equal(second.next, undefined);
    // One filter alone reads its index up to the page size: a full page, and a cursor to the next.
    const working = await store.ops.listTasks({ principal: 'zed' }, undefined, 50);
    assert.deepEqual([working.rows.length, working.scanned, !!working.next], [50, undefined, true]);
  });

  it('ops: history records each transition with who and when; operator cancel records who and why for any principal', async () => {
    const { store } = await open();
    const { record } = await store.create(newTask({ principal: 'carol' }));
    const id = record.taskId;
    await store.requestInput(id, 'replica-a', { approve: { request: ELICIT, deadline: Date.now() + 60_000 } }, Date.now());
    await store.answerInput(id, { approve: { action: 'accept', content: {} } }, Date.now());
    await store.takeOver(id, 'replica-a', 'replica-b', Date.now());
    const cancelled = await store.ops.cancel(id, 'anna', 'runaway loop', Date.now());
    assert.ok(cancelled && cancelled.cancelRequestedAt !== null, 'the cancel is recorded whoever the principal is');
    assert.deepEqual(await store.pendingCancels('replica-b'), [id], 'the owner sees it as any cancel');
    await store.finish(id, 'replica-b', { status: 'cancelled' }, 'stopped', Date.now());
    const events = await store.ops.history(id, 50);
    assert.deepEqual(events.map((e) => e.kind), ['created', 'input_asked', 'input_answered', 'taken_over', 'cancel_requested', 'cancelled']);
    assert.deepEqual(events.map((e) => e.actor), ['carol', 'replica-a', 'carol', 'replica-b', 'operator:anna', 'replica-b']);
    assert.equal(events.find((e) => e.kind === 'cancel_requested')!.detail, 'runaway loop');
    assert.equal(events.find((e) => e.kind === 'input_asked')!.detail, 'approve');
    assert.ok(events.every((e, i) => i === 0 || e.at >= events[i - 1]!.at - 5));
    const detail = await store.ops.detail(id);
    assert.deepEqual([detail?.cancelledBy, detail?.cancelReason, detail?.status], ['anna', 'runaway loop', 'cancelled']);
    // A finished task cannot be cancelled; an unknown one is undefined.
    assert.equal((await store.ops.cancel(id, 'anna', 'again', Date.now()))?.status, 'cancelled');
    assert.equal(await store.ops.cancel('no-such-task', 'anna', 'x', Date.now()), undefined);
    // Acknowledge keeps its own time: retrievedAt stays the client's.
    const f = await store.create(newTask());
    await store.finish(f.record.taskId, 'replica-a', FAIL, null, Date.now());
    await store.ops.acknowledge(f.record.taskId, 'anna', Date.now());
    const fd = await store.ops.detail(f.record.taskId);
    assert.ok(fd && fd.acknowledgedAt !== null && fd.retrievedAt === null && fd.acknowledgedBy === 'anna');
    assert.deepEqual((await store.ops.history(f.record.taskId, 10)).map((e) => [e.kind, e.detail ?? null]).slice(1), [['failed', 'disk full'], ['acknowledged', null]]);
  });

  it('ops: an unread failure alerts once across concurrent scanners; alerts are claimed by one deliverer, retried, settled', async () => {
    const { store, location } = await open();
    const { store: other } = await openAt(location);
    const f = await store.create(newTask({ tool: 'migrate' }));
    const failedAt = Date.now() - 5000;
    await store.finish(f.record.taskId, 'replica-a', FAIL, null, failedAt);
    const read = await store.create(newTask());
    await store.finish(read.record.taskId, 'replica-a', FAIL, null, failedAt);
    await store.markRetrieved(read.record.taskId, Date.now());
    assert.deepEqual(await store.ops.alertUnreadFailures(failedAt - 1, Date.now(), 10), [], 'not past the grace yet');
    const [a, b] = await Promise.all([store.ops.alertUnreadFailures(Date.now(), Date.now(), 10), other.ops.alertUnreadFailures(Date.now(), Date.now(), 10)]);
    const written = [...a, ...b];
    assert.equal(written.length, 1, 'one alert for one unread failure, whoever scanned');
    assert.deepEqual([written[0]!.kind, written[0]!.taskId, written[0]!.data.tool, written[0]!.data.error], ['failed-unread', f.record.taskId, 'migrate', 'disk full']);
    assert.deepEqual(await store.ops.alertUnreadFailures(Date.now(), Date.now(), 10), []);

    const now = Date.now();
    const [c1, c2] = await Promise.all([store.ops.claimAlerts('r1', ['alerts'], now, 10_000, 10), other.ops.claimAlerts('r2', ['alerts'], now, 10_000, 10)]);
    assert.equal(c1.length + c2.length, 1, 'claimed by exactly one');
    const [claim, winner] = c1.length ? [c1[0]!, 'r1'] : [c2[0]!, 'r2'];
    assert.equal(claim.attempts, 1);
    assert.deepEqual(await store.ops.claimAlerts('r3', ['alerts'], now + 1000, 10_000, 10), [], 'held while the claim lasts');
    await store.ops.settleAlert(claim.alertId, winner, { delivered: false, status: 500, error: 'HTTP 500', retryAt: now + 20_000, now });
    assert.deepEqual(await store.ops.claimAlerts('r3', ['alerts'], now + 15_000, 10_000, 10), [], 'not due before its retry time');
    // A claim that was never settled (its replica died) expires, and another replica takes the alert.
    const again = await store.ops.claimAlerts('r3', ['alerts'], now + 20_000, 10_000, 10);
    assert.deepEqual(again.map((x) => [x.alertId, x.attempts]), [[claim.alertId, 2]]);
    const third = await store.ops.claimAlerts('r4', ['alerts'], now + 31_000, 10_000, 10);
    assert.deepEqual(third.map((x) => [x.alertId, x.attempts]), [[claim.alertId, 3]]);
    await store.ops.settleAlert(claim.alertId, 'r3', { delivered: true, status: 200, now: now + 31_000 });
    assert.equal((await store.ops.listAlerts(undefined, 5))[0]!.state, 'pending', 'a superseded claim cannot settle');
    await store.ops.settleAlert(claim.alertId, 'r4', { delivered: true, status: 204, now: now + 31_001 });
    const listed = (await store.ops.listAlerts(undefined, 5))[0]!;
    assert.deepEqual([listed.state, listed.lastStatus, listed.attempts, listed.deliveredAt], ['delivered', 204, 3, now + 31_001]);

    // A lost replica alerts once, with its row removed in the same transaction.
    await store.registerReplica({ replicaId: 'gone', host: 'h', pid: 1, startedAt: now, heartbeatAt: now - 60_000 });
    const lost = (id: string) => ({ alertId: newAlertId(), dedupeKey: `replica-lost:gone:${now}`, kind: 'replica-lost' as const, message: `replica gone lost (${id})`, destination: 'alerts', data: { replicaId: 'gone' }, createdAt: now });
    const results = await Promise.all([store.ops.replicaLost('gone', lost('a')), other.ops.replicaLost('gone', lost('b'))]);
    assert.deepEqual(results.sort(), [false, true]);
    assert.deepEqual((await store.listReplicas()).map((r) => r.replicaId), []);
    assert.equal(await store.ops.addAlert(lost('c')), false, 'the dedupe key holds');
  });

  it('ops: per-tool durations of the tasks finished in a window, read from the most recent finishes only', async () => {
    const { store } = await open();
    const now = Date.now();
    const DONE = { status: 'completed' as const, result: {} };
    const run = async (tool: string, tookMs: number, endedAt: number, outcome: Parameters<TaskStore['finish']>[2] | undefined) => {
      const { record } = await store.create(newTask({ tool, createdAt: endedAt - tookMs, ttlMs: null }));
      if (outcome) await store.finish(record.taskId, 'replica-a', outcome, null, endedAt);
    };
    // deploy: 20 runs of 100..2000 ms (every fifth failed), one cancelled after 50 minutes; build: one run of 300 ms
    // and one that finished before the window; one deploy still working.
    for (let i = 1; i <= 20; i++) await run('deploy', i * 100, now - 60_000 + i, i % 5 === 0 ? FAIL : DONE);
    await run('deploy', 3_000_000, now - 2000, { status: 'cancelled' });
    await run('build', 300, now - 1000, DONE);
    await run('build', 5, now - 7_200_000, DONE);
    await run('deploy', 10, now, undefined);

    const hour = await store.ops.toolStats(now - 3_600_000, 1000);
    assert.deepEqual(hour.tools, [
      { tool: 'deploy', finished: 21, failed: 4, cancelled: 1, p50Ms: 1000, p95Ms: 1900, maxMs: 2000 },
      { tool: 'build', finished: 1, failed: 0, cancelled: 0, p50Ms: 300, p95Ms: 300, maxMs: 300 },
    ]);
    assert.deepEqual([hour.capped, hour.from], [false, now - 60_000 + 1]);
    // Capped: the five most recent finishes (build, the cancel, deploys 20, 19 and 18), and says so.
    const recent = await store.ops.toolStats(now - 3_600_000, 5);
    assert.deepEqual(recent.tools, [
      { tool: 'deploy', finished: 4, failed: 1, cancelled: 1, p50Ms: 1900, p95Ms: 2000, maxMs: 2000 },
      { tool: 'build', finished: 1, failed: 0, cancelled: 0, p50Ms: 300, p95Ms: 300, maxMs: 300 },
    ]);
    assert.deepEqual([recent.capped, recent.from], [true, now - 60_000 + 18]);
    // A short window: only the cancel and the build; nothing ran to its end for deploy, so it has no percentiles.
    const short = await store.ops.toolStats(now - 30_000, 1000);
    assert.deepEqual(short.tools.map((t) => [t.tool, t.finished, t.cancelled, t.p50Ms]), [['build', 1, 0, 300], ['deploy', 1, 1, null]]);
    assert.deepEqual(await store.ops.toolStats(now + 1, 1000), { tools: [], capped: false, from: null });
  });

  it('ops: a push subscription queues a delivery on each state change, or at once for a finished task', async () => {
    const { store } = await open();
    const { record } = await store.create(newTask());
    await store.ops.subscribe(record.taskId, 'ci-hook', Date.now());
    await store.requestInput(record.taskId, 'replica-a', { q: { request: ELICIT, deadline: Date.now() + 60_000 } }, Date.now());
    await store.finish(record.taskId, 'replica-a', { status: 'completed', result: {} }, 'done', Date.now());
    const pushes = (await store.ops.listAlerts(undefined, 10)).filter((a) => a.kind === 'task-status');
    assert.deepEqual(pushes.map((p) => [p.destination, p.data.status]).sort(), [['ci-hook', 'completed'], ['ci-hook', 'input_required']]);
    assert.equal(pushes.find((p) => p.data.status === 'completed')!.data.statusMessage, 'done');
    const done = await store.create(newTask());
    await store.finish(done.record.taskId, 'replica-a', FAIL, null, Date.now());
    await store.ops.subscribe(done.record.taskId, 'ci-hook', Date.now());
    const late = (await store.ops.listAlerts(undefined, 10)).filter((a) => a.taskId === done.record.taskId);
    assert.deepEqual(late.map((p) => p.data.status), ['failed']);
    assert.deepEqual(await store.ops.claimAlerts('r', ['alerts'], Date.now(), 1000, 10), [], 'pushes are not operator alerts');
    assert.equal((await store.ops.claimAlerts('r', ['ci-hook'], Date.now(), 1000, 10)).length, 3);
  });
}
