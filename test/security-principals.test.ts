/**
 * Who a task belongs to when nobody, or one OAuth client for many people, is calling (issue 40, findings 3 and 4):
 * two callers without credentials on loopback, each with its own SDK v1 session, do not see each other's tasks; a
 * caller that shares `anonymous` is shown no list; `outlast serve` and `gateway` refuse a network address without
 * authentication unless told so (and then say so loudly), as `serveHttp` does; and an app that embeds Outlast
 * behind one OAuth client, as docs/existing-app.md writes it, keeps alice's tasks from bob and refuses credentials
 * that name nobody instead of binding them to the client id.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { McpServer } from '@modelcontextprotocol/server';
import { Client as ClientV1 } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport as TransportV1 } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema, McpError } from '@modelcontextprotocol/sdk/types.js';
import { Outlast, serveHttp } from '../src/server/index.js';
import { SqliteTaskStore } from '../src/store/sqlite/index.js';
import { BIN, FIXTURES, ROOT, callTool, rpc, startServer, tempDir, useServer, waitForTask } from './helpers.js';
import { connectV1, mcpError } from './generations.js';
import { docBlock } from './doc-blocks.js';
import { startApp, writeScript, type App } from './doc-apps.js';
import { startAuthServer, userTokens, type AuthServer } from './oauth-harness.js';

type V1 = Awaited<ReturnType<typeof connectV1>>['client'];

/** Starts a task through v1's callToolStream and returns its id once it is created (the task runs on). */
async function startTask(client: V1, name: string, args: Record<string, unknown>): Promise<string> {
  for await (const m of client.experimental.tasks.callToolStream({ name, arguments: args })) {
    if (m.type === 'taskCreated') return m.task.taskId;
    if (m.type === 'error') throw m.error;
  }
  throw new Error('the stream ended without a task');
}

/** What a refusal of `taskId` says once the id itself is taken out: an unknown task and a foreign one must match. */
function unknownShape(e: McpError, taskId: string): string {
  return `${e.code} ${e.message.split(taskId).join('<id>')}`;
}

/** The SDK v1 client behind something that drops its Mcp-Session-Id (a proxy, or a client that keeps no session). */
async function connectV1WithoutSession(url: string): Promise<V1> {
  const dropSession: typeof fetch = (input, init) => {
    const headers = new Headers(init?.headers);
    headers.delete('mcp-session-id');
    return fetch(input, { ...init, headers });
  };
  const client = new ClientV1({ name: 'v1-no-session', version: '1.32.2' }, { capabilities: {} });
  await client.connect(new TransportV1(new URL(url), { fetch: dropSession }));
  await client.listTools();
  return client;
}

describe('callers without credentials on loopback', () => {
  const server = useServer(['--events', '--inline-budget-ms', '100']);

  it("two anonymous SDK v1 sessions: B's tasks/list does not show A's task, B's tasks/get and tasks/result of it read as unknown; A still lists and reads its own", async () => {
    const a = await connectV1(server.url);
    const b = await connectV1(server.url);
    try {
      const taskId = await startTask(a.client, 'sleep', { seconds: 0.2 });
      const own = await a.client.experimental.tasks.getTaskResult(taskId, CallToolResultSchema);
      assert.match((own.content[0] as { text: string }).text, /^Slept 0\.2 s/, 'A reads its own result');
      assert.ok((await a.client.experimental.tasks.listTasks()).tasks.some((t) => t.taskId === taskId), 'A lists its own task');

      const bList = await b.client.experimental.tasks.listTasks();
      assert.ok(!bList.tasks.some((t) => t.taskId === taskId), "A's task is not in B's tasks/list");
      const unknown = unknownShape(await mcpError(b.client.experimental.tasks.getTask('AAAAAAAAAAAAAAAAAAAAAA')), 'AAAAAAAAAAAAAAAAAAAAAA');
      assert.equal(unknownShape(await mcpError(b.client.experimental.tasks.getTask(taskId)), taskId), unknown, "B's tasks/get of A's task reads like an unknown id");
      assert.equal(unknownShape(await mcpError(b.client.experimental.tasks.getTaskResult(taskId, CallToolResultSchema)), taskId), unknown, "B's tasks/result of A's task reads like an unknown id");
      assert.equal((await a.client.experimental.tasks.getTask(taskId)).status, 'completed', 'A still reads its task after B tried');
      await a.wire.assertClean();
      await b.wire.assertClean();
    } finally {
      await a.close();
      await b.close();
    }
  });

  it('a 2025-11-25 caller without a session (its Mcp-Session-Id dropped) is refused tasks/list with an error that says why, and reads no session\'s task', async () => {
    const a = await connectV1(server.url);
    const stranger = await connectV1WithoutSession(server.url);
    try {
      const taskId = await startTask(a.client, 'sleep', { seconds: 0 });
      const refused = await mcpError(stranger.experimental.tasks.listTasks());
      assert.equal(refused.code, -32600);
      assert.match(refused.message, /tasks\/list needs credentials or a session: callers without either share one principal \(anonymous\)/);
      const foreign = await mcpError(stranger.experimental.tasks.getTask(taskId));
      assert.equal(foreign.code, -32602);
      assert.match(foreign.message, /Task not found/);
    } finally {
      await a.close();
      await stranger.close();
    }
  });

  it('2026-07-28 callers without credentials share `anonymous`: events/poll of finished tasks without a taskId is refused; a task is still followed by its id', async () => {
    const refused = await rpc(server.url, 'events/poll', { name: 'outlast.task.finished', arguments: {}, cursor: null });
    assert.equal(refused.error?.code, -32012);
    assert.match(refused.error!.message, /without a taskId argument needs credentials: callers without them share one principal \(anonymous\)/);
    const created = await callTool(server.url, 'sleep', { seconds: 0.3 });
    const taskId = created.result.task?.taskId ?? created.result.taskId;
    assert.equal(typeof taskId, 'string', `a task: ${JSON.stringify(created.message)}`);
    await waitForTask(server.url, taskId);
    const followed = await rpc(server.url, 'events/poll', { name: 'outlast.task.finished', arguments: { taskId }, cursor: '0' });
    assert.equal(followed.error, undefined, 'with the id it holds, a caller follows its task');
  });
});

