/**
 * `npm run bench`: Outlast against baselines measured in the same run, in alternating rounds.
 *
 *   (a) inline no-op tools/call through Outlast (serveHttp) vs the same tool on a bare SDK McpServer
 *       (createMcpHandler + toNodeHandler on node:http). Each server is its own child process; the load comes
 *       from a third process (closed loop, keep-alive, fixed concurrency). Target ratio >= 0.95.
 *       a.auto: the same with policy 'auto' and the extension declared. a.strict: against a bare server that
 *       hands toNodeHandler a pre-parsed body as serveHttp does (the SDK's own body reading is slower, which
 *       flatters Outlast in the plain comparison).
 *   (b) durable task creations/s (policy 'always', SQLite WAL + synchronous=FULL, handler parked) in-process
 *       through runtime.call and over HTTP, vs raw better-sqlite3 single-row INSERT autocommits (WAL + FULL)
 *       into the same table on the same file system. Target ratio >= 0.5. Also: full life cycles/s when the
 *       handler completes at once (no target).
 *   (c) tasks/get vs an inline no-op tools/call, both over HTTP through Outlast (pollLimit: false; the gets
 *       cycle over 1,000 working tasks). Target ratio >= 0.9.
 *   (d) RSS growth after 10,000 finished tasks, after global.gc(), against the value after a 500-task warm-up.
 *       Target < 20 MB. d.next: the next 10,000 (growth that repeats is per task; V8 sizing its young
 *       generation happens once). d.nolimit: the first 10,000 with the poll governor off.
 *   (e) the client's overhead (bench/client-bench.ts): end-to-end time of an N ms task through TaskClient, push
 *       and polling, against the same work answered inline; requests per task.
 *   (f) PostgreSQL: durable task creations/s in-process (runtime.call on PostgresTaskStore, policy 'always',
 *       handler parked, LISTEN/NOTIFY bus on) vs raw `pg` single-row INSERT commits into the same table, same
 *       pool size and the same number in flight, fresh schema each round. Target ratio >= 0.6.
 *   (g) two replica processes on one PostgreSQL schema: cross-replica cancel latency (tasks/cancel sent to B ->
 *       the handler's AbortSignal fires on A) and push latency (status committed on A -> notifications/tasks
 *       read by a listen client of B), p50 and p99. Target p99 < 20 ms.
 *   (h) takeover: the replica running N tasks is SIGKILLed (same host: its pid is seen gone) or SIGSTOPped (only
 *       the lease tells), and the time until every one of its tasks has started again on another replica is
 *       compared with the configured lease.
 *   (i) tasks/get p50/p99 over HTTP against a replica whose schema holds 1,000,000 tasks vs one holding 1,000
 *       (random ids, alternating rounds). Target p99 ratio <= 2.
 *   (j) the 2025-11-25 tasks/get (no `_meta` envelope, SDK legacy era) vs the 2026-07-28 tasks/get, same server,
 *       same 1,000 working tasks. Target ratio >= 0.9.
 *   (k) a plain inline tools/call from a 2025-11-25 client through Outlast vs the same request to a bare SDK
 *       McpServer. Target ratio >= 0.95.
 *   (p), (q) the run queue (bench/queue-rows.ts): tasks started/s from a full queue vs a bare SKIP LOCKED claim loop
 *       (target ratio >= 0.7); start latency of a queued task once capacity frees on another replica (p99 < 50 ms).
 *   (n) durable steps (bench/steps-rows.ts): steps committed per second by one handler, and by 16 handlers stepping
 *       at once (n.*.par), vs raw single-row commits on the same store, SQLite and PostgreSQL (target ratio >= 0.5).
 *   (o) parked waits (bench/parking-rows.ts): resume of a parked task after tasks/update on another replica (p99 < 50
 *       ms); o.mem: heap growth for 1,000 parked tasks (< 5 MB).
 *   (r)-(u) (bench/polling.ts) with an application of 40 tools: (r) tasks/get with 40 tools vs with 1, target >= 0.9;
 *       (s) tasks/get on SQLite vs one better-sqlite3 primary-key read per request on bare node:http, >= 0.5;
 *       (t) the same on PostgreSQL vs one pg read, >= 0.5; (u) inline no-op tools/call through Outlast vs the bare
 *       SDK server with the same 40 tools, >= 0.95. All sides in one rotation; p50/p99 for each.
 *   (v) (bench/soak.ts) 50,000 mixed requests against the fixture server and the demo, each started with
 *       --max-old-space-size=128: both survive, and heap used after a full GC grows by less than 5 MB from the
 *       first 10,000 to the last; a control that builds fromJsonSchema tools per request shows what a leak looks like.
 *   (w), (x) (bench/front-rows.ts): tasks/get through outlastHandler on node:http (>= 0.9) and in Express (>= 0.7;
 *       against Express alone >= 0.9) vs node:http + one SQLite primary-key read; an inline tools/call through
 *       outlastHandler in Express vs a bare SDK server in Express (>= 0.95); task creations/s (>= 2.0) and tasks/get
 *       req/s (>= 1.0) vs the SDK v1 experimental tasks server on the 2025-11-25 wire; (x.stateful, not in the
 *       default list) creations vs that server keeping a server per session, as it ships (>= 1.0); RSS after 10,000 finished
 *       tasks on both. Rows carry the server's CPU per request beside the rates (cpuUsPerReq, cpuRatio).
 *   (l) the dashboard's pages (overview with counts, task list unfiltered and filtered) p99 over HTTP with
 *       1,000,000 tasks stored vs 1,000, SQLite and PostgreSQL (bench/dashboard-scale.ts). Target ratio <= 2.
 *       (l.tools): the Tools page alone (per-tool durations of the last hour; its read is capped), same ratio.
 *   (m) durable creations/s with metrics (SDK registered) and the transition history on vs both off, SQLite and
 *       PostgreSQL (bench/ops-overhead.ts). Target ratio >= 0.9.
 *   (af) durable creations/s in-process (as f) through Debian's PgBouncer in transaction mode (started here, its
 *       defaults; --bus on the direct URL) vs directly, alternating rounds; (af.get) in the same child after each
 *       round's creations, tasks/get (runtime.getTask) on the tasks it created, through the pooler vs directly. Info
 *       (the pooler is a hop and forbids named prepared statements).
 *   (ag) (g) with the store through that PgBouncer: cross-replica cancel and push p99 on --bus direct PostgreSQL and
 *       on --bus Redis (a redis-server started here). Target p99 < 20 ms, as g.
 *   (aa)-(ac) task output (bench/output-rows.ts): (aa) tasks/s emitting ten outputs each vs none, and ctx.output vs
 *       ctx.status per call, SQLite and PostgreSQL (aa.pg); (ab) output emitted on replica A -> a tasks/stream client
 *       of B, p99 < 20 ms, with the status push of (g) in the same run; (ac) one task of 100,000 outputs: the server's
 *       heap and RSS stay flat, and a full replay's items/s (ac.pg: on PostgreSQL; not in the default list).
 *   (ad), (ae) `outlast gateway` in front of server-everything (bench/gateway-rows.ts): (ad.http) an inline echo
 *       tools/call through the gateway vs straight to the upstream's Streamable HTTP endpoint; (ad.stdio) through the
 *       gateway in front of the stdio server vs a bare HTTP pass-through to one stdio process of it (both HTTP in
 *       front, stdio behind), target >= 0.8 each; (ae) tasks/get on the gateway over 1,000 working upstream calls vs
 *       (s)'s on `outlast serve`, SQLite both, target >= 0.9. CPU per request is the whole path's (the gateway and
 *       its upstreams, from /proc). Not in the default list (upstream processes; BENCH_ONLY=ad,ae). (ad.peer) the same
 *       gateway vs supergateway (bench/peers) over the same stdio upstream, >= 1.0 (issue 43): BENCH_ONLY=ad.peer.
 *
 * Knobs (environment):
 *   BENCH_SECONDS       seconds per side per round (default 2)
 *   BENCH_ROUNDS        alternating rounds (default 5)
 *   BENCH_WARMUP_SECONDS  load on each HTTP server before its rounds (default 4)
 *   BENCH_CONCURRENCY   HTTP load concurrency for (a) and (c) (default 16)
 *   BENCH_INFLIGHT      creations in flight for (b), in-process and HTTP (default 64)
 *   BENCH_MAX_REQUESTS  cap on requests per measurement (default 2,000,000)
 *   BENCH_MEMORY_TASKS  tasks for (d) (default 10,000); BENCH_MEMORY_WARMUP (default 5,000; d.cold uses 500)
 *   BENCH_ONLY          e.g. "a,c" to run a subset (default a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,q,r,s,t,u,v,w,x,y,aa,ab,ac)
 *   BENCH_SLOW_SECONDS  seconds per side per round for (u), whose sides answer a few hundred req/s (default 3 x BENCH_SECONDS)
 *   BENCH_SOAK_REQUESTS, BENCH_SOAK_SEGMENT, BENCH_SOAK_CONCURRENCY, BENCH_SOAK_HEAP_MB   (v) (default 50,000,
 *                       10,000, 4, 128)
 *   BENCH_PG_URL        PostgreSQL for (f)-(i) (default postgres://postgres@127.0.0.1:5432/test); schemas
 *                       bench_* are created and dropped
 *   BENCH_PG_POOL       pool size for (f), both sides (default 16)
 *   BENCH_CANCELS, BENCH_TICKS   samples for (g) (default 300, 500)
 *   BENCH_LEASE_MS, BENCH_HEARTBEAT_MS, BENCH_TAKEOVER_TASKS, BENCH_TAKEOVER_ROUNDS   (h) (default 3000, 500, 20, 3)
 *   BENCH_QUEUE_TASKS, BENCH_QUEUE_SAMPLES   queued tasks drained per round of (p), samples of (q) (default 2000, 200)
 *   BENCH_PARK_SAMPLES, BENCH_PARKED_TASKS   samples of (o), parked tasks of (o.mem) (default 200, 1000)
 *   BENCH_BIG_TASKS     tasks in the big schema of (i) and the big store of (l) (default 1,000,000)
 *   BENCH_PIN           "1": pin each server to CPU 0 and the load generator to CPU 1 with taskset
 *   BENCH_VERBOSE       "1": forward the children's stderr
 *   BENCH_OUTPUT_ITEMS  outputs of the (ac) task (default 100,000); BENCH_OUTPUT_PUSH  samples of (ab) (default 500)
 *   BENCH_GATEWAY_POOL  the gateway's --upstream-pool in (ad) and (ae) (unset: the gateway's own defaults, 4 stdio, 16 HTTP)
 *   BENCH_PROFILE       "1": after the counted rounds, one extra pass per HTTP side and per in-process
 *                       creation mode under the CPU profiler -> bench-results/profiles/*.cpuprofile
 * Results: a table on stdout and bench-results/latest.json.
 */
