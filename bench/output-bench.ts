/**
 * Child process, one side of one round of (aa): task output's cost, in-process (runtime.call), in a fresh SQLite file
 * or PostgreSQL schema each time.
 *   argv[2] = JSON { mode, backend, db?, url?, schema?, pool?, seconds, inflight, outputs?, kind?, tasks? }
 *   life   `inflight` callers, each calling a policy 'always' tool whose handler emits `outputs` text outputs (each
 *          awaited: durable before the next) and then completes; the side with `outputs: 0` is the same tool that
 *          emits none. Counts creations during `seconds` (each acked after its commit), then waits for every handler
 *          to finish and its completed write, and reports full life cycles per second over that whole time.
 *   ops    `tasks` running tasks, each a handler writing one change after another for `seconds`: `kind` 'output'
 *          (await ctx.output('line k')) or 'status' (await ctx.status('k')). Counts committed changes per second.
 * Sends {type:'result', rate, ...}.
 */
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { Outlast } from '../src/server/outlast.js';
import { PostgresTaskStore } from '../src/store/postgres/index.js';
import { SqliteTaskStore } from '../src/store/sqlite/index.js';
import { TASKS, childFail, exitWithParent } from './common.js';

interface Cfg {
  mode: 'life' | 'ops';
  backend: 'sqlite' | 'postgres';
  dir?: string;
  url?: string;
  schema?: string;
  pool?: number;
  seconds: number;
  inflight: number;
  outputs?: number;
  kind?: 'output' | 'status';
  tasks?: number;
}
const cfg = JSON.parse(process.argv[2]!) as Cfg;
const cc = { principal: 'bench', clientCapabilities: { extensions: { [TASKS]: {} } }, tasksDeclared: true };
const ok = { content: [{ type: 'text' as const, text: 'ok' }] };
const settle = async (o: Outlast) => {
  while (o.runtime.executions.size > 0 || o.runtime.running.size > 0) await new Promise((r) => setImmediate(r));
  await new Promise((r) => setImmediate(r));
};

function make(): Outlast {
  const store = cfg.backend === 'sqlite'
    ? new SqliteTaskStore(join(cfg.dir!, 'output.db'), { durability: 'full' })
    : new PostgresTaskStore({ connection: { connectionString: cfg.url! }, schema: cfg.schema!, poolSize: cfg.pool ?? 4 });
  return new Outlast({ store, pollLimit: false, maxRunningPerPrincipal: 1_000_000 });
}

async function life() {
  const o = make();
  const n = cfg.outputs ?? 0;
  o.tool('emit', { policy: 'always' }, async (_a, ctx) => {
    for (let k = 1; k <= n; k++) await ctx.output(`line ${k}`);
    return ok;
  });
  await o.start();
  const run = async (ms: number) => {
    let created = 0;
    const until = performance.now() + ms;
    await Promise.all(Array.from({ length: cfg.inflight }, async () => {
      while (performance.now() < until) {
        const r = await o.runtime.call('emit', {}, cc);
        if (r.kind !== 'task') throw new Error(`a call returned ${r.kind}, not a task`);
        created++;
      }
    }));
    return created;
  };
  await run(500); // warm-up (JIT, statements), not counted
  await settle(o);
  const start = performance.now();
  const created = await run(cfg.seconds * 1000);
  const createdAt = performance.now();
  await settle(o);
  const drained = performance.now();
  await o.stop();
  return { created, createRate: created / ((createdAt - start) / 1000), rate: created / ((drained - start) / 1000), drainMs: drained - createdAt };
}

async function ops() {
  const o = make();
  const kind = cfg.kind!;
  let stop = false;
  let warm = true;
  let count = 0;
  o.tool('writer', { policy: 'always' }, async (_a, ctx) => {
    for (let k = 1; !stop; k++) {
      if (kind === 'output') await ctx.output(`line ${k}`);
      else await ctx.status(`${k}`);
      if (!warm) count++;
    }
    return ok;
  });
  await o.start();
  for (let i = 0; i < (cfg.tasks ?? 1); i++) {
    const r = await o.runtime.call('writer', {}, cc);
    if (r.kind !== 'task') throw new Error(`a call returned ${r.kind}, not a task`);
  }
  await new Promise((r) => setTimeout(r, 500)); // warm-up, not counted
  warm = false;
  const start = performance.now();
  await new Promise((r) => setTimeout(r, cfg.seconds * 1000));
  const n = count;
  const seconds = (performance.now() - start) / 1000;
  stop = true;
  await settle(o);
  await o.stop();
  return { count: n, rate: n / seconds };
}

exitWithParent();
(async () => {
  const r = cfg.mode === 'life' ? await life() : await ops();
  process.send!({ type: 'result', ...r }, () => process.exit(0));
})().catch(childFail);
