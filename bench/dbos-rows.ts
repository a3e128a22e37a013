/**
 * Row (n.dbos) of the bench: Outlast's idempotent durable steps against DBOS Transact's steps (bench/peers), both
 * in-process on the same PostgreSQL, each side a fresh child (bench/dbos-bench.ts) in a fresh schema (Outlast) or
 * system database (DBOS), alternating rounds. Three shapes (issue 43):
 *   (n.dbos)       one workflow stepping, steps/s. Target >= 3.
 *   (n.dbos.eight) eight workflows stepping at once, steps/s. Target >= 5.
 *   (n.dbos.wf3)   3-step workflows started and awaited one after another, workflows/s. Target >= 2.5.
 * Each row notes the statements each side sent per step (or workflow) in its window, counted at the driver.
 */
import pg from 'pg';
import { Child, median, round, type BenchRow } from './common.js';
import { ensurePeers } from './peers.js';

export interface DbosBenchConfig {
  pgUrl: string;
  rounds: number;
  seconds: number;
  schema(label: string): string;
  dropSchemas(): Promise<void>;
  log(m: string): void;
}

type Shape = 'one' | 'eight' | 'wf3';
interface Side {
  rate: number;
  statementsPerUnit: number;
}

/** A database of its own for one DBOS side, dropped after it (DBOS creates its system database at launch). */
async function withDatabase<T>(pgUrl: string, run: (name: string) => Promise<T>): Promise<T> {
  const name = `outlast_bench_dbos_${process.pid}_${Math.random().toString(36).slice(2, 8)}`;
  try {
    return await run(name);
  } finally {
    const c = new pg.Client({ connectionString: pgUrl });
    await c.connect();
    try {
      await c.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
    } finally {
      await c.end();
    }
  }
}

async function side(cfg: DbosBenchConfig, engine: 'outlast' | 'dbos', shape: Shape): Promise<Side> {
  const run = async (where: Record<string, string>) => {
    const child = new Child('dbos-bench.js', [JSON.stringify({ engine, shape, url: cfg.pgUrl, seconds: cfg.seconds, ...where })]);
    try {
      return await child.next<Side>('result', cfg.seconds * 1000 + 120_000);
    } finally {
      await child.exit(30_000);
    }
  };
  if (engine === 'dbos') return withDatabase(cfg.pgUrl, (database) => run({ database }));
  try {
    return await run({ schema: cfg.schema(`ndbos_${shape}`) });
  } finally {
    await cfg.dropSchemas();
  }
}

export async function dbosSteps(cfg: DbosBenchConfig): Promise<BenchRow[]> {
  ensurePeers(cfg.log);
  const shapes: Array<{ shape: Shape; id: string; what: string; unit: string; target: number }> = [
    { shape: 'one', id: 'n.dbos', what: 'idempotent durable steps/s, one workflow, Outlast on PostgreSQL', unit: 'steps/s', target: 3 },
    { shape: 'eight', id: 'n.dbos.eight', what: 'idempotent durable steps/s, eight workflows at once, Outlast on PostgreSQL', unit: 'steps/s', target: 5 },
    { shape: 'wf3', id: 'n.dbos.wf3', what: '3-step workflows/s started and awaited one after another, Outlast on PostgreSQL', unit: 'workflows/s', target: 2.5 },
  ];
  const results = new Map<string, { outlast: Side[]; dbos: Side[] }>(shapes.map((s) => [s.shape, { outlast: [], dbos: [] }]));
  cfg.log(`(n.dbos) ${cfg.rounds} rounds x {one workflow, eight at once, 3-step workflows} x {Outlast, DBOS Transact}, ${cfg.seconds} s each`);
  for (let r = 0; r < cfg.rounds; r++) {
    const line: string[] = [];
    for (const { shape } of shapes) {
      // Alternating which side goes first, round by round.
      for (const engine of r % 2 === 0 ? (['outlast', 'dbos'] as const) : (['dbos', 'outlast'] as const)) {
        const s = await side(cfg, engine, shape);
        results.get(shape)![engine].push(s);
        line.push(`${shape} ${engine} ${Math.round(s.rate)}/s (${round(s.statementsPerUnit, 2)} statements each)`);
      }
    }
    cfg.log(`  round ${r + 1}/${cfg.rounds}: ${line.join(' | ')}`);
  }
  return shapes.map(({ shape, id, what, unit, target }) => {
    const { outlast, dbos } = results.get(shape)!;
    const a = median(outlast.map((s) => s.rate));
    const b = median(dbos.map((s) => s.rate));
    const per = unit === 'steps/s' ? 'step' : 'workflow';
    return {
      id,
      what,
      figure: round(a),
      unit,
      baselineWhat: `DBOS Transact 5.3 (DBOS.runStep in registered workflows), same PostgreSQL, in-process`,
      baseline: round(b),
      ratio: round(a / b, 3),
      target: `ratio >= ${target}`,
      pass: a / b >= target,
      rounds: outlast.map((s) => round(s.rate)),
      baselineRounds: dbos.map((s) => round(s.rate)),
      note: `statements per ${per} (median of the rounds, counted at node-postgres): Outlast ${round(median(outlast.map((s) => s.statementsPerUnit)), 2)}, DBOS ${round(median(dbos.map((s) => s.statementsPerUnit)), 2)}`,
    };
  });
}
