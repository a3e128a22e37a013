/**
 * `outlast tools`, as a user runs it: behind `outlast gateway --config` of two real stdio servers nobody here wrote
 * (`@modelcontextprotocol/server-everything`, `@modelcontextprotocol/server-filesystem`), it lists every tool with its
 * task support and the upstream it comes from, each line within 100 columns; against `outlast serve` over stdio, the
 * policy of each Outlast tool. `outlast call URL nosuch` names the closest tools and how to list them.
 */
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { BIN, FIXTURES, ROOT, startServer, tempDir, waitForTask, type ServerProcess } from './helpers.js';
import { runCli } from './client-helpers.js';

const EVERYTHING = join(ROOT, 'node_modules', '@modelcontextprotocol', 'server-everything', 'dist', 'index.js');
const FILESYSTEM = join(ROOT, 'node_modules', '@modelcontextprotocol', 'server-filesystem', 'dist', 'index.js');

/** The table's rows by tool name: its cells split on runs of two or more spaces. */
function rowsOf(stdout: string): Map<string, string[]> {
  const [header, ...lines] = stdout.trimEnd().split('\n');
  assert.match(header!, /^TOOL\s+TASKS\s+(UPSTREAM\s+)?DESCRIPTION$/);
  return new Map(lines.map((l) => [l.split(/\s{2,}/)[0]!, l.split(/\s{2,}/)]));
}

describe('outlast tools behind a gateway of two real stdio servers', () => {
  let gw: ServerProcess;
  const dir = tempDir('outlast-cli-tools-');
  before(async () => {
    const config = join(dir, 'mcp.json');
    writeFileSync(config, JSON.stringify({ mcpServers: { everything: { command: process.execPath, args: [EVERYTHING, 'stdio'] }, files: { command: process.execPath, args: [FILESYSTEM, dir] } } }));
    gw = await startServer(['--store', `sqlite:${join(dir, 'tasks.db')}`], { command: ['gateway', '--config', config] });
  });
  after(() => gw?.stop());

  it('lists every tool with its task support and its upstream, each line within 100 columns', { timeout: 60_000 }, async () => {
    const journal = join(tempDir(), 'journal.db');
    // server-everything adds a tool by list_changed after it starts: wait until it is listed.
    let out = '';
    for (let i = 0; i < 100 && !out.includes('everything__trigger-elicitation-request'); i++) {
      const r = runCli(['tools', gw.url, '--journal', journal]);
      assert.equal((await r.exited).code, 0, r.stderr());
      out = r.stdout();
      if (!out.includes('everything__trigger-elicitation-request')) await new Promise((res) => setTimeout(res, 100));
    }
    for (const line of out.trimEnd().split('\n')) assert.ok([...line].length <= 100, `${[...line].length} columns: ${line}`);
    const rows = rowsOf(out);
    assert.deepEqual(rows.get('everything__echo')?.slice(0, 3), ['everything__echo', 'auto', 'everything']);
    assert.match(rows.get('everything__echo')![3]!, /^Echoes back the input/);
    assert.deepEqual(rows.get('files__read_text_file')?.slice(0, 3), ['files__read_text_file', 'auto', 'files']);
    assert.deepEqual(rows.get('files__list_directory')?.slice(0, 3), ['files__list_directory', 'auto', 'files']);
    assert.deepEqual(rows.get('outlast_task_status')?.slice(0, 3), ['outlast_task_status', '-', '-'], "the gateway's own handle tools come from no upstream");

    const json = runCli(['tools', gw.url, '--json', '--journal', journal]);
    assert.equal((await json.exited).code, 0, json.stderr());
    const listed = JSON.parse(json.stdout()) as Array<{ name: string; _meta?: Record<string, unknown> }>;
    assert.equal(listed.find((t) => t.name === 'files__read_text_file')?._meta?.['outlast/upstream'], 'files');
  });

  it('outlast call of an unknown tool names the closest ones and how to list them all', async () => {
    const journal = join(tempDir(), 'journal.db');
    const r = runCli(['call', gw.url, 'read_text_file', '{}', '--journal', journal]);
    assert.equal((await r.exited).code, 1);
    assert.match(r.stderr(), new RegExp(`Tool read_text_file not found\\. The closest: files__read_text_file[,;].*list them all with: outlast tools ${gw.url.replace(/[.]/g, '\\.')}`));
    const typo = runCli(['call', gw.url, 'everything__ecko', '{}', '--journal', journal]);
    assert.equal((await typo.exited).code, 1);
    assert.match(typo.stderr(), /The closest: everything__echo\b/);
    const none = runCli(['call', gw.url, 'zzzzzzzzzz', '{}', '--journal', journal]);
    assert.equal((await none.exited).code, 1);
    assert.match(none.stderr(), /Tool zzzzzzzzzz not found; list the tools with: outlast tools /);
  });
});

