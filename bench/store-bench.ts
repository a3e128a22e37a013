/**
 * Child process, one measurement round of durable creations, in a fresh database file each time.
 *   argv[2] = JSON { mode, db, seconds, inflight, maxCount }
 * modes:
 *   raw       better-sqlite3, WAL + synchronous=FULL, one INSERT autocommit per row into Outlast's own tasks
 *             table (same schema, indexes and trigger), back to back on one connection. The baseline.
 *   park      Outlast in-process: runtime.call() of a policy 'always' tool whose handler parks until the
 *             measurement ends; `inflight` calls at once. Counts CreateTaskResults (each acked after its commit).
 *   complete  same, but the handler returns at once: each task is created, run and finished (terminal write).
 *             Counts tasks that reached 'completed' in the store, and reports creations separately.
 * Sends {type:'result', count, seconds, rate, ...}.
 */
import Database from 'better-sqlite3';
import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { Outlast } from '../src/server/outlast.js';
import { SqliteTaskStore } from '../src/store/sqlite/index.js';
import { MIGRATIONS } from '../src/store/sqlite/schema.js';
import { TASKS, childFail, exitWithParent, installMeterProvider } from './common.js';

interface Cfg {
  mode: 'raw' | 'park' | 'complete';
  db: string;
  seconds: number;
  inflight: number;
  maxCount: number;
  /** (m): operations (metrics SDK + history) on or off; absent: the defaults. */
  ops?: 'on' | 'off';
}
const cfg = JSON.parse(process.argv[2]!) as Cfg;

function raw() {
  const db = new Database(cfg.db);
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = FULL');
  db.exec(MIGRATIONS.map((m) => m.sql).join('\n'));
  const caps = JSON.stringify({ extensions: { [TASKS]: {} } });
  const ins = db.prepare(`INSERT INTO tasks (task_id, principal, tool, args, status, status_message, created_at, updated_at,
      ttl_ms, expires_at, input_since, poll_interval_ms, owner, retry_safe, idem_key, request_hash, client_capabilities)
    VALUES (?, 'bench', 'park', '{}', 'working', NULL, ?, ?, 86400000, ?, NULL, 500, 'replica', 0, NULL, NULL, ?)`);
  const start = performance.now();
  const deadline = start + cfg.seconds * 1000;
  let n = 0;
  while (n < cfg.maxCount && performance.now() < deadline) {
    const now = Date.now();
    ins.run(randomBytes(16).toString('base64url'), now, now, now + 86_400_000, caps);
    n++;
  }
  const seconds = (performance.now() - start) / 1000;
  const sync = db.pragma('synchronous', { simple: true });
  const jm = db.pragma('journal_mode', { simple: true });
  db.close();
  return { count: n, seconds, rate: n / seconds, synchronous: sync, journalMode: jm };
}

async function outlast(mode: 'park' | 'complete') {
  // (m): 'on' = an OpenTelemetry SDK meter provider registered and the history triggers on; 'off' = neither.
  if (cfg.ops === 'on') await installMeterProvider();
  const store = new SqliteTaskStore(cfg.db, { durability: 'full', ...(cfg.ops ? { history: cfg.ops === 'on' } : {}) });
  // Every handler made here stays running (one principal): its running share is sized for that (bounds still checked).
  const o = new Outlast({ store, pollLimit: false, maxRunningPerPrincipal: 1_000_000, ...(cfg.ops === 'off' ? { telemetry: false } : {}) });
  const ok = { content: [{ type: 'text' as const, text: 'ok' }] };
  o.tool('park', { policy: 'always', retrySafe: true }, (_a, ctx) => new Promise<never>((_, rej) => ctx.signal.addEventListener('abort', () => rej(ctx.signal.reason), { once: true })));
  o.tool('quick', { policy: 'always' }, async () => ok);
  await o.start();
  const cc = { principal: 'bench', clientCapabilities: { extensions: { [TASKS]: {} } }, tasksDeclared: true };
  const tool = mode === 'park' ? 'park' : 'quick';
  // Warm-up (JIT, statement cache): 0.5 s of the same load, not counted.
  let warm = 0;
  const warmUntil = performance.now() + 500;
  await Promise.all(
    Array.from({ length: cfg.inflight }, async () => {
      while (performance.now() < warmUntil) {
        await o.runtime.call(tool, {}, cc);
        warm++;
      }
    }),
  );
  if (mode === 'complete') while (o.runtime.executions.size > 0 || o.runtime.running.size > 0) await new Promise((r) => setImmediate(r));

  const start = performance.now();
  const deadline = start + cfg.seconds * 1000;
  let created = 0;
  let bad = 0;
  const worker = async () => {
    while (created < cfg.maxCount && performance.now() < deadline) {
      const r = await o.runtime.call(tool, {}, cc);
      if (r.kind !== 'task') bad++;
      else created++;
    }
  };
  await Promise.all(Array.from({ length: cfg.inflight }, worker));
  const createdAt = performance.now();
  let drained = createdAt;
  let completed = 0;
  if (mode === 'complete') {
    // Wait for every handler to settle and its terminal write to commit.
    while (o.runtime.executions.size > 0 || o.runtime.running.size > 0) await new Promise((r) => setImmediate(r));
    await new Promise((r) => setImmediate(r));
    drained = performance.now();
    const db = new Database(cfg.db, { readonly: true });
    completed = (db.prepare(`SELECT count(*) AS n FROM tasks WHERE status = 'completed'`).get() as { n: number }).n - warm;
    db.close();
  }
  const seconds = (createdAt - start) / 1000;
  const parkedAtEnd = o.runtime.executions.size;
  const t0 = performance.now();
  await o.stop();
  const stopMs = performance.now() - t0;
  if (bad) throw new Error(`${bad} calls did not return a task`);
  if (mode === 'park') return { count: created, seconds, rate: created / seconds, parkedAtEnd, stopMs };
  const lifeSeconds = (drained - start) / 1000;
  return { count: completed, created, seconds: lifeSeconds, rate: completed / lifeSeconds, createRate: created / seconds, drainMs: drained - createdAt, stopMs };
}

exitWithParent();
(async () => {
  const r = cfg.mode === 'raw' ? raw() : await outlast(cfg.mode);
  process.send!({ type: 'result', mode: cfg.mode, ...r }, () => process.exit(0));
})().catch(childFail);
