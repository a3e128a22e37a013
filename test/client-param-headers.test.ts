/**
 * TaskClient and SEP-2243 custom headers: arguments a tool marks with `x-mcp-header` travel as `Mcp-Param-*`
 * headers. Against a real `outlast serve` process (its `test_x_mcp_header` tool; the server refuses a call whose
 * header is missing or disagrees with the body, -32020), through the recording proxy; and against a scripted
 * server for tool definitions Outlast never serves (invalid declarations, nested and typed ones).
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { RejectedToolError, RpcError, TaskClient } from '../src/client/index.js';
import { textOf, useServer } from './helpers.js';
import { startProxy, startScriptedServer, type Reply } from './client-helpers.js';

const decode = (v: string | string[] | undefined) => {
  const m = typeof v === 'string' ? /^=\?base64\?(.*)\?=$/.exec(v) : null;
  return m ? Buffer.from(m[1]!, 'base64').toString('utf8') : v;
};

describe('TaskClient and Mcp-Param headers against outlast serve', () => {
  const server = useServer();

  test('a client that has not listed the tools yet is refused (-32020), lists them and sends the call again with the header; the tool runs once', async () => {
    const proxy = await startProxy(server.url);
    const client = new TaskClient({ url: proxy.url });
    try {
      const r = await client.callTool('test_x_mcp_header', { region: 'eu-west-1', verbose: true });
      assert.equal(textOf(r), 'region=eu-west-1');
      assert.deepEqual(
        proxy.seen.map((s) => `${s.method} ${s.status}`),
        ['tools/call 400', 'tools/list 200', 'tools/call 200'],
        'refused for the missing header, then listed, then accepted',
      );
      const [refused, , accepted] = proxy.seen;
      assert.equal(refused!.headers['mcp-param-region'], undefined);
      assert.equal(accepted!.headers['mcp-param-region'], 'eu-west-1');
      assert.equal(accepted!.headers['mcp-param-verbose'], undefined, 'verbose carries no x-mcp-header');
      assert.equal(refused!.body.params._meta['outlast/idempotencyKey'], accepted!.body.params._meta['outlast/idempotencyKey']);
      // Known from now on: the next call carries its header at once.
      assert.equal(textOf(await client.callTool('test_x_mcp_header', { region: 'us-east-2' })), 'region=us-east-2');
      assert.equal(proxy.count('tools/call'), 3);
      assert.equal(proxy.seen.at(-1)!.headers['mcp-param-region'], 'us-east-2');
    } finally {
      await client.close();
      await proxy.close();
    }
  });

  test('after listTools, values that are not plain ASCII go Base64-encoded and the server finds them equal to the body; an absent value sends no header', async () => {
    const proxy = await startProxy(server.url);
    const client = new TaskClient({ url: proxy.url });
    try {
      const { tools, rejected } = await client.listTools();
      assert.ok(tools.some((t) => t.name === 'test_x_mcp_header'));
      assert.deepEqual(rejected, []);
      const cases: Array<[string, 'plain' | 'base64']> = [
        ['us west 1', 'plain'],
        ['Zürich', 'base64'],
        ['Hello, 世界', 'base64'],
        [' padded ', 'base64'],
        ['line1\r\nline2', 'base64'],
        ['\tindented', 'base64'],
        ['=?base64?literal?=', 'base64'],
        ['', 'base64'],
      ];
      for (const [region, how] of cases) {
        const r = await client.callTool('test_x_mcp_header', { region });
        assert.equal(textOf(r), `region=${region}`, `the server accepted ${JSON.stringify(region)}`);
        const sent = proxy.seen.at(-1)!.headers['mcp-param-region'] as string;
        if (how === 'plain') assert.equal(sent, region);
        else assert.match(sent, /^=\?base64\?[A-Za-z0-9+/=]*\?=$/, `${JSON.stringify(region)} is encoded`);
        assert.equal(decode(sent), region);
      }
      assert.equal(textOf(await client.callTool('test_x_mcp_header', {})), 'region=(none)');
      assert.equal(proxy.seen.at(-1)!.headers['mcp-param-region'], undefined);
      assert.equal(proxy.count('tools/call'), cases.length + 1, 'no call was refused');
    } finally {
      await client.close();
      await proxy.close();
    }
  });
});

describe('TaskClient and x-mcp-header declarations Outlast does not serve', () => {
  const tools = [
    {
      name: 'deploy',
      inputSchema: {
        type: 'object',
        properties: {
          target: { type: 'object', properties: { region: { type: 'string', 'x-mcp-header': 'Region' } } },
          replicas: { type: 'integer', 'x-mcp-header': 'Replicas' },
          dryRun: { type: 'boolean', 'x-mcp-header': 'Dry-Run' },
          note: { type: 'string' },
        },
      },
    },
    { name: 'number_header', inputSchema: { type: 'object', properties: { score: { type: 'number', 'x-mcp-header': 'Score' } } } },
    { name: 'array_header', inputSchema: { type: 'object', properties: { tags: { type: 'array', items: { type: 'string' }, 'x-mcp-header': 'Tags' } } } },
    { name: 'under_items', inputSchema: { type: 'object', properties: { hosts: { type: 'array', items: { type: 'string', 'x-mcp-header': 'Host' } } } } },
    { name: 'under_anyof', inputSchema: { type: 'object', anyOf: [{ properties: { a: { type: 'string', 'x-mcp-header': 'A' } } }] } },
    { name: 'duplicate', inputSchema: { type: 'object', properties: { a: { type: 'string', 'x-mcp-header': 'Zone' }, b: { type: 'string', 'x-mcp-header': 'zone' } } } },
    { name: 'colon', inputSchema: { type: 'object', properties: { a: { type: 'string', 'x-mcp-header': 'Region:Primary' } } } },
    { name: 'empty', inputSchema: { type: 'object', properties: { a: { type: 'string', 'x-mcp-header': '' } } } },
  ];
  const listed: Reply = { result: { tools, ttlMs: 0, cacheScope: 'private' } };

  test('invalid declarations leave their tool out of listTools with the reason and it is never called; nested, integer and boolean values are mirrored', async () => {
    const server = await startScriptedServer((r) => (r.method === 'tools/list' ? listed : { result: { content: [{ type: 'text', text: 'ok' }] } }));
    const client = new TaskClient({ url: server.url });
    try {
      const list = await client.listTools();
      assert.deepEqual(list.tools.map((t) => t.name), ['deploy']);
      const reasons = Object.fromEntries(list.rejected.map((r) => [r.name, r.reason]));
      assert.match(reasons.number_header!, /"number" property; only string, integer and boolean/);
      assert.match(reasons.array_header!, /"array" property/);
      assert.match(reasons.under_items!, /not reachable from the root through "properties" alone/);
      assert.match(reasons.under_anyof!, /not reachable/);
      assert.match(reasons.duplicate!, /declared twice/);
      assert.match(reasons.colon!, /not an HTTP field-name token/);
      assert.match(reasons.empty!, /not a non-empty string/);

      await assert.rejects(client.callTool('number_header', { score: 1.5 }), (e: unknown) => e instanceof RejectedToolError && /number_header.*only string, integer and boolean/.test(e.message));
      assert.equal(server.received.filter((r) => r.method === 'tools/call').length, 0, 'a rejected tool is not called');
      assert.equal(client.journal.list().length, 0, 'nor journaled');

      await client.callTool('deploy', { target: { region: 'eu-north-1' }, replicas: 3, dryRun: false, note: 'x' });
      const h = server.received.at(-1)!.headers;
      assert.equal(h['mcp-param-region'], 'eu-north-1', 'a nested property reached through properties');
      assert.equal(h['mcp-param-replicas'], '3');
      assert.equal(h['mcp-param-dry-run'], 'false');
      assert.equal(Object.keys(h).filter((k) => k.startsWith('mcp-param-')).length, 3, 'nothing undeclared');
      await client.callTool('deploy', { target: null, replicas: 2 ** 60 });
      assert.deepEqual(Object.keys(server.received.at(-1)!.headers).filter((k) => k.startsWith('mcp-param-')), [], 'null, absent and unsafe integers send no header');
    } finally {
      await client.close();
      await server.close();
    }
  });

  test('a server that keeps refusing the headers gets one tools/list and one resend, then the caller gets its -32020', async () => {
    const server = await startScriptedServer((r) =>
      r.method === 'tools/list' ? listed : { error: { code: -32020, message: 'Header mismatch: Mcp-Param-Region does not match the body' } },
    );
    const client = new TaskClient({ url: server.url });
    try {
      await assert.rejects(client.callTool('deploy', { target: { region: 'eu-north-1' } }), (e: unknown) => e instanceof RpcError && e.code === -32020);
      assert.deepEqual(server.received.map((r) => r.method), ['tools/call', 'tools/list', 'tools/call']);
      // With the headers known, a refusal lists again, finds the same headers and does not resend.
      await assert.rejects(client.callTool('deploy', { target: { region: 'eu-north-1' } }), (e: unknown) => e instanceof RpcError && e.code === -32020);
      assert.deepEqual(server.received.slice(3).map((r) => r.method), ['tools/call', 'tools/list']);
      assert.deepEqual(client.journal.list().map((e) => e.state), ['failed', 'failed']);
    } finally {
      await client.close();
      await server.close();
    }
  });
});
