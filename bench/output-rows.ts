/**
 * Rows (aa)-(ac): task output (ctx.output, tasks/stream; docs/output.md).
 *   (aa)  durable life cycles/s of a policy 'always' tool that emits ten outputs (each awaited) then completes vs the
 *         same tool emitting none, in-process, SQLite (WAL + synchronous=FULL) and PostgreSQL (aa.pg); and the cost
 *         of one output against one status change: changes committed per second by handlers writing ctx.output
 *         after ctx.output vs ctx.status after ctx.status (aa.ops: one handler; aa.ops16: 16 handlers at once).
 *         Alternating rounds, a fresh file or schema each (bench/output-bench.ts).
 *   (ab)  two `outlast serve` replicas on one PostgreSQL schema: an output emitted on A (the time is in its text)
 *         -> its notifications/tasks/event read by a tasks/stream client of B, p50/p99; in the same run the status
 *         push of (g) (a status set on A -> notifications/tasks on a listen client of B).
 *   (ac)  one task (out_burst of bench/cluster-module.ts, policy 'always') emitting 100,000 outputs (`--max-output-per-task` raised so
 *         none is dropped): the server's RSS (sampled every 100 ms) and heap after full GCs (every ~2 s) at the
 *         start, their peaks and at the end; then a full replay (tasks/stream from after: 0) read by one client:
 *         items/s, and the server's RSS peak during it. SQLite (ac) or PostgreSQL (ac.pg).
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';
import { createTask, listenLatencies, now, startReplica } from './cluster.js';
import { Child, benchFile, latencyRow, median, removeTempDir, round, send, serve, tasksGet, tempDir, wire, type BenchRow } from './common.js';
import { heap, type HeapReading } from './soak.js';
import { dropSchema } from './ops-overhead.js';

type Backend = 'sqlite' | 'postgres';
const MB = 1024 * 1024;
const mb = (b: number) => round(b / MB, 1);

// ---- (aa) ---------------------------------------------------------------------------------------------------

export interface OutputCostOptions {
  rounds: number;
  seconds: number;
  inflight: number;
  pool: number;
  pgUrl: string;
  backends: Backend[];
}

/** Runs one side in its own child (fresh store): the child's {rate}. */
async function side(o: OutputCostOptions, backend: Backend, cfg: Record<string, unknown>, label: string): Promise<Record<string, number>> {
  const dir = tempDir('output');
  const schema = `bench_out_${process.pid}_${label}_${Math.random().toString(36).slice(2, 8)}`;
  const child = new Child('output-bench.js', [JSON.stringify({ ...cfg, backend, dir, url: o.pgUrl, schema, pool: o.pool, seconds: o.seconds, inflight: o.inflight })]);
  try {
    return await child.next('result', o.seconds * 1000 + 120_000);
  } finally {
    await child.exit(30_000);
    removeTempDir(dir);
    if (backend === 'postgres') await dropSchema(o.pgUrl, schema);
  }
}

/** Alternating rounds of two sides; medians. */
async function pair(o: OutputCostOptions, backend: Backend, a: [string, Record<string, unknown>], b: [string, Record<string, unknown>], log: (m: string) => void) {
  const res: Record<string, Array<Record<string, number>>> = { [a[0]]: [], [b[0]]: [] };
  for (let r = 0; r < o.rounds; r++) {
    const order = r % 2 ? [b, a] : [a, b];
    const line: string[] = [];
    for (const [name, cfg] of order) {
      const x = await side(o, backend, cfg, name.replace(/\W/g, ''));
      res[name]!.push(x);
      line.push(`${name} ${Math.round(x.rate!)}/s${x.createRate ? ` (created ${Math.round(x.createRate)}/s)` : ''}`);
    }
    log(`  round ${r + 1}/${o.rounds}: ${line.join(' | ')}`);
  }
  return res;
}

