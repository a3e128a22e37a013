/**
 * (w) and (x): Outlast in an existing app, and side by side with its peer.
 *   (w) tasks/get through outlastHandler on node:http (serveHttp is a thin listener over it) vs bare node:http doing
 *       one better-sqlite3 primary-key read per request, on the same 1,000 working tasks. Target >= 0.9 (issue 30;
 *       and the server's CPU per request at most 1.25x the read's, cpuRatio in latest.json).
 *   (w.express) the same tasks/get with outlastHandler mounted in Express 5, same baseline. Target >= 0.7.
 *       w.express-floor (info): the raw read mounted in Express, against the same read on node:http: what Express
 *       costs whoever is mounted; w.express-own: Outlast in Express against that (Outlast's own cost there), >= 0.9.
 *   (w.inline) an inline no-op tools/call through outlastHandler in Express vs a bare SDK server mounted in Express the
 *       same way (toNodeHandler on app.all('/mcp')). Target >= 0.95.
 *   (x) task creations/s on the 2025-11-25 wire (task-augmented tools/call of a tool whose task completes at once):
 *       Outlast durable on SQLite (WAL, synchronous=FULL) vs the SDK v1 experimental tasks server (McpServer with
 *       the tasks capability and its InMemoryTaskStore, stateless). Target >= 2.0 (issue 43; 1.2 and at most 0.8 of the
 *       peer's CPU per creation since issue 30).
 *   (x.stateful) the same creations against the peer most servers run: the SDK v1 tasks server keeping a server and
 *       transport per session (one session per concurrent client, answers on SSE, its defaults). Target >= 1.0
 *       (issue 43; and at most the peer's CPU per creation).
 *   (x.get) 2025-11-25 tasks/get req/s over 1,000 working tasks each, same two servers. Target >= 1.0.
 *   (x.mem) RSS after 10,000 finished tasks, each server fresh: reported for both (no target).
 * Each server is its own process; the sides of a row run in one rotation of rounds (run.ts `alternate`).
 */
import { join } from 'node:path';
import { legacyWire, openSession, round, send, tasksGet, toolCall, type BenchRow, type Child, type WireRequest } from './common.js';
import { row, type PollingSide } from './polling.js';

export type FrontSide = PollingSide;

export interface FrontEnv {
  only: Set<string>;
  concurrency: number;
  dir: string;
  startServer(file: string, args: string[]): Promise<{ child: Child; url: string }>;
  alternate(sides: FrontSide[], seconds?: number): Promise<void>;
  /** Sends `count` requests at the given concurrency (the load generator), for (x.mem). */
  burst(url: string, requests: WireRequest[], count: number): Promise<void>;
  log(m: string): void;
}

const TASKS = 1000;
const MEM_TASKS = 10_000;

async function parkTasks(url: string, request: WireRequest, legacy: boolean): Promise<WireRequest[]> {
  const ids: string[] = [];
  for (let i = 0; i < TASKS; i++) {
    const r = await send(url, request);
    const taskId = legacy ? r.json?.result?.task?.taskId : r.json?.result?.taskId;
    if (typeof taskId !== 'string') throw new Error(`park on ${url}: ${r.text.slice(0, 300)}`);
    ids.push(taskId);
  }
  const get = (id: string) => (legacy ? legacyWire('tasks/get', { taskId: id }) : tasksGet(id));
  const check = await send(url, get(ids[0]!));
  if (check.json?.result?.status !== 'working') throw new Error(`tasks/get on ${url}: ${check.text.slice(0, 300)}`);
  return ids.map(get);
}

/** `request` once per session of `n` opened on a stateful 2025-11-25 server, each naming its own (clients are pinned). */
async function inSessions(url: string, request: WireRequest, n: number): Promise<WireRequest[]> {
  const out: WireRequest[] = [];
  for (let i = 0; i < n; i++) out.push({ headers: { ...request.headers, ...(await openSession(url, { tasks: { requests: { tools: { call: {} } } } })) }, body: request.body });
  return out;
}

const stats = (c: Child) => c.request<{ rss: number }>({ type: 'stats' }, 'stats', 10_000);

