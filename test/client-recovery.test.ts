/**
 * The client's less travelled paths, against a real fixture server behind a loopback proxy: a call whose answer
 * was lost by a client that then gave up is finished by another client from the journal, with the same key; an
 * answer journaled but never delivered is sent by the next client without asking again; and many followers of
 * one task meet the server's real poll limit (429) and wait as told.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { TaskClient, type StatusNote } from '../src/client/index.js';
import { tempDir, textOf, useServer } from './helpers.js';
import { serverTaskCount, startProxy } from './client-helpers.js';

const KEY = 'outlast/idempotencyKey';

describe('TaskClient recovery paths', () => {
  const server = useServer(['--poll-interval-ms', '300']);

  test('a CreateTaskResult lost by a client that gave up is picked up by the next client from the journal: same key, one task, its result', async () => {
    const proxy = await startProxy(server.url);
    const journal = join(tempDir(), 'journal.db');
    const before = serverTaskCount(server.sqlitePath!, 'sleep');
    try {
      const first = new TaskClient({ url: proxy.url, journal, status: 'poll', retry: { attempts: 1 } });
      proxy.dropNext((s) => s.method === 'tools/call');
      await assert.rejects(first.callTool('sleep', { seconds: 1.5 }), /gave up after 1 attempt/);
      await first.close();
      assert.equal(serverTaskCount(server.sqlitePath!, 'sleep') - before, 1, 'the server did create the task: only its answer was lost');

      const second = new TaskClient({ url: proxy.url, journal, status: 'poll' });
      const resumed = await second.resume();
      assert.equal(resumed.length, 1, 'the journal still holds the unanswered call');
      const result = await resumed[0]!.result();
      assert.equal(textOf(result), 'Slept 1.5 s (attempt 1)', 'the original run, not a second one');
      await second.close();

      const calls = proxy.seen.filter((s) => s.method === 'tools/call');
      assert.equal(calls.length, 2, 'sent once, re-sent once by the second client');
      const keys = calls.map((c) => c.body.params?._meta?.[KEY]);
      assert.ok(typeof keys[0] === 'string' && keys[0].length > 0);
      assert.equal(keys[1], keys[0], 'the re-sent call carries the journaled key');
      assert.equal(serverTaskCount(server.sqlitePath!, 'sleep') - before, 1, 'still one task on the server');
    } finally {
      await proxy.close();
    }
  });

  test('an answer journaled but never delivered (the client stopped first) is sent by the next client without asking again', async () => {
    const proxy = await startProxy(server.url);
    const journal = join(tempDir(), 'journal.db');
    let asked = 0;
    const elicitation = async () => {
      asked++;
      return { action: 'accept', content: { answer: 'forty-two' } };
    };
    try {
      const first = new TaskClient({ url: proxy.url, journal, status: 'poll', elicitation });
      proxy.refuse = (s) => s.method === 'tasks/update';
      const call = await first.start('ask', { message: 'The answer?' });
      const end = Date.now() + 10_000;
      while (!proxy.seen.some((s) => s.method === 'tasks/update' && s.refused)) {
        if (Date.now() > end) assert.fail('the first client never tried to send its answer');
        await new Promise((r) => setTimeout(r, 20));
      }
      assert.equal(asked, 1);
      call.detach();
      await first.close(); // stands in for a crash between journaling the answer and delivering it
      proxy.refuse = undefined;

      const second = new TaskClient({ url: proxy.url, journal, status: 'poll', elicitation });
      const [resumed] = await second.resume(call.taskId!);
      const result = await resumed!.result();
      await second.close();
      assert.equal(textOf(result), 'The answer is: forty-two');
      assert.equal(asked, 1, 'the person was asked once; the journaled answer was re-sent');
      const delivered = proxy.seen.filter((s) => s.method === 'tasks/update' && !s.refused);
      assert.equal(delivered.length, 1);
      assert.deepEqual(delivered[0]!.body.params.inputResponses, { answer: { action: 'accept', content: { answer: 'forty-two' } } });
    } finally {
      await proxy.close();
    }
  });

  test('an application can answer from outside the handler with respond(); the pending handler is told to stop', async () => {
    let handlerAborted = false;
    const client = new TaskClient({
      url: server.url,
      status: 'poll',
      // A UI that never answers by itself: the answer comes from elsewhere through respond().
      elicitation: (_params, { signal }) =>
        new Promise((_, reject) =>
          signal.addEventListener('abort', () => {
            handlerAborted = true;
            reject(signal.reason);
          }),
        ),
    });
    try {
      const call = await client.start('ask', { message: 'Deploy?' });
      const key = await new Promise<string>((res) => call.once('input', (e: { key: string }) => res(e.key)));
      assert.equal(key, 'answer');
      await client.respond(call, key, { action: 'accept', content: { answer: 'yes' } });
      assert.equal(textOf(await call.result()), 'The answer is: yes');
      const end = Date.now() + 2000;
      while (!handlerAborted && Date.now() < end) await new Promise((r) => setTimeout(r, 10));
      assert.ok(handlerAborted, 'the handler learned that the request was answered elsewhere');
    } finally {
      await client.close();
    }
  });

  test("seven clients following one task meet the server's poll limit (HTTP 429) and wait at least as long as told", async () => {
    const proxy = await startProxy(server.url);
    const journal = join(tempDir(), 'journal.db');
    const clients: TaskClient[] = [];
    try {
      const owner = new TaskClient({ url: proxy.url, journal, status: 'poll' });
      clients.push(owner);
      // 8 s: seven pollers exceed the limit (4x the advertised rate after a burst of 10) by about 3 polls a second
      // once all follow; in 4 s a loaded machine, slow to start the followers, stayed just under it (31 polls, none refused).
      const call = await owner.start('sleep', { seconds: 8 });
      const taskId = call.taskId!;
      assert.ok(taskId);
      const notes: StatusNote[] = [];
      const followers = [call];
      for (let i = 0; i < 6; i++) {
        const c = new TaskClient({ url: proxy.url, journal, status: 'poll' });
        clients.push(c);
        const [h] = await c.resume(taskId);
        followers.push(h!);
      }
      for (const f of followers) f.on('note', (n: StatusNote) => notes.push(n));
      const results = await Promise.all(followers.map((f) => f.result()));
      for (const r of results) assert.deepEqual(r, results[0], 'every follower got the same result');

      const limited = proxy.seen.filter((s) => s.method === 'tasks/get' && s.status === 429);
      assert.ok(limited.length > 0, `seven pollers at 7x the advertised rate were refused at least once (${proxy.count('tasks/get')} polls)`);
      const told = Math.min(...limited.map((s) => s.retryAfterMs ?? Infinity));
      assert.ok(Number.isFinite(told), 'the 429 said how long to wait');
      const waits = notes.filter((n): n is Extract<StatusNote, { kind: 'rate_limited' }> => n.kind === 'rate_limited');
      assert.equal(waits.length, limited.length, 'each refusal reached its client');
      for (const w of waits) assert.ok(w.delayMs >= told, `waited ${w.delayMs} ms after being told ${told} ms`);
    } finally {
      for (const c of clients) await c.close();
      await proxy.close();
    }
  });
});