export async function outputCost(o: OutputCostOptions, log: (m: string) => void): Promise<BenchRow[]> {
  const rows: BenchRow[] = [];
  for (const backend of o.backends) {
    const sfx = backend === 'sqlite' ? '' : '.pg';
    const store = backend === 'sqlite' ? 'SQLite WAL + FULL' : `PostgreSQL, pool ${o.pool}`;
    log(`(aa${sfx}) ${o.rounds} rounds x {10 outputs, none} x ${o.seconds}s, ${o.inflight} in flight (${store})`);
    const life = await pair(o, backend, ['ten', { mode: 'life', outputs: 10 }], ['none', { mode: 'life', outputs: 0 }], log);
    const rate = (k: string, f = 'rate') => life[k]!.map((x) => x[f]!);
    const ratio = median(rate('ten')) / median(rate('none'));
    rows.push({
      id: `aa${sfx}`,
      what: `durable tasks/s, created and run to completion in-process (${store}, ${o.inflight} in flight), each emitting ten outputs (awaited one by one)`,
      figure: round(median(rate('ten'))),
      unit: 'tasks/s',
      baselineWhat: 'the same tool emitting none',
      baseline: round(median(rate('none'))),
      ratio: round(ratio, 3),
      target: 'info',
      rounds: rate('ten').map((x) => round(x)),
      baselineRounds: rate('none').map((x) => round(x)),
      note: `creations/s during the window: ${round(median(rate('ten', 'createRate')))} vs ${round(median(rate('none', 'createRate')))}; ` +
        `per task: ${round(1e6 / median(rate('ten')))} vs ${round(1e6 / median(rate('none')))} µs of wall time, i.e. ` +
        `${round((1e6 / median(rate('ten')) - 1e6 / median(rate('none'))) / 10)} µs per output`,
    });
    for (const tasks of [1, 16]) {
      log(`(aa.ops${tasks === 1 ? '' : tasks}${sfx}) ${o.rounds} rounds x {ctx.output, ctx.status} x ${o.seconds}s, ${tasks} handler(s) (${store})`);
      const ops = await pair(o, backend, ['output', { mode: 'ops', kind: 'output', tasks }], ['status', { mode: 'ops', kind: 'status', tasks }], log);
      const out = ops.output!.map((x) => x.rate!);
      const st = ops.status!.map((x) => x.rate!);
      rows.push({
        id: `aa.ops${tasks === 1 ? '' : tasks}${sfx}`,
        what: `committed ctx.output calls/s, ${tasks === 1 ? 'one handler, one after another' : `${tasks} handlers at once, each one after another`} (${store})`,
        figure: round(median(out)),
        unit: '/s',
        baselineWhat: 'ctx.status calls/s, the same way',
        baseline: round(median(st)),
        ratio: round(median(out) / median(st), 3),
        target: 'info',
        rounds: out.map((x) => round(x)),
        baselineRounds: st.map((x) => round(x)),
        note: `${round(1e6 / median(out))} vs ${round(1e6 / median(st))} µs per call`,
      });
    }
  }
  return rows;
}

// ---- SSE reading ---------------------------------------------------------------------------------------------

/** Opens tasks/stream on `url` and calls `on` for each message with its arrival time; resolves at the stream's end. */
export async function readTaskStream(url: string, taskId: string, after: number, on: (m: any, at: number) => void, timeoutMs: number): Promise<{ ended: boolean }> {
  const r = wire('tasks/stream', { taskId, after }, { id: 7, name: taskId });
  const ac = new AbortController();
  const timer = setTimeout(() => ac.abort(), timeoutMs);
  try {
    const res = await fetch(url, { method: 'POST', headers: r.headers, body: r.body, signal: ac.signal });
    if (!res.headers.get('content-type')?.includes('text/event-stream')) throw new Error(`tasks/stream: ${res.status} ${(await res.text()).slice(0, 300)}`);
    const reader = res.body!.getReader();
    const dec = new TextDecoder();
    let buf = '';
    let ended = false;
    for (;;) {
      const { value, done } = await reader.read();
      const at = now();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let i;
      let from = 0;
      while ((i = buf.indexOf('\n\n', from)) >= 0) {
        const block = buf.slice(from, i);
        from = i + 2;
        const d = block.indexOf('data: ');
        if (d < 0) continue;
        const m = JSON.parse(block.slice(d + 6));
        if (m.error) throw new Error(`tasks/stream error: ${JSON.stringify(m.error)}`);
        if ('result' in m) ended = true;
        on(m, at);
      }
      buf = buf.slice(from);
      if (ended) break;
    }
    return { ended };
  } finally {
    clearTimeout(timer);
    ac.abort();
  }
}

// ---- (ab) ---------------------------------------------------------------------------------------------------