import { eventsLatency, eventsLoad } from './events-bench.js';
import { outputCost, outputPush, outputVolume } from './output-rows.js';
import { execFileSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { getAtScale, latency, takeover } from './cluster.js';
import { startPgBouncer, type PgBouncer } from '../fixtures/pgbouncer.js';
import { startRedis, type RedisServer } from '../fixtures/redis-server.js';
import { stopAllServices } from '../fixtures/service-process.js';
import {
  Child,
  cleanupAll,
  envNumber,
  median,
  procCpuUs,
  removeTempDir,
  round,
  legacyWire,
  send,
  tasksGet,
  tempDir,
  toolCall,
  type BenchRow,
  type WireRequest,
} from './common.js';
import { clientBench } from './client-bench.js';
import { queueLatency, queueStarts, type QueueBenchConfig } from './queue-rows.js';
import { stepCommits } from './steps-rows.js';
import { dbosSteps } from './dbos-rows.js';
import { parkedMemory, parkedResume } from './parking-rows.js';
import { pollingAtStoreSpeed } from './polling.js';
import { soak } from './soak.js';
import { dashboardScale } from './dashboard-scale.js';
import { opsOverhead } from './ops-overhead.js';
import { frontRows } from './front-rows.js';
import { startOAuthSides } from './oauth-setup.js';
import { gatewayRows } from './gateway-rows.js';

const SECONDS = envNumber('BENCH_SECONDS', 2);
const ROUNDS = Math.round(envNumber('BENCH_ROUNDS', 5));
const CONCURRENCY = Math.round(envNumber('BENCH_CONCURRENCY', 16));
const INFLIGHT = Math.round(envNumber('BENCH_INFLIGHT', 64));
const MAX_REQUESTS = Math.round(envNumber('BENCH_MAX_REQUESTS', 2_000_000));
const MEMORY_TASKS = Math.round(envNumber('BENCH_MEMORY_TASKS', 10_000));
const MEMORY_WARMUP = Math.round(envNumber('BENCH_MEMORY_WARMUP', 5000));
/** The cold variant's warm-up: shows V8 sizing its young generation once, which is not per-task growth. */
const MEMORY_COLD_WARMUP = 500;
const ONLY = new Set((process.env.BENCH_ONLY ?? 'a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,q,r,s,t,u,v,w,x,y,aa,ab,ac').split(',').map((s) => s.trim().toLowerCase()));
const PG_URL = process.env.BENCH_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const PG_POOL = Math.round(envNumber('BENCH_PG_POOL', 16));
const CANCELS = Math.round(envNumber('BENCH_CANCELS', 300));
const TICKS = Math.round(envNumber('BENCH_TICKS', 500));
const LEASE_MS = Math.round(envNumber('BENCH_LEASE_MS', 3000));
const HEARTBEAT_MS = Math.round(envNumber('BENCH_HEARTBEAT_MS', 500));
const TAKEOVER_TASKS = Math.round(envNumber('BENCH_TAKEOVER_TASKS', 20));
const TAKEOVER_ROUNDS = Math.round(envNumber('BENCH_TAKEOVER_ROUNDS', 3));
const BIG_TASKS = Math.round(envNumber('BENCH_BIG_TASKS', 1_000_000));
/** Seconds per round for sides that answer a few hundred requests a second (u): 2 s of them is too few to be steady. */
const SLOW_SECONDS = envNumber('BENCH_SLOW_SECONDS', SECONDS * 3);
const SOAK_REQUESTS = Math.round(envNumber('BENCH_SOAK_REQUESTS', 50_000));
const SOAK_SEGMENT = Math.round(envNumber('BENCH_SOAK_SEGMENT', 10_000));
const SOAK_CONCURRENCY = Math.round(envNumber('BENCH_SOAK_CONCURRENCY', 4));
const SOAK_HEAP_MB = Math.round(envNumber('BENCH_SOAK_HEAP_MB', 128));
const PIN = process.env.BENCH_PIN === '1';
const PROFILE = process.env.BENCH_PROFILE === '1';
/** Rounds of (b) that also measure full life cycles (no target; kept short). */
const LIFE_ROUNDS = Math.min(ROUNDS, 3);
/** V8 needs several seconds of load before the SDK's request path reaches a steady rate (measured: 1.2k/s in
 *  the first second, 3.4k/s after 6 s), so every HTTP side is warmed up this long before the rounds. */
const WARMUP_SECONDS = envNumber('BENCH_WARMUP_SECONDS', 4);

const root = join(fileURLToPath(new URL('.', import.meta.url)), '..', '..');
const profileDir = join(root, 'bench-results', 'profiles');
const profileFile = (name: string) => join(profileDir, `${name.replace(/[^a-z0-9.-]+/gi, '_')}.cpuprofile`);

function log(msg: string): void {
  process.stderr.write(`[bench] ${msg}\n`);
}

/** Pins a process to one CPU (BENCH_PIN=1 only). */
function pin(pid: number, cpu: number): void {
  if (!PIN) return;
  try {
    execFileSync('taskset', ['-a', '-p', '-c', String(cpu), String(pid)], { stdio: 'ignore' });
  } catch (e) {
    log(`taskset failed for ${pid}: ${(e as Error).message}`);
  }
}

interface LoadResult {
  ok: number;
  errors: number;
  firstError?: string;
  seconds: number;
  rps: number;
  p50Ms: number;
  p99Ms: number;
  /** CPU time the server process spent per answered request in this window, µs (sides with a child process). */
  cpuUsPerReq?: number;
}

interface Side {
  name: string;
  /** The server process (for BENCH_PROFILE). */
  child?: Child;
  url: string;
  requests: WireRequest[];
  concurrency: number;
  results: LoadResult[];
  /** The processes whose CPU a request of this side costs, read from /proc (else the child's own, over IPC). */
  cpuPids?: () => number[];
  /** Each client keeps to one of `requests` (one per session). */
  pinned?: boolean;
}

async function startServerChild(file: string, args: string[] = []): Promise<{ child: Child; url: string }> {
  const child = new Child(file, args);
  const { url } = await child.next<{ url: string }>('ready', 30_000);
  pin(child.pid, 0);
  return { child, url };
}

async function load(gen: Child, side: Pick<Side, 'url' | 'requests' | 'concurrency' | 'pinned'>, seconds: number): Promise<LoadResult> {
  const r = await gen.request<LoadResult>(
    { type: 'run', url: side.url, requests: side.requests, concurrency: side.concurrency, seconds, maxRequests: MAX_REQUESTS, pinned: side.pinned },
    'result',
    seconds * 1000 + 60_000,
  );
  if (r.errors > 0) throw new Error(`load on ${side.url}: ${r.errors} errors; first: ${r.firstError}`);
  return r;
}

/** Runs every side once per round, rotating the order each round (and reversing it every other round). */
async function alternate(gen: Child, sides: Side[], seconds = SECONDS): Promise<void> {
  for (const s of sides) await load(gen, s, WARMUP_SECONDS);
  for (let r = 0; r < ROUNDS; r++) {
    const rot = sides.map((_, i) => sides[(i + r) % sides.length]!);
    const order = r % 2 ? rot.reverse() : rot;
    const line: string[] = [];
    for (const s of order) {
      // The server's own CPU per request: what a request costs, whatever else the shared machine is doing.
      const pids = s.cpuPids?.();
      const cpu = async () => (pids ? pids.reduce((sum, pid) => sum + procCpuUs(pid), 0) : (await s.child!.request<{ us: number }>({ type: 'cpu' }, 'cpu', 10_000)).us);
      const before = s.child || pids ? await cpu() : undefined;
      const res = await load(gen, s, seconds);
      if (before !== undefined && res.ok > 0) res.cpuUsPerReq = ((await cpu()) - before) / res.ok;
      s.results.push(res);
      line.push(`${s.name} ${Math.round(res.rps)}/s`);
    }
    log(`  round ${r + 1}/${ROUNDS}: ${line.join(' | ')}`);
  }
  if (!PROFILE) return;
  // One more pass per side under the profiler, not counted (profiling slows the server).
  for (const s of sides) {
    if (!s.child) continue;
    // A server that takes no profile (server-bare) has its side skipped.
    const started = await s.child.request({ type: 'profile-start' }, 'profile-started', 5000).then(() => true, () => false);
    if (!started) continue;
    const res = await load(gen, s, SECONDS);
    await s.child.request({ type: 'profile-stop', file: profileFile(s.name) }, 'profile-stopped');
    profiled[s.name] = { requests: res.ok, rps: round(res.rps), file: profileFile(s.name) };
  }
}
const profiled: Record<string, unknown> = {};

const medianRps = (s: Side) => median(s.results.map((r) => r.rps));
const medianOf = (s: Side, k: 'p50Ms' | 'p99Ms') => median(s.results.map((r) => r[k]));

type Row = BenchRow;
const rows: Row[] = [];
const details: Record<string, unknown> = {};

function ratioRow(id: string, what: string, a: number[], baselineWhat: string, b: number[], unit: string, min: number | undefined, note?: string): Row {
  const fa = median(a);
  const fb = median(b);
  const ratio = fa / fb;
  const row: Row = {
    id,
    what,
    figure: round(fa),
    unit,
    baselineWhat,
    baseline: round(fb),
    ratio: round(ratio, 3),
    target: min === undefined ? 'info' : `ratio >= ${min}`,
    ...(min === undefined ? {} : { pass: ratio >= min }),
    rounds: a.map((x) => round(x)),
    baselineRounds: b.map((x) => round(x)),
    ...(note ? { note } : {}),
  };
  rows.push(row);
  return row;
}

// ---- (y): tasks/get behind OAuth ----------------------------------------------------------------------------

/** (y) tasks/get with a JWT access token verified on every request (JWKS cached) vs a static bearer token;
 *  (y.intro) with an opaque token checked by introspection (its cache on). Fixture server on SQLite, one task. */
async function oauthThroughput(gen: Child): Promise<void> {
  const set = await startOAuthSides();
  try {
    const sides: Side[] = set.sides.map((o) => {
      const get = tasksGet(o.taskId);
      get.headers.authorization = `Bearer ${o.token}`;
      return { name: o.name, url: o.url, requests: [get], concurrency: CONCURRENCY, results: [] };
    });
    log(`(y) tasks/get: static bearer vs JWT (cached, per request) vs introspection, ${ROUNDS} rounds x ${SECONDS}s, concurrency ${CONCURRENCY}`);
    await alternate(gen, sides);
    const [stat, jwt, raw, intro] = sides as [Side, Side, Side, Side];
    ratioRow('y', 'tasks/get/s, JWT access token (ES256; signature verified once per token, then cached <= 60 s; exp/nbf checked per request)', jwt.results.map((r) => r.rps), 'the same server with a static bearer token', stat.results.map((r) => r.rps), '/s', 0.8);
    ratioRow('y.nocache', 'tasks/get/s, JWT access token with its ES256 signature verified on every request (jose, JWKS cached; --oauth-token-cache-ms 0)', raw.results.map((r) => r.rps), 'the same server with a static bearer token', stat.results.map((r) => r.rps), '/s', undefined);
    ratioRow('y.intro', 'tasks/get/s, opaque token by RFC 7662 introspection (cached per token, 60 s)', intro.results.map((r) => r.rps), 'the same server with a static bearer token', stat.results.map((r) => r.rps), '/s', undefined);
  } finally {
    await set.stop();
  }
}

// ---- (a) and (c): HTTP throughput ------------------------------------------------------------------------

async function httpThroughput(gen: Child): Promise<void> {
  const dir = tempDir('http');
  const owned: Child[] = [];
  const startServer = async (file: string, args: string[]) => {
    const s = await startServerChild(file, args);
    owned.push(s.child);
    return s;
  };
  try {
    // (a): one tool named "noop" on every server (the SDK's per-request factory pays for each registered tool),
    // and no tasks at all (with >= 64 running handlers Outlast promotes 'auto' calls to tasks at once).
    const J = ONLY.has('j');
    const K = ONLY.has('k');
    const A = ONLY.has('a') || K;
    const C = ONLY.has('c') || J;
    const bare = A ? await startServer('server-bare.js', ['sdk-body']) : undefined;
    const bareParsed = A ? await startServer('server-bare.js', ['parsed']) : undefined;
    const a = A ? await startServer('server-outlast.js', [JSON.stringify({ db: join(dir, 'a.db'), tools: ['noop:never'] })]) : undefined;
    const aAuto = A ? await startServer('server-outlast.js', [JSON.stringify({ db: join(dir, 'a-auto.db'), tools: ['noop:auto'] })]) : undefined;
    // (c): server C holds 1,000 working tasks to poll, and the no-op tool.
    // Its 1,000 tasks run (one principal): the per-principal running share is sized for them, the other bounds keep their defaults.
    const c = C ? await startServer('server-outlast.js', [JSON.stringify({ db: join(dir, 'c.db'), tools: ['park', 'noop:never'], maxRunningPerPrincipal: 1100 })]) : undefined;
    const servers = { bare, bareParsed, outlastNever: a, outlastAuto: aAuto, outlastC: c };
    details.pids = { load: gen.pid, ...Object.fromEntries(Object.entries(servers).filter(([, v]) => v).map(([k, v]) => [k, v!.child.pid])) };

    // Check every kind of request once, by hand, before loading it.
    const check = async (url: string, r: WireRequest, want: (j: any) => boolean, label: string) => {
      const x = await send(url, r);
      if (x.status !== 200 || !want(x.json)) throw new Error(`${label}: unexpected answer ${x.status} ${x.text.slice(0, 300)}`);
      return x.json;
    };
    const inline = (j: any) => j?.result?.resultType === 'complete' && j.result.content?.[0]?.text === 'ok';
    if (A) {
      await check(bare!.url, toolCall('noop'), inline, 'bare noop');
      await check(bareParsed!.url, toolCall('noop'), inline, 'bare noop (parsed body)');
      await check(a!.url, toolCall('noop'), inline, 'outlast noop');
      await check(aAuto!.url, toolCall('noop'), inline, 'outlast noop (auto)');
    }
    const ids: string[] = [];
    if (C) {
      await check(c!.url, toolCall('noop'), inline, 'outlast noop (server C)');
      for (let i = 0; i < 1000; i++) {
        const j = await check(c!.url, toolCall('park'), (j) => j?.result?.resultType === 'task' && j.result.status === 'working', 'outlast park');
        ids.push(j.result.taskId);
      }
      await check(c!.url, tasksGet(ids[0]!), (j) => j?.result?.status === 'working' && j.result.taskId === ids[0], 'outlast tasks/get');
      await check(c!.url, legacyWire('tasks/get', { taskId: ids[0]! }), (j) => j?.result?.status === 'working' && j.result.ttl !== undefined, 'outlast tasks/get (2025-11-25)');
    }
    const legacyCall = legacyWire('tools/call', { name: 'noop', arguments: {} });
    const legacyInline = (j: any) => j?.result?.content?.[0]?.text === 'ok' && j.result.task === undefined;
    if (K) {
      await check(bare!.url, legacyCall, legacyInline, 'bare noop (2025-11-25)');
      await check(a!.url, legacyCall, legacyInline, 'outlast noop (2025-11-25)');
    }

    const same = toolCall('noop'); // byte-identical request for both servers in (a)
    const sides: Side[] = [];
    const side = (name: string, server: { child: Child; url: string }, requests: WireRequest[]) => {
      const s: Side = { name, child: server.child, url: server.url, requests, concurrency: CONCURRENCY, results: [] };
      sides.push(s);
      return s;
    };
    const sBare = A ? side('bare-noop', bare!, [same]) : undefined;
    const sBareParsed = A ? side('bare-noop(parsed body)', bareParsed!, [same]) : undefined;
    const sNever = A ? side('outlast-noop(never)', a!, [same]) : undefined;
    const sAuto = A ? side('outlast-noop(auto)', aAuto!, [same]) : undefined;
    const sGet = C ? side('outlast-tasks/get', c!, ids.map(tasksGet)) : undefined;
    const sCall = C ? side('outlast-tools/call', c!, [same]) : undefined;
    const sGetLegacy = J ? side('outlast-tasks/get(2025-11-25)', c!, ids.map((id) => legacyWire('tasks/get', { taskId: id }))) : undefined;
    const sBareLegacy = K ? side('bare-noop(2025-11-25)', bare!, [legacyCall]) : undefined;
    const sNeverLegacy = K ? side('outlast-noop(never, 2025-11-25)', a!, [legacyCall]) : undefined;
    log(`(a)/(c) ${sides.length} sides x ${ROUNDS} rounds x ${SECONDS}s, concurrency ${CONCURRENCY}`);
    await alternate(gen, sides);

    if (sBare && sBareParsed && sNever && sAuto) {
      // Headline: the baseline as specified, toNodeHandler(handler) on node:http, which reads the body itself.
      // Strict: the SDK handed a pre-parsed body, which is what serveHttp does; that isolates Outlast's own cost.
      const plain = sBare.results.map((r) => r.rps);
      const parsed = sBareParsed.results.map((r) => r.rps);
      const never = sNever.results.map((r) => r.rps);
      const auto = sAuto.results.map((r) => r.rps);
      ratioRow('a', 'inline no-op tools/call via Outlast serveHttp, policy never (req/s)', never, 'bare SDK McpServer, same tool, toNodeHandler on node:http', plain, 'req/s', 0.95);
      ratioRow('a.auto', 'inline no-op tools/call via Outlast serveHttp, policy auto, tasks declared (req/s)', auto, 'bare SDK McpServer, same tool, toNodeHandler on node:http', plain, 'req/s', 0.95);
      ratioRow('a.strict', 'inline no-op tools/call via Outlast serveHttp, policy never (req/s)', never, 'bare SDK McpServer, same tool, body pre-parsed and passed to toNodeHandler as serveHttp does', parsed, 'req/s', 0.95);
    }
    if (sGet && sCall && ONLY.has('c')) {
      ratioRow('c', 'tasks/get via Outlast, cycling 1,000 working tasks (req/s)', sGet.results.map((r) => r.rps), 'inline no-op tools/call via Outlast', sCall.results.map((r) => r.rps), 'req/s', 0.9);
    }
    if (sGetLegacy && sGet) {
      ratioRow('j', '2025-11-25 tasks/get via Outlast, cycling 1,000 working tasks (req/s)', sGetLegacy.results.map((r) => r.rps), '2026-07-28 tasks/get, same server and tasks', sGet.results.map((r) => r.rps), 'req/s', 0.9);
    }
    if (sBareLegacy && sNeverLegacy) {
      ratioRow('k', 'inline no-op tools/call from a 2025-11-25 client via Outlast serveHttp (req/s)', sNeverLegacy.results.map((r) => r.rps), 'the same request to a bare SDK McpServer (toNodeHandler on node:http)', sBareLegacy.results.map((r) => r.rps), 'req/s', 0.95);
    }
    details.latencyMs = Object.fromEntries(sides.map((s) => [s.name, { p50: round(medianOf(s, 'p50Ms'), 2), p99: round(medianOf(s, 'p99Ms'), 2), rps: round(medianRps(s)) }]));
    const stats = async (ch: Child) => ch.request({ type: 'stats' }, 'stats', 5000);
    const after: Record<string, unknown> = {};
    for (const [k, v] of Object.entries({ outlastNever: a, outlastAuto: aAuto, outlastC: c })) if (v) after[k] = await stats(v.child);
    details.serverStatsAfter = after;
  } finally {
    await Promise.all(owned.map((ch) => ch.kill()));
    removeTempDir(dir);
  }
}

// ---- (b): durable creations -----------------------------------------------------------------------------

async function storeRound(mode: 'raw' | 'park' | 'complete', dir: string, tag: string, profile = false): Promise<any> {
  const db = join(dir, `${mode}-${tag}.db`);
  const execArgv = profile ? [...process.execArgv, '--cpu-prof', `--cpu-prof-dir=${profileDir}`, `--cpu-prof-name=store-${mode}.cpuprofile`] : process.execArgv;
  const child = new Child('store-bench.js', [JSON.stringify({ mode, db, seconds: SECONDS, inflight: INFLIGHT, maxCount: MAX_REQUESTS })], execArgv);
  pin(child.pid, 0);
  try {
    return await child.next('result', SECONDS * 1000 + 120_000);
  } finally {
    await child.exit(); // it exits by itself after reporting (and writes its profile then)
  }
}

/** One Outlast HTTP server for every HTTP creation round (warmed up once; the table grows by a few 10k rows). */
async function httpCreationServer(dir: string): Promise<{ child: Child; url: string; req: WireRequest }> {
  const { child, url } = await startServerChild('server-outlast.js', [JSON.stringify({ db: join(dir, 'http.db'), durability: 'full', tools: ['park'], maxRunningPerPrincipal: 1_000_000 })]);
  const req = toolCall('park');
  const x = await send(url, req);
  if (x.json?.result?.resultType !== 'task') throw new Error(`park over HTTP: ${x.text.slice(0, 300)}`);
  return { child, url, req };
}

async function creations(gen: Child): Promise<void> {
  const dir = tempDir('store');
  let httpServer: Awaited<ReturnType<typeof httpCreationServer>> | undefined;
  try {
    const raw: number[] = [];
    const park: number[] = [];
    const http: number[] = [];
    const life: number[] = [];
    const lifeCreate: number[] = [];
    const extra: Record<string, unknown[]> = { raw: [], park: [], complete: [] };
    const fsInfo = execFileSync('df', ['-T', dir]).toString().trim().split('\n').pop();
    details.storeFileSystem = fsInfo;
    log(`(b) ${ROUNDS} rounds x {raw INSERT, in-process park, HTTP park} (+ in-process complete in ${LIFE_ROUNDS}) x ${SECONDS}s, ${INFLIGHT} in flight (${dir})`);
    httpServer = await httpCreationServer(dir);
    const httpSide = { url: httpServer.url, requests: [httpServer.req], concurrency: INFLIGHT };
    await load(gen, httpSide, WARMUP_SECONDS);
    for (let r = 0; r < ROUNDS; r++) {
      // The life-cycle figure has no target: it runs in the first LIFE_ROUNDS rounds only, to keep the run short.
      const kinds = r < LIFE_ROUNDS ? (['raw', 'park', 'http', 'complete'] as const) : (['raw', 'park', 'http'] as const);
      const order = kinds.map((_, i) => kinds[(i + r) % kinds.length]!);
      const line: string[] = [];
      for (const k of order) {
        if (k === 'http') {
          const res = await load(gen, httpSide, SECONDS);
          http.push(res.rps);
          line.push(`http ${Math.round(res.rps)}/s`);
        } else {
          const res = await storeRound(k, dir, String(r));
          extra[k]!.push(res);
          if (k === 'raw') raw.push(res.rate);
          if (k === 'park') park.push(res.rate);
          if (k === 'complete') {
            life.push(res.rate);
            lifeCreate.push(res.createRate);
          }
          line.push(`${k} ${Math.round(res.rate)}/s`);
        }
      }
      log(`  round ${r + 1}/${ROUNDS}: ${line.join(' | ')}`);
    }
    if (PROFILE) {
      // Extra rounds under the profiler, not counted.
      await httpServer.child.request({ type: 'profile-start' }, 'profile-started');
      const res = await load(gen, httpSide, SECONDS);
      await httpServer.child.request({ type: 'profile-stop', file: profileFile('outlast-http-park') }, 'profile-stopped');
      profiled['outlast-http-park'] = { requests: res.ok, rps: round(res.rps), file: profileFile('outlast-http-park') };
      for (const k of ['park', 'complete'] as const) {
        const r = await storeRound(k, dir, 'profile', true);
        profiled[`store-${k}`] = { count: r.count, rate: round(r.rate), file: join(profileDir, `store-${k}.cpuprofile`), note: 'whole child process, start-up and warm-up included' };
      }
    }
    details.httpCreationServer = await httpServer.child.request({ type: 'stats' }, 'stats', 5000);
    const rawSettings = extra.raw![0] as { synchronous: number; journalMode: string };
    details.rawBaseline = { synchronous: rawSettings.synchronous, journalMode: rawSettings.journalMode, note: 'synchronous 2 = FULL' };
    details.creationRounds = extra;
    ratioRow('b', `durable task creations/s in-process, runtime.call, ${INFLIGHT} in flight, handler parked`, park, 'raw better-sqlite3 INSERT autocommits/s (WAL, FULL)', raw, '/s', 0.5);
    const noop = (details.latencyMs as Record<string, { rps: number }> | undefined)?.['outlast-noop(never)']?.rps;
    ratioRow(
      'b.http',
      `durable task creations/s over HTTP, ${INFLIGHT} concurrent, handler parked`,
      http,
      'raw better-sqlite3 INSERT autocommits/s (WAL, FULL)',
      raw,
      '/s',
      0.5,
      noop ? `for scale: an inline no-op tools/call through Outlast over HTTP ran at ${noop} req/s in (a); creations reach ${round(median(http) / noop, 2)} of that` : undefined,
    );
    ratioRow(
      'b.life',
      `full task life cycles/s in-process (create, run, completed write), ${INFLIGHT} in flight`,
      life,
      'raw better-sqlite3 INSERT autocommits/s (WAL, FULL)',
      raw,
      '/s',
      undefined,
      `creations/s while completing: ${round(median(lifeCreate))}`,
    );
  } finally {
    await httpServer?.child.kill();
    removeTempDir(dir);
  }
}

// ---- (d): memory -----------------------------------------------------------------------------------------

async function memory(): Promise<void> {
  const dir = tempDir('mem');
  try {
    log(`(d) ${MEMORY_WARMUP} warm-up tasks, then 2 x ${MEMORY_TASKS} finished tasks with the poll governor on, then 1 x ${MEMORY_TASKS} with it off`);
    const run = async (pollLimit: boolean, warmup = MEMORY_WARMUP) => {
      const child = new Child('memory.js', [JSON.stringify({ db: join(dir, `mem-${pollLimit}-${warmup}.db`), warmup, tasks: MEMORY_TASKS, inflight: INFLIGHT, pollLimit, second: pollLimit && warmup === MEMORY_WARMUP })], ['--expose-gc']);
      try {
        return await child.next<any>('result', 300_000);
      } finally {
        await child.kill();
      }
    };
    const on = await run(true);
    const off = await run(false);
    const cold = await run(true, MEMORY_COLD_WARMUP);
    const mb = (x: number) => x / (1024 * 1024);
    const [w, f, s] = on.snaps;
    const growth = mb(f.rss - w.rss);
    const next = mb(s.rss - f.rss);
    const newSpace = mb(f.heapSpaces.new_space.physical - w.heapSpaces.new_space.physical);
    const [ow, of] = off.snaps;
    rows.push({
      id: 'd',
      what: `RSS growth after ${MEMORY_TASKS} finished tasks, after gc (defaults: poll governor on)`,
      figure: round(growth, 1),
      unit: 'MB',
      baselineWhat: `RSS after a ${MEMORY_WARMUP}-task warm-up`,
      baseline: round(mb(w.rss), 1),
      target: '< 20 MB',
      pass: growth < 20,
      note:
        `heapUsed ${round(mb(w.heapUsed), 1)} -> ${round(mb(f.heapUsed), 1)} MB (+${round(mb(f.heapUsed - w.heapUsed), 2)}); ` +
        `V8 young generation committed +${round(newSpace, 1)} MB (one-time sizing); ${on.snaps[1].pollBuckets} poll-governor entries; ${round(on.rate)} tasks/s`,
    });
    rows.push({
      id: 'd.next',
      what: `RSS growth over the next ${MEMORY_TASKS} finished tasks (${MEMORY_WARMUP + MEMORY_TASKS} -> ${MEMORY_WARMUP + 2 * MEMORY_TASKS})`,
      figure: round(next, 1),
      unit: 'MB',
      baselineWhat: `RSS after ${MEMORY_WARMUP + MEMORY_TASKS} tasks`,
      baseline: round(mb(f.rss), 1),
      target: '< 20 MB',
      pass: next < 20,
      note: `heapUsed +${round(mb(s.heapUsed - f.heapUsed), 2)} MB`,
    });
    rows.push({
      id: 'd.nolimit',
      what: `RSS growth after ${MEMORY_TASKS} finished tasks with pollLimit: false`,
      figure: round(mb(of.rss - ow.rss), 1),
      unit: 'MB',
      baselineWhat: `RSS after a ${MEMORY_WARMUP}-task warm-up`,
      baseline: round(mb(ow.rss), 1),
      target: 'info',
      note: `heapUsed +${round(mb(of.heapUsed - ow.heapUsed), 2)} MB (vs +${round(mb(f.heapUsed - w.heapUsed), 2)} MB with the governor on)`,
    });
    const [cw, cf] = cold.snaps;
    rows.push({
      id: 'd.cold',
      what: `RSS growth after ${MEMORY_TASKS} finished tasks from a cold process (${MEMORY_COLD_WARMUP}-task warm-up)`,
      figure: round(mb(cf.rss - cw.rss), 1),
      unit: 'MB',
      baselineWhat: `RSS after a ${MEMORY_COLD_WARMUP}-task warm-up`,
      baseline: round(mb(cw.rss), 1),
      target: 'info',
      note:
        `heapUsed +${round(mb(cf.heapUsed - cw.heapUsed), 2)} MB; V8 young generation committed ` +
        `+${round(mb(cf.heapSpaces.new_space.physical - cw.heapSpaces.new_space.physical), 1)} MB (one-time sizing)`,
    });
    details.memory = { governorOn: on, governorOff: off, cold };
  } finally {
    removeTempDir(dir);
  }
}

/** Which Outlast source was measured: the commit, and the files under src/ that differ from it. */
function sourceVersion(): { head?: string; dirtySrc?: string[] } {
  try {
    const head = execFileSync('git', ['-C', root, 'rev-parse', '--short', 'HEAD'], { stdio: ['ignore', 'pipe', 'ignore'] }).toString().trim();
    const dirty = execFileSync('git', ['-C', root, 'status', '--porcelain', '--', 'src'], { stdio: ['ignore', 'pipe', 'ignore'] })
      .toString()
      .split('\n')
      .filter(Boolean)
      .map((l) => l.trim());
    return { head, dirtySrc: dirty };
  } catch {
    return {};
  }
}

// ---- (f)-(i): PostgreSQL and several replicas -------------------------------------------------------------

const pgSchemas = new Set<string>();
function pgSchema(label: string): string {
  const s = `bench_${label}_${process.pid}_${Math.random().toString(36).slice(2, 8)}`;
  pgSchemas.add(s);
  return s;
}
async function dropPgSchemas(): Promise<void> {
  if (pgSchemas.size === 0) return;
  const c = new pg.Client({ connectionString: PG_URL });
  await c.connect();
  try {
    for (const s of pgSchemas) await c.query(`DROP SCHEMA IF EXISTS "${s}" CASCADE`);
  } finally {
    pgSchemas.clear();
    await c.end();
  }
}

async function pgRound(mode: 'raw' | 'park', through?: { url: string; bus: string }, gets = false): Promise<{ rate: number; gets?: { rate: number } }> {
  const cfg = { mode, url: through?.url ?? PG_URL, schema: pgSchema(mode), seconds: SECONDS, inflight: INFLIGHT, pool: PG_POOL, maxCount: MAX_REQUESTS, ...(through ? { bus: through.bus } : {}), ...(gets ? { gets } : {}) };
  const child = new Child('pg-store-bench.js', [JSON.stringify(cfg)]);
  try {
    return await child.next('result', SECONDS * 1000 + 120_000);
  } finally {
    await child.exit(30_000);
    await dropPgSchemas();
  }
}

/** ROUNDS rounds of two sides in alternating order (a, b then b, a): the rates of each, logged per round. */
async function alternatingRates<A extends string, B extends string>(a: A, b: B, round: (side: A | B) => Promise<{ rate: number }>): Promise<Record<A | B, number[]>> {
  const out = { [a]: [] as number[], [b]: [] as number[] } as Record<A | B, number[]>;
  for (let r = 0; r < ROUNDS; r++) {
    const line: string[] = [];
    for (const k of r % 2 ? [b, a] : [a, b]) {
      const res = await round(k);
      out[k].push(res.rate);
      line.push(`${k} ${Math.round(res.rate)}/s`);
    }
    log(`  round ${r + 1}/${ROUNDS}: ${line.join(' | ')}`);
  }
  return out;
}

async function pgCreations(): Promise<void> {
  log(`(f) ${ROUNDS} rounds x {raw pg INSERT, Outlast park} x ${SECONDS}s, ${INFLIGHT} in flight, pool ${PG_POOL} (${PG_URL.replace(/\/\/[^@]*@/, '//')})`);
  const { raw, park } = await alternatingRates('raw', 'park', (k) => pgRound(k));
  ratioRow('f', `durable task creations/s on PostgreSQL in-process, runtime.call, ${INFLIGHT} in flight, pool ${PG_POOL}`, park, `raw pg single-row INSERT commits/s, ${INFLIGHT} in flight, pool ${PG_POOL}`, raw, '/s', 0.6);
}

/** (af), (ag): a PgBouncer (transaction mode, its defaults) and a Redis of the bench's own, stopped by pid after `fn`. */
async function withPooler(fn: (bouncer: PgBouncer, redis: RedisServer) => Promise<void>): Promise<void> {
  const dir = tempDir('pgbouncer');
  try {
    const bouncer = await startPgBouncer(PG_URL, dir);
    const redis = await startRedis();
    await fn(bouncer, redis);
  } finally {
    await stopAllServices();
    await dropPgSchemas();
    removeTempDir(dir);
  }
}

async function poolerCreations(): Promise<void> {
  await withPooler(async (bouncer) => {
    log(`(af) ${ROUNDS} rounds x {direct, through PgBouncer transaction mode} x ${SECONDS}s of creations then ${SECONDS}s of tasks/get on them, Outlast park, ${INFLIGHT} in flight, pool ${PG_POOL}`);
    const gets = { direct: [] as number[], pooled: [] as number[] };
    const { direct, pooled } = await alternatingRates('direct', 'pooled', async (k) => {
      const r = await pgRound('park', k === 'pooled' ? { url: bouncer.through(PG_URL), bus: PG_URL } : undefined, true);
      gets[k].push(r.gets!.rate);
      log(`    ${k} tasks/get ${Math.round(r.gets!.rate)}/s`);
      return r;
    });
    ratioRow('af', `durable task creations/s on PostgreSQL through PgBouncer 1.18 (transaction mode, its defaults; --bus direct), ${INFLIGHT} in flight, pool ${PG_POOL}`, pooled,
      'the same, directly (named prepared statements)', direct, '/s', undefined);
    ratioRow('af.get', `tasks/get/s (runtime.getTask of a random task just created) on PostgreSQL through the same PgBouncer, ${INFLIGHT} in flight, pool ${PG_POOL}`, gets.pooled,
      'the same, directly (named prepared statements), same rounds', gets.direct, '/s', undefined);
  });
}

async function poolerLatency(): Promise<void> {
  await withPooler(async (bouncer, redis) => {
    for (const [id, bus, label] of [['ag.pg', PG_URL, '--bus direct PostgreSQL'], ['ag.redis', redis.url, '--bus Redis']] as const) {
      const dir = tempDir('cluster');
      try {
        log(`(${id}) two replicas through PgBouncer, ${label}: ${CANCELS} cancels, ${TICKS} pushed status changes`);
        const r = await latency(`${bouncer.through(PG_URL)}?schema=${pgSchema('pooled')}`, join(dir, 'log.jsonl'), CANCELS, TICKS, log, ['--bus', bus]);
        latencyRow(`${id}.cancel`, `cross-replica cancel through PgBouncer, ${label}: tasks/cancel sent to B -> AbortSignal fires on A`, r.cancel);
        latencyRow(`${id}.push`, `cross-replica push through PgBouncer, ${label}: status committed on A -> notifications/tasks read on B`, r.push);
      } finally {
        removeTempDir(dir);
      }
    }
  });
}

function latencyRow(id: string, what: string, s: { n: number; p50: number; p99: number; max: number }): void {
  rows.push({ id, what, figure: round(s.p99, 2), unit: 'ms p99', target: 'p99 < 20 ms', pass: s.p99 < 20, note: `p50 ${round(s.p50, 2)} ms, max ${round(s.max, 2)} ms, n = ${s.n}` });
}

async function crossReplica(): Promise<void> {
  const dir = tempDir('cluster');
  try {
    log(`(g) two replicas on one schema: ${CANCELS} cancels, ${TICKS} pushed status changes`);
    const r = await latency(`${PG_URL}?schema=${pgSchema('latency')}`, join(dir, 'log.jsonl'), CANCELS, TICKS, log);
    latencyRow('g.cancel', 'cross-replica cancel: tasks/cancel sent to replica B -> AbortSignal fires in the handler on A', r.cancel);
    latencyRow('g.push', 'cross-replica push: status committed on A -> notifications/tasks read by a listen client of B', r.push);
  } finally {
    await dropPgSchemas();
    removeTempDir(dir);
  }
}

async function takeovers(): Promise<void> {
  const dir = tempDir('takeover');
  try {
    log(`(h) ${TAKEOVER_ROUNDS} rounds x {SIGKILL, SIGSTOP} of a replica running ${TAKEOVER_TASKS} tasks; lease ${LEASE_MS} ms, heartbeat ${HEARTBEAT_MS} ms`);
    const r = await takeover(`${PG_URL}?schema=${pgSchema('takeover')}`, join(dir, 'log.jsonl'), LEASE_MS, HEARTBEAT_MS, TAKEOVER_TASKS, TAKEOVER_ROUNDS, log);
    const bound = LEASE_MS + HEARTBEAT_MS;
    for (const [signal, xs] of Object.entries(r)) {
      const m = median(xs);
      rows.push({
        id: `h.${signal === 'SIGKILL' ? 'kill' : 'stop'}`,
        what: `takeover after ${signal} of the owner: until all ${TAKEOVER_TASKS} of its tasks run on another replica (median of rounds)`,
        figure: round(m),
        unit: 'ms',
        baselineWhat: 'configured lease',
        baseline: LEASE_MS,
        ratio: round(m / LEASE_MS, 3),
        target: `<= lease + heartbeat (${bound} ms)`,
        pass: Math.max(...xs) <= bound,
        rounds: xs.map((x) => round(x)),
        note: signal === 'SIGKILL' ? 'same host: the dead pid is seen at the next heartbeat of a peer; across hosts this is the SIGSTOP figure' : 'paused process: detected only by its lease',
      });
    }
  } finally {
    await dropPgSchemas();
    removeTempDir(dir);
  }
}

async function getAtScaleRow(gen: Child): Promise<void> {
  log(`(i) tasks/get against 1,000 vs ${BIG_TASKS.toLocaleString('en-US')} stored tasks, ${ROUNDS} rounds x ${SECONDS}s, concurrency ${CONCURRENCY}`);
  try {
    const r = await getAtScale(PG_URL, { small: pgSchema('get1k'), big: pgSchema('getbig') }, { small: 1000, big: BIG_TASKS },
      (side, seconds) => load(gen, side, seconds), { rounds: ROUNDS, seconds: SECONDS, warmup: WARMUP_SECONDS, concurrency: CONCURRENCY, distinct: 20_000 }, log);
    const p99 = (xs: Array<{ p99Ms: number }>) => xs.map((x) => x.p99Ms);
    const big = median(p99(r.big));
    const small = median(p99(r.small));
    rows.push({
      id: 'i',
      what: `tasks/get p99 over HTTP, ${BIG_TASKS.toLocaleString('en-US')} tasks stored`,
      figure: round(big, 2),
      unit: 'ms',
      baselineWhat: 'the same with 1,000 tasks stored',
      baseline: round(small, 2),
      ratio: round(big / small, 3),
      target: 'ratio <= 2',
      pass: big / small <= 2,
      rounds: p99(r.big).map((x) => round(x, 2)),
      baselineRounds: p99(r.small).map((x) => round(x, 2)),
      note: `p50 ${round(median(r.big.map((x) => x.p50Ms)), 2)} vs ${round(median(r.small.map((x) => x.p50Ms)), 2)} ms; ${Math.round(median(r.big.map((x) => x.rps)))} vs ${Math.round(median(r.small.map((x) => x.rps)))} req/s`,
    });
  } finally {
    await dropPgSchemas();
  }
}

// ---- (r)-(u): polling at the speed of the store; (v): sustained load ----------------------------------------

async function polling(gen: Child): Promise<void> {
  const dir = tempDir('polling');
  try {
    const r = await pollingAtStoreSpeed({
      only: ONLY,
      concurrency: CONCURRENCY,
      dir,
      pgUrl: PG_URL,
      pgSchema,
      startServer: startServerChild,
      alternate: (sides, seconds) => alternate(gen, sides as Side[], seconds),
      slowSeconds: SLOW_SECONDS,
      log,
    });
    rows.push(...r.rows);
    details.latencyMs = { ...(details.latencyMs as object | undefined), ...r.latencyMs };
  } finally {
    await dropPgSchemas();
    removeTempDir(dir);
  }
}

async function frontBench(gen: Child): Promise<void> {
  const dir = tempDir('front');
  const owned: Child[] = [];
  try {
    rows.push(
      ...(await frontRows({
        only: ONLY,
        concurrency: CONCURRENCY,
        dir,
        startServer: async (file, args) => {
          const s = await startServerChild(file, args);
          owned.push(s.child);
          return s;
        },
        alternate: (sides, seconds) => alternate(gen, sides as Side[], seconds),
        burst: async (url, requests, count) => {
          const r = await gen.request<LoadResult>({ type: 'run', url, requests, concurrency: CONCURRENCY, seconds: 600, maxRequests: count }, 'result', 660_000);
          if (r.errors > 0) throw new Error(`burst on ${url}: ${r.errors} errors; first: ${r.firstError}`);
        },
        log,
      })),
    );
  } finally {
    await Promise.all(owned.map((c) => c.kill()));
    removeTempDir(dir);
  }
}

/** (ad), (ae): the gateway in front of server-everything (bench/gateway-rows.ts). */
async function gatewayBench(gen: Child): Promise<void> {
  const dir = tempDir('gateway');
  try {
    rows.push(
      ...(await gatewayRows({
        only: ONLY,
        concurrency: CONCURRENCY,
        dir,
        pool: process.env.BENCH_GATEWAY_POOL ? Math.round(envNumber('BENCH_GATEWAY_POOL', 4)) : undefined,
        startServer: startServerChild,
        alternate: (sides, seconds) => alternate(gen, sides as Side[], seconds),
        log,
      })),
    );
  } finally {
    removeTempDir(dir);
  }
}

async function sustained(gen: Child): Promise<void> {
  const dir = tempDir('soak');
  try {
    log(`(v) ${SOAK_REQUESTS.toLocaleString('en-US')} mixed requests per server in segments of ${SOAK_SEGMENT.toLocaleString('en-US')}, concurrency ${SOAK_CONCURRENCY}, --max-old-space-size=${SOAK_HEAP_MB}`);
    const r = await soak(gen, { requests: SOAK_REQUESTS, segment: SOAK_SEGMENT, concurrency: SOAK_CONCURRENCY, heapMb: SOAK_HEAP_MB, dir, log });
    rows.push(...r.rows);
    details.soak = r.details;
  } finally {
    removeTempDir(dir);
  }
}

// ---- report ----------------------------------------------------------------------------------------------

function pad(s: string, n: number, right = false): string {
  return right ? s.padStart(n) : s.padEnd(n);
}

function report(startedAt: number): void {
  const fmt = (x: number | undefined) => (x === undefined ? '-' : Number.isInteger(x) ? x.toLocaleString('en-US') : String(x));
  const header = ['id', 'figure', 'baseline', 'ratio', 'target', 'result'];
  const lines = rows.map((r) => [
    r.id,
    `${fmt(r.figure)} ${r.unit}`,
    r.baseline === undefined ? '-' : `${fmt(r.baseline)}${r.unit === 'MB' ? ' MB' : ''}`,
    r.ratio === undefined ? '-' : r.ratio.toFixed(3),
    r.target,
    r.pass === undefined ? 'info' : r.pass ? 'PASS' : 'MISS',
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...lines.map((l) => l[i]!.length)));
  const out: string[] = [];
  out.push('');
  out.push(`Outlast bench: ${ROUNDS} rounds x ${SECONDS}s per side, HTTP concurrency ${CONCURRENCY}, ${INFLIGHT} creations in flight; medians, ratio of medians`);
  out.push(header.map((h, i) => pad(h, widths[i]!, i > 0 && i < 4)).join('  '));
  out.push(widths.map((w) => '-'.repeat(w)).join('  '));
  for (const l of lines) out.push(l.map((c, i) => pad(c, widths[i]!, i > 0 && i < 4)).join('  '));
  out.push('');
  for (const r of rows) {
    out.push(`${r.id}: ${r.what}${r.baselineWhat ? `  vs  ${r.baselineWhat}` : ''}`);
    if (r.rounds) out.push(`    rounds: ${r.rounds.join(', ')}${r.baselineRounds ? `  |  baseline: ${r.baselineRounds.join(', ')}` : ''}`);
    if (r.note) out.push(`    ${r.note}`);
  }
  if (details.latencyMs) {
    out.push('latency (median of rounds), ms:');
    for (const [k, v] of Object.entries(details.latencyMs as Record<string, { p50: number; p99: number }>)) out.push(`    ${k}: p50 ${v.p50}, p99 ${v.p99}`);
  }
  const src = details.source as { head?: string; dirtySrc?: string[] };
  out.push(`source: ${src.head ?? '?'}${src.dirtySrc?.length ? ` + uncommitted ${src.dirtySrc.join(', ')}` : ''}; total ${round((Date.now() - startedAt) / 1000, 1)} s`);
  process.stdout.write(out.join('\n') + '\n');

  const dir = join(root, 'bench-results');
  mkdirSync(dir, { recursive: true });
  const json = {
    at: new Date(startedAt).toISOString(),
    seconds: round((Date.now() - startedAt) / 1000, 1),
    machine: { cpus: cpus().length, cpu: cpus()[0]?.model, memGiB: round(totalmem() / 2 ** 30, 1), node: process.version, platform: process.platform },
    settings: { SECONDS, ROUNDS, CONCURRENCY, INFLIGHT, MAX_REQUESTS, MEMORY_TASKS, MEMORY_WARMUP, PIN, only: [...ONLY] },
    rows,
    details,
  };
  writeFileSync(join(dir, 'latest.json'), JSON.stringify(json, null, 2) + '\n');
  log(`wrote ${join(dir, 'latest.json')}`);
}

async function main(): Promise<void> {
  const startedAt = Date.now();
  details.source = sourceVersion();
  if (PROFILE) mkdirSync(profileDir, { recursive: true });
  const gen = new Child('load.js');
  await gen.next('ready', 30_000);
  pin(gen.pid, 1);
  try {
    if (['a', 'c', 'j', 'k'].some((x) => ONLY.has(x))) await httpThroughput(gen);
    if (ONLY.has('b')) await creations(gen);
    if (ONLY.has('d')) await memory();
    if (ONLY.has('e')) rows.push(...(await clientBench(log))); // the client's overhead (bench/client-bench.ts)
    if (ONLY.has('f')) await pgCreations();
    if (ONLY.has('g')) await crossReplica();
    if (ONLY.has('af')) await poolerCreations();
    if (ONLY.has('ag')) await poolerLatency();
    if (ONLY.has('h')) await takeovers();
    if (ONLY.has('i')) await getAtScaleRow(gen);
    const queue: QueueBenchConfig = {
      pgUrl: PG_URL,
      rounds: ROUNDS,
      tasks: Math.round(envNumber('BENCH_QUEUE_TASKS', 2000)),
      samples: Math.round(envNumber('BENCH_QUEUE_SAMPLES', 200)),
      schema: pgSchema,
      dropSchemas: dropPgSchemas,
      log,
    };
    if (ONLY.has('n')) rows.push(...(await stepCommits({ pgUrl: PG_URL, rounds: ROUNDS, seconds: SECONDS, schema: pgSchema, dropSchemas: dropPgSchemas, log })));
    if (ONLY.has('n.dbos')) rows.push(...(await dbosSteps({ pgUrl: PG_URL, rounds: ROUNDS, seconds: SECONDS, schema: pgSchema, dropSchemas: dropPgSchemas, log })));
    if (ONLY.has('o')) {
      rows.push(...(await parkedResume({ pgUrl: PG_URL, samples: Math.round(envNumber('BENCH_PARK_SAMPLES', 200)), schema: pgSchema, dropSchemas: dropPgSchemas, log })));
      rows.push(...(await parkedMemory({ tasks: Math.round(envNumber('BENCH_PARKED_TASKS', 1000)), log })));
    }
    if (ONLY.has('p')) rows.push(...(await queueStarts(queue)));
    if (ONLY.has('q')) rows.push(...(await queueLatency(queue)));
    if (['r', 's', 't', 'u'].some((x) => ONLY.has(x))) await polling(gen);
    if (ONLY.has('v')) await sustained(gen);
    if (ONLY.has('w') || ONLY.has('x') || ONLY.has('x.stateful')) await frontBench(gen);
    if (ONLY.has('y')) await oauthThroughput(gen);
    if (ONLY.has('ad') || ONLY.has('ae') || ONLY.has('ad.peer')) await gatewayBench(gen);
    // (z) and (z.load): MCP Events webhooks (bench/events-bench.ts).
    if (ONLY.has('z')) rows.push(await eventsLatency({ tasks: envNumber('BENCH_EVENT_TASKS', 500), warmup: envNumber('BENCH_EVENT_WARMUP', 50), pgUrl: PG_URL, schema: pgSchema('events'), inflight: 8 }, log));
    if (ONLY.has('z.load')) rows.push(await eventsLoad({ seconds: SECONDS, rounds: ROUNDS, inflight: 8, dir: tempDir('zload'), matching: false }, log));
    if (ONLY.has('z.load.fanout')) rows.push(await eventsLoad({ seconds: SECONDS, rounds: ROUNDS, inflight: 8, dir: tempDir('zload'), matching: true }, log));
    // (aa)-(ac): task output (bench/output-rows.ts). PostgreSQL pools are kept small (4).
    if (ONLY.has('aa') || ONLY.has('aa.pg')) {
      const backends = [...(ONLY.has('aa') ? (['sqlite'] as const) : []), 'postgres' as const];
      rows.push(...(await outputCost({ rounds: ROUNDS, seconds: SECONDS, inflight: 16, pool: 4, pgUrl: PG_URL, backends }, log)));
    }
    if (ONLY.has('ab')) rows.push(...(await outputPush({ pgUrl: PG_URL, items: Math.round(envNumber('BENCH_OUTPUT_PUSH', 500)), everyMs: 10 }, log)));
    const outputItems = Math.round(envNumber('BENCH_OUTPUT_ITEMS', 100_000));
    if (ONLY.has('ac')) rows.push(...(await outputVolume({ backend: 'sqlite', items: outputItems, pgUrl: PG_URL, pool: 4 }, log)));
    if (ONLY.has('ac.pg')) rows.push(...(await outputVolume({ backend: 'postgres', items: outputItems, pgUrl: PG_URL, pool: 4 }, log)));
    // (l) and (m): the operations side (bench/dashboard-scale.ts, bench/ops-overhead.ts).
    if (ONLY.has('l')) {
      rows.push(...(await dashboardScale({ small: 1000, big: BIG_TASKS, rounds: ROUNDS, seconds: SECONDS, concurrency: 2, pgUrl: PG_URL, backends: ['sqlite', 'postgres'] }, log)));
    }
    if (ONLY.has('m')) {
      rows.push(...(await opsOverhead({ rounds: ROUNDS, seconds: SECONDS, inflight: INFLIGHT, pool: PG_POOL, maxCount: MAX_REQUESTS, pgUrl: PG_URL, backends: ['sqlite', 'postgres'] }, log)));
    }
  } finally {
    await gen.kill();
    await dropPgSchemas().catch((e) => log(`could not drop the bench schemas: ${(e as Error).message}`));
  }
  if (PROFILE) details.profiles = profiled;
  report(startedAt);
}

main()
  .then(() => {
    cleanupAll();
    process.exit(0);
  })
  .catch((e) => {
    process.stderr.write(`[bench] failed: ${e instanceof Error ? e.stack ?? e.message : String(e)}\n`);
    cleanupAll();
    process.exit(1);
  });