describe('what a server sends is shown as text', () => {
  it('outlast tools and outlast tasks show no terminal escape, carriage return or bell a server sent', { timeout: 60_000 }, async () => {
    const srv = await startServer([], { module: join(ROOT, 'dist', 'test', 'escapes-module.js'), env: { OUTLAST_TEST_DB: join(tempDir(), 'tasks.db') } });
    try {
      const journal = join(tempDir(), 'journal.db');
      const tools = runCli(['tools', srv.url, '--journal', journal]);
      assert.equal((await tools.exited).code, 0, tools.stderr());
      const row = tools.stdout().split('\n').find((l) => l.startsWith('hostile'));
      assert.equal(row, 'hostile  always  Looks red OVERWRITTEN second line .');
      const call = runCli(['call', srv.url, 'hostile', '{}', '--journal', journal, '--detach']);
      assert.equal((await call.exited).code, 0, call.stderr());
      const taskId = call.stdout().trim();
      await waitForTask(srv.url, taskId, (t) => typeof t.statusMessage === 'string');
      const list = runCli(['tasks', '--journal', journal]);
      assert.equal((await list.exited).code, 0, list.stderr());
      assert.match(list.stdout(), new RegExp(`${taskId}\\s+working\\s+hostile\\s.*Looks red OVERWRITTEN`));
      for (const out of [tools.stdout(), list.stdout()]) assert.doesNotMatch(out, /[\x00-\x09\x0b-\x1f\x7f]/, JSON.stringify(out));
    } finally {
      await srv.stop();
    }
  });
});

describe('outlast tools --stdio', () => {
  it("lists an Outlast server's tools with each one's policy; usage mistakes exit 2", { timeout: 60_000 }, async () => {
    const db = join(tempDir(), 'tasks.db');
    const r = runCli(['tools', '--stdio', `${process.execPath} ${BIN} serve ${FIXTURES} --stdio --store sqlite:${db}`, '--journal', join(tempDir(), 'j.db')]);
    assert.equal((await r.exited).code, 0, r.stderr());
    const rows = rowsOf(r.stdout());
    assert.deepEqual(rows.get('sleep')?.slice(0, 2), ['sleep', 'auto']);
    assert.deepEqual(rows.get('steps')?.slice(0, 2), ['steps', 'always'], 'a durable tool of policy always');
    for (const line of r.stdout().trimEnd().split('\n')) assert.ok([...line].length <= 100, line);

    for (const [args, re] of [
      [['tools'], /usage: outlast tools URL/],
      [['tools', 'http://127.0.0.1:9/mcp', 'extra'], /unexpected argument "extra"/],
      [['tools', 'http://127.0.0.1:9/mcp', '--detach'], /--detach is not an option of outlast tools/],
    ] as Array<[string[], RegExp]>) {
      const bad = runCli(args);
      assert.equal((await bad.exited).code, 2, `${args.join(' ')}: ${bad.stderr()}`);
      assert.match(bad.stderr(), re);
    }
  });
});
