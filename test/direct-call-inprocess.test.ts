// test:quick: starts no process and no browser (npm run test:quick).
/**
 * The direct tools/call path in-process (serveHttp), where a test changes the tools while calls are in flight: the
 * kept server is replaced for new calls, and the calls it holds are answered, not cut off.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { setTimeout as delay } from 'node:timers/promises';
import { McpServer } from '@modelcontextprotocol/server';
import { Outlast } from '../src/server/outlast.js';
import { serveHttp } from '../src/server/http.js';
import { LocalSignalBus } from '../src/store/local-bus.js';
import { SqliteTaskStore } from '../src/store/sqlite/index.js';
import { headersFor, metaFor, tempDir } from './helpers.js';

const info = { name: 'inprocess', version: '0' };

async function callTool(url: string, name: string, args: Record<string, unknown>): Promise<{ status: number; json: any }> {
  const params = { name, arguments: args, _meta: metaFor({}) };
  const res = await fetch(url, { method: 'POST', headers: headersFor('tools/call', params), body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params }), signal: AbortSignal.timeout(15_000) });
  return { status: res.status, json: await res.json() };
}

describe('direct tools/call in-process', () => {
  it('a tool defined while calls are in flight: new calls see it, the calls in flight get their results', async () => {
    const outlast = new Outlast({ store: new SqliteTaskStore(join(tempDir(), 't.db')), bus: new LocalSignalBus() });
    let ended = 0;
    outlast.tool('slow', { policy: 'never' }, async (_a, ctx) => {
      await delay(1500, undefined, { signal: ctx.signal });
      ended++;
      return { content: [{ type: 'text', text: 'slow done' }] };
    });
    const http = await serveHttp(outlast, () => new McpServer(info), { port: 0, serverInfo: info });
    try {
      const inFlight = [callTool(http.url, 'slow', {}), callTool(http.url, 'slow', {})];
      await delay(300);
      outlast.tool('added', { policy: 'never' }, async () => ({ content: [{ type: 'text', text: 'added here' }] }));
      const added = await callTool(http.url, 'added', {});
      assert.equal(added.json.result?.content?.[0]?.text, 'added here', JSON.stringify(added.json));
      for (const r of await Promise.all(inFlight)) assert.equal(r.json.result?.content?.[0]?.text, 'slow done', JSON.stringify(r.json));
      assert.equal(ended, 2);
      // Withdrawn: the next call is answered as for any unknown tool.
      outlast.removeTool('added');
      const gone = await callTool(http.url, 'added', {});
      assert.match(JSON.stringify(gone.json), /added/);
      assert.equal(gone.json.result?.content?.[0]?.text === 'added here', false, JSON.stringify(gone.json));
    } finally {
      await http.close();
      await outlast.stop();
    }
  });
});
