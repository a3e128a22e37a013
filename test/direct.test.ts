/**
 * The direct path (task methods answered by the HTTP front) against the SDK path, on real server processes: the
 * same fixture module served twice, once as shipped and once with --no-direct-task-methods. Every request, valid
 * or broken in any way a client can break one, goes to both; the answers must agree in HTTP status, content
 * type, JSON-RPC code, message, data and result (task ids and clock readings aside), and every answer of the
 * direct server is checked against the published schemas.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { join } from 'node:path';
import { existsSync, readFileSync } from 'node:fs';
import { EXT, TASKS_CAPS, callTool, checkServerMessage, headersFor, metaFor, parseSse, rpc, sleep, startServer, tempDir, textOf, waitForTask, type ServerProcess } from './helpers.js';
import { check2025Message } from './generations.js';

const V = '2026-07-28';
const BEARER = ['--bearer', 'tok-a=alice', '--bearer', 'tok-b=bob'];

/** A raw HTTP request: exactly these headers and this body. */
interface RawRequest {
  method?: 'POST' | 'GET';
  headers: Record<string, string>;
  body?: string;
}

interface RawReply {
  status: number;
  contentType: string;
  headers: Record<string, string>;
  text: string;
  /** The JSON-RPC message (the last one on an SSE stream), if the body held one. */
  message: Record<string, any> | undefined;
}

async function send(url: string, r: RawRequest): Promise<RawReply> {
  const res = await fetch(url, { method: r.method ?? 'POST', headers: r.headers, ...(r.body !== undefined ? { body: r.body } : {}) });
  const text = await res.text();
  const contentType = (res.headers.get('content-type') ?? '').split(';')[0]!.trim();
  let message: Record<string, any> | undefined;
  if (contentType === 'text/event-stream') message = parseSse(text).at(-1);
  else if (text) {
    try {
      message = JSON.parse(text);
    } catch {
      message = undefined;
    }
  }
  const headers: Record<string, string> = {};
  for (const h of ['retry-after', 'www-authenticate', 'allow']) {
    const v = res.headers.get(h);
    if (v !== null) headers[h] = v;
  }
  return { status: res.status, contentType, headers, text, message };
}

/** The tasks one server holds for the comparison, by role. */
type Tasks = Record<'working' | 'asking' | 'confirming' | 'completed' | 'failed' | 'cancelled', string>;

interface Side {
  name: string;
  server: ServerProcess;
  tasks: Tasks;
}

/**
 * A request for `method` as a well-behaved client sends it (alice's token, the extension declared, every header),
 * with `change` applied: header overrides (undefined removes one), another body, params or _meta.
 */
function request(
  method: string,
  params: Record<string, unknown>,
  change: { token?: string | null; caps?: Record<string, unknown>; meta?: Record<string, unknown> | null; headers?: Record<string, string | undefined>; id?: unknown; body?: string } = {},
): RawRequest {
  const meta = change.meta === null ? undefined : { ...metaFor(change.caps ?? TASKS_CAPS), ...change.meta };
  const fullParams = meta === undefined ? params : { ...params, _meta: meta };
  const token = change.token === undefined ? 'tok-a' : change.token;
  const headers: Record<string, string> = headersFor(method, params, token ? { token } : {});
  for (const [k, v] of Object.entries(change.headers ?? {})) {
    if (v === undefined) delete headers[k];
    else headers[k] = v;
  }
  const id = 'id' in change ? change.id : 7;
  const body = change.body ?? JSON.stringify(id === undefined ? { jsonrpc: '2.0', method, params: fullParams } : { jsonrpc: '2.0', id, method, params: fullParams });
  return { headers, body };
}

