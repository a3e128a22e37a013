// test:pg-replicas: starts PostgreSQL replicas (scripts/test.mjs runs at most three such files at once).
/**
 * `outlast gateway` replicas on one PostgreSQL schema in front of HTTP upstreams that answer long calls with tasks of
 * their own: the replica following an upstream task is killed (SIGKILL), and another replica follows the same upstream
 * task to its end, without calling the tool again (none of these tools is safe to re-run). Both Tasks generations:
 * Outlast's fixture server (the 2026-07-28 extension, a task found by its id) and server-everything (2025-11-25, a
 * task bound to the session it was made in). Each upstream is reached through an HTTP tap that records what reached it.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { ROOT, callTool, sleep, freePort, freshSchema, httpServiceProcess, pgStoreUrl, startServer, tempDir, textOf, until, waitForTask, type ServerProcess } from './helpers.js';
import { reached } from './http-tap.js';
import { TaskClient } from '../src/client/index.js';

const UPSTREAMS = join(ROOT, 'dist', 'test', 'gateway-upstreams.js');
const EVERYTHING = join(ROOT, 'node_modules', '@modelcontextprotocol', 'server-everything', 'dist', 'index.js');
const NODE = process.execPath;
const LEASE_MS = 1500;

const callsOf = (log: string, tool: string) => reached(log).filter((r) => r.msg.method === 'tools/call' && r.msg.params?.name === tool);
/** The upstream task the gateway polls after its latest tools/call of `tool`, once polled twice (a poll interval
 *  after the gateway's task began following it: what a replica records of it is committed by then). */
const polledTask = (log: string, tool: string) => {
  const seen = reached(log);
  const call = seen.findLastIndex((r) => r.msg.method === 'tools/call' && r.msg.params?.name === tool);
  const polls = call < 0 ? [] : seen.slice(call + 1).filter((r) => r.msg.method === 'tasks/get');
  return polls.length >= 2 ? (polls[0]!.msg.params.taskId as string) : undefined;
};

/** Gateway replicas on one fresh schema in front of `upstreamUrl`, stopped after the describe. */
function replicasOf(upstreamUrl: string, replicas: ServerProcess[]) {
  const store = pgStoreUrl(freshSchema('gwr'));
  return async () => {
    const r = await startServer(['--store', `${store}&pool=3`, '--lease-ms', String(LEASE_MS), '--heartbeat-ms', '200', '--inline-budget-ms', '300', '--park-after-ms', '300'], {
      command: ['gateway', '--http', upstreamUrl, '--name', 'up'],
    });
    replicas.push(r);
    return r;
  };
}

/** A service behind an HTTP tap on a port of its own: [tap URL, stop both]. */
async function tapped(log: string, target: string): Promise<{ url: string; stop: () => Promise<void> }> {
  const port = await freePort();
  const tap = httpServiceProcess('httptap', NODE, [UPSTREAMS, 'httptap', log, String(port), target], `http://127.0.0.1:${port}/healthz`);
  await tap.start();
  return { url: `http://127.0.0.1:${port}/mcp`, stop: () => tap.stop() };
}

describe(`gateway replicas resume following an upstream task (2026-07-28 Tasks extension; lease ${LEASE_MS} ms)`, () => {
  const log = join(tempDir(), 'tap.log');
  const replicas: ServerProcess[] = [];
  let upstream: ServerProcess | undefined;
  let tap: { url: string; stop: () => Promise<void> } | undefined;
  let start: () => Promise<ServerProcess>;
  after(async () => {
    await Promise.all(replicas.map((r) => r.stop()));
    await tap?.stop();
    await upstream?.stop();
  });

  it('kill -9 of the replica following the upstream task: another replica follows the same task to its result; the tool ran once', async () => {
    upstream = await startServer(['--store', `sqlite:${join(tempDir(), 'up.db')}`, '--poll-interval-ms', '300', '--park-after-ms', '300']);
    tap = await tapped(log, upstream.url);
    start = replicasOf(tap.url, replicas);
    const a = await start();
    const b = await start();
    const busyLog = join(tempDir(), 'busy.log');
    const r = await callTool(a.url, 'busy', { seconds: 4, log: busyLog });
    const taskId = r.result.taskId as string;
    assert.ok(taskId, 'a task at the gateway');
    const upId = await until('the upstream task polled by replica a', () => polledTask(log, 'busy'), 10_000);
    await a.stop('SIGKILL');
    const killedAt = Date.now();
    const done = await waitForTask(b.url, taskId, undefined, { timeoutMs: LEASE_MS + 15_000 });
    assert.equal(done.status, 'completed', JSON.stringify(done));
    assert.match(textOf(done.result), /^Busy for 4 s in \d+$/);
    assert.equal(callsOf(log, 'busy').length, 1, 'the tool was called upstream once');
    assert.equal(readFileSync(busyLog, 'utf8').split('\n').filter((l) => l.startsWith('START ')).length, 1, 'and ran once');
    assert.ok(reached(log).some((x) => x.at > killedAt && x.msg.method === 'tasks/get' && x.msg.params.taskId === upId), 'replica b followed the same upstream task');
  });

  it("kill -9 while the upstream task waits for a person: the person answers late on the other replica, and the upstream task completes with the answer", async () => {
    const [, b] = replicas;
    const c = await start();
    const r = await callTool(b!.url, 'confirm_delete', { filename: 'lunch.txt' });
    const taskId = r.result.taskId as string;
    await waitForTask(b!.url, taskId, (t) => t.status === 'input_required');
    const upId = await until('the upstream task followed', () => polledTask(log, 'confirm_delete'), 10_000);
    await b!.stop('SIGKILL');
    // The person comes back after lunch, on the replica that is left: slower than the takeover and than either side's
    // --park-after-ms (300).
    const asked: string[] = [];
    const person = new TaskClient({
      url: c.url,
      status: 'poll',
      elicitation: async (p) => {
        asked.push(String(p.message));
        await sleep(1000);
        return { action: 'accept', content: { confirm: true } };
      },
    });
    try {
      const call = await person.followTask(taskId);
      assert.equal(textOf((await call.result()) as never), 'Deleted lunch.txt');
      assert.ok(asked.includes('Delete lunch.txt?'), `the question reached the person: ${asked.join(' | ')}`);
    } finally {
      await person.close();
    }
    assert.equal(callsOf(log, 'confirm_delete').length, 1, 'the tool was called upstream once');
    const update = reached(log).find((x) => x.msg.method === 'tasks/update' && x.msg.params.taskId === upId);
    assert.deepEqual(update?.msg.params.inputResponses, { confirm: { action: 'accept', content: { confirm: true } } }, 'the answer reached the same upstream task');
  });
});

