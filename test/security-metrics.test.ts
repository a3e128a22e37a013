/**
 * Security review, finding 1 (issue 40): /metrics grew without bound and anyone reached it. A real `outlast serve
 * --metrics`: a caller with a valid bearer token sends many distinct bogus method and tool names and the scrape keeps
 * the same series (each counted as `other`); /metrics answers only an operator token; `--metrics` without operator
 * tokens on a non-loopback address refuses to start; `--metrics-listen` serves it on a listener of its own only.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { get as httpGet } from 'node:http';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { BIN, FIXTURES, ROOT, callTool, startServer, tempDir, type ServerProcess } from './helpers.js';

const CALLER = 'caller-token-0001';
const OPERATOR = 'operator-token-0001';
const LOOKER = 'looker-token-00001';

/** The distinct series (name and labels, without a histogram's `le`) of a metric family in a Prometheus text. */
function seriesOf(text: string, family: RegExp): Set<string> {
  const out = new Set<string>();
  for (const line of text.split('\n')) {
    if (line.startsWith('#') || !family.test(line)) continue;
    const series = line.slice(0, line.lastIndexOf(' ')).replace(/,?le="[^"]*"/, '').replace(/_(bucket|sum|count)\{/, '{');
    out.add(series);
  }
  return out;
}

async function post(url: string, body: unknown, token = CALLER): Promise<void> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2026-07-28', authorization: `Bearer ${token}` },
    body: JSON.stringify(body),
  });
  await res.text();
}

/** `outlast serve` that must refuse to start: its exit code and stderr. */
/** Starts `serve` with a caller's token (from the environment, so no warning precedes the refusal) and collects its exit. */
function refusedStart(args: string[]): Promise<{ code: number | null; stderr: string; stdout: string }> {
  const env = { ...process.env, OUTLAST_BEARER_TOKENS: `${CALLER}=alice` };
  const child = spawn(process.execPath, [BIN, 'serve', FIXTURES, '--port', '0', '--store', `sqlite:${join(tempDir(), 'tasks.db')}`, ...args], { cwd: ROOT, timeout: 30_000, env });
  let stderr = '';
  let stdout = '';
  child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
  return new Promise((resolve) => child.once('close', (code) => resolve({ code, stderr, stdout })));
}

