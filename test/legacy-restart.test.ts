/**
 * A 2025-11-25 client (SDK v1) whose server is killed (SIGKILL) mid-task and started again on the same SQLite
 * file and port: the task is re-run (declared safe) and the client, asking again, gets its result.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js';
import { freePort, startServer, tempDir, textOf } from './helpers.js';
import { connectV1 } from './generations.js';

describe('2025-11-25 client across a server crash (SQLite)', () => {
  it('kill -9 mid-task, restart on the same file: the client still gets the result', async () => {
    const port = await freePort();
    const args = ['--port', String(port), '--store', `sqlite:${join(tempDir(), 'tasks.db')}`];
    let server = await startServer(args);
    const { client, close } = await connectV1(server.url);
    let taskId = '';
    for await (const m of client.experimental.tasks.callToolStream({ name: 'sleep_retryable', arguments: { seconds: 2 } })) {
      if (m.type === 'taskCreated') {
        taskId = m.task.taskId;
        break;
      }
    }
    assert.ok(taskId);
    const killed = await server.stop('SIGKILL');
    assert.equal(killed.signal, 'SIGKILL');
    server = await startServer(args);
    try {
      // tasks/result blocks until the re-run finishes, on the restarted process.
      const result = await client.experimental.tasks.getTaskResult(taskId, CallToolResultSchema);
      assert.match(textOf(result as Record<string, any>), /Slept 2 s \(attempt 2\)/);
      const task = await client.experimental.tasks.getTask(taskId);
      assert.equal(task.status, 'completed');
    } finally {
      await close();
      await server.stop();
    }
  });
});