export async function outputPush(o: { pgUrl: string; items: number; everyMs: number }, log: (m: string) => void): Promise<BenchRow[]> {
  const schema = `bench_outpush_${process.pid}_${Math.random().toString(36).slice(2, 8)}`;
  const store = `${o.pgUrl}?schema=${schema}`;
  const WARMUP = 20;
  // Default heartbeat (5 s): the fallback re-reads cannot be what delivers within milliseconds.
  const [a, b] = await Promise.all([startReplica(store, ['--no-poll-limit']), startReplica(store, ['--no-poll-limit'])]);
  try {
    log(`(ab) two PG replicas: ${o.items} outputs on A every ${o.everyMs} ms -> tasks/stream on B; then ${o.items} status changes -> listen on B`);
    const id = await createTask(a!.url, 'out_ticker', { count: o.items + WARMUP, everyMs: o.everyMs });
    const out: number[] = [];
    let last = 0;
    let gaps = 0;
    const { ended } = await readTaskStream(b!.url, id, 0, (m, at) => {
      if (m.method !== 'notifications/tasks/event') return;
      if (m.params.seq !== last + 1) gaps++;
      last = m.params.seq;
      const parts = /^(\d+) ([\d.]+)$/.exec(m.params.data?.text ?? '');
      if (parts && Number(parts[1]) >= WARMUP) out.push(at - Number(parts[2]));
    }, (o.items + WARMUP) * o.everyMs * 3 + 30_000);
    if (!ended || gaps) throw new Error(`(ab) stream ended=${ended}, ${gaps} gaps, last seq ${last}`);
    log(`  output: ${out.length} events`);
    const tid = await createTask(a!.url, 'ticker', { count: o.items + WARMUP, everyMs: o.everyMs });
    const push = (await listenLatencies(b!.url, tid, o.items + WARMUP)).slice(WARMUP);
    log(`  status push: ${push.length} notifications`);
    return [
      latencyRow('ab', `output emitted on replica A (ctx.output) -> notifications/tasks/event read by a tasks/stream client of B (two PG replicas, one every ${o.everyMs} ms)`, out, 20),
      latencyRow('ab.push', 'same run: status set on A (ctx.status) -> notifications/tasks read by a listen client of B, as (g.push)', push, 20),
    ];
  } finally {
    await Promise.all([a!.stop(), b!.stop()]);
    await dropSchema(o.pgUrl, schema);
  }
}

// ---- (ac) ---------------------------------------------------------------------------------------------------

/** The resident set of a process, from /proc (no GC, no IPC: cheap enough to sample often). */
function rssOf(pid: number, field = 'VmRSS'): number {
  const m = new RegExp(`${field}:\\s+(\\d+) kB`).exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) * 1024 : NaN;
}
/** RSS split: anonymous (heap, native allocations, SQLite's page cache), file-backed, shared memory (SQLite's -shm). */
const rssSplit = (pid: number) => ['RssAnon', 'RssFile', 'RssShmem'].map((f) => mb(rssOf(pid, f))).join('/');