describe('security: /metrics', () => {
  let server: ServerProcess;
  let metricsUrl: string;
  before(async () => {
    server = await startServer([
      '--store', `sqlite:${join(tempDir(), 'tasks.db')}`, '--metrics',
      '--bearer', `${CALLER}=alice`, '--operator', `${OPERATOR}=ops`, '--operator-readonly', `${LOOKER}=look`,
    ]);
    metricsUrl = server.url.replace(/\/mcp$/, '/metrics');
  });
  after(async () => {
    await server?.stop();
  });

  const scrape = async () => {
    const res = await fetch(metricsUrl, { headers: { authorization: `Bearer ${OPERATOR}` } });
    assert.equal(res.status, 200);
    return res.text();
  };

  it("metrics: a caller's method names do not grow /metrics", async () => {
    const meta = { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': {} };
    // One of each kind first: the series a known call, an unknown method and an unknown tool make.
    const greet = await callTool(server.url, 'greet', { name: 'Ada' }, { token: CALLER });
    assert.equal(greet.error, undefined);
    await post(server.url, { jsonrpc: '2.0', id: 1, method: 'warm/up', params: { _meta: meta } });
    await post(server.url, { jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'warm_tool', arguments: {}, _meta: meta } });
    const before = await scrape();
    const family = /^(mcp_server_operation_duration|outlast_tool_call)/;
    const seriesBefore = seriesOf(before, family);

    // 60 bogus methods and 60 bogus tool names, each different and 10 KB long.
    for (let i = 0; i < 60; i++) {
      const junk = `${i}-${'m'.repeat(10_000)}`;
      await post(server.url, { jsonrpc: '2.0', id: 10 + i, method: `bogus/${junk}`, params: { _meta: meta } });
      await post(server.url, { jsonrpc: '2.0', id: 100 + i, method: 'tools/call', params: { name: `tool-${junk}`, arguments: {}, _meta: meta } });
    }
    const afterText = await scrape();
    assert.deepEqual([...seriesOf(afterText, family)].sort(), [...seriesBefore].sort(), 'no new series');
    assert.ok(afterText.length < before.length + 2_000, `the scrape did not grow (${before.length} → ${afterText.length} bytes)`);
    assert.doesNotMatch(afterText, /bogus\/|tool-\d+-m|warm/, 'no caller-given name is a label');
    assert.match(afterText, /mcp_method_name="other"/, 'an unknown method is counted as other');
    assert.match(afterText, /gen_ai_tool_name="other"/, 'an unknown tool is counted as other');
    const count = (text: string, label: string) => Number(new RegExp(`^mcp_server_operation_duration(?:_seconds)?_count\\{[^}]*mcp_method_name="${label}"[^}]*\\} (\\d+)`, 'm').exec(text)?.[1] ?? NaN);
    assert.equal(count(afterText, 'other') - count(before, 'other'), 60, 'the 60 bogus methods are counted as other');
  });

  it('metrics: /metrics without operator credentials is 401, with them 200', async () => {
    for (const [headers, why] of [
      [{}, 'no credentials'],
      [{ authorization: `Bearer ${CALLER}` }, "a caller's token (not an operator's)"],
      [{ authorization: 'Bearer not-a-token-at-all' }, 'an unknown token'],
    ] as const) {
      const res = await fetch(metricsUrl, { headers });
      assert.equal(res.status, 401, why);
      assert.match(res.headers.get('www-authenticate') ?? '', /^Bearer /, why);
      const body = await res.text();
      assert.doesNotMatch(body, /outlast_|mcp_server/, `${why}: no metric in the refusal`);
    }
    for (const token of [OPERATOR, LOOKER]) {
      const res = await fetch(metricsUrl, { headers: { authorization: `Bearer ${token}` } });
      assert.equal(res.status, 200);
      assert.match(await res.text(), /^outlast_task_count\{/m);
    }
  });
});

describe('security: where /metrics may be served', () => {
  it('metrics: --metrics on a non-loopback address without operator tokens refuses to start, naming the flags', async () => {
    const r = await refusedStart(['--host', '0.0.0.0', '--metrics']);
    assert.equal(r.code, 2, `exit code (stderr: ${r.stderr})`);
    // The refusal is one line (the log's own start-up lines, which carry a timestamp, may come before it).
    const lines = r.stderr.trimEnd().split('\n').filter((l) => !/^\d{4}-\d\d-\d\dT/.test(l));
    assert.equal(lines.length, 1, r.stderr);
    assert.match(lines[0]!, /Refusing to serve \/metrics on 0\.0\.0\.0 without operator tokens/);
    assert.match(lines[0]!, /--operator TOKEN=NAME/);
    assert.match(lines[0]!, /--metrics-listen HOST:PORT/);
    assert.doesNotMatch(r.stdout, /listening/);
  });

  it('metrics: --metrics-listen serves /metrics on its own listener only, and never on a wildcard address', async () => {
    const server = await startServer(['--store', `sqlite:${join(tempDir(), 'tasks.db')}`, '--metrics-listen', '127.0.0.1:0', '--bearer', `${CALLER}=alice`]);
    try {
      const own = /outlast metrics on (\S+)/.exec(server.stdout())?.[1];
      assert.ok(own, `the listener's URL is printed: ${server.stdout()}`);
      const scrape = await fetch(own);
      assert.equal(scrape.status, 200, 'a Prometheus on this interface scrapes without credentials');
      assert.match(await scrape.text(), /^outlast_task_count\{/m);
      const onFront = await fetch(server.url.replace(/\/mcp$/, '/metrics'));
      assert.equal(onFront.status, 404, 'the MCP port does not serve /metrics');
      await onFront.text();
      const elsewhere = await fetch(own.replace(/\/metrics$/, '/mcp'));
      assert.equal(elsewhere.status, 404);
      await elsewhere.text();
      // fetch sends the URL's own Host whatever it is given: node:http sends the one a rebinding page would carry.
      const rebound = await new Promise<number>((resolve, reject) =>
        httpGet(own, { headers: { host: 'evil.example' } }, (res) => resolve(res.resume().statusCode ?? 0)).once('error', reject),
      );
      assert.equal(rebound, 403, 'a DNS-rebinding Host is refused on a loopback listener');
    } finally {
      await server.stop();
    }
    const r = await refusedStart(['--metrics-listen', '0.0.0.0:0']);
    assert.equal(r.code, 2, r.stderr);
    assert.match(r.stderr.trim(), /^outlast: Refusing --metrics-listen on 0\.0\.0\.0: it serves \/metrics without credentials/m);
  });
});
