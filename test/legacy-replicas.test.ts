// test:pg-replicas: starts PostgreSQL replicas (scripts/test.mjs runs at most three such files at once).
/**
 * Every client generation through a round-robin front (no affinity) over three fixture-server replicas on one
 * PostgreSQL schema: the 2025-11-25 wire is as stateless as the 2026 one, so any replica answers any request,
 * an input answer posted to another replica reaches the handler, and a replica killed mid-task loses nothing.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { FIXTURES, textOf, waitForTask } from './helpers.js';
import { useCluster } from './replicas.js';
import { connectV1, extTasksV1, extTasksV2 } from './generations.js';

const ALICE = 'alice-token';
const BOB = 'bob-token';

type StreamMessage = { type: string; task?: Record<string, any>; result?: Record<string, any>; error?: { code: number; message: string } };

async function stream(client: Awaited<ReturnType<typeof connectV1>>['client'], name: string, args: Record<string, unknown>, onCreated?: (taskId: string) => void): Promise<StreamMessage[]> {
  const out: StreamMessage[] = [];
  for await (const m of client.experimental.tasks.callToolStream({ name, arguments: args })) {
    out.push(m as StreamMessage);
    if (m.type === 'taskCreated') onCreated?.(m.task.taskId);
  }
  return out;
}

describe('2025-11-25 clients and handle clients over three PostgreSQL replicas behind a round-robin front', () => {
  const c = useCluster(3, ['--bearer', `${ALICE}=alice`, '--bearer', `${BOB}=bob`, '--heartbeat-ms', '500', '--lease-ms', '3000', '--handle-after-ms', '300'], { module: FIXTURES });

  it('a long call completes with its polls spread over every replica', async () => {
    const { front } = c.cluster;
    const before = [...front.counts];
    const { client, wire, close } = await connectV1(front.url, { token: ALICE });
    const msgs = await stream(client, 'sleep', { seconds: 1.5 });
    assert.match(textOf(msgs[msgs.length - 1]!.result!), /Slept 1.5 s/);
    assert.ok(front.counts.every((n, i) => n > before[i]!), `every replica served some requests: ${front.counts}`);
    await close();
    await wire.assertClean();
  });

  it('an input asked on a tasks/result stream of one replica is answered through another, and the task completes', async () => {
    const { front } = c.cluster;
    const from = front.log.length;
    const { client, close } = await connectV1(front.url, { token: ALICE, elicit: () => ({ action: 'accept', content: { answer: 'across replicas' } }) });
    const msgs = await stream(client, 'ask', { message: 'Where?' });
    assert.match(textOf(msgs[msgs.length - 1]!.result!), /The answer is: across replicas/);
    const log = front.log.slice(from);
    const resultOn = log.find((l) => l.method === 'tasks/result')!.target;
    const answerOn = log.find((l) => typeof l.responseId === 'string' && l.responseId.startsWith('outlast-input/'))!.target;
    assert.notEqual(answerOn, resultOn, 'the answer was posted to another replica than the one holding the stream');
    await close();
  });

  it('the replica running a task is killed (SIGKILL): the client still gets the result of the re-run', async () => {
    const { front, replicas } = c.cluster;
    const from = front.log.length;
    const { client, close } = await connectV1(front.url, { token: ALICE });
    let killed = false;
    const msgs = await stream(client, 'sleep_retryable', { seconds: 2 }, () => {
      const owner = front.log.slice(from).find((l) => l.method === 'tools/call')!.target;
      process.kill(replicas[owner]!.pid, 'SIGKILL');
      killed = true;
    });
    assert.ok(killed);
    const end = msgs[msgs.length - 1]!;
    assert.equal(end.type, 'result', JSON.stringify(end));
    assert.match(textOf(end.result!), /Slept 2 s \(attempt 2\)/);
    await close();
    await c.cluster.add();
  });

  it("cancel and listing through any replica; one principal never sees another's tasks", async () => {
    const alice = await connectV1(c.cluster.front.url, { token: ALICE });
    const bob = await connectV1(c.cluster.front.url, { token: BOB });
    let taskId = '';
    for await (const m of bob.client.experimental.tasks.callToolStream({ name: 'sleep', arguments: { seconds: 30 } })) {
      if (m.type === 'taskCreated') {
        taskId = m.task.taskId;
        break;
      }
    }
    const cancelled = await bob.client.experimental.tasks.cancelTask(taskId);
    assert.equal(cancelled.status, 'cancelled');
    const bobs = (await bob.client.experimental.tasks.listTasks()).tasks.map((t) => t.taskId);
    assert.ok(bobs.includes(taskId));
    const alices = (await alice.client.experimental.tasks.listTasks()).tasks.map((t) => t.taskId);
    assert.ok(alices.length >= 3, 'alice sees her own tasks from the earlier tests');
    assert.ok(!alices.includes(taskId), "alice does not see bob's task");
    assert.ok(bobs.every((id) => !alices.includes(id)));
    await alice.close();
    await bob.close();
  });

  it('a plain client follows a handle through the status tool on whichever replica it reaches', async () => {
    const { client, close } = await connectV1(c.cluster.front.url, { token: ALICE });
    const started = (await client.callTool({ name: 'sleep', arguments: { seconds: 1.5 } })) as { structuredContent?: { taskId: string } };
    const taskId = started.structuredContent!.taskId;
    let last: Record<string, any> = {};
    for (let i = 0; i < 5 && !/^Slept/.test(textOf(last)); i++) last = (await client.callTool({ name: 'outlast_task_status', arguments: { taskId } })) as Record<string, any>;
    assert.match(textOf(last), /^Slept 1.5 s/);
    await close();
  });

  it('ext-tasks on both generations through the front', async () => {
    const v1 = await extTasksV1(c.cluster.front.url, { token: ALICE });
    const ex1 = await v1.session.callTool('sleep', { seconds: 1 }, { task: { preference: 'prefer' } });
    const s1 = await ex1.settle();
    assert.equal(s1.outcome.status, 'completed');
    await v1.close();
    await v1.wire.assertClean();
    const v2 = await extTasksV2(c.cluster.front.url, { token: ALICE, elicit: () => ({ action: 'accept', content: { answer: 'via v2' } }) });
    const ex2 = await v2.session.callTool('ask', { message: 'Name?' });
    const s2 = await ex2.settle();
    assert.equal(s2.outcome.status, 'completed');
    assert.match(textOf((s2.outcome as { result: Record<string, any> }).result), /via v2/);
    const t = await waitForTask(c.cluster.front.url, s2.lastTask!.taskId as string, undefined, { token: ALICE });
    assert.equal(t.status, 'completed');
    await v2.close();
    await v2.wire.assertClean();
  });
});
