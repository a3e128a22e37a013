/**
 * Shared pieces of the benchmark: the wire shape of a 2026-07-28 request, child-process plumbing (every child
 * is registered and killed by PID on exit), statistics.
 */
import { fork, spawn, type ChildProcess } from 'node:child_process';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { Session } from 'node:inspector';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const PROTOCOL_VERSION = '2026-07-28';
export const TASKS = 'io.modelcontextprotocol/tasks';

/** The body and headers of one JSON-RPC request in the stateless 2026-07-28 era. */
export interface WireRequest {
  headers: Record<string, string>;
  body: string;
}

export function wire(method: string, params: Record<string, unknown>, opts: { tasks?: boolean; name?: string; id?: number; caps?: Record<string, unknown> } = {}): WireRequest {
  const caps = { ...(opts.tasks === false ? {} : { extensions: { [TASKS]: {} } }), ...opts.caps };
  const body = JSON.stringify({
    jsonrpc: '2.0',
    id: opts.id ?? 1,
    method,
    params: {
      ...params,
      _meta: { 'io.modelcontextprotocol/protocolVersion': PROTOCOL_VERSION, 'io.modelcontextprotocol/clientCapabilities': caps },
    },
  });
  const headers: Record<string, string> = {
    'content-type': 'application/json',
    accept: 'application/json, text/event-stream',
    'mcp-protocol-version': PROTOCOL_VERSION,
    'mcp-method': method,
  };
  if (opts.name !== undefined) headers['mcp-name'] = opts.name;
  return { headers, body };
}

export const toolCall = (tool: string, args: Record<string, unknown> = {}, tasks = true): WireRequest =>
  wire('tools/call', { name: tool, arguments: args }, { tasks, name: tool });
export const tasksGet = (taskId: string): WireRequest => wire('tasks/get', { taskId }, { tasks: true, name: taskId });

/** The same request as a 2025-11-25 client sends it (stateless HTTP: no `_meta` envelope; the version header). */
export function legacyWire(method: string, params: Record<string, unknown>): WireRequest {
  return {
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-11-25' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method, params }),
  };
}

/** A session on a stateful 2025-11-25 server (initialize, then initialized): the headers its client sends from then on. */
export async function openSession(url: string, capabilities: Record<string, unknown> = {}): Promise<Record<string, string>> {
  const init = legacyWire('initialize', { protocolVersion: '2025-11-25', capabilities, clientInfo: { name: 'outlast-bench', version: '0.0.0' } });
  const res = await fetch(url, { method: 'POST', headers: init.headers, body: init.body });
  const session = res.headers.get('mcp-session-id');
  const text = await res.text();
  if (!res.ok || !session) throw new Error(`initialize on ${url}: HTTP ${res.status}, session ${session}: ${text.slice(0, 300)}`);
  const headers = { ...init.headers, 'mcp-session-id': session };
  const done = await fetch(url, { method: 'POST', headers, body: JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }) });
  await done.text();
  if (done.status !== 202) throw new Error(`notifications/initialized on ${url}: HTTP ${done.status}`);
  return headers;
}

/** One line of the report: a figure, its baseline from the same run, and the target. */
export interface BenchRow {
  id: string;
  what: string;
  figure: number;
  unit: string;
  baselineWhat?: string;
  baseline?: number;
  ratio?: number;
  target: string;
  pass?: boolean;
  rounds?: number[];
  baselineRounds?: number[];
  /** The server's CPU per request (µs, median of the rounds), where the row measures it: it moves much less with the
   *  machine's load than the rates do. */
  cpuUsPerReq?: number;
  baselineCpuUsPerReq?: number;
  /** cpuUsPerReq / baselineCpuUsPerReq: below 1, the figure's side spends less CPU per request. */
  cpuRatio?: number;
  note?: string;
}

/** Sends one request with fetch (setup and checks only; the load generator uses node:http). */
export async function send(url: string, r: WireRequest): Promise<{ status: number; json: any; text: string }> {
  const res = await fetch(url, { method: 'POST', headers: r.headers, body: r.body });
  const text = await res.text();
  let json: any;
  const ct = res.headers.get('content-type') ?? '';
  if (ct.includes('text/event-stream')) {
    // The first message's data (an SDK v1 server with an event store primes the stream with an empty one).
    const line = text.split('\n').find((l) => l.startsWith('data: ') && l.length > 6);
    json = line ? JSON.parse(line.slice(6)) : undefined;
  } else {
    try {
      json = JSON.parse(text);
    } catch {
      json = undefined;
    }
  }
  return { status: res.status, json, text };
}

