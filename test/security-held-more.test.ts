/**
 * What the security review found holding (issue 40, "Held in the review"), kept holding, for the held items no other
 * test proved: the gateway's stdio child gets only a safe environment, an HTTP upstream's redirect to another origin
 * is not followed, an upstream line without end stops the process, the dashboard hides payloads by default, and SQL
 * is parameterised on both stores. Real `outlast gateway` and `outlast serve` processes, real upstreams (a stdio MCP
 * server, HTTP servers that redirect), real clients (SDK v2) and raw HTTP where an attacker's request is the point.
 */
import assert from 'node:assert/strict';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import Database from 'better-sqlite3';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { generateWebhookSecret, webhookReceiver, type WebhookEvent } from '../src/client/index.js';
import { passOn } from './http-tap.js';
import { ROOT, TASKS_CAPS, alive, callTool, errorOf, freshSchema, getTask, pgStoreUrl, rpc, startServer, tempDir, textOf, until, waitForTask, withPgClient, type RpcReply, type ServerProcess } from './helpers.js';

const NODE = process.execPath;
const UPSTREAMS = join(ROOT, 'dist', 'test', 'gateway-upstreams.js');
const LOUD_UPSTREAM = join(ROOT, 'dist', 'test', 'security-upstream.js');
const MODULE = join(ROOT, 'dist', 'test', 'security-module.js');
const tag = () => randomBytes(6).toString('hex');

/** An SDK v2 client of `url`, closed by the returned function. */
async function connect(url: string): Promise<{ client: Client; close(): Promise<void> }> {
  const client = new Client({ name: 'security-held', version: '1' });
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  return { client, close: () => client.close() };
}

/** A node:http server on a kernel-chosen loopback port; `port` once listening, `stop()` closes it and its sockets. */
async function listening(handler: Parameters<typeof createServer>[1]): Promise<{ server: Server; port: number; stop(): Promise<void> }> {
  const server = createServer(handler);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    server,
    port: (server.address() as { port: number }).port,
    stop: async () => {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    },
  };
}

describe("held: the gateway's stdio upstream gets only a safe environment", () => {
  it("gateway: a variable of the gateway's own environment does not reach the stdio upstream; only the safe defaults and --env ones do", async () => {
    const secret = `gw-own-${tag()}`;
    const given = `given-${tag()}`;
    // The gateway's environment: the six safe defaults set to known values, a secret of its own, and what the test
    // process has (every other variable of this machine).
    const safe = { HOME: tempDir(), LOGNAME: 'held', PATH: process.env.PATH!, SHELL: '/bin/sh', TERM: 'dumb', USER: 'held' };
    const gw = await startServer(['--store', `sqlite:${join(tempDir(), 'tasks.db')}`], {
      command: ['gateway', '--stdio', `${NODE} ${UPSTREAMS} silent`, '--name', 'small', '--env', `OUTLAST_TEST_GIVEN=${given}`],
      env: { ...safe, OUTLAST_TEST_GATEWAY_SECRET: secret },
    });
    try {
      const c = await connect(gw.url);
      let seen: Record<string, string>;
      try {
        seen = JSON.parse(textOf((await c.client.callTool({ name: 'env', arguments: {} })) as never)) as Record<string, string>;
      } finally {
        await c.close();
      }
      assert.deepEqual(seen, { ...safe, OUTLAST_TEST_GIVEN: given }, 'the safe defaults and --env, nothing else');
      assert.ok(!JSON.stringify(seen).includes(secret));
    } finally {
      await gw.stop();
    }
  });
});

