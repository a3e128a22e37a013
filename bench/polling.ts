/**
 * (r)-(u): polling at the speed of the store, for an application of realistic size (40 tools; bench/app-tools.ts).
 *   (r) tasks/get with 40 registered tools vs with 1: polling no longer pays for the application's size.
 *       r.sdk: the same 40-tool server with the direct path off (--no-direct-task-methods), for the record.
 *   (s) tasks/get on SQLite vs a bare node:http server doing one better-sqlite3 primary-key read per request.
 *   (t) tasks/get on PostgreSQL vs a bare node:http server doing one pg primary-key read per request (pool 10 both).
 *   (u) inline no-op tools/call through Outlast vs the bare SDK server, both with the same 40 tools.
 *       u.strict: against a bare server handed the pre-parsed body, as Outlast's front does (isolates Outlast's cost).
 * Each server is a process of its own; the sides of (r)-(t) run in one rotation of rounds (run.ts `alternate`), the
 * sides of (u), at a few hundred requests a second, in a rotation of their own with longer rounds.
 */
import { join } from 'node:path';
import { median, round, send, tasksGet, toolCall, type BenchRow, type Child, type WireRequest } from './common.js';

/** A side of the rotation, as run.ts measures it. */
export interface PollingSide {
  name: string;
  child?: Child;
  url: string;
  requests: WireRequest[];
  concurrency: number;
  results: Array<{ rps: number; p50Ms: number; p99Ms: number; cpuUsPerReq?: number }>;
  /** The processes whose CPU a request of this side costs, read from /proc (else the child's own, over IPC). */
  cpuPids?: () => number[];
  /** Each client keeps to one of `requests` (one per session: a stateful server's session is one client's). */
  pinned?: boolean;
}

export interface PollingEnv {
  only: Set<string>;
  concurrency: number;
  dir: string;
  pgUrl: string;
  pgSchema(label: string): string;
  startServer(file: string, args: string[]): Promise<{ child: Child; url: string }>;
  alternate(sides: PollingSide[], seconds?: number): Promise<void>;
  /** Seconds per round for the slow sides (u). */
  slowSeconds: number;
  log(m: string): void;
}

/** Tools in the realistic application: 39 of its own plus the one each row exercises. */
const TOOLS = 40;
const TASKS = 1000;

async function parkTasks(url: string): Promise<WireRequest[]> {
  const ids: string[] = [];
  for (let i = 0; i < TASKS; i++) {
    const r = await send(url, toolCall('park'));
    if (r.json?.result?.resultType !== 'task') throw new Error(`park on ${url}: ${r.text.slice(0, 300)}`);
    ids.push(r.json.result.taskId);
  }
  const check = await send(url, tasksGet(ids[0]!));
  if (check.json?.result?.status !== 'working') throw new Error(`tasks/get on ${url}: ${check.text.slice(0, 300)}`);
  return ids.map(tasksGet);
}

const p = (s: PollingSide, k: 'p50Ms' | 'p99Ms' | 'cpuUsPerReq') => round(median(s.results.map((r) => r[k] ?? NaN)), k === 'cpuUsPerReq' ? 0 : 2);
const latency = (s: PollingSide) => `p50/p99 ${p(s, 'p50Ms')}/${p(s, 'p99Ms')} ms`;

/** The CPU per request of both sides and their ratio, when both were measured. */
function cpuFigures(a: number, b: number): Pick<BenchRow, 'cpuUsPerReq' | 'baselineCpuUsPerReq' | 'cpuRatio'> {
  return Number.isFinite(a) && Number.isFinite(b) && b > 0 ? { cpuUsPerReq: a, baselineCpuUsPerReq: b, cpuRatio: round(a / b, 3) } : {};
}

/** A throughput row of two sides of a rotation, with latency and the server's CPU per request beside it. */
export function row(id: string, what: string, a: PollingSide, baselineWhat: string, b: PollingSide, min: number | undefined): BenchRow {
  const fa = median(a.results.map((r) => r.rps));
  const fb = median(b.results.map((r) => r.rps));
  return {
    id,
    what,
    figure: round(fa),
    unit: 'req/s',
    baselineWhat,
    baseline: round(fb),
    ratio: round(fa / fb, 3),
    target: min === undefined ? 'info' : `ratio >= ${min}`,
    ...(min === undefined ? {} : { pass: fa / fb >= min }),
    rounds: a.results.map((r) => round(r.rps)),
    baselineRounds: b.results.map((r) => round(r.rps)),
    ...cpuFigures(p(a, 'cpuUsPerReq'), p(b, 'cpuUsPerReq')),
    // Throughput on this shared 2-core machine moves with the other sessions' load; the server's own CPU per
    // request does much less, so the cost ratio is given beside the throughput ratio.
    note: `latency ${latency(a)}; baseline ${latency(b)}; server CPU per request ${p(a, 'cpuUsPerReq')} vs ${p(b, 'cpuUsPerReq')} µs (cost ratio ${round(p(b, 'cpuUsPerReq') / p(a, 'cpuUsPerReq'), 3)})`,
  };
}

