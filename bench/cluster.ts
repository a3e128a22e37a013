/**
 * Multi-replica measurements on PostgreSQL, with real `outlast serve` processes on loopback ports sharing one
 * schema (bench/cluster-module.ts serves the tools):
 *   latency()   cross-replica cancel (tasks/cancel sent to replica B -> the handler's AbortSignal fires on A) and
 *               push (a status change committed on A -> notifications/tasks read by a listen client of B).
 *   takeover()  SIGKILL, and SIGSTOP, of the replica running tasks -> each task re-started on another replica,
 *               against the configured lease.
 *   getAtScale() tasks/get latency against a schema holding 1,000,000 tasks vs one holding 1,000.
 */
import { closeSync, existsSync, openSync, readSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { PostgresTaskStore } from '../src/store/postgres/index.js';
import { percentile, send, serve, tasksGet, toolCall, wire, type WireRequest } from './common.js';

export const startReplica = (storeUrl: string, args: string[], env: NodeJS.ProcessEnv = {}) => serve(MODULE, ['--store', storeUrl, ...args], env);

const here = fileURLToPath(new URL('.', import.meta.url));
const MODULE = join(here, 'cluster-module.js');

export const now = () => performance.timeOrigin + performance.now();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Reads the JSON lines appended to a file since the last call. */
class LogTail {
  private offset = 0;
  constructor(readonly path: string) {}
  read(): Array<Record<string, any>> {
    if (!existsSync(this.path)) return [];
    const fd = openSync(this.path, 'r');
    try {
      const buf = Buffer.alloc(1 << 20);
      let text = '';
      for (;;) {
        const n = readSync(fd, buf, 0, buf.length, this.offset);
        if (n <= 0) break;
        this.offset += n;
        text += buf.subarray(0, n).toString('utf8');
      }
      const lines = text.split('\n');
      const partial = lines.pop()!;
      this.offset -= Buffer.byteLength(partial);
      return lines.filter(Boolean).map((l) => JSON.parse(l));
    } finally {
      closeSync(fd);
    }
  }
}

export async function createTask(url: string, tool: string, args: Record<string, unknown>): Promise<string> {
  const r = await send(url, toolCall(tool, args));
  const id = r.json?.result?.taskId;
  if (r.json?.result?.resultType !== 'task' || typeof id !== 'string') throw new Error(`${tool} on ${url}: ${r.text.slice(0, 300)}`);
  return id;
}

async function waitStatus(url: string, taskId: string, pred: (t: any) => boolean, timeoutMs = 10_000): Promise<any> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const r = await send(url, tasksGet(taskId));
    const t = r.json?.result;
    if (t && pred(t)) return t;
    if (Date.now() > end) throw new Error(`task ${taskId}: ${r.text.slice(0, 300)}`);
    await sleep(2);
  }
}

function stats(xs: number[]): { n: number; p50: number; p99: number; max: number } {
  const s = Float64Array.from(xs).sort();
  return { n: s.length, p50: percentile(s, 50), p99: percentile(s, 99), max: s[s.length - 1] ?? NaN };
}

export async function latency(storeUrl: string, logPath: string, cancels: number, ticks: number, log: (m: string) => void, args: string[] = []) {
  // Default heartbeat (5 s): the periodic fallback re-reads cannot be what delivers within milliseconds.
  const replica = () => startReplica(storeUrl, ['--no-poll-limit', ...args], { OUTLAST_BENCH_LOG: logPath });
  const [a, b] = await Promise.all([replica(), replica()]);
  const tail = new LogTail(logPath);
  try {
    // Cancel: one at a time, so each measures the path, not a queue. The first WARMUP are not counted (JIT,
    // connections, prepared statements on both replicas).
    const WARMUP = 20;
    const cancel: number[] = [];
    for (let i = 0; i < cancels + WARMUP; i++) {
      const key = `c${i}`;
      const id = await createTask(a!.url, 'hold', { key });
      await waitStatus(a!.url, id, (t) => t.statusMessage === 'holding');
      const t0 = now();
      const r = await send(b!.url, wire('tasks/cancel', { taskId: id }, { name: id }));
      if (!r.json?.result) throw new Error(`cancel: ${r.text.slice(0, 300)}`);
      let hit: Record<string, any> | undefined;
      const end = Date.now() + 10_000;
      while (!hit) {
        hit = tail.read().find((e) => e.key === key);
        if (!hit) {
          if (Date.now() > end) throw new Error(`the handler of ${key} never saw its cancel`);
          await sleep(1);
        }
      }
      if (i >= WARMUP) cancel.push(hit.abortedAt - t0);
    }
    log(`  cancel: ${cancels} samples`);
    // Push: a listen client on B, a ticker task on A.
    const id = await createTask(a!.url, 'ticker', { count: ticks, everyMs: 10 });
    const push = await listenLatencies(b!.url, id, ticks);
    log(`  push: ${push.length} notifications`);
    return { cancel: stats(cancel), push: stats(push) };
  } finally {
    await Promise.all([a!.stop(), b!.stop()]);
  }
}

