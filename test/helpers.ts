/**
 * Test helpers: start real `outlast serve` processes on loopback ports, talk to them over HTTP like a client
 * would, and check every message the server sends against the published JSON schemas.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import assert from 'node:assert/strict';
import { after, before } from 'node:test';
import type { Client as PgClient } from 'pg';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { serviceProcess, type ServiceProcess } from '../fixtures/service-process.js';

const here = dirname(fileURLToPath(import.meta.url));
/** Repository root (tests run from dist/test). */
export const ROOT = resolve(here, '..', '..');
export const BIN = join(ROOT, 'bin', 'outlast.js');
export const FIXTURES = join(ROOT, 'dist', 'fixtures', 'server.js');
export const EXT = 'io.modelcontextprotocol/tasks';
export const TASKS_CAPS = { extensions: { [EXT]: {} }, elicitation: {} };

// ---- schemas ------------------------------------------------------------------------------------------------

const SCHEMA_DIR = resolve(ROOT, '..', 'shared', 'schemas');
const ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: false }); // formats are not checked: no warning per schema
const extSchema = JSON.parse(readFileSync(join(SCHEMA_DIR, 'ext-tasks-2026-07-28.schema.json'), 'utf8'));
const coreSchema = JSON.parse(readFileSync(join(SCHEMA_DIR, 'mcp-core-2026-07-28.schema.json'), 'utf8'));
ajv.addSchema(extSchema, 'ext');
ajv.addSchema(coreSchema, 'core');

/** Counts of messages validated, per definition (lets a test prove validation really ran). */
export const validated = new Map<string, number>();

export function assertSchema(def: string, value: unknown): void {
  const [file, name] = def.split('#') as [string, string];
  const v = ajv.getSchema(`${file}#/$defs/${name}`);
  if (!v) throw new Error(`no schema ${def}`);
  if (!v(value)) {
    assert.fail(`message does not match ${def}: ${ajv.errorsText(v.errors)}\n${JSON.stringify(value).slice(0, 2000)}`);
  }
  validated.set(def, (validated.get(def) ?? 0) + 1);
}

/** Checks a server→client message for `method` against the extension's or core's schema. */
export function checkServerMessage(method: string, msg: Record<string, unknown>): void {
  if ('error' in msg) {
    assertSchema('core#JSONRPCErrorResponse', msg);
    return;
  }
  if (msg.method === 'notifications/tasks') {
    assertSchema('ext#TaskStatusNotification', msg);
    return;
  }
  if (msg.method === 'notifications/subscriptions/acknowledged') {
    assertSchema('core#SubscriptionsAcknowledgedNotification', msg);
    return;
  }
  if (typeof msg.method === 'string') {
    assertSchema('core#JSONRPCNotification', msg);
    return;
  }
  const result = msg.result as Record<string, unknown>;
  assertSchema('core#JSONRPCResultResponse', msg);
  switch (method) {
    case 'tools/call':
      if (result.resultType === 'task') {
        assertSchema('ext#CreateTaskResult', result);
        assert.equal(result.content, undefined, 'a CreateTaskResult carries no content');
      } else if (result.resultType === 'input_required') assertSchema('core#InputRequiredResult', result);
      else {
        assert.equal(result.resultType, 'complete');
        assertSchema('core#CallToolResult', result);
      }
      break;
    case 'tasks/get':
      assertSchema('ext#GetTaskResult', result);
      assert.equal(result.resultType, 'complete');
      break;
    case 'tasks/update':
      assertSchema('ext#UpdateTaskResult', result);
      assert.deepEqual(Object.keys(result).filter((k) => k !== '_meta'), ['resultType']);
      break;
    case 'tasks/cancel':
      assertSchema('ext#CancelTaskResult', result);
      assert.deepEqual(Object.keys(result).filter((k) => k !== '_meta'), ['resultType']);
      break;
    case 'subscriptions/listen':
      assertSchema('core#SubscriptionsListenResult', result);
      break;
  }
}

// ---- processes ----------------------------------------------------------------------------------------------

