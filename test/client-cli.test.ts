/**
 * The client CLI (`outlast call | tasks | resume | cancel`) as a user runs it: child processes against real
 * fixture and demo servers, SIGKILL in the middle, a pseudo-terminal (util-linux `script`) for the prompts.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { BIN, FIXTURES, ROOT, startServer, tempDir, useServer, waitForTask, type ServerProcess } from './helpers.js';
import { runCli, serverTaskCount } from './client-helpers.js';

function hasScript(): boolean {
  try {
    execFileSync('script', ['--version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

describe('outlast call / resume / tasks / cancel', () => {
  const server = useServer(['--poll-interval-ms', '300']);
  const db = () => server.sqlitePath!;

  test('a client killed with SIGKILL mid-task is resumed by `outlast resume` and gets the result', async () => {
    const journal = join(tempDir(), 'journal.db');
    const before = serverTaskCount(db(), 'sleep');
    // Long enough to be still working when listed, on a loaded machine too.
    const first = runCli(['call', server.url, 'sleep', '{"seconds": 8}', '--journal', journal]);
    const [, taskId] = await first.waitFor(/task (\S+) created/);
    first.kill('SIGKILL');
    assert.equal((await first.exited).signal, 'SIGKILL');

    const list = runCli(['tasks', '--journal', journal]);
    assert.equal((await list.exited).code, 0);
    assert.match(list.stdout(), new RegExp(`${taskId}\\s+working\\s+sleep`));

    const resumed = runCli(['resume', '--journal', journal, '--json']);
    assert.equal((await resumed.exited).code, 0, resumed.stderr());
    const out = JSON.parse(resumed.stdout());
    assert.equal(out.length, 1);
    assert.equal(out[0].taskId, taskId);
    assert.equal(out[0].status, 'completed');
    assert.match(out[0].result.content[0].text, /Slept 8 s \(attempt 1\)/);
    assert.equal(serverTaskCount(db(), 'sleep') - before, 1, 'one task: the resume did not start the work again');

    const again = runCli(['resume', '--journal', journal]);
    assert.equal((await again.exited).code, 0);
    assert.match(again.stderr(), /Nothing to resume/);
  });

  test('--json prints the final result on stdout; --detach prints the task id; cancel stops it', async () => {
    const journal = join(tempDir(), 'journal.db');
    const done = runCli(['call', server.url, 'slow_compute', '{"seconds": 0.6, "label": "sum"}', '--journal', journal, '--json', '--poll']);
    assert.equal((await done.exited).code, 0, done.stderr());
    assert.deepEqual(JSON.parse(done.stdout()).content, [{ type: 'text', text: 'Computed sum after 0.6 s' }]);
    assert.match(done.stderr(), /working/, 'progress goes to stderr');

    const detached = runCli(['call', server.url, 'sleep', '{"seconds": 30}', '--journal', journal, '--detach']);
    assert.equal((await detached.exited).code, 0);
    const taskId = detached.stdout().trim();
    assert.match(taskId, /^[\w-]{16,}$/);
    const cancel = runCli(['cancel', taskId, '--journal', journal]);
    assert.equal((await cancel.exited).code, 0, cancel.stderr());
    const resumed = runCli(['resume', taskId, '--journal', journal, '--json']);
    assert.equal((await resumed.exited).code, 1);
    assert.equal(JSON.parse(resumed.stdout()).status, 'cancelled');
  });

  test('outlast tasks reads unfinished calls again (a task cancelled since shows cancelled) and fits 100 columns, a stdio call included', async () => {
    const journal = join(tempDir(), 'journal.db');
    const detached = runCli(['call', server.url, 'sleep', '{"seconds": 60}', '--journal', journal, '--detach']);
    assert.equal((await detached.exited).code, 0, detached.stderr());
    const taskId = detached.stdout().trim();
    const stdio = runCli(['call', '--stdio', `${process.execPath} ${BIN} serve ${FIXTURES} --stdio --store sqlite:${join(tempDir(), 'stdio-tasks.db')}`, 'sleep', '{"seconds": 0}', '--journal', journal]);
    assert.equal((await stdio.exited).code, 0, stdio.stderr());
    const cancel = runCli(['cancel', taskId, '--journal', journal]);
    assert.equal((await cancel.exited).code, 0, cancel.stderr());
    await waitForTask(server.url, taskId, (t) => t.status === 'cancelled');

    const list = runCli(['tasks', '--journal', journal]);
    assert.equal((await list.exited).code, 0, list.stderr());
    assert.match(list.stdout(), new RegExp(`${taskId}\\s+cancelled \\(unread\\)\\s+sleep`), list.stdout());
    assert.doesNotMatch(list.stdout(), /cancel requested/);
    assert.match(list.stdout(), /\s+completed\s+sleep\s+\S+\s+stdio: node outlast\.js serve /, 'the stdio call, its command shortened');
    for (const line of list.stdout().trimEnd().split('\n')) assert.ok([...line].length <= 100, `${[...line].length} columns: ${line}`);
  });

  test('without a terminal, --answers answers by key or by field; a missing answer detaches with exit 3 and says how to answer', async () => {
    const journal = join(tempDir(), 'journal.db');
    const byKey = runCli(['call', server.url, 'confirm_delete', '{"filename": "a.txt"}', '--journal', journal, '--answers', '{"confirm": {"confirm": true}}']);
    assert.equal((await byKey.exited).code, 0, byKey.stderr());
    assert.equal(byKey.stdout().trim(), 'Deleted a.txt');

    const byField = runCli(['call', server.url, 'multi_input', '{}', '--journal', journal, '--answers', '{"first": "1", "second": "2"}']);
    assert.equal((await byField.exited).code, 0, byField.stderr());
    assert.equal(byField.stdout().trim(), 'Got 1 and 2');

    const none = runCli(['call', server.url, 'confirm_delete', '{"filename": "b.txt"}', '--journal', journal]);
    assert.equal((await none.exited).code, 3);
    const m = /outlast resume (\S+) --answers/.exec(none.stderr());
    assert.ok(m, none.stderr());
    assert.match(none.stderr(), /needs input "confirm": Delete b.txt\?/);
    const answered = runCli(['resume', m![1]!, '--journal', journal, '--answers', '{"confirm": false}']);
    assert.equal((await answered.exited).code, 0, answered.stderr());
    assert.equal(answered.stdout().trim(), 'Kept b.txt');
  });

  test('bad inputs get clear errors and exit code 2', async () => {
    const journal = join(tempDir(), 'journal.db');
    const cases: Array<[string[], RegExp]> = [
      [['call', 'not a url', 'greet'], /Not a URL/],
      [['call', server.url, 'greet', '{oops'], /ARGS_JSON is not valid JSON/],
      [['call', server.url, 'greet', '[1]'], /ARGS_JSON must be a JSON object/],
      [['call', server.url, 'confirm_delete', '{"filename":"x"}', '--answers', 'nope'], /--answers is not valid JSON/],
      [['call', server.url, 'confirm_delete', '{"filename":"x"}', '--answers', '{"confirm": "yes"}'], /field "confirm" must be a boolean/],
      [['resume', 'no-such-task', '--journal', journal], /No task or call "no-such-task"/],
      [['resume', '-Dtask-id-with-a-dash', '--journal', journal], /No task or call "-Dtask-id-with-a-dash"/], // ids are base64url

      [['cancel', 'no-such-task', '--journal', journal], /--url URL/],
      [['call', server.url], /usage: outlast call URL TOOL/],
    ];
    for (const [args, re] of cases) {
      const r = runCli(args[0] === 'resume' || args[0] === 'cancel' ? args : [...args, '--journal', journal]);
      const { code } = await r.exited;
      assert.equal(code, 2, `${args.join(' ')}: ${r.stderr()}`);
      assert.match(r.stderr(), re);
    }
    // An id that begins with "-" stays the first argument: the answers after it are not taken for the id.
    const dashedAnswer = runCli(['answer', '-Dtask-id-with-a-dash', '{"confirm": true}', '--url', server.url, '--journal', journal]);
    await dashedAnswer.exited;
    assert.match(dashedAnswer.stderr(), /-Dtask-id-with-a-dash/);
    assert.doesNotMatch(dashedAnswer.stderr(), /ANSWERS_JSON/);
    const unknownTool = runCli(['call', server.url, 'no_such_tool', '{}', '--journal', journal]);
    assert.equal((await unknownTool.exited).code, 1);
    assert.match(unknownTool.stderr(), /Tool no_such_tool not found/);
  });

  test('on a terminal, form elicitations are asked as prompts (pseudo-terminal through script)', { skip: !hasScript() && 'util-linux script is not installed' }, async () => {
    const journal = join(tempDir(), 'journal.db');
    const cmd = [process.execPath, BIN, 'call', server.url, 'ask', JSON.stringify({ message: 'Favourite colour?' }), '--journal', journal]
      .map((a) => `'${a.replace(/'/g, `'\\''`)}'`)
      .join(' ');
    const run = runCli([], { command: 'script', commandArgs: ['-qefc', cmd, '/dev/null'] });
    await run.waitFor(/Favourite colour\?/);
    await run.waitFor(/  answer: /);
    run.proc.stdin!.write('teal\r');
    await run.waitFor(/The answer is: teal/);
    const { code } = await run.exited;
    assert.equal(code, 0, run.stdout());
    void ROOT;
  });
});

describe('outlast call against the demo server', () => {
  let server: ServerProcess;
  before(async () => {
    server = await startServer(['--store', `sqlite:${join(tempDir(), 'demo.db')}`], { module: join(ROOT, 'dist', 'demo', 'server.js') });
  });
  after(async () => {
    await server.stop();
  });

  test('migrate asks for approval; --answers by field approves it and the CLI follows it to the end', async () => {
    const journal = join(tempDir(), 'journal.db');
    const r = runCli(['call', server.url, 'migrate', '{"database": "shop", "migration": "0042_region"}', '--journal', journal, '--answers', '{"approve": true, "reason": "release 4.2"}']);
    const { code } = await r.exited;
    assert.equal(code, 0, r.stderr());
    assert.match(r.stdout(), /Applied 0042_region to shop \(approved: release 4.2\)/);
    assert.match(r.stderr(), /step 5\/5: verify/);
  });
});
