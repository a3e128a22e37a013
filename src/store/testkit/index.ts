/**
 * The store test kit: the behaviour every TaskStore must have, as node:test suites. A backend's test file calls
 * `runStoreTestKit('sqlite', { open })` where `open(location?)` opens a store on a fresh location, or on the
 * given one (a second handle on the same data, to prove commits are visible to another connection).
 */
import assert from 'node:assert/strict';
import { afterEach, describe, it } from 'node:test';
import { nextClaim, type QueuedTask } from '../rules.js';
import { newTask } from './new-task.js';
import { opsKit } from './ops.js';
import { eventsKit } from './events.js';
import { outputKit } from './output.js';
import { operatorSessionsKit } from './operator-sessions.js';
import { IdempotencyConflictError, TaskWriteRefused, type StepWrite, type TaskStore } from '../types.js';

export { runSignalBusKit, type SignalBusKitOptions } from './bus.js';
export { newTask };

export interface StoreKitOptions {
  /** Opens a store. Without a location: on new, empty data. With one: on that data. Returns the location. */
  open(location?: string): Promise<{ store: TaskStore; location: string }>;
}

const ELICIT = { method: 'elicitation/create' as const, params: { mode: 'form', message: 'Name?', requestedSchema: { type: 'object', properties: {} } } };

/** One task claimed by `owner` (room enough for every tool listed), or undefined. */
async function claimOne(store: TaskStore, owner: string, tools: string[], limits: Record<string, number> = {}, now = Date.now()) {
  const room = Object.fromEntries(tools.map((t) => [t, 100]));
  return (await store.claimQueued({ owner, now, room, max: 1, limits }))[0];
}

/** A step write: the row for `key` in `state` (result: JSON text or null). */
function step(key: string, seq: number, state: StepWrite['state'], result: string | null): StepWrite {
  return {
    key, name: key.slice(0, key.lastIndexOf('#')), kind: 'step', seq, state, tries: 1, idempotent: false,
    result, error: null, bytes: result === null ? 0 : Buffer.byteLength(result), startedAt: Date.now(), finishedAt: state === 'started' ? null : Date.now(),
  };
}

async function refusal(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (e) {
    if (e instanceof TaskWriteRefused) return e.reason;
    throw e;
  }
  assert.fail('the write was accepted');
}

