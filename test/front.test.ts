/**
 * The front's contract beyond the stacks of docs/existing-app.md: attach() behind the SDK's handler alone (warned once,
 * at the first request; a posted 2025-11-25 answer recorded, not dropped), loadServerModule, a body a framework parsed
 * (held to maxBodyBytes; one parsed and not handed over is refused, saying so), the dashboard path on a fetch runtime,
 * the SDK peer range, and the Host check (allowedHosts) with the verdicts the front remembers.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import express from 'express';
import { loadServerModule, outlastHandler } from '../src/server/index.js';
import { SqliteTaskStore } from '../src/store/sqlite/index.js';
import { SDK_PEER_RANGES, checkSdkPeer, installedSdk } from '../src/server/core/sdk-peer.js';
import { FIXTURES, ROOT, callTool, tempDir, textOf } from './helpers.js';
import { connectV1 } from './generations.js';

const RELATED = 'io.modelcontextprotocol/related-task';

describe("attach() behind the SDK's handler alone", () => {
  it('warns once, at the first request, naming what is absent; a posted 2025-11-25 answer is still recorded and the task completes', async () => {
    const proc = spawn(process.execPath, [join(ROOT, 'dist', 'test', 'bare-sdk-app.js')], {
      cwd: ROOT,
      env: { ...process.env, PORT: '0', OUTLAST_STORE: `sqlite:${join(tempDir(), 'bare.db')}` },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let err = '';
    proc.stderr!.on('data', (d) => (err += d));
    const exited = new Promise<number | null>((r) => proc.once('exit', (code) => r(code)));
    try {
      const url = await new Promise<string>((res, rej) => {
        let out = '';
        proc.stdout!.on('data', (d) => {
          out += d;
          const m = /listening on (\S+)/.exec(out);
          if (m) res(m[1]!);
        });
        void exited.then(() => rej(new Error(`bare app exited:\n${err}`)));
      });
      assert.doesNotMatch(err, /OUTLAST_NO_FRONT/, 'nothing is said before the first request');
      const { client, close } = await connectV1(url, {
        elicit: async (params) => {
          assert.ok(params._meta?.[RELATED]?.taskId);
          return { action: 'accept', content: { answer: 'bare' } };
        },
      });
      try {
        const msgs: Array<{ type: string; result?: Record<string, any> }> = [];
        for await (const m of client.experimental.tasks.callToolStream({ name: 'ask', arguments: { message: 'Here?' } }, undefined, {} as never)) msgs.push(m as never);
        assert.match(textOf(msgs[msgs.length - 1]!.result ?? {}), /The answer is: bare/, JSON.stringify(msgs.at(-1)));
      } finally {
        await close();
      }
      const warnings = err.split('\n').filter((l) => l.includes('OUTLAST_NO_FRONT'));
      assert.equal(warnings.length, 1, err);
      for (const absent of ['subscriptions/listen', '429', '503', 'direct path', 'outlastHandler']) assert.ok(err.includes(absent), `the warning names ${absent}: ${err}`);
    } finally {
      proc.kill('SIGTERM');
      await exited;
    }
  });
});

/** One tools/call through a loaded module's factory and the SDK, in this process (no HTTP). */
async function callOnce(loaded: Awaited<ReturnType<typeof loadServerModule>>, name: string, args: Record<string, unknown>): Promise<Record<string, any>> {
  const handler = outlastHandler(loaded.outlast, loaded.factory, loaded.options);
  const params = { name, arguments: args, _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': {}, 'io.modelcontextprotocol/clientInfo': { name: 't', version: '0' } } };
  const r = await handler.fetch(
    new Request('http://127.0.0.1/mcp', {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'tools/call', 'mcp-name': name },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params }),
    }),
  );
  const text = await r.text();
  const json = text.startsWith('{') ? text : text.split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5)).pop()!;
  await handler.close();
  return (JSON.parse(json) as { result: Record<string, any> }).result;
}

