/**
 * Row (n) of `npm run bench`: durable steps committed per second by one handler (ctx.step after ctx.step, each
 * committed before the handler goes on) vs raw single-row commits on the same store, one after another, SQLite (WAL,
 * synchronous=FULL) and PostgreSQL, alternating rounds in fresh files and schemas (bench/steps-bench.ts). n.* is a step
 * not marked idempotent (its `started` row, then its value: two commits, so at most 0.5; target ratio >= 0.45, issue
 * 43); n.*.idem an idempotent one (one commit; >= 0.85); n.*.par 16 handlers (tasks) stepping at once, not idempotent,
 * whose commits the store groups (>= 0.5). (n.dbos), against DBOS Transact, is bench/dbos-rows.ts.
 */
import { Child, median, removeTempDir, round, tempDir, type BenchRow } from './common.js';
import type { QueueBenchConfig } from './queue-rows.js';

/** Handlers stepping at once in n.*.par (bench/steps-bench.ts). */
const RUNS = 16;

/** What (n) needs: the queue rows' settings, and how long each side commits. */
export type StepsBenchConfig = Pick<QueueBenchConfig, 'pgUrl' | 'rounds' | 'schema' | 'dropSchemas' | 'log'> & { seconds: number };

type Mode = 'raw' | 'steps' | 'idempotent' | 'parallel';

async function side(cfg: StepsBenchConfig, backend: 'sqlite' | 'postgres', mode: Mode): Promise<number> {
  const dir = backend === 'sqlite' ? tempDir('steps') : undefined;
  const where = backend === 'sqlite' ? { dir } : { url: cfg.pgUrl, schema: cfg.schema(`n${mode}`) };
  const child = new Child('steps-bench.js', [JSON.stringify({ mode, backend, seconds: cfg.seconds, runs: RUNS, ...where })]);
  try {
    return (await child.next<{ rate: number }>('result', 120_000)).rate;
  } finally {
    await child.exit(30_000);
    if (dir) removeTempDir(dir);
    else await cfg.dropSchemas();
  }
}

/** (n) on both backends. */
export async function stepCommits(cfg: StepsBenchConfig): Promise<BenchRow[]> {
  const rows: BenchRow[] = [];
  for (const backend of ['sqlite', 'postgres'] as const) {
    cfg.log(`(n) ${backend}: ${cfg.rounds} rounds x {raw single-row commits, durable steps, idempotent steps, ${RUNS} runs of durable steps at once}, ${cfg.seconds} s each`);
    const sides: Record<Mode, number[]> = { raw: [], steps: [], idempotent: [], parallel: [] };
    const modes: Mode[] = ['raw', 'steps', 'idempotent', 'parallel'];
    for (let r = 0; r < cfg.rounds; r++) {
      const line: string[] = [];
      for (const m of modes.map((_, i) => modes[(i + r) % modes.length]!)) {
        const rate = await side(cfg, backend, m);
        sides[m].push(rate);
        line.push(`${m} ${Math.round(rate)}/s`);
      }
      cfg.log(`  round ${r + 1}/${cfg.rounds}: ${line.join(' | ')}`);
    }
    const raw = median(sides.raw);
    const label = backend === 'sqlite' ? 'SQLite (WAL, synchronous=FULL)' : 'PostgreSQL';
    const row = (id: string, what: string, xs: number[], target: number): BenchRow => ({
      id,
      what,
      figure: round(median(xs)),
      unit: 'steps/s',
      baselineWhat: `raw single-row INSERT commits into task_steps on ${label}, one at a time`,
      baseline: round(raw),
      ratio: round(median(xs) / raw, 3),
      target: `ratio >= ${target}`,
      pass: median(xs) / raw >= target,
      rounds: xs.map((x) => round(x)),
      baselineRounds: sides.raw.map((x) => round(x)),
    });
    const short = backend === 'sqlite' ? 'sqlite' : 'pg';
    rows.push(
      // Issue 43: a step not marked idempotent is two durable commits by design (ceiling 0.5), judged against 0.45.
      row(`n.${short}`, `durable steps committed per second by one handler on ${label} (not idempotent: a started row, then the value; two fenced commits)`, sides.steps, 0.45),
      row(`n.${short}.idem`, `the same with idempotent steps (one fenced commit each)`, sides.idempotent, 0.85),
      row(`n.${short}.par`, `durable steps committed per second by ${RUNS} handlers (tasks) stepping at once, not idempotent (the commits of steps that run together grouped)`, sides.parallel, 0.5),
    );
  }
  return rows;
}
