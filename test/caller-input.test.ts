/**
 * No request can make the server keep what it does not need: listen streams abandoned during their setup release every
 * watch (PostgreSQL, 100 listens of 1,000 ids, client gone 50 ms in); 520 distinct ~1 MB tasks/get bodies leave a
 * server with a small heap alive and flat; answers nested too deeply or too large are refused -32602 with nothing
 * stored; the per-principal share cache and the poll-verdict cache stay within their bounds.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import Database from 'better-sqlite3';
import { TASKS_CAPS, callTool, freshSchema, getTask, headersFor, metaFor, pgStoreUrl, sleep, startServer, tempDir, waitForTask, type ServerProcess } from './helpers.js';
import { PrincipalBounds, MAX_REMEMBERED_PRINCIPALS } from '../src/runtime/principal-bounds.js';
import { SqliteTaskStore } from '../src/store/sqlite/index.js';
import { RequestClassifications } from '../src/server/direct/direct.js';
import { classifyInboundRequest } from '@modelcontextprotocol/server';

const CLOCK_MODULE = new URL('./clock-module.js', import.meta.url).pathname;

/** CPU seconds (user + system) the process has used, from /proc. */
function cpuSeconds(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

function rssMiB(pid: number): number {
  return Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) / 1024;
}

async function watchesOpen(url: string): Promise<number> {
  const text = await (await fetch(new URL('/metrics', url))).text();
  const m = /^outlast_watch_active(?:\{[^}]*\})? (\d+)/m.exec(text);
  assert.ok(m, `outlast_watch_active is reported:\n${text.slice(0, 2000)}`);
  return Number(m[1]);
}

/** A POST of a hand-written body (a value too deep for JSON.stringify on this side). */
async function post(url: string, method: string, body: string, name?: string): Promise<{ status: number; message: Record<string, any> }> {
  const res = await fetch(url, { method: 'POST', headers: headersFor(method, name ? { taskId: name } : {}), body });
  const text = await res.text();
  const ct = res.headers.get('content-type') ?? '';
  const data = ct.includes('text/event-stream') ? text.split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5)).join('') : text;
  return { status: res.status, message: JSON.parse(data) };
}

