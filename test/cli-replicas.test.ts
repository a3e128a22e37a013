// test:pg-replicas: starts PostgreSQL replicas (scripts/test.mjs runs at most three such files at once).
/**
 * The CLI reaches every replica a task may be on, with no load balancer in front: two `outlast serve` replicas on one
 * PostgreSQL schema, a call made on one, that one killed with SIGKILL. `resume` alone names the dead URL and how to give
 * another (exit 1, the journal's entry kept); `resume --url OTHER` follows the task to its result on the replica that
 * took it over; `--url` takes several replicas, tried in turn (repeated or comma-separated), for `logs`, `cancel` and
 * `answer` too; and the journal keeps the URL the call was made with.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { freePort, pgStoreUrl, startServer, tempDir, waitForTask, type ServerProcess } from './helpers.js';
import { runCli } from './client-helpers.js';
import { Journal } from '../src/client/journal.js';

describe('outlast resume / logs / cancel / answer --url: the replica that is left', () => {
  let a: ServerProcess;
  let b: ServerProcess;
  before(async () => {
    const store = pgStoreUrl();
    // A short heartbeat: the replica left notices the dead one (same host: its pid is gone) and takes its tasks over.
    a = await startServer(['--store', store, '--heartbeat-ms', '300']);
    b = await startServer(['--store', store, '--heartbeat-ms', '300']);
  });
  after(async () => {
    await a?.stop();
    await b?.stop();
  });

  it('after kill -9 of the call’s replica, resume names it and how to give another; resume --url OTHER follows to the result', { timeout: 120_000 }, async () => {
    const journal = join(tempDir(), 'journal.db');
    const call = runCli(['call', a.url, 'sleep_retryable', '{"seconds": 3}', '--journal', journal, '--detach']);
    assert.equal((await call.exited).code, 0, call.stderr());
    const taskId = call.stdout().trim();
    const j = new Journal(journal);
    assert.equal(j.find(taskId)[0]?.serverUrl, a.url, 'the journal keeps the URL the call was made with');
    j.close();

    await a.stop('SIGKILL');
    const alone = runCli(['resume', taskId, '--journal', journal]);
    assert.equal((await alone.exited).code, 1, alone.stderr());
    assert.match(alone.stderr(), new RegExp(`${a.url.replace(/[.]/g, '\\.')} did not answer \\(ECONNREFUSED\\); give another replica with --url URL \\(outlast resume ${taskId} --url URL\\)`));
    const kept = new Journal(journal);
    assert.equal(kept.find(taskId)[0]?.state, 'working', 'a dead URL does not end the entry');
    kept.close();

    const other = runCli(['resume', taskId, '--url', b.url, '--journal', journal]);
    assert.equal((await other.exited).code, 0, other.stderr());
    assert.match(other.stdout(), /Slept 3 s \(attempt 2\)/, 'the replica that is left re-ran it and gave the result');
    const done = new Journal(journal);
    const entry = done.find(taskId)[0]!;
    assert.equal(entry.state, 'completed');
    assert.equal(entry.serverUrl, a.url, 'still journaled under the server it was made on');
    done.close();

    const list = runCli(['tasks', '--journal', journal]);
    assert.equal((await list.exited).code, 0, list.stderr());
    assert.match(list.stdout(), new RegExp(`${taskId}\\s+completed\\s`));
  });

  it('--url takes several replicas, tried in turn (comma-separated or repeated), for logs, cancel and answer', { timeout: 120_000 }, async () => {
    const journal = join(tempDir(), 'journal.db');
    const dead = `http://127.0.0.1:${await freePort()}/mcp`; // nothing listens there
    const asked = runCli(['call', b.url, 'ask', '{"message": "Colour?"}', '--journal', journal, '--detach']);
    assert.equal((await asked.exited).code, 0, asked.stderr());
    const askId = asked.stdout().trim();
    await waitForTask(b.url, askId, (t) => t.status === 'input_required');
    // A task not in this journal: answered through the list, the dead replica first; answers that fit no question first.
    const other = join(tempDir(), 'other.db');
    for (const [json, re] of [
      ['{"colour": 1}', /ANSWERS_JSON answers none of the questions task \S+ waits on: "\S+" \(Colour\?; fields: answer\)/],
      ['{oops', /ANSWERS_JSON is not valid JSON/],
    ] as Array<[string, RegExp]>) {
      const wrong = runCli(['answer', askId, json, '--url', b.url, '--journal', other]);
      assert.equal((await wrong.exited).code, 2, wrong.stderr());
      assert.match(wrong.stderr(), re);
    }
    const answer = runCli(['answer', askId, '{"answer": "teal"}', '--url', `${dead},${b.url}`, '--journal', other]);
    assert.equal((await answer.exited).code, 0, answer.stderr());
    assert.match(answer.stderr(), new RegExp(`did not answer \\(ECONNREFUSED\\); using ${b.url.replace(/[.]/g, '\\.')}`));
    assert.match(answer.stderr(), new RegExp(`answered "\\S+" of task ${askId}`));
    const logs = runCli(['logs', askId, '--follow', '--url', dead, '--url', b.url, '--journal', journal]);
    assert.equal((await logs.exited).code, 0, logs.stderr());
    assert.match(logs.stderr(), new RegExp(`task ${askId} completed`));
    const resumed = runCli(['resume', askId, '--journal', journal]);
    assert.equal((await resumed.exited).code, 0, resumed.stderr());
    assert.match(resumed.stdout(), /The answer is: teal/);
    const late = runCli(['answer', askId, '{"answer": "red"}', '--url', b.url, '--journal', journal]);
    assert.equal((await late.exited).code, 1);
    assert.match(late.stderr(), new RegExp(`task ${askId} is completed: it waits for no answer`));

    const slow = runCli(['call', b.url, 'sleep', '{"seconds": 60}', '--journal', journal, '--detach']);
    assert.equal((await slow.exited).code, 0, slow.stderr());
    const slowId = slow.stdout().trim();
    const cancel = runCli(['cancel', slowId, '--url', `${dead},${b.url}`, '--journal', journal]);
    assert.equal((await cancel.exited).code, 0, cancel.stderr());
    const none = runCli(['cancel', slowId, '--url', dead, '--journal', journal]);
    assert.equal((await none.exited).code, 1);
    assert.match(none.stderr(), /did not answer \(ECONNREFUSED\); give another replica with --url URL \(outlast cancel \S+ --url URL\)/);
  });

  it('bad --url values are usage errors, exit 2', async () => {
    const journal = join(tempDir(), 'journal.db');
    for (const [args, re] of [
      [['resume', '--url', b.url], /give the task too \(outlast resume TASK_ID --url URL\)/],
      [['logs', 'some-task', '--url', 'ftp://x/mcp'], /--url must be an http:\/\/ or https:\/\/ URL, got "ftp:\/\/x\/mcp"/],
      [['cancel', 'some-task', '--url', ','], /--url needs a URL/],
    ] as Array<[string[], RegExp]>) {
      const r = runCli([...args, '--journal', journal]);
      assert.equal((await r.exited).code, 2, `${args.join(' ')}: ${r.stderr()}`);
      assert.match(r.stderr(), re);
    }
  });
});
