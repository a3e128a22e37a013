/**
 * The run queue's rows of `npm run bench`:
 *   (p) tasks started per second from a full run queue on PostgreSQL (a TaskRuntime claiming through outlast_claim and
 *       starting each handler) vs a bare `FOR UPDATE SKIP LOCKED` claim loop on the same table, one statement in
 *       flight each, alternating rounds in fresh schemas (bench/queue-bench.ts). Target ratio >= 0.7. The runtime
 *       takes up to claimBatch (16) tasks per claim when it has room for them; p.single: one task per claim.
 *   (q) two replicas with --max-running 1 (bench/queue-module.ts): replica A is full, a task sent to it waits queued
 *       while B is full too; B's running handler ends -> the queued task's handler starts on B. p50/p99 of that gap,
 *       both times taken in the handlers. Target p99 < 50 ms. q.wake: the same task sent to the full A while B is
 *       idle -> started on B (woken by the queue signal), timed from the send.
 */
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { Child, latencyRow, median, round, send, serve, tasksGet, toolCall, wire, type BenchRow } from './common.js';

const here = fileURLToPath(new URL('.', import.meta.url));
const now = () => performance.timeOrigin + performance.now();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export interface QueueBenchConfig {
  pgUrl: string;
  rounds: number;
  /** Queued tasks drained per round of (p). */
  tasks: number;
  /** Samples of (q). */
  samples: number;
  /** A fresh schema name (dropped by the caller). */
  schema(label: string): string;
  dropSchemas(): Promise<void>;
  log(m: string): void;
}

async function drainRound(cfg: QueueBenchConfig, mode: 'bare' | 'outlast', batch = 16): Promise<number> {
  const child = new Child('queue-bench.js', [JSON.stringify({ mode, url: cfg.pgUrl, schema: cfg.schema(`q${mode}`), tasks: cfg.tasks, principals: 1, batch })]);
  try {
    return (await child.next<{ rate: number }>('result', 300_000)).rate;
  } finally {
    await child.exit(30_000);
    await cfg.dropSchemas();
  }
}

/** (p): alternating rounds, ratios of medians. */
export async function queueStarts(cfg: QueueBenchConfig): Promise<BenchRow[]> {
  cfg.log(`(p) ${cfg.rounds} rounds x {bare SKIP LOCKED loop, Outlast run queue, the same one task per claim} draining ${cfg.tasks} queued tasks`);
  const sides = { bare: [] as number[], outlast: [] as number[], single: [] as number[] };
  const run = { bare: () => drainRound(cfg, 'bare'), outlast: () => drainRound(cfg, 'outlast'), single: () => drainRound(cfg, 'outlast', 1) };
  for (let r = 0; r < cfg.rounds; r++) {
    const order = (['bare', 'outlast', 'single'] as const).map((_, i, a) => a[(i + r) % 3]!);
    const line: string[] = [];
    for (const m of order) {
      const rate = await run[m]();
      sides[m].push(rate);
      line.push(`${m} ${Math.round(rate)}/s`);
    }
    cfg.log(`  round ${r + 1}/${cfg.rounds}: ${line.join(' | ')}`);
  }
  const bare = median(sides.bare);
  const baselineWhat = 'a bare UPDATE ... (SELECT ... FOR UPDATE SKIP LOCKED) claim loop on the same table, one connection';
  const row = (id: string, what: string, xs: number[], pass: boolean | undefined): BenchRow => ({
    id,
    what,
    figure: round(median(xs)),
    unit: '/s',
    baselineWhat,
    baseline: round(bare),
    ratio: round(median(xs) / bare, 3),
    target: pass === undefined ? '' : 'ratio >= 0.7',
    ...(pass === undefined ? {} : { pass }),
    rounds: xs.map((x) => round(x)),
    baselineRounds: sides.bare.map((x) => round(x)),
  });
  return [
    row('p', `tasks started/s from a full run queue on PostgreSQL (TaskRuntime: outlast_claim, up to 16 per claim, then each handler starts), ${cfg.tasks} queued`, sides.outlast,
      median(sides.outlast) / bare >= 0.7),
    row('p.single', 'the same, one task per claim (claimBatch 1: one statement per task, as the baseline)', sides.single, undefined),
  ];
}

async function taskOf(url: string, tool: string, args: Record<string, unknown>): Promise<string> {
  const r = await send(url, toolCall(tool, args));
  const id = r.json?.result?.taskId;
  if (r.json?.result?.resultType !== 'task' || typeof id !== 'string') throw new Error(`${tool} on ${url}: ${r.text.slice(0, 300)}`);
  return id;
}

/** Polls until the task completed; returns the JSON its result text carries. */
async function resultOf(url: string, taskId: string, timeoutMs = 10_000): Promise<Record<string, number>> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const t = (await send(url, tasksGet(taskId))).json?.result;
    if (t?.status === 'completed') return JSON.parse(t.result.content[0].text);
    if (t && t.status !== 'working') throw new Error(`task ${taskId} ended ${t.status}`);
    if (Date.now() > end) throw new Error(`task ${taskId} did not complete in ${timeoutMs} ms`);
    await sleep(2);
  }
}

/** (q): start latency of a queued task once capacity frees on another replica (and q.wake). */
export async function queueLatency(cfg: QueueBenchConfig): Promise<BenchRow[]> {
  const storeUrl = `${cfg.pgUrl}?schema=${cfg.schema('qlatency')}`;
  const module = join(here, 'queue-module.js');
  // Default heartbeat; a poll far slower than any sample, so neither fallback can be what starts the task.
  const args = ['--store', storeUrl, '--max-running', '1', '--queue-poll-ms', '60000', '--no-poll-limit'];
  const a = await serve(module, args);
  const b = await serve(module, args);
  cfg.log(`(q) two replicas, --max-running 1 each: ${cfg.samples} queued tasks started on B when its slot frees, ${cfg.samples} when B is idle`);
  try {
    const holdA = await taskOf(a.url, 'gate', { ms: 3_600_000 }); // A stays full throughout
    const WARMUP = 10;
    const freed: number[] = [];
    const woken: number[] = [];
    for (let i = 0; i < cfg.samples + WARMUP; i++) {
      // B full with a short gate; the probe sent to A waits queued until the gate ends.
      const gate = await taskOf(b.url, 'gate', { ms: 40 });
      const probe = await taskOf(a.url, 'probe', {});
      const [g, p] = await Promise.all([resultOf(b.url, gate), resultOf(a.url, probe)]);
      if (p.pid !== b.pid) throw new Error('the probe did not run on B');
      if (i >= WARMUP) freed.push(p.startedAt! - g.endedAt!);
      // B idle: the probe sent to the full A is started by B, woken by the queue signal.
      const sentAt = now();
      const woke = await resultOf(a.url, await taskOf(a.url, 'probe', {}));
      if (i >= WARMUP) woken.push(woke.startedAt! - sentAt);
    }
    await send(a.url, wire('tasks/cancel', { taskId: holdA }, { name: holdA }));
    return [
      latencyRow('q', 'queued task started on replica B once B\'s running handler ends (the task was sent to the full replica A): handler end -> handler start', freed, 50),
      latencyRow('q.wake', 'task sent to the full replica A while B is idle: sent -> handler started on B (queued, then claimed by B on the queue signal)', woken, 50,
        "includes the HTTP request and the queued row's commit"),
    ];
  } finally {
    await Promise.all([a.stop(), b.stop()]);
    await cfg.dropSchemas();
  }
}

