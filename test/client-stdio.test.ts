/**
 * TaskClient and the CLI over stdio: the fixture server started as a real child process
 * (`outlast serve dist/fixtures/server.js --stdio --store sqlite:FILE`), driven through a task, a question answered late
 * (after its wait is parked), a client killed mid-task and `outlast resume` starting the server again; and bad input
 * (a command that cannot start, a server that exits at once, bad arguments): one clear line, an exit code, and no
 * process left behind.
 */
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import Database from 'better-sqlite3';
import { TaskClient } from '../src/client/index.js';
import { TransportError } from '../src/client/errors.js';
import { Journal } from '../src/client/journal.js';
import { commandLine } from '../src/client/stdio-process.js';
import { parseStdioTarget } from '../src/client/stdio-transport.js';
import { BIN, FIXTURES, ROOT, alive, sleep, tempDir, until } from './helpers.js';
import { runCli, serverTaskCount, type CliRun } from './client-helpers.js';
import { docBlock } from './doc-blocks.js';
import { splitCommandLine } from '../src/cli/stdio-options.js';

/** The fixture server's command line over stdio on a fresh SQLite file (quick parking and polling). */
function fixtureServer(dir = tempDir('outlast-stdio-')): { args: string[]; line: string; db: string } {
  const db = join(dir, 'tasks.db');
  const args = [BIN, 'serve', FIXTURES, '--stdio', '--store', `sqlite:${db}`, '--park-after-ms', '300', '--poll-interval-ms', '200'];
  return { args, line: commandLine(process.execPath, args), db };
}

