// test:pg-replicas: starts PostgreSQL replicas (scripts/test.mjs runs at most three such files at once).
/**
 * An outage of the whole database is not a crash of the work (issue 27, design semantics 17): three `outlast serve`
 * replicas, lease and heartbeat scaled down as in store-faults.test.ts, under the mixed load of failover-module.ts (a
 * long run not safe to re-run, a retry-safe one, a durable one with steps, a durable one with idempotent steps, one of
 * each per replica). The runs log every start, abort, end and step, so the test counts what really ran, where and when.
 * The database goes away three ways: a black hole of a fault-injecting TCP proxy (fault-proxy.ts) in front of each
 * replica; the same black hole behind Debian's PgBouncer in transaction mode (its defaults), the replicas' `--bus`
 * direct; a real primary restart.
 */
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { STORE_UNAVAILABLE_CODE } from '../src/protocol/index.js';
import { PG_URL, ROOT, callTool, freshSchema, getTask, sleep, startServer, startTogether, tempDir, until, type ServerProcess } from './helpers.js';
import { startFaultProxy, type FaultMode, type FaultProxy } from './fault-proxy.js';
import { startPrivatePostgres, type PrivatePostgres } from './pg-private.js';
import { pgBouncerLoginDeadlines, startPgBouncer } from './pgbouncer.js';

// 6 s: the file runs beside five others (scripts/test.mjs), whose load on PostgreSQL and the CPU can hold a reconnect
// past the 1 s black hole of a 3 s lease; the store deadlines below stay as they were, so the margin is the lease's.
const LEASE_MS = Number(process.env.FAILOVER_LEASE_MS ?? 6000);
const HEARTBEAT_MS = Number(process.env.FAILOVER_HEARTBEAT_MS ?? 1000);
/** Store deadlines well inside the lease (FAILOVER_TIMEOUTS='' keeps the defaults of docs/faults-store.md). */
const TIMEOUTS = process.env.FAILOVER_TIMEOUTS ?? 'connect_timeout_ms=1000&query_timeout_ms=1500&statement_timeout_ms=1200&signal_ping_ms=1000';
const PER_KIND = Number(process.env.FAILOVER_PER_KIND ?? 1);
const STEPS = 8;
/** How long each run of the load lasts: past the brief outages (9 s at a lease of 6 s), and past the fence
 *  of the long one (about a lease after it began), so every run is cut by it. */
const SPAN_MS = 2 * LEASE_MS;
const MODULE = join(ROOT, 'dist', 'test', 'failover-module.js');

type Kind = 'long' | 'long_safe' | 'durable' | 'durable_idem';
const KINDS: Kind[] = ['long', 'long_safe', 'durable', 'durable_idem'];

interface RunEvent {
  tool: Kind;
  key: string;
  pid: number;
  attempt: number;
  event: 'start' | 'abort' | 'end' | 'step-start' | 'step-end';
  step?: string;
  at: number;
}

interface Load {
  kind: Kind;
  key: string;
  taskId: string;
  replica: number;
}

/** How the database goes away for every replica, and comes back. */
interface Outage {
  /** The store URL of replica i. */
  storeUrl(i: number): string;
  /** Flags every replica takes besides its store (e.g. `--bus`). */
  args?: string[];
  /** The long outage: the database goes away, and comes back `ms` later. */
  outage(ms: number): Promise<void>;
  /** Outages shorter than the lease, if this kind has them: a black hole of a third of the lease, then (a lease
   *  later) every connection reset and refused for 1 s, as when a pooler is killed and started again. */
  brief?(): Promise<void>;
  close(): Promise<void> | void;
}

const PG_TARGET = { host: '127.0.0.1', port: Number(new URL(PG_URL).port || 5432) };

/** Three replicas, each behind its own fault proxy, black-holed together. */
async function blackHoles(): Promise<Outage> {
  const schema = freshSchema('failover');
  const target = PG_TARGET;
  const proxies: FaultProxy[] = [];
  for (let i = 0; i < 3; i++) proxies.push(await startFaultProxy(target));
  const set = (mode: FaultMode) => proxies.forEach((p) => p.set(mode));
  return {
    storeUrl: (i) => `${proxies[i]!.url(PG_URL)}?schema=${schema}${TIMEOUTS ? `&${TIMEOUTS}` : ''}`,
    async brief() {
      set('drop');
      await sleep(LEASE_MS / 3);
      set('pass');
      await sleep(LEASE_MS);
      set('reset');
      await sleep(1000);
      set('pass');
    },
    async outage(ms) {
      set('drop');
      await sleep(ms);
      set('pass');
    },
    async close() {
      set('pass');
      await Promise.all(proxies.map((p) => p.close()));
    },
  };
}

