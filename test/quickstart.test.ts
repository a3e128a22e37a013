/**
 * The README's install and quick start, done as a new user would: a fresh `npm init -y` app beside a clone of
 * Outlast (here a link to this checkout), the README's install commands as written (pack, then install the tarball),
 * server.mjs saved from the README and served with the README's `npx outlast serve server.mjs`, its tools listed with
 * the README's `outlast tools`, then the README's `outlast call`, whose output must be the README's. The same text as
 * `server.mts` type-checks and is served through `npx tsx` as the README says. docs/clients-and-cli.md's smallest TaskClient program runs there too. The one change to the README's text: the port (PORT=free port, the URL printed instead of 3000).
 * better-sqlite3's install gets its prebuilt binary as a user's does from GitHub, but from a local prebuild
 * (prebuild-install's `local_prebuilds`) made of this checkout's own build: this machine reaches no GitHub, and a
 * second 2-minute compile would test only what `npm ci` here already did.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, rmSync, symlinkSync, writeFileSync, readFileSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { execFileSync } from 'node:child_process';
import { ROOT, tempDir, freePort } from './helpers.js';
import { docBlock } from './doc-blocks.js';

const README = 'README.md';

/** A folder holding the prebuilt better-sqlite3 for this Node, named as prebuild-install asks for it (from GitHub). */
function localPrebuilds(dir: string): string {
  const module = join(ROOT, 'node_modules', 'better-sqlite3');
  const { version } = JSON.parse(readFileSync(join(module, 'package.json'), 'utf8')) as { version: string };
  const out = join(dir, 'prebuilds');
  mkdirSync(out);
  const name = `better-sqlite3-v${version}-node-v${process.versions.modules}-${process.platform}-${process.arch}.tar.gz`;
  execFileSync('tar', ['-czf', join(out, name), '-C', module, 'build/Release/better_sqlite3.node']);
  return out;
}

/** The environment of a new terminal: none of the npm_* variables `npm test` runs under. */
function userEnv(extra: Record<string, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!/^npm_|^INIT_CWD$/i.test(k)) env[k] = v;
  return { ...env, ...extra };
}

/** Runs a shell snippet in `cwd`, stdout and stderr as one stream (the order a terminal shows). */
function sh(script: string, cwd: string, env: NodeJS.ProcessEnv): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve, reject) => {
    const p = spawn('bash', ['-euo', 'pipefail', '-c', `exec 2>&1\n${script}`], { cwd, env, stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    p.stdout.on('data', (d) => (out += d));
    p.once('error', reject);
    p.once('close', (code) => resolve({ code, out }));
  });
}

