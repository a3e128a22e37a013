// test:pg-replicas: starts PostgreSQL replicas (scripts/test.mjs runs at most three such files at once).
/**
 * A database that stops answering is a failure, not a wait (issue 17): three `outlast serve` replicas, each behind
 * its own fault-injecting TCP proxy to PostgreSQL (fault-proxy.ts), with a short lease (3 s, heartbeat 500 ms) and
 * the outages scaled to it. Every wait is for a state or a count; the only fixed times are the outages themselves.
 */
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, beforeEach, describe, it } from 'node:test';
import { TaskClient } from '../src/client/index.js';
import { STORE_UNAVAILABLE_CODE } from '../src/protocol/index.js';
import { newTaskId } from '../src/runtime/ids.js';
import { PG_URL, ROOT, callTool, freshSchema, getTask, sleep, startServer, startTogether, tempDir, type ServerProcess } from './helpers.js';
import { startFaultProxy, type FaultMode, type FaultProxy } from './fault-proxy.js';

const LEASE_MS = 3000;
const HEARTBEAT_MS = 500;
/** The deadlines under test, short to match the lease (docs/faults-store.md gives the defaults). */
const TIMEOUTS = 'connect_timeout_ms=1000&query_timeout_ms=1500&statement_timeout_ms=1200&signal_ping_ms=1000';
const MODULE = join(ROOT, 'dist', 'test', 'fault-module.js');

interface RunEvent {
  tool: string;
  key: string;
  pid: number;
  attempt: number;
  event: 'start' | 'abort' | 'end';
  at: number;
}

interface FaultCluster {
  replicas: ServerProcess[];
  proxies: FaultProxy[];
  events(): RunEvent[];
  set(mode: FaultMode, which?: number[]): void;
  stop(): Promise<void>;
}

async function startFaultCluster(n: number): Promise<FaultCluster> {
  const schema = freshSchema('faults');
  const runLog = join(tempDir(), 'runs.jsonl');
  const proxies = await Promise.all(Array.from({ length: n }, () => startFaultProxy({ host: '127.0.0.1', port: Number(new URL(PG_URL).port || 5432) })));
  const start = (i: number) =>
    startServer(['--store', `${proxies[i]!.url(PG_URL)}?schema=${schema}&${TIMEOUTS}`, '--lease-ms', String(LEASE_MS), '--heartbeat-ms', String(HEARTBEAT_MS)], {
      module: MODULE,
      env: { OUTLAST_RUN_LOG: runLog },
    });
  const replicas = [await start(0)];
  replicas.push(...(await startTogether(Array.from({ length: n - 1 }, (_, i) => start(i + 1)), replicas)));
  return {
    replicas,
    proxies,
    events: () => (existsSync(runLog) ? readFileSync(runLog, 'utf8').trim().split('\n').filter(Boolean).map((l) => JSON.parse(l) as RunEvent) : []),
    set(mode, which = proxies.map((_, i) => i)) {
      for (const i of which) proxies[i]!.set(mode);
    },
    async stop() {
      for (const p of proxies) p.set('pass');
      await Promise.all(replicas.map((r) => r.stop('SIGTERM')));
      await Promise.all(proxies.map((p) => p.close()));
    },
  };
}

