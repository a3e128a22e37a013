/**
 * The MCP Events side of the store test kit: subscriptions (upsert on the key, the per-principal limit, expiry), the
 * change log written with the task's own change, fan-out only to the owner's matching live subscriptions, claims
 * that one replica holds at a time, settle and deactivation, unsubscribe. Called by runStoreTestKit.
 */
import assert from 'node:assert/strict';
import { it } from 'node:test';
import { TaskWriteRefused, type TaskStore } from '../types.js';
import { TASK_FINISHED, TASK_INPUT_REQUIRED, TASK_STATUS, type ClaimedDelivery, type NewSubscription } from '../events.js';
import { newTask } from './new-task.js';

type Open = () => Promise<{ store: TaskStore; location: string }>;

const sub = (over: Partial<NewSubscription> = {}): NewSubscription => ({
  subId: `sub_${Math.random().toString(16).slice(2)}`,
  principal: 'alice',
  url: 'https://hooks.example/a',
  name: TASK_FINISHED,
  args: '{}',
  taskId: null,
  tool: null,
  secret: 'whsec_x',
  refreshBefore: Date.now() + 60_000,
  now: Date.now(),
  ...over,
});

export function eventsKit(open: Open, openAt: (location: string) => Promise<{ store: TaskStore }>): void {
  it('events: a finish fans out to the owner\'s matching live subscriptions only, in the same write; claims are exclusive', async () => {
    const { store, location } = await open();
    const { store: other } = await openAt(location);
    const now = Date.now();
    const all = sub();
    const byTool = sub({ url: 'https://hooks.example/b', args: '{"tool":"render"}', tool: 'render' });
    const otherTool = sub({ url: 'https://hooks.example/c', args: '{"tool":"zip"}', tool: 'zip' });
    const expired = sub({ url: 'https://hooks.example/d', refreshBefore: now - 1 });
    const bobs = sub({ principal: 'bob', url: 'https://hooks.example/e' });
    const asks = sub({ url: 'https://hooks.example/f', name: TASK_INPUT_REQUIRED });
    for (const s of [all, byTool, otherTool, expired, bobs, asks]) assert.equal(await store.events.subscribe(s, 10), 'created');
    assert.equal(await store.events.subscribe({ ...all, secret: 'whsec_y' }, 10), 'refreshed', 'the same key is a refresh');
    const head = await store.events.head();
    const t = await store.create(newTask({ principal: 'alice', tool: 'render', owner: 'r1' }));
    const status = sub({ url: 'https://hooks.example/g', name: TASK_STATUS, args: JSON.stringify({ taskId: t.record.taskId }), taskId: t.record.taskId });
    assert.equal(await store.events.subscribe(status, 10), 'created');
    await store.finish(t.record.taskId, 'r1', { status: 'completed', result: { content: [] } }, null, Date.now());
    const [a, b] = await Promise.all([store.events.claim('r1', Date.now(), 10_000, 50), other.events.claim('r2', Date.now(), 10_000, 50)]);
    const claimed = [...a!, ...b!];
    assert.deepEqual(claimed.map((c) => c.subId).sort(), [all.subId, byTool.subId, status.subId].sort(), 'each matching delivery claimed once, by one replica');
    assert.ok(claimed.every((c) => c.taskId === t.record.taskId && c.status === 'completed' && c.attempts === 1));
    assert.equal(claimed.find((c) => c.subId === all.subId)!.secret, 'whsec_y', 'the refreshed secret signs');
    const log = await store.events.read('alice', { name: TASK_FINISHED, taskId: null, tool: null }, head, 10);
    assert.deepEqual(log.map((l) => [l.taskId, l.status]), [[t.record.taskId, 'completed']]);
    assert.deepEqual(await store.events.read('bob', { name: TASK_FINISHED, taskId: null, tool: null }, head, 10), [], "never another principal's");
    // Settle: delivered once; a failure is due again; the claim of another replica cannot settle it.
    const mine = a!.length ? { list: a!, replica: 'r1' } : { list: b!, replica: 'r2' };
    const first = mine.list[0]!;
    await store.events.settle(first.subId, first.seq, 'not-the-claimer', { delivered: true, status: 200, now: Date.now() });
    assert.equal((await store.events.get(first.subId))!.pending, 1, 'only the claimer settles');
    await store.events.settle(first.subId, first.seq, mine.replica, { delivered: false, status: 500, error: 'http_5xx', retryAt: Date.now() - 1, now: Date.now(), deactivateAfter: 1 });
    const s1 = (await store.events.get(first.subId))!;
    assert.deepEqual([s1.active, s1.failures, s1.lastError, s1.pending], [false, 1, 'http_5xx', 1], 'deactivated after the failures allowed');
    assert.equal((await store.events.claim('r1', Date.now() + 20_000, 10_000, 50)).filter((c) => c.subId === first.subId).length, 0, 'an inactive subscription delivers nothing');
    await store.events.subscribe({ ...first, principal: s1.principal, url: s1.url, name: s1.name, args: s1.args, taskId: s1.taskId, tool: s1.tool, refreshBefore: Date.now() + 60_000, now: Date.now() }, 10);
    assert.equal((await store.events.get(first.subId))!.active, true, 'a refresh reactivates');
    assert.equal((await store.events.claim('r1', Date.now() + 20_000, 10_000, 50)).filter((c) => c.subId === first.subId).length, 1, 'and the pending delivery resumes');
    // The task leaves (tombstoned by the sweep): its log rows and deliveries go with it.
    await store.sweep(Date.now() + 10 * 86_400_000, 86_400_000, 100);
    assert.deepEqual(await store.events.read('alice', { name: TASK_STATUS, taskId: t.record.taskId, tool: null }, 0, 10), []);
    assert.equal((await store.events.get(byTool.subId))!.pending, 0);
    assert.equal(await store.events.unsubscribe({ principal: 'alice', url: all.url, name: TASK_FINISHED, args: '{}' }), true);
    assert.equal(await store.events.get(all.subId), undefined);
    assert.equal(await store.events.unsubscribe({ principal: 'alice', url: all.url, name: TASK_FINISHED, args: '{}' }), false);
    await other.close();
  });

  it('events: the per-principal limit counts live subscriptions; a refresh at the limit still succeeds; expired ones are pruned', async () => {
    const { store } = await open();
    const now = Date.now();
    const subs = [0, 1, 2].map((i) => sub({ principal: 'carol', url: `https://hooks.example/${i}` }));
    for (const s of subs.slice(0, 2)) assert.equal(await store.events.subscribe(s, 2), 'created');
    assert.equal(await store.events.subscribe(subs[2]!, 2), 'limit');
    assert.equal(await store.events.get(subs[2]!.subId), undefined, 'nothing stored past the limit');
    assert.equal(await store.events.subscribe(subs[0]!, 2), 'refreshed');
    assert.equal(await store.events.live('carol', now), 2);
    await store.events.subscribe({ ...subs[1]!, refreshBefore: now - 10 }, 2);
    assert.equal(await store.events.live('carol', now), 1);
    await store.events.prune(0, now);
    assert.equal(await store.events.get(subs[1]!.subId), undefined, 'an expired subscription is pruned');
    assert.equal((await store.events.list('carol', 10)).length, 1);
    assert.equal(await store.events.deactivate(subs[0]!.subId, 'ops', Date.now()), true);
    assert.equal((await store.events.get(subs[0]!.subId))!.deactivatedBy, 'ops');
  });

  it('events: an operator\'s deactivation queues one terminated envelope in the same write; a refresh drops it; failing queues none', async () => {
    const { store, location } = await open();
    const { store: other } = await openAt(location);
    const s = sub({ principal: 'dave', url: 'https://hooks.example/t' });
    const mineOf = <T extends { subId: string }>(l: T[], id = s.subId) => l.filter((c) => c.subId === id);
    assert.equal(await store.events.subscribe(s, 10), 'created');
    const at = Date.now();
    assert.equal(await store.events.deactivate(s.subId, 'ops', at), true);
    assert.equal(await store.events.deactivate(s.subId, 'ops', at + 1), false, 'already inactive: nothing more is queued');
    assert.equal(mineOf(await store.events.claim('r1', at + 1, 10_000, 50)).length, 0, 'the envelope is not an event');
    const [a, b] = await Promise.all([store.events.claimControl('r1', at + 1, 10_000, 50), other.events.claimControl('r2', at + 1, 10_000, 50)]);
    assert.deepEqual(mineOf([...a, ...b]).map((c) => [c.type, c.seq, c.url, c.secret, c.attempts]), [['terminated', -at, s.url, s.secret, 1]], 'claimed once, by one replica');
    const replica = mineOf(a).length ? 'r1' : 'r2';
    await store.events.settle(s.subId, -at, replica, { delivered: false, status: 500, error: 'http_5xx', retryAt: at + 5, now: at, deactivateAfter: 20 });
    assert.deepEqual(mineOf(await store.events.claimControl('r1', at + 20_000, 10_000, 50)).map((c) => [c.seq, c.attempts]), [[-at, 2]], 'a failed attempt is due again');
    await store.events.settle(s.subId, -at, 'r1', { delivered: true, status: 200, now: at });
    assert.equal(mineOf(await store.events.claimControl('r1', at + 40_000, 10_000, 50)).length, 0, 'delivered once');
    // Refreshed before it was sent: the subscription is live again, so nothing says it ended.
    assert.equal(await store.events.subscribe(s, 10), 'refreshed');
    assert.equal(await store.events.deactivate(s.subId, 'ops', at + 2), true);
    assert.equal(await store.events.subscribe(s, 10), 'refreshed');
    assert.equal(mineOf(await store.events.claimControl('r1', at + 40_000, 10_000, 50)).length, 0, 'a refresh drops a pending terminated');
    assert.equal((await store.events.get(s.subId))!.pending, 0);
    // Deactivated for failing: the endpoint is not told (it is the one failing).
    const f = sub({ principal: 'dave', url: 'https://hooks.example/failing' });
    assert.equal(await store.events.subscribe(f, 10), 'created');
    const t = await store.create(newTask({ principal: 'dave', tool: 'render', owner: 'r1' }));
    await store.finish(t.record.taskId, 'r1', { status: 'completed', result: { content: [] } }, null, Date.now());
    const [d] = mineOf(await store.events.claim('r1', Date.now(), 10_000, 50), f.subId);
    await store.events.settle(f.subId, d!.seq, 'r1', { delivered: false, status: 500, error: 'http_5xx', retryAt: null, now: Date.now(), deactivateAfter: 1 });
    assert.equal((await store.events.get(f.subId))!.active, false);
    assert.equal(mineOf(await store.events.claimControl('r1', Date.now() + 40_000, 10_000, 50), f.subId).length, 0, 'no terminated for a failing endpoint');
    await other.close();
  });

  it('events: a store that claims on commit claims a finish\'s deliveries for the committing replica in its own write, handed over before it returns, the lease keeping them from others until it lapses; one that claims in rounds leaves them all to the next round', async () => {
    const { store, location } = await open();
    if (!store.events.claimOnCommit) {
      // Rounds only: the finish claims nothing itself; the next round takes each delivery once.
      const subs = [0, 1].map((i) => sub({ principal: 'erin', url: `https://hooks.example/round-${i}` }));
      for (const s of subs) assert.equal(await store.events.subscribe(s, 10), 'created');
      const task = await store.create(newTask({ principal: 'erin', tool: 'render', owner: 'r1' }));
      await store.finish(task.record.taskId, 'r1', { status: 'completed', result: { content: [] } }, null, Date.now());
      const round = (await store.events.claim('r1', Date.now(), 10_000, 50)).filter((c) => c.taskId === task.record.taskId);
      assert.deepEqual(round.map((c) => [c.subId, c.attempts]).sort(), subs.map((s) => [s.subId, 1]).sort(), 'every delivery, attempt 1, in the round');
      assert.deepEqual((await store.events.claim('r2', Date.now(), 10_000, 50)).filter((c) => c.taskId === task.record.taskId), [], 'claimed once');
      return;
    }
    const { store: other } = await openAt(location);
    const subs = [0, 1, 2].map((i) => sub({ principal: 'erin', url: `https://hooks.example/commit-${i}`, secret: `whsec_${i}` }));
    for (const s of subs) assert.equal(await store.events.subscribe(s, 10), 'created');
    const taken: Array<{ claimed: ClaimedDelivery[]; reserved: number; returned: boolean }> = [];
    let room = 2;
    let finishReturned = false;
    const undo = store.events.claimOnCommit({ replica: 'r1', claimMs: 10_000, reserve: () => room, take: (claimed, reserved) => void taken.push({ claimed, reserved, returned: finishReturned }) });
    const head = await store.events.head();
    const task = await store.create(newTask({ principal: 'erin', tool: 'render', owner: 'r1' }));
    const at = Date.now();
    await store.finish(task.record.taskId, 'r1', { status: 'completed', result: { content: [{ type: 'text', text: 'ok' }] } }, null, at);
    finishReturned = true;
    assert.equal(taken.length, 1, 'handed over once');
    assert.equal(taken[0]!.returned, false, 'before the finish returned');
    assert.equal(taken[0]!.reserved, 2, 'the room reserved is given back');
    const [logged, ...more] = await store.events.read('erin', { name: TASK_FINISHED, taskId: null, tool: null }, head, 10);
    assert.deepEqual(more, [], 'the change is logged once');
    const byId = [...subs].sort((a, b) => a.subId.localeCompare(b.subId));
    assert.deepEqual(taken[0]!.claimed.map((c) => [c.subId, c.url, c.secret, c.seq, c.taskId, c.status, c.at, c.attempts]),
      byId.slice(0, 2).map((s) => [s.subId, s.url, s.secret, logged!.seq, task.record.taskId, 'completed', at, 1]), 'the first two by subscription, attempt 1, at the log position');
    assert.deepEqual(taken[0]!.claimed[0]!.task?.result, { content: [{ type: 'text', text: 'ok' }] }, 'the task as written, for the body');
    const others = await other.events.claim('r2', Date.now(), 10_000, 50);
    assert.deepEqual(others.filter((c) => c.taskId === task.record.taskId).map((c) => [c.subId, c.attempts]), [[byId[2]!.subId, 1]], 'past the room: a claim round takes it');
    assert.deepEqual((await other.events.claim('r2', at + 10_001, 10_000, 50)).filter((c) => c.taskId === task.record.taskId).map((c) => [c.subId, c.attempts]).sort(),
      byId.slice(0, 2).map((s) => [s.subId, 2]), 'once the lease lapses (the replica died before its POST), another claims and sends them');
    // A finish that writes nothing gives its room back; no room, or no claimer: the trigger logs and nothing is claimed.
    await assert.rejects(store.finish(task.record.taskId, 'r1', { status: 'completed', result: { content: [] } }, null, Date.now()), TaskWriteRefused);
    assert.deepEqual(taken.slice(1).map((x) => [x.claimed.length, x.reserved]), [[0, 2]]);
    room = 0;
    const second = await store.create(newTask({ principal: 'erin', tool: 'render', owner: 'r1' }));
    await store.finish(second.record.taskId, 'r1', { status: 'failed', error: { code: -32603, message: 'no' } }, null, Date.now());
    undo();
    room = 2;
    const third = await store.create(newTask({ principal: 'erin', tool: 'render', owner: 'r1' }));
    await store.finish(third.record.taskId, 'r1', { status: 'completed', result: { content: [] } }, null, Date.now());
    assert.equal(taken.length, 2, 'nothing handed over without room or once undone');
    const later = (await other.events.claim('r2', Date.now(), 10_000, 50)).filter((c) => c.taskId === second.record.taskId || c.taskId === third.record.taskId);
    assert.equal(later.length, 6, 'each of their deliveries claimed by a round, once');
    assert.ok(later.every((c) => c.attempts === 1));
    assert.equal((await store.events.read('erin', { name: TASK_FINISHED, taskId: null, tool: null }, head, 10)).length, 3, 'each change logged once');
    await other.close();
  });
}
