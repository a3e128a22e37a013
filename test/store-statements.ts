/**
 * Every statement of the PostgreSQL store, run once: a workload over each of its rooms (tasks, input, steps, output,
 * the run queue, parking, recovery, sweeping, listings, settings, the operator's, dashboard sessions, MCP Events and
 * output delivery), and a spy on the driver that records which named (prepared) statements ran and which the server
 * refused. Used by the upgrade tests: run it, migrate under the store, run it again.
 */
import assert from 'node:assert/strict';
import pg from 'pg';
import { newTask } from '../src/store/testkit/index.js';
import { TASK_FINISHED, TASK_STATUS, type NewSubscription } from '../src/store/events.js';
import { TASK_OUTPUT } from '../src/store/output-events.js';
import type { PostgresTaskStore } from '../src/store/postgres/index.js';
import type { StepWrite } from '../src/store/types.js';

const ELICIT = { method: 'elicitation/create' as const, params: { mode: 'form', message: 'Name?', requestedSchema: { type: 'object', properties: {} } } };

export interface StatementSpy {
  /** Names of the named statements sent since the last `reset`. */
  named: Set<string>;
  /** Errors the server answered a statement with (SQLSTATE and message), since the last `reset`. */
  refused: Array<{ name: string | undefined; code: string; message: string }>;
  reset(): void;
  restore(): void;
}

/** Watches every statement node-postgres sends from this process (the real driver runs them; nothing is changed). */
export function spyOnStatements(): StatementSpy {
  const proto = pg.Client.prototype as unknown as { query: (...a: unknown[]) => unknown };
  const original = proto.query;
  const spy: StatementSpy = {
    named: new Set(),
    refused: [],
    reset() {
      spy.named.clear();
      spy.refused.length = 0;
    },
    restore() {
      proto.query = original;
    },
  };
  proto.query = function (this: unknown, ...args: unknown[]) {
    const config = args[0] as { name?: string } | string;
    const name = typeof config === 'object' && config !== null ? config.name : undefined;
    if (name) spy.named.add(name);
    const r = original.apply(this, args);
    if (r instanceof Promise) {
      r.catch((e: { code?: unknown; message?: string }) => {
        if (typeof e?.code === 'string') spy.refused.push({ name, code: e.code, message: String(e.message) });
      });
    }
    return r;
  };
  return spy;
}

const step = (key: string, seq: number, state: StepWrite['state']): StepWrite => ({
  key, name: key.slice(0, key.lastIndexOf('#')), kind: 'step', seq, state, tries: 1, idempotent: false,
  result: state === 'started' ? null : '"ok"', error: null, bytes: state === 'started' ? 0 : 4, startedAt: Date.now(), finishedAt: state === 'started' ? null : Date.now(),
});

const sub = (over: Partial<NewSubscription>): NewSubscription => ({
  subId: `sub_${Math.random().toString(16).slice(2)}`, principal: 'alice', url: 'https://hooks.example/a', name: TASK_FINISHED, args: '{}',
  taskId: null, tool: null, secret: 'whsec_x', refreshBefore: Date.now() + 600_000, now: Date.now(), ...over,
});

