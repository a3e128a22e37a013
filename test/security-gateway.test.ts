/**
 * The gateway keeps its upstreams' secrets in its process (issue 40, finding 2) and names why an upstream failed in one
 * line (issue 42, item 7). Real `outlast gateway` processes in front of real failing upstreams: a stdio script whose
 * command line holds a secret argument and a `${VAR}` from the environment, which writes them to stderr and exits; a
 * script that does not exist; an HTTP upstream on a closed port whose URL carries userinfo, a query token and a
 * fragment. A real client (SDK v2) calls tools/list and tools/call, and every byte it receives is searched for the
 * secrets, as is the gateway's log.
 */
import assert from 'node:assert/strict';
import { createServer, type IncomingHttpHeaders } from 'node:http';
import { randomBytes } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { ROOT, errorOf, freePort, startServer, tempDir, until, type ServerProcess } from './helpers.js';

const UPSTREAMS = join(ROOT, 'dist', 'test', 'gateway-upstreams.js');
const EVERYTHING = join(ROOT, 'node_modules', '@modelcontextprotocol', 'server-everything', 'dist', 'index.js');
const NODE = process.execPath;

const tag = () => randomBytes(6).toString('hex');
/** Each secret the upstreams are given, distinct per run so that no other text can hold it by chance. */
const SECRET = {
  apiKey: `sk-live-${tag()}`,
  envToken: `tkt-env-${tag()}`,
  user: `alice-${tag()}`,
  password: `pw-${tag()}`,
  queryToken: `tkt-query-${tag()}`,
  fragment: `frag-${tag()}`,
};
const basic = Buffer.from(`${SECRET.user}:${SECRET.password}`).toString('base64');

/** Every secret (and the Basic credential made of two of them) that is found in `text`. */
function secretsIn(text: string): string[] {
  return [...Object.values(SECRET), basic].filter((s) => text.includes(s));
}

/** An SDK v2 client on `url` whose fetch keeps every byte the gateway sends it (headers and bodies). */
async function caller(url: string): Promise<{ client: Client; received(): string; close(): Promise<void> }> {
  const chunks: string[] = [];
  const keeping: typeof fetch = async (input, init) => {
    const res = await fetch(input, init);
    res.headers.forEach((value, name) => chunks.push(`${name}: ${value}\n`));
    const reader = res.clone().body?.getReader();
    const decoder = new TextDecoder();
    void (async () => {
      for (let part = await reader?.read(); part && !part.done; part = await reader!.read()) chunks.push(decoder.decode(part.value, { stream: true }));
    })().catch(() => undefined);
    return res;
  };
  const client = new Client({ name: 'security-test', version: '1' });
  await client.connect(new StreamableHTTPClientTransport(new URL(url), { fetch: keeping }));
  return { client, received: () => chunks.join(''), close: () => client.close() };
}

/** Whether the answer whose error is `message` is among the bytes kept (the client may parse it before the copy is read). */
function kept(received: string, message: string): boolean {
  return received.includes(JSON.stringify(message.replace(/^MCP error -?\d+: /, '')).slice(1, -1));
}

/** The caller's view of three failing upstreams: tools/list, and a call of a tool of each. */
async function askEveryUpstream(url: string) {
  const c = await caller(url);
  try {
    const list = await errorOf(c.client.listTools());
    const leaky = await errorOf(c.client.callTool({ name: 'leaky__anything', arguments: {} }));
    const missing = await errorOf(c.client.callTool({ name: 'missing__anything', arguments: {} }));
    const tickets = await errorOf(c.client.callTool({ name: 'tickets__anything', arguments: {} }));
    await until('every answer is kept', () => [list, leaky, missing, tickets].every((m) => kept(c.received(), m)), 10_000);
    return { list, leaky, missing, tickets, received: c.received() };
  } finally {
    await c.close();
  }
}

