/**
 * Child process, one measurement round of durable creations on PostgreSQL, in a fresh schema each time.
 *   argv[2] = JSON { mode, url, schema, seconds, inflight, pool, maxCount }
 * modes:
 *   raw   `pg`, a pool of `pool` connections, `inflight` single-row INSERT autocommits at once into Outlast's own
 *         tasks table (same schema, indexes and trigger). The baseline.
 *   park  Outlast in-process on PostgresTaskStore (same pool size): runtime.call() of a policy 'always' tool whose
 *         handler parks; `inflight` calls at once. Counts CreateTaskResults (each acked after its commit). The
 *         LISTEN/NOTIFY bus runs as in production (each creation publishes a change signal, coalesced); with `bus`
 *         (row af, the store through a transaction-mode pooler) on that bus. With `gets` (row af.get), then the same
 *         seconds of runtime.getTask (what tasks/get does: one read of the task, its view built) on the tasks just
 *         created, `inflight` at once, each a random one of them.
 * Sends {type:'result', count, seconds, rate, gets?: {count, seconds, rate}}.
 */
import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { Outlast } from '../src/server/outlast.js';
import { PostgresTaskStore } from '../src/store/postgres/index.js';
import { signalBusFromUrl } from '../src/store/bus-url.js';
import { TASKS, childFail, exitWithParent, installMeterProvider } from './common.js';

interface Cfg {
  mode: 'raw' | 'park';
  url: string;
  schema: string;
  seconds: number;
  inflight: number;
  pool: number;
  maxCount: number;
  /** (m): operations (metrics SDK + history) on or off; absent: the defaults. */
  ops?: 'on' | 'off';
  /** (af): the replicas' --bus (the store goes through a transaction-mode pooler); absent: the store's own LISTEN/NOTIFY. */
  bus?: string;
  /** (af.get): after the creations, time tasks/get on the tasks created. */
  gets?: boolean;
}
const cfg = JSON.parse(process.argv[2]!) as Cfg;

async function timed(work: () => Promise<unknown>): Promise<{ count: number; seconds: number; rate: number }> {
  // Warm-up (connections, prepared statements, JIT): 0.5 s of the same load, not counted.
  const warmUntil = performance.now() + 500;
  await Promise.all(Array.from({ length: cfg.inflight }, async () => {
    while (performance.now() < warmUntil) await work();
  }));
  const start = performance.now();
  const deadline = start + cfg.seconds * 1000;
  let n = 0;
  await Promise.all(Array.from({ length: cfg.inflight }, async () => {
    while (n < cfg.maxCount && performance.now() < deadline) {
      await work();
      n++;
    }
  }));
  const seconds = (performance.now() - start) / 1000;
  return { count: n, seconds, rate: n / seconds };
}

async function raw() {
  // The schema and its migrations come from the store (so the table, indexes and trigger are the same).
  const setup = new PostgresTaskStore({ connection: { connectionString: cfg.url }, schema: cfg.schema, poolSize: 1 });
  await setup.init();
  await setup.close();
  const pool = new pg.Pool({ connectionString: cfg.url, max: cfg.pool, options: `-c search_path=${cfg.schema}` });
  const caps = JSON.stringify({ extensions: { [TASKS]: {} } });
  const text = `INSERT INTO tasks (task_id, principal, tool, args, status, status_message, created_at, updated_at, ttl_ms, expires_at,
      input_since, poll_interval_ms, owner, retry_safe, idem_key, request_hash, client_capabilities)
    VALUES ($1, 'bench', 'park', '{}', 'working', NULL, $2, $2, 86400000, $3, NULL, 500, 'replica', false, NULL, NULL, $4)`;
  try {
    return await timed(async () => {
      const now = Date.now();
      await pool.query({ name: 'raw_insert', text, values: [randomBytes(16).toString('base64url'), now, now + 86_400_000, caps] });
    });
  } finally {
    await pool.end();
  }
}

async function park() {
  // (m): 'on' = an OpenTelemetry SDK meter provider registered and the history triggers on; 'off' = neither.
  if (cfg.ops === 'on') await installMeterProvider();
  const store = new PostgresTaskStore({ connection: { connectionString: cfg.url }, schema: cfg.schema, poolSize: cfg.pool, ...(cfg.ops ? { history: cfg.ops === 'on' } : {}) });
  // Every handler made here stays running (one principal, ~25,000 in a round): its running share is sized for that,
  // so the per-principal bounds are checked on every call as usual (queued and stored keep their defaults).
  const o = new Outlast({
    store, pollLimit: false, maxRunningPerPrincipal: 1_000_000, ...(cfg.ops === 'off' ? { telemetry: false } : {}),
    ...(cfg.bus ? { bus: signalBusFromUrl(cfg.bus, store) } : {}),
  });
  o.tool('park', { policy: 'always', retrySafe: true }, (_a, ctx) => new Promise<never>((_, rej) => ctx.signal.addEventListener('abort', () => rej(ctx.signal.reason), { once: true })));
  await o.start();
  const cc = { principal: 'bench', clientCapabilities: { extensions: { [TASKS]: {} } }, tasksDeclared: true };
  let bad = 0;
  const ids: string[] = [];
  const r = await timed(async () => {
    const out = await o.runtime.call('park', {}, cc);
    if (out.kind === 'task') ids.push(out.record.taskId);
    else bad++;
  });
  let gets: Awaited<ReturnType<typeof timed>> | undefined;
  if (cfg.gets) {
    gets = await timed(async () => {
      const t = await o.runtime.getTask(ids[Math.floor(Math.random() * ids.length)], 'bench');
      if (t.status !== 'working') bad++;
    });
  }
  // Leave the parked tasks for re-run (retry-safe) rather than failing each one at stop: the schema is dropped.
  await o.stop();
  if (bad) throw new Error(`${bad} calls did not return a task, or tasks/get did not read it working`);
  return { ...r, ...(gets ? { gets } : {}) };
}

exitWithParent();
(async () => {
  const r = cfg.mode === 'raw' ? await raw() : await park();
  process.send!({ type: 'result', mode: cfg.mode, ...r }, () => process.exit(0));
})().catch(childFail);
