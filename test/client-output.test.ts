/**
 * TaskClient and task output, against real `outlast serve` processes: output delivered as it comes (the `onOutput`
 * callback and the `client.output()` iterator), in order and each once; a connection cut for real (a TCP proxy
 * resetting every connection, a replica killed behind a balancer) is resumed after the last seq; a client closed
 * and started again on the same journal file continues where it stopped; output the server no longer keeps is
 * reported (what was lost, where it continues), never skipped silently.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { FIXTURES, freshSchema, pgStoreUrl, sleep, tempDir, until, useServer } from './helpers.js';
import { expected } from './output-helpers.js';
import { startFaultProxy, type FaultProxy } from './fault-proxy.js';
import { useCluster } from './replicas.js';
import { OutputGoneError, TaskClient, type OutputEvent, type OutputGap } from '../src/client/index.js';

const texts = (events: OutputEvent[]) => events.map((e) => (e.data as { text: string }).text);
const seqs = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => from + i);
const FAST_RETRY = { attempts: 20, baseDelayMs: 100, maxDelayMs: 500 };

describe('TaskClient output on SQLite', () => {
  const server = useServer(['--inline-budget-ms', '200']);

  it('onOutput delivers each line as it is written, in order, once; the result comes after the last line', async () => {
    const client = new TaskClient({ url: server.url });
    try {
      const got: OutputEvent[] = [];
      const times: number[] = [];
      let resultAt = 0;
      const call = await client.start('emit_output', { count: 20, intervalMs: 60 }, { onOutput: (e) => (got.push(e), times.push(Date.now())) });
      assert.ok(call.taskId, 'the call became a task');
      const result = await call.result();
      resultAt = Date.now();
      assert.equal((result.content![0] as { text: string }).text, 'emitted 20');
      assert.deepEqual(got.map((e) => e.seq), seqs(1, 20));
      assert.deepEqual(texts(got), expected(1, 20));
      assert.ok(got.every((e) => e.type === 'text' && e.taskId === call.taskId));
      assert.ok(times[10]! < resultAt - 300, 'lines arrive while the task runs, not all at the end');
      // The iterator replays the same output from any cursor.
      const again: OutputEvent[] = [];
      for await (const e of client.output(call.taskId!, { after: 15 })) again.push(e);
      assert.deepEqual(texts(again), expected(16, 20));
    } finally {
      await client.close();
    }
  });

  it('a client closed mid-output and started again on the same journal continues after the last line it delivered', async () => {
    const journal = join(tempDir(), 'journal.db');
    const first: OutputEvent[] = [];
    const c1 = new TaskClient({ url: server.url, journal });
    const call = await c1.start('emit_output', { count: 30, intervalMs: 50 }, { onOutput: (e) => first.push(e) });
    const taskId = call.taskId!;
    await until('8 lines', () => first.length >= 8);
    await c1.close(); // the task runs on
    const stoppedAt = first.at(-1)!.seq;
    assert.ok(stoppedAt < 30, `stopped mid-output, at ${stoppedAt}`);

    const c2 = new TaskClient({ url: server.url, journal });
    try {
      const second: OutputEvent[] = [];
      const [resumed] = await c2.resume(taskId, { onOutput: (e) => second.push(e) });
      const result = await resumed!.result();
      assert.equal((result.content![0] as { text: string }).text, 'emitted 30');
      assert.equal(second[0]!.seq, stoppedAt + 1, 'continues right after the last line delivered');
      assert.deepEqual(texts([...first, ...second]), expected(1, 30), 'nothing missed, nothing twice');
      assert.equal(c2.journal.outputSeq(taskId), 30);
      // The iterator can continue from the journal too: nothing is left.
      const rest: OutputEvent[] = [];
      for await (const e of c2.output(taskId, { after: 'journal' })) rest.push(e);
      assert.deepEqual(rest, []);
    } finally {
      await c2.close();
    }
  });
});

describe('TaskClient output through a connection that is cut', () => {
  const server = useServer(['--inline-budget-ms', '200']);
  let proxy: FaultProxy;
  before(async () => {
    const u = new URL(server.url);
    proxy = await startFaultProxy({ host: u.hostname, port: Number(u.port) });
  });
  after(async () => {
    await proxy.close();
  });

  it('every connection reset mid-stream: the iterator resumes after its last seq, without gap or duplicate', async () => {
    const url = new URL(server.url);
    url.port = String(proxy.port);
    const client = new TaskClient({ url: url.href, retry: FAST_RETRY });
    try {
      const call = await client.start('emit_output', { count: 40, intervalMs: 50 }, { follow: false });
      const got: OutputEvent[] = [];
      const retries: string[] = [];
      let cuts = 0;
      for await (const e of client.output(call.taskId!, { onRetry: (err) => retries.push(err.message) })) {
        got.push(e);
        if (got.length === 10 || got.length === 25) {
          cuts++;
          proxy.set('reset'); // every open connection is reset, new ones too, for a moment
          await sleep(300);
          proxy.set('pass');
        }
      }
      assert.equal(cuts, 2);
      assert.ok(retries.length >= 1, 'the cut was noticed and retried');
      assert.deepEqual(got.map((e) => e.seq), seqs(1, 40), 'every seq once, in order');
      assert.deepEqual(texts(got), expected(1, 40));
    } finally {
      await client.close();
    }
  });
});

describe('TaskClient output past the server\'s per-task bound', () => {
  const server = useServer(['--inline-budget-ms', '200', '--max-output-per-task', '5']);

  it('events_gone is surfaced: what was lost and where the output continues', async () => {
    const client = new TaskClient({ url: server.url });
    try {
      const done = await client.start('emit_output', { count: 12, intervalMs: 30 }, {});
      await done.result();
      const taskId = done.taskId!;
      // Without onGap, the iterator throws, naming the loss.
      await assert.rejects(
        async () => {
          for await (const _ of client.output(taskId)) assert.fail('nothing before the gap');
        },
        (e: unknown) => {
          assert.ok(e instanceof OutputGoneError);
          assert.deepEqual([e.lostFrom, e.lostTo, e.continuesAt], [1, 7, 8]);
          assert.match(e.message, /Output items 1–7 of task \S+ are no longer kept by the server .*continues at 8/);
          return true;
        },
      );
      // With onGap, delivery goes on from the earliest kept; a call's onOutputGap hears the same.
      const gaps: OutputGap[] = [];
      const got: OutputEvent[] = [];
      for await (const e of client.output(taskId, { onGap: (g) => gaps.push(g) })) got.push(e);
      assert.deepEqual(gaps, [{ taskId, lostFrom: 1, lostTo: 7, continuesAt: 8 }]);
      assert.deepEqual(texts(got), expected(8, 12));
    } finally {
      await client.close();
    }
  });
});

describe('TaskClient output over two PostgreSQL replicas behind a balancer', () => {
  const c = useCluster(2, ['--inline-budget-ms', '200', '--heartbeat-ms', '300', '--lease-ms', '2000', '--queue-poll-ms', '200'], {
    module: FIXTURES,
    storeUrl: `${pgStoreUrl(freshSchema('cout'))}&pool=3`,
  });

  it('the replica serving the stream is killed (SIGKILL): the client resumes through the other, nothing missed or repeated', async () => {
    const { front, replicas } = c.cluster;
    const client = new TaskClient({ url: front.url, retry: FAST_RETRY });
    try {
      const got: OutputEvent[] = [];
      const call = await client.start('emit_output_durable', { count: 30, intervalMs: 120 }, { onOutput: (e) => got.push(e) });
      await until('6 lines', () => got.length >= 6);
      const streamed = front.log.filter((f) => f.method === 'tasks/stream').at(-1)!.target;
      process.kill(replicas[streamed]!.pid, 'SIGKILL');
      const killedAt = got.at(-1)!.seq;
      const result = await call.result();
      assert.equal((result.content![0] as { text: string }).text, 'emitted 30');
      assert.ok(killedAt < 30, `killed mid-output (at ${killedAt})`);
      assert.deepEqual(got.map((e) => e.seq), seqs(1, 30), 'every seq once, in order, across the kill');
      assert.deepEqual(texts(got), expected(1, 30));
      assert.ok(front.log.filter((f) => f.method === 'tasks/stream').length >= 2, 'the stream was resumed');
    } finally {
      await client.close();
    }
  });
});
