/**
 * `outlast serve FILE` on what a newcomer writes: the README's quick start (a module that exports its Outlast and
 * serverInfo) is served, with the direct path on; a file that calls serveHttp itself, or one of no known shape, is
 * refused in one line naming what to do; a flag that would change a module's own Outlast is refused naming the option
 * to set instead. `--log-format json`: every line from the first is one JSON object, start-up lines and refusals too.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { FIXTURES, ROOT, rpc, startServer, tempDir } from './helpers.js';
import { runCli } from './client-helpers.js';
import { docBlock } from './doc-blocks.js';

/** Writes a module beside the build (so `import 'outlast/server'` resolves to this package, as in an app) and
 *  returns its path; removed after the suite. */
const written: string[] = [];
function moduleFile(code: string): string {
  const file = join(ROOT, 'dist', 'test', `served-${randomUUID().slice(0, 8)}.mjs`);
  writeFileSync(file, code);
  written.push(file);
  return file;
}

/** The README's quick start, its store moved to a temporary file. */
function quickStart(): string {
  const code = docBlock('README.md', 'quickstart').code;
  assert.match(code, /'\.outlast\/tasks\.db'/);
  return moduleFile(code.replace("'.outlast/tasks.db'", JSON.stringify(join(tempDir(), 'tasks.db'))));
}

describe('outlast serve FILE: the shapes a newcomer writes', () => {
  after(() => {
    for (const f of written) rmSync(f, { force: true });
  });

  it("serves the README's quick start (it exports its Outlast and serverInfo): its tool runs, the direct path answers polls", { timeout: 60_000 }, async () => {
    const srv = await startServer([], { module: quickStart() });
    try {
      const journal = join(tempDir(), 'journal.db');
      const call = runCli(['call', srv.url, 'reindex', '{"collection":"docs"}', '--journal', journal]);
      assert.equal((await call.exited).code, 0, call.stderr());
      assert.match(call.stdout(), /indexed batch 10 of docs\nReindexed docs\n$/);
      const taskId = /task (\S+) created/.exec(call.stderr())?.[1];
      assert.ok(taskId, call.stderr());
      // The direct path stamps the serverInfo it was given on a poll's result.
      const poll = await rpc(srv.url, 'tasks/get', { taskId });
      assert.equal(poll.result?.status, 'completed', JSON.stringify(poll));
      assert.deepEqual((poll.result?._meta as Record<string, unknown>)?.['io.modelcontextprotocol/serverInfo'], { name: 'indexer', version: '1.0.0' });
    } finally {
      await srv.stop();
    }
  });

  it('refuses, in one line and exit 2: a file that serves itself, a file of no known shape, a flag its own Outlast cannot take', async () => {
    const selfServing = moduleFile(`import { McpServer } from '@modelcontextprotocol/server';
import { Outlast, serveHttp } from 'outlast/server';
import { SqliteTaskStore } from 'outlast/store/sqlite';
const serverInfo = { name: 'self', version: '1.0.0' };
const outlast = new Outlast({ store: new SqliteTaskStore(${JSON.stringify(join(tempDir(), 't.db'))}) });
const { url } = await serveHttp(outlast, () => new McpServer(serverInfo), { serverInfo, port: 0 });
console.log('serving itself at', url);
`);
    const unknown = moduleFile('export const tools = [];\nexport function start() {}\n');
    const quick = quickStart();
    const cases: Array<[string[], RegExp]> = [
      [['serve', selfServing], /calls serveHttp\(\) itself, so it serves itself: run it with `node \S+`, or drop that call and export `outlast` and `serverInfo`/],
      [['serve', unknown], /exports `start`, `tools`, none of what it needs: outlast serve takes a module that exports `outlast` .* or that default-exports defineServer/],
      [['serve', quick, '--store', 'sqlite:/tmp/x.db', '--lease-ms', '9000'], /makes its own Outlast, so --store, --lease-ms cannot change it: set store, leaseMs in its new Outlast\(\{\.\.\.\}\)/],
      [['serve', join(tempDir(), 'missing.mjs')], /cannot load \S+missing\.mjs: /],
    ];
    for (const [args, re] of cases) {
      const r = runCli([...args, '--port', '0']);
      const { code } = await r.exited;
      assert.equal(code, 2, `${args.join(' ')}: ${r.stderr()}`);
      assert.equal(r.stderr().trimEnd().split('\n').length, 1, `one line: ${r.stderr()}`);
      assert.match(r.stderr(), re);
      assert.doesNotMatch(r.stdout(), /serving itself|listening/, 'nothing was served');
    }
  });

  it('--log-format json: every line from the first is JSON, the start-up lines and a refusal to start included', { timeout: 60_000 }, async () => {
    const run = runCli(['serve', FIXTURES, '--port', '0', '--store', `sqlite:${join(tempDir(), 'tasks.db')}`, '--log-format', 'json', '--dashboard', '--log-level', 'debug']);
    await run.waitFor(/outlast dashboard on/, 30_000);
    run.kill('SIGTERM');
    assert.equal((await run.exited).code, 0, run.stderr());
    const lines = (run.stdout() + run.stderr()).split('\n').filter(Boolean);
    assert.ok(lines.length >= 3, lines.join('\n'));
    for (const l of lines) assert.doesNotThrow(() => JSON.parse(l), `not JSON: ${l}`);
    const ready = run.stdout().split('\n').filter(Boolean).map((l) => JSON.parse(l) as { msg: string; url: string });
    assert.match(ready[0]!.msg, /^outlast listening on http:\/\/127\.0\.0\.1:\d+\/mcp$/);
    assert.equal(ready[0]!.url, ready[0]!.msg.replace('outlast listening on ', ''));
    assert.match(ready[1]!.msg, /^outlast dashboard on http:\S+\/dashboard$/);
    const refused = runCli(['serve', moduleFile('export const x = 1;\n'), '--log-format', 'json', '--port', '0']);
    assert.equal((await refused.exited).code, 2);
    const line = JSON.parse(refused.stderr()) as { level: string; msg: string };
    assert.equal(line.level, 'error');
    assert.match(line.msg, /none of what it needs/);
  });
});
