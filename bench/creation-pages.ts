/**
 * What one durable creation costs the SQLite store itself, without HTTP or the runtime: `SqliteTaskStore.create` of
 * tasks whose run has already ended (written finished in their INSERT, as a quick tool's are), `--per-turn` of them
 * in each event-loop turn so that they share a commit, in a fresh file. Prints WAL pages per commit (checkpoints off,
 * so every page written is still in the WAL to count) and wall and CPU time per creation (checkpoints on, as served).
 *   node dist/bench/creation-pages.js [--creations N] [--per-turn B]     (defaults 20,000 and 8)
 * Run it in two checkouts, alternating, to compare builds (bench/README.md, issue 43).
 */
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { newTaskId } from '../src/runtime/ids.js';
import { SqliteTaskStore } from '../src/store/sqlite/index.js';
import type { NewTask } from '../src/store/types.js';

const { values } = parseArgs({ options: { creations: { type: 'string', default: '20000' }, 'per-turn': { type: 'string', default: '8' } } });
const N = Number(values.creations);
const B = Number(values['per-turn']);
if (!Number.isInteger(N) || !Number.isInteger(B) || N < B || B < 1) throw new Error('--creations and --per-turn take whole numbers, creations >= per-turn >= 1');

const finished = (): NewTask => ({
  taskId: newTaskId(), principal: 'anonymous', tool: 'quick', args: {}, createdAt: Date.now(), ttlMs: 3_600_000, pollIntervalMs: 1000,
  owner: 'replica-1', retrySafe: false, clientCapabilities: { tasks: {} }, origin: 'legacy',
  endedBy: () => ({ outcome: { status: 'completed', result: { content: [{ type: 'text', text: 'done' }] } }, statusMessage: null, at: Date.now() }),
});

async function measure(checkpoints: boolean): Promise<{ usWall: number; usCpu: number; pagesPerCommit?: number }> {
  const dir = mkdtempSync(join(tmpdir(), 'outlast-pages-'));
  const path = join(dir, 'tasks.db');
  const store = new SqliteTaskStore(path);
  await store.init();
  try {
    // The store's own connection: with checkpoints off, the WAL keeps every page each commit wrote.
    if (!checkpoints) (store as unknown as { db: { pragma(s: string): unknown } }).db.pragma('wal_autocheckpoint = 0');
    const walBefore = statSync(`${path}-wal`).size;
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    for (let i = 0; i < N; i += B) await Promise.all(Array.from({ length: B }, () => store.create(finished())));
    const usWall = (1000 * (performance.now() - t0)) / N;
    const cpu = process.cpuUsage(cpu0);
    const frames = (statSync(`${path}-wal`).size - walBefore) / (4096 + 24);
    return { usWall, usCpu: (cpu.user + cpu.system) / N, ...(checkpoints ? {} : { pagesPerCommit: frames / (N / B) }) };
  } finally {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

const pages = await measure(false);
const served = await measure(true);
console.log(`${N} finished creations, ${B} per commit: ${pages.pagesPerCommit!.toFixed(1)} WAL pages per commit; ` +
  `${served.usWall.toFixed(0)} µs wall and ${served.usCpu.toFixed(0)} µs CPU per creation (checkpoints on)`);
