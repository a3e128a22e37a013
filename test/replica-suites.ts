/**
 * Multi-replica suites run on more than one setup: directly on PostgreSQL (replicas.test.ts, capacity.test.ts,
 * steps-processes.test.ts, events-postgres.test.ts) and through PgBouncer in transaction mode with --bus direct
 * PostgreSQL or Redis (pooler-replicas.test.ts, pooler-suites.test.ts).
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Webhook } from 'standardwebhooks';
import { postgresStoreFromUrl } from '../src/store/postgres/index.js';
import { FIXTURES, ROOT, TASKS_CAPS, callTool, getTask, rpc, sleep, startServer, tempDir, textOf, until, waitForTask, type ServerProcess } from './helpers.js';
import { busy, maxConcurrent, waitForEnds } from './busy-log.js';
import { created, startCluster, started, useClusterFrom, type Cluster } from './replicas.js';
import { assertSurvivedKill, has, starts, stepEvents, untilLogged, untilStepStored } from './steps-log.js';

/** Where a suite's processes keep their tasks: the store URL, and the flags each process takes with it (e.g. --bus). */
export interface StoreSetup {
  storeUrl: string;
  args: string[];
}

const TERMINAL = ['completed', 'failed', 'cancelled'];

/** Polls the task until it is terminal (or `timeoutMs` passed) and returns it as read last. */
export async function finalStatus(url: string, taskId: string, opts: { token?: string } = {}, timeoutMs = 15_000): Promise<Record<string, any>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const t = (await getTask(url, taskId, opts)).result;
    if (TERMINAL.includes(t.status) || Date.now() > deadline) return t;
    await sleep(200);
  }
}

const LEASE_MS = 1500;
const HEARTBEAT_MS = 200;
// The durable steps suite kills owners of many stepping runs: at 1.5 s, a loaded machine's survivor was once judged
// dead too, and a task ended on a third attempt; 3 s keeps the kill the only takeover.
const STEPS_LEASE_MS = 3000;
const STEPS_HEARTBEAT_MS = 400;

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

/** A deployment-wide --tool-limit across two replicas and a --no-http worker, counted by the handlers themselves. */
export function toolLimitSuite(title: string, setup: () => StoreSetup): void {
  describe(`--tool-limit busy=4 across two replicas and a --no-http worker ${title}`, () => {
    let s: StoreSetup;
    // The HTTP replicas hold one handler each: whatever runs beyond two at once runs on the worker.
    const c = useClusterFrom(() => {
      s = setup();
      return startCluster(2, ['--max-running', '1', '--tool-limit', 'busy=4', ...s.args], { module: FIXTURES, storeUrl: s.storeUrl });
    });

    it('never more than 4 run at once in the whole deployment, and the worker runs its share', async (t) => {
      const worker = await startServer(['--store', s.storeUrl, ...s.args, '--max-running', '5', '--tool-limit', 'busy=4', '--no-http']);
      try {
        const [a, b] = c.cluster.replicas;
        const log = join(tempDir(), 'limit.log');
        const calls = await Promise.all(Array.from({ length: 24 }, (_, i) => busy((i % 2 ? a : b)!.url, 0.5, log)));
        assert.ok(calls.every((x) => x.taskId), 'a tool limited across the deployment always runs as a task');
        const events = await waitForEnds(log, 24, 30_000);
        assert.ok(maxConcurrent(events) <= 4 && maxConcurrent(events) >= 3, `${maxConcurrent(events)} ran at once`);
        t.diagnostic(`started per process (a, b, worker): ${[...c.cluster.replicas, worker].map((r) => events.filter((e) => e.kind === 'START' && e.pid === r.pid).length).join(' / ')}`);
        assert.ok(events.some((e) => e.pid === worker.pid), 'the worker ran some');
        const statuses = await Promise.all(calls.map((x) => finalStatus(c.cluster.front.url, x.taskId!)));
        assert.deepEqual([...new Set(statuses.map((t) => t.status))], ['completed']);
      } finally {
        await worker.stop();
      }
    });
  });
}