/**
 * The replicas through PgBouncer (transaction mode; a pool of 4 each), `--bus` direct; one fault proxy between
 * PgBouncer and PostgreSQL, and the bus through the same proxy. There, and not between the replicas and the pooler,
 * because that is a managed failover: the pooler (Supabase's, RDS Proxy, PgBouncer in a chart) stays up and keeps the
 * replicas' connections, while the database behind it, and the direct URL of the bus with it (the same server), goes
 * away; the replicas find out only through their deadlines and PgBouncer's. A proxy in front of the pooler would be an
 * outage of the pooler only, and would leave the bus working. The brief outages are a black hole of a third of the
 * lease, then PgBouncer itself killed and started again 1 s later.
 * PgBouncer's deadlines for reaching the database are the ones docs/deployment.md asks for, a third of the lease
 * (pgBouncerLoginDeadlines): it logs in one server connection at a time per pool, so a login begun in the black
 * hole holds every new server connection for `server_connect_timeout` (15 s by default), and a failed one waits
 * `server_login_retry` (15 s) before the next.
 */
async function behindPooler(): Promise<Outage> {
  const schema = freshSchema('pbfailover');
  const proxy = await startFaultProxy(PG_TARGET);
  const bouncer = await startPgBouncer(pgBouncerLoginDeadlines(LEASE_MS), proxy.url(PG_URL));
  return {
    storeUrl: () => `${bouncer.through(PG_URL)}?schema=${schema}&pool=4${TIMEOUTS ? `&${TIMEOUTS}` : ''}`,
    args: ['--bus', proxy.url(PG_URL)],
    async brief() {
      proxy.set('drop');
      await sleep(LEASE_MS / 3);
      proxy.set('pass');
      await sleep(LEASE_MS);
      await bouncer.stop();
      await sleep(1000);
      await bouncer.start();
    },
    async outage(ms) {
      proxy.set('drop');
      await sleep(ms);
      proxy.set('pass');
    },
    async close() {
      proxy.set('pass');
      await bouncer.stop();
      await proxy.close();
    },
  };
}

/** A private PostgreSQL cluster (pg-private.ts) that the outage crash-stops and starts again: a primary restart. */
async function primaryRestart(): Promise<Outage> {
  const pg: PrivatePostgres = await startPrivatePostgres();
  return {
    storeUrl: () => `${pg.url}?schema=failover${TIMEOUTS ? `&${TIMEOUTS}` : ''}`,
    async outage(ms) {
      pg.crash();
      await sleep(ms);
      pg.start();
    },
    close: () => pg.stop(),
  };
}

/** Which tests a kind of outage gets besides the long outage: the brief ones (`Outage.brief`), and the step that
 *  ended in the outage (a runtime matter, the same whatever stands between the replicas and the database). */
interface Cases {
  brief: boolean;
  stepEndedInOutage: boolean;
}