// ---- statistics -------------------------------------------------------------------------------------------

export function median(xs: number[]): number {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

export function percentile(sorted: ArrayLike<number>, p: number): number {
  if (sorted.length === 0) return NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i]!;
}

/** Count, p50, p99 and max of latency samples. */
export function latencyStats(xs: number[]): { n: number; p50: number; p99: number; max: number } {
  const s = Float64Array.from(xs).sort();
  return { n: s.length, p50: percentile(s, 50), p99: percentile(s, 99), max: s[s.length - 1] ?? NaN };
}

/** A latency row: the p99 of `samples` against a p99 target, with p50, max and n (and `more`) in its note. */
export function latencyRow(id: string, what: string, samples: number[], targetMs: number, more = ''): BenchRow {
  const s = latencyStats(samples);
  return {
    id,
    what,
    figure: round(s.p99, 2),
    unit: 'ms p99',
    target: `p99 < ${targetMs} ms`,
    pass: s.p99 < targetMs,
    note: `p50 ${round(s.p50, 2)} ms, max ${round(s.max, 2)} ms, n = ${s.n}${more ? `; ${more}` : ''}`,
  };
}

export const round = (x: number, d = 0): number => (Number.isFinite(x) ? Math.round(x * 10 ** d) / 10 ** d : x);

// ---- environment knobs ------------------------------------------------------------------------------------

export function envNumber(name: string, fallback: number): number {
  const v = process.env[name];
  if (v === undefined || v === '') return fallback;
  const n = Number(v);
  if (!Number.isFinite(n) || n <= 0) throw new Error(`${name} must be a positive number, got "${v}"`);
  return n;
}

// ---- child processes --------------------------------------------------------------------------------------

const here = fileURLToPath(new URL('.', import.meta.url));
export const benchFile = (name: string): string => join(here, name);

const children = new Set<ChildProcess>();
let cleanupInstalled = false;
const tempDirs = new Set<string>();

/** Kills every child still alive, by PID, and removes the temp directories. Synchronous: safe in 'exit'. */
export function cleanupAll(): void {
  for (const c of children) {
    if (c.pid !== undefined && c.exitCode === null && c.signalCode === null) {
      try {
        process.kill(c.pid, 'SIGKILL');
      } catch {
        /* already gone */
      }
    }
  }
  children.clear();
  for (const d of tempDirs) rmSync(d, { recursive: true, force: true });
  tempDirs.clear();
}

/** Registers a process started some other way (spawn) so it is killed with the rest. */
export function trackProcess(p: ChildProcess): void {
  installCleanup();
  children.add(p);
  p.once('exit', () => children.delete(p));
}

function installCleanup(): void {
  if (cleanupInstalled) return;
  cleanupInstalled = true;
  process.on('exit', cleanupAll);
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    process.on(sig, () => {
      cleanupAll();
      process.exit(130);
    });
  }
}

export function tempDir(label: string): string {
  installCleanup();
  const d = mkdtempSync(join(tmpdir(), `outlast-bench-${label}-`));
  tempDirs.add(d);
  return d;
}
export function removeTempDir(d: string): void {
  rmSync(d, { recursive: true, force: true });
  tempDirs.delete(d);
}

/** A forked child that talks JSON over IPC. */
export class Child {
  readonly proc: ChildProcess;
  private readonly exited: Promise<number | null>;
  private stderr = '';

  /** Forks bench file `file`, or adopts a process already started with an IPC channel and stderr piped (startCli). */
  constructor(file: string | ChildProcess, args: string[] = [], execArgv: string[] = process.execArgv) {
    installCleanup();
    this.proc = typeof file === 'string' ? fork(benchFile(file), args, { stdio: ['ignore', 'inherit', 'pipe', 'ipc'], execArgv }) : file;
    children.add(this.proc);
    this.proc.on('error', (e) => {
      this.stderr += `\n[bench] child ${this.proc.pid}: ${e.message}`;
    });
    this.proc.stderr!.on('data', (d: Buffer) => {
      this.stderr = (this.stderr + d.toString()).slice(-4000);
      if (process.env.BENCH_VERBOSE) process.stderr.write(d);
    });
    this.exited = new Promise((resolve) =>
      this.proc.once('exit', (code) => {
        children.delete(this.proc);
        resolve(code);
      }),
    );
  }

