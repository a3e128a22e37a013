/**
 * Child process of (o.mem): what 1,000 parked tasks cost the process that parked them. A TaskRuntime on a SQLite file
 * (parkAfterMs 0) creates tasks of a durable tool that runs a step and asks a question; each one is parked (its handler
 * leaves memory). After a warm-up of `warmup` parked tasks and global.gc(), heap and RSS are read; then `tasks` more are
 * parked, gc again, read again. Sends {type:'result', heapMB, rssMB, baseHeapMB, baseRssMB}.
 */
import { join } from 'node:path';
import { TaskRuntime } from '../src/runtime/runtime.js';
import { SqliteTaskStore } from '../src/store/sqlite/index.js';
import { childFail, exitWithParent } from './common.js';

const cfg = JSON.parse(process.argv[2]!) as { dir: string; tasks: number; warmup: number };
const gc = (globalThis as { gc?: () => void }).gc;
const MB = 2 ** 20;

exitWithParent();
(async () => {
  if (!gc) throw new Error('run with --expose-gc (npm run bench does)');
  const rt = new TaskRuntime({ store: new SqliteTaskStore(join(cfg.dir, 'parked.db')), parkAfterMs: 0, pollLimit: false });
  rt.defineTool('held', {
    policy: 'always',
    durable: true,
    handler: async (_a, ctx) => {
      await ctx.step('prepare', () => ({ at: Date.now() }));
      const r = await ctx.elicit('Go?', { type: 'object', properties: { go: { type: 'boolean' } } }, { key: 'go', timeoutMs: 3_600_000 });
      return { content: [{ type: 'text', text: r.action }] };
    },
  });
  await rt.start();
  const call = { principal: 'bench', clientCapabilities: { elicitation: {} }, tasksDeclared: true };
  const park = async (n: number) => {
    for (let i = 0; i < n; i++) await rt.call('held', {}, call);
    while (rt.executions.size > 0) await new Promise((r) => setTimeout(r, 20));
  };
  await park(cfg.warmup);
  await new Promise((r) => setTimeout(r, 200));
  gc();
  const base = process.memoryUsage();
  await park(cfg.tasks);
  await new Promise((r) => setTimeout(r, 200));
  gc();
  const after = process.memoryUsage();
  const out = { heapMB: (after.heapUsed - base.heapUsed) / MB, rssMB: (after.rss - base.rss) / MB, baseHeapMB: base.heapUsed / MB, baseRssMB: base.rss / MB };
  await rt.stop(0);
  process.send!({ type: 'result', ...out }, () => process.exit(0));
})().catch(childFail);
