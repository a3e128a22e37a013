/**
 * Secrets on disk and on the command line (issue 40, finding 5), as another local user would try them: a real
 * `outlast serve` makes its SQLite store, a real `outlast call` its journal, and a second OS user (`nobody`, through
 * `setpriv`) tries to read them; tokens come from `--bearer-file`, `--operator-file` and the environment, and the
 * process's /proc/PID/cmdline, which every local user can read, holds none of them; a secret given as a flag is
 * warned about at start.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, existsSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import Database from 'better-sqlite3';
import { Webhook } from 'standardwebhooks';
import { runCli } from './client-helpers.js';
import { docBlock } from './doc-blocks.js';
import { connectV1 } from './generations.js';
import { BIN, FIXTURES, ROOT, headersFor, rpc, startServer, tempDir, until, type ServerProcess } from './helpers.js';

const DEMO = join(ROOT, 'dist', 'demo', 'server.js');
const NOBODY = ['--reuid=65534', '--regid=65534', '--clear-groups'];

/** Runs `command` as the OS user nobody. */
function asNobody(command: string[]): { status: number | null; stderr: string } {
  const r = spawnSync('setpriv', [...NOBODY, ...command], { encoding: 'utf8' });
  return { status: r.status, stderr: r.stderr };
}

/** A temporary folder every local user may enter and list (as a home or /srv is), with a file they can read in it: the
 *  control that shows `nobody` reaches this far, so a refusal below is the file's own mode speaking. */
function openFolder(): string {
  const dir = tempDir('outlast-security-files-');
  chmodSync(dir, 0o755);
  writeFileSync(join(dir, 'readme.txt'), 'anyone may read this\n', { mode: 0o644 });
  assert.equal(asNobody(['cat', join(dir, 'readme.txt')]).status, 0, 'nobody can read a 0644 file in the folder (the control)');
  return dir;
}

const modeOf = (path: string) => statSync(path).mode & 0o777;

/** Asserts that nobody can read `path` (a file) or list it (a folder). */
function unreadableByNobody(path: string): void {
  const r = asNobody(statSync(path).isDirectory() ? ['ls', path] : ['cat', path]);
  assert.notEqual(r.status, 0, `nobody must not read ${path}`);
  assert.match(r.stderr, /Permission denied/, `${path}: ${r.stderr}`);
}

/** A token file as an operator writes it: a comment, a blank line, entries with spaces around them. */
function tokenFile(dir: string, name: string, lines: string[], mode = 0o600): string {
  const path = join(dir, name);
  writeFileSync(path, `# ${name}: one TOKEN=NAME a line\n\n${lines.map((l) => `  ${l}  `).join('\n')}\n`, { mode });
  chmodSync(path, mode);
  return path;
}

const cmdline = (pid: number) => readFileSync(`/proc/${pid}/cmdline`, 'utf8');