describe('gateway: upstream secrets stay in the process, and a failure names its cause in one line', () => {
  let gw: ServerProcess;
  let closedPort: number;
  const dir = tempDir('outlast-gw-sec-');
  before(async () => {
    closedPort = await freePort();
    const config = join(dir, 'mcp.json');
    writeFileSync(config, JSON.stringify({
      mcpServers: {
        leaky: { command: NODE, args: [UPSTREAMS, 'leaky', `--api-key=${SECRET.apiKey}`, '--token', '${GW_SEC_TOKEN}'], env: { LEAKY_TOKEN: '${GW_SEC_TOKEN}' } },
        missing: { command: NODE, args: [join(dir, 'no-such-server.js'), `--api-key=${SECRET.apiKey}`] },
        tickets: { url: `http://${SECRET.user}:${SECRET.password}@127.0.0.1:${closedPort}/mcp?access_token=${SECRET.queryToken}#${SECRET.fragment}` },
      },
    }));
    gw = await startServer(['--store', `sqlite:${join(dir, 'tasks.db')}`], { command: ['gateway', '--config', config], env: { GW_SEC_TOKEN: SECRET.envToken } });
  });
  after(() => gw?.stop());

  it('a stdio upstream that fails is named by its name and program with the stderr line that says why, and no secret of its command line, ${VAR} or env reaches the caller', async () => {
    const seen = await askEveryUpstream(gw.url);
    const cause = /upstream "leaky" \(node\) \(pid \d+\) exited with code 3: Error: the tickets API refused the key --api-key=\[redacted\] --token \[redacted\] and token \[redacted\]$/;
    assert.match(seen.leaky, cause);
    assert.match(seen.list, /upstream "leaky" \(node\) \(pid \d+\) exited with code 3: Error: the tickets API refused the key/);
    assert.doesNotMatch(seen.leaky, /leaky starting|at start \(leaky\.js/, 'one line of its stderr, the one that says why');
    assert.ok(seen.received.includes('exited with code 3'), 'the bytes kept are the answers');
    assert.deepEqual(secretsIn(seen.received), [], `secrets in what the caller received: ${seen.received}`);
  });

  it('a missing script is named by its "Cannot find module" line, not the tail of its stack', async () => {
    const seen = await askEveryUpstream(gw.url);
    const path = join(dir, 'no-such-server.js').replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');
    assert.match(seen.missing, new RegExp(`upstream "missing" \\(node\\) \\(pid \\d+\\) exited with code 1: Error: Cannot find module '${path}'$`));
    assert.doesNotMatch(seen.missing, /MODULE_NOT_FOUND|Node\.js v\d/);
    assert.deepEqual(secretsIn(seen.missing), []);
  });

  it('an unreachable HTTP upstream is named by its URL without userinfo, query or fragment, and says ECONNREFUSED', async () => {
    const seen = await askEveryUpstream(gw.url);
    assert.match(seen.tickets, new RegExp(`upstream "tickets" \\(http://127\\.0\\.0\\.1:${closedPort}/mcp\\) could not start: fetch failed: connect ECONNREFUSED 127\\.0\\.0\\.1:${closedPort}$`));
    assert.match(seen.list, /ECONNREFUSED/);
    assert.deepEqual(secretsIn(seen.received), []);
  });

  it("the gateway's log has the upstream's stderr lines with their secrets redacted, and no command line", async () => {
    await askEveryUpstream(gw.url);
    const log = gw.stderr();
    assert.match(log, /\[leaky\] leaky starting: --api-key=\[redacted\] --token \[redacted\] \(token \[redacted\]\)/, 'its stderr is logged, redacted');
    assert.match(log, /\[missing\] Error: Cannot find module/);
    assert.match(log, /upstream "tickets" \(http:\/\/127\.0\.0\.1:\d+\/mcp\) could not start/);
    assert.doesNotMatch(log, /is the command|--log-upstream-commands/, 'no command line without the flag');
    assert.deepEqual(secretsIn(log), [], `secrets in the log:\n${log}`);
  });
});

describe('gateway --log-upstream-commands', () => {
  it('logs the full command line for the operator once at start, and callers still get none of it', async () => {
    const gw = await startServer(['--store', `sqlite:${join(tempDir(), 'tasks.db')}`], {
      command: ['gateway', '--stdio', `${NODE} ${UPSTREAMS} leaky --api-key=${SECRET.apiKey}`, '--env', `LEAKY_TOKEN=${SECRET.envToken}`, '--name', 'leaky', '--log-upstream-commands'],
    });
    try {
      const c = await caller(gw.url);
      let said: string;
      try {
        said = await errorOf(c.client.callTool({ name: 'anything', arguments: {} }));
        await until('the answer is kept', () => kept(c.received(), said), 10_000);
        assert.deepEqual(secretsIn(c.received()), [], c.received());
      } finally {
        await c.close();
      }
      assert.match(said, /upstream "leaky" \(node\) \(pid \d+\) exited with code 3: Error: the tickets API refused the key --api-key=\[redacted\] and token \[redacted\]/);
      const log = gw.stderr();
      const shown = log.split('\n').filter((l) => l.includes(`--api-key=${SECRET.apiKey}`));
      assert.equal(shown.length, 1, `the command line once, at start:\n${log}`);
      assert.match(shown[0]!, /upstream "leaky" is the command .*gateway-upstreams\.js leaky --api-key=sk-live-\w+ \(--log-upstream-commands\)$/);
      assert.ok(!log.includes(SECRET.envToken), '--env values are not part of the command line');
    } finally {
      await gw.stop();
    }
  });
});

describe("gateway: what it adds to an upstream's words", () => {
  it("an upstream description gets its full stop before the gateway's own sentence", async () => {
    const gw = await startServer(['--store', `sqlite:${join(tempDir(), 'tasks.db')}`], { command: ['gateway', '--stdio', `${NODE} ${EVERYTHING} stdio`, '--name', 'everything'] });
    try {
      const c = await caller(gw.url);
      try {
        const { tools } = await c.client.listTools();
        const described = (name: string) => tools.find((t) => t.name === name)?.description;
        assert.equal(described('echo'), 'Echoes back the input string. If it runs longer than 20 s it continues in the background and returns a taskId to follow with outlast_task_status.');
        assert.match(described('get-tiny-image') ?? '', /^Returns a tiny MCP logo image\. If it runs longer than 20 s/, 'one full stop, not two');
      } finally {
        await c.close();
      }
    } finally {
      await gw.stop();
    }
  });

  it('userinfo in an HTTP upstream URL travels as Authorization: Basic, never in the URL', async () => {
    const seen: Array<{ url: string; headers: IncomingHttpHeaders }> = [];
    const upstream = createServer((req, res) => {
      seen.push({ url: req.url ?? '', headers: req.headers });
      res.writeHead(401, { 'content-type': 'application/json' }).end('{"error":"unauthorized"}');
    });
    await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r));
    const port = (upstream.address() as { port: number }).port;
    const gw = await startServer(['--store', `sqlite:${join(tempDir(), 'tasks.db')}`], {
      command: ['gateway', '--http', `http://${SECRET.user}:${SECRET.password}@127.0.0.1:${port}/mcp?access_token=${SECRET.queryToken}`, '--name', 'basic'],
    });
    try {
      await until('the upstream was asked', () => seen.length > 0, 15_000);
      assert.equal(seen[0]!.headers.authorization, `Basic ${basic}`);
      assert.equal(seen[0]!.url, `/mcp?access_token=${SECRET.queryToken}`, 'the query still reaches the upstream it is for');
      const c = await caller(gw.url);
      try {
        const said = await errorOf(c.client.listTools());
        assert.match(said, new RegExp(`upstream "basic" \\(http://127\\.0\\.0\\.1:${port}/mcp\\) could not start`));
        assert.deepEqual(secretsIn(c.received()), []);
      } finally {
        await c.close();
      }
      assert.deepEqual(secretsIn(gw.stderr()), []);
    } finally {
      await gw.stop();
      upstream.closeAllConnections();
      await new Promise((r) => upstream.close(r));
    }
  });

  it("--header 'Authorization: Bearer ${VAR}' reads the token from the environment, so it is in no command line; a literal header value is warned about", async () => {
    const seen: IncomingHttpHeaders[] = [];
    const upstream = createServer((req, res) => {
      seen.push(req.headers);
      res.writeHead(401, { 'content-type': 'application/json' }).end('{"error":"unauthorized"}');
    });
    await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r));
    const port = (upstream.address() as { port: number }).port;
    const start = (header: string, env: NodeJS.ProcessEnv = {}) =>
      startServer(['--store', `sqlite:${join(tempDir(), 'tasks.db')}`], { command: ['gateway', '--http', `http://127.0.0.1:${port}/mcp`, '--name', 'tickets', '--header', header], env });
    const fromEnv = await start('Authorization: Bearer ${TICKETS_TOKEN}', { TICKETS_TOKEN: SECRET.envToken });
    try {
      await until('the upstream was asked', () => seen.length > 0, 15_000);
      assert.equal(seen[0]!.authorization, `Bearer ${SECRET.envToken}`, 'the header carries the variable\'s value');
      assert.ok(!readFileSync(`/proc/${fromEnv.pid}/cmdline`, 'utf8').includes(SECRET.envToken), 'the token is not in the command line');
      const c = await caller(fromEnv.url);
      try {
        await errorOf(c.client.listTools());
        assert.deepEqual(secretsIn(c.received()), [], 'what the variable became is redacted for callers');
      } finally {
        await c.close();
      }
      assert.deepEqual(secretsIn(fromEnv.stderr()), []);
      assert.doesNotMatch(fromEnv.stderr(), /puts its value in this process's command line/);
    } finally {
      await fromEnv.stop();
    }
    const literal = await start(`Authorization: Bearer ${SECRET.apiKey}`);
    try {
      assert.match(literal.stderr(), /--header "Authorization: …" puts its value in this process's command line, .*'Authorization: \$\{VAR\}'/);
      assert.deepEqual(secretsIn(literal.stderr()), [], 'the warning does not quote the value');
    } finally {
      await literal.stop();
      upstream.closeAllConnections();
      await new Promise((r) => upstream.close(r));
    }
  });
});