export function runStoreTestKit(name: string, kit: StoreKitOptions): void {
  describe(`store kit: ${name}`, () => {
    const opened: TaskStore[] = [];
    const open = async (location?: string) => {
      const r = await kit.open(location);
      await r.store.init();
      opened.push(r.store);
      return r;
    };
    // Each test's stores are closed when it ends: kept open to the end, their pools' connections add up past a
    // pooler's client limit (PgBouncer's max_client_conn, 100 by default) by the last tests of the kit.
    afterEach(async () => {
      for (const s of opened.splice(0)) await s.close().catch(() => undefined);
    });

    it('creates a task and reads it back with every field', async () => {
      const { store } = await open();
      const t = newTask({ statusMessage: 'queued', idempotencyKey: 'k1', requestHash: 'h1' });
      const { record, created } = await store.create(t);
      assert.equal(created, true);
      assert.equal(record.taskId, t.taskId);
      const got = await store.get(t.taskId);
      assert.equal(got.state, 'found');
      if (got.state !== 'found') return;
      const r = got.record;
      assert.deepEqual(
        [r.principal, r.tool, r.args, r.status, r.statusMessage, r.ttlMs, r.expiresAt, r.owner, r.attempts, r.retrySafe, r.idempotencyKey],
        ['alice', 'build', t.args, 'working', 'queued', 60_000, t.createdAt + 60_000, 'replica-a', 1, false, 'k1'],
      );
      assert.deepEqual(r.clientCapabilities, { elicitation: {} });
      assert.equal(r.result, null);
      assert.equal(r.retrievedAt, null);
      assert.deepEqual(await store.get('no-such-task'), { state: 'missing' });
    });

    it("keeps the creating call's trace context with the task, for whoever takes it over", async () => {
      const { store, location } = await open();
      const { store: other } = await open(location);
      const traced = { traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', tracestate: 'vendor=opaque' };
      const { record } = await store.create(newTask({ traceContext: traced, retrySafe: true }));
      const plain = await store.create(newTask());
      assert.deepEqual(record.traceContext, traced);
      assert.equal(plain.record.traceContext, null, 'an untraced call keeps nothing');
      const taken = await other.takeOver(record.taskId, 'replica-a', 'replica-b', Date.now());
      assert.deepEqual([taken.owner, taken.attempts, taken.traceContext], ['replica-b', 2, traced]);
      const read = await other.get(plain.record.taskId);
      assert.equal(read.state === 'found' && read.record.traceContext, null);
    });

    it('a created task is visible to another connection as soon as create resolves (100 concurrent creates)', async () => {
      const { store, location } = await open();
      const { store: other } = await open(location);
      const tasks = Array.from({ length: 100 }, () => newTask());
      const results = await Promise.all(
        tasks.map(async (t) => {
          await store.create(t);
          return other.get(t.taskId);
        }),
      );
      assert.equal(results.filter((r) => r.state === 'found').length, 100);
      assert.equal((await other.count()).tasks, 100);
    });

    it('idempotency: same key and request returns the original; different request is a conflict; scope is principal and tool', async () => {
      const { store } = await open();
      const a = await store.create(newTask({ idempotencyKey: 'deploy-1', requestHash: 'h' }));
      const again = await store.create(newTask({ idempotencyKey: 'deploy-1', requestHash: 'h' }));
      assert.equal(again.created, false);
      assert.equal(again.record.taskId, a.record.taskId);
      await assert.rejects(store.create(newTask({ idempotencyKey: 'deploy-1', requestHash: 'other' })), (e: unknown) => {
        assert.ok(e instanceof IdempotencyConflictError);
        assert.equal(e.existingTaskId, a.record.taskId);
        return true;
      });
      const bob = await store.create(newTask({ principal: 'bob', idempotencyKey: 'deploy-1', requestHash: 'h' }));
      const otherTool = await store.create(newTask({ tool: 'test', idempotencyKey: 'deploy-1', requestHash: 'h' }));
      assert.equal(bob.created, true);
      assert.equal(otherTool.created, true);
      // Duplicates inside one batch of concurrent creates resolve to one task.
      const burst = await Promise.all(Array.from({ length: 10 }, () => store.create(newTask({ idempotencyKey: 'burst', requestHash: 'h' }))));
      assert.equal(new Set(burst.map((b) => b.record.taskId)).size, 1);
      assert.equal(burst.filter((b) => b.created).length, 1);
    });

    it('terminal is final: no write changes a finished task', async () => {
      const { store } = await open();
      const { record } = await store.create(newTask());
      const done = await store.finish(record.taskId, 'replica-a', { status: 'completed', result: { content: [], resultType: 'complete' } }, null, Date.now());
      assert.equal(done.status, 'completed');
      assert.equal(await refusal(store.finish(record.taskId, 'replica-a', { status: 'failed', error: { code: -1, message: 'x' } }, null, Date.now())), 'terminal');
      assert.equal(await refusal(store.finish(record.taskId, null, { status: 'cancelled' }, null, Date.now())), 'terminal');
      assert.equal(await refusal(store.setProgress(record.taskId, 'replica-a', 'late', 100)), 'terminal');
      assert.equal(await refusal(store.requestInput(record.taskId, 'replica-a', { k: { request: ELICIT, deadline: Date.now() + 1000 } }, Date.now())), 'terminal');
      const cancelled = await store.requestCancel(record.taskId, Date.now());
      assert.equal(cancelled?.status, 'completed');
      assert.equal(cancelled?.cancelRequestedAt, null);
      await store.markRetrieved(record.taskId, Date.now());
      const after = await store.get(record.taskId);
      assert.ok(after.state === 'found' && after.record.status === 'completed' && after.record.retrievedAt !== null);
      assert.deepEqual(after.state === 'found' && after.record.result, { content: [], resultType: 'complete' });
    });

    it('fencing: a replica that no longer owns a task cannot write to it', async () => {
      const { store } = await open();
      const { record } = await store.create(newTask({ owner: 'old' }));
      const taken = await store.takeOver(record.taskId, 'old', 'new', Date.now());
      assert.equal(taken.owner, 'new');
      assert.equal(taken.attempts, 2);
      assert.equal(await refusal(store.takeOver(record.taskId, 'old', 'third', Date.now())), 'fenced');
      assert.equal(await refusal(store.finish(record.taskId, 'old', { status: 'completed', result: {} }, null, Date.now())), 'fenced');
      assert.equal(await refusal(store.setProgress(record.taskId, 'old', 'zombie')), 'fenced');
      const ok = await store.finish(record.taskId, 'new', { status: 'completed', result: { ok: true } }, null, Date.now());
      assert.equal(ok.status, 'completed');
    });

    it('input: outstanding keys, partial answers, TTL growth, unknown keys ignored, keys unique for life', async () => {
      const { store } = await open();
      const t0 = Date.now();
      const { record } = await store.create(newTask({ createdAt: t0, ttlMs: 10_000 }));
      const asked = await store.requestInput(record.taskId, 'replica-a', {
        a: { request: ELICIT, deadline: t0 + 5000 },
        b: { request: ELICIT, deadline: t0 + 5000 },
      }, t0 + 100);
      assert.equal(asked.status, 'input_required');
      assert.deepEqual(Object.keys(asked.inputRequests).sort(), ['a', 'b']);
      assert.equal(asked.inputRequests.a?.askedAt, t0 + 100, 'each question keeps when it was asked (the answer page shows it)');
      const partial = await store.answerInput(record.taskId, { a: { action: 'accept', content: { x: 1 } }, zzz: { action: 'accept' } }, t0 + 200);
      assert.deepEqual(partial.accepted, ['a']);
      assert.equal(partial.record.status, 'input_required');
      assert.deepEqual(Object.keys(partial.record.inputRequests), ['b']);
      const again = await store.answerInput(record.taskId, { a: { action: 'decline' } }, t0 + 300);
      assert.deepEqual(again.accepted, [], 'an answered key is not outstanding any more');
      const all = await store.answerInput(record.taskId, { b: { action: 'accept', content: { y: 2 } } }, t0 + 4100);
      assert.equal(all.record.status, 'working');
      assert.equal(all.record.ttlMs, 10_000 + 4000, 'TTL grows by the time spent waiting');
      assert.equal(all.record.expiresAt, t0 + 14_000);
      assert.deepEqual(all.record.inputResponses.a?.response, { action: 'accept', content: { x: 1 } });
      // Re-asking an answered key with the same request is a replay (no new question)...
      const replay = await store.requestInput(record.taskId, 'replica-a', { a: { request: ELICIT, deadline: t0 + 9000 } }, t0 + 4200);
      assert.equal(replay.status, 'working');
      // ...with a different request it is refused: keys are unique for the task's life.
      await assert.rejects(
        store.requestInput(record.taskId, 'replica-a', { a: { request: { ...ELICIT, params: { ...ELICIT.params, message: 'Other?' } }, deadline: t0 + 9000 } }, t0 + 4300),
        /already answered/,
      );
      // A key re-asked while outstanding keeps its first deadline.
      await store.requestInput(record.taskId, 'replica-a', { c: { request: ELICIT, deadline: t0 + 6000 } }, t0 + 4400);
      const kept = await store.requestInput(record.taskId, 'replica-a', { c: { request: ELICIT, deadline: t0 + 99_000 } }, t0 + 4500);
      assert.equal(kept.inputRequests.c?.deadline, t0 + 6000);
      assert.equal(kept.inputRequests.c?.askedAt, t0 + 4400, '...and when it was first asked');
      const read = await store.get(record.taskId);
      assert.equal(read.state === 'found' ? read.record.inputRequests.c?.askedAt : undefined, t0 + 4400, 'askedAt is stored with the question');
    });

    it('cancel is recorded durably and leaves the status to whoever runs the work', async () => {
      const { store } = await open();
      const { record } = await store.create(newTask());
      const r = await store.requestCancel(record.taskId, 1234);
      assert.equal(r?.status, 'working');
      assert.equal(r?.cancelRequestedAt, 1234);
      const r2 = await store.requestCancel(record.taskId, 5678);
      assert.equal(r2?.cancelRequestedAt, 1234, 'the first request time is kept');
      assert.deepEqual(await store.pendingCancels('replica-a'), [record.taskId]);
      assert.deepEqual(await store.pendingCancels('replica-b'), []);
      await store.finish(record.taskId, 'replica-a', { status: 'cancelled' }, null, Date.now());
      assert.deepEqual(await store.pendingCancels('replica-a'), [], 'a finished task has nothing pending');
      assert.equal(await store.requestCancel('missing', 1), undefined);
    });

    it('expiry: swept tasks become tombstones (expired, not missing); tasks waiting for input are not swept; tombstones are purged', async () => {
      const { store } = await open();
      const t0 = Date.now();
      const old = await store.create(newTask({ createdAt: t0 - 10_000, ttlMs: 5_000, principal: 'carol' }));
      const waiting = await store.create(newTask({ createdAt: t0 - 10_000, ttlMs: 5_000 }));
      await store.requestInput(waiting.record.taskId, 'replica-a', { q: { request: ELICIT, deadline: t0 + 60_000 } }, t0 - 9000);
      const fresh = await store.create(newTask({ createdAt: t0, ttlMs: 60_000 }));
      const unlimited = await store.create(newTask({ createdAt: t0 - 10_000_000, ttlMs: null }));
      const failed = await store.create(newTask({ createdAt: t0 - 10_000, ttlMs: 5_000 }));
      await store.finish(failed.record.taskId, 'replica-a', { status: 'failed', error: { code: -32603, message: 'boom' } }, 'boom', t0 - 9000);
      const swept = await store.sweep(t0, 1000, 100);
      const ids = swept.expired.map((e) => e.taskId).sort();
      assert.deepEqual(ids, [old.record.taskId, failed.record.taskId].sort());
      assert.deepEqual(swept.expired.find((e) => e.taskId === failed.record.taskId)?.retrieved, false);
      const tomb = await store.get(old.record.taskId);
      assert.equal(tomb.state, 'expired');
      assert.equal(tomb.state === 'expired' && tomb.principal, 'carol');
      for (const id of [waiting.record.taskId, fresh.record.taskId, unlimited.record.taskId]) assert.equal((await store.get(id)).state, 'found');
      const purge = await store.sweep(t0 + 2000, 1000, 100);
      assert.equal(purge.purged, 2);
      assert.deepEqual(await store.get(old.record.taskId), { state: 'missing' });
    });

    it("origin and progress token round-trip; a principal's tasks are listed newest first, keyset-paged, never another's", async () => {
      const { store } = await open();
      const t0 = Date.now();
      const legacy = await store.create(newTask({ origin: 'legacy', progressToken: 7, principal: 'dora', createdAt: t0 }));
      assert.equal(legacy.record.origin, 'legacy');
      const back = await store.get(legacy.record.taskId);
      assert.ok(back.state === 'found' && back.record.origin === 'legacy' && back.record.progressToken === 7);
      const plain = await store.create(newTask({ principal: 'erin' }));
      const read = await store.get(plain.record.taskId);
      assert.ok(read.state === 'found' && read.record.origin === 'extension' && read.record.progressToken === null);
      const tokenString = await store.create(newTask({ principal: 'erin', progressToken: 'tok-1', origin: 'handle' }));
      const read2 = await store.get(tokenString.record.taskId);
      assert.ok(read2.state === 'found' && read2.record.progressToken === 'tok-1' && read2.record.origin === 'handle');
      // Seven of dora's tasks, two sharing a creation time (the id breaks the tie), plus other principals' tasks.
      const ids = [legacy.record.taskId];
      for (let i = 1; i <= 6; i++) ids.push((await store.create(newTask({ principal: 'dora', createdAt: t0 + (i === 6 ? 5 : i) }))).record.taskId);
      const expected = (await Promise.all(ids.map(async (id) => (await store.get(id)) as { record: { taskId: string; createdAt: number } })))
        .map((l) => l.record)
        .sort((a, b) => b.createdAt - a.createdAt || (a.taskId < b.taskId ? 1 : -1))
        .map((r) => r.taskId);
      const pages: string[][] = [];
      let after: { createdAt: number; taskId: string } | undefined;
      for (;;) {
        const page = await store.listByPrincipal('dora', after, 3);
        if (page.length === 0) break;
        assert.ok(page.every((t) => t.principal === 'dora'));
        pages.push(page.map((t) => t.taskId));
        const last = page[page.length - 1]!;
        after = { createdAt: last.createdAt, taskId: last.taskId };
      }
      assert.deepEqual(pages.map((p) => p.length), [3, 3, 1]);
      assert.deepEqual(pages.flat(), expected);
      const first = (await store.listByPrincipal('dora', undefined, 1))[0]!;
      assert.deepEqual([first.tool, first.status, first.origin], ['build', 'working', 'extension']);
      assert.deepEqual((await store.listByPrincipal('nobody', undefined, 10)), []);
      assert.deepEqual((await store.listByPrincipal('erin', undefined, 10)).map((t) => t.taskId).sort(), [plain.record.taskId, tokenString.record.taskId].sort());
    });

    it('replicas and orphans: unfinished tasks of owners that are not live are listed for takeover', async () => {
      const { store } = await open();
      const now = Date.now();
      await store.registerReplica({ replicaId: 'live', host: 'h', pid: 1, startedAt: now, heartbeatAt: now });
      await store.registerReplica({ replicaId: 'dead', host: 'h', pid: 2, startedAt: now, heartbeatAt: now - 60_000 });
      assert.equal(await store.heartbeat('live', now + 1), true);
      const reps = await store.listReplicas();
      // A backend may keep replica times on its own clock (PostgreSQL does), so allow for the time the calls took.
      const live = reps.find((r) => r.replicaId === 'live')!.heartbeatAt;
      assert.ok(Math.abs(live - (now + 1)) < 250, `heartbeat read back as ${live - now - 1} ms off`);
      const dead = reps.find((r) => r.replicaId === 'dead')!.heartbeatAt;
      assert.ok(Math.abs(dead - (now - 60_000)) < 250, `an old heartbeat read back ${dead - now + 60_000} ms off`);
      const mine = await store.create(newTask({ owner: 'live' }));
      const orphan = await store.create(newTask({ owner: 'dead' }));
      const done = await store.create(newTask({ owner: 'dead' }));
      await store.finish(done.record.taskId, 'dead', { status: 'completed', result: {} }, null, now);
      const orphans = await store.listOrphans(['live'], 100);
      assert.deepEqual(orphans.map((o) => o.taskId), [orphan.record.taskId]);
      await store.removeReplica('dead');
      assert.deepEqual((await store.listReplicas()).map((r) => r.replicaId), ['live']);
      assert.equal(await store.heartbeat('dead', Date.now()), false, 'a removed replica learns it from its next heartbeat');
      assert.ok(mine.created);
    });

    it('queue: a task created queued has no owner, is nobody\'s orphan, and has a depth and a position', async () => {
      const { store } = await open();
      const t0 = Date.now();
      const a = await store.create(newTask({ queued: true, owner: null, createdAt: t0, statusMessage: 'Queued' }));
      const b = await store.create(newTask({ queued: true, owner: null, createdAt: t0 + 1 }));
      const running = await store.create(newTask({ createdAt: t0 }));
      assert.deepEqual([a.record.owner, a.record.queuedAt, a.record.status, a.record.statusMessage], [null, t0, 'working', 'Queued']);
      assert.equal(running.record.queuedAt, null);
      assert.equal(await store.queueDepth(), 2);
      assert.equal(await store.queuePosition(a.record.taskId), 1);
      assert.equal(await store.queuePosition(b.record.taskId), 2);
      assert.equal(await store.queuePosition(running.record.taskId), undefined);
      const v = await store.view(b.record.taskId);
      assert.equal(v.state === 'found' && v.record.queuedAt, t0 + 1);
      assert.deepEqual((await store.listOrphans([], 100)).map((o) => o.taskId), [running.record.taskId], 'queued work is not taken for an orphan');
      const claimed = await claimOne(store, 'r1', ['build']);
      assert.equal(claimed?.taskId, a.record.taskId);
      assert.deepEqual([claimed?.owner, claimed?.queuedAt, claimed?.statusMessage, claimed?.attempts], ['r1', null, null, 1]);
      assert.equal(await store.queuePosition(b.record.taskId), 1);
      assert.equal(await store.queueDepth(), 1);
    });

    it('queue: claimedAt reads back what one claim took and nothing has written since (a claim whose answer was lost)', async () => {
      const { store } = await open();
      const at = Date.now() - 1000; // in the past: no later write of this test can share the claim's time
      const queued = await Promise.all([1, 2, 3].map((i) => store.create(newTask({ queued: true, owner: null, createdAt: at - 10 + i }))));
      const creation = await store.create(newTask({ owner: 'r1', createdAt: at })); // epoch 1 at the same time: not a claim's
      const took = await store.claimQueued({ owner: 'r1', now: at, room: { build: 10 }, max: 2, limits: {} });
      assert.equal(took.length, 2);
      await store.requestCancel(took[0]!.taskId, at + 500); // a cancel is not a write of the run: still to run (and end)
      assert.deepEqual((await store.claimedAt('r1', at)).map((r) => r.taskId).sort(), took.map((r) => r.taskId).sort());
      await store.setProgress(took[1]!.taskId, 'r1', 'running', undefined, took[1]!.epoch); // its run started
      assert.deepEqual((await store.claimedAt('r1', at)).map((r) => r.taskId), [took[0]!.taskId]);
      assert.deepEqual(await store.claimedAt('r2', at), [], 'another claimer');
      assert.ok(!(await store.claimedAt('r1', at)).some((r) => r.taskId === creation.record.taskId || r.taskId === queued[2]!.record.taskId));
    });

    it('queue: a claim never takes a cancelled or expired task, nor a tool the claimer does not serve', async () => {
      const { store } = await open();
      const t0 = Date.now();
      const cancelled = await store.create(newTask({ queued: true, owner: null, createdAt: t0 - 3 }));
      await store.requestCancel(cancelled.record.taskId, t0);
      await store.create(newTask({ queued: true, owner: null, createdAt: t0 - 10_000, ttlMs: 5_000 })); // expired
      const other = await store.create(newTask({ queued: true, owner: null, createdAt: t0 - 2, tool: 'deploy' }));
      const ok = await store.create(newTask({ queued: true, owner: null, createdAt: t0 - 1 }));
      assert.equal((await claimOne(store, 'r1', ['build'], {}, t0))?.taskId, ok.record.taskId);
      assert.equal(await claimOne(store, 'r1', ['build'], {}, t0), undefined);
      assert.equal((await claimOne(store, 'r1', ['build', 'deploy'], {}, t0))?.taskId, other.record.taskId);
    });

    it('queue: fair between principals: one caller\'s backlog does not starve another\'s single task', async () => {
      const { store } = await open();
      const t0 = Date.now() - 10_000;
      for (let i = 0; i < 20; i++) await store.create(newTask({ queued: true, owner: null, principal: 'alice', createdAt: t0 + i }));
      const bob = await store.create(newTask({ queued: true, owner: null, principal: 'bob', createdAt: t0 + 100 }));
      const [first, second, third] = await store.claimQueued({ owner: 'r1', now: Date.now(), room: { build: 10 }, max: 3, limits: {} });
      assert.equal(first?.principal, 'alice', 'nobody runs anything: the oldest first');
      assert.equal(second?.taskId, bob.record.taskId, 'then the principal with fewer running tasks');
      assert.equal(third?.principal, 'alice');
      assert.equal(third?.createdAt, t0 + 1, 'oldest first within a principal');
      const next = await store.claimQueued({ owner: 'r1', now: Date.now(), room: { build: 10 }, max: 5, limits: {} });
      assert.deepEqual(next.map((r) => r.createdAt), [2, 3, 4, 5, 6].map((i) => t0 + i), 'one claim takes up to max');
    });

    it('queue: the claim agrees with rules.nextClaim on random queues (limits, running work, cancels, expiry)', async () => {
      const { store } = await open();
      let rnd = 42;
      const rand = (n: number) => ((rnd = (Math.imul(rnd, 1664525) + 1013904223) >>> 0) >>> 16) % n;
      const now = Date.now();
      const queued: QueuedTask[] = [];
      const running: Array<{ principal: string; tool: string }> = [];
      const principals = ['p1', 'p2', 'p3', 'p4'];
      const tools = ['t1', 't2', 't3'];
      for (let i = 0; i < 60; i++) {
        const principal = principals[rand(4)]!;
        const tool = tools[rand(3)]!;
        if (rand(4) === 0) {
          await store.create(newTask({ principal, tool, owner: `r${rand(3)}`, createdAt: now - 50_000 + i }));
          running.push({ principal, tool });
          continue;
        }
        const expired = rand(10) === 0;
        const t = newTask({ principal, tool, queued: true, owner: null, createdAt: now - 50_000 + i * 7, ttlMs: expired ? 1000 : 600_000 });
        const { record } = await store.create(t);
        let cancelRequestedAt: number | null = null;
        if (rand(10) === 0) cancelRequestedAt = (await store.requestCancel(record.taskId, now))!.cancelRequestedAt;
        queued.push({ taskId: record.taskId, principal, tool, status: 'working', queuedAt: record.queuedAt!, parkedAt: null, expiresAt: record.expiresAt, cancelRequestedAt });
      }
      // Parked tasks: due or not yet, some waiting for input past their TTL (claimable: no TTL runs during a wait).
      for (let i = 0; i < 20; i++) {
        const principal = principals[rand(4)]!;
        const tool = tools[rand(3)]!;
        const waits = rand(2) === 0;
        const { record } = await store.create(newTask({ principal, tool, owner: 'parker', createdAt: now - 60_000 + i, ttlMs: rand(3) === 0 ? 1000 : 600_000 }));
        if (waits) await store.requestInput(record.taskId, 'parker', { q: { request: ELICIT, deadline: now + 3_600_000 } }, now - 59_000);
        const wakeAt = rand(3) === 0 ? now + 30_000 : now - 30_000 + i * 11;
        const parked = await store.park(record.taskId, { owner: 'parker', epoch: 1 }, { wakeAt, awaiting: waits ? ['q'] : [] }, now - 40_000);
        assert.equal(parked.outcome, 'parked');
        const r = parked.record;
        queued.push({ taskId: r.taskId, principal, tool, status: r.status, queuedAt: r.queuedAt!, parkedAt: r.parkedAt, expiresAt: r.expiresAt, cancelRequestedAt: null });
      }
      // Claims of 1 to 4 tasks with little room per tool: each must take what the rule takes, one task at a time. The
      // claimer runs at most 3 of one principal's tasks (its per-principal bound); now and then one of them ends.
      let claimed = 0;
      const here: Record<string, number> = {};
      for (let step = 0; step < 25; step++) {
        const busy = Object.keys(here).filter((p) => here[p]! > 0);
        if (busy.length > 0 && rand(2) === 0) here[busy[rand(busy.length)]!]! -= 1;
        const simHere = { ...here };
        const room: Record<string, number> = { t1: 1 + rand(3), t2: rand(3) };
        const max = 1 + rand(4);
        const expected: string[] = [];
        const sim = { ...room };
        const simQueued = [...queued];
        const simRunning = [...running];
        while (expected.length < max) {
          const id = nextClaim(simQueued, simRunning, { now, room: sim, limits: { t1: 6 }, principalCap: { cap: 3, running: simHere } });
          if (!id) break;
          const q = simQueued.splice(simQueued.findIndex((x) => x.taskId === id), 1)[0]!;
          simRunning.push({ principal: q.principal, tool: q.tool });
          simHere[q.principal] = (simHere[q.principal] ?? 0) + 1;
          sim[q.tool]! -= 1;
          expected.push(id);
        }
        const got = await store.claimQueued({ owner: 'claimer', now, room, max, limits: { t1: 6 }, principalCap: { cap: 3, running: { ...here } } });
        assert.deepEqual(got.map((r) => r.taskId), expected, `step ${step}`);
        for (const r of got) {
          here[r.principal] = (here[r.principal] ?? 0) + 1;
          assert.ok(here[r.principal]! <= 3, `the claimer runs at most 3 tasks of ${r.principal}`);
          queued.splice(queued.findIndex((q) => q.taskId === r.taskId), 1);
          running.push({ principal: r.principal, tool: r.tool });
        }
        claimed += got.length;
      }
      // The limit of t1 stopped some claims, t3 is never served: the queue is not simply emptied.
      assert.ok(claimed >= 10 && queued.some((q) => q.tool === 't1' && q.cancelRequestedAt === null), `claimed ${claimed}`);
      assert.ok(queued.some((q) => q.queuedAt > now && q.tool !== 't3'), 'a parked task not yet due stayed');
    });

    it('queue: principalLoad counts one principal\'s queued tasks (not parked ones), its stored tasks and its next expiry', async () => {
      const { store } = await open();
      const t0 = Date.now();
      await store.create(newTask({ principal: 'pl-a', queued: true, owner: null, createdAt: t0, ttlMs: 60_000 }));
      await store.create(newTask({ principal: 'pl-a', queued: true, owner: null, createdAt: t0, ttlMs: 30_000 }));
      const { record } = await store.create(newTask({ principal: 'pl-a', owner: 'r', createdAt: t0, ttlMs: 90_000 }));
      await store.park(record.taskId, { owner: 'r', epoch: 1 }, { wakeAt: t0 + 50_000, awaiting: [] }, t0);
      await store.create(newTask({ principal: 'pl-b', queued: true, owner: null, createdAt: t0, ttlMs: null }));
      assert.deepEqual(await store.principalLoad('pl-a'), { queued: 2, stored: 3, nextExpiry: t0 + 30_000 });
      assert.deepEqual(await store.principalLoad('pl-b'), { queued: 1, stored: 1, nextExpiry: null });
      assert.deepEqual(await store.principalLoad('pl-none'), { queued: 0, stored: 0, nextExpiry: null });
    });

    it('queue: a deployment-wide tool limit holds under concurrent claimers on separate connections', async () => {
      const { store, location } = await open();
      const handles = [store, ...(await Promise.all([1, 2, 3].map(async () => (await open(location)).store)))];
      const t0 = Date.now();
      await store.create(newTask({ tool: 'render', owner: 'busy-replica', createdAt: t0 - 100 }));
      for (let i = 0; i < 12; i++) await store.create(newTask({ tool: 'render', queued: true, owner: null, principal: `p${i % 3}`, createdAt: t0 + i }));
      for (let i = 0; i < 4; i++) await store.create(newTask({ tool: 'lint', queued: true, owner: null, createdAt: t0 + 50 + i }));
      const claims = await Promise.all(
        handles.flatMap((h, i) => Array.from({ length: 2 }, () => h.claimQueued({ owner: `r${i}`, now: Date.now(), room: { render: 5, lint: 5 }, max: 2, limits: { render: 3 } }))),
      );
      const got = claims.flat();
      assert.equal(got.filter((c) => c!.tool === 'render').length, 2, 'one render was running already: two more, never more');
      assert.equal(got.filter((c) => c!.tool === 'lint').length, 4, 'an unlimited tool is not held back by the limited one');
      assert.equal(new Set(got.map((c) => c!.taskId)).size, got.length, 'no task claimed twice');
    });

    it('queue: cancelQueued ends a queued task at once; a claimed one is left to its owner', async () => {
      const { store } = await open();
      const a = await store.create(newTask({ queued: true, owner: null, createdAt: Date.now() - 2 }));
      const b = await store.create(newTask({ queued: true, owner: null, createdAt: Date.now() - 1 }));
      const done = await store.cancelQueued(a.record.taskId, 1234, 'Cancelled before it started');
      assert.deepEqual([done?.status, done?.queuedAt, done?.cancelRequestedAt, done?.statusMessage], ['cancelled', null, 1234, 'Cancelled before it started']);
      assert.equal(await store.cancelQueued(a.record.taskId, 1235, 'again'), undefined, 'terminal: nothing to do');
      const claimed = await claimOne(store, 'r1', ['build']);
      assert.equal(claimed?.taskId, b.record.taskId);
      assert.equal(await store.cancelQueued(b.record.taskId, 1236, 'x'), undefined, 'claimed: its owner cancels it');
      const swept = await store.create(newTask({ queued: true, owner: null, createdAt: Date.now() - 10_000, ttlMs: 1000 }));
      const r = await store.sweep(Date.now(), 1000, 100);
      assert.deepEqual(r.expired.map((e) => [e.taskId, e.queued]), [[swept.record.taskId, true]]);
    });

    it('epoch: 1 at creation, bumped by every claim and takeover; a write naming an older epoch is fenced, even from the same replica id', async () => {
      const { store } = await open();
      const { record } = await store.create(newTask({ owner: 'a' }));
      assert.equal(record.epoch, 1);
      assert.equal((await store.setProgress(record.taskId, 'a', 'first', undefined, 1)).epoch, 1);
      // The same replica id claims it again (re-registered after it was presumed dead): a new epoch.
      const again = await store.takeOver(record.taskId, 'a', 'a', Date.now());
      assert.equal(again.epoch, 2);
      assert.equal(await refusal(store.setProgress(record.taskId, 'a', 'zombie', undefined, 1)), 'fenced');
      assert.equal(await refusal(store.setRetrySafe(record.taskId, 'a', true, 1)), 'fenced');
      assert.equal(await refusal(store.requestInput(record.taskId, 'a', { k: { request: ELICIT, deadline: Date.now() + 1000 } }, Date.now(), 1)), 'fenced');
      assert.equal(await refusal(store.finish(record.taskId, 'a', { status: 'completed', result: {} }, null, Date.now(), 1)), 'fenced');
      assert.equal(await refusal(store.writeStep(record.taskId, { owner: 'a', epoch: 1 }, step('s#1', 1, 'completed', '1'))), 'fenced');
      const done = await store.finish(record.taskId, 'a', { status: 'completed', result: { ok: true } }, null, Date.now(), 2);
      assert.deepEqual([done.status, done.epoch], ['completed', 2]);
      const q = await store.create(newTask({ queued: true, owner: null }));
      assert.equal((await claimOne(store, 'r1', ['build']))?.taskId, q.record.taskId);
      const claimed = await store.get(q.record.taskId);
      assert.ok(claimed.state === 'found' && claimed.record.epoch === 2 && claimed.record.owner === 'r1');
    });

    it('steps: written only while the run holds the task, listed in call order with their exact JSON text, swept with the task', async () => {
      const { store } = await open();
      const { record } = await store.create(newTask({ owner: 'a' }));
      const id = record.taskId;
      const a1 = { owner: 'a', epoch: 1 };
      await store.writeStep(id, a1, step('charge#1', 2, 'started', null));
      // Key order, U+0000 and non-ASCII as written: the text is the value, not a re-encoding of it.
      const exact = '{"z":1,"a":"nul \\u0000 é 😀","n":[1.5,null]}';
      await store.writeStep(id, a1, step('charge#1', 2, 'completed', exact));
      await store.writeStep(id, a1, step('fetch#1', 1, 'completed', null));
      const rows = await store.listSteps(id);
      assert.deepEqual(rows.map((r) => [r.key, r.seq, r.state, r.epoch, r.result]), [['fetch#1', 1, 'completed', 1, null], ['charge#1', 2, 'completed', 1, exact]]);
      assert.equal(rows[1]!.bytes, Buffer.byteLength(exact));
      assert.deepEqual(JSON.parse(rows[1]!.result!), { z: 1, a: 'nul \u0000 é 😀', n: [1.5, null] });
      await store.writeStep(id, a1, { ...step('bad#1', 3, 'failed', null), error: { code: -32603, message: 'boom', data: { reason: 'x' } } });
      assert.deepEqual((await store.listSteps(id)).find((r) => r.key === 'bad#1')?.error, { code: -32603, message: 'boom', data: { reason: 'x' } });
      // Another replica took the task over: the old run's step writes are refused, the new one's accepted.
      await store.takeOver(id, 'a', 'b', Date.now());
      assert.equal(await refusal(store.writeStep(id, a1, step('late#1', 4, 'completed', '1'))), 'fenced');
      assert.equal(await refusal(store.writeStep(id, { owner: 'b', epoch: 1 }, step('late#1', 4, 'completed', '1'))), 'fenced');
      await store.writeStep(id, { owner: 'b', epoch: 2 }, step('next#1', 4, 'started', null));
      assert.equal((await store.listSteps(id)).find((r) => r.key === 'next#1')?.epoch, 2);
      // After a cancel request no step may start; a step that ran may still record how it ended.
      await store.requestCancel(id, Date.now());
      assert.equal(await refusal(store.writeStep(id, { owner: 'b', epoch: 2 }, step('more#1', 5, 'started', null))), 'cancelled');
      await store.writeStep(id, { owner: 'b', epoch: 2 }, step('next#1', 4, 'completed', '"ok"'));
      await store.finish(id, 'b', { status: 'cancelled' }, null, Date.now());
      assert.equal(await refusal(store.writeStep(id, { owner: 'b', epoch: 2 }, step('after#1', 6, 'completed', '1'))), 'terminal');
      assert.equal(await refusal(store.writeStep('no-such-task', a1, step('x#1', 1, 'completed', '1'))), 'missing');
      // A swept task takes its steps with it.
      const old = await store.create(newTask({ owner: 'a', createdAt: Date.now() - 10_000, ttlMs: 1000 }));
      await store.writeStep(old.record.taskId, a1, step('s#1', 1, 'completed', '1'));
      await store.sweep(Date.now(), 60_000, 100);
      assert.deepEqual(await store.listSteps(old.record.taskId), []);
      assert.equal((await store.listSteps(id)).length, 4);
    });

    it("a step's first write (firstWrite) is a hint: a row there anyway is replaced, and a refused write is refused for the same reason", async () => {
      const { store } = await open();
      const { record } = await store.create(newTask({ owner: 'a' }));
      const id = record.taskId;
      const a1 = { owner: 'a', epoch: 1 };
      await store.writeStep(id, a1, { ...step('s#1', 1, 'started', null), firstWrite: true });
      // The end written as a first write too (say the answer to the first was lost): the row is replaced, once.
      await store.writeStep(id, a1, { ...step('s#1', 1, 'completed', '"v"'), firstWrite: true });
      assert.deepEqual((await store.listSteps(id)).map((r) => [r.key, r.state, r.result]), [['s#1', 'completed', '"v"']]);
      await store.takeOver(id, 'a', 'b', Date.now());
      assert.equal(await refusal(store.writeStep(id, a1, { ...step('t#1', 2, 'completed', '1'), firstWrite: true })), 'fenced');
      assert.equal(await refusal(store.writeStep(id, a1, { ...step('s#1', 1, 'failed', null), firstWrite: true })), 'fenced');
      await store.requestCancel(id, Date.now());
      assert.equal(await refusal(store.writeStep(id, { owner: 'b', epoch: 2 }, { ...step('u#1', 3, 'started', null), firstWrite: true })), 'cancelled');
      assert.deepEqual((await store.listSteps(id)).map((r) => [r.key, r.state, r.epoch]), [['s#1', 'completed', 1]]);
    });

    it('a step write the database refuses (a value its table forbids) fails alone among the writes of its turn', async () => {
      const { store } = await open();
      const ids = await Promise.all([1, 2].map(async () => (await store.create(newTask({ owner: 'a' }))).record.taskId));
      const a1 = { owner: 'a', epoch: 1 };
      const results = await Promise.allSettled([
        store.writeStep(ids[0]!, a1, step('a#1', 1, 'completed', '1')),
        store.writeStep(ids[0]!, a1, { ...step('b#1', 2, 'completed', '2'), state: 'bogus' as StepWrite['state'] }),
        store.writeStep(ids[1]!, a1, { ...step('c#1', 1, 'started', null), firstWrite: true }),
      ]);
      assert.deepEqual(results.map((r) => r.status), ['fulfilled', 'rejected', 'fulfilled']);
      assert.deepEqual((await store.listSteps(ids[0]!)).map((r) => r.key), ['a#1']);
      assert.deepEqual((await store.listSteps(ids[1]!)).map((r) => [r.key, r.state]), [['c#1', 'started']]);
    });

    it('steps written in the same turn by many runs (grouped into one commit where the store groups): each is fenced on its own and answered on its own', async () => {
      const { store } = await open();
      const runs = await Promise.all(Array.from({ length: 8 }, () => store.create(newTask({ owner: 'a' }))));
      const ids = runs.map((r) => r.record.taskId);
      const a1 = { owner: 'a', epoch: 1 };
      const [taken, cancelled, ended] = ids.slice(5);
      await store.takeOver(taken!, 'a', 'b', Date.now());
      await store.requestCancel(cancelled!, Date.now());
      await store.finish(ended!, 'a', { status: 'completed', result: {} }, null, Date.now());
      // All issued before any is awaited: started rows of 8 runs, a second step of run 0, and a task that is gone.
      const writes = [
        ...ids.map((id) => store.writeStep(id, a1, step('charge#1', 1, 'started', null))),
        store.writeStep(ids[0]!, a1, step('fetch#1', 2, 'completed', '{"n":2}')),
        store.writeStep('no-such-task', a1, step('x#1', 1, 'started', null)),
      ];
      const outcomes = await Promise.all(writes.map((w) => w.then(() => 'written', (e: unknown) => (e instanceof TaskWriteRefused ? e.reason : String(e)))));
      assert.deepEqual(outcomes, ['written', 'written', 'written', 'written', 'written', 'fenced', 'cancelled', 'terminal', 'written', 'missing']);
      for (const id of ids.slice(0, 5)) assert.deepEqual((await store.listSteps(id)).filter((r) => r.key === 'charge#1').map((r) => [r.state, r.epoch]), [['started', 1]]);
      assert.deepEqual((await store.listSteps(ids[0]!)).map((r) => [r.key, r.state, r.result]), [['charge#1', 'started', null], ['fetch#1', 'completed', '{"n":2}']]);
      for (const id of [taken!, cancelled!, ended!]) assert.deepEqual(await store.listSteps(id), []);
      // The same step's end in the same turn as another run's start: both land, the end after its own start.
      const ends = await Promise.all([
        store.writeStep(ids[1]!, a1, step('charge#1', 1, 'completed', '"paid"')),
        store.writeStep(ids[1]!, a1, step('charge#1', 1, 'failed', null)).then(() => 'second write of the key in the turn applied after the first'),
        store.writeStep(ids[2]!, a1, step('ship#1', 2, 'started', null)),
      ]);
      assert.equal(ends[1], 'second write of the key in the turn applied after the first');
      assert.deepEqual((await store.listSteps(ids[1]!)).map((r) => [r.key, r.state]), [['charge#1', 'failed']]);
      assert.deepEqual((await store.listSteps(ids[2]!)).map((r) => [r.key, r.state]), [['charge#1', 'started'], ['ship#1', 'started']]);
    });

    it('park: no owner, nobody\'s orphan, not queued work; the claim resumes it once due (epoch bumped, status message kept)', async () => {
      const { store } = await open();
      const t0 = Date.now();
      const { record } = await store.create(newTask({ owner: 'a', createdAt: t0, statusMessage: 'sleeping until the build is ready' }));
      const p = await store.park(record.taskId, { owner: 'a', epoch: 1 }, { wakeAt: t0 + 5000, awaiting: [] }, t0 + 10);
      assert.equal(p.outcome, 'parked');
      assert.deepEqual([p.record.owner, p.record.parkedAt, p.record.wakeAt, p.record.queuedAt, p.record.status], [null, t0 + 10, t0 + 5000, t0 + 5000, 'working']);
      const v = await store.view(record.taskId);
      assert.ok(v.state === 'found' && v.record.parkedAt === t0 + 10);
      assert.deepEqual(await store.listOrphans([], 100), [], 'a parked task is nobody\'s orphan');
      assert.equal(await store.queueDepth(), 0, 'nor work waiting for capacity');
      assert.equal(await store.queuePosition(record.taskId), undefined);
      assert.equal(await store.nextWake(t0 + 20), t0 + 5000);
      assert.equal(await claimOne(store, 'r1', ['build'], {}, t0 + 4999), undefined, 'not before its wake time');
      const resumed = await claimOne(store, 'r1', ['build'], {}, t0 + 5000);
      assert.deepEqual(
        [resumed?.taskId, resumed?.owner, resumed?.epoch, resumed?.parkedAt, resumed?.wakeAt, resumed?.queuedAt, resumed?.statusMessage, resumed?.attempts],
        [record.taskId, 'r1', 2, null, null, null, 'sleeping until the build is ready', 1],
      );
      assert.equal(await store.nextWake(t0 + 20), undefined);
      // The run that parked it no longer holds it: its writes are refused.
      assert.equal(await refusal(store.setProgress(record.taskId, 'a', 'zombie', undefined, 1)), 'fenced');
      assert.equal(await refusal(store.park(record.taskId, { owner: 'a', epoch: 1 }, { wakeAt: t0 + 9000, awaiting: [] }, t0 + 6000)), 'fenced');
    });

    it('park: not when an awaited key was answered meanwhile, nor after a cancel request; an answer wakes a parked task, a cancel ends it at once', async () => {
      const { store } = await open();
      const t0 = Date.now();
      const fence = { owner: 'a', epoch: 1 };
      const answered = await store.create(newTask({ owner: 'a', createdAt: t0 }));
      await store.requestInput(answered.record.taskId, 'a', { q: { request: ELICIT, deadline: t0 + 60_000 } }, t0);
      await store.answerInput(answered.record.taskId, { q: { action: 'accept', content: { name: 'x' } } }, t0 + 1);
      const c = await store.park(answered.record.taskId, fence, { wakeAt: t0 + 60_000, awaiting: ['q'] }, t0 + 2);
      assert.deepEqual([c.outcome, c.record.owner], ['continue', 'a']);
      const cancelled = await store.create(newTask({ owner: 'a', createdAt: t0 }));
      await store.requestCancel(cancelled.record.taskId, t0);
      assert.equal((await store.park(cancelled.record.taskId, fence, { wakeAt: t0 + 60_000, awaiting: [] }, t0 + 2)).outcome, 'cancelled');
      // Parked on input: an answer through any connection makes it claimable at once, with the TTL grown by the wait.
      const waiting = await store.create(newTask({ owner: 'a', createdAt: t0, ttlMs: 10_000 }));
      await store.requestInput(waiting.record.taskId, 'a', { q: { request: ELICIT, deadline: t0 + 3_600_000 } }, t0 + 100);
      const parked = await store.park(waiting.record.taskId, fence, { wakeAt: t0 + 3_600_000, awaiting: ['q'] }, t0 + 200);
      assert.deepEqual([parked.outcome, parked.record.status], ['parked', 'input_required']);
      assert.equal(await claimOne(store, 'r1', ['build'], {}, t0 + 1000), undefined);
      const a = await store.answerInput(waiting.record.taskId, { q: { action: 'accept', content: { name: 'y' } } }, t0 + 2100);
      assert.deepEqual([a.accepted, a.record.status, a.record.queuedAt, a.record.ttlMs], [['q'], 'working', t0 + 2100, 12_000]);
      const resumed = await claimOne(store, 'r2', ['build'], {}, t0 + 2101);
      assert.deepEqual([resumed?.taskId, resumed?.owner, resumed?.epoch], [waiting.record.taskId, 'r2', 2]);
      assert.deepEqual(resumed?.inputResponses.q?.response, { action: 'accept', content: { name: 'y' } });
      // Cancel of a parked task: cancelled at once, no handler involved.
      const other = await store.create(newTask({ owner: 'a', createdAt: t0 }));
      await store.requestInput(other.record.taskId, 'a', { q: { request: ELICIT, deadline: t0 + 3_600_000 } }, t0);
      await store.park(other.record.taskId, fence, { wakeAt: t0 + 3_600_000, awaiting: ['q'] }, t0 + 1);
      const done = await store.cancelQueued(other.record.taskId, t0 + 5, 'Cancelled while parked');
      assert.deepEqual([done?.status, done?.parkedAt, done?.queuedAt, done?.inputRequests], ['cancelled', null, null, {}]);
    });

    it('park with handOff (a replica shutting down): parked though due, even waiting on an answered key, and claimable by another replica at once; not after a cancel request', async () => {
      const { store } = await open();
      const t0 = Date.now();
      const fence = { owner: 'a', epoch: 1 };
      const running = await store.create(newTask({ owner: 'a', createdAt: t0, statusMessage: 'step 2 of 3' }));
      const p = await store.park(running.record.taskId, fence, { wakeAt: t0 + 10, awaiting: [], handOff: true }, t0 + 10);
      assert.deepEqual([p.outcome, p.record.owner, p.record.queuedAt, p.record.status], ['parked', null, t0 + 10, 'working']);
      const asked = await store.create(newTask({ owner: 'a', createdAt: t0 }));
      await store.requestInput(asked.record.taskId, 'a', { q: { request: ELICIT, deadline: t0 + 60_000 } }, t0);
      await store.answerInput(asked.record.taskId, { q: { action: 'accept', content: { name: 'x' } } }, t0 + 1);
      assert.equal((await store.park(asked.record.taskId, fence, { wakeAt: t0 + 10, awaiting: ['q'], handOff: true }, t0 + 10)).outcome, 'parked');
      const taken = [await claimOne(store, 'b', ['build'], {}, t0 + 10), await claimOne(store, 'b', ['build'], {}, t0 + 10)];
      assert.deepEqual(taken.map((r) => [r?.owner, r?.epoch, r?.parkedAt]).sort(), [['b', 2, null], ['b', 2, null]]);
      assert.deepEqual(taken.map((r) => r?.taskId).sort(), [running.record.taskId, asked.record.taskId].sort());
      assert.equal(taken.find((r) => r?.taskId === running.record.taskId)?.statusMessage, 'step 2 of 3');
      const cancelled = await store.create(newTask({ owner: 'a', createdAt: t0 }));
      await store.requestCancel(cancelled.record.taskId, t0);
      assert.equal((await store.park(cancelled.record.taskId, fence, { wakeAt: t0 + 10, awaiting: [], handOff: true }, t0 + 10)).outcome, 'cancelled');
    });

    it('input deadlines are decided by the store: a key past its deadline is recorded timed out, a late answer is refused, a replay sees the timeout', async () => {
      const { store } = await open();
      const t0 = Date.now();
      const { record } = await store.create(newTask({ owner: 'a', createdAt: t0, ttlMs: 10_000 }));
      const id = record.taskId;
      await store.requestInput(id, 'a', { early: { request: ELICIT, deadline: t0 + 1000 }, late: { request: ELICIT, deadline: t0 + 5000 } }, t0);
      assert.equal((await store.expireInput(id, t0 + 999))?.status, 'input_required', 'nothing is due yet');
      const r = (await store.expireInput(id, t0 + 1000))!;
      assert.deepEqual(Object.keys(r.inputRequests), ['late']);
      assert.deepEqual([r.inputResponses.early?.timedOut, r.status], [true, 'input_required']);
      // An answer that comes after the deadline is refused even when nobody recorded the timeout yet.
      const lateAnswer = await store.answerInput(id, { early: { action: 'accept' }, late: { action: 'accept', content: { x: 1 } } }, t0 + 6000);
      assert.deepEqual(lateAnswer.accepted, []);
      assert.deepEqual([lateAnswer.record.inputResponses.late?.timedOut, lateAnswer.record.status], [true, 'working']);
      assert.equal(lateAnswer.record.ttlMs, 16_000, 'the TTL grew by the wait');
      // A replay that asks the same keys again is not asked anything: both stay timed out.
      const replay = await store.requestInput(id, 'a', { early: { request: ELICIT, deadline: t0 + 99_000 }, late: { request: ELICIT, deadline: t0 + 99_000 } }, t0 + 7000);
      assert.deepEqual([replay.status, Object.keys(replay.inputRequests), replay.inputResponses.early?.timedOut], ['working', [], true]);
      // A replay after the deadline that nobody recorded records it.
      const other = await store.create(newTask({ owner: 'a', createdAt: t0 }));
      await store.requestInput(other.record.taskId, 'a', { k: { request: ELICIT, deadline: t0 + 100 } }, t0);
      const again = await store.requestInput(other.record.taskId, 'a', { k: { request: ELICIT, deadline: t0 + 60_000 } }, t0 + 200);
      assert.deepEqual([again.status, again.inputResponses.k?.timedOut], ['working', true]);
      assert.equal(await store.expireInput('no-such-task', t0), undefined);
      // A replay is recognised whatever order the store keeps a request's keys in (jsonb sorts them).
      const form = { method: 'elicitation/create' as const, params: { mode: 'form', message: 'Who?', requestedSchema: { type: 'object', properties: { a: { type: 'string' } }, required: ['a'] } } };
      const keyed = await store.create(newTask({ owner: 'a', createdAt: t0 }));
      await store.requestInput(keyed.record.taskId, 'a', { who: { request: form, deadline: t0 + 60_000 } }, t0);
      await store.answerInput(keyed.record.taskId, { who: { action: 'accept', content: { a: 'x' } } }, t0 + 1);
      const asked = await store.requestInput(keyed.record.taskId, 'a', { who: { request: structuredClone(form), deadline: t0 + 60_000 } }, t0 + 2);
      assert.deepEqual(Object.keys(asked.inputRequests), [], 'a replay, not a new question');
    });

    it('expiry is read at once: a task past its TTL reads expired before any sweep, except while it waits for input', async () => {
      const { store } = await open();
      const t0 = Date.now();
      const past = await store.create(newTask({ createdAt: t0 - 10_000, ttlMs: 5_000, principal: 'erin' }));
      const done = await store.create(newTask({ createdAt: t0 - 10_000, ttlMs: 5_000 }));
      await store.finish(done.record.taskId, 'replica-a', { status: 'completed', result: {} }, null, t0 - 9_000);
      const waiting = await store.create(newTask({ createdAt: t0 - 10_000, ttlMs: 5_000 }));
      await store.requestInput(waiting.record.taskId, 'replica-a', { q: { request: ELICIT, deadline: t0 + 60_000 } }, t0 - 9_000);
      for (const id of [past.record.taskId, done.record.taskId]) {
        assert.deepEqual(await store.get(id), { state: 'expired', principal: id === past.record.taskId ? 'erin' : 'alice', expiredAt: t0 - 5_000 });
        assert.equal((await store.view(id)).state, 'expired');
      }
      assert.equal((await store.view(waiting.record.taskId)).state, 'found');
      assert.equal((await store.count()).tasks, 3, 'nothing was swept: the read decided');
    });

    it('sharedSecret: generated once, the same for every connection, even when asked at once', async () => {
      const { store, location } = await open();
      const { store: other } = await open(location);
      const values = await Promise.all([store, other, store, other].map((s, i) => s.sharedSecret('request-state', () => `secret-${i}`)));
      assert.equal(new Set(values).size, 1);
      assert.equal(await other.sharedSecret('request-state', () => 'late'), values[0]);
      assert.equal(await store.sharedSecret('another', () => 'b'), 'b');
    });
    it('markAsked: one stream of a caller holds a question, on any connection, until it gives it back; the mark goes with its task', async () => {
      const { store, location } = await open();
      const { store: other } = await open(location);
      const t = newTask();
      await store.create(t);
      // Two streams (on two replicas) race for the same question: exactly one puts it to the caller.
      const raced = await Promise.all([store.markAsked(t.taskId, 'ok', 'stream-a', Date.now()), other.markAsked(t.taskId, 'ok', 'stream-b', Date.now())]);
      assert.equal(raced.filter(Boolean).length, 1);
      const [holder, waiter] = raced[0] ? ['stream-a', 'stream-b'] : ['stream-b', 'stream-a'];
      assert.equal(await other.markAsked(t.taskId, 'ok', waiter, Date.now()), false, 'held: not asked again');
      assert.equal(await store.markAsked(t.taskId, 'other-key', waiter, Date.now()), true, 'another question is its own');
      assert.equal(await store.unmarkAsked(t.taskId, 'ok', waiter), false, 'only the holder gives it back');
      assert.equal(await other.unmarkAsked(t.taskId, 'ok', holder), true);
      assert.equal(await store.markAsked(t.taskId, 'ok', waiter, Date.now()), true, 'given back: the next stream asks');
      assert.equal(await store.markAsked('t-no-such-task', 'ok', 'stream-a', Date.now()), false, 'a task that is gone is asked by nobody');
      // Retention: the sweep that removes the task removes its marks (a new task with the same id starts unmarked).
      const gone = newTask({ ttlMs: 1, createdAt: Date.now() - 60_000 });
      await store.create(gone);
      assert.equal(await store.markAsked(gone.taskId, 'ok', 'stream-a', Date.now()), true);
      await store.sweep(Date.now(), 60_000, 100);
      assert.equal((await store.view(gone.taskId)).state, 'expired');
      assert.equal(await store.markAsked(gone.taskId, 'ok', 'stream-b', Date.now()), false);
    });
    opsKit(() => open(), (location) => open(location));
    eventsKit(() => open(), (location) => open(location));
    outputKit(() => open(), (location) => open(location));
    operatorSessionsKit(() => open(), (location) => open(location));
  });
}