export async function pollingAtStoreSpeed(env: PollingEnv): Promise<{ rows: BenchRow[]; latencyMs: Record<string, unknown> }> {
  const has = (x: string) => env.only.has(x);
  const outlast = (name: string, cfg: Record<string, unknown>) => env.startServer('server-outlast.js', [JSON.stringify({ pollLimit: false, ...cfg })]).then((s) => ({ name, ...s }));
  const pg = { url: env.pgUrl, schema: env.pgSchema('poll') };

  // The servers, only those the selected rows need.
  const [g40, g1, g40sdk, gPg, uOutlast, uBare, uBareParsed] = await Promise.all([
    has('r') || has('s') ? outlast('get, 40 tools (SQLite)', { db: join(env.dir, 'g40.db'), tools: ['park'], appTools: TOOLS - 1 }) : undefined,
    has('r') ? outlast('get, 1 tool (SQLite)', { db: join(env.dir, 'g1.db'), tools: ['park'] }) : undefined,
    has('r') ? outlast('get, 40 tools, SDK path', { db: join(env.dir, 'g40sdk.db'), tools: ['park'], appTools: TOOLS - 1, direct: false }) : undefined,
    has('t') ? outlast('get, 40 tools (PostgreSQL)', { pg, tools: ['park'], appTools: TOOLS - 1 }) : undefined,
    has('u') ? outlast('tools/call, 40 tools, Outlast', { db: join(env.dir, 'u.db'), tools: ['noop:never'], appTools: TOOLS - 1 }) : undefined,
    has('u') ? env.startServer('server-bare.js', ['sdk-body', String(TOOLS)]).then((s) => ({ name: 'tools/call, 40 tools, bare SDK', ...s })) : undefined,
    has('u') ? env.startServer('server-bare.js', ['parsed', String(TOOLS)]).then((s) => ({ name: 'tools/call, 40 tools, bare SDK (parsed body)', ...s })) : undefined,
  ]);
  const gets = new Map<string, WireRequest[]>();
  for (const s of [g40, g1, g40sdk, gPg]) if (s) gets.set(s.name, await parkTasks(s.url));
  // The floors read the tables the Outlast servers just filled.
  const [readSqlite, readPg] = await Promise.all([
    has('s') ? env.startServer('server-read.js', [JSON.stringify({ sqlite: join(env.dir, 'g40.db') })]).then((s) => ({ name: 'one better-sqlite3 read per request', ...s })) : undefined,
    has('t') ? env.startServer('server-read.js', [JSON.stringify({ pg, pool: 10 })]).then((s) => ({ name: 'one pg read per request', ...s })) : undefined,
  ]);
  const call = toolCall('noop');
  for (const s of [uOutlast, uBare, uBareParsed]) {
    if (!s) continue;
    const r = await send(s.url, call);
    if (r.json?.result?.content?.[0]?.text !== 'ok') throw new Error(`noop on ${s.name}: ${r.text.slice(0, 300)}`);
  }

  const sides: PollingSide[] = [];
  const slow: PollingSide[] = [];
  const side = (server: { name: string; child: Child; url: string } | undefined, requests: WireRequest[] | undefined, into = sides) => {
    if (!server || !requests) return undefined;
    const s: PollingSide = { name: server.name, child: server.child, url: server.url, requests, concurrency: env.concurrency, results: [] };
    into.push(s);
    return s;
  };
  const s40 = side(g40, g40 && gets.get(g40.name));
  const s1 = side(g1, g1 && gets.get(g1.name));
  const s40sdk = side(g40sdk, g40sdk && gets.get(g40sdk.name));
  const sPg = side(gPg, gPg && gets.get(gPg.name));
  const sReadSqlite = side(readSqlite, g40 && gets.get(g40.name));
  const sReadPg = side(readPg, gPg && gets.get(gPg.name));
  const sU = side(uOutlast, [call], slow);
  const sBare = side(uBare, [call], slow);
  const sBareParsed = side(uBareParsed, [call], slow);
  try {
    if (sides.length) {
      env.log(`(r)-(t) ${sides.length} sides, ${TASKS} tasks per polled server, concurrency ${env.concurrency}`);
      await env.alternate(sides);
    }
    if (slow.length) {
      env.log(`(u) ${slow.length} sides, ${env.slowSeconds} s per side per round, concurrency ${env.concurrency}`);
      await env.alternate(slow, env.slowSeconds);
    }
  } finally {
    await Promise.all([g40, g1, g40sdk, gPg, uOutlast, uBare, uBareParsed, readSqlite, readPg].map((s) => s?.child.kill()));
  }

  const rows: BenchRow[] = [];
  if (s40 && s1) rows.push(row('r', `tasks/get with ${TOOLS} registered tools (req/s)`, s40, 'tasks/get with 1 tool', s1, 0.9));
  if (s40 && s40sdk) rows.push(row('r.sdk', `tasks/get with ${TOOLS} tools, direct path (req/s)`, s40, `the same through the SDK path (--no-direct-task-methods)`, s40sdk, undefined));
  if (s40 && sReadSqlite) rows.push(row('s', `tasks/get on SQLite, ${TOOLS} tools (req/s)`, s40, 'bare node:http, one better-sqlite3 primary-key read per JSON-RPC request', sReadSqlite, 0.5));
  if (sPg && sReadPg) rows.push(row('t', `tasks/get on PostgreSQL, ${TOOLS} tools, pool 10 (req/s)`, sPg, 'bare node:http, one pg primary-key read per JSON-RPC request, pool 10', sReadPg, 0.5));
  if (sU && sBare) rows.push(row('u', `inline no-op tools/call through Outlast, ${TOOLS} tools (req/s)`, sU, `bare SDK McpServer with the same ${TOOLS} tools, toNodeHandler on node:http`, sBare, 0.95));
  if (sU && sBareParsed) rows.push(row('u.strict', `inline no-op tools/call through Outlast, ${TOOLS} tools (req/s)`, sU, 'the same bare SDK server handed the pre-parsed body, as serveHttp does', sBareParsed, undefined));
  const latencyMs = Object.fromEntries([...sides, ...slow].map((s) => [s.name, { p50: p(s, 'p50Ms'), p99: p(s, 'p99Ms'), rps: round(median(s.results.map((r) => r.rps))), cpuUsPerReq: p(s, 'cpuUsPerReq') }]));
  return { rows, latencyMs };
}