describe("held: the gateway does not follow an HTTP upstream's redirect to another origin", () => {
  interface Seen {
    method: string;
    url: string;
    headers: IncomingHttpHeaders;
  }
  const key = `key-${tag()}`;
  const token = `tok-${tag()}`;
  let target: ServerProcess;
  let upstream: Awaited<ReturnType<typeof listening>>;
  let elsewhere: Awaited<ReturnType<typeof listening>>;
  const atUpstream: Seen[] = [];
  const atElsewhere: Seen[] = [];
  before(async () => {
    // The real MCP server behind the upstream's /mcp.
    target = await startServer(['--store', `sqlite:${join(tempDir(), 'tasks.db')}`]);
    const to = new URL(target.url);
    // Another origin (another port): it records what reaches it.
    elsewhere = await listening((req, res) => {
      atElsewhere.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers });
      req.resume();
      res.writeHead(404).end();
    });
    // The upstream: /away redirects to the other origin, /moved to its own /mcp, which is the real server.
    upstream = await listening((req, res) => {
      atUpstream.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers });
      if (req.url === '/away') return void req.resume().on('end', () => res.writeHead(307, { location: `http://127.0.0.1:${elsewhere.port}/mcp` }).end());
      if (req.url === '/moved') return void req.resume().on('end', () => res.writeHead(307, { location: '/mcp' }).end());
      const body: Buffer[] = [];
      req.on('data', (c: Buffer) => body.push(c)).on('end', () => passOn(req, res, to, Buffer.concat(body)));
    });
  });
  after(async () => {
    await upstream?.stop();
    await elsewhere?.stop();
    await target?.stop();
  });

  /** A gateway before `path` of the upstream, its credentials in --header values read from its environment (what
   *  reached either server is recorded from here on). */
  const gateway = (path: string) => {
    atUpstream.length = atElsewhere.length = 0;
    return startServer(['--store', `sqlite:${join(tempDir(), 'tasks.db')}`], {
      command: ['gateway', '--http', `http://127.0.0.1:${upstream.port}${path}`, '--name', 'tickets', '--header', 'X-Api-Key: ${TICKETS_KEY}', '--header', 'Authorization: Bearer ${TICKETS_TOKEN}'],
      env: { TICKETS_KEY: key, TICKETS_TOKEN: token },
    });
  };

  it('gateway: a 307 to another origin is not followed: neither the request nor its --header credentials reach that origin, and the caller is told why', async () => {
    const gw = await gateway('/away');
    try {
      const c = await connect(gw.url);
      let said: string;
      try {
        said = await errorOf(c.client.listTools());
      } finally {
        await c.close();
      }
      assert.deepEqual(atElsewhere.map((s) => ({ ...s.headers, request: `${s.method} ${s.url}` })), [], 'nothing reached the other origin');
      const asked = atUpstream.filter((s) => s.url === '/away');
      assert.ok(asked.length > 0, 'the upstream was asked');
      assert.equal(asked[0]!.headers['x-api-key'], key, 'the credentials went to the upstream they are for');
      assert.equal(asked[0]!.headers.authorization, `Bearer ${token}`);
      assert.match(said, new RegExp(`upstream "tickets" \\(http://127\\.0\\.0\\.1:${upstream.port}/away\\) could not start: .*Redirect to http://127\\.0\\.0\\.1:${elsewhere.port}/mcp not followed`));
      assert.ok(!gw.stderr().includes(key) && !gw.stderr().includes(token), 'no credential in the log');
    } finally {
      await gw.stop();
    }
    assert.deepEqual(atElsewhere, [], 'nothing reached the other origin, to the end');
  });

  it('gateway: a 307 within the upstream\'s origin is followed with its method, body and --header credentials, and the upstream serves', async () => {
    const gw = await gateway('/moved');
    try {
      const c = await connect(gw.url);
      try {
        const { tools } = await c.client.listTools();
        assert.ok(tools.some((t) => t.name === 'greet'), tools.map((t) => t.name).join(', '));
        assert.equal(textOf((await c.client.callTool({ name: 'greet', arguments: { name: 'Held' } })) as never), 'Hello, Held!');
      } finally {
        await c.close();
      }
      const followed = atUpstream.filter((s) => s.url === '/mcp' && s.method === 'POST');
      assert.ok(followed.length > 0, 'the redirect was followed to /mcp');
      assert.ok(followed.every((s) => s.headers['x-api-key'] === key && s.headers.authorization === `Bearer ${token}`), 'with the credentials');
      assert.deepEqual(atElsewhere, []);
    } finally {
      await gw.stop();
    }
  });
});