function mixedLoadUnderOutage(title: string, makeOutage: () => Promise<Outage>, cases: Cases, timeout = 180_000): void {
  // Bounded: a hang fails the suite in minutes instead of holding CI.
  describe(`${title}, under mixed load, three replicas (lease ${LEASE_MS} ms, heartbeat ${HEARTBEAT_MS} ms)`, { timeout }, () => {
    const runLog = join(tempDir(), 'runs.jsonl');
    let db: Outage;
    const replicas: ServerProcess[] = [];
    const events = (): RunEvent[] => (existsSync(runLog) ? readFileSync(runLog, 'utf8').trim().split('\n').filter(Boolean).map((l) => JSON.parse(l) as RunEvent) : []);
    const of = (key: string, event: RunEvent['event']) => events().filter((e) => e.key === key && e.event === event);
    const stderrs = () => replicas.map((r) => r.stderr()).join('\n');

    before(async () => {
      db = await makeOutage();
      replicas.push(...(await startTogether([0, 1, 2].map((i) =>
        startServer(['--store', db.storeUrl(i), ...(db.args ?? []), '--lease-ms', String(LEASE_MS), '--heartbeat-ms', String(HEARTBEAT_MS)], { module: MODULE, env: { OUTLAST_RUN_LOG: runLog } })))));
      // Lease judgement starts a lease after a replica first reached the store: let that pass once.
      await sleep(LEASE_MS + HEARTBEAT_MS);
    });
    after(async () => {
      await Promise.all(replicas.map((r) => r.stop('SIGTERM')));
      await db?.close();
    });

    /** Starts the mixed load (PER_KIND of each kind on each replica), long enough to span `spanMs`. */
    async function startLoad(tag: string, spanMs: number): Promise<Load[]> {
      const load: Load[] = [];
      for (const [i, r] of replicas.entries()) {
        for (const kind of KINDS) {
          for (let n = 0; n < PER_KIND; n++) {
            const key = `${tag}-${kind}-${i}-${n}`;
            const args = kind.startsWith('long') ? { key, ms: spanMs, everyMs: 200 } : { key, steps: STEPS, everyMs: Math.ceil(spanMs / STEPS) };
            const res = await callTool(r.url, kind, args, { meta: { 'outlast/idempotencyKey': key } });
            assert.equal(res.result?.resultType, 'task', `a task for ${key}: ${JSON.stringify(res.error ?? res.result)}`);
            load.push({ kind, key, taskId: res.result.taskId as string, replica: i });
          }
        }
      }
      await until('every run started', () => load.every((l) => of(l.key, 'start').length > 0));
      return load;
    }

    /** Polls until the task is terminal (a retryable refusal while the store comes back is waited out, as a client does). */
    async function end(taskId: string, timeoutMs = 90_000): Promise<Record<string, any>> {
      const deadline = Date.now() + timeoutMs;
      let last: unknown;
      for (let i = 0; ; i++) {
        const r = await getTask(replicas[i % 3]!.url, taskId).catch(() => undefined);
        const busy = !r || (r.error && (r.error.code === STORE_UNAVAILABLE_CODE || r.status === 429));
        if (r?.error && !busy) throw new Error(`tasks/get failed: ${JSON.stringify(r.error)}`);
        if (!busy && ['completed', 'failed', 'cancelled'].includes(r!.result.status)) return r!.result;
        last = r?.error ?? r?.result ?? last;
        if (Date.now() > deadline) {
          // What the task said last, and every line the replicas logged about it: enough to tell where it stuck.
          const lines = replicas.flatMap((x, n) => x.stderr().split('\n').filter((l) => l.includes(taskId)).map((l) => `[replica ${n}] ${l}`));
          throw new Error(`task ${taskId} not terminal after ${timeoutMs} ms; last read ${JSON.stringify(last)}; the replicas on it:\n${lines.join('\n')}`);
        }
        await sleep(250);
      }
    }

    /** Every later run of a task began after the one before had stopped, on the replica that first ran it. */
    function checkRuns(l: Load): { runs: number } {
      const evs = events().filter((e) => e.key === l.key && ['start', 'abort', 'end'].includes(e.event));
      const starts = evs.filter((e) => e.event === 'start');
      for (const [n, s] of starts.entries()) {
        assert.equal(s.pid, replicas[l.replica]!.pid, `${l.key}: run ${n + 1} on the replica that created it (no takeover by a peer)`);
        if (n === 0) continue;
        const before = evs.filter((e) => e.at <= s.at && e.event !== 'start' && e.attempt === starts[n - 1]!.attempt);
        assert.ok(before.length > 0, `${l.key}: run ${n + 1} began after run ${n} had stopped (never two at once)`);
      }
      return { runs: starts.length };
    }

    /** Each step of a durable task ran once. */
    function checkSteps(l: Load): void {
      const counts: Record<string, number> = {};
      for (const e of of(l.key, 'step-start')) counts[e.step!] = (counts[e.step!] ?? 0) + 1;
      for (let s = 1; s <= STEPS; s++) assert.equal(counts[`s${s}`], 1, `${l.key}: step s${s} ran once (${JSON.stringify(counts)})`);
    }

    if (cases.brief) it('an outage shorter than the lease (a black hole, then the pooler killed and back 1 s later) fails nothing and runs nothing twice', async (t) => {
      const load = await startLoad('short', SPAN_MS);
      await sleep(500);
      await db.brief!();
      const ends = await Promise.all(load.map((l) => end(l.taskId)));
      for (const [i, l] of load.entries()) {
        assert.equal(ends[i]!.status, 'completed', `${l.key} completed: ${JSON.stringify(ends[i]!.error ?? ends[i]!.statusMessage)}`);
        assert.equal(checkRuns(l).runs, 1, `${l.key} ran once`);
        assert.equal(of(l.key, 'abort').length, 0, `${l.key} was not stopped`);
        if (l.kind.startsWith('durable')) checkSteps(l);
      }
      assert.doesNotMatch(stderrs(), /self-fenced/, 'no replica fenced itself');
      assert.doesNotMatch(stderrs(), /replica presumed dead/, 'no replica judged another dead');
      t.diagnostic(`${load.length}/${load.length} completed, each run once`);
    });

    if (cases.stepEndedInOutage) it('a step that ended during the outage, before the fence, is neither run again nor found interrupted after the heal', async (t) => {
      // Not idempotent: had its end been lost, the resumed run would find it `started` and fail step_interrupted.
      const key = 'ended-in-outage';
      const res = await callTool(replicas[0]!.url, 'durable', { key, steps: 2, everyMs: 100, stepMs: 1500 }, { meta: { 'outlast/idempotencyKey': key } });
      assert.equal(res.result?.resultType, 'task', JSON.stringify(res.error ?? res.result));
      await until('step s1 started', () => of(key, 'step-start').length > 0);
      await sleep(200);
      await db.outage(2 * LEASE_MS);
      const x = await end(res.result.taskId as string);
      assert.equal(x.status, 'completed', `completed: ${JSON.stringify(x.error ?? x.statusMessage)}`);
      assert.ok(of(key, 'step-end').find((e) => e.step === 's1'), 's1 ended');
      assert.deepEqual(of(key, 'step-start').map((e) => e.step), ['s1', 's2'], 'each step ran once');
      assert.equal(of(key, 'start').length, 2, 'the run was stopped by the fence and resumed once');
      assert.match(stderrs(), /self-fenced/);
      t.diagnostic('s1 ended 1.3 s into the outage; resumed past it');
    });

    it('the database gone for twice the lease: retry-safe work re-runs, durable work resumes from its steps, only unsafe runs fail naming the outage, no takeover by a peer', async (t) => {
      const load = await startLoad('long', SPAN_MS);
      await sleep(1000);
      const t0 = Date.now();
      await db.outage(2 * LEASE_MS);
      const healedAt = Date.now();
      const ends = await Promise.all(load.map((l) => end(l.taskId)));
      const doneAfterMs = Date.now() - healedAt;
      const reruns: Record<string, number> = {};
      for (const [i, l] of load.entries()) {
        const x = ends[i]!;
        const { runs } = checkRuns(l);
        reruns[l.kind] = (reruns[l.kind] ?? 0) + runs - 1;
        if (l.kind === 'long') {
          assert.equal(x.status, 'failed', `${l.key} (not safe to re-run) failed`);
          assert.equal(x.error?.data?.reason, 'store_unreachable', `${l.key}: the failure names the outage: ${x.error?.message}`);
          assert.match(x.error.message, /could not reach its task store/);
          assert.equal(runs, 1, `${l.key}: run once`);
          continue;
        }
        assert.equal(x.status, 'completed', `${l.key} completed after the outage: ${JSON.stringify(x.error ?? x.statusMessage)}`);
        if (l.kind.startsWith('durable')) {
          checkSteps(l);
          assert.match(JSON.stringify(x.result), new RegExp(`\\\\"sum\\\\":${(STEPS * (STEPS + 1)) / 2}`), `${l.key}: every step's value reached the result`);
        }
      }
      assert.doesNotMatch(stderrs(), /replica presumed dead/, 'a whole-database outage made no replica judge another dead');
      t.diagnostic(`outage ${healedAt - t0} ms; every task terminal ${doneAfterMs} ms after the heal; re-runs by kind ${JSON.stringify(reruns)}`);
    });
  });
}

mixedLoadUnderOutage('a black hole of the whole database', blackHoles, { brief: true, stepEndedInOutage: true });
mixedLoadUnderOutage('a black hole of the database behind PgBouncer (transaction mode), --bus direct', behindPooler, { brief: true, stepEndedInOutage: false });
mixedLoadUnderOutage('a primary restart (crash-stop, started again)', primaryRestart, { brief: false, stepEndedInOutage: false });
