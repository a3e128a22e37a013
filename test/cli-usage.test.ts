/**
 * Usage mistakes on every `outlast` command (the real binary, as a user types it): an unknown flag, a flag without
 * its value, a stray argument each get one line naming it and pointing to `outlast help`, exit code 2, no stack
 * trace; `--help` / `-h` on a command prints that command's usage and exits 0.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { BIN, ROOT, tempDir } from './helpers.js';
import { docBlock } from './doc-blocks.js';

function outlast(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  // A private journal: the client commands must not read or write the user's.
  const child = spawn(process.execPath, [BIN, ...args], {
    cwd: ROOT,
    timeout: 30_000,
    env: { ...process.env, OUTLAST_JOURNAL: join(tempDir(), 'journal.db') },
  });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
  child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('close', (code) => resolve({ code, stdout, stderr }));
  });
}

/** One line on stderr, naming `expected`, pointing to `outlast help`, no stack trace, exit 2, nothing on stdout. */
async function assertUsageLine(args: string[], expected: RegExp): Promise<void> {
  const r = await outlast(args);
  const shown = `outlast ${args.join(' ')} → exit ${r.code}\nstderr: ${r.stderr}\nstdout: ${r.stdout}`;
  assert.equal(r.code, 2, shown);
  const lines = r.stderr.trimEnd().split('\n');
  assert.equal(lines.length, 1, `one line: ${shown}`);
  assert.match(lines[0]!, expected, shown);
  assert.match(lines[0]!, /outlast help/, shown);
  assert.doesNotMatch(r.stderr, /\n\s+at |TypeError|ERR_PARSE_ARGS/, `no stack trace or internal code: ${shown}`);
  assert.equal(r.stdout, '', shown);
}

const COMMANDS: Array<{ command: string; args: string[]; usage: RegExp }> = [
  { command: 'serve', args: ['dist/demo/server.js'], usage: /outlast serve MODULE \[options\][\s\S]*--park-after-ms N/ },
  { command: 'gateway', args: ['--stdio', 'node upstream.js'], usage: /outlast gateway --stdio "CMD ARGS…" \[options\][\s\S]*--call-timeout-ms N[\s\S]*--park-after-ms N/ },
  { command: 'call', args: ['http://127.0.0.1:9/mcp', 'reindex'], usage: /outlast call URL TOOL \[ARGS_JSON\]/ },
  { command: 'tasks', args: [], usage: /outlast tasks \[--journal PATH\]/ },
  { command: 'resume', args: [], usage: /outlast resume \[TASK_ID\]/ },
  { command: 'cancel', args: ['some-task-id'], usage: /outlast cancel TASK_ID/ },
  { command: 'tools', args: ['http://127.0.0.1:9/mcp'], usage: /outlast tools URL/ },
  { command: 'answer', args: ['some-task-id', '{}'], usage: /outlast answer TASK_ID ANSWERS_JSON/ },
  { command: 'dashboard', args: ['--store', 'sqlite:/nonexistent/x.db'], usage: /outlast dashboard --store URL/ },
];