/** Starts a server command in its own process group; resolves with the URL its first line names. */
function startServer(cmd: string[], cwd: string, env: NodeJS.ProcessEnv, ready = /^outlast listening on (http:\/\/\S+)$/m): Promise<{ proc: ChildProcess; line: string; url: string }> {
  const proc = spawn(cmd[0]!, cmd.slice(1), { cwd, env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  return new Promise((resolve, reject) => {
    let out = '';
    let err = '';
    proc.stderr!.on('data', (d) => (err += d));
    proc.stdout!.on('data', (d) => {
      out += d;
      const m = ready.exec(out);
      if (m) resolve({ proc, line: m[0], url: m[1]! });
    });
    proc.once('exit', (c) => reject(new Error(`${cmd.join(' ')} exited ${c} before printing its URL:\n${out}${err}`)));
  });
}

/** The README's `outlast tools` against `url`: the quick start's tool, with its task support. */
async function toolsAsTheReadmeSays(app: string, url: string, env: NodeJS.ProcessEnv): Promise<void> {
  const tools = docBlock(README, 'tools').code.replaceAll('127.0.0.1:3000', `127.0.0.1:${new URL(url).port}`);
  const { code, out } = await sh(tools, app, env);
  assert.equal(code, 0, out);
  assert.match(out, /^TOOL\s+TASKS\s+DESCRIPTION\n/);
  assert.match(out, /^reindex\s+auto\b/m, out);
  assert.match(out, /^outlast_task_status\s+-\s/m, 'the handle tools (handles: true)');
}

function stopGroup(proc: ChildProcess | undefined): void {
  if (!proc?.pid || proc.exitCode !== null || proc.signalCode !== null) return;
  try {
    process.kill(-proc.pid, 'SIGKILL'); // npx starts node under it: the whole group
  } catch {
    /* gone */
  }
}

/** The README's expected output with task ids and the port made comparable. */
const normalise = (text: string, port: string) =>
  text.replaceAll(`127.0.0.1:${port}`, '127.0.0.1:3000').replace(/[A-Za-z0-9_-]{22}/g, 'TASKID').trimEnd().split('\n');

/** The README's `outlast call` against `url`; its output must be the README's (status lines may coalesce). */
async function callAsTheReadmeSays(app: string, url: string, env: NodeJS.ProcessEnv): Promise<void> {
  const port = new URL(url).port;
  const call = docBlock(README, 'call').code.replaceAll('127.0.0.1:3000', `127.0.0.1:${port}`);
  const { code, out } = await sh(call, app, env);
  assert.equal(code, 0, out);
  const got = normalise(out, port);
  const want = normalise(docBlock(README, 'call-output').code, '3000');
  // Status lines (stderr) and output lines (stdout) interleave as they arrive: the first two and the last line are fixed.
  assert.deepEqual(got.slice(0, 2), want.slice(0, 2), out);
  assert.deepEqual(got.slice(-1), want.slice(-1), out);
  const output = (lines: string[]) => lines.filter((l) => l.startsWith('indexed batch '));
  assert.deepEqual(output(got), output(want), `the task's output, each line once, in order:\n${out}`);
  for (const line of got) assert.ok(want.includes(line), `a line the README does not show: ${line}\n${out}`);
  assert.equal(got.filter((l) => l === 'Reindexed docs').length, 1);
}

describe("the README's install and quick start, in a fresh app", () => {
  const dir = tempDir('outlast-quickstart-');
  const app = join(dir, 'app');
  const tarball = join(ROOT, 'outlast-0.1.0.tgz');
  const env = userEnv({ OUTLAST_JOURNAL: join(dir, 'journal.db') });
  const procs: ChildProcess[] = [];

  before(async () => {
    symlinkSync(ROOT, join(dir, 'outlast')); // "a clone of this repository beside your app folder"
    mkdirSync(app);
    const init = await sh('npm init -y', app, env);
    assert.equal(init.code, 0, init.out);
  });
  after(() => {
    for (const p of procs) stopGroup(p);
    rmSync(tarball, { force: true });
  });

  it('installs with the commands the README gives', { timeout: 600_000 }, async () => {
    // Only the install looks for the prebuild (npm warns of the setting on every command that sees it).
    const { code, out } = await sh(docBlock(README, 'install').code, app, { ...env, npm_config_better_sqlite3_local_prebuilds: localPrebuilds(dir) });
    assert.equal(code, 0, out);
    assert.doesNotMatch(out, /better-sqlite3@[^ ]+ \(install:/, 'npm warns that better-sqlite3 is not approved');
    const pkg = JSON.parse(readFileSync(join(app, 'package.json'), 'utf8'));
    assert.equal(pkg.type, 'commonjs', 'npm init -y makes a CommonJS package, which the quick start must survive');
    assert.ok(existsSync(join(app, 'node_modules', 'better-sqlite3', 'build', 'Release', 'better_sqlite3.node')), 'better-sqlite3 was installed with its binary');
  });

  it('`npx outlast serve server.mjs` prints its URL, lists its tools and answers `outlast call` with a task and its result', { timeout: 120_000 }, async () => {
    writeFileSync(join(app, 'server.mjs'), docBlock(README, 'quickstart').code);
    const port = String(await freePort());
    const serve = docBlock(README, 'serve').code.trim();
    assert.equal(serve, 'npx outlast serve server.mjs');
    const srv = await startServer(serve.split(' '), app, { ...env, PORT: port });
    procs.push(srv.proc);
    assert.equal(srv.line, `outlast listening on http://127.0.0.1:${port}/mcp`);
    assert.match(readFileSync(join(ROOT, README), 'utf8'), /It prints `outlast listening on http:\/\/127\.0\.0\.1:3000\/mcp`/);
    await toolsAsTheReadmeSays(app, srv.url, env);
    await callAsTheReadmeSays(app, srv.url, env);
    assert.ok(existsSync(join(app, '.outlast', 'tasks.db')), 'the tasks are in the app folder');
    // docs/clients-and-cli.md's smallest TaskClient program, beside the quick start as that page says.
    writeFileSync(join(app, 'client.mjs'), docBlock('docs/clients-and-cli.md', 'client').code.replaceAll('127.0.0.1:3000', `127.0.0.1:${port}`));
    const client = await sh('node client.mjs', app, env);
    assert.equal(client.code, 0, client.out);
    assert.equal(client.out, 'Reindexed docs\n');
    assert.ok(existsSync(join(app, '.outlast', 'client.db')), 'the journal is where the program says');
    stopGroup(srv.proc);

    // docs/server-authors.md: the same module served from code of one's own, with serveHttp.
    writeFileSync(join(app, 'run.mjs'), docBlock('docs/server-authors.md', 'serve-http').code);
    const own = await startServer([process.execPath, 'run.mjs'], app, { ...env, PORT: String(await freePort()) }, /^MCP server with durable tasks at (http:\/\/\S+)$/m);
    procs.push(own.proc);
    await callAsTheReadmeSays(app, own.url, env);
    stopGroup(own.proc);
  });

  it('the same text is TypeScript: it type-checks (strict) and is served through `npx --yes tsx`', { timeout: 300_000 }, async () => {
    writeFileSync(join(app, 'server.mts'), docBlock(README, 'quickstart').code);
    const command = 'npx --yes tsx node_modules/outlast/bin/outlast.js serve server.mts';
    assert.ok(readFileSync(join(ROOT, README), 'utf8').replace(/\s+/g, ' ').includes(`save it as \`server.mts\` and serve it with \`${command}\``), 'the README says so');
    const tsc = join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
    const types = join(ROOT, 'node_modules', '@types');
    const check = await sh(
      `node ${tsc} --noEmit --strict --skipLibCheck --module nodenext --moduleResolution nodenext --target es2022 --typeRoots ${types} --types node server.mts`,
      app,
      env,
    );
    assert.equal(check.code, 0, check.out);
    const port = String(await freePort());
    const srv = await startServer(command.split(' '), app, { ...env, PORT: port });
    procs.push(srv.proc);
    await callAsTheReadmeSays(app, srv.url, env);
    stopGroup(srv.proc);
  });
});