describe('held: an upstream line without end stops the upstream process', () => {
  it('gateway: a stdio upstream that writes more than 10 MiB on stdout without a line end is stopped; its call fails saying so, and the gateway serves the next call', async () => {
    const gw = await startServer(['--store', `sqlite:${join(tempDir(), 'tasks.db')}`, '--no-poll-limit'], { command: ['gateway', '--stdio', `${NODE} ${LOUD_UPSTREAM} serve`, '--name', 'loud'] });
    try {
      const bound = 10 * 1024 * 1024;
      const call = await callTool(gw.url, 'endless_line', { bytes: bound + 64 * 1024 }, { caps: TASKS_CAPS });
      const failure = call.result.resultType === 'task' ? (await waitForTask(gw.url, call.result.taskId, undefined, { timeoutMs: 60_000 })).error : call.error;
      const said = String(failure?.message ?? JSON.stringify(call.message));
      const stopped = new RegExp(`upstream "loud" \\(node\\) \\(pid (\\d+)\\) it wrote more than ${bound} characters on stdout without a line end, and was killed by SIGTERM`).exec(said);
      assert.ok(stopped, `the call fails naming the reason: ${said.slice(0, 500)}`);
      await until('the upstream process is gone', () => !alive(Number(stopped[1])), 15_000);
      // The gateway serves on: its list, and a call on a new upstream process.
      assert.equal((await rpc(gw.url, 'tools/list')).error, undefined, 'tools/list answers');
      const next = await callTool(gw.url, 'loud_progress', { bytes: 1, ms: 0 }, { caps: TASKS_CAPS });
      const done = next.result.resultType === 'task' ? (await waitForTask(gw.url, next.result.taskId)).result : next.result;
      assert.equal(textOf(done), 'loud done');
    } finally {
      await gw.stop();
    }
  });
});