  get pid(): number {
    return this.proc.pid!;
  }

  /** The next message of the given type (or a failure if the child exits or reports an error first). */
  next<T = any>(type: string, timeoutMs = 120_000): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => done(new Error(`child ${this.pid} (${this.proc.spawnargs.slice(-1)}) sent no "${type}" within ${timeoutMs} ms`)), timeoutMs);
      const onMsg = (m: any) => {
        if (m?.type === type) done(null, m);
        else if (m?.type === 'error') done(new Error(`child ${this.pid}: ${m.message}`));
      };
      const onExit = (code: number | null) => done(new Error(`child ${this.pid} exited (code ${code}) before "${type}"\n${this.stderr}`));
      const done = (err: Error | null, m?: any) => {
        clearTimeout(timer);
        this.proc.off('message', onMsg);
        this.proc.off('exit', onExit);
        if (err) reject(err);
        else resolve(m as T);
      };
      this.proc.on('message', onMsg);
      this.proc.once('exit', onExit);
    });
  }

  /** Sends over IPC; a closed channel is reported through `onError` (never as an unhandled 'error' event). */
  send(m: unknown, onError: (e: Error) => void = () => undefined): void {
    if (!this.proc.connected) return onError(new Error(`child ${this.pid} is gone (IPC channel closed)`));
    this.proc.send(m as never, (e) => e && onError(e));
  }

  async request<T = any>(m: { type: string } & Record<string, unknown>, reply: string, timeoutMs?: number): Promise<T> {
    let failed: (e: Error) => void = () => undefined;
    const sent = new Promise<never>((_, reject) => (failed = reject));
    const p = this.next<T>(reply, timeoutMs);
    this.send(m, failed);
    return Promise.race([p, sent]);
  }

  /** Waits up to `ms` for the child to exit by itself, then kills it. */
  async exit(ms = 10_000): Promise<void> {
    const t = setTimeout(() => void this.kill(), ms);
    await this.exited;
    clearTimeout(t);
  }

  /** SIGTERM, then SIGKILL after `graceMs`; always by PID. */
  async kill(graceMs = 3000): Promise<void> {
    if (this.proc.exitCode !== null || this.proc.signalCode !== null) return;
    try {
      process.kill(this.pid, 'SIGTERM');
    } catch {
      /* gone */
    }
    const t = setTimeout(() => {
      try {
        process.kill(this.pid, 'SIGKILL');
      } catch {
        /* gone */
      }
    }, graceMs);
    await this.exited;
    clearTimeout(t);
  }
}

/** In a child: report a failure to the parent and exit. */
export function childFail(e: unknown): never {
  const message = e instanceof Error ? e.stack ?? e.message : String(e);
  process.stderr.write(message + '\n');
  try {
    process.send?.({ type: 'error', message });
  } catch {
    /* parent gone */
  }
  process.exit(1);
}

/** In a server child: listens on 127.0.0.1 (free port), stops on SIGTERM, and tells the parent {type:'ready', url, pid}. */
export async function listenAsChild(server: Server): Promise<void> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  process.on('SIGTERM', () => {
    server.closeAllConnections();
    server.close(() => process.exit(0));
    setTimeout(() => process.exit(0), 1000).unref();
  });
  process.send!({ type: 'ready', url: `http://127.0.0.1:${port}/mcp`, pid: process.pid });
}

/** In a server child: answers {type:'cpu'} with the CPU time this process has used, in µs (user + system). */
export function answerCpuUsage(): void {
  process.on('message', (m: { type?: string } | null) => {
    if (m?.type !== 'cpu') return;
    const c = process.cpuUsage();
    process.send!({ type: 'cpu', us: c.user + c.system });
  });
}

/** In a child: exit when the parent goes away (never outlive the orchestrator). */
export function exitWithParent(): void {
  process.on('disconnect', () => process.exit(0));
}

/**
 * In a server child: {type:'profile-start'} / {type:'profile-stop', file} take a CPU profile of a window of
 * the load (BENCH_PROFILE), without the start-up and warm-up that node --cpu-prof would include.
 */
