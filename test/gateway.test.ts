/**
 * `outlast gateway` in front of servers nobody here wrote, started as real processes: the official reference server
 * (`@modelcontextprotocol/server-everything`) over stdio and over Streamable HTTP, and
 * `@modelcontextprotocol/server-filesystem` over stdio; plus upstreams that cannot start, answer garbage or never
 * answer. Driven by TaskClient (a 2026 client with Tasks) and the SDK v1 client (a host without Tasks).
 */
import assert from 'node:assert/strict';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Client as ClientV1 } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport as StdioV1 } from '@modelcontextprotocol/sdk/client/stdio.js';
import { BIN, ROOT, callTool, freePort, httpServiceProcess, rpc, sleep, startServer, tempDir, textOf, until, waitForTask, type ServerProcess } from './helpers.js';
import { connectV1 } from './generations.js';
import { TaskClient } from '../src/client/index.js';
import { lateAnswerer } from './late-answer.js';
import { startAuthServer, type AuthServer } from './oauth-harness.js';

const EVERYTHING = join(ROOT, 'node_modules', '@modelcontextprotocol', 'server-everything', 'dist', 'index.js');
const FILESYSTEM = join(ROOT, 'node_modules', '@modelcontextprotocol', 'server-filesystem', 'dist', 'index.js');
const UPSTREAMS = join(ROOT, 'dist', 'test', 'gateway-upstreams.js');
const NODE = process.execPath;

type ToolResult = { content: Array<{ type: string; text?: string }>; structuredContent?: Record<string, any>; isError?: boolean };

/** `outlast gateway UPSTREAM… ARGS…` on a fresh SQLite file. */
function startGateway(upstream: string[], args: string[] = []): Promise<ServerProcess> {
  return startServer(['--store', `sqlite:${join(tempDir(), 'tasks.db')}`, ...args], { command: ['gateway', ...upstream] });
}

/** The lines the tap saw, as `{pid, dir, msg}` (dir ">" toward the upstream, "<" from it). */
function tapped(log: string): Array<{ pid: number; dir: '>' | '<'; msg: Record<string, any> }> {
  if (!existsSync(log)) return [];
  return readFileSync(log, 'utf8').split('\n').flatMap((l) => {
    const m = /^(\d+) ([<>]) (.*)$/.exec(l);
    if (!m) return [];
    try {
      return [{ pid: Number(m[1]), dir: m[2] as '>' | '<', msg: JSON.parse(m[3]!) }];
    } catch {
      return [];
    }
  });
}

/** The tools/call of `tool` the upstream received (the last one whose arguments match). */
function upstreamCall(log: string, tool: string, matches: (args: Record<string, any>) => boolean = () => true) {
  return tapped(log).filter((t) => t.dir === '>' && t.msg.method === 'tools/call' && t.msg.params?.name === tool && matches(t.msg.params.arguments ?? {})).at(-1);
}