describe('loadServerModule', () => {
  it('returns the outlast, the factory and the options (serverInfo, handles) of a defineServer module; a TaskStore or a URL', async () => {
    const fromUrl = await loadServerModule(FIXTURES, { store: `sqlite:${join(tempDir(), 'a.db')}` });
    assert.deepEqual(fromUrl.options.serverInfo, { name: 'outlast-fixtures', version: '0.1.0' });
    assert.deepEqual(fromUrl.options.handles, {});
    assert.ok(fromUrl.outlast.runtime.hasTool('park'));
    const store = new SqliteTaskStore(join(tempDir(), 'b.db'));
    const fromStore = await loadServerModule(join(ROOT, 'dist', 'demo', 'server.js'), { store, handles: false });
    await fromStore.outlast.start();
    assert.equal(textOf(await (async () => (await callOnce(fromStore, 'reindex', { collection: 'c', documents: 10 })))()).includes('Reindexed 10'), true);
    await fromStore.outlast.stop(0);
    assert.ok(existsSync(store.path), 'the given store is the one opened');
    assert.equal(fromStore.options.handles, undefined);
    assert.equal(fromStore.outlast.handles, undefined);
    await assert.rejects(loadServerModule(join(tempDir(), 'missing.js'), { store }), /cannot load .*missing\.js/);
    await assert.rejects(loadServerModule(FIXTURES, { store: 'mysql://nope' }), /unsupported store "mysql:\/\/nope"/);
  });
});

describe('a framework that parsed the body (Express 5, in this process)', () => {
  it('a handed-over body is held to maxBodyBytes on its JSON text (JSON-RPC 413); one parsed and not handed over is refused, naming the fix', async () => {
    const { outlast, factory, options } = await loadServerModule(FIXTURES, { store: `sqlite:${join(tempDir(), 'express.db')}` });
    const handler = outlastHandler(outlast, factory, { ...options, maxBodyBytes: 2000 });
    await outlast.start();
    const app = express();
    app.use(express.json({ limit: '4mb' }));
    app.post('/mcp', (req, res) => handler.node(req, res, req.body));
    const forgetful = express();
    forgetful.use(express.json());
    forgetful.post('/mcp', (req, res) => handler.node(req, res));
    const server = app.listen(0, '127.0.0.1');
    const other = forgetful.listen(0, '127.0.0.1');
    await Promise.all([new Promise((r) => server.once('listening', r)), new Promise((r) => other.once('listening', r))]);
    const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const forgotten = `http://127.0.0.1:${(other.address() as AddressInfo).port}`;
    try {
      const ok = await callTool(`${base}/mcp`, 'greet', { name: 'Ada' });
      assert.match(textOf(ok.result), /Ada/);
      const big = await fetch(`${base}/mcp`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
        body: JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'tools/call', params: { name: 'greet', arguments: { name: 'x'.repeat(5000) } } }),
      });
      assert.equal(big.status, 413);
      assert.match(((await big.json()) as { error: { message: string } }).error.message, /exceeds 2000 bytes/);
      const forgot = await fetch(`${forgotten}/mcp`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"jsonrpc":"2.0","id":1,"method":"ping"}' });
      assert.equal(forgot.status, 400);
      assert.match(((await forgot.json()) as { error: { message: string } }).error.message, /already read by a body parser.*handler\.node\(req, res, req\.body\)/);
    } finally {
      server.close();
      other.close();
      await handler.close();
      await outlast.stop(0);
    }
  });
});

