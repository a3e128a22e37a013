/**
 * Child process (run with --expose-gc): resident memory growth of an Outlast server after finished tasks.
 *   argv[2] = JSON { db, warmup, tasks, inflight }
 * Each task goes through Outlast in-process the way a client drives it: tools/call of a policy 'always' tool
 * (runtime.call), the handler returns at once, the task is completed in the store, and one tasks/get reads the
 * outcome (runtime.getTask, which also marks it retrieved and feeds the poll governor, left at its defaults).
 * RSS and heapUsed are taken after global.gc() once `warmup` tasks are done, again after `tasks` more, and again
 * after a second batch of `tasks` (to tell per-task growth from one-time sizing such as V8's young generation).
 */
import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { getHeapSpaceStatistics } from 'node:v8';
import { Outlast } from '../src/server/outlast.js';
import { SqliteTaskStore } from '../src/store/sqlite/index.js';
import { TASKS, childFail, exitWithParent } from './common.js';

/** pollLimit: false turns the poll governor off (default: Outlast's defaults, governor on). */
/** second: run a second batch of `tasks` (default true). */
const cfg = JSON.parse(process.argv[2]!) as { db: string; warmup: number; tasks: number; inflight: number; pollLimit?: boolean; second?: boolean };
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
  const o = new Outlast({ store: new SqliteTaskStore(cfg.db, { durability: 'full' }), ...(cfg.pollLimit === false ? { pollLimit: false as const } : {}) });
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

  const snap = (label: string, tasksSoFar: number) => {
    const mu = process.memoryUsage();
    const spaces = getHeapSpaceStatistics();
    return {
      label,
      tasks: tasksSoFar,
      rss: mu.rss,
      heapUsed: mu.heapUsed,
      heapTotal: mu.heapTotal,
      external: mu.external,
      /** V8 spaces: committed (physical) and used bytes. */
      heapSpaces: Object.fromEntries(spaces.map((x) => [x.space_name, { physical: x.physical_space_size, used: x.space_used_size }])),
      rssByMapping: rssByMapping(),
      pollBuckets: o.runtime.governor?.size ?? 0,
      executions: o.runtime.executions.size,
      running: o.runtime.running.size,
    };
  };

  await batch(cfg.warmup);
  await fullGc();
  const snaps = [snap('warm-up', cfg.warmup)];
  const t0 = performance.now();
  await batch(cfg.tasks);
  const seconds = (performance.now() - t0) / 1000;
  await fullGc();
  snaps.push(snap('first', cfg.warmup + cfg.tasks));
  // A further batch of the same size: growth that repeats is per-task; growth that does not is one-time sizing.
  if (cfg.second !== false) {
    await batch(cfg.tasks);
    await fullGc();
    snaps.push(snap('second', cfg.warmup + 2 * cfg.tasks));
  }
  const result = { type: 'result', tasks: cfg.tasks, seconds, rate: cfg.tasks / seconds, pollLimit: cfg.pollLimit !== false, snaps };
  await o.stop();
  process.send!(result, () => process.exit(0));
}

main().catch(childFail);
