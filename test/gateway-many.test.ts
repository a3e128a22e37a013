/**
 * `outlast gateway --config FILE` with several upstreams at once, real processes: the official reference server
 * (`@modelcontextprotocol/server-everything`), `@modelcontextprotocol/server-filesystem`, a small SDK v1 server that
 * shows its environment, and a command that cannot start. Each tool is served as NAME__tool and reaches its own
 * upstream; the broken one says why while the others serve; names that collide or are too long refuse the start.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { BIN, ROOT, callTool, freePort, httpServiceProcess, rpc, startServer, tempDir, textOf, type ServerProcess } from './helpers.js';
import { TaskClient } from '../src/client/index.js';
import { docBlock } from './doc-blocks.js';
import { readGatewayConfig } from '../src/cli/gateway-config.js';
import { UsageError } from '../src/cli/usage.js';
import { Outlast } from '../src/server/outlast.js';
import { mountGateway } from '../src/gateway/index.js';
import { SqliteTaskStore } from '../src/store/sqlite/index.js';
import { silentLogger } from '../src/runtime/types.js';

const EVERYTHING = join(ROOT, 'node_modules', '@modelcontextprotocol', 'server-everything', 'dist', 'index.js');
const FILESYSTEM = join(ROOT, 'node_modules', '@modelcontextprotocol', 'server-filesystem', 'dist', 'index.js');
const UPSTREAMS = join(ROOT, 'dist', 'test', 'gateway-upstreams.js');
const NODE = process.execPath;

function configFile(servers: Record<string, unknown>): string {
  const file = join(tempDir(), 'mcp.json');
  writeFileSync(file, JSON.stringify({ mcpServers: servers }));
  return file;
}

describe('gateway of several upstreams (--config)', () => {
  let gw: ServerProcess;
  const dir = tempDir('outlast-gw-many-');
  before(async () => {
    writeFileSync(join(dir, 'hello.txt'), 'Hello from a file\n');
    const config = configFile({
      everything: { command: NODE, args: [EVERYTHING, 'stdio'], env: { ONLY_EVERYTHING: 'e-secret-value' } },
      fs: { type: 'stdio', command: NODE, args: [FILESYSTEM, dir] },
      small: { command: NODE, args: [UPSTREAMS, 'silent'], env: { ONLY_SMALL: 's-secret-value' } },
      broken: { command: '/nonexistent/outlast-no-such-server' },
    });
    gw = await startServer(['--store', `sqlite:${join(tempDir(), 'tasks.db')}`], { command: ['gateway', '--config', config, '--retry-safe', 'small__ok'] });
  });
  after(() => gw?.stop());

  it('lists every live upstream’s tools under its prefix, and routes each call to its upstream', async () => {
    const tools = (await rpc(gw.url, 'tools/list')).result.tools as Array<Record<string, any>>;
    const names = tools.map((t) => t.name);
    // everything__trigger-elicitation-request comes by everything's own list_changed, after initialize.
    for (const n of ['everything__echo', 'everything__get-env', 'everything__trigger-elicitation-request', 'fs__read_text_file', 'fs__list_directory', 'small__ok']) assert.ok(names.includes(n), `${n} in ${names.join(', ')}`);
    assert.ok(!names.includes('echo') && !names.includes('read_text_file'), 'no tool without its prefix');
    assert.equal(tools.find((t) => t.name === 'fs__read_text_file')!.annotations.readOnlyHint, true, 'annotations kept');

    assert.equal(textOf((await callTool(gw.url, 'everything__echo', { message: 'hi' })).result), 'Echo: hi');
    assert.equal(textOf((await callTool(gw.url, 'fs__read_text_file', { path: join(dir, 'hello.txt') })).result), 'Hello from a file\n');
    assert.equal(textOf((await callTool(gw.url, 'small__ok', { word: 'there' })).result), 'ok there');
  });

  it('each upstream gets its own env, and no value reaches the log', async () => {
    const everythingEnv = textOf((await callTool(gw.url, 'everything__get-env', {})).result);
    const smallEnv = JSON.parse(textOf((await callTool(gw.url, 'small__env', {})).result)) as Record<string, string>;
    assert.match(everythingEnv, /"ONLY_EVERYTHING": "e-secret-value"/);
    assert.doesNotMatch(everythingEnv, /ONLY_SMALL/);
    assert.equal(smallEnv.ONLY_SMALL, 's-secret-value');
    assert.equal(smallEnv.ONLY_EVERYTHING, undefined);
    assert.doesNotMatch(gw.stderr(), /secret-value/);
  });

  it('an upstream that cannot start: its tools say why, the others serve', async () => {
    const call = await callTool(gw.url, 'broken__anything', {});
    assert.match(call.error?.message ?? '', /upstream "broken" \(outlast-no-such-server\) could not start: .*ENOENT/);
    assert.equal((await rpc(gw.url, 'tools/list')).error, undefined, 'tools/list still answers');
    assert.equal(textOf((await callTool(gw.url, 'everything__echo', { message: 'still' })).result), 'Echo: still');
  });

  it('prompts are prefixed and reach their upstream; resources keep their URIs and are read from theirs', async () => {
    const prompts = (await rpc(gw.url, 'prompts/list')).result.prompts as Array<{ name: string }>;
    assert.ok(prompts.some((p) => p.name === 'everything__simple-prompt'), JSON.stringify(prompts.map((p) => p.name)));
    const got = await rpc(gw.url, 'prompts/get', { name: 'everything__simple-prompt' }, { headers: { 'mcp-name': 'everything__simple-prompt' } });
    assert.ok((got.result?.messages as unknown[] | undefined)?.length, JSON.stringify(got));
    const resources = (await rpc(gw.url, 'resources/list')).result.resources as Array<{ uri: string }>;
    const uri = resources[0]!.uri;
    assert.match(uri, /^demo:\/\/|^test:\/\//, 'the upstream’s own URI');
    const read = await rpc(gw.url, 'resources/read', { uri }, { headers: { 'mcp-name': uri } });
    assert.equal(read.result.contents[0].uri, uri);
    // A URI of one of its templates, never listed: routed by the template.
    const dynamic = 'demo://resource/dynamic/text/7';
    const readDynamic = await rpc(gw.url, 'resources/read', { uri: dynamic }, { headers: { 'mcp-name': dynamic } });
    assert.equal(readDynamic.result?.contents?.[0]?.uri, dynamic, JSON.stringify(readDynamic));
    const unknown = await rpc(gw.url, 'resources/read', { uri: 'nowhere://x' }, { headers: { 'mcp-name': 'nowhere://x' } });
    assert.match(unknown.error?.message ?? '', /Resource "nowhere:\/\/x" is listed by no upstream/);
  });
});

describe('gateway of a stdio and a Streamable HTTP upstream (--config)', () => {
  let gw: ServerProcess;
  let stopHttp = async () => undefined as unknown;
  before(async () => {
    const port = await freePort();
    const svc = httpServiceProcess('server-everything', 'env', [`PORT=${port}`, NODE, EVERYTHING, 'streamableHttp'], `http://127.0.0.1:${port}/mcp`);
    await svc.start();
    stopHttp = () => svc.stop();
    const config = configFile({ web: { type: 'http', url: `http://127.0.0.1:${port}/mcp` }, small: { command: NODE, args: [UPSTREAMS, 'silent'] } });
    gw = await startServer(['--store', `sqlite:${join(tempDir(), 'tasks.db')}`, '--inline-budget-ms', '300'], { command: ['gateway', '--config', config] });
  });
  after(async () => {
    await gw?.stop();
    await stopHttp();
  });

  it('serves both under their prefixes: inline calls, a long HTTP call as a task polled to its result, and a prompt', async () => {
    const names = ((await rpc(gw.url, 'tools/list')).result.tools as Array<{ name: string }>).map((t) => t.name);
    for (const n of ['web__echo', 'web__trigger-long-running-operation', 'small__ok']) assert.ok(names.includes(n), `${n} in ${names.join(', ')}`);
    assert.equal(textOf((await callTool(gw.url, 'web__echo', { message: 'over http' })).result), 'Echo: over http');
    assert.equal(textOf((await callTool(gw.url, 'small__ok', { word: 'over stdio' })).result), 'ok over stdio');
    const client = new TaskClient({ url: gw.url, status: 'poll' });
    try {
      const call = await client.start('web__trigger-long-running-operation', { duration: 1.2, steps: 3 });
      const result = await call.result();
      assert.ok(call.taskId, 'it became a task');
      assert.equal(textOf(result as never), 'Long running operation completed. Duration: 1.2 seconds, Steps: 3.');
    } finally {
      await client.close();
    }
    const got = await rpc(gw.url, 'prompts/get', { name: 'web__simple-prompt' }, { headers: { 'mcp-name': 'web__simple-prompt' } });
    assert.ok((got.result?.messages as unknown[] | undefined)?.length, JSON.stringify(got));
    const none = await rpc(gw.url, 'prompts/get', { name: 'small__nothing' }, { headers: { 'mcp-name': 'small__nothing' } });
    assert.ok(none.error, `a prompt of an upstream that has none is an error: ${JSON.stringify(none)}`);
  });
});

describe('gateway --config: one server, and what refuses the start', () => {
  it('a prefixed name too long is named, exit 2; names that could clash are refused before anything starts', async () => {
    const config = configFile({
      a: { command: NODE, args: [UPSTREAMS, 'silent'], env: { GW_EXTRA_TOOL: 'b__ok' } },
      ab: { command: NODE, args: [UPSTREAMS, 'silent'], env: { GW_EXTRA_TOOL: 'x'.repeat(63) } },
    });
    const r = spawnSync(NODE, [BIN, 'gateway', '--config', config, '--store', `sqlite:${join(tempDir(), 'tasks.db')}`, '--port', '0'], { cwd: ROOT, encoding: 'utf8', timeout: 30_000 });
    assert.equal(r.status, 2, r.stderr);
    const last = r.stderr.trimEnd().split('\n').at(-1)!;
    assert.match(last, /the upstreams' tools cannot all be served under their names, so the gateway does not start: /);
    assert.match(last, /tool "x{63}" of upstream "ab" is not served: "ab__x{63}" is longer than 64 characters/);
    // "a" serving "b__ok" and "a__b" serving "ok" would both be "a__b__ok" (and "a_" serving "x", "a" serving "_x"
    // both "a___x"): such names are refused by the gateway itself too, for a caller of mountGateway.
    const outlast = new Outlast({ store: new SqliteTaskStore(join(tempDir(), 'tasks.db')) });
    const spec = (name: string) => ({ kind: 'stdio' as const, name, command: NODE, args: [UPSTREAMS, 'silent'] });
    await assert.rejects(mountGateway(outlast, { upstreams: [spec('a'), spec('a__b')], log: silentLogger }), /upstream "a__b": a name may not contain "__" or end in "_"/);
    await assert.rejects(mountGateway(outlast, { upstreams: [spec('a'), spec('a_')], log: silentLogger }), /upstream "a_": a name may not contain "__" or end in "_"/);
  });

  it('one server in the file keeps its tools\' names (a disabled one is left out)', async () => {
    const config = configFile({ small: { command: NODE, args: [UPSTREAMS, 'silent'] }, off: { command: '/nonexistent/off', disabled: true } });
    const gw = await startServer(['--store', `sqlite:${join(tempDir(), 'tasks.db')}`], { command: ['gateway', '--config', config] });
    try {
      const names = ((await rpc(gw.url, 'tools/list')).result.tools as Array<{ name: string }>).map((t) => t.name);
      assert.ok(names.includes('ok') && !names.some((n) => n.includes('__')), names.join(', '));
      assert.equal(textOf((await callTool(gw.url, 'ok', { word: 'alone' })).result), 'ok alone');
    } finally {
      await gw.stop();
    }
  });

  it('mistakes in the file: each named in one line, and no env or header value quoted', () => {
    const read = (text: string) => {
      const file = join(tempDir(), 'mcp.json');
      writeFileSync(file, text);
      try {
        readGatewayConfig(file);
      } catch (e) {
        assert.ok(e instanceof UsageError, String(e));
        assert.doesNotMatch(e.message, /\n|sekret/);
        return e.message;
      }
      assert.fail(`${text} was read`);
    };
    const servers = (s: unknown) => read(JSON.stringify({ mcpServers: s }));
    assert.match(read('{"mcpServers": {'), /^--config .*mcp\.json is not JSON: /);
    assert.match(servers({}), /^--config .*mcp\.json names no servers; it needs \{"mcpServers"/);
    assert.match(servers({ a: { args: ['x'] } }), /server "a" has neither "command" \(a stdio server\) nor "url"/);
    assert.match(servers({ a: { command: 'node', url: 'http://127.0.0.1:9/mcp' } }), /server "a" has both "command" and "url"; give one/);
    assert.match(servers({ a: { type: 'sse', url: 'http://127.0.0.1:9/sse' } }), /server "a": "type": "sse" \(the old HTTP\+SSE transport\) is not supported/);
    assert.match(servers({ 'my server': { command: 'node' } }), /server "my server": a server's name must be 1 to 32 letters, digits/);
    for (const name of ['a__b', 'a_']) assert.match(servers({ [name]: { command: 'node' }, c: { command: 'node' } }), new RegExp(`server "${name}": a server's name may not contain "__" or end in "_"`));
    assert.match(servers({ a: { command: 'node', env: { TOKEN: 'sekret', N: 5 } } }), /server "a": "env": "N" must be a string/);
    assert.match(servers({ a: { url: 'ftp://sekret@example.com/mcp' } }), /server "a": "url" must be an http:\/\/ or https:\/\/ URL/);
    assert.match(servers({ a: { url: 'https://x.example/mcp', headers: { Authorization: 'Bearer ${OUTLAST_TEST_UNSET_TOKEN}' } } }),
      /server "a": "headers": "Authorization" names \$\{OUTLAST_TEST_UNSET_TOKEN\}, which is not set in the gateway's environment$/);
  });

  it('${VAR} in a value comes from the environment (secrets stay out of the file); ${VAR:-default} when unset', () => {
    const file = join(tempDir(), 'mcp.json');
    writeFileSync(file, JSON.stringify({ mcpServers: {
      local: { command: 'node', args: ['${env:GW_DIR}/server.js'], env: { TOKEN: '${GW_TOKEN}', LEVEL: '${GW_LEVEL:-warn}' } },
      remote: { url: 'https://${GW_HOST}/mcp', headers: { Authorization: 'Bearer ${GW_TOKEN}' } },
    } }));
    const specs = readGatewayConfig(file, { GW_DIR: '/srv', GW_TOKEN: 'sekret', GW_HOST: 'tickets.example.com' });
    assert.deepEqual(specs, [
      { kind: 'stdio', name: 'local', command: 'node', args: ['/srv/server.js'], env: { TOKEN: 'sekret', LEVEL: 'warn' }, secrets: ['sekret', 'warn', '/srv'] },
      { kind: 'http', name: 'remote', url: 'https://tickets.example.com/mcp', headers: { Authorization: 'Bearer sekret' }, secrets: ['tickets.example.com', 'sekret'] },
    ]);
  });

  it('docs/gateway.md: the documented config reads as the servers it shows', () => {
    const block = docBlock('docs/gateway.md', 'gateway-config');
    const file = join(tempDir(), 'mcp.json');
    writeFileSync(file, block.code);
    const specs = readGatewayConfig(file, { TICKETS_TOKEN: 'from-the-environment' });
    assert.deepEqual(specs.map((s) => [s.name, s.kind]), [['files', 'stdio'], ['everything', 'stdio'], ['tickets', 'http']]);
  });
});
