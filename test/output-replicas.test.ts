// test:pg-replicas: starts PostgreSQL replicas (scripts/test.mjs runs at most three such files at once).
/**
 * Task output over two PostgreSQL replicas (real `outlast serve` processes on one schema): output written on replica
 * A is streamed in order, without gap, by a client of replica B; and when the replica running a durable tool is
 * killed (SIGKILL) mid-output, the other takes the task over, resumes at the step it reached, and the client of B
 * sees the sequence go on with nothing repeated.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { FIXTURES, callTool, getTask, openListen, textOf } from './helpers.js';
import { expected, lines, openTaskStream } from './output-helpers.js';
import { useCluster } from './replicas.js';
import { RawDispatcher } from '../src/client/transport.js';

const seqs = (n: number) => Array.from({ length: n }, (_, i) => i + 1);

describe('task output over two PostgreSQL replicas', () => {
  const c = useCluster(2, ['--inline-budget-ms', '200', '--heartbeat-ms', '300', '--lease-ms', '2000', '--queue-poll-ms', '200'], { module: FIXTURES });

  it('output written on A is streamed in order, without gap, by a client of B; tasks/get on B carries the latest seq', async () => {
    const [a, b] = c.cluster.replicas;
    const call = await callTool(a!.url, 'emit_output', { count: 40, intervalMs: 30 });
    assert.equal(call.result.resultType, 'task');
    const taskId = call.result.taskId as string;
    const listen = await openListen(b!.url, [taskId]);
    const s = await openTaskStream(b!.url, taskId);
    await s.ended();
    assert.deepEqual(s.events.map((e) => e.seq), seqs(40));
    // The listen stream's terminal notification says how much output there is, beside its subscription id.
    await listen.until((m) => m.some((n) => n.params?.status === 'completed'));
    listen.close();
    const done = listen.msgs.find((n) => n.params?.status === 'completed')!;
    assert.deepEqual(done.params._meta, { 'outlast/outputSeq': 40, 'io.modelcontextprotocol/subscriptionId': 'listen-1' });
    assert.deepEqual(lines(s.events), expected(1, 40));
    assert.equal(s.final?.result?.status, 'completed');
    const got = await getTask(b!.url, taskId);
    assert.equal(got.result._meta['outlast/outputSeq'], 40);
    assert.equal(textOf(got.result.result), 'emitted 40');
    // A second reader on A, from the middle: the same items after its cursor.
    const again = await openTaskStream(a!.url, taskId, 25);
    await again.ended();
    assert.deepEqual(lines(again.events), expected(26, 40));
  });

  it('a client on the SDK v2 transport (TaskClient\'s dispatcher) streams output from B with tasks/stream, resuming after a cut', async () => {
    const [a, b] = c.cluster.replicas;
    const call = await callTool(a!.url, 'emit_output', { count: 25, intervalMs: 40 });
    const taskId = call.result.taskId as string;
    const client = new RawDispatcher({ url: b!.url, capabilities: { extensions: { 'io.modelcontextprotocol/tasks': {} } } });
    try {
      const got: Array<{ seq: number; text: string }> = [];
      const first = await client.openStream('tasks/stream', { taskId }, {
        onNotification: (m) => got.push({ seq: m.params!.seq as number, text: (m.params!.data as { text: string }).text }),
      });
      while (got.length < 5) await new Promise((r) => setTimeout(r, 20));
      first.close();
      const after = got.at(-1)!.seq;
      const second = await client.openStream('tasks/stream', { taskId, after }, {
        onNotification: (m) => got.push({ seq: m.params!.seq as number, text: (m.params!.data as { text: string }).text }),
      });
      assert.equal(await second.ended, 'result', 'the stream ends with its result once the task is done');
      assert.deepEqual(got.map((g) => g.seq), seqs(25));
      assert.deepEqual(got.map((g) => g.text), expected(1, 25));
    } finally {
      await client.close();
    }
  });

  it('kill -9 of the replica running a durable tool mid-output: the other resumes it and the sequence goes on, nothing repeated', async () => {
    const [a, b] = c.cluster.replicas;
    const call = await callTool(a!.url, 'emit_output_durable', { count: 30, intervalMs: 150 });
    assert.equal(call.result.resultType, 'task');
    const taskId = call.result.taskId as string;
    const s = await openTaskStream(b!.url, taskId);
    await s.untilEvents(6);
    process.kill(a!.pid, 'SIGKILL');
    const killedAt = s.events.at(-1)!.seq;
    assert.ok(killedAt < 30, `killed mid-output (at line ${killedAt})`);
    await s.ended(60_000);
    assert.deepEqual(s.events.map((e) => e.seq), seqs(30), 'every seq once, in order, across the takeover');
    assert.deepEqual(lines(s.events), expected(1, 30), 'no line emitted twice, none missing');
    assert.equal(s.final?.result?.status, 'completed');
    const got = await getTask(b!.url, taskId);
    assert.equal(textOf(got.result.result), 'emitted 30');
  });
});
