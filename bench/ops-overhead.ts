/**
 * (m) What operations cost the hot path: durable task creations/s in-process (runtime.call of a parked 'always'
 * tool, as (b) and (f)) with metrics (an OpenTelemetry SDK meter provider registered, the runtime's instruments
 * recording) and the transition history (triggers) on, vs both off, alternating rounds, a fresh store each round.
 * SQLite (m) and PostgreSQL (m.pg).
 */
import { join } from 'node:path';
import pg from 'pg';
import { Child, median, removeTempDir, round, tempDir, type BenchRow } from './common.js';

export interface OpsOverheadOptions {
  rounds: number;
  seconds: number;
  inflight: number;
  pool: number;
  maxCount: number;
  pgUrl: string;
  backends: Array<'sqlite' | 'postgres'>;
}

export async function opsOverhead(o: OpsOverheadOptions, log: (m: string) => void): Promise<BenchRow[]> {
  const rows: BenchRow[] = [];
  for (const backend of o.backends) {
    const rates = { on: [] as number[], off: [] as number[] };
    const dir = tempDir('ops');
    try {
      log(`(m${backend === 'sqlite' ? '' : '.pg'}) ${o.rounds} rounds x {ops on, ops off} x ${o.seconds}s, ${o.inflight} in flight`);
      for (let r = 0; r < o.rounds; r++) {
        const order = r % 2 ? (['off', 'on'] as const) : (['on', 'off'] as const);
        const line: string[] = [];
        for (const ops of order) {
          const tag = `${ops}-${r}`;
          const schema = `bench_ops_${process.pid}_${ops}_${r}`;
          const child = backend === 'sqlite'
            ? new Child('store-bench.js', [JSON.stringify({ mode: 'park', db: join(dir, `${tag}.db`), seconds: o.seconds, inflight: o.inflight, maxCount: o.maxCount, ops })])
            : new Child('pg-store-bench.js', [JSON.stringify({ mode: 'park', url: o.pgUrl, schema, seconds: o.seconds, inflight: o.inflight, pool: o.pool, maxCount: o.maxCount, ops })]);
          try {
            const res = await child.next<{ rate: number }>('result', o.seconds * 1000 + 120_000);
            rates[ops].push(res.rate);
            line.push(`${ops} ${Math.round(res.rate)}/s`);
          } finally {
            await child.exit(30_000);
            if (backend === 'postgres') await dropSchema(o.pgUrl, schema);
          }
        }
        log(`  round ${r + 1}/${o.rounds}: ${line.join(' | ')}`);
      }
    } finally {
      removeTempDir(dir);
    }
    const ratio = median(rates.on) / median(rates.off);
    rows.push({
      id: backend === 'sqlite' ? 'm' : 'm.pg',
      what: `durable task creations/s in-process (${backend}), metrics SDK recording and transition history on`,
      figure: round(median(rates.on)),
      unit: '/s',
      baselineWhat: 'the same with metrics (telemetry: false) and history (history: false) off',
      baseline: round(median(rates.off)),
      ratio: round(ratio, 3),
      target: 'ratio >= 0.9',
      pass: ratio >= 0.9,
      rounds: rates.on.map((x) => round(x)),
      baselineRounds: rates.off.map((x) => round(x)),
    });
  }
  return rows;
}

/** Drops a bench's schema (a fresh one per round). */
export async function dropSchema(url: string, schema: string): Promise<void> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    await c.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  } finally {
    await c.end();
  }
}
