/**
 * (l) The dashboard at scale: p99 of its pages (the overview with counts by state, the task list unfiltered and
 * filtered by state, tool and unread failures) with 1,000,000 stored tasks vs 1,000, each side served by
 * `outlast dashboard --store URL` over HTTP, alternating rounds. SQLite (l) and PostgreSQL (l.pg). (l.tools): the
 * Tools page alone (per-tool durations of the last hour), whose read is bounded by its cap, not by the store.
 */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import pg from 'pg';
import { SqliteTaskStore } from '../src/store/sqlite/index.js';
import { migratedSchema } from './cluster.js';
import { ROOT, median, percentile, removeTempDir, round, tempDir, trackProcess, type BenchRow } from './common.js';

export interface DashboardScaleOptions {
  small: number;
  big: number;
  rounds: number;
  seconds: number;
  concurrency: number;
  pgUrl: string;
  backends: Array<'sqlite' | 'postgres'>;
}

const TOOLS_PAGES = ['/dashboard/tools'];
const PAGES = ['/dashboard', '/dashboard/tasks', '/dashboard/tasks?status=failed', '/dashboard/tasks?tool=t5', '/dashboard/tasks?unread=1', '/dashboard/tasks?status=working&tool=t3'];

/** The rows every filler writes: 1 in 10 failed (half of them read), 1 in 10 working, the rest completed; 7 tools. Dense
 *  enough that every page of the 1,000-task store is as full as the big one's (the ratio measures scale, not page size). */
const SQLITE_FILL = `WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ?)
  INSERT INTO tasks (task_id, principal, tool, args, status, status_message, created_at, updated_at, ttl_ms, expires_at, poll_interval_ms, error,
    owner, retrieved_at, client_capabilities)
  SELECT 'bench-' || i, 'p' || (i % 7), 't' || (i % 7), '{}', CASE WHEN i % 10 = 0 THEN 'failed' WHEN i % 10 = 1 THEN 'working' ELSE 'completed' END,
    'step ' || i, ? + i * 10, ? + i * 10, NULL, NULL, 500, CASE WHEN i % 10 = 0 THEN '{"code":-32603,"message":"disk full"}' END,
    'gone', CASE WHEN i % 20 = 0 THEN ? END, '{}'
  FROM s`;

export async function fillSqlite(path: string, n: number): Promise<void> {
  const store = new SqliteTaskStore(path);
  await store.init();
  await store.close();
  const db = new Database(path);
  const t0 = Date.now() - n * 10 - 60_000;
  db.transaction(() => db.prepare(SQLITE_FILL).run(n, t0, t0, Date.now()))();
  db.exec('ANALYZE');
  db.close();
}

export async function fillPostgres(url: string, schema: string, n: number): Promise<void> {
  const c = await migratedSchema(url, schema);
  try {
    const t0 = Date.now() - n * 10 - 60_000;
    for (let from = 1; from <= n; from += 250_000) {
      await c.query(
        `INSERT INTO tasks (task_id, principal, tool, args, status, status_message, created_at, updated_at, ttl_ms, expires_at, poll_interval_ms, error,
           owner, retrieved_at, client_capabilities)
         SELECT 'bench-' || i, 'p' || (i % 7), 't' || (i % 7), '{}'::jsonb, CASE WHEN i % 10 = 0 THEN 'failed' WHEN i % 10 = 1 THEN 'working' ELSE 'completed' END,
           'step ' || i, $3::bigint + i * 10, $3::bigint + i * 10, NULL, NULL, 500, CASE WHEN i % 10 = 0 THEN '{"code":-32603,"message":"disk full"}'::jsonb END,
           'gone', CASE WHEN i % 20 = 0 THEN $4::bigint END, '{}'::jsonb
         FROM generate_series($1::int, $2::int) AS i`,
        [from, Math.min(n, from + 249_999), t0, Date.now()],
      );
    }
    await c.query('VACUUM ANALYZE tasks');
  } finally {
    await c.end();
  }
}