/** A durable tool's steps (the `steps` fixture) on three replicas with a short lease: kill -9 or SIGSTOP of the owner. */
export function durableStepsSuite(title: string, setup: () => StoreSetup): void {
  describe(`durable steps on three replicas ${title} (lease ${STEPS_LEASE_MS} ms, heartbeat ${STEPS_HEARTBEAT_MS} ms)`, () => {
    const c = useClusterFrom(() => {
      const s = setup();
      return startCluster(3, ['--lease-ms', String(STEPS_LEASE_MS), '--heartbeat-ms', String(STEPS_HEARTBEAT_MS), ...s.args], { module: FIXTURES, storeUrl: s.storeUrl });
    });

    it('kill -9 of the owner between B and C: another replica completes it, A, B, C each run once', async () => {
      const [a, b] = c.cluster.replicas;
      const log = join(tempDir(), 'pg-between.log');
      // A gap of 4 s: the kill lands in it even when a loaded machine is slow to see B's end in the log.
      const id = await created(a!.url, 'steps', { log, count: 3, stepSeconds: 0.2, gapSeconds: 4 });
      await untilLogged([log], has('END', 's2', a!.pid), 'B ended');
      const store = postgresStoreFromUrl(c.cluster.storeUrl);
      await store.init();
      try {
        await untilStepStored(store, id, 's2#1');
      } finally {
        await store.close();
      }
      await a!.stop('SIGKILL');
      assert.equal(starts(log).s3 ?? 0, 0, 'killed before C started');
      const done = await waitForTask(b!.url, id, undefined, { timeoutMs: STEPS_LEASE_MS + 15_000 });
      assert.equal(done.status, 'completed', JSON.stringify(done));
      assert.equal(textOf(done.result), 'Steps done: s1, s2, s3 (attempt 2)');
      assert.deepEqual(starts(log), { s1: 1, s2: 1, s3: 1 });
      assert.notEqual(stepEvents(log).find((e) => e.step === 's3')!.pid, a!.pid);
      await c.cluster.add();
    });

    it('kill -9 of the owner inside B: not idempotent, the task fails naming B and C never runs; idempotent, B runs again elsewhere and the task completes', async () => {
      const [, b, cc] = c.cluster.replicas;
      const strict = join(tempDir(), 'pg-strict.log');
      const redo = join(tempDir(), 'pg-redo.log');
      // Steps of 3 s: both runs are still inside B when a loaded machine is slow to see them start it.
      const args = { count: 3, stepSeconds: 3, gapSeconds: 0.1 };
      const strictId = await created(b!.url, 'steps', { ...args, log: strict });
      const redoId = await created(b!.url, 'steps', { ...args, log: redo, idempotent: true });
      await untilLogged([strict, redo], has('START', 's2', b!.pid), 'B running');
      await b!.stop('SIGKILL');
      assert.equal([strict, redo].some((p) => has('END', 's2')(stepEvents(p))), false, 'killed inside B');
      const failed = await waitForTask(cc!.url, strictId, undefined, { timeoutMs: STEPS_LEASE_MS + 15_000 });
      assert.deepEqual([failed.status, failed.error.data.reason, failed.error.data.step], ['failed', 'step_interrupted', 's2#1']);
      const done = await waitForTask(cc!.url, redoId, undefined, { timeoutMs: STEPS_LEASE_MS + 15_000 });
      assert.equal(textOf(done.result), 'Steps done: s1, s2, s3 (attempt 2)');
      assert.deepEqual(starts(strict), { s1: 1, s2: 1 });
      assert.deepEqual(starts(redo), { s1: 1, s2: 2, s3: 1 });
      await c.cluster.add();
    });

    it('SIGSTOP of the owner inside B past its lease, then SIGCONT: the new owner completes the task, the paused one writes nothing after the takeover', async () => {
      const x = c.cluster.replicas[2]!;
      const other = c.cluster.replicas[3]!;
      const store = postgresStoreFromUrl(c.cluster.storeUrl);
      await store.init();
      const log = join(tempDir(), 'pg-paused.log');
      const id = await created(x.url, 'steps', { log, count: 3, stepSeconds: 2, gapSeconds: 0.1, idempotent: true });
      await untilLogged([log], has('START', 's2', x.pid), 'B running on the replica to pause');
      process.kill(x.pid, 'SIGSTOP');
      let continued = false;
      try {
        // Only the lease tells a paused process: another replica runs B again, then C.
        await untilLogged([log], (e) => e.some((s) => s.kind === 'START' && s.step === 's2' && s.pid !== x.pid), 'B again elsewhere', STEPS_LEASE_MS + 10_000);
        const done = await waitForTask(other.url, id, undefined, { timeoutMs: 15_000 });
        assert.equal(textOf(done.result), 'Steps done: s1, s2, s3 (attempt 2)');
        const before = await store.listSteps(id);
        process.kill(x.pid, 'SIGCONT');
        continued = true;
        // The paused run wakes inside B: its step ends (its own effect) but its writes are refused and it stops.
        await sleep(2500 + 1000);
        assert.deepEqual(await store.listSteps(id), before, 'no row written by the paused owner after the takeover');
        assert.deepEqual(before.map((r) => [r.key, r.state, r.epoch]), [['s1#1', 'completed', 1], ['s2#1', 'completed', 2], ['s3#1', 'completed', 2]]);
        const after = await getTask(other.url, id);
        assert.deepEqual(after.result.result, done.result, 'the result stands');
        assert.equal(stepEvents(log).some((e) => e.step === 's3' && e.pid === x.pid), false, 'the paused owner never started C');
        assert.match(x.stderr(), /presumed dead|took this task over/);
      } finally {
        if (!continued) process.kill(x.pid, 'SIGCONT');
        await store.close();
      }
    });

    it('kill -9 of the owner of 16 runs stepping at once (their step commits grouped): no step runs twice unless idempotent, an interrupted one is named', async () => {
      // Two fresh replicas (whatever the tests above stopped): the owner to kill and the one to read through.
      await c.cluster.add();
      await c.cluster.add();
      const [b, cc] = c.cluster.replicas.slice(-2);
      const count = 30;
      const runs = Array.from({ length: 16 }, (_, i) => ({ log: join(tempDir(), `pg-many-${i}.log`), idempotent: i % 3 === 2 }));
      const ids = await Promise.all(runs.map((r) => created(b!.url, 'steps', { log: r.log, count, stepSeconds: 0.1, gapSeconds: 0, idempotent: r.idempotent })));
      await untilLogged(runs.map((r) => r.log), (e) => e.filter((x) => x.kind === 'START').length >= 5, 'every run past its fifth step');
      await b!.stop('SIGKILL');
      const ends = await Promise.all(ids.map((id) => waitForTask(cc!.url, id, undefined, { timeoutMs: STEPS_LEASE_MS + 20_000 })));
      runs.forEach((r, i) => assertSurvivedKill(r.log, ends[i]!, count, r.idempotent));
      assert.ok(ends.some((t) => t.status === 'failed'), `the kill hit inside a step not marked idempotent: ${ends.map((t) => t.status + ' ' + textOf(t.result ?? {})).join('; ')}`);
    });
  });
}