export async function frontRows(env: FrontEnv): Promise<BenchRow[]> {
  const rows: BenchRow[] = [];
  const side = (server: { child: Child; url: string }, name: string, requests: WireRequest[]): FrontSide => ({ name, child: server.child, url: server.url, requests, concurrency: env.concurrency, results: [] });
  const outlast = (cfg: Record<string, unknown>) => env.startServer('server-outlast.js', [JSON.stringify({ pollLimit: false, ...cfg })]);

  if (env.only.has('w')) {
    const [node, inExpress, callExpress, bareExpress] = await Promise.all([
      // 1,000 running tasks (past the default per-principal share, 256 of one principal, which would queue the rest).
      outlast({ db: join(env.dir, 'w.db'), tools: ['park'], maxRunningPerPrincipal: TASKS }),
      outlast({ db: join(env.dir, 'w-express.db'), tools: ['park'], front: 'express', maxRunningPerPrincipal: TASKS }),
      outlast({ db: join(env.dir, 'w-inline.db'), tools: ['noop:never'], front: 'express' }),
      env.startServer('server-bare.js', ['express']),
    ]);
    const owned = [node, inExpress, callExpress, bareExpress];
    try {
      const gets = await parkTasks(node.url, toolCall('park'), false);
      const getsExpress = await parkTasks(inExpress.url, toolCall('park'), false);
      const read = await env.startServer('server-read.js', [JSON.stringify({ sqlite: join(env.dir, 'w.db') })]);
      const readExpress = await env.startServer('server-read.js', [JSON.stringify({ sqlite: join(env.dir, 'w.db'), express: true })]);
      owned.push(read, readExpress);
      for (const s of [callExpress, bareExpress]) {
        const r = await send(s.url, toolCall('noop'));
        if (r.json?.result?.content?.[0]?.text !== 'ok') throw new Error(`noop on ${s.url}: ${r.text.slice(0, 300)}`);
      }
      const w = side(node, 'tasks/get, outlastHandler on node:http', gets);
      const wExpress = side(inExpress, 'tasks/get, outlastHandler in Express', getsExpress);
      const floor = side(read, 'bare node:http + one SQLite primary-key read', gets);
      const expressFloor = side(readExpress, 'Express 5 + one SQLite primary-key read', gets);
      env.log(`(w) tasks/get over ${TASKS} working tasks, concurrency ${env.concurrency}`);
      await env.alternate([w, wExpress, floor, expressFloor]);
      const inline = side(callExpress, 'inline tools/call, outlastHandler in Express', [toolCall('noop')]);
      const bare = side(bareExpress, 'inline tools/call, bare SDK in Express', [toolCall('noop')]);
      env.log('(w.inline) inline no-op tools/call, both in Express');
      await env.alternate([inline, bare]);
      rows.push(row('w', 'tasks/get through outlastHandler on node:http (req/s)', w, 'bare node:http, one better-sqlite3 primary-key read per request', floor, 0.9));
      rows.push(row('w.express', 'tasks/get through outlastHandler mounted in Express 5 (req/s)', wExpress, 'bare node:http, one better-sqlite3 primary-key read per request', floor, 0.7));
      rows.push(row('w.express-floor', 'Express 5 alone: one SQLite primary-key read per request, mounted in Express (req/s)', expressFloor, 'the same read on bare node:http', floor, undefined));
      rows.push(row('w.express-own', 'tasks/get through outlastHandler in Express 5 (req/s)', wExpress, 'Express 5 + one SQLite primary-key read (what Express costs either way)', expressFloor, 0.9));
      rows.push(row('w.inline', 'inline no-op tools/call through outlastHandler in Express 5 (req/s)', inline, 'bare SDK McpServer, toNodeHandler mounted in Express 5 the same way', bare, 0.95));
    } finally {
      await Promise.all(owned.map((s) => s.child.kill()));
    }
  }

  if (env.only.has('x.stateful')) {
    const create = legacyWire('tools/call', { name: 'quick', arguments: {}, task: {} });
    const [ours, peer] = await Promise.all([outlast({ db: join(env.dir, 'x-stateful.db'), tools: ['quick'] }), env.startServer('server-peer-v1.js', ['stateful'])]);
    try {
      const creates = await inSessions(peer.url, create, env.concurrency);
      for (const [url, r] of [[ours.url, create], [peer.url, creates[0]!]] as const) {
        const got = await send(url, r);
        if (typeof got.json?.result?.task?.taskId !== 'string') throw new Error(`quick task on ${url}: ${got.status} ${got.text.slice(0, 300)}`);
      }
      const a = side(ours, 'task creations, Outlast durable on SQLite', [create]);
      const b: FrontSide = { ...side(peer, 'task creations, SDK v1 experimental tasks, a server per session (InMemoryTaskStore)', creates), pinned: true };
      env.log(`(x.stateful) task creations/s, 2025-11-25 wire, the peer keeping ${env.concurrency} sessions`);
      await env.alternate([a, b]);
      const r = row('x.stateful', 'task creations/s, Outlast durable on SQLite (WAL, synchronous=FULL), 2025-11-25 wire', a, 'SDK v1 McpServer with experimental.tasks and its InMemoryTaskStore, a server and transport kept per session (its defaults)', b, 1.0);
      rows.push(r);
    } finally {
      await Promise.all([ours, peer].map((s) => s.child.kill()));
    }
  }

  if (env.only.has('x')) {
    const create = legacyWire('tools/call', { name: 'quick', arguments: {}, task: {} });
    const park = legacyWire('tools/call', { name: 'park', arguments: {}, task: {} });
    const [ours, peer] = await Promise.all([outlast({ db: join(env.dir, 'x.db'), tools: ['park', 'quick'] }), env.startServer('server-peer-v1.js', [])]);
    try {
      for (const s of [ours, peer]) {
        const r = await send(s.url, create);
        if (typeof r.json?.result?.task?.taskId !== 'string') throw new Error(`quick task on ${s.url}: ${r.status} ${r.text.slice(0, 300)}`);
      }
      const a = side(ours, 'task creations, Outlast durable on SQLite', [create]);
      const b = side(peer, 'task creations, SDK v1 experimental tasks (InMemoryTaskStore)', [create]);
      env.log('(x) task creations/s, 2025-11-25 wire');
      await env.alternate([a, b]);
      rows.push(row('x', 'task creations/s, Outlast durable on SQLite (WAL, synchronous=FULL), 2025-11-25 wire', a, 'SDK v1 McpServer with experimental.tasks and its InMemoryTaskStore, same wire and tool', b, 2.0));
      const getsOurs = await parkTasks(ours.url, park, true);
      const getsPeer = await parkTasks(peer.url, park, true);
      const ga = side(ours, 'tasks/get, Outlast', getsOurs);
      const gb = side(peer, 'tasks/get, SDK v1 experimental tasks', getsPeer);
      env.log(`(x.get) 2025-11-25 tasks/get over ${TASKS} working tasks each`);
      await env.alternate([ga, gb]);
      rows.push(row('x.get', 'tasks/get req/s (2025-11-25), Outlast on SQLite', ga, 'SDK v1 experimental tasks server, InMemoryTaskStore', gb, 1.0));
    } finally {
      await Promise.all([ours, peer].map((s) => s.child.kill()));
    }

    // (x.mem): fresh servers, 10,000 tasks each, finished.
    const [oursMem, peerMem] = await Promise.all([outlast({ db: join(env.dir, 'x-mem.db'), tools: ['quick'] }), env.startServer('server-peer-v1.js', [])]);
    try {
      const mb = (n: number) => round(n / 2 ** 20, 1);
      const before = { ours: (await stats(oursMem.child)).rss, peer: (await stats(peerMem.child)).rss };
      env.log(`(x.mem) ${MEM_TASKS} finished tasks on each`);
      await env.burst(oursMem.url, [create], MEM_TASKS);
      await env.burst(peerMem.url, [create], MEM_TASKS);
      const afterOurs = (await stats(oursMem.child)).rss;
      const afterPeer = (await stats(peerMem.child)).rss;
      rows.push({
        id: 'x.mem',
        what: `RSS after ${MEM_TASKS.toLocaleString('en-US')} finished tasks, Outlast durable on SQLite`,
        figure: mb(afterOurs),
        unit: 'MB',
        baselineWhat: 'the SDK v1 experimental tasks server (InMemoryTaskStore keeps every task in memory until its ttl)',
        baseline: mb(afterPeer),
        ratio: round(afterOurs / afterPeer, 3),
        target: 'info',
        note: `growth from start ${mb(afterOurs - before.ours)} MB vs ${mb(afterPeer - before.peer)} MB (start ${mb(before.ours)} vs ${mb(before.peer)} MB)`,
      });
    } finally {
      await Promise.all([oursMem, peerMem].map((s) => s.child.kill()));
    }
  }
  return rows;
}