// Concurrent: every case is processes of its own that read nothing shared (each has a private journal).
describe('outlast CLI: usage mistakes and --help on every command', { concurrency: 4 }, () => {
  for (const { command, args, usage } of COMMANDS) {
    it(`${command}: an unknown flag is one line naming it, exit 2`, async () => {
      await assertUsageLine([command, ...args, '--no-such-flag'], new RegExp(`^outlast ${command}: unknown option --no-such-flag;`));
      // The same with a value attached, as users write it.
      await assertUsageLine([command, ...args, '--colour=red'], new RegExp(`^outlast ${command}: unknown option --colour;`));
    });

    it(`${command}: --help and -h print its usage on stdout, exit 0`, async () => {
      for (const flag of ['--help', '-h']) {
        const r = await outlast([command, ...args, flag]);
        assert.equal(r.code, 0, `${command} ${flag}: ${r.stderr}`);
        assert.match(r.stdout, usage);
        assert.equal(r.stderr, '');
      }
    });
  }

  it('serve: a flag without its value, a value for a switch, and an extra argument are named', async () => {
    await assertUsageLine(['serve', 'dist/demo/server.js', '--port'], /^outlast serve: --port needs a value;/);
    await assertUsageLine(['serve', 'dist/demo/server.js', '--stdio=yes'], /^outlast serve: --stdio takes no value;/);
    await assertUsageLine(['serve', 'dist/demo/server.js', 'extra.js'], /^outlast serve: unexpected argument "extra.js";/);
  });

  it('dashboard takes no arguments; call names a flag missing its value', async () => {
    await assertUsageLine(['dashboard', '--store', 'sqlite:/x.db', 'extra'], /^outlast dashboard: unexpected argument "extra";/);
    await assertUsageLine(['call', 'http://127.0.0.1:9/mcp', 'reindex', '--bearer'], /^outlast call: --bearer needs a value;/);
  });

  it('docs/real-clients.md: the documented command prints the documented line, exit 2', async () => {
    const command = docBlock('docs/real-clients.md', 'cli-unknown-flag').code.trim();
    const output = docBlock('docs/real-clients.md', 'cli-unknown-flag-output').code;
    const [bin, ...args] = command.split(/\s+/);
    assert.equal(bin, 'outlast');
    const r = await outlast(args);
    assert.equal(r.code, 2);
    assert.equal(r.stderr, output);
  });

  it('gateway: no upstream, two upstreams, or a malformed one are named', async () => {
    await assertUsageLine(['gateway'], /^outlast gateway: one upstream is needed: --stdio "CMD ARGS…" or --http URL/);
    await assertUsageLine(['gateway', '--stdio', 'node a.js', '--http', 'http://127.0.0.1:9/mcp'], /^outlast gateway: one upstream is needed/);
    await assertUsageLine(['gateway', '--http', 'ftp://example.com/mcp'], /^outlast gateway: --http must be an http:\/\/ or https:\/\/ URL, got "ftp:\/\/example.com\/mcp"/);
    await assertUsageLine(['gateway', '--stdio', 'node a.js', '--env', 'NOEQUALS'], /^outlast gateway: --env takes NAME=VALUE \(a variable name, then "="\); got "NOEQUALS"/);
    // "CMD ARGS" is read as `outlast call --stdio` reads it: quotes, and no shell behind it.
    await assertUsageLine(['gateway', '--stdio', 'node "a.js'], /^outlast gateway: --stdio: the double quote in "node \"a.js" is never closed/);
    await assertUsageLine(['gateway', '--stdio', 'node a.js | tee log'], /^outlast gateway: --stdio: "\|" needs a shell, and none runs the command/);
    await assertUsageLine(['gateway', '--http', 'http://127.0.0.1:9/mcp', '--upstream-oauth-client-id', 'me'], /^outlast gateway: --upstream-oauth-client-id needs --upstream-oauth-issuer URL/);
    await assertUsageLine(['gateway', '--stdio', 'node a.js', '--call-timeout-ms', 'soon'], /^outlast gateway: --call-timeout-ms must be an integer >= 1, got "soon"/);
  });

  it('gateway --config: a file that cannot be read, and flags that do not go with it, are one line, exit 2', async () => {
    // Every other mistake in the file takes the same path (test/gateway-many.test.ts reads them in-process).
    const dir = tempDir();
    const servers = join(dir, 's.json');
    writeFileSync(servers, JSON.stringify({ mcpServers: { a: { command: 'node' }, b: { url: 'http://127.0.0.1:9/mcp' } } }));
    await assertUsageLine(['gateway', '--config', join(dir, 'nope.json')], /^outlast gateway: --config: cannot read ".*nope\.json" \(ENOENT\)/);
    await assertUsageLine(['gateway', '--config', servers, '--env', 'K=V'], /^outlast gateway: --env, --cwd, --header, --name and --upstream-oauth-\* are for --stdio or --http/);
    await assertUsageLine(['gateway', '--config', servers, '--retry-safe', 'echo'], /^outlast gateway: --retry-safe "echo" is no upstream's tool: with several upstreams a tool is NAME__TOOL \(a__…, b__…\)/);
  });

  it('bare outlast is a usage mistake: the commands on stderr, exit 2', async () => {
    const r = await outlast([]);
    assert.equal(r.code, 2, r.stderr);
    assert.equal(r.stdout, '');
    assert.match(r.stderr, /^Usage: outlast COMMAND \[options\]/);
    for (const c of ['serve MODULE', 'gateway', 'call URL TOOL', 'tools URL', 'tasks', 'resume', 'cancel TASK_ID', 'logs TASK_ID', 'answer TASK_ID']) assert.ok(r.stderr.includes(`\n  ${c}`), c);
  });

  it('an unknown command is one line too; outlast help prints everything, exit 0', async () => {
    await assertUsageLine(['serv'], /^outlast: unknown command "serv"; run outlast help/);
    const r = await outlast(['help']);
    assert.equal(r.code, 0);
    for (const c of ['outlast serve MODULE', 'outlast gateway --stdio', 'outlast dashboard --store', 'outlast call URL TOOL', 'outlast tools URL', 'outlast resume', 'outlast cancel TASK_ID', 'outlast answer TASK_ID']) assert.ok(r.stdout.includes(c), c);
  });
});
