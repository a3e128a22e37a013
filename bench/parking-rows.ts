/**
 * Row (o) of `npm run bench`: parked waits.
 *   o      two replicas on one PostgreSQL schema (bench/parking-module.ts, --park-after-ms 0, a queue poll far slower
 *          than any sample): a durable task created on A runs a step and is parked on its question; `tasks/update` is
 *          sent to B -> the handler, resumed by whichever replica's claim took it and replayed, gets past the question.
 *          p50/p99 of that gap (sent -> resumed, both clocks of this host). Target p99 < 50 ms (the handler's own
 *          work here is one replayed step).
 *   o.mem  what 1,000 parked tasks add to the heap of the process that parked them, after global.gc(), following a
 *          warm-up of 5,000 parked tasks (bench/parking-memory.ts, SQLite). Target < 5 MB. RSS is given beside it: it
 *          also holds what the allocator and SQLite's caches keep after a burst (it shrinks as the warm-up grows, the
 *          heap does not grow at all).
 */
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { Child, latencyRow, removeTempDir, round, send, serve, tasksGet, tempDir, wire, type BenchRow } from './common.js';
import type { QueueBenchConfig } from './queue-rows.js';

const here = fileURLToPath(new URL('.', import.meta.url));
const now = () => performance.timeOrigin + performance.now();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** What (o) needs: the queue rows' settings, less the drain sizes. */
export type ParkingBenchConfig = Pick<QueueBenchConfig, 'pgUrl' | 'samples' | 'schema' | 'dropSchemas' | 'log'>;

async function resultOf(url: string, taskId: string, timeoutMs = 10_000): Promise<Record<string, number>> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const t = (await send(url, tasksGet(taskId))).json?.result;
    if (t?.status === 'completed') return JSON.parse(t.result.content[0].text);
    if (t && t.status !== 'working' && t.status !== 'input_required') throw new Error(`task ${taskId} ended ${t.status}`);
    if (Date.now() > end) throw new Error(`task ${taskId} did not complete in ${timeoutMs} ms`);
    await sleep(5);
  }
}

/** (o): resume latency of a parked task answered through another replica. */
export async function parkedResume(cfg: ParkingBenchConfig): Promise<BenchRow[]> {
  const schema = cfg.schema('parking');
  const storeUrl = `${cfg.pgUrl}?schema=${schema}`;
  const module = join(here, 'parking-module.js');
  const args = ['--store', storeUrl, '--park-after-ms', '0', '--queue-poll-ms', '60000', '--no-poll-limit'];
  const a = await serve(module, args);
  const b = await serve(module, args);
  const db = new pg.Client({ connectionString: cfg.pgUrl, options: `-c search_path=${schema}` });
  await db.connect();
  cfg.log(`(o) two replicas: ${cfg.samples} tasks parked on A, answered through B`);
  try {
    const WARMUP = 10;
    const gaps: number[] = [];
    const where = { a: 0, b: 0 };
    for (let i = 0; i < cfg.samples + WARMUP; i++) {
      const r = await send(a.url, wire('tools/call', { name: 'held', arguments: {} }, { name: 'held', caps: { elicitation: {} } }));
      const id = r.json?.result?.taskId as string;
      if (!id) throw new Error(`held on A: ${r.text.slice(0, 300)}`);
      for (let t = 0; ; t++) {
        const p = await db.query('SELECT parked_at FROM tasks WHERE task_id = $1', [id]);
        if (p.rows[0]?.parked_at !== null && p.rows[0]?.parked_at !== undefined) break;
        if (t > 2000) throw new Error(`task ${id} was not parked`);
        await sleep(2);
      }
      const sentAt = now();
      const upd = await send(b.url, wire('tasks/update', { taskId: id, inputResponses: { go: { action: 'accept', content: { go: true } } } }, { name: id }));
      if (upd.json?.error) throw new Error(`tasks/update: ${JSON.stringify(upd.json.error)}`);
      const out = await resultOf(a.url, id);
      if (i < WARMUP) continue;
      gaps.push(out.resumedAt! - sentAt);
      if (out.pid === a.pid) where.a++;
      else where.b++;
    }
    return [
      latencyRow('o', 'a parked task (durable tool, one step, a question) answered with tasks/update through replica B: sent -> its handler, resumed by a claim and replayed, past the question',
        gaps, 50, `resumed on A ${where.a}, on B ${where.b}; includes the HTTP request, the answer's commit and the claim`),
    ];
  } finally {
    await db.end();
    await Promise.all([a.stop(), b.stop()]);
    await cfg.dropSchemas();
  }
}

/** (o.mem): memory of 1,000 parked tasks in the process that parked them. */
export async function parkedMemory(cfg: { tasks: number; log(m: string): void }): Promise<BenchRow[]> {
  const dir = tempDir('parked');
  const warmup = 5000;
  cfg.log(`(o.mem) ${cfg.tasks} parked tasks after a ${warmup}-task warm-up, heap and RSS after global.gc()`);
  const child = new Child('parking-memory.js', [JSON.stringify({ dir, tasks: cfg.tasks, warmup })]);
  try {
    const r = await child.next<{ heapMB: number; rssMB: number; baseHeapMB: number; baseRssMB: number }>('result', 300_000);
    return [
      {
        id: 'o.mem',
        what: `heap growth of the process that parked ${cfg.tasks.toLocaleString('en-US')} durable tasks (each ran a step and waits for an answer; no handler held)`,
        figure: round(r.heapMB, 2),
        unit: 'MB',
        baseline: round(r.baseHeapMB, 1),
        target: '< 5 MB',
        pass: r.heapMB < 5,
        note: `RSS ${r.rssMB >= 0 ? '+' : ''}${round(r.rssMB, 2)} MB (from ${round(r.baseRssMB, 1)} MB); baseline: heap after the ${warmup}-task warm-up`,
      },
    ];
  } finally {
    await child.exit(30_000);
    removeTempDir(dir);
  }
}
