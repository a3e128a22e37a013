/**
 * Task output for 2025-11-25 callers (no tasks/stream on that wire): the SDK v1 client's task-augmented call gets each
 * output item on the tasks/result stream as a log message (logger outlast/output, data {taskId, seq, type, data}),
 * in order, once, before the result; `_meta["outlast/outputAfter"]` resumes after a seq already seen.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { LoggingMessageNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { connectV1 } from './generations.js';
import { textOf, useServer } from './helpers.js';

type Logged = { logger?: string; level: string; data: { taskId: string; seq: number; type: string; data: { type: string; text: string } } };

describe('task output on the 2025-11-25 wire (SDK v1 experimental.tasks, SQLite)', () => {
  const server = useServer(['--inline-budget-ms', '200']);

  it('each output item arrives once, in order, as an outlast/output log message on the tasks/result stream, before the result', async () => {
    const { client, wire, close } = await connectV1(server.url);
    const logged: Logged[] = [];
    client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => void logged.push(n.params as Logged));
    try {
      let result: Record<string, any> | undefined;
      let taskId: string | undefined;
      let outputBeforeResult = 0;
      for await (const m of client.experimental.tasks.callToolStream({ name: 'emit_output', arguments: { count: 12, intervalMs: 60 } })) {
        const msg = m as { type: string; task?: { taskId: string }; result?: Record<string, any> };
        if (msg.type === 'taskCreated') taskId = msg.task!.taskId;
        if (msg.type === 'result') {
          result = msg.result;
          outputBeforeResult = logged.length;
        }
      }
      assert.ok(taskId, 'the call became a task');
      assert.equal(textOf(result as never), 'emitted 12');
      const output = logged.filter((l) => l.logger === 'outlast/output');
      assert.equal(outputBeforeResult, output.length, 'every item arrived before the result');
      assert.deepEqual(output.map((l) => l.data.seq), Array.from({ length: 12 }, (_, i) => i + 1));
      assert.deepEqual(output.map((l) => l.data.data.text), Array.from({ length: 12 }, (_, i) => `line ${i + 1}`));
      assert.ok(output.every((l) => l.level === 'info' && l.data.taskId === taskId && l.data.type === 'text'));

      // tasks/result again, after seq 9: only the rest.
      logged.length = 0;
      const again = await client.request(
        { method: 'tasks/result', params: { taskId: taskId!, _meta: { 'outlast/outputAfter': 9 } } },
        (await import('@modelcontextprotocol/sdk/types.js')).CallToolResultSchema,
      );
      assert.equal(textOf(again as never), 'emitted 12');
      assert.deepEqual(logged.filter((l) => l.logger === 'outlast/output').map((l) => l.data.seq), [10, 11, 12]);
    } finally {
      await close();
    }
    await wire.assertClean();
  });
});