/** Runs every statement of the store at least once (`round` keeps each run's rows apart); throws on any failure. */
export async function runEveryStatement(s: PostgresTaskStore, round: string): Promise<void> {
  const owner = `replica-${round}`;
  const now = () => s.now();
  // Replicas (the heartbeat lane).
  await s.registerReplica({ replicaId: owner, host: 'h', pid: process.pid, startedAt: Date.now(), heartbeatAt: Date.now() });
  assert.equal(await s.heartbeat(owner, Date.now()), true);
  assert.ok((await s.listReplicas()).some((r) => r.replicaId === owner));
  await s.ping();

  // Creation (group-committed), the idempotency key's lookup, reads.
  const key = `k-${round}`;
  const a = (await s.create(newTask({ owner, idempotencyKey: key, requestHash: 'h', tool: `build-${round}` }))).record;
  const again = await s.create(newTask({ owner, idempotencyKey: key, requestHash: 'h', tool: `build-${round}` }));
  assert.deepEqual([again.created, again.record.taskId], [false, a.taskId]);
  assert.equal((await s.get(a.taskId)).state, 'found');
  assert.equal((await s.view(a.taskId)).state, 'found');
  assert.equal((await s.get(`missing-${round}`)).state, 'missing');
  const fence = { owner, epoch: a.epoch };
  await s.setProgress(a.taskId, owner, 'half way', 500, a.epoch);
  await s.setRetrySafe(a.taskId, owner, true, a.epoch);

  // Input: asked, marked as asked, answered, expired.
  await s.requestInput(a.taskId, owner, { q: { request: ELICIT, deadline: now() + 60_000 } }, now(), a.epoch);
  assert.equal(await s.markAsked(a.taskId, 'q', 'stream-1', now()), true);
  assert.equal(await s.unmarkAsked(a.taskId, 'q', 'stream-1'), true);
  assert.deepEqual((await s.answerInput(a.taskId, { q: { action: 'accept', content: {} } }, now())).accepted, ['q']);
  await s.expireInput(a.taskId, now());

  // Durable steps: one write, then two in one turn (the grouped statement), and the list.
  await s.writeStep(a.taskId, fence, step('fetch#1', 1, 'completed'));
  const b = (await s.create(newTask({ owner }))).record;
  await Promise.all([s.writeStep(a.taskId, fence, step('build#1', 2, 'completed')), s.writeStep(b.taskId, { owner, epoch: b.epoch }, step('fetch#1', 1, 'started'))]);
  assert.equal((await s.listSteps(a.taskId)).length, 2);

  // Output: appended past its bounds (the rotation's statements), read.
  await s.output.append(a.taskId, fence, [{ type: 'text', data: '{"text":"one"}', key: null }], { maxItems: 1, maxBytes: 1_000_000 }, now());
  await s.output.append(a.taskId, fence, [{ type: 'text', data: '{"text":"two"}', key: 'k2' }], { maxItems: 1, maxBytes: 10 }, now());
  assert.ok(await s.output.read(a.taskId, 'alice', 0, 10));

  // MCP Events: subscriptions (the transaction), claims in the commit and in rounds, settles, reads, prune.
  const head = await s.events.head();
  const finished = sub({ url: `https://hooks.example/${round}` });
  const status = sub({ name: TASK_STATUS, url: `https://hooks.example/${round}/s` });
  assert.equal(await s.events.subscribe(finished, 100), 'created');
  assert.equal(await s.events.subscribe(status, 100), 'created');
  assert.equal(await s.events.subscribe(sub({ name: TASK_OUTPUT, taskId: a.taskId, url: `https://hooks.example/${round}/o` }), 100), 'created');
  assert.equal((await s.events.get(finished.subId))?.subId, finished.subId);
  await s.events.live('alice', now());
  await s.events.markVerified(finished.subId, now());
  assert.notEqual(await s.events.verifiedAt('alice', finished.url), null);
  await s.events.list(undefined, 5);
  await s.events.list('alice', 5);

  // Cancel, then the terminal write claiming its deliveries in the same statement.
  await s.requestCancel(a.taskId, now());
  assert.deepEqual(await s.pendingCancels(owner), [a.taskId]);
  const taken: unknown[] = [];
  const undo = s.events.claimOnCommit!({ replica: owner, claimMs: 10_000, reserve: () => 5, take: (claimed) => void taken.push(...claimed) });
  try {
    await s.finish(a.taskId, owner, { status: 'completed', result: { content: [] } }, null, now(), a.epoch);
  } finally {
    undo();
  }
  await s.finish(b.taskId, owner, { status: 'failed', error: { code: -32603, message: 'broke' } }, null, now(), b.epoch);
  await s.markRetrieved(a.taskId, now());
  assert.ok((await s.events.read('alice', { name: TASK_STATUS, taskId: null, tool: null }, head, 50)).length > 0);
  const claimed = await s.events.claim(owner, now(), 10_000, 50);
  for (const c of claimed) {
    if (c.subId === status.subId) await s.events.settle(c.subId, c.seq, owner, { delivered: false, status: 500, error: 'http_5xx', retryAt: now() + 60_000, now: now(), deactivateAfter: 100 });
    else await s.events.settle(c.subId, c.seq, owner, { delivered: true, status: 200, now: now() });
  }
  assert.equal(await s.events.deactivate(status.subId, 'ops', now()), true);
  await s.events.claimControl(owner, now(), 10_000, 10);
  assert.equal(await s.events.unsubscribe({ principal: 'alice', url: finished.url, name: TASK_FINISHED, args: '{}' }), true);
  await s.events.prune(0, 0);

  // Task output delivery: the output subscription's cursor.
  for (const c of await s.outputEvents.claim(owner, now(), 10_000, 10)) {
    if (c.taskId !== a.taskId) continue;
    await s.outputEvents.settle(c.subId, owner, 0, { delivered: false, status: 500, error: 'http_5xx', retryAt: now(), now: now(), deactivateAfter: 100 }, now());
    await s.outputEvents.release(c.subId, owner);
    await s.outputEvents.end(c.subId, owner);
  }

  // Dashboard sessions: a sign-in (with its purge and bound), a read, a use, a sign-out.
  const session = { id: `session-${round}`, operator: 'anna', tokenDigest: `token-${round}`, createdAt: now(), lastSeenAt: now(), expiresAt: now() + 60_000 };
  await s.operatorSessions.open(session, 10);
  assert.equal((await s.operatorSessions.get(session.id))?.operator, 'anna');
  await s.operatorSessions.touch(session.id, now() + 1);
  assert.equal(await s.operatorSessions.end(session.id), true);

  // The run queue: admission's reads, a claim, what it took, a queued cancel.
  const q1 = (await s.create(newTask({ owner: null, queued: true }))).record;
  const q2 = (await s.create(newTask({ owner: null, queued: true }))).record;
  assert.ok((await s.queueDepth()) >= 2);
  assert.ok((await s.queuePosition(q1.taskId))! >= 1);
  await s.principalLoad('alice');
  const at = now();
  const took = await s.claimQueued({ owner, now: at, room: { build: 100 }, max: 1, limits: { build: 1000 }, principalCap: { cap: 100, running: { alice: 0 } } });
  assert.equal(took.length, 1);
  assert.equal((await s.claimedAt(owner, at)).length, 1);
  assert.ok(await s.cancelQueued(took[0]!.taskId === q1.taskId ? q2.taskId : q1.taskId, now(), 'Cancelled while queued'));

  // Parking and its wake.
  const parked = await s.park(took[0]!.taskId, { owner, epoch: took[0]!.epoch }, { wakeAt: now() + 60_000, awaiting: [] }, now());
  assert.equal(parked.outcome, 'parked');
  assert.ok((await s.nextWake(now())) !== undefined);

  // Recovery: orphans of a dead owner, taken over.
  const orphan = (await s.create(newTask({ owner: `gone-${round}` }))).record;
  assert.ok((await s.listOrphans([owner], 1000)).some((t) => t.taskId === orphan.taskId));
  await s.takeOver(orphan.taskId, `gone-${round}`, owner, now());

  // Sweeping: an expired task becomes a tombstone, read as expired; tombstones are purged.
  const old = (await s.create(newTask({ owner, createdAt: now() - 10_000, ttlMs: 1 }))).record;
  assert.ok((await s.sweep(now(), 1, 100)).expired.some((e) => e.taskId === old.taskId));
  assert.equal((await s.get(old.taskId)).state, 'expired');
  await s.sweep(now() + 10, 1, 100);

  // Listings, counts, settings.
  await s.count();
  const page = await s.listByPrincipal('alice', undefined, 2);
  await s.listByPrincipal('alice', { createdAt: page.at(-1)!.createdAt, taskId: page.at(-1)!.taskId }, 2);
  assert.equal(await s.sharedSecret(`secret-${round}`, () => 'v'), 'v');

  // The operator's side.
  for (const f of [{}, { status: 'failed' as const }, { tool: 'build', status: 'working' as const }, { principal: 'alice', unread: true }]) {
    const p1 = await s.ops.listTasks(f, undefined, 1);
    if (p1.next) await s.ops.listTasks(f, p1.next, 1);
  }
  await s.ops.counts(100);
  await s.ops.waiting(5);
  await s.ops.queued(5);
  await s.ops.parked(5);
  await s.ops.toolStats(0, 100);
  assert.ok(await s.ops.detail(b.taskId));
  assert.ok((await s.ops.history(a.taskId, 50)).length > 0);
  await s.ops.cancel(orphan.taskId, 'ops-anna', 'runaway', now());
  await s.ops.alertUnreadFailures(now() + 1000, now(), 10);
  assert.equal(await s.ops.acknowledge(b.taskId, 'ops-anna', now()), true);
  const alert = (kind: 'replica-lost', id: string) => ({ alertId: `msg_${round}_${id}`, dedupeKey: `${kind}:${round}:${id}`, kind, message: 'gone', destination: 'alerts', data: { id }, createdAt: now() });
  assert.equal(await s.ops.addAlert(alert('replica-lost', 'x')), true);
  await s.registerReplica({ replicaId: `lost-${round}`, host: 'h', pid: 1, startedAt: Date.now(), heartbeatAt: Date.now() });
  assert.equal(await s.ops.replicaLost(`lost-${round}`, alert('replica-lost', 'y')), true);
  const alerts = await s.ops.claimAlerts(owner, ['alerts'], now(), 10_000, 10);
  for (const [i, al] of alerts.entries()) {
    if (i % 2) await s.ops.settleAlert(al.alertId, owner, { delivered: true, status: 200, now: now() });
    else await s.ops.settleAlert(al.alertId, owner, { delivered: false, status: 500, error: 'HTTP 500', retryAt: now() + 60_000, now: now() });
  }
  const first = await s.ops.listAlerts(undefined, 1);
  await s.ops.listAlerts({ createdAt: first[0]!.createdAt, alertId: first[0]!.alertId }, 1);
  await s.ops.subscribe(a.taskId, 'https://hooks.example/ops', now());

  await s.removeReplica(owner);
}
