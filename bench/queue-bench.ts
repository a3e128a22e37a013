/**
 * Child process, one round of (p): tasks started per second from a full run queue on PostgreSQL, in a fresh schema.
 *   argv[2] = JSON { mode, url, schema, tasks, principals, batch }
 * The queue is filled first (`tasks` queued rows of Outlast's own table, spread over `principals`), then drained:
 *   bare     one `pg` connection, a loop of the plain claim: UPDATE ... WHERE task_id = (SELECT ... ORDER BY queued_at
 *            LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING *, until it finds nothing. The baseline.
 *   outlast  a TaskRuntime on PostgresTaskStore (maxRunning above `tasks`, so capacity never binds): its run queue
 *            claims through outlast_claim (fairness between principals, limits, expiry and cancel checks) and starts
 *            each handler, which parks. Counts handler starts. `batch`: most tasks one claim takes (claimBatch; 1 for
 *            one task per statement, like the baseline).
 * Both drain from one process, one statement in flight. The rate is (starts - 1) / (last start - first start).
 * Sends {type:'result', count, seconds, rate}.
 */
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { Outlast } from '../src/server/outlast.js';
import { PostgresTaskStore } from '../src/store/postgres/index.js';
import { childFail, exitWithParent } from './common.js';

interface Cfg {
  mode: 'bare' | 'outlast';
  url: string;
  schema: string;
  tasks: number;
  principals: number;
  batch: number;
}
const cfg = JSON.parse(process.argv[2]!) as Cfg;

/** Fills the queue through the store (same rows, indexes and trigger for both sides). */
async function fill(store: PostgresTaskStore): Promise<void> {
  const base = Date.now();
  for (let i = 0; i < cfg.tasks; i += 500) {
    await Promise.all(
      Array.from({ length: Math.min(500, cfg.tasks - i) }, (_, j) => {
        const n = i + j;
        return store.create({
          taskId: `q-${String(n).padStart(7, '0')}-${Math.random().toString(36).slice(2, 10)}`,
          principal: `bench-${n % cfg.principals}`,
          tool: 'park',
          args: {},
          createdAt: base + n,
          ttlMs: 86_400_000,
          pollIntervalMs: 500,
          owner: null,
          queued: true,
          retrySafe: true,
          clientCapabilities: {},
        });
      }),
    );
  }
}

function result(starts: number[]): { count: number; seconds: number; rate: number } {
  const seconds = (starts[starts.length - 1]! - starts[0]!) / 1000;
  return { count: starts.length, seconds, rate: (starts.length - 1) / seconds };
}

async function bare() {
  const setup = new PostgresTaskStore({ connection: { connectionString: cfg.url }, schema: cfg.schema, poolSize: 4 });
  await setup.init();
  await fill(setup);
  await setup.close();
  const client = new pg.Client({ connectionString: cfg.url, options: `-c search_path=${cfg.schema}` });
  await client.connect();
  const text = `UPDATE tasks SET owner = $1, queued_at = NULL, status_message = NULL, updated_at = $2, version = version + 1
    WHERE task_id = (SELECT task_id FROM tasks WHERE queued_at IS NOT NULL ORDER BY queued_at, task_id LIMIT 1 FOR UPDATE SKIP LOCKED)
    RETURNING *`;
  const starts: number[] = [];
  try {
    for (;;) {
      const r = await client.query({ name: 'bare_claim', text, values: ['bare', Date.now()] });
      if (r.rowCount === 0) break;
      starts.push(performance.now());
    }
  } finally {
    await client.end();
  }
  return result(starts);
}

async function outlast() {
  const store = new PostgresTaskStore({ connection: { connectionString: cfg.url }, schema: cfg.schema, poolSize: 4 });
  await store.init();
  await fill(store);
  const starts: number[] = [];
  let all!: () => void;
  const done = new Promise<void>((res) => (all = res));
  // One principal's whole backlog runs at once: its per-principal share is the whole replica.
  const o = new Outlast({ store, pollLimit: false, maxRunning: cfg.tasks + 10, maxRunningPerPrincipal: cfg.tasks + 10, queuePollMs: 60_000, claimBatch: cfg.batch });
  o.tool('park', { policy: 'always', retrySafe: true }, (_a, ctx) => {
    starts.push(performance.now());
    if (starts.length === cfg.tasks) all();
    return new Promise<never>((_, rej) => ctx.signal.addEventListener('abort', () => rej(ctx.signal.reason), { once: true }));
  });
  await o.start(); // its queue wakes at start and drains
  await done;
  // Leave the parked tasks for re-run (retry-safe) rather than failing each one at stop: the schema is dropped.
  await o.stop();
  return result(starts);
}

exitWithParent();
(async () => {
  const r = cfg.mode === 'bare' ? await bare() : await outlast();
  process.send!({ type: 'result', mode: cfg.mode, ...r }, () => process.exit(0));
})().catch(childFail);