describe('handler.fetch on a path only node:http can serve', () => {
  it('the dashboard through fetch answers 501 saying how to get it; the MCP path answers as usual', async () => {
    const { outlast, factory, options } = await loadServerModule(FIXTURES, { store: `sqlite:${join(tempDir(), 'fetch.db')}` });
    const handler = outlastHandler(outlast, factory, { ...options, dashboard: { host: '127.0.0.1' } });
    await outlast.start();
    try {
      const r = await handler.fetch(new Request('http://127.0.0.1/dashboard'));
      assert.equal(r.status, 501);
      assert.match(await r.text(), /handler\.node\(\).*outlast dashboard --store URL/s);
      const discover = await handler.fetch(
        new Request('http://127.0.0.1/mcp', {
          method: 'POST',
          headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'server/discover' },
          body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'server/discover', params: { _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': {}, 'io.modelcontextprotocol/clientInfo': { name: 't', version: '0' } } } }),
        }),
      );
      assert.equal(discover.status, 200);
      assert.deepEqual(((await discover.json()) as { result: { capabilities: { extensions: Record<string, unknown> } } }).result.capabilities.extensions['io.modelcontextprotocol/tasks'], {});
    } finally {
      await handler.close();
      await outlast.stop(0);
    }
  });
});

describe('the SDK as a peer', () => {
  it('package.json peerDependencies are the ranges checked at start-up; the installed SDK is in them; another version is refused naming both', () => {
    const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { peerDependencies: Record<string, string>; dependencies: Record<string, string> };
    for (const [name, range] of Object.entries(SDK_PEER_RANGES)) {
      assert.equal(pkg.peerDependencies[name], range);
      assert.equal(pkg.dependencies[name], undefined, `${name} is a peer, not a dependency`);
    }
    assert.doesNotThrow(() => checkSdkPeer());
    assert.match(installedSdk('@modelcontextprotocol/server').version, /^2\.4\./);
    assert.throws(() => checkSdkPeer(() => '2.5.1'), /@modelcontextprotocol\/server 2\.5\.1 is installed, but Outlast is tested with @modelcontextprotocol\/server@~2\.4\.0/);
    assert.throws(() => checkSdkPeer(() => '2.3.9'), /2\.3\.9 is installed.*~2\.4\.0/);
  });
});

describe('DNS-rebinding protection (allowedHosts) on the front', () => {
  it('a Host not listed gets 403 every time, also after allowed ones and after more distinct allowed Host values than the front remembers; a listed one is served', async () => {
    const { outlast, factory, options } = await loadServerModule(FIXTURES, { store: `sqlite:${join(tempDir(), 'hosts.db')}` });
    const handler = outlastHandler(outlast, factory, { ...options, allowedHosts: ['127.0.0.1', 'localhost'] });
    await outlast.start();
    const discover = (host: string) =>
      handler.fetch(
        new Request('http://127.0.0.1/mcp', {
          method: 'POST',
          headers: { host, 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'server/discover' },
          body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'server/discover', params: { _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': {}, 'io.modelcontextprotocol/clientInfo': { name: 't', version: '0' } } } }),
        }),
      );
    const refused = async (host: string) => {
      const r = await discover(host);
      assert.equal(r.status, 403, host);
      assert.deepEqual(await r.json(), { jsonrpc: '2.0', error: { code: -32000, message: `Invalid Host: ${new URL(`http://${host}`).hostname}` }, id: null });
    };
    try {
      await refused('evil.example');
      for (let i = 0; i < 3; i++) {
        const ok = await discover('127.0.0.1:8080');
        assert.equal(ok.status, 200);
        await ok.body?.cancel();
        await refused('evil.example');
        await refused('evil.example:8080');
      }
      // More distinct allowed values than the front keeps (256): it forgets, it never starts allowing.
      for (let port = 1; port <= 300; port++) {
        const r = await discover(`localhost:${port}`);
        assert.equal(r.status, 200, `localhost:${port}`);
        await r.body?.cancel();
      }
      await refused('evil.example');
      await refused('127.0.0.2:8080');
      const missing = await handler.fetch(new Request('http://127.0.0.1/mcp', { method: 'POST', headers: { host: '' }, body: '{}' }));
      assert.equal(missing.status, 403);
      assert.match(JSON.stringify(await missing.json()), /Missing Host header/);
    } finally {
      await handler.close();
      await outlast.stop(0);
    }
  });
});
