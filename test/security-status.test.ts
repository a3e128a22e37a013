/**
 * Security review, finding 6 (issue 40): a task's status message could be any size (an upstream's 8 MB
 * `notifications/progress` made every `tasks/get` of the task 8 MB). Real processes: `outlast gateway` before a real
 * stdio upstream sending that progress, and `outlast serve` with tools whose status, failure and question are huge;
 * every read (tasks/get, a listen stream) carries the text cut where it was stored, with a visible marker.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { ROOT, TASKS_CAPS, callTool, getTask, openListen, rpc, startServer, tempDir, waitForTask } from './helpers.js';

const NODE = process.execPath;
const UPSTREAM = join(ROOT, 'dist', 'test', 'security-upstream.js');
const MODULE = join(ROOT, 'dist', 'test', 'security-module.js');
const MARKER = /… \[truncated, (\d+) bytes\]$/;
const bytesOf = (v: unknown) => Buffer.byteLength(JSON.stringify(v));

describe('security: texts a caller or an upstream sets are bounded where they are stored', () => {
  it("status: an upstream's 8 MB progress message does not make tasks/get 8 MB", async () => {
    const gw = await startServer(['--store', `sqlite:${join(tempDir(), 'tasks.db')}`, '--no-poll-limit'], { command: ['gateway', '--stdio', `${NODE} ${UPSTREAM} serve`] });
    try {
      const bytes = 8 * 1024 * 1024;
      const call = await callTool(gw.url, 'loud_progress', { bytes, ms: 120_000 }, { caps: TASKS_CAPS });
      assert.equal(call.result.resultType, 'task', JSON.stringify(call.message).slice(0, 300));
      const taskId = call.result.taskId as string;
      const task = await waitForTask(gw.url, taskId, (t) => typeof t.statusMessage === 'string' && t.statusMessage.startsWith('progress p'), { timeoutMs: 60_000 });
      const get = await getTask(gw.url, taskId);
      assert.ok(bytesOf(get.message) < 8 * 1024, `tasks/get is ${bytesOf(get.message)} bytes`);
      assert.ok(Buffer.byteLength(task.statusMessage) <= 4096, `status message ${Buffer.byteLength(task.statusMessage)} bytes`);
      assert.equal(Number(MARKER.exec(task.statusMessage)?.[1]), 'progress '.length + bytes, `the marker names the original size: …${task.statusMessage.slice(-60)}`);
      // A listen stream reads the same stored text.
      const listen = await openListen(gw.url, [taskId]);
      try {
        await listen.until((m) => m.some((x) => x.method === 'notifications/tasks'));
        const pushed = listen.msgs.find((x) => x.method === 'notifications/tasks')!;
        assert.match(pushed.params.statusMessage, MARKER);
        assert.ok(bytesOf(pushed) < 8 * 1024);
      } finally {
        listen.close();
      }
      await rpc(gw.url, 'tasks/cancel', { taskId });
    } finally {
      await gw.stop();
    }
  });

  it("status: a tool's huge status, failure and question are stored cut, with the marker", async () => {
    const server = await startServer(['--store', `sqlite:${join(tempDir(), 'tasks.db')}`, '--no-poll-limit'], { module: MODULE });
    try {
      const mb = 1024 * 1024;
      const status = await callTool(server.url, 'loud_status', { bytes: mb, ms: 120_000 }, { caps: TASKS_CAPS });
      const statusTask = await waitForTask(server.url, status.result.taskId, (t) => typeof t.statusMessage === 'string' && t.statusMessage.startsWith('status s'));
      assert.ok(Buffer.byteLength(statusTask.statusMessage) <= 4096);
      assert.equal(Number(MARKER.exec(statusTask.statusMessage)?.[1]), 'status '.length + mb);
      await rpc(server.url, 'tasks/cancel', { taskId: status.result.taskId });

      const failure = await callTool(server.url, 'loud_failure', { bytes: mb }, { caps: TASKS_CAPS });
      const failed = await waitForTask(server.url, failure.result.taskId);
      assert.equal(failed.status, 'failed');
      assert.ok(bytesOf(failed) < 40 * 1024, `the failed task reads ${bytesOf(failed)} bytes`);
      assert.equal(Number(MARKER.exec(failed.error.message)?.[1]), 'failure '.length + mb, 'the error message is cut with the marker');
      assert.ok(Buffer.byteLength(failed.error.message) <= 16384);
      assert.deepEqual(failed.error.data, { reason: 'loud', truncated: bytesOf({ reason: 'loud', blob: 'd'.repeat(mb) }) }, 'oversized data is replaced by its size');
      assert.match(failed.statusMessage, MARKER);

      const question = await callTool(server.url, 'loud_question', { bytes: mb }, { caps: TASKS_CAPS });
      const asking = await waitForTask(server.url, question.result.taskId, (t) => t.status === 'input_required');
      const message = asking.inputRequests.loud.params.message as string;
      assert.ok(Buffer.byteLength(message) <= 16384, `question message ${Buffer.byteLength(message)} bytes`);
      assert.equal(Number(MARKER.exec(message)?.[1]), 'question '.length + mb);
      // The cut question is still answerable, and the answer reaches the tool.
      const answered = await rpc(server.url, 'tasks/update', { taskId: question.result.taskId, inputResponses: { loud: { action: 'accept', content: { ok: true } } } });
      assert.equal(answered.error, undefined);
      const done = await waitForTask(server.url, question.result.taskId);
      assert.equal(done.status, 'completed');
      assert.match(JSON.stringify(done.result), /answer \{\\"ok\\":true\}/);
    } finally {
      await server.stop();
    }
  });
});