describe('serving a network address without authentication', () => {
  it('outlast serve --host 0.0.0.0 without --bearer or --oauth-issuer exits 2 with one line naming both, and listens on nothing', () => {
    const r = spawnSync(process.execPath, [BIN, 'serve', FIXTURES, '--port', '0', '--host', '0.0.0.0', '--store', `sqlite:${join(tempDir(), 'x.db')}`], { cwd: ROOT, encoding: 'utf8', timeout: 20_000 });
    assert.equal(r.status, 2, `exit status (stderr: ${r.stderr})`);
    const lines = r.stderr.trim().split('\n');
    assert.equal(lines.length, 1, `one line: ${r.stderr}`);
    assert.match(lines[0]!, /^outlast: Refusing to serve on 0\.0\.0\.0 without authentication/);
    assert.match(lines[0]!, /--bearer/);
    assert.match(lines[0]!, /--oauth-issuer/);
    assert.match(lines[0]!, /--allow-anonymous-network/);
    assert.doesNotMatch(r.stdout, /listening/);
  });

  it('outlast gateway --host 0.0.0.0 without authentication is refused the same way, before it starts its upstream', () => {
    const marker = join(tempDir(), 'upstream-started');
    const upstream = `${process.execPath} -e "require('fs').writeFileSync('${marker}', 'x')"`;
    const r = spawnSync(process.execPath, [BIN, 'gateway', '--stdio', upstream, '--port', '0', '--host', '0.0.0.0', '--store', `sqlite:${join(tempDir(), 'g.db')}`], { cwd: ROOT, encoding: 'utf8', timeout: 20_000 });
    assert.equal(r.status, 2, `exit status (stderr: ${r.stderr})`);
    assert.match(r.stderr, /Refusing to serve on 0\.0\.0\.0 without authentication.*--bearer.*--oauth-issuer/);
    assert.doesNotMatch(r.stdout, /listening/);
    assert.equal(existsSync(marker), false, 'the upstream command never ran');
  });

  it('with --allow-anonymous-network it listens on 0.0.0.0 and logs a loud warning; with --bearer it needs no opt-in and warns of nothing', async () => {
    const open = await startServer(['--host', '0.0.0.0', '--allow-anonymous-network', '--store', `sqlite:${join(tempDir(), 'open.db')}`]);
    try {
      assert.match(open.url, /^http:\/\/0\.0\.0\.0:\d+\/mcp$/);
      assert.match(open.stderr(), /warn WARNING: serving on 0\.0\.0\.0 WITHOUT AUTHENTICATION \(--allow-anonymous-network\): anyone who reaches this address can call every tool/);
      const port = new URL(open.url).port;
      const greeted = await callTool(`http://127.0.0.1:${port}/mcp`, 'greet', { name: 'net' });
      assert.equal(greeted.result.content?.[0]?.text, 'Hello, net!', 'it serves');
    } finally {
      await open.stop();
    }
    const guarded = await startServer(['--host', '0.0.0.0', '--bearer', 'tok-net=ops', '--store', `sqlite:${join(tempDir(), 'guarded.db')}`]);
    try {
      assert.doesNotMatch(guarded.stderr(), /WITHOUT AUTHENTICATION/);
    } finally {
      await guarded.stop();
    }
  });

  it('serveHttp refuses a non-loopback host without bearer or oauth, and with allowAnonymousNetwork serves and emits a process warning', async () => {
    const outlast = new Outlast({ store: new SqliteTaskStore(join(tempDir(), 'lib.db')) });
    const factory = () => new McpServer({ name: 'lib', version: '1.0.0' });
    try {
      await assert.rejects(serveHttp(outlast, factory, { host: '0.0.0.0', port: 0 }), /Refusing to serve on 0\.0\.0\.0 without authentication.*--bearer.*--oauth-issuer/);
      const warned = new Promise<Error>((resolve) => process.once('warning', resolve));
      const running = await serveHttp(outlast, factory, { host: '0.0.0.0', port: 0, allowAnonymousNetwork: true });
      try {
        const w = (await warned) as Error & { code?: string };
        assert.equal(w.code, 'OUTLAST_ANONYMOUS_NETWORK');
        assert.match(w.message, /WITHOUT AUTHENTICATION/);
      } finally {
        await running.close();
      }
    } finally {
      await outlast.stop();
    }
  });
});