/** The real upstream process under the tap `tapPid`. */
function upstreamPid(log: string, tapPid: number): number {
  const m = new RegExp(`^${tapPid} child (\\d+)$`, 'm').exec(readFileSync(log, 'utf8'));
  assert.ok(m, `the tap ${tapPid} logged its child`);
  return Number(m[1]);
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe('gateway in front of server-everything over stdio', () => {
  let gw: ServerProcess;
  const log = join(tempDir(), 'tap.log');
  before(async () => {
    gw = await startGateway(['--stdio', `${NODE} ${UPSTREAMS} tap ${log} ${NODE} ${EVERYTHING} stdio`, '--name', 'everything'], [
      '--inline-budget-ms', '400', '--park-after-ms', '300', '--handle-after-ms', '1000', '--no-poll-limit',
    ]);
  });
  after(() => gw?.stop());

  it('mirrors the tools with their annotations; a plain tool answers inline; bad arguments are a clear tool error', async () => {
    const list = await rpc(gw.url, 'tools/list');
    const tools = list.result.tools as Array<Record<string, any>>;
    const long = tools.find((t) => t.name === 'trigger-long-running-operation')!;
    assert.equal(long.annotations.readOnlyHint, true);
    assert.equal(long.inputSchema.properties.duration.type, 'number', "the upstream's JSON Schema, as it published it");
    // Tools the upstream registers only once it knows the client can elicit (after initialize, by list_changed).
    assert.ok(tools.some((t) => t.name === 'trigger-elicitation-request'), 'the list refreshed after the upstream said it changed');
    assert.ok(tools.some((t) => t.name === 'outlast_task_status'), 'handles are on by default');

    const echo = await callTool(gw.url, 'echo', { message: 'hi' });
    assert.equal(echo.result.resultType, 'complete');
    assert.equal(textOf(echo.result), 'Echo: hi');
    const sum = await callTool(gw.url, 'get-sum', { a: 2, b: 40 });
    assert.match(textOf(sum.result), /42/);

    // Prompts and resources pass through as the upstream answers them.
    const prompts = (await rpc(gw.url, 'prompts/list')).result.prompts as Array<{ name: string }>;
    assert.ok(prompts.some((p) => p.name === 'simple-prompt'), JSON.stringify(prompts.map((p) => p.name)));
    const resources = (await rpc(gw.url, 'resources/list')).result.resources as Array<{ uri: string }>;
    assert.ok(resources.length > 0);
    const read = await rpc(gw.url, 'resources/read', { uri: resources[0]!.uri }, { headers: { 'mcp-name': resources[0]!.uri } });
    assert.equal(read.result.contents[0].uri, resources[0]!.uri);

    const bad = await callTool(gw.url, 'get-sum', { a: 'two', b: 40 });
    assert.equal(bad.result.isError, true);
    assert.match(textOf(bad.result), /a|number/i);
    assert.equal(upstreamCall(log, 'get-sum', (a) => a.a === 'two'), undefined, 'refused by the gateway before any upstream call');
  });

  it('a long call becomes a task a 2026 client polls to its result, the progress as status and output', async () => {
    const client = new TaskClient({ url: gw.url, status: 'poll' });
    try {
      const statuses: string[] = [];
      const outputs: Array<{ type: string; data: any }> = [];
      const call = await client.start('trigger-long-running-operation', { duration: 2.4, steps: 3 }, { onOutput: (e) => outputs.push(e as never) });
      call.on('task', (t) => t.statusMessage && statuses.push(t.statusMessage));
      const result = await call.result();
      assert.ok(call.taskId, 'it became a task');
      assert.equal(textOf(result as never), 'Long running operation completed. Duration: 2.4 seconds, Steps: 3.');
      assert.ok(statuses.some((s) => /^progress [12] of 3$/.test(s)), `progress as status: ${statuses.join(' | ')}`);
      const progress = outputs.filter((o) => o.type === 'outlast.gateway/progress');
      assert.ok(progress.length >= 2, `progress as output: ${JSON.stringify(outputs)}`);
      assert.equal(progress[0]!.data.total, 3);
      const sent = upstreamCall(log, 'trigger-long-running-operation', (a) => a.duration === 2.4)!;
      assert.ok(sent.msg.params._meta?.progressToken !== undefined, 'the upstream call carried a progressToken');
    } finally {
      await client.close();
    }
  });

  it('the same call from a client without task support is a handle, followed with outlast_task_status', async () => {
    const { client, close } = await connectV1(gw.url);
    try {
      const started = (await client.callTool({ name: 'trigger-long-running-operation', arguments: { duration: 2, steps: 2 } })) as ToolResult;
      const handle = started.structuredContent!;
      assert.equal(handle.status, 'working');
      assert.equal(handle.statusTool, 'outlast_task_status');
      let done: ToolResult;
      for (;;) {
        done = (await client.callTool({ name: 'outlast_task_status', arguments: { taskId: handle.taskId, waitSeconds: 1 } })) as ToolResult;
        if (done.structuredContent?.status !== 'working') break;
      }
      assert.match(textOf(done as never), /^Long running operation completed\. Duration: 2 seconds, Steps: 2\./);
      assert.match(textOf(done as never), /\[outlast\.gateway\/progress\] \{"progress":1,"total":2\}/, 'the progress, as output the status tool shows');
    } finally {
      await close();
    }
  });

  it('cancel reaches the upstream as notifications/cancelled, and its progress stops', async () => {
    const r = await callTool(gw.url, 'trigger-long-running-operation', { duration: 40, steps: 40 });
    const taskId = r.result.taskId as string;
    await waitForTask(gw.url, taskId, (t) => /^progress/.test(t.statusMessage ?? ''));
    const sent = upstreamCall(log, 'trigger-long-running-operation', (a) => a.duration === 40)!;
    const cancel = await rpc(gw.url, 'tasks/cancel', { taskId });
    assert.equal(cancel.error, undefined);
    const ended = await waitForTask(gw.url, taskId);
    assert.equal(ended.status, 'cancelled');
    const cancelled = await until('the cancel at the upstream', () =>
      tapped(log).find((t) => t.pid === sent.pid && t.dir === '>' && t.msg.method === 'notifications/cancelled' && t.msg.params.requestId === sent.msg.id));
    assert.ok(cancelled);
    // The connection of a cut-off call is not reused: its process ends, and no more progress comes from it.
    await until('the cut-off connection to end', () => !alive(sent.pid), 5000);
    const progressAfter = tapped(log).filter((t) => t.pid === sent.pid && t.dir === '<' && t.msg.method === 'notifications/progress').length;
    await sleep(1200);
    assert.equal(tapped(log).filter((t) => t.pid === sent.pid && t.dir === '<' && t.msg.method === 'notifications/progress').length, progressAfter);
    assert.ok(progressAfter < 40);
  });

  it("the upstream's elicitation is the task's question; a person answers it late and the upstream gets the answer", async () => {
    // A person, slower than --park-after-ms.
    const person = lateAnswerer(gw.url, { name: 'Ada Lovelace', check: true, integer: 7 }, 900);
    const client = person.client;
    try {
      const seen: string[] = [];
      const call = await client.start('trigger-elicitation-request', {});
      call.on('task', (t) => seen.push(t.status));
      const result = await call.result();
      assert.ok(seen.includes('input_required'), `statuses: ${seen.join(',')}`);
      assert.match(person.asked!.message, /Please provide inputs/);
      assert.equal(person.asked!.requestedSchema.properties.name.type, 'string');
      assert.match(textOf(result as never), /Name: Ada Lovelace/);
      assert.match(textOf(result as never), /Favorite Integer: 7/);
      const answered = tapped(log).find((t) => t.dir === '>' && t.msg.result?.content?.name === 'Ada Lovelace');
      assert.equal(answered?.msg.result.action, 'accept', 'the answer reached the upstream as the response to its elicitation/create');
    } finally {
      await client.close();
    }
  });

  it("the upstream's sampling request is answered by a client that samples", async () => {
    const client = new TaskClient({
      url: gw.url,
      status: 'poll',
      sampling: async (params) => {
        assert.ok(Array.isArray(params.messages));
        return { role: 'assistant', content: { type: 'text', text: 'The sampled answer is 42.' }, model: 'test-model' };
      },
    });
    try {
      const call = await client.start('trigger-sampling-request', { prompt: 'What is the answer?' });
      const result = await call.result();
      assert.match(JSON.stringify(result), /The sampled answer is 42\./);
      // A caller that cannot sample: the upstream gets the refusal as the error of its request, and says so itself.
      const refused = await callTool(gw.url, 'trigger-sampling-request', { prompt: 'What is the answer?' });
      assert.equal(refused.result.isError, true);
      assert.match(textOf(refused.result), /-32021: The tool asked for sampling\/createMessage, which the client did not declare \(capability "sampling"\)/);
    } finally {
      await client.close();
    }
  });

  it('an upstream that answers with a task of its own (2025-11-25) is followed to its result', async () => {
    const client = new TaskClient({ url: gw.url, status: 'poll' });
    try {
      const statuses: string[] = [];
      const call = await client.start('simulate-research-query', { topic: 'durable tasks' });
      call.on('task', (t) => t.statusMessage && statuses.push(t.statusMessage));
      const result = await call.result();
      assert.match(textOf(result as never), /^# Research Report: durable tasks/);
      assert.ok(statuses.some((s) => /Analyzing content|Synthesizing findings|Generating report/.test(s)), `the upstream task's status: ${statuses.join(' | ')}`);
      const sent = upstreamCall(log, 'simulate-research-query')!;
      assert.ok(sent.msg.params.task, 'called task-augmented, as the upstream requires');
      assert.ok(tapped(log).some((t) => t.dir === '>' && t.msg.method === 'tasks/result'), 'the result came through tasks/result');
    } finally {
      await client.close();
    }
  });

  it("the upstream task's question (2025-11-25, on tasks/result) is the gateway task's; answered late by a person, the upstream task completes with it", async () => {
    const person = lateAnswerer(gw.url, { interpretation: 'snake' }, 900); // slower than --park-after-ms
    const client = person.client;
    try {
      const seen: string[] = [];
      const call = await client.start('simulate-research-query', { topic: 'python', ambiguous: true });
      call.on('task', (t) => seen.push(t.status));
      const result = await call.result();
      assert.ok(seen.includes('input_required'), `statuses: ${seen.join(',')}`);
      assert.match(person.asked!.message, /could have multiple interpretations/);
      assert.match(textOf(result as never), /Clarification\*\*: snake/);
    } finally {
      await client.close();
    }
  });

  it("a cancel of the gateway's task is the upstream task's tasks/cancel (2025-11-25)", async () => {
    const r = await callTool(gw.url, 'simulate-research-query', { topic: 'cancelled research' });
    const taskId = r.result.taskId as string;
    await waitForTask(gw.url, taskId, (t) => /Gathering sources|Analyzing content/.test(t.statusMessage ?? ''));
    const sent = upstreamCall(log, 'simulate-research-query', (a) => a.topic === 'cancelled research')!;
    const created = tapped(log).find((t) => t.pid === sent.pid && t.dir === '<' && t.msg.id === sent.msg.id)!;
    const upId = created.msg.result.task.taskId as string;
    assert.equal((await rpc(gw.url, 'tasks/cancel', { taskId })).error, undefined);
    assert.equal((await waitForTask(gw.url, taskId)).status, 'cancelled');
    const cancel = await until('tasks/cancel at the upstream', () => tapped(log).find((t) => t.dir === '>' && t.msg.method === 'tasks/cancel' && t.msg.params.taskId === upId), 5000);
    const answered = await until("the upstream's answer to it", () => tapped(log).find((t) => t.pid === cancel.pid && t.dir === '<' && t.msg.id === cancel.msg.id), 5000);
    assert.equal(answered.msg.result?.status, 'cancelled', JSON.stringify(answered.msg));
  });

  it('an upstream process killed mid-call: a read-only call runs again on a new one, a question-waiting call fails naming it; the next call works', async () => {
    const r = await callTool(gw.url, 'trigger-long-running-operation', { duration: 3, steps: 3 });
    const taskId = r.result.taskId as string;
    await waitForTask(gw.url, taskId, (t) => /^progress/.test(t.statusMessage ?? ''));
    const first = upstreamCall(log, 'trigger-long-running-operation', (a) => a.duration === 3)!;
    process.kill(upstreamPid(log, first.pid), 'SIGKILL');
    const done = await waitForTask(gw.url, taskId, undefined, { timeoutMs: 15_000 });
    assert.equal(done.status, 'completed', JSON.stringify(done));
    assert.equal(textOf(done.result), 'Long running operation completed. Duration: 3 seconds, Steps: 3.');
    const again = upstreamCall(log, 'trigger-long-running-operation', (a) => a.duration === 3)!;
    assert.notEqual(again.pid, first.pid, 're-run on a fresh upstream process');

    const q = await callTool(gw.url, 'trigger-elicitation-request', {});
    const qId = q.result.taskId as string;
    await waitForTask(gw.url, qId, (t) => t.status === 'input_required');
    const asking = upstreamCall(log, 'trigger-elicitation-request')!;
    process.kill(upstreamPid(log, asking.pid), 'SIGKILL');
    const failed = await waitForTask(gw.url, qId);
    assert.equal(failed.status, 'failed');
    assert.match(failed.error.message, /the call of "trigger-elicitation-request" on upstream "everything" was lost: upstream "everything" .*\(pid \d+\) was killed by SIGKILL/);

    const echo = await callTool(gw.url, 'echo', { message: 'still here' });
    assert.equal(textOf(echo.result), 'Echo: still here');
  });
});

describe('gateway bounds and fronts', () => {
  it('--max-running applies to upstream calls: a second call waits in the run queue until the first ends', async () => {
    const log = join(tempDir(), 'tap.log');
    const gw = await startGateway(['--stdio', `${NODE} ${UPSTREAMS} tap ${log} ${NODE} ${EVERYTHING} stdio`, '--name', 'everything'], ['--max-running', '1', '--inline-budget-ms', '200', '--no-poll-limit']);
    try {
      const first = await callTool(gw.url, 'trigger-long-running-operation', { duration: 1.5, steps: 1 });
      const second = await callTool(gw.url, 'trigger-long-running-operation', { duration: 0.2, steps: 1 });
      assert.equal(second.result.resultType, 'task', 'over the bound, the call is a task that waits');
      const [a, b] = await Promise.all([waitForTask(gw.url, first.result.taskId), waitForTask(gw.url, second.result.taskId)]);
      assert.equal(a.status, 'completed');
      assert.equal(b.status, 'completed');
      const lines = tapped(log);
      const firstAnswered = lines.findIndex((t) => t.dir === '<' && /Duration: 1.5 seconds/.test(JSON.stringify(t.msg.result ?? '')));
      const secondSent = lines.findIndex((t) => t.dir === '>' && t.msg.method === 'tools/call' && t.msg.params.arguments?.duration === 0.2);
      assert.ok(firstAnswered >= 0 && secondSent > firstAnswered, 'the second upstream call was made only after the first one answered');
    } finally {
      await gw.stop();
    }
  });

  it('--serve-stdio: a host that starts the gateway itself (SDK v1 over stdio, as Claude Desktop does) calls through it', async () => {
    const client = new ClientV1({ name: 'stdio-host', version: '1.0.0' });
    const transport = new StdioV1({
      command: NODE,
      args: [BIN, 'gateway', '--stdio', `${NODE} ${EVERYTHING} stdio`, '--serve-stdio', '--store', `sqlite:${join(tempDir(), 'tasks.db')}`],
      stderr: 'pipe',
    });
    await client.connect(transport);
    try {
      const { tools } = await client.listTools();
      assert.ok(tools.some((t) => t.name === 'echo'));
      const r = (await client.callTool({ name: 'echo', arguments: { message: 'from a stdio host' } })) as ToolResult;
      assert.equal(textOf(r as never), 'Echo: from a stdio host');
    } finally {
      await client.close();
    }
  });
});

describe('gateway in front of server-filesystem over stdio', () => {
  let gw: ServerProcess;
  const dir = tempDir('outlast-gw-fs-');
  before(async () => {
    writeFileSync(join(dir, 'hello.txt'), 'Hello from a file\n');
    gw = await startGateway(['--stdio', `${NODE} ${FILESYSTEM} ${dir}`]);
  });
  after(() => gw?.stop());

  it('serves its tools with their read-only annotations; reads inline; a path outside its folder is its own clear error', async () => {
    const tools = (await rpc(gw.url, 'tools/list')).result.tools as Array<Record<string, any>>;
    assert.equal(tools.find((t) => t.name === 'read_text_file')!.annotations.readOnlyHint, true);
    assert.equal(tools.find((t) => t.name === 'list_directory')!.annotations.readOnlyHint, true);
    assert.equal(tools.find((t) => t.name === 'write_file')!.annotations.readOnlyHint, false);
    const listing = await callTool(gw.url, 'list_directory', { path: dir });
    assert.match(textOf(listing.result), /\[FILE\] hello\.txt/);
    const read = await callTool(gw.url, 'read_text_file', { path: join(dir, 'hello.txt') });
    assert.equal(textOf(read.result), 'Hello from a file\n');
    const outside = await callTool(gw.url, 'read_text_file', { path: '/etc/hostname' });
    assert.equal(outside.result.isError, true);
    assert.match(textOf(outside.result), /outside allowed directories|Access denied/i);
  });
});

describe('gateway in front of server-everything over Streamable HTTP', () => {
  let gw: ServerProcess;
  let port: number;
  const upstream = { stop: async () => undefined } as { start?: () => Promise<void>; stop: () => Promise<void> };
  before(async () => {
    port = await freePort();
    const svc = httpServiceProcess('server-everything', 'env', [`PORT=${port}`, NODE, EVERYTHING, 'streamableHttp'], `http://127.0.0.1:${port}/mcp`);
    await svc.start();
    upstream.stop = () => svc.stop();
    gw = await startGateway(['--http', `http://127.0.0.1:${port}/mcp`], ['--inline-budget-ms', '400']);
  });
  after(async () => {
    await gw?.stop();
    await upstream.stop();
  });

  it('a plain tool inline, and a long one as a task polled to its result', async () => {
    const echo = await callTool(gw.url, 'echo', { message: 'over http' });
    assert.equal(textOf(echo.result), 'Echo: over http');
    const client = new TaskClient({ url: gw.url, status: 'poll' });
    try {
      const call = await client.start('trigger-long-running-operation', { duration: 1.5, steps: 3 });
      const result = await call.result();
      assert.ok(call.taskId, 'it became a task');
      assert.equal(textOf(result as never), 'Long running operation completed. Duration: 1.5 seconds, Steps: 3.');
    } finally {
      await client.close();
    }
  });

  it('by default ten long calls run upstream side by side (HTTP sessions are 16 a replica; stdio processes 4)', async () => {
    const client = new TaskClient({ url: gw.url, status: 'poll' });
    try {
      // Each call reports progress every 0.5 s for 6 s: a call waiting for a session would show none before 6 s.
      const t0 = Date.now();
      const progressAt: number[] = [];
      const calls = await Promise.all(Array.from({ length: 10 }, async (_, i) => {
        const call = await client.start('trigger-long-running-operation', { duration: 6, steps: 12 });
        call.on('task', (t) => t.statusMessage?.startsWith('progress') && progressAt[i] === undefined && (progressAt[i] = Date.now() - t0));
        return call;
      }));
      await until('every call to report progress before 5 s', () => progressAt.filter((t) => t !== undefined).length === 10, 5_000);
      const results = await Promise.all(calls.map((c) => c.result()));
      for (const r of results) assert.equal(textOf(r as never), 'Long running operation completed. Duration: 6 seconds, Steps: 12.');
    } finally {
      await client.close();
    }
  });
});

describe('gateway in front of an HTTP upstream behind OAuth (client credentials)', () => {
  let as: AuthServer;
  let upstream: ServerProcess;
  let gw: ServerProcess;
  before(async () => {
    const port = await freePort();
    const resource = `http://127.0.0.1:${port}/mcp`;
    as = await startAuthServer({ jwtResources: [resource] });
    // A protected upstream: the fixture server behind Outlast's own OAuth resource server.
    upstream = await startServer(['--port', String(port), '--store', `sqlite:${join(tempDir(), 'up.db')}`, '--oauth-issuer', as.issuer, '--oauth-resource', resource, '--oauth-allow-http']);
    gw = await startServer(['--store', `sqlite:${join(tempDir(), 'tasks.db')}`], {
      command: ['gateway', '--http', resource, '--name', 'protected', '--upstream-oauth-client-id', 'machine', '--upstream-oauth-issuer', as.issuer],
      env: { OUTLAST_UPSTREAM_OAUTH_CLIENT_SECRET: 'machine-secret' },
    });
  });
  after(async () => {
    await gw?.stop();
    await upstream?.stop();
    await as?.stop();
  });

  it('gets a token for the upstream by itself and calls through; a wrong secret is a clear error', async () => {
    const r = await callTool(gw.url, 'sleep', { seconds: 0.05 });
    assert.match(textOf(r.result), /^Slept 0.05 s/);
    const bad = await startServer(['--store', `sqlite:${join(tempDir(), 'tasks.db')}`], {
      command: ['gateway', '--http', `${new URL(upstream.url).origin}/mcp`, '--name', 'protected', '--upstream-oauth-client-id', 'machine', '--upstream-oauth-issuer', as.issuer],
      env: { OUTLAST_UPSTREAM_OAUTH_CLIENT_SECRET: 'not-the-secret' },
    });
    try {
      const list = await rpc(bad.url, 'tools/list');
      assert.match(list.error?.message ?? '', /upstream "protected" \(http:\/\/127\.0\.0\.1:\d+\/mcp\) could not start: .*invalid_client|client authentication failed/i);
    } finally {
      await bad.stop();
    }
  });
});

describe('gateway in front of upstreams that fail', () => {
  it('an upstream that cannot start: tools/list and calls say why, and the gateway keeps serving', async () => {
    const gw = await startGateway(['--stdio', '/nonexistent/outlast-no-such-server --flag']);
    try {
      for (let i = 0; i < 2; i++) {
        const list = await rpc(gw.url, 'tools/list');
        assert.match(list.error?.message ?? '', /upstream "outlast-no-such-server" \(outlast-no-such-server\) could not start: "\/nonexistent\/outlast-no-such-server" was not found \(ENOENT; is it on PATH\?\)/);
        const call = await callTool(gw.url, 'echo', { message: 'x' });
        assert.match(call.error?.message ?? '', /could not start/);
        await sleep(1100); // past the retry interval: it tries again, and says so again
      }
      assert.equal((await fetch(new URL('/healthz', gw.url))).status, 200, 'the gateway still serves');
    } finally {
      await gw.stop();
    }
  });

  it('an upstream that writes garbage on stdout: a clear error naming what it wrote', async () => {
    const gw = await startGateway(['--stdio', `${NODE} ${UPSTREAMS} garbage`, '--name', 'noisy']);
    try {
      const list = await rpc(gw.url, 'tools/list');
      assert.match(list.error?.message ?? '', /upstream "noisy" .* wrote something that is not JSON-RPC on its stdout \("Welcome! This server prints a banner on stdout\."\) and no answer to initialize/);
      assert.equal((await fetch(new URL('/healthz', gw.url))).status, 200);
    } finally {
      await gw.stop();
    }
  });

  it('an upstream that never answers a call: --call-timeout-ms fails the task saying so, and the next call is served', async () => {
    const gw = await startGateway(['--stdio', `${NODE} ${UPSTREAMS} silent`, '--name', 'silent', '--call-timeout-ms', '800'], ['--inline-budget-ms', '300']);
    try {
      const r = await callTool(gw.url, 'hang', {});
      assert.equal(r.result.resultType, 'task');
      const failed = await waitForTask(gw.url, r.result.taskId as string);
      assert.equal(failed.status, 'failed');
      assert.match(failed.error.message, /the call of "hang" on upstream "silent" did not answer within 800 ms \(--call-timeout-ms\)/);
      assert.equal(failed.error.data.reason, 'upstream_timeout');
      // On a fresh upstream process (the cut-off one is not reused): inline, or a task if its start is slow.
      const ok = await callTool(gw.url, 'ok', { word: 'fine' });
      const answer = ok.result.resultType === 'task' ? (await waitForTask(gw.url, ok.result.taskId as string)).result : ok.result;
      assert.equal(textOf(answer), 'ok fine');
    } finally {
      await gw.stop();
    }
  });
});