export const EVENTS_MODULE = join(ROOT, 'dist', 'test', 'events-module.js');

/** The deployment's public address the answer links are built on (never fetched: the test opens the path on a replica). */
const PUBLIC_URL = 'https://outlast.example/';

/**
 * MCP Events on two replicas: a webhook subscribed on one is delivered, signed, for a task finished on the other; a
 * question (parked, answered later) is seen as outlast.task.input_required by poll and webhook; outlast.task.status
 * follows one task through every change.
 */
export function eventsSuite(title: string, setup: () => StoreSetup): void {
  describe(`MCP Events on two replicas ${title}`, () => {
    const servers: ServerProcess[] = [];
    const hits: Array<{ headers: Record<string, string>; body: string; json: any }> = [];
    const receiver = createServer((req, res) => {
      let body = '';
      req.on('data', (c) => (body += c));
      req.on('end', () => {
        const json = JSON.parse(body);
        if (json.type === 'verification') return res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ challenge: json.challenge }));
        hits.push({ headers: req.headers as Record<string, string>, body, json });
        res.writeHead(204).end();
      });
    });
    let hook = '';
    const alice = { token: 'ta' };
    before(async () => {
      await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
      hook = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/pg`;
      const s = setup();
      const args = ['--store', s.storeUrl, ...s.args, '--events', '--events-allow-host', '127.0.0.1', '--bearer', 'ta=alice', '--bearer', 'tb=bob', '--park-after-ms', '200', '--handles', '--public-url', PUBLIC_URL];
      servers.push(await startServer(args, { module: EVENTS_MODULE }));
      servers.push(await startServer(args, { module: EVENTS_MODULE }));
    });
    after(async () => {
      receiver.closeAllConnections();
      receiver.close();
      for (const s of servers) await s.stop('SIGTERM');
    });

    it('a task finished on the other replica is delivered, signed; input_required and status are seen by poll and webhook', async () => {
      const secret = `whsec_${randomBytes(32).toString('base64')}`;
      const sub = await rpc(servers[0]!.url, 'events/subscribe', { name: 'outlast.task.finished', arguments: {}, delivery: { mode: 'webhook', url: hook, secret }, cursor: null }, alice);
      assert.equal(sub.error, undefined, JSON.stringify(sub.error));
      const asks = await rpc(servers[0]!.url, 'events/subscribe', { name: 'outlast.task.input_required', arguments: { tool: 'ask' }, delivery: { mode: 'webhook', url: hook, secret }, cursor: null }, alice);
      assert.equal(asks.error, undefined);
      const done = await callTool(servers[1]!.url, 'work', { key: 'pg', ms: 0 }, { ...alice, caps: TASKS_CAPS });
      const bobs = await callTool(servers[1]!.url, 'work', { key: 'bob', ms: 0 }, { token: 'tb', caps: TASKS_CAPS });
      const got = await until('the delivery', () => hits.find((h) => h.json.data?.taskId === done.result.taskId));
      const body = new Webhook(secret).verify(got.body, got.headers) as any;
      assert.equal(body.data.status, 'completed');

      const cursor = (await rpc(servers[1]!.url, 'events/poll', { name: 'outlast.task.input_required', arguments: {}, cursor: null }, alice)).result.cursor;
      const created = await callTool(servers[1]!.url, 'ask', {}, { ...alice, caps: TASKS_CAPS });
      const taskId = created.result.taskId as string;
      assert.ok(taskId);
      const status = await rpc(servers[0]!.url, 'events/poll', { name: 'outlast.task.status', arguments: { taskId }, cursor: '0', maxEvents: 1 }, alice);
      const polled = await rpc(servers[0]!.url, 'events/poll', { name: 'outlast.task.input_required', arguments: {}, cursor, timeoutMs: 10_000 }, alice);
      assert.equal(polled.result.events.length, 1, JSON.stringify(polled.result));
      const ev = polled.result.events[0];
      assert.equal(ev.data.taskId, taskId);
      const { answerUrl, ...asked } = ev.data.inputRequests.deploy;
      assert.deepEqual(asked, { method: 'elicitation/create', message: 'Deploy now?' });
      // With answer pages on, the event carries the question's link, and the link opens the answer form on any replica.
      assert.match(answerUrl, /^https:\/\/outlast\.example\/answer\//);
      const page = await fetch(new URL(new URL(answerUrl).pathname, servers[0]!.url));
      assert.equal(page.status, 200);
      assert.match(await page.text(), /Deploy now\?/);
      const hooked = await until('the input_required webhook', () => hits.find((h) => h.json.name === 'outlast.task.input_required' && h.json.data.taskId === taskId));
      assert.equal(hooked.json.eventId, ev.eventId, 'poll and webhook name the same event');
      // Answer after the wait is parked, as a person would; then the status stream of that task shows every change.
      await sleep(400);
      const answered = await rpc(servers[1]!.url, 'tasks/update', { taskId, inputResponses: { deploy: { action: 'accept', content: { ok: true } } } }, { ...alice, caps: TASKS_CAPS });
      assert.equal(answered.error, undefined, JSON.stringify(answered.error));
      await until('the finished webhook of the asked task', () => hits.find((h) => h.json.name === 'outlast.task.finished' && h.json.data.taskId === taskId));
      const all = await rpc(servers[0]!.url, 'events/poll', { name: 'outlast.task.status', arguments: { taskId }, cursor: status.result.cursor }, alice);
      const seen = [...status.result.events, ...all.result.events].map((e: any) => e.data.status);
      assert.deepEqual(seen, ['input_required', 'working', 'completed'], 'every change of that task, in order');
      assert.equal(hits.filter((h) => h.json.data?.taskId === bobs.result.taskId).length, 0, "bob's task never reached alice's webhook");
      // Someone else's task reads like an unknown one.
      const foreign = await rpc(servers[0]!.url, 'events/poll', { name: 'outlast.task.status', arguments: { taskId }, cursor: null }, { token: 'tb' });
      assert.equal(foreign.error?.code, -32602);
      assert.match(foreign.error!.message, /Unknown task/);
    });
  });
}
