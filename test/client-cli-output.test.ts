/**
 * A task's output in the CLI, as a user runs it (child processes against a real fixture server): `outlast call`
 * prints the lines live on stdout before the result (so `> file` keeps them), on stderr with --json; `outlast resume`
 * after a SIGKILL continues the output; `outlast logs TASK_ID [--follow] [--after N]` prints it like `docker logs`.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { callTool, tempDir, useServer, waitForTask } from './helpers.js';
import { expected } from './output-helpers.js';
import { runCli } from './client-helpers.js';

const linesOf = (s: string) => s.split('\n').filter((l) => /^line \d+$/.test(l));

describe('task output in the CLI', () => {
  const server = useServer(['--inline-budget-ms', '200', '--poll-interval-ms', '200']);

  test('outlast call prints each line on stdout as it comes, then the result; --json keeps stdout one JSON document', async () => {
    const journal = join(tempDir(), 'journal.db');
    const run = runCli(['call', server.url, 'emit_output', '{"count": 15, "intervalMs": 80}', '--journal', journal]);
    await run.waitFor(/line 3\n/);
    assert.equal(run.proc.exitCode, null, 'line 3 is printed while the task still runs');
    assert.equal((await run.exited).code, 0, run.stderr());
    assert.deepEqual(run.stdout().trim().split('\n'), [...expected(1, 15), 'emitted 15']);

    // Longer than the inline budget: a task, whose output is printed (a call answered inline gives its result only).
    const json = runCli(['call', server.url, 'emit_output', '{"count": 5, "intervalMs": 400}', '--journal', journal, '--json']);
    assert.equal((await json.exited).code, 0, json.stderr());
    assert.equal(JSON.parse(json.stdout()).content[0].text, 'emitted 5');
    assert.deepEqual(linesOf(json.stderr()), expected(1, 5));
  });

  test('a call killed mid-output is resumed by outlast resume, which prints the rest of the output once', async () => {
    const journal = join(tempDir(), 'journal.db');
    const first = runCli(['call', server.url, 'emit_output', '{"count": 30, "intervalMs": 80}', '--journal', journal]);
    const [, taskId] = await first.waitFor(/task (\S+) created/);
    await first.waitFor(/line 6\n/);
    await new Promise((r) => setTimeout(r, 300)); // past the journal's write interval
    first.proc.kill('SIGKILL');
    await first.exited;
    const before = linesOf(first.stdout());
    const resumed = runCli(['resume', taskId!, '--journal', journal]);
    assert.equal((await resumed.exited).code, 0, resumed.stderr());
    const after = linesOf(resumed.stdout());
    assert.match(resumed.stdout(), /emitted 30\n$/);
    // A SIGKILL may repeat what was printed in the last 200 ms before it (the journal's write interval), never skip.
    const n = Number(/line (\d+)/.exec(after[0]!)![1]);
    assert.ok(n > 1 && n <= before.length + 1, `resume continues where the killed call stopped (at ${n}, ${before.length} printed)`);
    assert.deepEqual(after, expected(n, 30));
  });

  test('outlast logs prints what exists and exits; --after N skips; --follow prints until the task ends', async () => {
    // 12 s of output: a CLI started on a loaded machine still finds the task writing.
    const c = await callTool(server.url, 'emit_output', { count: 40, intervalMs: 300 });
    const taskId = c.result.taskId as string;
    const follow = runCli(['logs', taskId, '--follow', '--url', server.url, '--journal', join(tempDir(), 'j.db')]);
    await follow.waitFor(/line 3\n/); // three lines exist: what `logs` without --follow prints is at least those
    const now = runCli(['logs', taskId, '--url', server.url, '--journal', join(tempDir(), 'j.db')]);
    assert.equal((await now.exited).code, 0, now.stderr());
    const some = linesOf(now.stdout());
    assert.ok(some.length >= 3 && some.length < 40, `only what existed (${some.length} lines)`);
    assert.deepEqual(some, expected(1, some.length));
    assert.equal((await follow.exited).code, 0, follow.stderr());
    assert.equal(follow.stdout(), expected(1, 40).join('\n') + '\n');
    assert.match(follow.stderr(), new RegExp(`^task ${taskId} completed`, 'm'), 'the final state, on stderr');
    await waitForTask(server.url, taskId, (t) => t.status === 'completed');
    const tail = runCli(['logs', taskId, '--after', '20', '--url', server.url, '--journal', join(tempDir(), 'j.db')]);
    assert.equal((await tail.exited).code, 0, tail.stderr());
    assert.equal(tail.stdout(), expected(21, 40).join('\n') + '\n');
  });

  test('outlast logs --follow of a task cancelled meanwhile prints the cancel as its last line and exits 1', async () => {
    const c = await callTool(server.url, 'emit_output', { count: 200, intervalMs: 100 });
    const taskId = c.result.taskId as string;
    const journal = join(tempDir(), 'j.db');
    const follow = runCli(['logs', taskId, '--follow', '--url', server.url, '--journal', journal]);
    await follow.waitFor(/line 3\n/);
    const cancel = runCli(['cancel', taskId, '--url', server.url, '--journal', journal]);
    assert.equal((await cancel.exited).code, 0, cancel.stderr());
    assert.equal((await follow.exited).code, 1, follow.stderr());
    assert.match(follow.stderr().trimEnd().split('\n').at(-1)!, new RegExp(`^task ${taskId} cancelled`));
    assert.ok(linesOf(follow.stdout()).length < 200, 'it stopped with the task');
  });

  test('outlast logs: clear errors for a bad --after, an unknown task, a task not in the journal without --url', async () => {
    const journal = join(tempDir(), 'journal.db');
    for (const after of ['--after=-1', '--after=1.5', '--after=x']) {
      const bad = runCli(['logs', 'x', after, '--url', server.url, '--journal', journal]);
      assert.equal((await bad.exited).code, 2);
      assert.match(bad.stderr(), /--after must be an integer >= 0/);
    }
    const unknown = runCli(['logs', 'no-such-task', '--url', server.url, '--journal', journal]);
    assert.equal((await unknown.exited).code, 1);
    assert.match(unknown.stderr(), /Task no-such-task is not known to the server/);
    const nowhere = runCli(['logs', 'abc', '--journal', journal]);
    assert.equal((await nowhere.exited).code, 2);
    assert.match(nowhere.stderr(), /give the server with --url URL/);
  });
});

describe('outlast logs past the per-task bound', () => {
  const server = useServer(['--inline-budget-ms', '200', '--max-output-per-task', '5']);

  test('lost output is named on stderr and the kept output printed', async () => {
    const c = await callTool(server.url, 'emit_output', { count: 12, intervalMs: 30 });
    const taskId = c.result.taskId as string;
    await waitForTask(server.url, taskId, (t) => t.status === 'completed');
    const r = runCli(['logs', taskId, '--url', server.url, '--journal', join(tempDir(), 'j.db')]);
    assert.equal((await r.exited).code, 0, r.stderr());
    assert.match(r.stderr(), /output items 1–7 of task \S+ are no longer kept by the server .*continuing at 8/);
    assert.equal(r.stdout(), expected(8, 12).join('\n') + '\n');
  });
});
