/**
 * (v) Sustained load: `outlast serve` processes started as a load test would start them
 * (`node --max-old-space-size=128`), each sent N mixed requests (discovery, listings, inline tools/call, tasks/get,
 * bad input) in segments; after each segment the server runs full GCs and reports its heap (bench/heap-probe.js,
 * preloaded). A server passes when it survives and its heap after GC grows by less than 5 MB between the first
 * segment and the last. v.zod (bench/app-module.ts) registers Zod tools, a completable prompt and a resource
 * template per request; the control (bench/leaky-module.ts) builds fromJsonSchema tools per request.
 */
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { benchFile, round, send, serve, toolCall, wire, type BenchRow, type Child, type Served, type WireRequest } from './common.js';

export interface SoakOptions {
  requests: number;
  segment: number;
  concurrency: number;
  /** Heap limit each server is started with (MB). */
  heapMb: number;
  dir: string;
  log: (m: string) => void;
}

export type HeapReading = { heapUsed: number; heapTotal: number; rss: number; external: number; gc: boolean };

export function heap(s: Served): Promise<HeapReading> {
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => done(new Error('heap probe: no answer in 30 s')), 30_000);
    const onMsg = (m: { type?: string } & HeapReading) => m?.type === 'heap' && done(null, m);
    const onExit = () => done(new Error('the server exited'));
    const done = (e: Error | null, m?: HeapReading) => {
      clearTimeout(t);
      s.proc.off('message', onMsg);
      s.proc.off('exit', onExit);
      if (e) reject(e);
      else resolve(m!);
    };
    s.proc.on('message', onMsg);
    s.proc.once('exit', onExit);
    s.proc.send({ type: 'heap' });
  });
}

/** A raw request with a body that is not JSON. */
const garbage = (): WireRequest => ({ ...wire('tools/list', {}), body: '{"jsonrpc":"2.0","id":1,"method":' });
/** tools/call without the `_meta` envelope (-32602, HTTP 400). */
const noMeta = (tool: string): WireRequest => {
  const r = toolCall(tool);
  const body = JSON.parse(r.body);
  delete body.params._meta;
  return { headers: r.headers, body: JSON.stringify(body) };
};
const getTask = (taskId: string, tasks = true): WireRequest => wire('tasks/get', { taskId }, { tasks, name: taskId });

/** The mix a server gets, cycled: one pass per task id (its tasks/get), the rest the same every pass. */
function mix(taskIds: string[], calls: WireRequest[]): WireRequest[] {
  const out: WireRequest[] = [];
  for (const id of taskIds.length ? taskIds : ['none']) {
    out.push(wire('server/discover', {}), wire('tools/list', {}), ...calls);
    if (taskIds.length) out.push(getTask(id));
    out.push(garbage(), noMeta(calls.length ? JSON.parse(calls[0]!.body).params.name : 'x'), getTask('AAAAAAAAAAAAAAAAAAAAAA'), getTask(id, false), toolCall('no_such_tool'));
  }
  return out;
}

interface Target {
  id: string;
  what: string;
  module: string;
  /** Creates the tasks its tasks/get will read; returns their ids. */
  seed(url: string): Promise<string[]>;
  calls: WireRequest[];
  /** A control: expected to fail; reported, never a MISS. */
  control?: boolean;
}

async function createTasks(url: string, n: number, req: WireRequest): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < n; i++) {
    const r = await send(url, req);
    if (r.json?.result?.resultType !== 'task') throw new Error(`soak seed on ${url}: ${r.text.slice(0, 300)}`);
    ids.push(r.json.result.taskId);
  }
  return ids;
}

