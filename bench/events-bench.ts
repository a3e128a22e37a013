/**
 * Rows (z) and (z.load): MCP Events webhooks. (z): from a task's terminal commit (its `lastUpdatedAt`, the store's
 * write) to the webhook's arrival at a loopback receiver in a process of its own, p50/p99 over N tasks created across
 * two replicas on PostgreSQL, after a warm-up batch not counted. (z.load): task creations per second (each finishing
 * at once, so each is also a delivery to every subscription) with 100 matching subscriptions active vs none, same
 * store, same run.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { receiver } from './webhook-sink.js';
import { ROOT, latencyRow, median, round, send, serve, toolCall, trackProcess, wire, type BenchRow, type WireRequest } from './common.js';

const MODULE = join(ROOT, 'dist', 'test', 'events-module.js');

const authed = (r: WireRequest): WireRequest => ({ ...r, headers: { ...r.headers, authorization: 'Bearer bench-token' } });

async function subscribe(url: string, hook: string, args: Record<string, unknown> = {}) {
  const r = await send(url, authed(wire('events/subscribe', { name: 'outlast.task.finished', arguments: args, delivery: { mode: 'webhook', url: hook, secret: `whsec_${randomBytes(32).toString('base64')}` }, cursor: null })));
  if (!r.json?.result?.id) throw new Error(`subscribe failed: ${r.text}`);
}

/** The receiver of (z) in its own process (./webhook-sink.ts): `onEvent(taskId, ms)` per event as it arrives. */
async function sinkProcess(onEvent: (taskId: string, ms: number) => void) {
  const proc = spawn(process.execPath, [join(ROOT, 'dist', 'bench', 'webhook-sink.js')], { stdio: ['ignore', 'pipe', 'inherit'] });
  trackProcess(proc);
  const exited = new Promise<void>((r) => proc.once('exit', () => r()));
  let pending = '';
  const url = await new Promise<string>((resolve, reject) => {
    proc.once('exit', (code) => reject(new Error(`webhook-sink exited (${code})`)));
    proc.stdout!.on('data', (d) => {
      pending += d;
      let nl: number;
      while ((nl = pending.indexOf('\n')) >= 0) {
        const [first, second] = pending.slice(0, nl).split(' ');
        pending = pending.slice(nl + 1);
        if (first === 'listening') resolve(second!);
        else onEvent(first!, Number(second));
      }
    });
  });
  return {
    url,
    async close() {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGTERM');
      await exited;
    },
  };
}

const ARGS = (store: string) => ['--store', store, '--events', '--events-allow-host', '127.0.0.1', '--bearer', 'bench-token=bench', '--max-running', '1000'];

export async function eventsLatency(o: { tasks: number; warmup: number; pgUrl: string; schema: string; inflight: number }, log: (m: string) => void): Promise<BenchRow> {
  const store = `${o.pgUrl}?schema=${o.schema}`;
  const arrivals = new Map<string, number>();
  const rec = await sinkProcess((taskId, ms) => arrivals.set(taskId, ms));
  const a = await serve(MODULE, ARGS(store));
  const b = await serve(MODULE, ARGS(store));
  try {
    await subscribe(a.url, `${rec.url}/z`);
    // Tasks created `o.inflight` at a time, alternating replicas; resolves with their ids once each has arrived (or 2 min passed).
    const burst = async (from: number, count: number): Promise<string[]> => {
      let next = from;
      const ids: string[] = [];
      await Promise.all(Array.from({ length: o.inflight }, async () => {
        while (next < from + count) {
          const i = next++;
          const r = await send(i % 2 ? a.url : b.url, authed(toolCall('work', { key: String(i), ms: 0 })));
          const id = r.json?.result?.task?.taskId ?? r.json?.result?.taskId;
          if (id) ids.push(id);
        }
      }));
      const deadline = Date.now() + 120_000;
      while (ids.some((id) => !arrivals.has(id)) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
      return ids;
    };
    // Not counted: the first deliveries of fresh processes (JIT, the statements' first plans, the receiver's first
    // connections) took 100-500 ms each in a trace, which is start-up, not the path a webhook takes.
    await burst(0, o.warmup);
    const ids = await burst(o.warmup, o.tasks);
    const samples = ids.filter((id) => arrivals.has(id)).map((id) => arrivals.get(id)!);
    log(`(z) ${samples.length}/${ids.length} delivered`);
    return latencyRow('z', `terminal commit → webhook arrival (loopback receiver, its own process), ${o.tasks} tasks across two PG replicas, after ${o.warmup} not counted`, samples, 50, `${ids.length - samples.length} not delivered within 2 min`);
  } finally {
    await a.stop();
    await b.stop();
    await rec.close();
  }
}

export async function eventsLoad(o: { seconds: number; rounds: number; inflight: number; dir: string; matching: boolean }, log: (m: string) => void): Promise<BenchRow> {
  const rec = await receiver(() => undefined);
  const rate = async (subs: number, round: number) => {
    const s = await serve(MODULE, ARGS(`sqlite:${join(o.dir, `zload-${subs}-${round}.db`)}`));
    try {
      for (let i = 0; i < subs; i++) await subscribe(s.url, `${rec.url}/load/${i}`, o.matching ? {} : { tool: 'big' });
      let n = 0;
      const end = Date.now() + o.seconds * 1000;
      await Promise.all(Array.from({ length: o.inflight }, async () => {
        while (Date.now() < end) {
          const r = await send(s.url, authed(toolCall('work', { key: 'l', ms: 0 })));
          if (r.status === 200) n++;
        }
      }));
      return n / o.seconds;
    } finally {
      await s.stop();
    }
  };
  const base: number[] = [];
  const withSubs: number[] = [];
  try {
    for (let r = 0; r < o.rounds; r++) {
      base.push(await rate(0, r));
      withSubs.push(await rate(100, r));
      log(`(z.load${o.matching ? '.fanout' : ''}) round ${r + 1}: ${round(base.at(-1)!)} vs ${round(withSubs.at(-1)!)} creations/s`);
    }
  } finally {
    rec.close();
  }
  const ratio = median(withSubs) / median(base);
  return {
    id: o.matching ? 'z.load.fanout' : 'z.load',
    what: o.matching
      ? 'task creations/s (each finishing at once) with 100 subscriptions that all match, so 100 webhooks per task, vs none (SQLite, one process)'
      : "task creations/s (each finishing at once) with 100 of the caller's subscriptions active (another tool's) vs none (SQLite)",
    figure: round(median(withSubs)),
    unit: 'creations/s',
    baselineWhat: 'no subscriptions',
    baseline: round(median(base)),
    ratio: round(ratio, 2),
    target: 'ratio ≥ 0.9',
    pass: ratio >= 0.9,
    rounds: withSubs.map((x) => round(x)),
    baselineRounds: base.map((x) => round(x)),
  };
}