export async function outputVolume(o: { backend: Backend; items: number; pgUrl: string; pool: number }, log: (m: string) => void): Promise<BenchRow[]> {
  const sfx = o.backend === 'sqlite' ? '' : '.pg';
  const dir = tempDir('outvol');
  const schema = `bench_outvol_${process.pid}_${Math.random().toString(36).slice(2, 8)}`;
  const store = o.backend === 'sqlite' ? `sqlite:${join(dir, 'out.db')}` : `${o.pgUrl}?schema=${schema}&pool=${o.pool}`;
  const probe = pathToFileURL(benchFile('heap-probe.js')).href;
  const server = await serve(benchFile('cluster-module.js'), ['--store', store, '--log-level', 'error', '--no-poll-limit', '--max-output-per-task', String(o.items)], {}, {
    // BENCH_PROFILE=1: the server writes a CPU profile of its whole run when it stops (bench-results/profiles).
    nodeArgs: ['--expose-gc', '--import', probe, ...(process.env.BENCH_PROFILE === '1' ? ['--cpu-prof', '--cpu-prof-dir', join(benchFile('.'), '..', '..', 'bench-results', 'profiles')] : [])],
    ipc: true,
  });
  const samples: Array<{ t: number; seq: number; rss: number; heap?: number }> = [];
  let sampling = true;
  let seq = 0;
  let peakRss = 0;
  const sampler = (async () => {
    let k = 0;
    while (sampling) {
      const rss = rssOf(server.pid);
      peakRss = Math.max(peakRss, rss);
      const s: (typeof samples)[number] = { t: performance.now(), seq, rss };
      if (k++ % 20 === 0) s.heap = (await heap(server)).heapUsed; // heap after full GCs, every ~2 s
      samples.push(s);
      await new Promise((r) => setTimeout(r, 100));
    }
  })();
  try {
    log(`(ac${sfx}) one out_burst task of ${o.items.toLocaleString('en-US')} outputs (${o.backend}), --max-output-per-task ${o.items}`);
    // Warm the server (JIT, statements) with a small task first, so the start reading is not a cold process.
    await readTaskStream(server.url, await createTask(server.url, 'out_burst', { count: 2000 }), 0, () => undefined, 120_000);
    const start: HeapReading = await heap(server);
    const startSplit = rssSplit(server.pid);
    const t0 = performance.now();
    const id = await createTask(server.url, 'out_burst', { count: o.items });
    let status = 'working';
    const deadline = Date.now() + 600_000;
    while (status === 'working') {
      if (Date.now() > deadline) throw new Error(`(ac) the task did not finish in 10 min (seq ${seq})`);
      await new Promise((r) => setTimeout(r, 500));
      const g = await send(server.url, tasksGet(id));
      const r = g.json?.result;
      if (!r) {
        log(`  tasks/get answered ${g.status}: ${g.text.slice(0, 300)}`);
        continue;
      }
      status = r.status;
      seq = r._meta?.['outlast/outputSeq'] ?? seq;
    }
    const emitSeconds = (performance.now() - t0) / 1000;
    if (status !== 'completed' || seq !== o.items) throw new Error(`(ac) the task ended ${status} at seq ${seq}`);
    const end = await heap(server);
    const endSplit = rssSplit(server.pid);
    const emitPeakRss = peakRss;
    const emitHeaps = samples.filter((s) => s.heap !== undefined && s.t >= t0).map((s) => s.heap!);
    // RSS when the task had written a quarter, half, three quarters of its items: flat, or growing with the count?
    const rssAt = [0.25, 0.5, 0.75].map((f) => samples.find((s) => s.t >= t0 && s.seq >= f * o.items)?.rss ?? NaN);
    log(`  emitted ${o.items} in ${round(emitSeconds, 1)} s; RSS ${mb(start.rss)} -> peak ${mb(emitPeakRss)} -> ${mb(end.rss)} MB; heap after GC ${mb(start.heapUsed)} -> peak ${mb(Math.max(...emitHeaps))} -> ${mb(end.heapUsed)} MB`);
    // Full replay from the start.
    peakRss = rssOf(server.pid);
    let n = 0;
    let prev = 0;
    let bad = 0;
    const r0 = performance.now();
    const { ended } = await readTaskStream(server.url, id, 0, (m) => {
      if (m.method !== 'notifications/tasks/event') return;
      if (m.params.seq !== prev + 1) bad++;
      prev = m.params.seq;
      n++;
    }, 600_000);
    const replaySeconds = (performance.now() - r0) / 1000;
    const replayPeakRss = peakRss;
    const after = await heap(server);
    if (!ended || n !== o.items || bad) throw new Error(`(ac) replay: ended=${ended}, ${n} items, ${bad} out of order`);
    log(`  replayed ${n} in ${round(replaySeconds, 2)} s (${Math.round(n / replaySeconds)}/s); RSS peak ${mb(replayPeakRss)} MB, heap after GC ${mb(after.heapUsed)} MB`);
    return [
      {
        id: `ac${sfx}`,
        what: `one task emitting ${o.items.toLocaleString('en-US')} outputs (bench tool out_burst: policy 'always', each output awaited; ${o.backend}): server heap after full GC, start -> peak during -> end`,
        figure: mb(end.heapUsed - start.heapUsed),
        unit: 'MB heap growth',
        target: 'flat',
        note: `heap ${mb(start.heapUsed)} -> peak ${mb(Math.max(start.heapUsed, ...emitHeaps))} -> ${mb(end.heapUsed)} MB; RSS ${mb(start.rss)} -> peak ${mb(emitPeakRss)} -> ${mb(end.rss)} MB (at 1/4, 1/2, 3/4 of the items: ${rssAt.map(mb).join(', ')}; anon/file/shmem ${startSplit} -> ${endSplit}); ${Math.round(o.items / emitSeconds)} outputs/s (${round(emitSeconds, 1)} s)`,
      },
      {
        id: `ac.replay${sfx}`,
        what: `full replay of those ${o.items.toLocaleString('en-US')} outputs: tasks/stream from after: 0, one client on loopback`,
        figure: Math.round(n / replaySeconds),
        unit: 'items/s',
        target: 'info',
        note: `${round(replaySeconds, 2)} s; server RSS peak during the replay ${mb(replayPeakRss)} MB (before ${mb(end.rss)}), heap after GC afterwards ${mb(after.heapUsed)} MB`,
      },
    ];
  } finally {
    sampling = false;
    await sampler.catch(() => undefined);
    await server.stop();
    removeTempDir(dir);
    if (o.backend === 'postgres') await dropSchema(o.pgUrl, schema).catch(() => undefined);
  }
}