describe(`gateway replicas resume following an upstream task (server-everything, 2025-11-25 over HTTP; lease ${LEASE_MS} ms)`, () => {
  const log = join(tempDir(), 'tap.log');
  const replicas: ServerProcess[] = [];
  let everything: { start(): Promise<void>; stop(): Promise<unknown> } | undefined;
  let tap: { url: string; stop: () => Promise<void> } | undefined;
  let start: () => Promise<ServerProcess>;
  after(async () => {
    await Promise.all(replicas.map((r) => r.stop()));
    await tap?.stop();
    await everything?.stop();
  });

  it('kill -9 of the replica following it: another replica follows the task in its session to the report; the tool ran once', async () => {
    const port = await freePort();
    everything = httpServiceProcess('server-everything', 'env', [`PORT=${port}`, NODE, EVERYTHING, 'streamableHttp'], `http://127.0.0.1:${port}/mcp`);
    await everything.start();
    tap = await tapped(log, `http://127.0.0.1:${port}/mcp`);
    start = replicasOf(tap.url, replicas);
    const a = await start();
    const b = await start();
    const r = await callTool(a.url, 'simulate-research-query', { topic: 'replicas' });
    const taskId = r.result.taskId as string;
    assert.ok(taskId, 'a task at the gateway');
    const upId = await until('the upstream task polled by replica a', () => polledTask(log, 'simulate-research-query'), 10_000);
    await a.stop('SIGKILL');
    const killedAt = Date.now();
    const done = await waitForTask(b.url, taskId, undefined, { timeoutMs: LEASE_MS + 15_000 });
    assert.equal(done.status, 'completed', JSON.stringify(done));
    assert.match(textOf(done.result), /^# Research Report: replicas/);
    assert.equal(callsOf(log, 'simulate-research-query').length, 1, 'the tool was called upstream once');
    assert.ok(reached(log).some((x) => x.at > killedAt && x.msg.method === 'tasks/result' && x.msg.params.taskId === upId), 'replica b took the result of the same upstream task');
  });

  it('an upstream that forgot the task (restarted while no replica followed it): the call fails naming the lost upstream call and task', async () => {
    const b = replicas[1]!;
    const r = await callTool(b.url, 'simulate-research-query', { topic: 'forgotten' });
    const taskId = r.result.taskId as string;
    await until('the upstream task polled by replica b', () => callsOf(log, 'simulate-research-query').length === 2 && polledTask(log, 'simulate-research-query'), 10_000);
    await b.stop('SIGKILL');
    await everything!.stop();
    await everything!.start(); // the same port: its sessions, and their tasks, are gone
    const c = await start();
    const failed = await waitForTask(c.url, taskId, undefined, { timeoutMs: LEASE_MS + 15_000 });
    assert.equal(failed.status, 'failed', JSON.stringify(failed));
    assert.equal(failed.error.data.reason, 'upstream_lost');
    assert.match(failed.error.message, /the call of "simulate-research-query" on upstream "up" was lost: its upstream task \S+ could not be followed again after the replica following it stopped/);
    assert.equal(callsOf(log, 'simulate-research-query').length, 2, 'and was not called again');
  });
});