describe('held: the dashboard hides payloads unless the operator turns them on', () => {
  const OPERATOR = `op-${tag()}-held`;
  const MARK = `payload-${tag()}`;
  let server: ServerProcess;
  before(async () => {
    server = await startServer(['--store', `sqlite:${join(tempDir(), 'tasks.db')}`, '--dashboard'], { module: MODULE, env: { OUTLAST_OPERATOR: `${OPERATOR}=anna` } });
  });
  after(() => server?.stop());

  it("dashboard: without --dashboard-payloads a task's page shows neither its arguments, its result nor its output text, only their count", async () => {
    const call = await callTool(server.url, 'payload_echo', { text: MARK }, { caps: TASKS_CAPS });
    const taskId = call.result.taskId as string;
    assert.ok(taskId, JSON.stringify(call.message));
    const done = await waitForTask(server.url, taskId);
    assert.equal(textOf(done.result), `result ${MARK}`, 'the caller reads its result');
    const base = server.url.replace(/\/mcp$/, '/dashboard');
    const page = async (path: string) => {
      const res = await fetch(`${base}${path}`, { headers: { authorization: `Bearer ${OPERATOR}` } });
      assert.equal(res.status, 200, path);
      return res.text();
    };
    const html = await page(`/tasks/${taskId}`);
    assert.ok(html.includes(taskId) && html.includes('payload_echo'), 'the task page is the task\'s');
    assert.match(html, /data-testid="output-count">1 item \(latest seq 1\)/, 'the output is counted');
    const shown = html.split('\n').filter((l) => l.includes(MARK));
    assert.deepEqual(shown, [], 'no argument, result or output text on the page');
    assert.equal(html.match(/Hidden: the server's operator has not turned payloads on/g)?.length, 2, 'output, and arguments and result, hidden');
    assert.ok(!(await page('/tasks')).includes(MARK), 'nor in the task list');
  });
});

describe('held: SQL is parameterised (values a caller controls are data on both stores)', () => {
  /** SQL metacharacters of every dialect the stores speak, and a placeholder of each. */
  const SQLISH = `x'); DROP TABLE tasks; -- \\'; DELETE FROM tasks WHERE '1'='1 " $1 ? @p1 :name; SELECT 1`;
  const TOKEN = `sql-${tag()}-token`;
  /** A principal (a --bearer-file name) with quotes and a statement in it. */
  const PRINCIPAL = `o'brien"); DROP TABLE tasks; --`;
  const SQL_ERROR = /syntax error|SqliteError|SQLITE_|unterminated|no such table|does not exist|could not persist|at or near/i;

  /** Every reply must be free of a SQL error; returns it. */
  const clean = (r: RpcReply, what: string): RpcReply => {
    assert.notEqual(r.error?.code, -32603, `${what}: ${JSON.stringify(r.message)}`);
    assert.doesNotMatch(JSON.stringify(r.message), SQL_ERROR, what);
    return r;
  };

  async function roundTrip(store: string, text: string): Promise<{ server: ServerProcess; taskId: string; key: string; subscription: string; url: string }> {
    const dir = tempDir();
    const tokens = join(dir, 'tokens');
    writeFileSync(tokens, `${TOKEN}=${PRINCIPAL}\n`, { mode: 0o600 });
    const server = await startServer(['--store', store, '--bearer-file', tokens, '--events', '--events-allow-host', '127.0.0.1', '--no-poll-limit'], { module: MODULE });
    const o = { token: TOKEN };
    const key = `${text} key`;
    const secret = generateWebhookSecret();
    const events: WebhookEvent[] = [];
    const receiver = await listening(webhookReceiver({ secret, onEvent: (e) => void events.push(e) }));
    try {
      // Arguments and an idempotency key; the same key again reads the same task back by it.
      const call = clean(await callTool(server.url, 'text_everywhere', { text }, { ...o, meta: { 'outlast/idempotencyKey': key } }), 'tools/call');
      const taskId = call.result.taskId as string;
      assert.ok(taskId, JSON.stringify(call.message));
      const again = clean(await callTool(server.url, 'text_everywhere', { text }, { ...o, meta: { 'outlast/idempotencyKey': key } }), 'tools/call again');
      assert.equal(again.result.taskId, taskId, 'the key found its task');
      // Task ids a caller makes up are unknown ids, on every method that takes one.
      const fake = `${SQLISH} OR 1=1`;
      for (const method of ['tasks/get', 'tasks/cancel', 'tasks/update']) {
        const r = clean(await rpc(server.url, method, { taskId: fake, ...(method === 'tasks/update' ? { inputResponses: { answer: { action: 'accept', content: { answer: 'x' } } } } : {}) }, o), method);
        assert.match(r.error?.message ?? '', /not found/i, `${method}: ${JSON.stringify(r.message)}`);
      }
      // Events: a subscription whose URL and arguments carry the text, and one for this task's end.
      const hook = `http://127.0.0.1:${receiver.port}/hook`;
      // Quotes and a statement raw in the path (the URL parser keeps them there), the whole text in the query.
      const noted = `${hook}/x');DROP-TABLE-tasks;--$1?note=${encodeURIComponent(text)}`;
      const subscribe = (url: string, args: Record<string, unknown>, name = 'outlast.task.finished') =>
        rpc(server.url, 'events/subscribe', { name, arguments: args, delivery: { mode: 'webhook', url, secret } }, o);
      const sub = clean(await subscribe(noted, { tool: text }), 'events/subscribe');
      assert.match(String(sub.result.id), /^sub_[0-9a-f]{32}$/, JSON.stringify(sub.message));
      assert.equal(clean(await subscribe(noted, { tool: text }), 'events/subscribe again').result.id, sub.result.id, 'the same subscription, found again');
      assert.equal(clean(await subscribe(hook, {}, text), 'events/subscribe of an unknown name').error?.code, -32011);
      clean(await subscribe(hook, { taskId }), 'events/subscribe for the task');
      clean(await rpc(server.url, 'events/poll', { name: 'outlast.task.finished', arguments: { tool: text }, cursor: null }, o), 'events/poll');
      // The question, asked with the text, answered with it (and a key nobody asked, ignored).
      const asked = await waitForTask(server.url, taskId, (t) => t.status !== 'working', o);
      assert.equal(asked.status, 'input_required', JSON.stringify(asked));
      assert.equal(asked.statusMessage, text, 'the status message');
      assert.equal(asked.inputRequests.answer.params.message, text, 'the question');
      clean(await rpc(server.url, 'tasks/update', { taskId, inputResponses: { answer: { action: 'accept', content: { answer: text } }, [text]: { action: 'accept', content: {} } } }, o), 'tasks/update');
      const done = await waitForTask(server.url, taskId, undefined, o);
      assert.equal(done.status, 'completed', JSON.stringify(done));
      assert.deepEqual(JSON.parse(textOf(done.result)), { text, answer: text }, 'the arguments and the answer, as given');
      // The output, streamed back.
      const stream = clean(await rpc(server.url, 'tasks/stream', { taskId, after: 0 }, o), 'tasks/stream');
      assert.deepEqual(stream.notifications.map((n) => (n.params as { data?: { text?: string } }).data?.text), [text], 'the output');
      // The finished event, delivered through the store's event log.
      const finished = await until('the finished event', () => events.find((e) => (e.data as { taskId?: string } | undefined)?.taskId === taskId));
      assert.equal((finished.data as { statusMessage?: string }).statusMessage, text);
      clean(await getTask(server.url, taskId, o), 'tasks/get');
      assert.doesNotMatch(server.stderr(), SQL_ERROR, 'no SQL error in the log');
      return { server, taskId, key, subscription: String(sub.result.id), url: new URL(noted).href };
    } catch (e) {
      await server.stop();
      throw e;
    } finally {
      await receiver.stop();
    }
  }

  it('SQLite: arguments, idempotency key, task ids, a quoted principal, subscription URL and arguments, output, status and answers with SQL metacharacters and NUL are stored and read back as data; every table is still there', async () => {
    const db = join(tempDir(), 'tasks.db');
    const text = `${SQLISH} nul:\u0000:`;
    const { server, taskId, key, subscription, url } = await roundTrip(`sqlite:${db}`, text);
    await server.stop();
    const d = new Database(db, { readonly: true });
    try {
      const tables = (d.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").all() as Array<{ name: string }>).map((r) => r.name);
      for (const t of ['tasks', 'task_output', 'event_subscriptions', 'event_log', 'outlast_migrations']) assert.ok(tables.includes(t), `table ${t} in ${tables.join(', ')}`);
      const row = d.prepare('SELECT principal, idem_key, args FROM tasks WHERE task_id = ?').get(taskId) as { principal: string; idem_key: string; args: string };
      assert.deepEqual({ ...row, args: JSON.parse(row.args) }, { principal: PRINCIPAL, idem_key: key, args: { text } });
      const sub = d.prepare('SELECT principal, url, args FROM event_subscriptions WHERE sub_id = ?').get(subscription) as { principal: string; url: string; args: string };
      assert.deepEqual({ ...sub, args: JSON.parse(sub.args) }, { principal: PRINCIPAL, url, args: { tool: text } });
    } finally {
      d.close();
    }
  });

  it('PostgreSQL: arguments, idempotency key, task ids, a quoted principal, subscription URL and arguments, output, status and answers with SQL metacharacters are stored and read back as data; every table is still there', async () => {
    const schema = freshSchema('held');
    const text = SQLISH;
    const { server, taskId, key, subscription, url } = await roundTrip(pgStoreUrl(schema), text);
    await server.stop();
    await withPgClient(async (c) => {
      const tables = (await c.query<{ table_name: string }>('SELECT table_name FROM information_schema.tables WHERE table_schema = $1', [schema])).rows.map((r) => r.table_name);
      for (const t of ['tasks', 'task_output', 'event_subscriptions', 'event_log', 'outlast_migrations']) assert.ok(tables.includes(t), `table ${t} in ${tables.join(', ')}`);
      const row = (await c.query(`SELECT principal, idem_key, args FROM "${schema}".tasks WHERE task_id = $1`, [taskId])).rows[0];
      assert.deepEqual(row, { principal: PRINCIPAL, idem_key: key, args: { text } });
      const sub = (await c.query(`SELECT principal, url, args FROM "${schema}".event_subscriptions WHERE sub_id = $1`, [subscription])).rows[0];
      assert.deepEqual({ ...sub, args: JSON.parse(sub.args) }, { principal: PRINCIPAL, url, args: { tool: text } });
    });
  });
});
