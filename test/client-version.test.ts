// test:quick: starts no process and no browser (npm run test:quick).
/**
 * TaskClient when a server refuses the protocol version (-32022 UnsupportedProtocolVersion): a scripted loopback
 * server, because Outlast's own server accepts 2026-07-28, the only version the client speaks.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { TaskClient, UnsupportedVersionError } from '../src/client/index.js';
import { textOf } from './helpers.js';
import { startScriptedServer, type Reply } from './client-helpers.js';

const refuse = (supported: string[], requested = '2026-07-28'): Reply => ({
  error: { code: -32022, message: 'Unsupported protocol version', data: { supported, requested } },
});
const done: Reply = { result: { content: [{ type: 'text', text: 'done' }] } };

describe('TaskClient and a refused protocol version', () => {
  test('a -32022 that lists 2026-07-28 is retried once with it (a new id, the same idempotency key) and the call succeeds', async () => {
    const server = await startScriptedServer((r) => (server.received.length === 1 ? refuse(['2025-11-25', '2026-07-28'], '') : r.method === 'tools/call' ? done : { result: {} }));
    const client = new TaskClient({ url: server.url });
    try {
      assert.equal(textOf(await client.callTool('build', { ref: 'main' })), 'done');
      const calls = server.received.filter((r) => r.method === 'tools/call');
      assert.equal(calls.length, 2, 'refused once, sent again once');
      assert.notEqual(calls[0]!.id, calls[1]!.id, 'the retry is a new JSON-RPC request');
      for (const c of calls) {
        assert.equal(c.headers['mcp-protocol-version'], '2026-07-28');
        assert.equal(c.body.params._meta['io.modelcontextprotocol/protocolVersion'], '2026-07-28');
      }
      assert.equal(calls[0]!.body.params._meta['outlast/idempotencyKey'], calls[1]!.body.params._meta['outlast/idempotencyKey'], 'one logical call');
    } finally {
      await client.close();
      await server.close();
    }
  });

  test('a server that speaks only older versions: one request, a clear error naming both sides, and nothing left to resume', async () => {
    const server = await startScriptedServer(() => refuse(['2025-06-18', '2025-11-25']));
    const client = new TaskClient({ url: server.url });
    try {
      const refused = await client.callTool('build', {}).then(
        () => assert.fail('the call cannot succeed'),
        (e: unknown) => e,
      );
      assert.ok(refused instanceof UnsupportedVersionError, String(refused));
      assert.equal(refused.code, -32022);
      assert.deepEqual(refused.supported, ['2025-06-18', '2025-11-25']);
      assert.match(refused.message, new RegExp(`${server.url}.*2026-07-28.*it supports: 2025-06-18, 2025-11-25`));
      assert.equal(server.received.length, 1, 'no retry: no version in common');
      // Refused before anything ran: the journal records it as failed, so resume does not send it again.
      const [entry] = client.journal.list();
      assert.equal(entry?.state, 'failed');
      const resumed = await client.resume();
      await Promise.all(resumed.map((h) => h.result().catch(() => undefined)));
      assert.equal(server.received.length, 1, 'resume sent nothing');
    } finally {
      await client.close();
      await server.close();
    }
  });

  test('a server that refuses 2026-07-28 again after listing it gets exactly one retry, then an error saying so; tools/list too', async () => {
    const server = await startScriptedServer(() => refuse(['2026-07-28']));
    const client = new TaskClient({ url: server.url });
    try {
      await assert.rejects(client.callTool('build', {}), (e: unknown) => e instanceof UnsupportedVersionError && /refused MCP protocol version 2026-07-28 twice/.test(e.message));
      assert.equal(server.received.length, 2);
      await assert.rejects(client.listTools(), UnsupportedVersionError);
      assert.equal(server.received.length, 4, 'tools/list: refused, retried once, refused');
    } finally {
      await client.close();
      await server.close();
    }
  });
});