const children = new Set<ChildProcess>();
const tempDirs = new Set<string>();

function killAll(): void {
  for (const c of children) {
    if (c.pid && c.exitCode === null && c.signalCode === null) {
      try {
        process.kill(c.pid, 'SIGKILL');
      } catch {
        /* gone */
      }
    }
  }
}
process.on('exit', () => {
  killAll();
  for (const d of tempDirs) rmSync(d, { recursive: true, force: true });
});

export function tempDir(prefix = 'outlast-test-'): string {
  const d = mkdtempSync(join(tmpdir(), prefix));
  tempDirs.add(d);
  return d;
}

export interface ServerProcess {
  /** Where it listens (a worker started with --no-http: "replica ID"). */
  url: string;
  pid: number;
  proc: ChildProcess;
  stderr(): string;
  /** Everything it wrote on stdout so far (its ready lines). */
  stdout(): string;
  /** Sends a signal and waits for the process to exit. */
  stop(signal?: NodeJS.Signals): Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/** The drain (`--drain-ms`) of the servers tests start, unless a test gives its own. */
const TEST_DRAIN_MS = 1000;

/** Starts `outlast serve` and waits for its ready line: the URL it listens on, or (with --no-http) the worker's line. */
export async function startServer(args: string[], opts: { module?: string; env?: NodeJS.ProcessEnv; command?: string[]; bin?: string; ready?: RegExp; drain?: 'default' } = {}): Promise<ServerProcess> {
  const worker = args.includes('--no-http');
  // `ready`: the line that says another command is up (its first group is the `url`), e.g. `outlast dashboard on (\S+)`.
  // A JSON line (--log-format json) has a quote after the URL.
  const ready = opts.ready ?? (worker ? /outlast worker ready: (replica \S+)/ : /outlast listening on ([^\s"]+)/);
  // `command`: another front command than `serve MODULE`, e.g. ['gateway', '--stdio', 'node upstream.js'].
  // `bin`: another build's bin/outlast.js (an older release, in the upgrade tests).
  const command = opts.command ?? ['serve', opts.module ?? FIXTURES];
  // Tests stop their servers with work still running (a 600 s sleep): the 25 s default drain would only make each
  // stop wait. Tests of the drain give their own (or `drain: 'default'`), as do other builds, whose flags may differ.
  const drain = !opts.bin && opts.drain !== 'default' && ['serve', 'gateway'].includes(command[0]!) && !args.includes('--drain-ms') ? ['--drain-ms', String(TEST_DRAIN_MS)] : [];
  const proc = spawn(process.execPath, [opts.bin ?? BIN, ...command, ...(worker ? [] : ['--port', '0']), ...drain, ...args], {
    cwd: ROOT,
    env: { ...process.env, ...opts.env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.add(proc);
  let out = '';
  let err = '';
  proc.stderr!.on('data', (d) => (err += d));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((res) =>
    proc.once('exit', (code, signal) => {
      children.delete(proc);
      res({ code, signal });
    }),
  );
  const url = await new Promise<string>((res, rej) => {
    // Not started in time: killed, so a failed start leaves no process behind (its pipes would keep the test file's
    // process alive after its tests, and the run waiting for it).
    const timer = setTimeout(() => {
      proc.kill('SIGKILL');
      rej(new Error(`server did not start in 30 s (killed):\n${err}`));
    }, 30_000);
    proc.stdout!.on('data', (d) => {
      out += d;
      const m = ready.exec(out);
      if (m) {
        clearTimeout(timer);
        res(m[1]!);
      }
    });
    void exited.then(({ code, signal }) => {
      clearTimeout(timer);
      rej(new Error(`server exited (${code ?? signal}) before it was ready:\n${err}`));
    });
  });
  return {
    url,
    pid: proc.pid!,
    proc,
    stderr: () => err,
    stdout: () => out,
    async stop(signal: NodeJS.Signals = 'SIGTERM') {
      if (proc.exitCode === null && proc.signalCode === null) process.kill(proc.pid!, signal);
      return exited;
    },
  };
}

/**
 * Servers started together: if one fails to start, the ones that did (and `alsoStop`, started before) are killed
 * before the failure is thrown, since the caller never gets them to stop.
 */
export async function startTogether(starts: Array<Promise<ServerProcess>>, alsoStop: ServerProcess[] = []): Promise<ServerProcess[]> {
  const settled = await Promise.allSettled(starts);
  const failed = settled.find((s): s is PromiseRejectedResult => s.status === 'rejected');
  if (!failed) return settled.map((s) => (s as PromiseFulfilledResult<ServerProcess>).value);
  const started = settled.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
  await Promise.all([...alsoStop, ...started].map((s) => s.stop('SIGKILL')));
  throw failed.reason;
}

/** A server started before the tests of the enclosing suite (on a fresh SQLite file unless --store is given) and stopped after them. */
export function useServer(
  args: string[] = [],
  opts: { module?: string } = {},
): { readonly url: string; readonly process: ServerProcess; readonly sqlitePath: string | undefined } {
  let current: ServerProcess | undefined;
  let sqlitePath: string | undefined;
  before(async () => {
    if (!args.includes('--store')) sqlitePath = join(tempDir(), 'tasks.db');
    const store = sqlitePath ? ['--store', `sqlite:${sqlitePath}`] : [];
    current = await startServer([...store, ...args], opts);
  });
  after(async () => {
    await current?.stop();
  });
  return {
    get url() {
      return current!.url;
    },
    get process() {
      return current!;
    },
    /** The server's SQLite file (when the helper chose it). */
    get sqlitePath() {
      return sqlitePath;
    },
  };
}

// ---- a raw client -------------------------------------------------------------------------------------------

export interface RpcOptions {
  caps?: Record<string, unknown>;
  token?: string;
  meta?: Record<string, unknown>;
  headers?: Record<string, string>;
  /** For deliberately broken requests: the answer need not echo our id (it is still schema-checked). */
  raw?: boolean;
  signal?: AbortSignal;
}

export interface RpcReply {
  status: number;
  headers: Headers;
  /** The final JSON-RPC response (result or error). */
  message: Record<string, unknown>;
  /** Notifications that preceded it on an SSE stream. */
  notifications: Array<Record<string, unknown>>;
  result: Record<string, any>;
  error: { code: number; message: string; data?: any } | undefined;
}

let nextId = 1;

export function metaFor(caps: Record<string, unknown>, extra: Record<string, unknown> = {}) {
  return {
    'io.modelcontextprotocol/protocolVersion': '2026-07-28',
    'io.modelcontextprotocol/clientCapabilities': caps,
    'io.modelcontextprotocol/clientInfo': { name: 'outlast-tests', version: '0.0.0' },
    ...extra,
  };
}

export function headersFor(method: string, params: Record<string, unknown>, opts: RpcOptions = {}): Record<string, string> {
  const h: Record<string, string> = {
    'content-type': 'application/json',
    accept: 'application/json, text/event-stream',
    'mcp-protocol-version': '2026-07-28',
    'mcp-method': method,
  };
  if (method === 'tools/call') h['mcp-name'] = String(params.name);
  if (method.startsWith('tasks/') && typeof params.taskId === 'string') h['mcp-name'] = params.taskId;
  if (opts.token) h.authorization = `Bearer ${opts.token}`;
  return { ...h, ...opts.headers };
}

export function parseSse(text: string): Array<Record<string, unknown>> {
  const out: Array<Record<string, unknown>> = [];
  for (const block of text.split(/\n\n/)) {
    const data = block
      .split('\n')
      .filter((l) => l.startsWith('data:'))
      .map((l) => l.slice(5).trimStart())
      .join('\n');
    if (data) out.push(JSON.parse(data));
  }
  return out;
}

export async function rpc(url: string, method: string, params: Record<string, unknown> = {}, opts: RpcOptions = {}): Promise<RpcReply> {
  const id = nextId++;
  const fullParams = { ...params, _meta: { ...metaFor(opts.caps ?? TASKS_CAPS), ...opts.meta } };
  const res = await fetch(url, {
    method: 'POST',
    headers: headersFor(method, params, opts),
    body: JSON.stringify({ jsonrpc: '2.0', id, method, params: fullParams }),
    ...(opts.signal ? { signal: opts.signal } : {}),
  });
  const text = await res.text();
  const ct = res.headers.get('content-type') ?? '';
  const messages = ct.includes('text/event-stream') ? parseSse(text) : [JSON.parse(text)];
  const message = messages[messages.length - 1]!;
  const notifications = messages.slice(0, -1);
  for (const n of notifications) checkServerMessage(method, n);
  checkServerMessage(method, message);
  if (!opts.raw && message.id !== undefined && message.id !== null) assert.equal(message.id, id, 'the response echoes the request id');
  return {
    status: res.status,
    headers: res.headers,
    message,
    notifications,
    result: (message.result ?? {}) as Record<string, any>,
    error: message.error as RpcReply['error'],
  };
}

export function callTool(url: string, name: string, args: Record<string, unknown>, opts: RpcOptions = {}) {
  return rpc(url, 'tools/call', { name, arguments: args }, opts);
}
export function getTask(url: string, taskId: string, opts: RpcOptions = {}) {
  return rpc(url, 'tasks/get', { taskId }, opts);
}

/** Polls tasks/get at the advertised interval until `until(task)` holds or `timeoutMs` passes. */
export async function waitForTask(
  url: string,
  taskId: string,
  until: (t: Record<string, any>) => boolean = (t) => ['completed', 'failed', 'cancelled'].includes(t.status),
  opts: RpcOptions & { timeoutMs?: number } = {},
): Promise<Record<string, any>> {
  const deadline = Date.now() + (opts.timeoutMs ?? 20_000);
  for (;;) {
    const r = await getTask(url, taskId, opts);
    // A fast poll (-31429) or a replica that cannot reach the store (-31504) is answered with the wait; a client honours it.
    const retryAfterMs = r.error?.code === -31429 || r.error?.code === -31504 ? Number((r.error.data as { retryAfterMs?: number } | undefined)?.retryAfterMs) : NaN;
    if (Number.isFinite(retryAfterMs) && Date.now() + retryAfterMs <= deadline) {
      await new Promise((res) => setTimeout(res, retryAfterMs));
      continue;
    }
    if (r.error) throw new Error(`tasks/get failed: ${JSON.stringify(r.error)}`);
    if (until(r.result)) return r.result;
    if (Date.now() > deadline) throw new Error(`task ${taskId} still ${r.result.status} after ${opts.timeoutMs ?? 20_000} ms`);
    await new Promise((res) => setTimeout(res, Math.min(r.result.pollIntervalMs ?? 250, 250)));
  }
}

export function textOf(result: Record<string, any>): string {
  return (result.content ?? []).map((c: { text?: string }) => c.text ?? '').join('');
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The message of the error a request ends with (the test fails if it succeeds). */
export async function errorOf(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (e) {
    return (e as Error).message;
  }
  assert.fail('the request succeeded');
}

/** Waits until `f` returns something truthy (a delivery seen, a count reached), checking every 50 ms; fails naming `what`. */
export async function until<T>(what: string, f: () => T | undefined | false | Promise<T | undefined | false>, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await f();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

/** Whether a process with this id still runs (signal 0 checks without sending anything). */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

export { freePort } from '../fixtures/service-process.js';

/** A server process of a test's own (fixtures/service-process.ts), up once something answers HTTP at `url`. */
export function httpServiceProcess(name: string, command: string, args: string[], url: string): ServiceProcess {
  return serviceProcess(name, command, args, async () => {
    try {
      await fetch(url);
      return true;
    } catch {
      return false;
    }
  });
}

// ---- PostgreSQL ---------------------------------------------------------------------------------------------

/** The database the PostgreSQL tests use (the machine's cluster; trust auth). */
export const PG_URL = process.env.OUTLAST_TEST_PG ?? 'postgres://postgres@127.0.0.1:5432/test';
const schemas = new Set<string>();

/** A fresh schema name for one test's data; every schema made this way is dropped when the run ends. */
export function freshSchema(prefix = 't'): string {
  const s = `${prefix}_${process.pid}_${Math.random().toString(36).slice(2, 10)}`;
  schemas.add(s);
  return s;
}

/** `postgres://…?schema=NAME` for a fresh schema. */
/** Runs `fn` with a client of its own on the test PostgreSQL (outside any store), ended after. */
export async function withPgClient<T>(fn: (c: PgClient) => Promise<T>): Promise<T> {
  const { default: pg } = await import('pg');
  const c = new pg.Client({ connectionString: PG_URL });
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}

export function pgStoreUrl(schema = freshSchema()): string {
  return `${PG_URL}?schema=${schema}`;
}

after(async () => {
  if (schemas.size === 0) return;
  const { default: pg } = await import('pg');
  const c = new pg.Client({ connectionString: PG_URL });
  await c.connect();
  for (const s of schemas) await c.query(`DROP SCHEMA IF EXISTS "${s}" CASCADE`);
  schemas.clear();
  await c.end();
});

// ---- subscriptions/listen -----------------------------------------------------------------------------------

export interface ListenStream {
  res: Response;
  /** Messages in arrival order (schema-checked), and when each arrived (performance.now()). */
  msgs: Array<Record<string, any>>;
  arrivals: number[];
  /** Resolves once `pred(msgs)` holds; rejects after `timeoutMs` or when the stream ends first. */
  until(pred: (msgs: Array<Record<string, any>>) => boolean, timeoutMs?: number): Promise<void>;
  close(): void;
}

/** Opens `subscriptions/listen` for `taskIds` and keeps reading its SSE stream in the background. */
export async function openListen(url: string, taskIds: string[], caps: Record<string, unknown> = { extensions: { [EXT]: {} } }, id = 'listen-1'): Promise<ListenStream> {
  const ac = new AbortController();
  const params = { notifications: { taskIds }, _meta: metaFor(caps) };
  const res = await fetch(url, {
    method: 'POST',
    headers: headersFor('subscriptions/listen', params),
    body: JSON.stringify({ jsonrpc: '2.0', id, method: 'subscriptions/listen', params }),
    signal: ac.signal,
  });
  const msgs: Array<Record<string, any>> = [];
  const arrivals: number[] = [];
  let wake = () => {};
  let ended = false;
  const push = (m: Record<string, any>) => {
    checkServerMessage('subscriptions/listen', m);
    msgs.push(m);
    arrivals.push(performance.now());
    wake();
  };
  if (!res.headers.get('content-type')?.includes('text/event-stream')) {
    push(await res.json());
    ended = true;
  } else {
    void readSseMessages(res, push).finally(() => {
      ended = true;
      wake();
    });
  }
  return {
    res,
    msgs,
    arrivals,
    async until(pred, timeoutMs = 15_000) {
      const deadline = Date.now() + timeoutMs;
      while (!pred(msgs)) {
        if (ended) throw new Error(`listen stream ended before the expected messages: ${JSON.stringify(msgs).slice(0, 500)}`);
        const left = deadline - Date.now();
        if (left <= 0) throw new Error(`expected listen messages did not arrive in ${timeoutMs} ms: ${JSON.stringify(msgs).slice(0, 500)}`);
        await new Promise<void>((r) => {
          const t = setTimeout(r, left);
          wake = () => {
            clearTimeout(t);
            r();
          };
        });
      }
    },
    close: () => ac.abort(),
  };
}

/** Reads an SSE response's JSON-RPC messages into `push` until it ends or is aborted (an abort ends it quietly). */
export async function readSseMessages(res: Response, push: (m: Record<string, any>) => void): Promise<void> {
  const reader = res.body!.getReader();
  let buf = '';
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += Buffer.from(value).toString('utf8');
      let i;
      while ((i = buf.indexOf('\n\n')) >= 0) {
        const block = buf.slice(0, i);
        buf = buf.slice(i + 2);
        const data = block.split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trim()).join('');
        if (data) push(JSON.parse(data));
      }
    }
  } catch {
    /* aborted: the client dropped it */
  }
}
