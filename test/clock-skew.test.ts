// test:pg-replicas: starts PostgreSQL replicas (scripts/test.mjs runs at most three such files at once).
/**
 * One clock decides: three real replicas on one PostgreSQL schema, one of them run under `faketime` 5 minutes ahead
 * (then behind). TTL 4 min, so a replica deciding on its own clock would sweep (ahead) or create born-expired (behind)
 * tasks at once; input deadlines and durable sleeps (parked, then claimed by whichever replica) would end early.
 */
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import { callTool, freshSchema, getTask, pgStoreUrl, sleep, startServer, startTogether, waitForTask, type ServerProcess } from './helpers.js';

const CLOCK_MODULE = new URL('./clock-module.js', import.meta.url).pathname;
/** Debian's libfaketime (the `faketime` package), or the one OUTLAST_LIBFAKETIME names. */
const LIBFAKETIME = process.env.OUTLAST_LIBFAKETIME ??
  [`/usr/lib/${process.arch === 'arm64' ? 'aarch64' : 'x86_64'}-linux-gnu/faketime/libfaketimeMT.so.1`, '/usr/lib/faketime/libfaketimeMT.so.1', '/usr/local/lib/faketime/libfaketimeMT.so.1']
    .find((p) => existsSync(p)) ?? 'libfaketimeMT.so.1 (not found: apt-get install faketime)';
const TTL_MS = 240_000;
const ARGS = ['--default-ttl-ms', String(TTL_MS), '--sweep-interval-ms', '200', '--park-after-ms', '300', '--queue-poll-ms', '200'];

/** The environment that runs a process `offset` off (e.g. "+5m"): libfaketime, with the monotonic clock left alone so
 *  node's timers keep real time. */
export function faketimeEnv(offset: string): NodeJS.ProcessEnv {
  return { LD_PRELOAD: LIBFAKETIME, FAKETIME: offset, FAKETIME_DONT_FAKE_MONOTONIC: '1', FAKETIME_NO_CACHE: '1' };
}

async function taskOn(url: string, tool: string, args: Record<string, unknown>): Promise<string> {
  const r = await callTool(url, tool, args);
  assert.equal(r.error, undefined, JSON.stringify(r.error));
  assert.equal(r.result.resultType, 'task');
  return r.result.taskId as string;
}

for (const skew of ['+5m', '-5m']) {
  describe(`three replicas on PostgreSQL, one of them ${skew} (faketime): nothing ends early, nothing is born expired`, () => {
    let replicas: ServerProcess[] = [];
    before(async () => {
      assert.ok(existsSync(LIBFAKETIME), `libfaketime is installed (apt-get install faketime): ${LIBFAKETIME}`);
      const store = ['--store', pgStoreUrl(freshSchema('clock'))];
      replicas.push(await startServer([...store, ...ARGS], { module: CLOCK_MODULE }));
      replicas.push(...(await startTogether([
        startServer([...store, ...ARGS], { module: CLOCK_MODULE }),
        startServer([...store, ...ARGS], { module: CLOCK_MODULE, env: faketimeEnv(skew) }),
      ])));
    });
    after(async () => {
      await Promise.all(replicas.map((r) => r.stop()));
      replicas = [];
    });

    it('the skewed replica really runs on a skewed clock (node reads it, its timers keep real time)', async () => {
      const { spawnSync } = await import('node:child_process');
      const t0 = Date.now();
      const out = spawnSync(process.execPath, ['-e', 'const a=Date.now();setTimeout(()=>console.log(JSON.stringify({now:a,slept:Date.now()-a})),300)'], { env: { ...process.env, ...faketimeEnv(skew) }, encoding: 'utf8' });
      const { now, slept } = JSON.parse(out.stdout) as { now: number; slept: number };
      const off = now - t0;
      assert.ok(Math.abs(Math.abs(off) - 300_000) < 10_000 && Math.sign(off) === (skew.startsWith('+') ? 1 : -1), `Date.now() is ${skew} off: ${off} ms`);
      assert.ok(slept >= 290 && slept < 5000, `a 300 ms timer took ${slept} ms`);
    });

    it('tasks created on every replica are neither swept nor born expired, and carry the store\'s creation time', async () => {
      const [a, b, s] = replicas as [ServerProcess, ServerProcess, ServerProcess];
      const ids: string[] = [];
      for (const r of [a, b, s]) for (let i = 0; i < 3; i++) ids.push(await taskOn(r.url, 'hold', { ms: 120_000 }));
      const madeAt = Date.now();
      // A marker with a 1.5 s TTL made on the skewed replica: once every replica reads it expired, each has swept
      // several times (200 ms apart) since the tasks above were made.
      const marker = await taskOn(s.url, 'brief', {});
      const end = Date.now() + 30_000;
      for (;;) {
        const reads = await Promise.all(replicas.map((r) => getTask(r.url, marker)));
        if (reads.every((g) => g.error && /expired/i.test(g.error.message))) break;
        assert.ok(Date.now() < end, `the 1.5 s marker did not expire: ${JSON.stringify(reads.map((g) => g.error ?? g.result.status))}`);
        await sleep(100);
      }
      await sleep(1000); // five more sweep periods of every replica
      for (const id of ids) {
        for (const r of replicas) {
          const g = await getTask(r.url, id);
          assert.equal(g.error, undefined, `task ${id} read on ${r.url}: ${JSON.stringify(g.error)}`);
          assert.equal(g.result.status, 'working');
          const created = Date.parse(g.result.createdAt);
          assert.ok(Math.abs(created - madeAt) < 60_000, `created at ${g.result.createdAt}, made at ${new Date(madeAt).toISOString()}`);
        }
      }
    });

    it('an input deadline (3 s) asked on any replica times out no earlier than 3 s, whichever replica resumes it', async () => {
      const t0 = Date.now();
      const ids = await Promise.all(replicas.map((r) => taskOn(r.url, 'question', { timeoutMs: 3000 })));
      for (const id of ids) await waitForTask(replicas[0]!.url, id, (t) => t.status === 'input_required', { timeoutMs: 20_000 });
      const ends = await Promise.all(ids.map(async (id) => {
        const t = await waitForTask(replicas[0]!.url, id, undefined, { timeoutMs: 60_000 });
        return { status: t.status, after: Date.now() - t0 };
      }));
      for (const e of ends) {
        assert.equal(e.status, 'failed', 'the unanswered question timed out');
        assert.ok(e.after >= 2800, `timed out after ${e.after} ms, before its 3 s deadline`);
      }
    });

    it('a durable 4 s sleep parked on any replica wakes no earlier than 4 s', async () => {
      const t0 = Date.now();
      const ids = await Promise.all(replicas.map((r) => taskOn(r.url, 'nap', { ms: 4000 })));
      const ends = await Promise.all(ids.map(async (id) => {
        const t = await waitForTask(replicas[1]!.url, id, undefined, { timeoutMs: 60_000 });
        return { status: t.status, after: Date.now() - t0 };
      }));
      for (const e of ends) {
        assert.equal(e.status, 'completed');
        assert.ok(e.after >= 3800, `woke after ${e.after} ms of a 4 s sleep`);
      }
    });
  });
}