describe('an app embedding Outlast behind one OAuth client (docs/existing-app.md, express-oauth)', () => {
  const DOC = 'docs/existing-app.md';
  let as: AuthServer;
  let app: App;
  const resource = 'https://app.example.com/mcp';

  before(async () => {
    as = await startAuthServer({ jwtResources: [resource] });
    app = await startApp(writeScript('express-oauth', docBlock(DOC, 'express-oauth').code), {
      OUTLAST_MODULE: FIXTURES,
      OUTLAST_STORE: `sqlite:${join(tempDir(), 'app.db')}`,
      OAUTH_ISSUER: as.issuer,
      OAUTH_RESOURCE: resource,
    }, 'express-oauth');
  });
  after(async () => {
    const end = await app?.stop();
    await as?.stop();
    assert.deepEqual(end, { code: 0, signal: null }, `the app drains and exits 0 on SIGTERM:\n${app?.stderr()}`);
  });

  it("alice and bob signed in through one client: bob's tasks/get, tasks/result and tasks/list never reach alice's task, on either wire", async () => {
    const aliceToken = (await userTokens(as, 'alice', resource)).access_token;
    const bobToken = (await userTokens(as, 'bob', resource)).access_token;
    const claims = (t: string) => JSON.parse(Buffer.from(t.split('.')[1]!, 'base64url').toString('utf8')) as { client_id: string; sub: string };
    assert.equal(claims(aliceToken).client_id, claims(bobToken).client_id, 'one OAuth client for both');
    assert.deepEqual([claims(aliceToken).sub, claims(bobToken).sub], ['alice', 'bob']);

    const alice = await connectV1(app.url, { token: aliceToken });
    const bob = await connectV1(app.url, { token: bobToken });
    try {
      const taskId = await startTask(alice.client, 'sleep', { seconds: 0.2 });
      const result = await alice.client.experimental.tasks.getTaskResult(taskId, CallToolResultSchema);
      assert.match((result.content[0] as { text: string }).text, /^Slept 0\.2 s/);
      const unknown = unknownShape(await mcpError(bob.client.experimental.tasks.getTask('AAAAAAAAAAAAAAAAAAAAAA')), 'AAAAAAAAAAAAAAAAAAAAAA');
      assert.equal(unknownShape(await mcpError(bob.client.experimental.tasks.getTask(taskId)), taskId), unknown, "bob's tasks/get of alice's task reads like an unknown id");
      assert.equal(unknownShape(await mcpError(bob.client.experimental.tasks.getTaskResult(taskId, CallToolResultSchema)), taskId), unknown, "bob's tasks/result of alice's task reads like an unknown id");
      assert.ok(!(await bob.client.experimental.tasks.listTasks()).tasks.some((t) => t.taskId === taskId), "alice's task is not in bob's tasks/list");
      assert.ok((await alice.client.experimental.tasks.listTasks()).tasks.some((t) => t.taskId === taskId), 'alice lists it');
      // The 2026-07-28 wire, as a raw poll with bob's token.
      const modern = await rpc(app.url, 'tasks/get', { taskId }, { token: bobToken });
      assert.equal(modern.error?.code, -32602, `bob's 2026-07-28 tasks/get is refused: ${JSON.stringify(modern.message)}`);
      assert.equal((await rpc(app.url, 'tasks/get', { taskId }, { token: aliceToken })).result.status, 'completed');
    } finally {
      await alice.close();
      await bob.close();
    }
  });

  it('a token whose AuthInfo names no subject is refused at the first request with a JSON-RPC error saying to set extra.sub or pass principalOf', async () => {
    const now = Math.floor(Date.now() / 1000);
    const noSubject = await as.sign({ iss: as.issuer, aud: resource, client_id: 'app', scope: 'tasks', iat: now, exp: now + 300 });
    const refused = await rpc(app.url, 'tools/call', { name: 'sleep', arguments: { seconds: 0 } }, { token: noSubject });
    assert.equal(refused.status, 500);
    assert.equal(refused.error?.code, -32603);
    assert.match(refused.error!.message, /names no person: set extra\.sub .* or pass principalOf/);
    assert.match(refused.error!.message, /never bound to authInfo\.clientId/);
    // The SDK v1 client meets the same refusal at initialize, with the reason in its error.
    await assert.rejects(connectV1(app.url, { token: noSubject }), /set extra\.sub/);
    assert.match(app.stderr(), /\[OUTLAST_NO_PRINCIPAL\] Warning: outlast: a request was refused: This request's AuthInfo names no person/, 'the app\'s stderr says it, once');
    assert.equal(app.stderr().split('OUTLAST_NO_PRINCIPAL').length, 2, 'once, not per request');
  });
});