/** Polls `probe` every 100 ms until it returns a value (not undefined); fails with `what` after `timeoutMs`. */
async function waitFor<T>(what: string, probe: () => Promise<T | undefined> | T | undefined, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for: ${what}`);
    await sleep(100);
  }
}

const origin = (r: ServerProcess) => new URL(r.url).origin;
async function readyz(r: ServerProcess): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(`${origin(r)}/readyz`, { signal: AbortSignal.timeout(5000) });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

/** Creates a task of `tool` on replica `r` and returns its id (a -31504 is retried under the same key, as a
 *  client does). */
async function startTask(r: ServerProcess, tool: 'hold' | 'hold_safe', key: string, ms: number): Promise<string> {
  for (let attempt = 0; ; attempt++) {
    const res = await callTool(r.url, tool, { key, ms }, { meta: { 'outlast/idempotencyKey': key } });
    if (res.error?.code === STORE_UNAVAILABLE_CODE && attempt < 50) {
      await sleep(200);
      continue;
    }
    assert.equal(res.result.resultType, 'task', `a task for ${key}: ${JSON.stringify(res.error ?? res.result)}`);
    return res.result.taskId as string;
  }
}

/** Polls until the task is terminal; a retryable refusal (-31504 while the store is back for some replicas only,
 *  or a 429) is waited out as a client would. */
async function waitForTask(url: string, taskId: string, _until?: undefined, opts: { timeoutMs?: number } = {}): Promise<Record<string, any>> {
  const deadline = Date.now() + (opts.timeoutMs ?? 30_000);
  for (;;) {
    const r = await getTask(url, taskId);
    if (r.error && r.error.code !== STORE_UNAVAILABLE_CODE && r.status !== 429) throw new Error(`tasks/get failed: ${JSON.stringify(r.error)}`);
    if (!r.error && ['completed', 'failed', 'cancelled'].includes(r.result.status)) return r.result;
    if (Date.now() > deadline) throw new Error(`task ${taskId} not terminal after ${opts.timeoutMs ?? 30_000} ms (${JSON.stringify(r.error ?? r.result.status)})`);
    await sleep(250);
  }
}

/** Every replica ready and creating tasks again: the time it took, ms. */
async function untilServing(c: FaultCluster, which: number[], since: number, tag: string): Promise<number> {
  for (const i of which) {
    const r = c.replicas[i]!;
    await waitFor(`replica ${i} ready`, async () => ((await readyz(r).catch(() => undefined))?.status === 200 ? true : undefined), 30_000);
    await waitFor(`replica ${i} creates tasks`, async () => {
      const res = await callTool(r.url, 'hold_safe', { key: `${tag}-probe-${i}`, ms: 0 }).catch(() => undefined);
      return res?.result.resultType === 'task' ? true : undefined;
    });
  }
  return Date.now() - since;
}

const starts = (c: FaultCluster, key: string) => c.events().filter((e) => e.key === key && e.event === 'start');
const aborts = (c: FaultCluster, key: string) => c.events().filter((e) => e.key === key && e.event === 'abort');
const presumedDead = (c: FaultCluster) => c.replicas.filter((r) => /replica presumed dead/.test(r.stderr())).length;

describe('PostgreSQL faults between replicas and the database (lease 3 s, heartbeat 500 ms)', () => {
  let c: FaultCluster;
  before(async () => {
    c = await startFaultCluster(3);
    // Lease judgement starts a lease after a replica first reached the store: let that pass once.
    await sleep(LEASE_MS + HEARTBEAT_MS);
  });
  after(async () => {
    await c?.stop();
  });
  // Each fault starts from a cluster that serves (the one before may still be recovering on a loaded machine).
  beforeEach(async () => {
    await untilServing(c, [0, 1, 2], Date.now(), `ready-${Math.random().toString(36).slice(2, 8)}`);
  });

  it('an outage shorter than the lease (0.5 s black hole, every replica) fails nothing', async (t) => {
    const ids: string[] = [];
    for (const [i, r] of c.replicas.entries()) {
      ids.push(await startTask(r, 'hold', `e-unsafe-${i}`, 4000));
      ids.push(await startTask(r, 'hold_safe', `e-safe-${i}`, 4000));
    }
    await waitFor('every run started', () => (c.events().filter((e) => e.key.startsWith('e-') && e.event === 'start').length === 6 ? true : undefined));
    c.set('drop');
    // Within what docs/faults-store.md promises (lease − 2.5 heartbeats − a new connection): the first heartbeat after
    // the heal opens a connection, which took up to 1.05 s here beside busy loops and a pgbench connection storm.
    await sleep(500);
    c.set('pass');
    const ends = await Promise.all(ids.map((id) => waitForTask(c.replicas[0]!.url, id, undefined, { timeoutMs: 30_000 })));
    // A task that did not complete says why (its status message), with the replicas' last words on it.
    const why = ends.flatMap((x, i) => (x.status === 'completed' ? [] : [`${ids[i]}: ${x.status} "${x.statusMessage ?? ''}"`]));
    assert.deepEqual(ends.map((x) => x.status), ids.map(() => 'completed'), `every task completed; ${why.join('; ')}; stderr: ${c.replicas.map((r) => r.stderr().slice(-1500)).join('\n---\n')}`);
    for (let i = 0; i < 3; i++) {
      for (const k of [`e-unsafe-${i}`, `e-safe-${i}`]) {
        assert.equal(starts(c, k).length, 1, `${k} ran once`);
        assert.equal(aborts(c, k).length, 0, `${k} was not stopped`);
      }
    }
    assert.equal(c.replicas.filter((r) => /self-fenced/.test(r.stderr())).length, 0, 'no replica fenced itself');
    assert.equal(presumedDead(c), 0, 'no replica judged another dead');
    t.diagnostic('6/6 completed, each run once, none stopped');
  });

  it('a black hole on every replica for more than twice the lease: refused fast meanwhile, back within 15 s of the heal, nothing lost, nothing taken over, no finished work failed', async (t) => {
    const unsafe: string[] = [];
    const safe: string[] = [];
    const finishing: string[] = [];
    for (const [i, r] of c.replicas.entries()) {
      unsafe.push(await startTask(r, 'hold', `a-unsafe-${i}`, 6000));
      safe.push(await startTask(r, 'hold_safe', `a-safe-${i}`, 6000));
    }
    for (const [i, r] of c.replicas.entries()) finishing.push(await startTask(r, 'hold', `a-finishing-${i}`, 1200));
    await waitFor('every run started', () => (c.events().filter((e) => e.key.startsWith('a-') && e.event === 'start').length === 9 ? true : undefined));
    const t0 = Date.now();
    c.set('drop');
    // While the store is unreachable: not ready, and a request that needs the store is refused at once, retryable.
    await waitFor('replica 0 not ready', async () => ((await readyz(c.replicas[0]!)).status === 503 ? true : undefined), 10_000);
    const refused = await waitFor('a fast refusal', async () => {
      // Unknown ids: each is one store read, and no poll limit applies to a first read.
      const r = await getTask(c.replicas[1]!.url, newTaskId());
      return r.error?.code === STORE_UNAVAILABLE_CODE ? r : undefined;
    }, 10_000);
    assert.equal((refused.error!.data as { reason: string }).reason, 'store_unavailable');
    const t1 = Date.now();
    const again = await getTask(c.replicas[1]!.url, newTaskId());
    const refusalMs = Date.now() - t1;
    assert.equal(again.error?.code, STORE_UNAVAILABLE_CODE);
    assert.ok(refusalMs < 1000, `refused in ${refusalMs} ms, not after a query timeout`);
    // Self-fencing: the long runs stop, without the store, within a heartbeat of the lease.
    const stopped = await waitFor('the long runs stopped', () => {
      const a = c.events().filter((e) => /^a-(un)?safe-/.test(e.key) && e.event === 'abort');
      return a.length === 6 ? a : undefined;
    }, 15_000);
    const latest = Math.max(...stopped.map((e) => e.at)) - t0;
    assert.ok(latest <= LEASE_MS + HEARTBEAT_MS, `every run stopped ${latest} ms after the black hole began (lease ${LEASE_MS} ms)`);
    const fencedReady = await readyz(c.replicas[2]!);
    assert.equal(fencedReady.status, 503);
    assert.equal(fencedReady.body.fenced, true, 'a fenced replica says so');
    assert.equal((await fetch(`${origin(c.replicas[2]!)}/healthz`)).status, 200, 'but it is alive');
    await sleep(Math.max(0, t0 + 2 * LEASE_MS + 2000 - Date.now()));
    const healedAt = Date.now();
    c.set('pass');
    const backMs = await untilServing(c, [0, 1, 2], healedAt, 'a');
    assert.ok(backMs < 15_000, `every replica serving ${backMs} ms after the heal`);
    const url = c.replicas[0]!.url;
    const end = async (id: string) => waitForTask(url, id, undefined, { timeoutMs: 30_000 });
    for (const id of finishing) assert.equal((await end(id)).status, 'completed', 'work that finished during the outage completed');
    for (const id of safe) assert.equal((await end(id)).status, 'completed', 'work safe to re-run was re-run');
    for (const id of unsafe) {
      const x = await end(id);
      assert.equal(x.status, 'failed');
      assert.equal(x.error?.data?.reason, 'store_unreachable', `the failure says why: ${x.error?.message}`);
      assert.match(x.error.message, /could not reach its task store for longer than its lease/);
    }
    for (let i = 0; i < 3; i++) {
      assert.equal(starts(c, `a-unsafe-${i}`).length, 1, 'nothing unsafe ran twice');
      const s = starts(c, `a-safe-${i}`);
      assert.equal(s.length, 2);
      assert.equal(s[1]!.pid, s[0]!.pid, 'the re-run is its own replica taking it back, not a takeover by a peer');
      assert.ok(s[1]!.at > aborts(c, `a-safe-${i}`)[0]!.at, 'the re-run began after the first run stopped');
    }
    assert.equal(presumedDead(c), 0, 'a whole-database outage made no replica judge another dead');
    t.diagnostic(`refused in ${refusalMs} ms; runs stopped by +${latest} ms; serving ${backMs} ms after the heal`);
  });

  it('a stall of the whole database for twice the lease (bytes held, then delivered), one replica backlogged: no live replica judged dead, nothing taken over, nothing stuck', async (t) => {
    const safe = await startTask(c.replicas[0]!, 'hold_safe', 'd-safe', 5000);
    const unsafe = await startTask(c.replicas[1]!, 'hold', 'd-unsafe', 5000);
    await waitFor('both runs started', () => (starts(c, 'd-safe').length + starts(c, 'd-unsafe').length === 2 ? true : undefined));
    c.set('hold');
    const t0 = Date.now();
    // The backlog: creations and polls in flight on replica 0 while nothing comes back.
    const backlog = Array.from({ length: 30 }, (_, i) =>
      callTool(c.replicas[0]!.url, 'hold_safe', { key: `d-backlog-${i}`, ms: 200 }, { meta: { 'outlast/idempotencyKey': `d-backlog-${i}` } }).then(
        (r) => ({ i, r, ms: Date.now() - t0 }),
      ),
    );
    const answered = await Promise.all(backlog);
    const slowest = Math.max(...answered.map((a) => a.ms));
    assert.ok(slowest < 2 * LEASE_MS, `every backlogged request was answered within its deadlines (slowest ${slowest} ms)`);
    for (const a of answered) {
      if (a.r.result.resultType === 'task') continue;
      assert.equal(a.r.error?.code, STORE_UNAVAILABLE_CODE, `a refusal is retryable: ${JSON.stringify(a.r.error)}`);
    }
    await sleep(Math.max(0, t0 + 2 * LEASE_MS + 1000 - Date.now()));
    const releasedAt = Date.now();
    c.set('pass');
    const backMs = await untilServing(c, [0, 1, 2], releasedAt, 'd');
    assert.ok(backMs < 15_000, `serving ${backMs} ms after the stall`);
    // Every backlogged call, retried with its idempotency key, gets its task, and every one of them ends.
    const ids: string[] = [];
    for (let i = 0; i < 30; i++) {
      ids.push(await startTask(c.replicas[0]!, 'hold_safe', `d-backlog-${i}`, 200));
    }
    for (const id of ids) assert.equal((await waitForTask(c.replicas[2]!.url, id, undefined, { timeoutMs: 30_000 })).status, 'completed', 'nothing stuck');
    assert.equal((await waitForTask(c.replicas[2]!.url, safe, undefined, { timeoutMs: 30_000 })).status, 'completed');
    const u = await waitForTask(c.replicas[2]!.url, unsafe, undefined, { timeoutMs: 30_000 });
    assert.equal(u.status, 'failed');
    assert.equal(u.error?.data?.reason, 'store_unreachable', 'the unsafe run stopped by the fence says so');
    assert.equal(starts(c, 'd-unsafe').length, 1, 'nothing unsafe ran twice');
    assert.ok(starts(c, 'd-safe').every((s) => s.pid === c.replicas[0]!.pid), 'the safe run stayed on its replica');
    for (let i = 0; i < 30; i++) assert.ok(starts(c, `d-backlog-${i}`).every((s) => s.pid === c.replicas[0]!.pid), 'no backlogged task was taken over');
    assert.equal(presumedDead(c), 0, 'no live replica was judged dead');
    t.diagnostic(`backlog answered within ${slowest} ms; serving ${backMs} ms after the stall`);
  });

  it('a black hole on one replica for twice the lease: its runs stop within a heartbeat of its lease, it is not ready, peers take over, nothing unsafe runs twice, it rejoins', async (t) => {
    const cut = c.replicas[2]!;
    const safe = await startTask(cut, 'hold_safe', 'b-safe', 8000);
    const unsafe = await startTask(cut, 'hold', 'b-unsafe', 8000);
    await waitFor('both runs started', () => (starts(c, 'b-safe').length + starts(c, 'b-unsafe').length === 2 ? true : undefined));
    const t0 = Date.now();
    c.set('drop', [2]);
    const stopped = await waitFor('its runs stopped', () => {
      const a = [...aborts(c, 'b-safe'), ...aborts(c, 'b-unsafe')];
      return a.length === 2 ? a : undefined;
    }, 15_000);
    const stoppedAfter = Math.max(...stopped.map((e) => e.at)) - t0;
    assert.ok(stoppedAfter <= LEASE_MS + HEARTBEAT_MS, `its runs stopped ${stoppedAfter} ms after it was cut off (lease ${LEASE_MS} ms)`);
    assert.ok(stoppedAfter >= LEASE_MS - 2 * HEARTBEAT_MS, `not before its lease could pass (${stoppedAfter} ms)`);
    const r = await readyz(cut);
    assert.equal(r.status, 503, 'it reports itself not ready');
    // A peer takes the safe one over only after the cut replica stopped it; the unsafe one fails, run once.
    const rerun = await waitFor('a peer re-runs the safe task', () => starts(c, 'b-safe').find((s) => s.pid !== cut.pid), 20_000);
    assert.ok(rerun.at > stopped.find((s) => s.key === 'b-safe')!.at, 'never two runs at once');
    const u = await waitForTask(c.replicas[0]!.url, unsafe, undefined, { timeoutMs: 20_000 });
    assert.equal(u.status, 'failed');
    assert.equal(u.error?.data?.reason, 'worker_lost');
    await sleep(Math.max(0, t0 + 2 * LEASE_MS - Date.now()));
    const healedAt = Date.now();
    c.set('pass', [2]);
    const backMs = await untilServing(c, [2], healedAt, 'b');
    assert.ok(backMs < 15_000, `it serves again ${backMs} ms after the heal`);
    assert.equal((await waitForTask(cut.url, safe, undefined, { timeoutMs: 30_000 })).status, 'completed');
    assert.equal(starts(c, 'b-unsafe').length, 1, 'nothing unsafe ran twice');
    assert.match(cut.stderr(), /self-fenced/, 'it logged why it stopped its runs');
    t.diagnostic(`runs stopped +${stoppedAfter} ms; peer re-ran at +${rerun.at - t0} ms; rejoined ${backMs} ms after the heal`);
  });

  it('a 3 s black hole with queries in flight: no wedge; TaskClient.callTool returns or fails within its deadline', async (t) => {
    const target = c.replicas[1]!;
    const patient = new TaskClient({ url: target.url, status: 'poll', callTimeoutMs: 2000, requestTimeoutMs: 2000, retry: { attempts: 20, baseDelayMs: 200, maxDelayMs: 1000 } });
    const once = new TaskClient({ url: target.url, status: 'poll', callTimeoutMs: 2000, requestTimeoutMs: 2000, retry: { attempts: 1 } });
    try {
      const t0 = Date.now();
      c.set('drop', [1]);
      const inFlight = Array.from({ length: 5 }, (_, i) => getTask(target.url, newTaskId()).then((r) => Date.now() - t0));
      const failing = once.callTool('hold_safe', { key: 'c-once', ms: 100 }).then(
        () => ({ ok: true, ms: Date.now() - t0 }),
        (e: Error) => ({ ok: false, ms: Date.now() - t0, e }),
      );
      const retrying = patient.callTool('hold_safe', { key: 'c-patient', ms: 100 }).then((r) => ({ r, ms: Date.now() - t0 }));
      await sleep(3000);
      c.set('pass', [1]);
      const f = await failing;
      assert.ok(f.ms < 2000 + 1500, `a call with no retries settled in ${f.ms} ms (deadline 2000 ms)`);
      for (const ms of await Promise.all(inFlight)) assert.ok(ms < 2000 + 1500, `a poll in flight was answered in ${ms} ms`);
      const p = await retrying;
      assert.match(JSON.stringify(p.r.content), /c-patient/, 'the retried call returned its result');
      assert.ok(p.ms < 3000 + 15_000, `the retried call returned ${p.ms} ms after the black hole began`);
      const t1 = Date.now();
      const after = await patient.callTool('hold_safe', { key: 'c-after', ms: 0 });
      assert.match(JSON.stringify(after.content), /c-after/);
      t.diagnostic(`no-retry call settled at +${f.ms} ms (${f.ok ? 'ok' : (f as { e: Error }).e.message.slice(0, 80)}); retried call returned at +${p.ms} ms; next call ${Date.now() - t1} ms`);
    } finally {
      await patient.close();
      await once.close();
    }
  });
});