/** `outlast dashboard --store URL --port 0`, registered for clean-up. */
async function dashboard(storeUrl: string): Promise<{ url: string; stop(): Promise<void> }> {
  const proc = spawn(process.execPath, [join(ROOT, 'bin', 'outlast.js'), 'dashboard', '--store', storeUrl, '--port', '0'], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  trackProcess(proc);
  let err = '';
  proc.stderr!.on('data', (d) => (err = (err + d).slice(-4000)));
  const exited = new Promise<void>((r) => proc.once('exit', () => r()));
  const url = await new Promise<string>((res, rej) => {
    let out = '';
    const t = setTimeout(() => rej(new Error(`outlast dashboard did not start:\n${err}`)), 30_000);
    proc.stdout!.on('data', (d) => {
      out += d;
      const m = /outlast dashboard on (\S+)\/dashboard/.exec(out);
      if (m) {
        clearTimeout(t);
        res(m[1]!);
      }
    });
    proc.once('exit', (code) => rej(new Error(`outlast dashboard exited (${code}):\n${err}`)));
  });
  return {
    url,
    async stop() {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGTERM');
      await exited;
    },
  };
}

/** A closed loop of GETs over the pages for `seconds`: latencies in ms. */
async function load(base: string, seconds: number, concurrency: number, pages = PAGES): Promise<number[]> {
  const lat: number[] = [];
  const until = performance.now() + seconds * 1000;
  let k = 0;
  await Promise.all(Array.from({ length: concurrency }, async () => {
    while (performance.now() < until) {
      const page = pages[k++ % pages.length]!;
      const t = performance.now();
      const res = await fetch(base + page);
      const body = await res.text();
      if (res.status !== 200 || !body.includes('id="live"')) throw new Error(`GET ${page}: ${res.status} ${body.slice(0, 200)}`);
      lat.push(performance.now() - t);
    }
  }));
  return lat;
}

export async function dashboardScale(o: DashboardScaleOptions, log: (m: string) => void): Promise<BenchRow[]> {
  const rows: BenchRow[] = [];
  for (const backend of o.backends) {
    const dir = tempDir('dash');
    const schemas = { small: `bench_dash_s_${process.pid}`, big: `bench_dash_b_${process.pid}` };
    const urls = backend === 'sqlite'
      ? { small: `sqlite:${join(dir, 'small.db')}`, big: `sqlite:${join(dir, 'big.db')}` }
      : { small: `${o.pgUrl}?schema=${schemas.small}`, big: `${o.pgUrl}?schema=${schemas.big}` };
    const servers: Array<{ stop(): Promise<void> }> = [];
    try {
      const t0 = Date.now();
      if (backend === 'sqlite') {
        await fillSqlite(join(dir, 'small.db'), o.small);
        await fillSqlite(join(dir, 'big.db'), o.big);
      } else {
        await fillPostgres(o.pgUrl, schemas.small, o.small);
        await fillPostgres(o.pgUrl, schemas.big, o.big);
      }
      log(`(l${backend === 'sqlite' ? '' : '.pg'}) filled ${o.small.toLocaleString('en-US')} and ${o.big.toLocaleString('en-US')} tasks in ${Math.round((Date.now() - t0) / 1000)} s`);
      const small = await dashboard(urls.small);
      const big = await dashboard(urls.big);
      servers.push(small, big);
      await load(small.url, 1, o.concurrency);
      await load(big.url, 1, o.concurrency);
      const suffix = backend === 'sqlite' ? '' : '.pg';
      for (const [id, pages, what] of [
        [`l${suffix}`, PAGES, 'dashboard pages (overview with counts; task list unfiltered and by state, tool, unread)'],
        [`l.tools${suffix}`, TOOLS_PAGES, 'the Tools page (per-tool durations of the last hour, at most 2,000 finishes read)'],
      ] as const) {
        const p99 = { small: [] as number[], big: [] as number[] };
        const p50 = { small: [] as number[], big: [] as number[] };
        for (let r = 0; r < o.rounds; r++) {
          const order = r % 2 ? (['big', 'small'] as const) : (['small', 'big'] as const);
          const line: string[] = [];
          for (const side of order) {
            const lat = (await load(side === 'small' ? small.url : big.url, o.seconds, o.concurrency, pages)).sort((a, b) => a - b);
            p99[side].push(percentile(lat, 99));
            p50[side].push(percentile(lat, 50));
            line.push(`${side} p99 ${percentile(lat, 99).toFixed(2)} ms (n ${lat.length})`);
          }
          log(`  (${id}) round ${r + 1}/${o.rounds}: ${line.join(' | ')}`);
        }
        const ratio = median(p99.big) / median(p99.small);
        rows.push({
          id,
          what: `${what} p99 over HTTP, ${o.big.toLocaleString('en-US')} tasks stored (${backend})`,
          figure: round(median(p99.big), 2),
          unit: 'ms p99',
          baselineWhat: `the same with ${o.small.toLocaleString('en-US')} tasks stored`,
          baseline: round(median(p99.small), 2),
          ratio: round(ratio, 3),
          target: 'ratio <= 2',
          pass: ratio <= 2,
          rounds: p99.big.map((x) => round(x, 2)),
          baselineRounds: p99.small.map((x) => round(x, 2)),
          note: `p50 ${round(median(p50.big), 2)} vs ${round(median(p50.small), 2)} ms; concurrency ${o.concurrency}`,
        });
      }
    } finally {
      for (const s of servers) await s.stop();
      removeTempDir(dir);
      if (backend === 'postgres') {
        const c = new pg.Client({ connectionString: o.pgUrl });
        await c.connect();
        for (const s of Object.values(schemas)) await c.query(`DROP SCHEMA IF EXISTS "${s}" CASCADE`);
        await c.end();
      }
    }
  }
  return rows;
}
