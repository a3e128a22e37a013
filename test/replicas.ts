/** Several `outlast serve` replicas sharing one PostgreSQL schema, plus a round-robin front over them. */
import { join } from 'node:path';
import { after, before } from 'node:test';
import { existsSync, readFileSync } from 'node:fs';
import assert from 'node:assert/strict';
import { ROOT, callTool, freshSchema, pgStoreUrl, sleep, startServer, startTogether, tempDir, type ServerProcess } from './helpers.js';
import { startRoundRobin, type RoundRobin } from '../fixtures/round-robin.js';

export const REPLICA_MODULE = join(ROOT, 'dist', 'test', 'replica-module.js');

export interface Cluster {
  replicas: ServerProcess[];
  front: RoundRobin;
  storeUrl: string;
  runLog: string;
  /** Handler starts recorded by the replica module. */
  runs(): Array<{ tool: string; key: string; pid: number; attempt: number }>;
  /** Starts one more replica on the same store. */
  add(): Promise<ServerProcess>;
  stop(): Promise<void>;
}

export async function startCluster(n: number, args: string[] = [], opts: { module?: string; storeUrl?: string; env?: NodeJS.ProcessEnv; drain?: 'default' } = {}): Promise<Cluster> {
  const storeUrl = opts.storeUrl ?? pgStoreUrl(freshSchema('rep'));
  const runLog = join(tempDir(), 'runs.jsonl');
  const start = () =>
    startServer(['--store', storeUrl, ...args], { module: opts.module ?? REPLICA_MODULE, env: { OUTLAST_RUN_LOG: runLog, ...opts.env }, drain: opts.drain });
  // The first one applies the migrations; the others start together.
  const replicas = [await start()];
  replicas.push(...(await startTogether(Array.from({ length: n - 1 }, start), replicas)));
  const front = await startRoundRobin(replicas.map((r) => r.url));
  return {
    replicas,
    front,
    storeUrl,
    runLog,
    runs: () => (existsSync(runLog) ? readFileSync(runLog, 'utf8').trim().split('\n').filter(Boolean).map((l) => JSON.parse(l)) : []),
    async add() {
      const r = await start();
      replicas.push(r);
      return r;
    },
    async stop() {
      await front.close();
      await Promise.all(
        replicas.map(async (r) => {
          // A stopped (SIGSTOP) process must be continued to act on SIGTERM.
          try {
            process.kill(r.pid, 'SIGCONT');
          } catch {
            /* gone */
          }
          await r.stop('SIGTERM');
        }),
      );
    },
  };
}

/** A cluster started before the tests of the enclosing suite and stopped after them. */
export function useCluster(n: number, args: string[] = [], opts: { module?: string; storeUrl?: string } = {}): { readonly cluster: Cluster } {
  return useClusterFrom(() => startCluster(n, args, opts));
}

/** The same, started by `start` (called before the suite's tests, e.g. once a pooler it needs is up). */
export function useClusterFrom(start: () => Promise<Cluster>): { readonly cluster: Cluster } {
  let c: Cluster | undefined;
  before(async () => {
    c = await start();
  });
  after(async () => {
    await c?.stop();
  });
  return {
    get cluster() {
      return c!;
    },
  };
}

/** Calls `tool` on `url` and returns the id of the task it must have become. */
export async function created(url: string, tool: string, args: Record<string, unknown>): Promise<string> {
  const r = await callTool(url, tool, args);
  assert.equal(r.error, undefined, JSON.stringify(r.error));
  assert.equal(r.result.resultType, 'task');
  return r.result.taskId as string;
}

/** Waits until the run log shows `key` started `times` times. */
export async function started(runs: () => Array<{ key: string }>, key: string, times = 1, timeoutMs = 10_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (runs().filter((r) => r.key === key).length < times) {
    if (Date.now() > end) assert.fail(`${key} did not start ${times} time(s) in ${timeoutMs} ms`);
    await sleep(20);
  }
}
