/**
 * Child process (run with --expose-gc): resident memory growth of an Outlast server after finished tasks.
 *   argv[2] = JSON { db, warmup, tasks, inflight }
 * Each task goes through Outlast in-process the way a client drives it: tools/call of a policy 'always' tool
 * (runtime.call), the handler returns at once, the task is completed in the store, and one tasks/get reads the
 * outcome (runtime.getTask, which also marks it retrieved and feeds the poll governor, left at its defaults).
 * RSS and heapUsed are taken after global.gc() once `warmup` tasks are done, and again after `tasks` more.
 */
import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { Outlast } from '../src/server/outlast.js';
import { SqliteTaskStore } from '../src/store/sqlite/index.js';
import { TASKS, childFail, exitWithParent } from './common.js';

const cfg = JSON.parse(process.argv[2]!) as { db: string; warmup: number; tasks: number; inflight: number };
const gc = (globalThis as { gc?: () => void }).gc;

/** RSS by mapping from /proc/self/smaps (Linux only): anonymous, [heap] (malloc), the SQLite -shm, other files. */
function rssByMapping(): Record<string, number> {
  const out: Record<string, number> = {};
  let text: string;
  try {
    text = readFileSync('/proc/self/smaps', 'utf8');
  } catch {
    return out;
  }
  let name = '';
  for (const line of text.split('\n')) {
    const head = /^[0-9a-f]+-[0-9a-f]+\s+\S+\s+\S+\s+\S+\s+\d+\s*(.*)$/.exec(line);
    if (head) {
      const path = head[1]!.trim();
      name = path === '' ? 'anonymous' : path.startsWith('[') ? path : path.endsWith('-shm') ? 'sqlite -shm' : path.endsWith('.node') ? 'native addons' : 'other files';
      continue;
    }
    const m = /^Rss:\s+(\d+) kB/.exec(line);
    if (m) out[name] = (out[name] ?? 0) + Number(m[1]) * 1024;
  }
  return out;
}

async function settle(o: Outlast): Promise<void> {
  while (o.runtime.executions.size > 0 || o.runtime.running.size > 0) await new Promise((r) => setImmediate(r));
  await new Promise((r) => setImmediate(r));
}

async function fullGc(): Promise<void> {
  for (let i = 0; i < 4; i++) {
    gc!();
    await new Promise((r) => setTimeout(r, 20));
  }
}

async function main(): Promise<void> {
  exitWithParent();
  if (!gc) throw new Error('memory: run node with --expose-gc');
  const o = new Outlast({ store: new SqliteTaskStore(cfg.db, { durability: 'full' }) });
  o.tool('quick', { policy: 'always' }, async () => ({ content: [{ type: 'text' as const, text: 'ok' }] }));
  await o.start();
  const cc = { principal: 'bench', clientCapabilities: { extensions: { [TASKS]: {} } }, tasksDeclared: true };

  const batch = async (n: number) => {
    let next = 0;
    const ids: string[] = [];
    const worker = async () => {
      while (next < n) {
        next++;
        const r = await o.runtime.call('quick', {}, cc);
        if (r.kind !== 'task') throw new Error('expected a task');
        ids.push(r.task.taskId);
      }
    };
    await Promise.all(Array.from({ length: cfg.inflight }, worker));
    await settle(o);
    let completed = 0;
    for (const id of ids) {
      const t = await o.runtime.getTask(id, 'bench');
      if (t.status === 'completed') completed++;
    }
    await settle(o);
    if (completed !== n) throw new Error(`memory: ${completed} of ${n} tasks completed`);
  };

  await batch(cfg.warmup);
  await fullGc();
  const before = process.memoryUsage();
  const mapsBefore = rssByMapping();
  const t0 = performance.now();
  await batch(cfg.tasks);
  const seconds = (performance.now() - t0) / 1000;
  await fullGc();
  const after = process.memoryUsage();
  const mapsAfter = rssByMapping();
  const result = {
    type: 'result',
    tasks: cfg.tasks,
    seconds,
    rssBefore: before.rss,
    rssAfter: after.rss,
    heapBefore: before.heapUsed,
    heapAfter: after.heapUsed,
    externalBefore: before.external,
    externalAfter: after.external,
    executions: o.runtime.executions.size,
    running: o.runtime.running.size,
    pollBuckets: o.runtime.governor?.size ?? 0,
    rssByMapping: Object.fromEntries(Object.keys({ ...mapsBefore, ...mapsAfter }).map((k) => [k, { before: mapsBefore[k] ?? 0, after: mapsAfter[k] ?? 0 }])),
  };
  await o.stop();
  process.send!(result, () => process.exit(0));
}

main().catch(childFail);
