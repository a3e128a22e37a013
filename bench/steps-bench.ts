/**
 * Child process, one side of one round of (n): commits per second, one after another, on a store, in a fresh file or
 * schema.
 *   argv[2] = JSON { mode, backend, path?, url?, schema?, seconds, runs? }
 *   raw        the baseline: single-row INSERT commits into the store's own task_steps table, one at a time (SQLite:
 *              better-sqlite3 autocommits on a WAL file with synchronous=FULL, as the store opens it; PostgreSQL: one
 *              `pg` connection, autocommit statements).
 *   steps      one handler of a durable tool running ctx.step after ctx.step (each not idempotent: a `started` row
 *              before its function, then the completed one: two fenced commits per step) through a TaskRuntime.
 *   idempotent the same with idempotent steps (one fenced commit per step).
 *   parallel   `runs` handlers of `steps` at once (separate tasks, as on a busy server), each ctx.step after ctx.step, not
 *              idempotent: what grouping the commits of steps that run together buys.
 * Each side counts for `seconds` after a warm-up of 1 s and at least 50 commits (parallel: 1 s and every run's first 50
 * steps), so that both are measured warm: their code compiled, and the new file's WAL grown to the size it is reused at
 * (until the first checkpoint every commit appends to it, and fdatasync also commits the file's new size). Sends
 * {type:'result', rate} (steps or rows per second, all runs together).
 */
import Database from 'better-sqlite3';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { TaskRuntime } from '../src/runtime/runtime.js';
import { PostgresTaskStore } from '../src/store/postgres/index.js';
import { SqliteTaskStore } from '../src/store/sqlite/index.js';
import type { TaskStore } from '../src/store/types.js';
import { childFail, exitWithParent } from './common.js';

interface Cfg {
  mode: 'raw' | 'steps' | 'idempotent' | 'parallel';
  backend: 'sqlite' | 'postgres';
  dir?: string;
  url?: string;
  schema?: string;
  seconds: number;
  /** Handlers stepping at once (parallel). */
  runs?: number;
}
const cfg = JSON.parse(process.argv[2]!) as Cfg;
const WARMUP = 50;
const WARMUP_MS = 1000;

function store(): TaskStore {
  return cfg.backend === 'sqlite'
    ? new SqliteTaskStore(join(cfg.dir!, 'steps.db'))
    : new PostgresTaskStore({ connection: { connectionString: cfg.url! }, schema: cfg.schema!, poolSize: 4 });
}

/** Runs `commit` one after another: the warm-up first, then for cfg.seconds; returns commits per second. */
async function measure(commit: (i: number) => Promise<unknown> | unknown): Promise<number> {
  let i = 0;
  const began = performance.now();
  for (; i < WARMUP || performance.now() - began < WARMUP_MS; i++) await commit(i);
  const t0 = performance.now();
  let n = 0;
  while (performance.now() - t0 < cfg.seconds * 1000) {
    await commit(i++);
    n++;
  }
  return n / ((performance.now() - t0) / 1000);
}

const ROW = ['t-1', 1, 'k', 'k', 'step', 1, 'completed', 1, 0, '{"n":1}', null, 7, 0, 0];

async function raw(): Promise<number> {
  const s = store();
  await s.init(); // the same table, created by the store's migrations
  await s.close();
  if (cfg.backend === 'sqlite') {
    const db = new Database(join(cfg.dir!, 'steps.db'));
    db.pragma('journal_mode = WAL');
    db.pragma('synchronous = FULL');
    const insert = db.prepare(`INSERT INTO task_steps (task_id, epoch, step_key, name, kind, seq, state, tries, idempotent, result, error, bytes, started_at, finished_at)
      VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`);
    try {
      return await measure((i) => insert.run(...ROW.map((v, c) => (c === 2 ? `k#${i}` : v))));
    } finally {
      db.close();
    }
  }
  const client = new pg.Client({ connectionString: cfg.url, options: `-c search_path=${cfg.schema}` });
  await client.connect();
  try {
    const text = `INSERT INTO task_steps (task_id, epoch, step_key, name, kind, seq, state, tries, idempotent, result, error, bytes, started_at, finished_at)
      VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)`;
    return await measure((i) => client.query({ name: 'raw_step', text, values: ROW.map((v, c) => (c === 2 ? `k#${i}` : c === 8 ? false : v)) }));
  } finally {
    await client.end();
  }
}

async function steps(idempotent: boolean): Promise<number> {
  const rt = new TaskRuntime({ store: store(), pollLimit: false });
  let report!: (rate: number) => void;
  const rate = new Promise<number>((r) => (report = r));
  rt.defineTool('loop', {
    policy: 'always',
    durable: true,
    handler: async (_a, ctx) => {
      report(await measure((i) => ctx.step('s', () => i, { idempotent })));
      return { content: [] };
    },
  });
  await rt.start();
  try {
    await rt.call('loop', {}, { principal: 'bench', clientCapabilities: {}, tasksDeclared: true });
    return await rate;
  } finally {
    await rt.stop(1000);
  }
}

/** `runs` handlers stepping at once: steps counted from when every run has warmed up until `seconds` later. */
async function parallel(): Promise<number> {
  const RUNS = cfg.runs ?? 16;
  const rt = new TaskRuntime({ store: store(), pollLimit: false });
  let warm = 0;
  let counting = false;
  let stop = false;
  let n = 0;
  let ended = 0;
  let allWarm!: () => void;
  let allEnded!: () => void;
  const warmed = new Promise<void>((r) => (allWarm = r));
  const done = new Promise<void>((r) => (allEnded = r));
  rt.defineTool('loop', {
    policy: 'always',
    durable: true,
    handler: async (_a, ctx) => {
      for (let i = 0; !stop; i++) {
        await ctx.step('s', () => i);
        if (counting) n++;
        if (i === WARMUP - 1 && ++warm === RUNS) allWarm();
      }
      if (++ended === RUNS) allEnded();
      return { content: [] };
    },
  });
  await rt.start();
  try {
    const began = performance.now();
    await Promise.all(Array.from({ length: RUNS }, () => rt.call('loop', {}, { principal: 'bench', clientCapabilities: {}, tasksDeclared: true })));
    await warmed;
    await new Promise((r) => setTimeout(r, Math.max(0, WARMUP_MS - (performance.now() - began))));
    counting = true;
    const t0 = performance.now();
    await new Promise((r) => setTimeout(r, cfg.seconds * 1000));
    const rate = n / ((performance.now() - t0) / 1000);
    stop = true;
    await done;
    return rate;
  } finally {
    await rt.stop(1000);
  }
}

exitWithParent();
(async () => {
  const rate = cfg.mode === 'raw' ? await raw() : cfg.mode === 'parallel' ? await parallel() : await steps(cfg.mode === 'idempotent');
  process.send!({ type: 'result', rate }, () => process.exit(0));
})().catch(childFail);