/** Listens on `url` for `taskId`; returns, for each status notification, arrival time minus the time in its message. */
export async function listenLatencies(url: string, taskId: string, expected: number): Promise<number[]> {
  const r = wire('subscriptions/listen', { notifications: { taskIds: [taskId] } }, { id: 7 });
  const ac = new AbortController();
  const res = await fetch(url, { method: 'POST', headers: r.headers, body: r.body, signal: ac.signal });
  if (!res.headers.get('content-type')?.includes('text/event-stream')) throw new Error(`listen: ${await res.text()}`);
  const out: number[] = [];
  const reader = res.body!.getReader();
  let buf = '';
  const deadline = Date.now() + expected * 10 + 30_000;
  try {
    while (Date.now() < deadline) {
      const { value, done } = await reader.read();
      const at = now();
      if (done) break;
      buf += Buffer.from(value).toString('utf8');
      let i;
      let finished = false;
      while ((i = buf.indexOf('\n\n')) >= 0) {
        const block = buf.slice(0, i);
        buf = buf.slice(i + 2);
        const data = block.split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trim()).join('');
        if (!data) continue;
        const m = JSON.parse(data);
        if (m.method !== 'notifications/tasks') continue;
        const parts = /^(\d+) ([\d.]+)$/.exec(m.params.statusMessage ?? '');
        if (parts && m.params.status === 'working') out.push(at - Number(parts[2]));
        if (m.params.status !== 'working') finished = true;
      }
      if (finished) break;
    }
  } finally {
    ac.abort();
  }
  return out;
}

export async function takeover(storeUrl: string, logPath: string, leaseMs: number, heartbeatMs: number, tasks: number, rounds: number, log: (m: string) => void) {
  const args = ['--lease-ms', String(leaseMs), '--heartbeat-ms', String(heartbeatMs), '--no-poll-limit'];
  const env = { OUTLAST_BENCH_LOG: logPath };
  const replicas = await Promise.all([0, 1, 2].map(() => startReplica(storeUrl, args, env)));
  const tail = new LogTail(logPath);
  const results: Record<'SIGKILL' | 'SIGSTOP', number[]> = { SIGKILL: [], SIGSTOP: [] };
  try {
    for (let r = 0; r < rounds; r++) {
      for (const signal of ['SIGKILL', 'SIGSTOP'] as const) {
        const victim = await startReplica(storeUrl, args, env);
        replicas.push(victim);
        const keys = Array.from({ length: tasks }, (_, i) => `${signal}-${r}-${i}`);
        for (const key of keys) await createTask(victim.url, 'work', { key, ms: 600_000 });
        const starts = new Map<string, Array<Record<string, any>>>();
        const collect = () => {
          for (const e of tail.read()) if (e.key) starts.set(e.key, [...(starts.get(e.key) ?? []), e]);
        };
        while (keys.some((k) => !starts.get(k)?.length)) {
          collect();
          await sleep(5);
        }
        const t0 = now();
        process.kill(victim.pid, signal);
        const end = Date.now() + leaseMs * 3 + 30_000;
        while (keys.some((k) => (starts.get(k)?.length ?? 0) < 2)) {
          if (Date.now() > end) throw new Error(`${signal}: tasks not taken over in time`);
          collect();
          await sleep(5);
        }
        const taken = keys.map((k) => starts.get(k)![1]!.startedAt - t0);
        const last = Math.max(...taken);
        results[signal].push(last);
        log(`  round ${r + 1}: ${signal} -> all ${tasks} tasks running elsewhere after ${Math.round(last)} ms (first ${Math.round(Math.min(...taken))} ms)`);
        await victim.stop('SIGKILL');
      }
    }
    return results;
  } finally {
    await Promise.all(replicas.map((x) => x.stop()));
  }
}

