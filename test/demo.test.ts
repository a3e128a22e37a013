/** The demo server's tools behave as their descriptions promise. */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { ROOT, callTool, getTask, rpc, startServer, tempDir, textOf, useServer, waitForTask } from './helpers.js';
import { openTaskStream } from './output-helpers.js';

const DEMO = join(ROOT, 'dist', 'demo', 'server.js');

describe('demo server', () => {
  const srv = useServer([], { module: join(ROOT, 'dist', 'demo', 'server.js') });

  it('lists its three tools, and the three that follow, cancel or answer a handle for clients without task support', async () => {
    const r = await rpc(srv.url, 'tools/list', {});
    assert.deepEqual(r.result.tools.map((t: { name: string }) => t.name).sort(), ['migrate', 'outlast_task_answer', 'outlast_task_cancel', 'outlast_task_status', 'reindex', 'run_pipeline']);
  });

  it('reindex: a small collection answers inline; a large one becomes a task with progress', async () => {
    const small = await callTool(srv.url, 'reindex', { collection: 'faq', documents: 500 });
    assert.equal(small.result.resultType, 'complete');
    assert.match(textOf(small.result), /Reindexed 500 documents in "faq"/);
    const big = await callTool(srv.url, 'reindex', { collection: 'orders', documents: 30_000 });
    assert.equal(big.result.resultType, 'task');
    const mid = await waitForTask(srv.url, big.result.taskId, (t) => /orders: [\d,]+ of 30,000 documents indexed/.test(t.statusMessage ?? ''));
    assert.equal(mid.status, 'working');
    const done = await waitForTask(srv.url, big.result.taskId);
    assert.match(textOf(done.result), /Reindexed 30,000 documents/);
    const out = await openTaskStream(srv.url, big.result.taskId);
    await out.ended();
    assert.deepEqual(out.events.map((e) => e.type), ['dev.outlast.demo/indexed', 'dev.outlast.demo/indexed', 'dev.outlast.demo/indexed']);
    assert.deepEqual(out.events.map((e) => e.data.indexed), [10_000, 20_000, 30_000], 'its partial results, in order');
  });

  it('run_pipeline: stages show in statusMessage, and cancel stops it', async () => {
    const t = await callTool(srv.url, 'run_pipeline', { repository: 'acme/shop' });
    assert.equal(t.result.resultType, 'task');
    await waitForTask(srv.url, t.result.taskId, (x) => /install dependencies/.test(x.statusMessage ?? ''));
    await rpc(srv.url, 'tasks/cancel', { taskId: t.result.taskId });
    const done = await waitForTask(srv.url, t.result.taskId);
    assert.equal(done.status, 'cancelled');
  });

  it('migrate: asks for approval, then applies the migration', async () => {
    const t = await callTool(srv.url, 'migrate', { database: 'orders-db', migration: '042_region' });
    const w = await waitForTask(srv.url, t.result.taskId, (x) => x.status === 'input_required');
    assert.match(w.inputRequests.approval.params.message, /Apply migration "042_region" to orders-db/);
    await rpc(srv.url, 'tasks/update', { taskId: t.result.taskId, inputResponses: { approval: { action: 'accept', content: { approve: true, reason: 'release 7' } } } });
    const step = await waitForTask(srv.url, t.result.taskId, (x) => /step \d\/5/.test(x.statusMessage ?? ''));
    assert.equal(step.status, 'working');
    const done = await waitForTask(srv.url, t.result.taskId);
    assert.equal(textOf(done.result), 'Applied 042_region to orders-db (approved: release 7).');
  });

  it('migrate: a declined approval changes nothing', async () => {
    const t = await callTool(srv.url, 'migrate', { database: 'orders-db', migration: '043_drop' });
    await waitForTask(srv.url, t.result.taskId, (x) => x.status === 'input_required');
    await rpc(srv.url, 'tasks/update', { taskId: t.result.taskId, inputResponses: { approval: { action: 'decline' } } });
    const done = await waitForTask(srv.url, t.result.taskId);
    assert.match(textOf(done.result), /was not approved \(decline\); nothing was changed/);
    assert.equal((await getTask(srv.url, t.result.taskId)).result.status, 'completed');
  });
});

describe('demo server: a killed server resumes its work', () => {
  it('kill -9 mid-pipeline and during an approval wait: after the restart the pipeline resumes at its stage, the migration is answered and applied', async () => {
    const db = join(tempDir(), 'demo.db');
    const args = ['--store', `sqlite:${db}`, '--heartbeat-ms', '200', '--lease-ms', '1500', '--no-poll-limit'];
    let srv = await startServer(args, { module: DEMO });
    try {
      const pipeline = (await callTool(srv.url, 'run_pipeline', { repository: 'acme/shop' })).result.taskId as string;
      const migration = (await callTool(srv.url, 'migrate', { database: 'orders-db', migration: '044_index' })).result.taskId as string;
      await waitForTask(srv.url, migration, (t) => t.status === 'input_required');
      await waitForTask(srv.url, pipeline, (t) => t.statusMessage === 'build…', { timeoutMs: 10_000 });
      await srv.stop('SIGKILL');
      srv = await startServer(args, { module: DEMO });
      const waiting = await getTask(srv.url, migration);
      assert.equal(waiting.result.status, 'input_required', 'the approval still waits');
      await rpc(srv.url, 'tasks/update', { taskId: migration, inputResponses: { approval: { action: 'accept', content: { approve: true } } } });
      const resumed = await waitForTask(srv.url, pipeline, (t) => t.status !== 'working' || t.statusMessage !== null, { timeoutMs: 5000 });
      assert.notEqual(resumed.statusMessage, 'checkout acme/shop@main…', 'not started over');
      const done = await waitForTask(srv.url, pipeline, undefined, { timeoutMs: 20_000 });
      assert.equal(
        textOf(done.result),
        [
          'Pipeline for acme/shop@main passed:',
          '✓ checkout acme/shop@main (1.5 s)',
          '✓ install dependencies (3.0 s)',
          '✓ build (4.0 s, after a restart)',
          '✓ test (5.0 s, after a restart)',
          '✓ package (1.5 s, after a restart)',
        ].join('\n'),
      );
      // Each stage's log lines are in the output once, in order, though three stages ran again after the kill.
      const out = await openTaskStream(srv.url, pipeline);
      await out.ended();
      const printed = out.events.map((e) => e.data.text);
      assert.deepEqual(printed.filter((l) => l?.startsWith('[test] ')), ['[test] test', '[test] running 146 tests', '[test] suite api: 92 passed', '[test] suite ui: 54 passed', '[test] 146 passed, 0 failed']);
      assert.deepEqual(printed.filter((l) => l?.startsWith('[checkout] ')), ['[checkout] checkout acme/shop@main', '[checkout] Cloning into workspace…', '[checkout] HEAD is now at 3f9c2e1 Merge pull request #212']);
      assert.equal(printed.at(-1), '[package] published acme-shop-1.4.0.tgz');
      assert.deepEqual(out.events.map((e) => e.seq), out.events.map((_, i) => i + 1), 'no gap');
      const applied = await waitForTask(srv.url, migration);
      assert.equal(textOf(applied.result), 'Applied 044_index to orders-db (approved).');
    } finally {
      await srv.stop();
    }
  });
});