export async function soak(gen: Child, o: SoakOptions): Promise<{ rows: BenchRow[]; details: Record<string, unknown> }> {
  const root = join(benchFile('.'), '..');
  const targets: Target[] = [
    {
      id: 'v.fixtures',
      what: 'the fixture server (every conformance fixture: 30 plain SDK tools defined once, 12 Outlast tools, prompts, resources)',
      module: join(root, 'fixtures', 'server.js'),
      seed: (url) => createTasks(url, 100, toolCall('failing_job')),
      calls: [toolCall('test_simple_text'), toolCall('json_schema_2020_12_tool', { name: 'n', contactMethod: 'email', email: 'a@b.c' }), toolCall('greet', { name: 'soak' }), wire('prompts/list', {})],
    },
    {
      id: 'v.demo',
      what: 'the demo server (reindex, run_pipeline, migrate)',
      module: join(root, 'demo', 'server.js'),
      seed: (url) => createTasks(url, 50, toolCall('migrate', { database: 'orders', migration: '042_region' })),
      calls: [toolCall('reindex', { collection: 'soak', documents: 0 })],
    },
    {
      id: 'v.zod',
      what: 'a module registering per request (in register) 40 Zod tools, a prompt with a completable argument and a resource template',
      module: benchFile('app-module.js'),
      seed: async () => [],
      calls: [
        toolCall('search_0', { query: 'soak' }),
        wire('prompts/get', { name: 'summarise', arguments: { collection: 'orders' } }, { name: 'summarise' }),
        wire('resources/read', { uri: 'records://7' }, { name: 'records://7' }),
      ],
    },
    {
      id: 'v.control',
      what: 'control: five fromJsonSchema() tools built inside register (per request), as the README says not to',
      module: benchFile('leaky-module.js'),
      seed: async () => [],
      calls: [toolCall('lookup_0', { q: 'x' })],
      control: true,
    },
  ];
  const probe = pathToFileURL(benchFile('heap-probe.js')).href;
  const rows: BenchRow[] = [];
  const details: Record<string, unknown> = {};
  for (const t of targets) {
    const server = await serve(t.module, ['--store', `sqlite:${join(o.dir, `${t.id}.db`)}`, '--log-level', 'error'], {}, {
      nodeArgs: [`--max-old-space-size=${o.heapMb}`, '--expose-gc', '--import', probe],
      ipc: true,
    });
    const exited = new Promise<string>((r) => server.proc.once('exit', (code, signal) => r(`exit ${code ?? signal}`)));
    try {
      const requests = mix(await t.seed(server.url), t.calls);
      const start = await heap(server);
      const readings: Array<HeapReading & { after: number; statuses: Record<string, number>; rps: number }> = [];
      let died: string | undefined;
      let served = 0;
      for (let sent = 0; sent < o.requests; sent += o.segment) {
        const r = await gen.request<{ ok: number; errors: number; firstError?: string; rps: number; statuses: Record<string, number> }>(
          { type: 'run', url: server.url, requests, concurrency: o.concurrency, seconds: 3600, maxRequests: o.segment, accept: 'any' },
          'result',
          3_700_000,
        );
        const gone = await Promise.race([exited, new Promise<undefined>((r) => setTimeout(() => r(undefined), 50))]);
        served = sent + r.ok;
        if (r.errors > 0 || gone) {
          died = `${gone ?? 'failing'} after about ${served.toLocaleString('en-US')} requests (${r.firstError ?? ''})`.slice(0, 300);
          break;
        }
        readings.push({ ...(await heap(server)), after: sent + o.segment, statuses: r.statuses, rps: round(r.rps) });
        o.log(`  ${t.id}: ${(sent + o.segment).toLocaleString('en-US')} requests, heap after GC ${round(readings.at(-1)!.heapUsed / 2 ** 20, 1)} MB, ${round(r.rps)} req/s, ${JSON.stringify(r.statuses)}`);
      }
      const mb = (x: number) => round(x / 2 ** 20, 2);
      details[t.id] = { startHeapMb: mb(start.heapUsed), readings: readings.map((x) => ({ ...x, heapUsedMb: mb(x.heapUsed), rssMb: mb(x.rss) })), died };
      if (died || readings.length < 2) {
        rows.push({ id: t.id, what: `${t.what}: ${o.requests.toLocaleString('en-US')} mixed requests, --max-old-space-size=${o.heapMb}`, figure: served, unit: 'requests answered',
          target: t.control ? 'info' : 'survives; heap growth < 5 MB', ...(t.control ? {} : { pass: false }), note: `died: ${died ?? 'too few readings'}` });
        continue;
      }
      const first = readings[0]!;
      const last = readings.at(-1)!;
      const growth = mb(last.heapUsed - first.heapUsed);
      rows.push({
        id: t.id,
        what: `${t.what}: heap used after full GC, growth from the first ${o.segment.toLocaleString('en-US')} requests to the last (${o.requests.toLocaleString('en-US')} mixed, --max-old-space-size=${o.heapMb})`,
        figure: growth,
        unit: 'MB',
        baselineWhat: `heap after the first ${o.segment.toLocaleString('en-US')}`,
        baseline: mb(first.heapUsed),
        target: t.control ? 'info' : '< 5 MB, survives',
        ...(t.control ? {} : { pass: growth < 5 }),
        rounds: readings.map((x) => mb(x.heapUsed)),
        note: `heap after GC per ${o.segment.toLocaleString('en-US')}: ${readings.map((x) => mb(x.heapUsed)).join(', ')} MB (at start ${mb(start.heapUsed)}); RSS ${mb(first.rss)} -> ${mb(last.rss)} MB; answers by HTTP status ${JSON.stringify(last.statuses)}; ${last.rps} req/s`,
      });
    } finally {
      await server.stop();
    }
  }
  return { rows, details };
}