/** A schema with the store's migrations applied, and a client whose search_path is it (the caller ends it). */
export async function migratedSchema(url: string, schema: string): Promise<pg.Client> {
  const store = new PostgresTaskStore({ connection: { connectionString: url }, schema, poolSize: 1 });
  await store.init();
  await store.close();
  const c = new pg.Client({ connectionString: url, options: `-c search_path=${schema}` });
  await c.connect();
  return c;
}

/** Creates `n` finished tasks (already read, far from expiry) straight in SQL, with ids `bench-md5(i)`. */
async function fill(url: string, schema: string, n: number): Promise<void> {
  const c = await migratedSchema(url, schema);
  try {
    const batch = 250_000;
    for (let from = 1; from <= n; from += batch) {
      await c.query(
        `INSERT INTO tasks (task_id, principal, tool, args, status, created_at, updated_at, ttl_ms, expires_at, poll_interval_ms, result,
           owner, retrieved_at, client_capabilities)
         SELECT 'bench-' || md5(i::text), 'anonymous', 'work', jsonb_build_object('key', i), 'completed', $3, $3, 31536000000, $3 + 31536000000, 500,
           '{"content":[{"type":"text","text":"done"}],"resultType":"complete"}'::jsonb, 'gone', $3, '{}'::jsonb
         FROM generate_series($1::int, $2::int) AS i`,
        [from, Math.min(n, from + batch - 1), Date.now()],
      );
    }
    await c.query('VACUUM ANALYZE tasks');
  } finally {
    await c.end();
  }
}

export async function getAtScale(
  url: string,
  schemas: { small: string; big: string },
  sizes: { small: number; big: number },
  runLoad: (side: { url: string; requests: WireRequest[]; concurrency: number }, seconds: number) => Promise<{ p50Ms: number; p99Ms: number; rps: number }>,
  opts: { rounds: number; seconds: number; warmup: number; concurrency: number; distinct: number },
  log: (m: string) => void,
) {
  const { createHash } = await import('node:crypto');
  const t0 = Date.now();
  await fill(url, schemas.small, sizes.small);
  await fill(url, schemas.big, sizes.big);
  log(`  filled ${sizes.small.toLocaleString('en-US')} and ${sizes.big.toLocaleString('en-US')} tasks in ${Math.round((Date.now() - t0) / 1000)} s`);
  const idOf = (i: number) => `bench-${createHash('md5').update(String(i)).digest('hex')}`;
  const pick = (n: number) => Array.from({ length: opts.distinct }, () => tasksGet(idOf(1 + Math.floor(Math.random() * n))));
  const small = await startReplica(`${url}?schema=${schemas.small}`, ['--no-poll-limit']);
  const big = await startReplica(`${url}?schema=${schemas.big}`, ['--no-poll-limit']);
  try {
    const sides = [
      { name: 'small', url: small.url, requests: pick(sizes.small), concurrency: opts.concurrency, results: [] as Array<{ p50Ms: number; p99Ms: number; rps: number }> },
      { name: 'big', url: big.url, requests: pick(sizes.big), concurrency: opts.concurrency, results: [] as Array<{ p50Ms: number; p99Ms: number; rps: number }> },
    ];
    const check = await send(big.url, sides[1]!.requests[0]!);
    if (check.json?.result?.status !== 'completed') throw new Error(`tasks/get at scale: ${check.text.slice(0, 300)}`);
    for (const s of sides) await runLoad(s, opts.warmup);
    for (let r = 0; r < opts.rounds; r++) {
      const order = r % 2 ? [...sides].reverse() : sides;
      const line: string[] = [];
      for (const s of order) {
        const res = await runLoad(s, opts.seconds);
        s.results.push(res);
        line.push(`${s.name} p99 ${res.p99Ms.toFixed(2)} ms (${Math.round(res.rps)}/s)`);
      }
      log(`  round ${r + 1}/${opts.rounds}: ${line.join(' | ')}`);
    }
    return { small: sides[0]!.results, big: sides[1]!.results };
  } finally {
    await Promise.all([small.stop(), big.stop()]);
  }
}
