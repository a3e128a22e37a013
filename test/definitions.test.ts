/**
 * Plain SDK tools, prompts and resources defined once (`defineServer({ define })`): served on every request from
 * registrations recorded at start-up, and anything `define` may not do is refused at start-up by name.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { join } from 'node:path';
import { recordDefinitions } from '../src/server/module/definitions.js';
import { ROOT, callTool, rpc, textOf, useServer } from './helpers.js';

const NONE = { elicitation: {} };

describe('define: registrations made once, served on every request', () => {
  const srv = useServer([], { module: join(ROOT, 'dist', 'test', 'define-module.js') });

  it('the tool, prompt and resource are served request after request; define ran once', async () => {
    for (let i = 0; i < 5; i++) {
      const list = await rpc(srv.url, 'tools/list', {}, { caps: NONE });
      assert.deepEqual(list.result.tools.map((t: { name: string }) => t.name), ['lookup', 'define_runs'], 'defined tools first, then register');
      assert.deepEqual(list.result.tools[0].inputSchema.required, ['code'], 'the JSON Schema reaches tools/list');
      const ok = await callTool(srv.url, 'lookup', { code: 'LIS' }, { caps: NONE });
      assert.equal(textOf(ok.result), 'city LIS');
    }
    const bad = await callTool(srv.url, 'lookup', { code: 'lisbon' }, { caps: NONE });
    assert.equal(bad.result.isError, true, 'its schema still validates arguments');
    const prompt = await rpc(srv.url, 'prompts/get', { name: 'greeting', arguments: { name: 'Ada' } }, { caps: NONE, headers: { 'mcp-name': 'greeting' } });
    assert.equal(prompt.result.messages[0].content.text, 'Say hello to Ada');
    const res = await rpc(srv.url, 'resources/read', { uri: 'memo://motd' }, { caps: NONE, headers: { 'mcp-name': 'memo://motd' } });
    assert.equal(res.result.contents[0].text, 'Defined once.');
    const discover = await rpc(srv.url, 'server/discover', {}, { caps: NONE });
    assert.deepEqual(discover.result.capabilities.logging, {}, 'a capability registered in define is advertised');
    const [runs, built] = textOf((await callTool(srv.url, 'define_runs', {}, { caps: NONE })).result).split(' ').map(Number);
    assert.equal(runs, 1, 'define ran once');
    assert.ok(built! >= 15, `one McpServer per request still (${built})`);
  });
});

describe('define refuses what cannot be replayed', () => {
  const info = { name: 'x', version: '1' };

  it('anything but the four registrations fails at start-up, naming the call and where it belongs', () => {
    assert.throws(() => recordDefinitions((mcp) => (mcp as unknown as { tool(): void }).tool(), info), /define\(\) records registerTool, registerPrompt, registerResource and server\.registerCapabilities only; tool is not one of them \(do it in register\(\)/);
    assert.throws(
      () => recordDefinitions((mcp) => (mcp.server as unknown as { setRequestHandler(): void }).setRequestHandler(), info),
      /server\.setRequestHandler is not one of them/,
    );
  });

  it("the SDK's own checks run at start-up: a name defined twice is refused before anything is served", () => {
    const twice = () =>
      recordDefinitions((mcp) => {
        mcp.registerTool('same', { description: 'a' }, () => ({ content: [] }));
        mcp.registerTool('same', { description: 'b' }, () => ({ content: [] }));
      }, info);
    assert.throws(twice, /Tool same is already registered/);
  });

  it('replays in order, with the same schema and callback objects every time', () => {
    const config = { description: 'kept' };
    const cb = () => ({ content: [] });
    const d = recordDefinitions((mcp) => {
      mcp.server.registerCapabilities({ logging: {} });
      mcp.registerTool('a', config, cb);
      mcp.registerTool('b', config, cb);
    }, info);
    assert.equal(d.size, 3);
    const seen: unknown[][] = [];
    const target = {
      registerTool: (...args: unknown[]) => seen.push(['tool', ...args]),
      server: { registerCapabilities: (...args: unknown[]) => seen.push(['caps', ...args]) },
    };
    for (let i = 0; i < 2; i++) d.replay(target as never);
    assert.deepEqual(seen.map((x) => [x[0], x[1]]), [['caps', { logging: {} }], ['tool', 'a'], ['tool', 'b'], ['caps', { logging: {} }], ['tool', 'a'], ['tool', 'b']]);
    for (const call of seen.filter((x) => x[0] === 'tool')) {
      assert.equal(call[2], config, 'the very config object (its schema is not rebuilt)');
      assert.equal(call[3], cb);
    }
  });
});