/** The processes a CLI run started (its children). */
function childrenOf(run: CliRun): number[] {
  try {
    return execFileSync('pgrep', ['-P', String(run.proc.pid)], { encoding: 'utf8' }).split('\n').filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

/** Processes whose command line holds `marker` (a path unique to one test). */
function processesWith(marker: string): number[] {
  try {
    return execFileSync('pgrep', ['-f', marker], { encoding: 'utf8' }).split('\n').filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

function taskRow(db: string, taskId: string): { status: string; parked_at: number | null } | undefined {
  const d = new Database(db, { readonly: true, fileMustExist: true });
  try {
    return d.prepare('SELECT status, parked_at FROM tasks WHERE task_id = ?').get(taskId) as { status: string; parked_at: number | null } | undefined;
  } finally {
    d.close();
  }
}

/** Every test starts its own servers on its own files, so they may run side by side (most of their time is waiting);
 *  two at a time within a group, on a 2-core machine. */
const parallel = { concurrency: true };
const pairs = { concurrency: 2 };

/** The lines the CLI wrote as its error (`outlast: …`). */
const errorLines = (run: CliRun) => run.stderr().split('\n').filter((l) => l.startsWith('outlast:'));

describe('over stdio', parallel, () => {
describe('TaskClient over stdio', () => {
  test('a question answered late, after its wait is parked: the result, the stderr, the journal (no env), the server stopped on close', async () => {
    const server = fixtureServer();
    const stderr: string[] = [];
    let asked: { taskId: string | undefined; message: unknown } | undefined;
    const client = new TaskClient({
      stdio: { command: process.execPath, args: server.args, cwd: ROOT, env: { OUTLAST_TEST_SECRET: 's3cr3t-never-journaled' }, stderr: (l) => stderr.push(l) },
      journal: join(tempDir(), 'journal.db'),
      elicitation: async (params, ctx) => {
        asked = { taskId: ctx.taskId, message: params.message };
        // A person: answers once nothing holds the wait any more (parked in the store).
        await until('the question is parked', () => taskRow(server.db, ctx.taskId!)?.parked_at != null, 10_000);
        return { action: 'accept', content: { answer: 'ship it' } };
      },
    });
    const call = await client.start('park', { message: 'Ship the release?', sleepSeconds: 0 });
    const pid = (client.dispatcher as unknown as { channel: { pid: number } }).channel.pid;
    assert.ok(call.taskId, 'park always runs as a task');
    const result = await call.result();
    assert.match(String(result.content?.[0]?.text), /^The answer is: ship it \(prepared in \d+/);
    assert.deepEqual(asked, { taskId: call.taskId, message: 'Ship the release?' });
    assert.ok(stderr.some((l) => /serving outlast-fixtures on stdio/.test(l)), `the server's stderr reaches the callback: ${stderr.join('\n')}`);

    const [entry] = client.journal.list();
    assert.equal(entry!.taskId, call.taskId);
    assert.deepEqual(parseStdioTarget(entry!.serverUrl), { command: process.execPath, args: server.args, cwd: ROOT });
    assert.doesNotMatch(JSON.stringify(client.journal.list()), /s3cr3t/, 'the environment is not journaled');
    assert.equal(client.url, entry!.serverUrl);

    assert.ok(alive(pid));
    await client.close();
    assert.equal(alive(pid), false, 'close() stops the server process');
  });

  test('close() kills a server that ignores both its closed stdin and SIGTERM', async () => {
    // Not an MCP server at all: it never answers, never exits on its own, and shrugs off SIGTERM.
    const client = new TaskClient({ stdio: { command: process.execPath, args: ['-e', 'process.on("SIGTERM", () => {}); setInterval(() => {}, 1000)'], stderr: 'ignore' }, requestTimeoutMs: 300, retry: { attempts: 1 } });
    await assert.rejects(client.listTools(), /tools\/list: no answer within 300 ms/);
    const pid = (client.dispatcher as unknown as { channel: { pid: number } }).channel.pid;
    assert.ok(alive(pid));
    await client.close();
    assert.equal(alive(pid), false, 'killed (SIGKILL) after the grace periods');
  });

  test('what a server writes on stdout that is not JSON-RPC: a banner is shown marked and skipped, and the error of a server that exits quotes it', async () => {
    const server = fixtureServer();
    const stderr: string[] = [];
    // The fixture server behind a shell that greets on stdout first, as some servers do.
    const greeting = { command: 'sh', args: ['-c', 'echo "Welcome, this server greets on stdout"; exec "$0" "$@"', process.execPath, ...server.args], cwd: ROOT };
    const client = new TaskClient({ stdio: { ...greeting, stderr: (l) => stderr.push(l) } });
    try {
      const { tools } = await client.listTools();
      assert.ok(tools.some((t) => t.name === 'sleep'), 'the answer after the banner is read');
      assert.ok(stderr.includes('(on stdout, not JSON-RPC) Welcome, this server greets on stdout'), stderr.join('\n'));
    } finally {
      await client.close();
    }
    const usage = new TaskClient({ stdio: { command: process.execPath, args: ['-e', 'console.log("usage: server --port N"); process.exit(4)'], stderr: 'ignore' } });
    try {
      await assert.rejects(usage.listTools(), (e: Error) => {
        assert.ok(e instanceof TransportError, String(e));
        assert.match(e.message, /The stdio server ".*" exited with code 4; it wrote nothing on stderr; on stdout, not JSON-RPC: "usage: server --port N"/);
        return true;
      });
    } finally {
      await usage.close();
    }
  });

  test('a server killed mid-task fails the call at once with the signal and its last stderr line, never a hang', async () => {
    const server = fixtureServer();
    const client = new TaskClient({ stdio: { command: process.execPath, args: server.args, cwd: ROOT, stderr: 'ignore' } });
    try {
      const call = await client.start('sleep', { seconds: 30 });
      const pid = (client.dispatcher as unknown as { channel: { pid: number } }).channel.pid;
      process.kill(pid, 'SIGKILL');
      const started = Date.now();
      await assert.rejects(call.result(), (e: Error) => {
        assert.ok(e instanceof TransportError, String(e));
        assert.match(e.message, /The stdio server ".*bin\/outlast\.js serve .*" was killed by SIGKILL; its last stderr lines: .*serving outlast-fixtures on stdio/);
        assert.doesNotMatch(e.message, /\n/);
        return true;
      });
      assert.ok(Date.now() - started < 3000, 'the failure comes with the exit, not after retries or a timeout');
      // The journal keeps the task: a later resume (which starts the server again) can still reach it.
      assert.equal(client.journal.find(call.taskId!)[0]?.state, 'working');
    } finally {
      await client.close();
    }
  });
});

describe('task output over stdio (tasks/stream on the stdio server)', () => {
  test('TaskClient reads output live, stops a stream, and continues after the last seq it had; the CLI prints it and `outlast logs` reads it from a new server process', async () => {
    const server = fixtureServer();
    const journal = join(tempDir(), 'journal.db');
    const client = new TaskClient({ stdio: { command: process.execPath, args: server.args, cwd: ROOT, stderr: 'ignore' }, journal });
    try {
      const call = await client.start('emit_output', { count: 5, intervalMs: 400 }); // a task: longer than the inline budget
      const firstTwo: number[] = [];
      for await (const e of client.output(call.taskId!)) {
        firstTwo.push(e.seq);
        if (firstTwo.length === 2) break; // closes the stream: notifications/cancelled to the server
      }
      const rest: string[] = [];
      for await (const e of client.output(call.taskId!, { after: 2 })) rest.push(`${e.seq}:${(e.data as { text: string }).text}`);
      assert.deepEqual(firstTwo, [1, 2]);
      assert.deepEqual(rest, ['3:line 3', '4:line 4', '5:line 5']);
      assert.deepEqual((await call.result()).content, [{ type: 'text', text: 'emitted 5' }]);
    } finally {
      await client.close();
    }

    const cli = runCli(['call', '--stdio', server.line, 'emit_output', '{"count": 3, "intervalMs": 700}', '--journal', journal]);
    assert.equal((await cli.exited).code, 0, cli.stderr());
    assert.equal(cli.stdout(), 'line 1\nline 2\nline 3\nemitted 3\n');
    const [, taskId] = /task (\S+) created/.exec(cli.stderr())!;
    const logs = runCli(['logs', taskId!, '--after', '1', '--journal', journal]);
    assert.equal((await logs.exited).code, 0, logs.stderr());
    assert.equal(logs.stdout(), 'line 2\nline 3\n');
    assert.deepEqual(processesWith(server.db), [], 'no server left running');
  });
});

describe('outlast call --stdio / resume', pairs, () => {
  test('a CLI killed mid-task: `outlast resume` starts the server again and gets the result from its store, without running the tool twice', async () => {
    const server = fixtureServer();
    const journal = join(tempDir(), 'journal.db');
    // 6 s: still working through both listings below on a loaded machine (the table lists unfinished calls only).
    const first = runCli(['call', '--stdio', server.line, 'sleep', '{"seconds": 6}', '--journal', journal, '--env', 'OUTLAST_TEST_SECRET=s3cr3t-env']);
    const [, taskId] = await first.waitFor(/task (\S+) created/, 30_000);
    const [firstServer] = childrenOf(first);
    assert.ok(firstServer, 'the CLI started the server');
    first.kill('SIGKILL');
    assert.equal((await first.exited).signal, 'SIGKILL');

    const list = runCli(['tasks', '--journal', journal, '--json']);
    assert.equal((await list.exited).code, 0);
    const [entry] = JSON.parse(list.stdout());
    assert.equal(entry.taskId, taskId);
    assert.equal(entry.state, 'working');
    assert.deepEqual(parseStdioTarget(entry.serverUrl), { command: process.execPath, args: server.args, cwd: ROOT });
    assert.doesNotMatch(list.stdout(), /s3cr3t/);
    const table = runCli(['tasks', '--journal', journal]);
    assert.equal((await table.exited).code, 0);
    // The table names the server short (its command with paths as file names), within 100 columns; --json has it all.
    assert.ok(table.stdout().includes(`${taskId}  working  sleep  `) && table.stdout().includes('stdio: node outlast.js serve '), table.stdout());
    for (const line of table.stdout().trimEnd().split('\n')) assert.ok([...line].length <= 100, line);

    const resumed = runCli(['resume', '--journal', journal, '--json']);
    await resumed.waitFor(/serving outlast-fixtures on stdio/, 30_000);
    const [secondServer] = childrenOf(resumed);
    assert.ok(secondServer && secondServer !== firstServer, 'resume started the server again');
    assert.equal((await resumed.exited).code, 0, resumed.stderr());
    const [out] = JSON.parse(resumed.stdout());
    assert.equal(out.taskId, taskId);
    assert.equal(out.status, 'completed');
    assert.match(out.result.content[0].text, /^Slept 6 s \(attempt 1\)$/);
    assert.equal(serverTaskCount(server.db, 'sleep'), 1, 'one task: resume did not call the tool again');
    // The first server finished its task (its client gone) and exited; the second was stopped by the CLI.
    await until('both servers are gone', () => !alive(firstServer) && !alive(secondServer), 10_000);
  });

  test('Ctrl-C on the terminal (SIGINT to the whole foreground group, the server included) detaches: the server finishes the task, and resume reads it', async () => {
    const server = fixtureServer();
    const journal = join(tempDir(), 'journal.db');
    // Long enough that a loaded machine's Ctrl-C still lands while the task works (1.5 s once ended first).
    const run = runCli(['call', '--stdio', server.line, 'sleep', '{"seconds": 4}', '--journal', journal], { group: true });
    const [, taskId] = await run.waitFor(/task (\S+) created/, 30_000);
    const [serverPid] = childrenOf(run);
    process.kill(-run.proc.pid!, 'SIGINT');
    assert.equal((await run.exited).code, 130, run.stderr());
    assert.match(run.stderr(), new RegExp(`Detached from task ${taskId}; it keeps running on the server\\. Continue with: outlast resume ${taskId}`));
    await until('the server finished its task and exited', () => !alive(serverPid!), 30_000);
    assert.equal(taskRow(server.db, taskId!)?.status, 'completed', 'the Ctrl-C did not stop the work');

    const resumed = runCli(['resume', taskId!, '--journal', journal, '--json']);
    assert.equal((await resumed.exited).code, 0, resumed.stderr());
    assert.equal(JSON.parse(resumed.stdout()).result.content[0].text, 'Slept 4 s (attempt 1)');
  });

  test('a question nobody can answer now detaches (exit 3); answered later with `outlast resume --answers`, in a new server process', async () => {
    const server = fixtureServer();
    const journal = join(tempDir(), 'journal.db');
    const asked = runCli(['call', '--stdio', server.line, 'park', '{"message": "Deploy to production?", "sleepSeconds": 0}', '--journal', journal]);
    // Seen while it runs: the CLI closes it once the question is asked, which a loaded machine may do before a look
    // taken after the "created" line.
    const firstServer = await until('the CLI started its server', () => childrenOf(asked)[0], 30_000);
    const [, taskId] = await asked.waitFor(/task (\S+) created/, 30_000);
    assert.equal((await asked.exited).code, 3, asked.stderr());
    assert.match(errorLines(asked).join('\n'), new RegExp(`^outlast: task ${taskId} needs input "answer": Deploy to production\\? \\(fields: answer\\)$`));
    assert.match(asked.stderr(), new RegExp(`Its stdio server stops with this run: a durable tool's question waits in the server's store, another tool's ends with the process\\. Answer with: outlast resume ${taskId} --answers`));
    // The CLI closed its server; the question waits in the store with no process left to hold it.
    await until('the first server is gone', () => !alive(firstServer!), 10_000);
    assert.equal(taskRow(server.db, taskId!)?.status, 'input_required');
    await sleep(500); // the person comes back later (beyond --park-after-ms)

    const answered = runCli(['resume', taskId!, '--answers', '{"answer": "yes"}', '--journal', journal]);
    assert.equal((await answered.exited).code, 0, answered.stderr());
    const m = /^The answer is: yes \(prepared in (\d+) at \d+; woke at \d+ in (\d+); attempt \d\)$/.exec(answered.stdout().trim());
    assert.ok(m, answered.stdout());
    assert.equal(Number(m[1]), firstServer, 'prepared by the first server');
    // (attempt 2 when the first server exited before it parked the wait: the next one took the task over)
    assert.notEqual(m[2], m[1], 'finished by the server resume started');
    assert.deepEqual(processesWith(server.db), [], 'no server left running');
  });

  test('bad input: a command that cannot start, a server that exits at once, bad arguments: one line, an exit code, no process left', async () => {
    const dir = tempDir('outlast-stdio-bad-');
    const journal = join(dir, 'journal.db');
    const runs: Array<{ argv: string[]; code: number; error: RegExp }> = [
      { argv: ['call', '--stdio', `no-such-server-${process.pid} --flag`, 'sleep', '{}'], code: 1, error: new RegExp(`^outlast: sleep: Cannot start the stdio server "no-such-server-${process.pid} --flag": "no-such-server-${process.pid}" was not found \\(ENOENT; is it on PATH\\?\\); nothing was sent$`) },
      {
        // --env and --cwd reach the server: it says them on stderr, and the error quotes its last lines.
        argv: ['call', '--stdio', `${process.execPath} -e 'console.error("greeting=" + process.env.GREETING + " cwd=" + process.cwd()); process.exit(3) /* ${dir} */'`, 'sleep', '{}', '--env', 'GREETING=hello there', '--cwd', dir],
        code: 1,
        error: new RegExp(`^outlast: sleep: The stdio server ".*" exited with code 3; its last stderr lines: greeting=hello there cwd=${dir}\\. The call is journaled as [\\w-]+ in ${journal}; `),
      },
      { argv: ['call', '--stdio', `${process.execPath} -e 1`, 'sleep', '{}', '--cwd', join(dir, 'missing')], code: 1, error: new RegExp(`^outlast: sleep: Cannot start the stdio server ".*": its working directory ${join(dir, 'missing')} does not exist; nothing was sent$`) },
      { argv: ['call', '--stdio', fixtureServer(dir).line, 'sleep', '{"seconds": 1'], code: 2, error: /^outlast: ARGS_JSON is not valid JSON \(.*\): \{"seconds": 1$/ },
      { argv: ['call', '--stdio', fixtureServer(dir).line, 'sleep', '[1]'], code: 2, error: /^outlast: ARGS_JSON must be a JSON object/ },
      { argv: ['call', '--stdio', `node 'server.js`, 'sleep'], code: 2, error: /^outlast: --stdio: the single quote in "node 'server.js" is never closed$/ },
      { argv: ['call', '--stdio', 'node server.js | tee log', 'sleep'], code: 2, error: /^outlast: --stdio: "\|" needs a shell, and none runs the command; write --stdio "sh -c '…'" to use one$/ },
      { argv: ['call', '--stdio', fixtureServer(dir).line, 'sleep', '--env', 'NOEQUALS'], code: 2, error: /^outlast: --env takes NAME=VALUE/ },
      { argv: ['call', 'http://127.0.0.1:1/mcp', 'sleep', '--stdio', 'node x.js'], code: 2, error: /^outlast: give the server as a URL or as --stdio "CMD ARGS", not both/ },
      { argv: ['call', '--stdio', fixtureServer(dir).line], code: 2, error: /^outlast: usage: outlast call --stdio "CMD ARGS" TOOL \[ARGS_JSON\]/ },
      { argv: ['tasks', '--stdio', 'node x.js'], code: 2, error: /^outlast: --stdio is not an option of outlast tasks$/ },
    ];
    await Promise.all(
      runs.map(async ({ argv, code, error }) => {
        const run = runCli([...argv, '--journal', journal]);
        const exit = await run.exited;
        const lines = errorLines(run);
        assert.equal(exit.code, code, `${argv.join(' ')}\n${run.stderr()}`);
        assert.equal(lines.length, 1, run.stderr());
        assert.match(lines[0]!, error);
      }),
    );
    assert.deepEqual(processesWith(dir), [], 'nothing left running');
    const entries = new Journal(journal).list();
    assert.deepEqual(entries.map((e) => e.state).sort(), ['calling', 'failed', 'failed'], 'a start that failed is refused in the journal; the call to a server that exited may have been read, so it stays for resume');
  });
});

describe('docs/clients-and-cli.md over stdio', () => {
  test('the TaskClient block and the `outlast call --stdio` block run as written (their .outlast/ folder moved to a temporary one)', async () => {
    const dir = tempDir('outlast-stdio-doc-');
    // Beside the build, so `outlast/client` resolves to this package as an app's import would.
    const file = join(ROOT, 'dist', 'test', 'doc-client-stdio.mjs');
    writeFileSync(file, docBlock('docs/clients-and-cli.md', 'client-stdio').code.replaceAll('.outlast/', `${dir}/`));
    const proc = spawn(process.execPath, [file], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    proc.stdout.on('data', (d) => (out += d));
    proc.stderr.on('data', (d) => (err += d));
    const code = await new Promise((r) => proc.once('exit', r));
    assert.equal(code, 0, err);
    assert.equal(out, 'Reindexed 1,000 documents in "docs" (attempt 1).\n');
    assert.match(err, /serving outlast-demo on stdio/, "the server's stderr passes through");

    const [outlast, ...argv] = splitCommandLine(docBlock('docs/clients-and-cli.md', 'call-stdio').code.trim().replaceAll('.outlast/', `${dir}/`));
    assert.equal(outlast, 'outlast');
    const run = runCli([...argv, '--journal', join(dir, 'journal.db')]);
    assert.equal((await run.exited).code, 0, run.stderr());
    // 1,000 documents take a tenth of the 1 s inline budget (5,000, half of it, became a task on a loaded machine):
    // answered inline, the result alone (no task, so no output to follow).
    assert.equal(run.stdout(), 'Reindexed 1,000 documents in "docs" (attempt 1).\n');
    assert.match(run.stderr(), /reindex: answered inline/);
    assert.deepEqual(processesWith(dir), [], 'the servers are gone');
  });
});
});