/** The HTTP status of a tools/list with `token` (none: no Authorization header). */
async function listStatus(url: string, token?: string): Promise<number> {
  const res = await fetch(url, { method: 'POST', headers: headersFor('tools/list', {}, token ? { token } : {}), body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list', params: {} }) });
  await res.arrayBuffer();
  return res.status;
}

describe('secrets on disk and on the command line', () => {
  const servers: ServerProcess[] = [];
  const start = async (args: string[], opts: Parameters<typeof startServer>[1] = {}) => {
    const s = await startServer(args, opts);
    servers.push(s);
    return s;
  };
  after(async () => {
    for (const s of servers) await s.stop();
  });

  it('the task store, its WAL and its SHM are created 0600 in a folder created 0700, and another OS user can read none of them', async () => {
    const parent = openFolder();
    const folder = join(parent, 'state', 'outlast');
    const db = join(folder, 'tasks.db');
    const server = await start(['--store', `sqlite:${db}`]);
    const listed = await rpc(server.url, 'tools/list');
    assert.equal(listed.status, 200);
    for (const f of [db, `${db}-wal`, `${db}-shm`]) {
      assert.ok(existsSync(f), `${f} exists while the server runs`);
      unreadableByNobody(f);
      assert.equal(modeOf(f).toString(8), '600', `${f} is 0600`);
    }
    for (const d of [folder, join(parent, 'state')]) {
      assert.equal(modeOf(d).toString(8), '700', `${d}, made by Outlast, is 0700`);
      unreadableByNobody(d);
    }
  });

  it('a store folder other users can read is warned about and left as it is; the store made in it is still 0600 and unreadable to them', async () => {
    const parent = openFolder();
    const db = join(parent, 'tasks.db');
    const server = await start(['--store', `sqlite:${db}`]);
    assert.equal((await rpc(server.url, 'tools/list')).status, 200);
    const warning = await until('the folder is warned about', () => server.stderr().split('\n').find((l) => l.includes(parent) && /other users/.test(l)));
    assert.match(warning, /the folder of the task store .* can be read or written by other users \(mode 755\).*chmod 700/);
    assert.equal(modeOf(parent).toString(8), '755', 'the folder is left as it was');
    for (const f of [db, `${db}-wal`, `${db}-shm`]) {
      unreadableByNobody(f);
      assert.equal(modeOf(f).toString(8), '600', `${f} is 0600`);
    }
  });

  it('the client journal (arguments and results) is created 0600 in a folder created 0700, and another OS user cannot read it', async () => {
    const server = await start(['--store', `sqlite:${join(tempDir(), 'tasks.db')}`]);
    const parent = openFolder();
    const state = join(parent, 'state');
    const call = runCli(['call', server.url, 'sleep', '{"seconds":0}', '--json'], { env: { XDG_STATE_HOME: state, OUTLAST_JOURNAL: '' } });
    assert.equal((await call.exited).code, 0, call.stderr());
    const journal = join(state, 'outlast', 'journal.db');
    const row = new Database(journal, { readonly: true }).prepare('SELECT arguments FROM calls').get() as { arguments: string };
    assert.deepEqual(JSON.parse(row.arguments), { seconds: 0 }, 'the journal holds the call\'s arguments');
    unreadableByNobody(journal);
    assert.equal(modeOf(journal).toString(8), '600');
    for (const d of [join(state, 'outlast'), state]) {
      assert.equal(modeOf(d).toString(8), '700', `${d}, made by Outlast, is 0700`);
      unreadableByNobody(d);
    }
  });

  it('--bearer-file and $OUTLAST_BEARER_TOKENS: their tokens are accepted, others get 401, and no token is in /proc/PID/cmdline', async () => {
    const dir = tempDir();
    const alice = `alice-${randomBytes(12).toString('hex')}`;
    const bob = `bob-${randomBytes(12).toString('hex')}`;
    const carol = `carol-${randomBytes(12).toString('hex')}`;
    const file = tokenFile(dir, 'bearer', [`${alice}=alice`, `${bob}=bob`]);
    const server = await start(['--store', `sqlite:${join(dir, 'tasks.db')}`, '--bearer-file', file], { env: { OUTLAST_BEARER_TOKENS: `${carol}=carol` } });
    for (const token of [alice, bob, carol]) assert.equal((await rpc(server.url, 'tools/list', {}, { token })).status, 200, 'a listed token is accepted');
    assert.equal(await listStatus(server.url), 401, 'no token: 401');
    assert.equal(await listStatus(server.url, 'not-listed-token'), 401, 'another token: 401');
    const line = cmdline(server.pid);
    assert.ok(line.includes('--bearer-file'), 'the command line names the file');
    for (const token of [alice, bob, carol]) assert.ok(!line.includes(token), 'no token is in /proc/PID/cmdline');
    assert.doesNotMatch(server.stderr(), /puts secrets? in this process's command line/, 'nothing to warn about');
    assert.match(server.stderr(), /bearer tokens: 2 from .*bearer, 1 from \$OUTLAST_BEARER_TOKENS/, 'where the tokens came from, counted, never shown');
  });

  it('the token file docs/configuration.md shows is read as written: each of its tokens is accepted', async () => {
    const dir = tempDir();
    const block = docBlock('docs/configuration.md', 'token-file').code;
    const file = join(dir, 'bearer');
    writeFileSync(file, block, { mode: 0o600 });
    const server = await start(['--store', `sqlite:${join(dir, 'tasks.db')}`, '--bearer-file', file]);
    const tokens = block.split('\n').filter((l) => l.trim() && !l.startsWith('#')).map((l) => l.slice(0, l.indexOf('=')));
    assert.ok(tokens.length >= 2, 'the example lists tokens');
    for (const token of tokens) assert.equal((await rpc(server.url, 'tools/list', {}, { token })).status, 200);
    assert.equal(await listStatus(server.url), 401);
  });

  it('--operator-file and $OUTLAST_OPERATOR_READONLY sign operators in to the dashboard, and no token is in /proc/PID/cmdline', async () => {
    const dir = tempDir();
    const anna = `anna-${randomBytes(12).toString('hex')}`;
    const lou = `lou-${randomBytes(12).toString('hex')}`;
    const file = tokenFile(dir, 'operators', [`${anna}=anna`]);
    const server = await start(['--store', `sqlite:${join(dir, 'tasks.db')}`, '--dashboard', '--operator-file', file], { env: { OUTLAST_OPERATOR_READONLY: `${lou}=lou` } });
    const dashboard = server.url.replace(/\/mcp$/, '/dashboard');
    assert.equal((await fetch(dashboard)).status, 401, 'without a token: 401');
    const asAnna = await fetch(dashboard, { headers: { authorization: `Bearer ${anna}` } });
    assert.equal(asAnna.status, 200);
    assert.match(await asAnna.text(), /anna \(may act\)/);
    assert.match(await (await fetch(dashboard, { headers: { authorization: `Bearer ${lou}` } })).text(), /lou \(read-only\)/);
    const line = cmdline(server.pid);
    for (const token of [anna, lou]) assert.ok(!line.includes(token), 'no operator token is in /proc/PID/cmdline');
  });

  it('a secret on the command line is warned about at start, one line each naming the file or environment form; so is a token file others can read', async () => {
    const dir = tempDir();
    const readable = tokenFile(dir, 'bearer-shared', [`shared-token-${randomBytes(6).toString('hex')}=dora`], 0o644);
    const whsec = `whsec_${randomBytes(32).toString('base64')}`;
    const server = await start([
      '--store', `sqlite:${join(dir, 'tasks.db')}`, '--bearer', 'cli-token-1=alice', '--bearer-file', readable, '--dashboard',
      '--operator', 'cli-operator-token=anna', '--operator-readonly', 'cli-viewer-token=lou',
      '--alert-webhook', 'https://hooks.example/outlast', '--alert-webhook-secret', whsec,
      '--push-destination', 'ops=https://hooks.example/push', '--push-secret', whsec,
    ]);
    const warnings = server.stderr().split('\n').filter((l) => / warn /.test(l));
    const about = (flag: string, alternative: RegExp) => {
      const lines = warnings.filter((l) => l.includes(`--${flag} puts`));
      assert.equal(lines.length, 1, `one warning about --${flag}: ${warnings.join('\n')}`);
      assert.match(lines[0]!, /other local users can read \(ps, \/proc\/PID\/cmdline\)/);
      assert.match(lines[0]!, alternative);
    };
    about('bearer', /use --bearer-file PATH or \$OUTLAST_BEARER_TOKENS instead/);
    about('operator', /use --operator-file PATH or \$OUTLAST_OPERATOR instead/);
    about('operator-readonly', /use --operator-readonly-file PATH or \$OUTLAST_OPERATOR_READONLY instead/);
    about('alert-webhook-secret', /use \$OUTLAST_ALERT_WEBHOOK_SECRET instead/);
    about('push-secret', /use \$OUTLAST_PUSH_SECRET instead/);
    assert.ok(warnings.some((l) => l.includes(`--bearer-file ${readable} can be read or written by other users (mode 644): run chmod 600`)), 'the shared token file is warned about');
    assert.ok(!warnings.some((l) => l.includes(whsec) || l.includes('cli-token-1') || l.includes('cli-operator-token')), 'no warning shows a secret');
    // The client says the same of its own flags.
    const call = runCli(['call', server.url, 'sleep', '{"seconds":0}', '--bearer', 'cli-token-1', '--journal', join(dir, 'journal.db')]);
    assert.equal((await call.exited).code, 0, call.stderr());
    assert.match(call.stderr(), /warning: --bearer puts a secret in this process's command line, .* use \$OUTLAST_BEARER instead/);
  });

  it('a token file with a line that is not TOKEN=NAME stops the start with its line number and never shows the line; a missing file is named', () => {
    const dir = tempDir();
    const secretLine = `tok-${randomBytes(8).toString('hex')}`;
    const bad = join(dir, 'bearer');
    writeFileSync(bad, `# callers\ngood-token-1=alice\n${secretLine}\n`, { mode: 0o600 });
    const run = (args: string[]) => spawnSync(process.execPath, [BIN, 'serve', FIXTURES, '--port', '0', '--store', `sqlite:${join(dir, 'tasks.db')}`, ...args], { encoding: 'utf8', cwd: ROOT, timeout: 30_000 });
    const r = run(['--bearer-file', bad]);
    assert.equal(r.status, 2, r.stderr);
    assert.match(r.stderr, /--bearer-file .*bearer: line 3 is not TOKEN=PRINCIPAL \(the line is not shown: it may hold a token\)/);
    assert.ok(!r.stderr.includes(secretLine), 'the line is not shown');
    const missing = run(['--operator-file', join(dir, 'nowhere'), '--dashboard']);
    assert.equal(missing.status, 2);
    assert.match(missing.stderr, /--operator-file .*nowhere: no such file/);
    const env = spawnSync(process.execPath, [BIN, 'serve', FIXTURES, '--port', '0', '--store', `sqlite:${join(dir, 'tasks.db')}`], { encoding: 'utf8', cwd: ROOT, timeout: 30_000, env: { ...process.env, OUTLAST_BEARER_TOKENS: secretLine } });
    assert.equal(env.status, 2);
    assert.match(env.stderr, /\$OUTLAST_BEARER_TOKENS: line 1 is not TOKEN=PRINCIPAL/);
    assert.ok(!env.stderr.includes(secretLine));
  });

  it('$OUTLAST_ALERT_WEBHOOK_SECRET signs the alert webhooks, and the secret is not in /proc/PID/cmdline', async () => {
    const secret = `whsec_${randomBytes(32).toString('base64')}`;
    const deliveries: Array<{ type: string; body: string; headers: Record<string, string> }> = [];
    const receiver = createServer((req, res) => {
      let body = '';
      req.on('data', (c) => (body += c));
      req.on('end', () => {
        deliveries.push({ type: (JSON.parse(body) as { type: string }).type, body, headers: req.headers as Record<string, string> });
        res.writeHead(204).end();
      });
    });
    await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
    try {
      const hook = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
      const server = await start(['--store', `sqlite:${join(tempDir(), 'tasks.db')}`, '--alert-webhook', hook, '--handle-after-ms', '500'], { module: DEMO, env: { OUTLAST_ALERT_WEBHOOK_SECRET: secret } });
      assert.ok(!cmdline(server.pid).includes(secret));
      const { client, close } = await connectV1(server.url);
      try {
        await client.callTool({ name: 'migrate', arguments: { database: 'shop', migration: '0090_env_secret' } });
        const requested = await until('input.requested is delivered', async () => deliveries.find((d) => d.type === 'outlast.input.requested'), 30_000);
        new Webhook(secret).verify(requested.body, requested.headers);
      } finally {
        await close();
      }
    } finally {
      receiver.closeAllConnections();
      receiver.close();
    }
  });
});