describe('no request can make the server keep what it does not need', () => {
  const servers: ServerProcess[] = [];
  after(async () => {
    await Promise.all(servers.map((s) => s.stop('SIGKILL')));
  });

  it('PostgreSQL: 100 listens of 1,000 ids abandoned 50 ms into their setup leave no watch behind, and the server idles', async (t) => {
    // All 100 listens are one (anonymous) principal's: the per-principal stream bound is raised so each sets up.
    const server = await startServer(['--store', pgStoreUrl(freshSchema('listen')), '--metrics', '--max-streams-per-principal', '200'], { module: CLOCK_MODULE });
    servers.push(server);
    const ids: string[] = [];
    await Promise.all(Array.from({ length: 20 }, async () => {
      while (ids.length < 1000) {
        const r = await callTool(server.url, 'hold', { ms: 600_000 });
        assert.equal(r.error, undefined, JSON.stringify(r.error));
        ids.push(r.result.taskId);
      }
    }));
    const taskIds = ids.slice(0, 1000);
    const params = { notifications: { taskIds }, _meta: metaFor(TASKS_CAPS) };
    let peak = 0;
    await Promise.all(Array.from({ length: 100 }, async (_, i) => {
      const ac = new AbortController();
      const sent = fetch(server.url, {
        method: 'POST',
        headers: headersFor('subscriptions/listen', params),
        body: JSON.stringify({ jsonrpc: '2.0', id: `listen-${i}`, method: 'subscriptions/listen', params }),
        signal: ac.signal,
      }).catch(() => undefined);
      await sleep(50);
      if (i === 0) peak = await watchesOpen(server.url);
      ac.abort();
      await sent;
    }));
    t.diagnostic(`watches open 50 ms into the first listen's setup: ${peak}`);
    // Once the clients are gone no listen sets up one more watch (before: each went on through its 1,000 ids, and the
    // old front then kept them all): the count only falls, to zero.
    const end = Date.now() + 60_000;
    let open = await watchesOpen(server.url);
    const samples = [open];
    while (open > 0 && Date.now() < end) {
      await sleep(100);
      open = await watchesOpen(server.url);
      samples.push(open);
    }
    t.diagnostic(`watches open after the clients left: ${samples.join(' ')}`);
    assert.equal(open, 0, 'every watch of the abandoned listens was released');
    assert.ok(samples.every((n, i) => i === 0 || n <= samples[i - 1]!), `no watch was set up after the clients left: ${samples.join(' ')}`);
    // Idle: without watches, no re-reads every 5 s per id (before the fix: 0.84 core and ~4,000 queries/s for ever).
    const c0 = cpuSeconds(server.pid);
    await sleep(6000);
    const core = (cpuSeconds(server.pid) - c0) / 6;
    t.diagnostic(`CPU over 6 s after the listens: ${core.toFixed(3)} core`);
    assert.ok(core < 0.15, `the server uses ${core.toFixed(3)} core while idle`);
    assert.equal(await watchesOpen(server.url), 0);
    // A listen that stays is served as before.
    const g = await getTask(server.url, taskIds[0]!);
    assert.equal(g.result.status, 'working');
  });

  it('520 distinct ~1 MB tasks/get bodies: a server with a 64 MB heap answers each and stays alive and flat', async (t) => {
    const server = await startServer(['--store', `sqlite:${join(tempDir(), 'bodies.db')}`], { env: { NODE_OPTIONS: '--max-old-space-size=64' } });
    servers.push(server);
    const before = rssMiB(server.pid);
    const pad = 'x'.repeat(1_000_000);
    let next = 0;
    await Promise.all(Array.from({ length: 4 }, async () => {
      while (next < 520) {
        const i = next++;
        const taskId = `unknown-${i}`;
        const body = JSON.stringify({ jsonrpc: '2.0', id: i + 1, method: 'tasks/get', params: { taskId, padding: `${i}${pad}`, _meta: metaFor(TASKS_CAPS) } });
        const r = await post(server.url, 'tasks/get', body, taskId);
        assert.equal(r.message.error?.code, -32602, JSON.stringify(r.message).slice(0, 300));
        assert.match(r.message.error.message, /not found/i);
      }
    }));
    const afterRss = rssMiB(server.pid);
    t.diagnostic(`RSS ${before.toFixed(0)} MiB before, ${afterRss.toFixed(0)} MiB after 520 bodies of 1 MB`);
    assert.equal(server.proc.exitCode, null, 'the server is alive');
    assert.ok(afterRss < before + 120, `RSS grew from ${before.toFixed(0)} to ${afterRss.toFixed(0)} MiB`);
    const ok = await callTool(server.url, 'greet', { name: 'still here' });
    assert.equal(ok.error, undefined, JSON.stringify(ok.error));
  });

  it('answers nested 100,000 or 40 deep or 900 KB large are refused -32602 and nothing is stored; junk beside a good answer is not kept', async () => {
    const db = join(tempDir(), 'answers.db');
    const server = await startServer(['--store', `sqlite:${db}`, '--park-after-ms', '0']);
    servers.push(server);
    const r = await callTool(server.url, 'ask', { message: 'Name?', timeoutSeconds: 600 });
    assert.equal(r.error, undefined, JSON.stringify(r.error));
    const taskId = r.result.taskId as string;
    await waitForTask(server.url, taskId, (x) => x.status === 'input_required');
    const meta = JSON.stringify(metaFor(TASKS_CAPS));
    const update = (answerJson: string) =>
      post(server.url, 'tasks/update', `{"jsonrpc":"2.0","id":7,"method":"tasks/update","params":{"taskId":"${taskId}","inputResponses":{"answer":${answerJson}},"_meta":${meta}}}`, taskId);
    const nested = (depth: number) => `{"action":"accept","content":{"answer":"x"},"junk":${'{"a":'.repeat(depth)}1${'}'.repeat(depth)}}`;
    // 100,000 deep: refused by the front's nesting limit of the whole body, before anything walks it.
    const deep = await update(nested(100_000));
    assert.equal(deep.message.error?.code, -32602, JSON.stringify(deep.message).slice(0, 300));
    assert.match(deep.message.error.message, /nested deeper than 128 levels .*nothing was stored/);
    // 40 deep: within the body's limit, refused by the answers' own.
    const deeper = await update(nested(40));
    assert.equal(deeper.message.error?.code, -32602, JSON.stringify(deeper.message).slice(0, 300));
    assert.match(deeper.message.error.message, /nested deeper than 32 levels; nothing was stored/);
    const huge = await update(JSON.stringify({ action: 'accept', content: { answer: 'x' }, junk: 'j'.repeat(900_000) }));
    assert.equal(huge.message.error?.code, -32602, JSON.stringify(huge.message).slice(0, 300));
    assert.match(huge.message.error.message, /larger than 262144 bytes; nothing was stored/);
    const stored = () => new Database(db, { readonly: true }).prepare('SELECT input_responses FROM tasks WHERE task_id = ?').get(taskId) as { input_responses: string };
    assert.equal(stored().input_responses, '{}', 'nothing was stored');
    assert.equal((await getTask(server.url, taskId)).result.status, 'input_required');
    const good = await update(JSON.stringify({ action: 'accept', content: { answer: 'Ada' }, junk: 'j'.repeat(10_000) }));
    assert.equal(good.message.error, undefined, JSON.stringify(good.message).slice(0, 300));
    const done = await waitForTask(server.url, taskId);
    assert.equal(done.status, 'completed');
    assert.doesNotMatch(stored().input_responses, /junk/, 'only the elicitation result (action, content) is stored');
    assert.match(stored().input_responses, /Ada/);
  });

  it('the per-principal share cache keeps at most 10,000 principals; the poll-verdict cache at most 512 entries and 1 MiB, never a large body', async () => {
    const store = new SqliteTaskStore(join(tempDir(), 'shares.db'));
    await store.init();
    const bounds = new PrincipalBounds(store, { maxRunningPerPrincipal: 1, maxQueuedPerPrincipal: 1, maxTasksPerPrincipal: 1 }, () => 0);
    for (let i = 0; i < MAX_REMEMBERED_PRINCIPALS + 500; i++) await bounds.takeQueued(`p${i}`);
    assert.equal(bounds.remembered, MAX_REMEMBERED_PRINCIPALS);
    await store.close();

    const polls = new RequestClassifications();
    const classify = (body: Record<string, unknown>) =>
      polls.classify({ httpMethod: 'POST', protocolVersionHeader: '2026-07-28', mcpMethodHeader: 'tasks/get', mcpNameHeader: String((body.params as { taskId: string }).taskId), body }, body as never);
    const envelope = (i: number, extra: Record<string, unknown> = {}) => ({ jsonrpc: '2.0', id: i, method: 'tasks/get', params: { taskId: `t${i}`, ...extra, _meta: metaFor(TASKS_CAPS) } });
    for (let i = 0; i < 2000; i++) classify(envelope(i, { tag: `distinct-${i}` }));
    assert.ok(polls.size.entries <= 512 && polls.size.bytes <= 1024 * 1024, JSON.stringify(polls.size));
    classify(envelope(1)); // the same envelope for any task id: one entry
    const n = polls.size.entries;
    classify(envelope(2));
    assert.equal(polls.size.entries, n);
    const big = polls.size.bytes;
    classify(envelope(3, { padding: 'x'.repeat(100_000) }));
    assert.equal(polls.size.bytes, big, 'a large body is classified, not kept');
    const padded = (i: number) => ({ jsonrpc: '2.0', id: i, method: 'tasks/get', params: { taskId: `t${i}`, _meta: { ...metaFor(TASKS_CAPS), pad: 'x'.repeat(10_000) } } });
    classify(padded(4));
    assert.equal(polls.size.bytes, big, 'a large envelope is classified, not kept');

    // A remembered verdict is found by the envelope's members, in any order, and never for a different envelope.
    const fresh = new RequestClassifications();
    const modern = (meta: Record<string, unknown>, i = 1) => {
      const body = { jsonrpc: '2.0', id: i, method: 'tasks/get', params: { taskId: `t${i}`, _meta: meta } };
      return fresh.classify({ httpMethod: 'POST', protocolVersionHeader: '2026-07-28', mcpMethodHeader: 'tasks/get', mcpNameHeader: `t${i}`, body }, body as never);
    };
    const meta = metaFor(TASKS_CAPS) as Record<string, unknown>;
    const first = modern(meta, 1);
    assert.equal(first.kind, 'modern');
    assert.equal(first.kind === 'modern' && (first.message as { id?: unknown }).id, 1);
    const again = modern(Object.fromEntries(Object.entries(meta).reverse()), 2);
    assert.equal(fresh.size.entries, 1, 'the same envelope, members reordered, is one entry');
    assert.equal(again.kind === 'modern' && (again.message as { id?: unknown }).id, 2, 'the verdict carries this request');
    const wrongVersion = modern({ ...meta, 'io.modelcontextprotocol/protocolVersion': '2025-11-25' }, 3);
    assert.equal(wrongVersion.kind, 'reject', JSON.stringify(wrongVersion).slice(0, 300));
    const noEnvelope = modern(undefined as never, 4);
    assert.equal(noEnvelope.kind, 'reject', 'a poll without its envelope is refused, not given the envelope\'s verdict');
    // Many clients' envelopes under the same headers: a poll compares with at most 16 of them.
    for (let i = 0; i < 40; i++) modern({ ...meta, 'io.modelcontextprotocol/clientInfo': { name: `client-${i}`, version: '1' } }, 10 + i);
    assert.equal(fresh.size.entries, 16, JSON.stringify(fresh.size));
  });

  it("a remembered verdict on a poll or a tool call is the SDK's own for that request, whatever its id, name, arguments and task", () => {
    const meta = metaFor(TASKS_CAPS) as Record<string, unknown>;
    const modern = { protocolVersionHeader: '2026-07-28' };
    const requests: Array<[string, Record<string, string | undefined>, Record<string, unknown>]> = [];
    const add = (what: string, headers: Record<string, string | undefined>, body: Record<string, unknown>) => requests.push([what, headers, body]);
    for (const [i, args] of [{ a: 1 }, [1, 2], 'text', null, { nested: { deep: [{ x: 1 }] } }, undefined].entries()) {
      const params = { name: `tool_${i % 2}`, ...(args !== undefined ? { arguments: args } : {}), ...(i % 3 === 0 ? { task: { ttl: 1000 * i } } : i % 3 === 1 ? { task: 'not an object' } : {}) };
      const id = i % 2 ? `call-${i}` : i;
      add(`2025 call ${i}`, { protocolVersionHeader: '2025-11-25' }, { jsonrpc: '2.0', id, method: 'tools/call', params });
      add(`2025 call ${i}, no version header`, {}, { jsonrpc: '2.0', id, method: 'tools/call', params });
      add(`2026 call ${i}`, { ...modern, mcpMethodHeader: 'tools/call' }, { jsonrpc: '2.0', id, method: 'tools/call', params: { ...params, _meta: meta } });
      add(`2026 call ${i}, Mcp-Method tasks/get`, { ...modern, mcpMethodHeader: 'tasks/get' }, { jsonrpc: '2.0', id, method: 'tools/call', params: { ...params, _meta: meta } });
      add(`2026 poll ${i}, Mcp-Method tasks/get`, { ...modern, mcpMethodHeader: 'tasks/get' }, { jsonrpc: '2.0', id, method: 'tasks/get', params: { taskId: `t${i}`, _meta: meta } });
      add(`2026 call ${i}, no envelope`, { ...modern, mcpMethodHeader: 'tools/call' }, { jsonrpc: '2.0', id, method: 'tools/call', params });
      add(`2026 call ${i}, an older version claimed`, { ...modern, mcpMethodHeader: 'tools/call' }, { jsonrpc: '2.0', id, method: 'tools/call', params: { ...params, _meta: { ...meta, 'io.modelcontextprotocol/protocolVersion': '2025-11-25' } } });
      add(`2026 call ${i}, clientInfo not an object`, { ...modern, mcpMethodHeader: 'tools/call' }, { jsonrpc: '2.0', id, method: 'tools/call', params: { ...params, _meta: { ...meta, 'io.modelcontextprotocol/clientInfo': 5 } } });
      add(`2026 call ${i}, progressToken not a token`, { ...modern, mcpMethodHeader: 'tools/call' }, { jsonrpc: '2.0', id, method: 'tools/call', params: { ...params, _meta: { ...meta, progressToken: { no: 1 } } } });
      add(`2025 call ${i}, progressToken not a token`, { protocolVersionHeader: '2025-11-25' }, { jsonrpc: '2.0', id, method: 'tools/call', params: { ...params, _meta: { progressToken: { no: 1 } } } });
    }
    const cache = new RequestClassifications();
    const sdk = (headers: Record<string, string | undefined>, body: Record<string, unknown>) => classifyInboundRequest({ httpMethod: 'POST', ...headers, body });
    // Twice over: the second round is answered from what the first kept.
    for (const round of [1, 2]) {
      for (const [what, headers, body] of requests) {
        const got = cache.classify({ httpMethod: 'POST', ...headers, body }, body as never);
        assert.deepEqual(got, sdk(headers, body), `round ${round}, ${what}`);
        if (got.kind === 'modern') assert.equal(got.message, body, `${what}: the verdict carries this request`);
      }
    }
    assert.ok(cache.size.entries > 0 && cache.size.entries < requests.length / 2, `verdicts are shared across ids, names, arguments and tasks: ${cache.size.entries} kept for ${requests.length} requests`);
  });
});