/** A 2025-11-25 request as SDK v1 sends it (no `_meta` envelope, its version header), with `change` applied. */
function legacy(method: string, params: Record<string, unknown> | undefined, change: { token?: string | null; headers?: Record<string, string | undefined>; body?: string } = {}): RawRequest {
  const token = change.token === undefined ? 'tok-a' : change.token;
  const headers: Record<string, string> = { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-11-25' };
  if (token) headers.authorization = `Bearer ${token}`;
  for (const [k, v] of Object.entries(change.headers ?? {})) {
    if (v === undefined) delete headers[k];
    else headers[k] = v;
  }
  return { headers, body: change.body ?? JSON.stringify(params === undefined ? { jsonrpc: '2.0', id: 9, method } : { jsonrpc: '2.0', id: 9, method, params }) };
}

/** What may differ between two servers: their task ids, clock readings and the figures derived from them. */
function normalise(reply: RawReply, tasks: Tasks): Record<string, unknown> {
  let text = reply.text;
  for (const [role, id] of Object.entries(tasks)) text = text.split(id).join(`<${role}>`);
  for (const [role, id] of Object.entries(tasks)) text = text.split(Buffer.from(id).toString('base64')).join(`<${role}:base64>`);
  text = text
    .replace(/\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z/g, '<time>')
    .replace(/"(pollIntervalMs|pollInterval|ttlMs|retryAfterMs)":\d+/g, '"$1":0')
    .replace(/retry in \d+ ms/g, 'retry in N ms')
    .replace(/: \d+%/g, ': N%');
  return { status: reply.status, contentType: reply.contentType, headers: reply.headers, body: text };
}

type Build = (tasks: Tasks) => RawRequest;

/** Requests that, by design, the direct path leaves to the SDK (it answers them with `id: null`, outside the schema). */
const LEFT_TO_THE_SDK = new Set([
  'notification (no id)',
  'id null',
  'id 1.5',
  'Content-Type text/plain',
  'GET',
  'tasks/result',
  // 2025-11-25 requests no such client sends: the SDK answers them as it always has (some with id null).
  '2025 get, params an array',
  '2025 get without jsonrpc',
  '2025 get, unsupported version header',
  '2025 get, older version header',
  '2025 get, no version header',
  '2025 get, Accept: application/json only',
]);

const SCENARIOS: Array<[string, Build]> = [
  // ---- valid ----
  ['get working', (t) => request('tasks/get', { taskId: t.working })],
  ['get input_required', (t) => request('tasks/get', { taskId: t.asking })],
  ['get completed (tool error)', (t) => request('tasks/get', { taskId: t.completed })],
  ['get failed', (t) => request('tasks/get', { taskId: t.failed })],
  ['get cancelled', (t) => request('tasks/get', { taskId: t.cancelled })],
  ['get, string id', (t) => request('tasks/get', { taskId: t.working }, { id: 'poll-1' })],
  ['get, id 0', (t) => request('tasks/get', { taskId: t.working }, { id: 0 })],
  ['get, Mcp-Name base64', (t) => request('tasks/get', { taskId: t.working }, { headers: { 'mcp-name': `=?base64?${Buffer.from(t.working).toString('base64')}?=` } })],
  ['get, Mcp-Name padded with spaces', (t) => request('tasks/get', { taskId: t.working }, { headers: { 'mcp-name': `  ${t.working} ` } })],
  ['get, extra params and _meta keys', (t) =>
    request('tasks/get', { taskId: t.working, extra: [1, 2] }, { meta: { progressToken: 5, 'io.modelcontextprotocol/logLevel': 'debug', traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', 'example.com/x': 1 } })],
  ['get, extension settings object', (t) => request('tasks/get', { taskId: t.working }, { caps: { extensions: { [EXT]: { any: 'thing' } } } })],
  ['get, Accept: application/json only', (t) => request('tasks/get', { taskId: t.working }, { headers: { accept: 'application/json' } })],
  ['update: {} is an ack', (t) => request('tasks/update', { taskId: t.asking, inputResponses: {} })],
  ['update: a key not outstanding is ignored', (t) => request('tasks/update', { taskId: t.asking, inputResponses: { nope: { action: 'accept', content: {} } } })],
  ['update on a working task', (t) => request('tasks/update', { taskId: t.working, inputResponses: { answer: { action: 'accept', content: { answer: 'x' } } } })],
  ['update with requestState', (t) => request('tasks/update', { taskId: t.asking, inputResponses: {}, requestState: 'opaque' })],
  ['cancel a finished task', (t) => request('tasks/cancel', { taskId: t.completed })],
  // ---- headers ----
  ['no MCP-Protocol-Version', (t) => request('tasks/get', { taskId: t.working }, { headers: { 'mcp-protocol-version': undefined } })],
  ['MCP-Protocol-Version differs from _meta', (t) => request('tasks/get', { taskId: t.working }, { headers: { 'mcp-protocol-version': '2025-11-25' } })],
  ['no Mcp-Method', (t) => request('tasks/get', { taskId: t.working }, { headers: { 'mcp-method': undefined } })],
  ['Mcp-Method: the word "undefined" (after one without it)', (t) => request('tasks/get', { taskId: t.working }, { headers: { 'mcp-method': 'undefined' } })],
  ['Mcp-Method names another method', (t) => request('tasks/get', { taskId: t.working }, { headers: { 'mcp-method': 'tasks/cancel' } })],
  ['no Mcp-Name', (t) => request('tasks/get', { taskId: t.working }, { headers: { 'mcp-name': undefined } })],
  ['Mcp-Name names another task', (t) => request('tasks/cancel', { taskId: t.working }, { headers: { 'mcp-name': t.asking } })],
  ['Mcp-Name: bad base64', (t) => request('tasks/update', { taskId: t.working, inputResponses: {} }, { headers: { 'mcp-name': '=?base64?not base64!?=' } })],
  ['Mcp-Name but no taskId', () => request('tasks/get', {}, { headers: { 'mcp-name': 'x' } })],
  // ---- envelope and version ----
  ['no _meta', (t) => request('tasks/get', { taskId: t.working }, { meta: null })],
  ['no params', () => ({ headers: headersFor('tasks/get', {}, { token: 'tok-a' }), body: JSON.stringify({ jsonrpc: '2.0', id: 3, method: 'tasks/get' }) })],
  ['_meta without clientCapabilities', (t) =>
    request('tasks/get', { taskId: t.working }, { body: JSON.stringify({ jsonrpc: '2.0', id: 4, method: 'tasks/get', params: { taskId: t.working, _meta: { 'io.modelcontextprotocol/protocolVersion': V } } }) })],
  ['clientCapabilities not an object', (t) => request('tasks/get', { taskId: t.working }, { meta: { 'io.modelcontextprotocol/clientCapabilities': 'all' } })],
  ['protocolVersion not a string', (t) => request('tasks/get', { taskId: t.working }, { meta: { 'io.modelcontextprotocol/protocolVersion': 20260728 } })],
  ['extension declared as true', (t) => request('tasks/get', { taskId: t.working }, { caps: { extensions: { [EXT]: true } } })],
  ['bad clientInfo', (t) => request('tasks/get', { taskId: t.working }, { meta: { 'io.modelcontextprotocol/clientInfo': { name: 5 } } })],
  ['unsupported version 2027-01-01', (t) =>
    request('tasks/get', { taskId: t.working }, { meta: { 'io.modelcontextprotocol/protocolVersion': '2027-01-01' }, headers: { 'mcp-protocol-version': '2027-01-01' } })],
  ['old version 2025-11-25 in _meta', (t) =>
    request('tasks/cancel', { taskId: t.working }, { meta: { 'io.modelcontextprotocol/protocolVersion': '2025-11-25' }, headers: { 'mcp-protocol-version': '2025-11-25' } })],
  ['jsonrpc 1.0', (t) => request('tasks/get', { taskId: t.working }, { body: JSON.stringify({ jsonrpc: '1.0', id: 5, method: 'tasks/get', params: { taskId: t.working, _meta: metaFor(TASKS_CAPS) } }) })],
  // ---- the -32021 gate: before any id is looked up ----
  ['get without the extension, unknown id', () => request('tasks/get', { taskId: 'no-such-task' }, { caps: {} })],
  ['get without the extension, own id', (t) => request('tasks/get', { taskId: t.working }, { caps: { elicitation: {} } })],
  ['update without the extension, bad params', () => request('tasks/update', { taskId: 5, inputResponses: { a: 'x' } }, { caps: {}, headers: { 'mcp-name': '5' } })],
  ['cancel without the extension, foreign id', (t) => request('tasks/cancel', { taskId: t.working }, { caps: {}, token: 'tok-b' })],
  // ---- ids: unknown, someone else's ----
  ['get unknown id', () => request('tasks/get', { taskId: 'AAAAAAAAAAAAAAAAAAAAAA' })],
  ['update unknown id', () => request('tasks/update', { taskId: 'AAAAAAAAAAAAAAAAAAAAAA', inputResponses: {} })],
  ['cancel unknown id', () => request('tasks/cancel', { taskId: 'AAAAAAAAAAAAAAAAAAAAAA' })],
  ["get another principal's task", (t) => request('tasks/get', { taskId: t.working }, { token: 'tok-b' })],
  ["update another principal's task", (t) => request('tasks/update', { taskId: t.asking, inputResponses: { answer: { action: 'accept', content: { answer: 'mine' } } } }, { token: 'tok-b' })],
  ["cancel another principal's task", (t) => request('tasks/cancel', { taskId: t.working }, { token: 'tok-b' })],
  // ---- params ----
  ['taskId a number', () => request('tasks/get', { taskId: 5 }, { headers: { 'mcp-name': '5' } })],
  ['taskId missing', () => request('tasks/get', {})],
  ['taskId empty', () => request('tasks/cancel', { taskId: '' })],
  ['taskId of 300 characters', () => request('tasks/get', { taskId: 'x'.repeat(300) })],
  ['update without inputResponses', (t) => request('tasks/update', { taskId: t.asking })],
  ['update, inputResponses a string', (t) => request('tasks/update', { taskId: t.asking, inputResponses: 'yes' })],
  ['update, an answer that is a string', (t) => request('tasks/update', { taskId: t.asking, inputResponses: { answer: 'yes' } })],
  ['update, an answer in a {method, result} wrapper', (t) =>
    request('tasks/update', { taskId: t.asking, inputResponses: { answer: { method: 'elicitation/create', result: { action: 'accept' } } } })],
  ['update, a malformed elicitation answer', (t) => request('tasks/update', { taskId: t.asking, inputResponses: { answer: { action: 'maybe' } } })],
  // ---- the front, before either path ----
  ['malformed JSON', () => ({ headers: headersFor('tasks/get', {}, { token: 'tok-a' }), body: '{"jsonrpc":"2.0","id":1,"method":"tasks/get",' })],
  ['body over the limit', (t) => request('tasks/update', { taskId: t.asking, inputResponses: { answer: { action: 'accept', content: { answer: 'x'.repeat(5000) } } } })],
  ['no bearer token', (t) => request('tasks/get', { taskId: t.working }, { token: null })],
  ['unknown bearer token', (t) => request('tasks/get', { taskId: t.working }, { token: 'tok-z' })],
  // ---- what the direct path leaves to the SDK ----
  ['notification (no id)', (t) => request('tasks/cancel', { taskId: t.failed }, { id: undefined })],
  ['id null', (t) => request('tasks/get', { taskId: t.working }, { id: null })],
  ['id 1.5', (t) => request('tasks/get', { taskId: t.working }, { id: 1.5 })],
  ['Content-Type text/plain', (t) => request('tasks/get', { taskId: t.working }, { headers: { 'content-type': 'text/plain' } })],
  ['GET', () => ({ method: 'GET', headers: { accept: 'text/event-stream', authorization: 'Bearer tok-a' } })],
  ['tasks/result', (t) => request('tasks/result', { taskId: t.completed }, { headers: { 'mcp-name': t.completed } })],
  // ---- 2025-11-25: tasks/get, tasks/list, tasks/cancel ----
  ['2025 get working', (t) => legacy('tasks/get', { taskId: t.working })],
  ['2025 get input_required', (t) => legacy('tasks/get', { taskId: t.asking })],
  ['2025 get completed', (t) => legacy('tasks/get', { taskId: t.completed })],
  ['2025 get failed', (t) => legacy('tasks/get', { taskId: t.failed })],
  ['2025 get cancelled', (t) => legacy('tasks/get', { taskId: t.cancelled })],
  ['2025 get with a stray params.task (SDK v1 sends one)', (t) => legacy('tasks/get', { taskId: t.working, task: {} })],
  ['2025 get unknown id', () => legacy('tasks/get', { taskId: 'AAAAAAAAAAAAAAAAAAAAAA' })],
  ["2025 get another principal's task", (t) => legacy('tasks/get', { taskId: t.working }, { token: 'tok-b' })],
  ['2025 get without taskId', () => legacy('tasks/get', {})],
  ['2025 get without params', () => legacy('tasks/get', undefined)],
  ['2025 get, params an array', () => legacy('tasks/get', undefined, { body: JSON.stringify({ jsonrpc: '2.0', id: 9, method: 'tasks/get', params: [1] }) })],
  ['2025 get without jsonrpc', (t) => legacy('tasks/get', undefined, { body: JSON.stringify({ id: 9, method: 'tasks/get', params: { taskId: t.working } }) })],
  ['2025 get, unsupported version header', (t) => legacy('tasks/get', { taskId: t.working }, { headers: { 'mcp-protocol-version': '1999-01-01' } })],
  ['2025 get, older version header', (t) => legacy('tasks/get', { taskId: t.working }, { headers: { 'mcp-protocol-version': '2025-03-26' } })],
  ['2025 get, no version header', (t) => legacy('tasks/get', { taskId: t.working }, { headers: { 'mcp-protocol-version': undefined } })],
  ['2025 get, Accept: application/json only', (t) => legacy('tasks/get', { taskId: t.working }, { headers: { accept: 'application/json' } })],
  ['2025 get, no bearer token', (t) => legacy('tasks/get', { taskId: t.working }, { token: null })],
  ["2025 list, a principal with no tasks", () => legacy('tasks/list', {}, { token: 'tok-b' })],
  ['2025 list, a garbage cursor', () => legacy('tasks/list', { cursor: 'not a cursor' })],
  ['2025 cancel unknown id', () => legacy('tasks/cancel', { taskId: 'AAAAAAAAAAAAAAAAAAAAAA' })],
  ["2025 cancel another principal's task", (t) => legacy('tasks/cancel', { taskId: t.working }, { token: 'tok-b' })],
  ['2025 cancel a terminal task', (t) => legacy('tasks/cancel', { taskId: t.completed })],
];

/** Requests that change state, sent after the others, in this order, to both. */
const STATE_CHANGES: Array<[string, Build]> = [
  ['update: the answer', (t) => request('tasks/update', { taskId: t.confirming, inputResponses: { confirm: { action: 'accept', content: { confirm: true } } } })],
  ['cancel working', (t) => request('tasks/cancel', { taskId: t.working })],
  ['cancel it again', (t) => request('tasks/cancel', { taskId: t.working })],
];

/** Creates one task per role on `url` (as alice) and waits until each is in the state its role names. */
async function seed(url: string): Promise<Tasks> {
  const opts = { token: 'tok-a' };
  const start = async (tool: string, args: Record<string, unknown>) => {
    const r = await callTool(url, tool, args, opts);
    assert.equal(r.result.resultType, 'task', `${tool} became a task: ${JSON.stringify(r.message)}`);
    return r.result.taskId as string;
  };
  const [working, asking, confirming, completed, failed, cancelled] = await Promise.all([
    start('slow_compute', { seconds: 120 }),
    start('ask', { message: 'Your name?' }),
    start('confirm_delete', { filename: 'notes.txt' }),
    start('failing_job', {}),
    start('protocol_error_job', {}),
    start('slow_compute', { seconds: 120, label: 'to cancel' }),
  ]);
  await rpc(url, 'tasks/cancel', { taskId: cancelled }, opts);
  await Promise.all([
    waitForTask(url, asking, (x) => x.status === 'input_required', opts),
    waitForTask(url, confirming, (x) => x.status === 'input_required', opts),
    waitForTask(url, completed, undefined, opts),
    waitForTask(url, failed, undefined, opts),
    waitForTask(url, cancelled, undefined, opts),
  ]);
  return { working: working!, asking: asking!, confirming: confirming!, completed: completed!, failed: failed!, cancelled: cancelled! };
}

async function startPair(args: string[]): Promise<{ direct: ServerProcess; sdk: ServerProcess }> {
  const dir = tempDir();
  const [direct, sdk] = await Promise.all([
    startServer(['--store', `sqlite:${join(dir, 'direct.db')}`, ...args]),
    startServer(['--store', `sqlite:${join(dir, 'sdk.db')}`, '--no-direct-task-methods', ...args]),
  ]);
  return { direct, sdk };
}

/** Sends `build`'s request to both; asserts the answers agree, and schema-checks the direct server's. */
async function compare(name: string, build: Build, direct: Side, sdk: Side): Promise<RawReply> {
  const a = await send(direct.server.url, build(direct.tasks));
  const b = await send(sdk.server.url, build(sdk.tasks));
  assert.deepEqual(normalise(a, direct.tasks), normalise(b, sdk.tasks), `${name}: the direct path answers as the SDK path does`);
  const sent = build(direct.tasks);
  if (a.message && !LEFT_TO_THE_SDK.has(name)) {
    if (sent.headers['mcp-protocol-version'] === '2025-11-25' && !sent.body?.includes('io.modelcontextprotocol/protocolVersion')) {
      const failure = check2025Message(JSON.parse(sent.body!), a.message);
      assert.equal(failure, undefined, `${name}: ${failure}`);
    } else checkServerMessage(sent.headers['mcp-method'] ?? '', a.message);
  }
  return a;
}

describe('the direct path answers every task-method request exactly as the SDK path does', () => {
  let pair: { direct: ServerProcess; sdk: ServerProcess };
  let direct: Side;
  let sdk: Side;
  before(async () => {
    pair = await startPair(['--no-poll-limit', '--max-body-bytes', '4096', ...BEARER]);
    const [dt, st] = await Promise.all([seed(pair.direct.url), seed(pair.sdk.url)]);
    direct = { name: 'direct', server: pair.direct, tasks: dt };
    sdk = { name: 'sdk', server: pair.sdk, tasks: st };
  });
  after(async () => {
    await Promise.all([pair?.direct.stop(), pair?.sdk.stop()]);
  });

  it(`${SCENARIOS.length} requests, valid and broken: same status, content type, code, message, data and result`, async () => {
    const seen = new Map<string, number>();
    for (const [name, build] of SCENARIOS) {
      const a = await compare(name, build, direct, sdk);
      const code = a.message?.error?.code;
      seen.set(code === undefined ? `HTTP ${a.status}` : `${code}`, (seen.get(code === undefined ? `HTTP ${a.status}` : `${code}`) ?? 0) + 1);
    }
    // The comparison covered every kind of answer, not one kind many times.
    for (const code of ['-32020', '-32021', '-32022', '-32602', '-32600', '-32700', '-32601', 'HTTP 200', 'HTTP 202']) assert.ok(seen.has(code), `an answer ${code} was compared`);
  });

  it('an answer and a cancel are acknowledged alike, and both servers then tell the same story', async () => {
    for (const [name, build] of STATE_CHANGES) {
      const a = await compare(name, build, direct, sdk);
      assert.deepEqual(Object.keys(a.message!.result), ['resultType', '_meta'], `${name}: an empty ack`);
    }
    const done = await Promise.all([direct, sdk].map((s) => waitForTask(s.server.url, s.tasks.confirming, undefined, { token: 'tok-a' })));
    assert.equal(textOf(done[0]!.result), 'Deleted notes.txt');
    assert.deepEqual(done[0]!.result, done[1]!.result);
    const cancelled = await Promise.all([direct, sdk].map((s) => waitForTask(s.server.url, s.tasks.working, undefined, { token: 'tok-a' })));
    assert.deepEqual(cancelled.map((x) => x.status), ['cancelled', 'cancelled']);
  });

  it("2025-11-25 tasks/list: the same tasks on both, and a 2025 cancel answers the task already cancelled", async () => {
    const lists = await Promise.all([direct, sdk].map(async (s) => {
      const r = await send(s.server.url, legacy('tasks/list', {}));
      assert.equal(r.contentType, 'text/event-stream');
      assert.equal(check2025Message({ method: 'tasks/list', id: 9 }, r.message!), undefined);
      return (r.message!.result.tasks as Array<{ taskId: string; status: string }>).map((t) => `${Object.entries(s.tasks).find(([, id]) => id === t.taskId)?.[0]}:${t.status}`).sort();
    }));
    assert.deepEqual(lists[0], lists[1]);
    assert.equal(lists[0]!.length, 6);
    const answers = await Promise.all([direct, sdk].map(async (s) => {
      const started = await callTool(s.server.url, 'slow_compute', { seconds: 60 }, { token: 'tok-a' });
      const tasks = { ...s.tasks, working: started.result.taskId as string };
      return normalise(await send(s.server.url, legacy('tasks/cancel', { taskId: tasks.working })), tasks);
    }));
    assert.deepEqual(answers[0], answers[1]);
    assert.match(String(answers[0]!.body), /"status":"cancelled"/);
  });

  it('the direct path builds no McpServer for polls or calls of its tools; the SDK path builds one per request', async () => {
    const built = async (url: string) => Number(textOf((await callTool(url, 'servers_built', {}, { token: 'tok-a' })).result));
    for (const [s, perRequest] of [[direct, 0], [sdk, 1]] as const) {
      const before = await built(s.server.url);
      for (let i = 0; i < 20; i++) assert.equal((await rpc(s.server.url, 'tasks/get', { taskId: s.tasks.failed }, { token: 'tok-a' })).result.status, 'failed');
      for (let i = 0; i < 10; i++) assert.equal((await send(s.server.url, legacy('tasks/get', { taskId: s.tasks.failed }))).message!.result.status, 'failed');
      for (let i = 0; i < 5; i++) assert.equal(textOf((await callTool(s.server.url, 'greet', { name: 'Ada' }, { token: 'tok-a' })).result), 'Hello, Ada!');
      const afterPolls = await built(s.server.url);
      assert.equal(afterPolls - before, perRequest * (1 + 30 + 5), `${s.name}: McpServers built for 20 polls, 10 of them 2025-11-25, 5 calls (and the count itself)`);
    }
  });
});

/** A tools/call as a 2026-07-28 client sends it; `caps` replaces the declared capabilities. */
function call(name: string, args: unknown, change: Parameters<typeof request>[2] = {}): RawRequest {
  return request('tools/call', args === undefined ? { name } : { name, arguments: args }, change);
}

/** tools/call requests, valid and broken, and whether the direct server answers them without a per-request
 *  McpServer (true) or leaves them to the SDK's path (false): both must answer alike either way. */
const CALLS: Array<[string, () => RawRequest, boolean]> = [
  ['greet', () => call('greet', { name: 'Ada' }), true],
  ['greet, string id', () => call('greet', { name: 'Ada' }, { id: 'call-1' }), true],
  ['greet, Mcp-Name base64', () => call('greet', { name: 'Ada' }, { headers: { 'mcp-name': `=?base64?${Buffer.from('greet').toString('base64')}?=` } }), true],
  ['greet, arguments of the wrong type', () => call('greet', { name: 5 }), true],
  ['greet, arguments missing', () => call('greet', undefined), true],
  ['greet, arguments an array', () => call('greet', [1]), true],
  ['greet, extra _meta keys and a progressToken', () => call('greet', { name: 'Ada' }, { meta: { progressToken: 'p1', 'example.com/x': 1 } }), true],
  ['greet, no Mcp-Name', () => call('greet', { name: 'Ada' }, { headers: { 'mcp-name': undefined } }), true],
  ['greet, Mcp-Name names another tool', () => call('greet', { name: 'Ada' }, { headers: { 'mcp-name': 'slow_compute' } }), true],
  ['greet, bad Mcp-Name base64', () => call('greet', { name: 'Ada' }, { headers: { 'mcp-name': '=?base64?not base64!?=' } }), true],
  ['greet, no Mcp-Method', () => call('greet', { name: 'Ada' }, { headers: { 'mcp-method': undefined } }), true],
  ['greet, unsupported version', () => call('greet', { name: 'Ada' }, { meta: { 'io.modelcontextprotocol/protocolVersion': '2027-01-01' }, headers: { 'mcp-protocol-version': '2027-01-01' } }), true],
  ['greet, no _meta', () => call('greet', { name: 'Ada' }, { meta: null }), true],
  ['slow_compute inline (tasks declared)', () => call('slow_compute', { seconds: 0 }), true],
  ['slow_compute becomes a task (tasks declared)', () => call('slow_compute', { seconds: 30 }), true],
  ['slow_compute, no capabilities: a handle', () => call('slow_compute', { seconds: 0 }, { caps: {} }), true],
  ['failing_job without the extension: -32021', () => call('failing_job', {}, { caps: {} }), true],
  ['protocol_error_job: a task', () => call('protocol_error_job', {}), true],
  ['sleep, idempotency key not a string', () => call('sleep', { seconds: 0 }, { meta: { 'io.modelcontextprotocol/idempotencyKey': 5 } }), true],
  ['sleep, unknown push destination', () => call('sleep', { seconds: 0 }, { meta: { 'outlast/push': 'nowhere' } }), true],
  ['elicitation declared, no Tasks: MRTR, left to the SDK', () => call('slow_compute', { seconds: 0 }, { caps: { elicitation: {} } }), false],
  ['a requestState, left to the SDK', () => request('tools/call', { name: 'greet', arguments: { name: 'Ada' }, requestState: 'opaque' }), false],
  ['an unknown tool, left to the SDK', () => call('no_such_tool', {}), false],
  ['a handle tool, left to the SDK', () => call('outlast_task_status', { taskId: 'AAAAAAAAAAAAAAAAAAAAAA' }), false],
  ['2025 greet', () => legacy('tools/call', { name: 'greet', arguments: { name: 'Ada' } }), true],
  ['2025 greet, bad arguments', () => legacy('tools/call', { name: 'greet', arguments: { name: 5 } }), true],
  ['2025 slow_compute as a task', () => legacy('tools/call', { name: 'slow_compute', arguments: { seconds: 30 }, task: { ttl: 60000 } }), true],
  ['2025 greet as a task: forbidden', () => legacy('tools/call', { name: 'greet', arguments: { name: 'Ada' }, task: {} }), true],
  ['2025 slow_compute, task not an object', () => legacy('tools/call', { name: 'slow_compute', arguments: { seconds: 1 }, task: 5 }), true],
  ['2025 slow_compute without a task: a handle caller', () => legacy('tools/call', { name: 'slow_compute', arguments: { seconds: 0 } }), true],
  ['2025 greet, no bearer token', () => legacy('tools/call', { name: 'greet', arguments: { name: 'Ada' } }, { token: null }), true],
  ['2025 greet whose body also carries a result: not JSON-RPC, refused alike', () => legacy('tools/call', undefined, { body: JSON.stringify({ jsonrpc: '2.0', id: 9, method: 'tools/call', params: { name: 'greet', arguments: { name: 'Ada' } }, result: {} }) }), true],
];

describe('the direct path answers tools/call of its tools exactly as the SDK path does', () => {
  let pair: { direct: ServerProcess; sdk: ServerProcess };
  before(async () => {
    pair = await startPair(['--no-poll-limit', '--max-body-bytes', '4096', ...BEARER]);
  });
  after(async () => {
    await Promise.all([pair?.direct.stop(), pair?.sdk.stop()]);
  });

  it(`${CALLS.length} calls, valid and broken: the same answers, the direct ones without a per-request McpServer`, async () => {
    const none = { working: '§1', asking: '§2', confirming: '§3', completed: '§4', failed: '§5', cancelled: '§6' } as Tasks;
    const built = async (url: string) => Number(textOf((await callTool(url, 'servers_built', {}, { token: 'tok-a' })).result));
    // Task ids and tokens of calls that became tasks differ between the servers.
    const blank = (r: RawReply) => {
      const n = normalise(r, none);
      return { ...n, body: String(n.body).replace(/"taskId":"[^"]+"/g, '"taskId":"<new>"').replace(/Started task [\w-]+/g, 'Started task <new>').replace(/\{\\"taskId\\": \\"[^"\\]+\\"\}/g, '{"taskId": "<new>"}') };
    };
    for (const [name, build, directly] of CALLS) {
      const before = await built(pair.direct.url);
      const a = await send(pair.direct.url, build());
      const after = await built(pair.direct.url);
      const b = await send(pair.sdk.url, build());
      assert.deepEqual(blank(a), blank(b), `${name}: the direct path answers as the SDK path does`);
      assert.equal(after - before, directly ? 0 : 1, `${name}: ${directly ? 'answered without' : 'left to'} the per-request McpServer`);
    }
  });
});

describe('a tools/call whose client leaves before the answer, on both paths', () => {
  let pair: { direct: ServerProcess; sdk: ServerProcess };
  before(async () => {
    pair = await startPair(['--no-poll-limit', ...BEARER]);
  });
  after(async () => {
    await Promise.all([pair?.direct.stop(), pair?.sdk.stop()]);
  });

  /** Calls `busy` for 8 s as `build` asks, leaves after `leaveMs`, and returns how long the tool ran (START to END). */
  async function ranFor(url: string, build: (args: Record<string, unknown>) => RawRequest, leaveMs: number): Promise<number> {
    const log = join(tempDir(), 'busy.log');
    const r = build({ seconds: 8, log });
    const ac = new AbortController();
    const sent = fetch(url, { method: 'POST', headers: r.headers, body: r.body!, signal: ac.signal }).then((res) => res.text()).catch(() => 'left');
    await sleep(leaveMs);
    ac.abort();
    assert.equal(await sent, 'left');
    const end = Date.now() + 15_000;
    for (;;) {
      const lines = existsSync(log) ? readFileSync(log, 'utf8').trim().split('\n') : [];
      const at = (word: string) => Number(lines.find((l) => l.startsWith(word))?.split(' ')[3]);
      if (lines.length >= 2) return at('END') - at('START');
      assert.ok(Date.now() < end, `busy never ended: ${lines.join(' | ')}`);
      await sleep(100);
    }
  }

  for (const [what, build, leaveMs] of [
    ['a 2026-07-28 call without Tasks (a handle caller), left after 500 ms', (args: Record<string, unknown>) => call('busy', args, { caps: {} }), 500],
    ['a 2025-11-25 handle caller, left after 500 ms (before its answer became a stream)', (args: Record<string, unknown>) => legacy('tools/call', { name: 'busy', arguments: args }), 500],
    ['a 2025-11-25 handle caller, left after 2 s (its answer a stream by then)', (args: Record<string, unknown>) => legacy('tools/call', { name: 'busy', arguments: args }), 2000],
  ] as const) {
    it(`${what}: its inline run stops, as on the SDK path`, async () => {
      const [direct, sdk] = await Promise.all([ranFor(pair.direct.url, build, leaveMs), ranFor(pair.sdk.url, build, leaveMs)]);
      // An 8 s run cut off when its caller left: it ends shortly after, on both.
      assert.ok(direct < leaveMs + 2000, `direct: the run went on for ${direct} ms after the client left at ${leaveMs} ms`);
      assert.ok(sdk < leaveMs + 2000, `SDK: the run went on for ${sdk} ms after the client left at ${leaveMs} ms`);
    });
  }
});

describe('the direct path: over-polling and expired ids, as on the SDK path', () => {
  let pair: { direct: ServerProcess; sdk: ServerProcess };
  before(async () => {
    pair = await startPair(['--default-ttl-ms', '2500', '--sweep-interval-ms', '200', '--inline-budget-ms', '50']);
  });
  after(async () => {
    await Promise.all([pair?.direct.stop(), pair?.sdk.stop()]);
  });

  it('polls far faster than advertised get the same 429 on both', async () => {
    for (const s of [pair.direct, pair.sdk]) {
      const t = await callTool(s.url, 'slow_compute', { seconds: 30 });
      const taskId = t.result.taskId as string;
      let refused: RawReply | undefined;
      for (let i = 0; i < 60 && !refused; i++) {
        const r = await send(s.url, request('tasks/get', { taskId }, { token: null }));
        if (r.status === 429) refused = r;
        else {
          assert.equal(r.status, 200);
          checkServerMessage('tasks/get', r.message!);
        }
      }
      assert.ok(refused, `${s === pair.direct ? 'direct' : 'sdk'}: a tight loop of polls was refused`);
      checkServerMessage('tasks/get', refused.message!);
      assert.equal(refused.message!.error.code, -31429);
      assert.match(refused.message!.error.message, /^Polling faster than the advertised pollIntervalMs; retry in \d+ ms$/);
      assert.ok(refused.message!.error.data.retryAfterMs > 0);
      assert.equal(refused.headers['retry-after'], '1');
      assert.equal(refused.contentType, 'application/json');
      await rpc(s.url, 'tasks/cancel', { taskId });
    }
  });

  it('an expired id reads "Task has expired" for get, update and cancel on both', async () => {
    const ids = await Promise.all([pair.direct, pair.sdk].map(async (s) => (await callTool(s.url, 'slow_compute', { seconds: 0.2 })).result.taskId as string));
    await Promise.all([pair.direct, pair.sdk].map((s, i) => waitForTask(s.url, ids[i]!)));
    await sleep(3200);
    const tasks = (i: number): Tasks => ({ working: ids[i]!, asking: ids[i]!, confirming: ids[i]!, completed: ids[i]!, failed: ids[i]!, cancelled: ids[i]! });
    const direct: Side = { name: 'direct', server: pair.direct, tasks: tasks(0) };
    const sdk: Side = { name: 'sdk', server: pair.sdk, tasks: tasks(1) };
    for (const method of ['tasks/get', 'tasks/update', 'tasks/cancel']) {
      const params = (t: Tasks) => (method === 'tasks/update' ? { taskId: t.working, inputResponses: {} } : { taskId: t.working });
      const a = await compare(`${method} expired`, (t) => request(method, params(t), { token: null }), direct, sdk);
      assert.equal(a.message!.error.message, 'Failed to retrieve task: Task has expired');
      assert.equal(a.status, 200);
    }
  });
});