export function installProfiler(): void {
  let session: Session | undefined;
  process.on('message', (m: any) => {
    if (m?.type === 'profile-start' && !session) {
      const s = (session = new Session());
      s.connect();
      s.post('Profiler.enable', () => s.post('Profiler.start', () => process.send!({ type: 'profile-started' })));
    }
    if (m?.type === 'profile-stop' && session) {
      const s = session;
      session = undefined;
      s.post('Profiler.stop', (err, r) => {
        if (!err) writeFileSync(m.file, JSON.stringify(r.profile));
        s.disconnect();
        process.send!({ type: 'profile-stopped', file: m.file, error: err ? String(err) : undefined });
      });
    }
  });
}

// ---- outlast serve processes ------------------------------------------------------------------------------

/** Repository root (bench files run from dist/bench). */
export const ROOT = join(here, '..', '..');

/** An `outlast serve` process on a free loopback port. */
export interface Served {
  url: string;
  pid: number;
  proc: ChildProcess;
  stop(signal?: NodeJS.Signals): Promise<void>;
}

/**
 * Starts `node NODE_ARGS… outlast serve MODULE --port 0 ARGS…`, registered for clean-up; resolves with its URL once
 * it listens. `ipc`: with an IPC channel (for a preloaded probe such as heap-probe.js).
 */
export function serve(module: string, args: string[], env: NodeJS.ProcessEnv = {}, opts: { nodeArgs?: string[]; ipc?: boolean } = {}): Promise<Served> {
  return startCli(['serve', module, '--port', '0', ...args], env, opts);
}

/** Starts `node NODE_ARGS… outlast ARGV…` (a command that serves HTTP: serve, gateway) as `serve` does. */
export async function startCli(argv: string[], env: NodeJS.ProcessEnv = {}, opts: { nodeArgs?: string[]; ipc?: boolean } = {}): Promise<Served> {
  const what = `outlast ${argv.slice(0, 2).join(' ')}`;
  const proc = spawn(process.execPath, [...(opts.nodeArgs ?? []), join(ROOT, 'bin', 'outlast.js'), ...argv], {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdio: opts.ipc ? ['ignore', 'pipe', 'pipe', 'ipc'] : ['ignore', 'pipe', 'pipe'],
  });
  trackProcess(proc);
  let err = '';
  proc.stderr!.on('data', (d) => {
    err = (err + d).slice(-4000);
    if (process.env.BENCH_VERBOSE) process.stderr.write(d);
  });
  const exited = new Promise<void>((r) => proc.once('exit', () => r()));
  const url = await new Promise<string>((res, rej) => {
    let out = '';
    const t = setTimeout(() => rej(new Error(`${what} did not start:\n${err}`)), 30_000);
    proc.stdout!.on('data', (d) => {
      out += d;
      const m = /outlast listening on ([^\s"]+)/.exec(out);
      if (m) {
        clearTimeout(t);
        res(m[1]!);
      }
    });
    proc.once('exit', (code) => rej(new Error(`${what} exited (${code}):\n${err}`)));
  });
  return {
    url,
    pid: proc.pid!,
    proc,
    async stop(signal: NodeJS.Signals = 'SIGTERM') {
      if (proc.exitCode !== null || proc.signalCode !== null) return;
      try {
        process.kill(proc.pid!, 'SIGCONT');
        process.kill(proc.pid!, signal);
      } catch {
        /* gone */
      }
      await exited;
    },
  };
}


/** Registers an OpenTelemetry SDK meter provider with a Prometheus reader (as `outlast serve --metrics` does), so
 *  the runtime's instruments record for real. */
export async function installMeterProvider(): Promise<void> {
  const { startPrometheus } = await import('../src/ops/metrics.js');
  await startPrometheus();
}

// ---- CPU time of processes that answer no IPC (an upstream server, its bridge) ----------------------------

/** Clock ticks per second of /proc/PID/stat (USER_HZ: 100 on Linux). */
const CLOCK_TICKS = 100;

/** CPU time (user + system) a process has used, in µs, from /proc; 0 once it is gone. */
export function procCpuUs(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the command name (which may hold spaces): utime and stime are the 12th and 13th.
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return ((Number(f[11]) + Number(f[12])) * 1e6) / CLOCK_TICKS;
  } catch {
    return 0;
  }
}

/** A process's children (every thread's), from /proc. */
export function childPids(pid: number): number[] {
  try {
    return readdirSync(`/proc/${pid}/task`).flatMap((t) => readFileSync(`/proc/${pid}/task/${t}/children`, 'utf8').split(' ').filter(Boolean).map(Number));
  } catch {
    return [];
  }
}
