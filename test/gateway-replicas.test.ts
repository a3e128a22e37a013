// test:pg-replicas: starts PostgreSQL replicas (scripts/test.mjs runs at most three such files at once).
/**
 * `outlast gateway` replicas on one PostgreSQL schema in front of server-everything (stdio, one pool per replica):
 * a replica killed (SIGKILL) mid-call loses nothing it may not lose. A read-only upstream call is run again on another
 * replica and completes there; a call that is not safe to re-run fails, naming the upstream call that was lost.
 */
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { ROOT, callTool, freshSchema, pgStoreUrl, sleep, startServer, tempDir, textOf, waitForTask, type ServerProcess } from './helpers.js';
import { TaskClient } from '../src/client/index.js';

const EVERYTHING = join(ROOT, 'node_modules', '@modelcontextprotocol', 'server-everything', 'dist', 'index.js');
const UPSTREAMS = join(ROOT, 'dist', 'test', 'gateway-upstreams.js');
const NODE = process.execPath;
const LEASE_MS = 1500;

/** The tools/call lines the taps passed to an upstream ("PID > {…}"). */
function tapped(log: string): string[] {
  return existsSync(log) ? readFileSync(log, 'utf8').split('\n').filter((l) => / > .*"method":"tools\/call"/.test(l)) : [];
}

describe(`gateway replicas on one PostgreSQL schema (lease ${LEASE_MS} ms)`, () => {
  const store = pgStoreUrl(freshSchema('gw'));
  const log = join(tempDir(), 'tap.log');
  const replicas: ServerProcess[] = [];
  const start = async () => {
    const r = await startServer(['--store', `${store}&pool=3`, '--lease-ms', String(LEASE_MS), '--heartbeat-ms', '200', '--inline-budget-ms', '300', '--upstream-pool', '1'], {
      command: ['gateway', '--stdio', `${NODE} ${UPSTREAMS} tap ${log} ${NODE} ${EVERYTHING} stdio`, '--name', 'everything'],
    });
    replicas.push(r);
    return r;
  };

  after(async () => {
    await Promise.all(replicas.map((r) => r.stop()));
    // A killed replica's upstream processes outlive it until their stdin's end reaches them: end them here.
    if (!existsSync(log)) return;
    for (const m of readFileSync(log, 'utf8').matchAll(/^(\d+) (?:started|child (\d+))$/gm)) {
      for (const pid of [m[1], m[2]]) {
        try {
          if (pid) process.kill(Number(pid), 'SIGKILL');
        } catch {
          /* gone */
        }
      }
    }
  });

  it('kill -9 of the replica holding a read-only call: it runs again on another replica, which a 2026 client polls to the result', async () => {
    const a = await start();
    const b = await start();
    // Long enough that the kill lands mid-call on a loaded machine (its first progress comes after a second).
    const r = await callTool(a.url, 'trigger-long-running-operation', { duration: 5, steps: 5 });
    const taskId = r.result.taskId as string;
    assert.ok(taskId, 'a task');
    await waitForTask(a.url, taskId, (t) => /^progress/.test(t.statusMessage ?? ''));
    await a.stop('SIGKILL');
    // A 2026 client polls the task, made on the dead replica, on the live one.
    const client = new TaskClient({ url: b.url, status: 'poll' });
    try {
      const deadline = Date.now() + LEASE_MS + 20_000;
      let task = await client.getTask(taskId);
      while (!['completed', 'failed', 'cancelled'].includes(task.status) && Date.now() < deadline) {
        await sleep(250);
        task = await client.getTask(taskId);
      }
      assert.equal(task.status, 'completed', JSON.stringify(task));
      assert.equal(textOf((task as unknown as { result: Record<string, any> }).result), 'Long running operation completed. Duration: 5 seconds, Steps: 5.');
    } finally {
      await client.close();
    }
    const runs = tapped(log).filter((l) => l.includes('"trigger-long-running-operation"') && l.includes('"duration":5'));
    assert.equal(new Set(runs.map((l) => l.split(' ')[0])).size, 2, 'the upstream call was made twice, by two upstream processes (one per replica)');
  });

  it('kill -9 of the replica holding a call that is not safe to re-run: the task fails naming the lost upstream call', async () => {
    const b = replicas[1]!;
    const c = await start();
    const r = await callTool(b.url, 'trigger-elicitation-request', {});
    const taskId = r.result.taskId as string;
    await waitForTask(b.url, taskId, (t) => t.status === 'input_required');
    await b.stop('SIGKILL');
    const failed = await waitForTask(c.url, taskId, undefined, { timeoutMs: LEASE_MS + 10_000 });
    assert.equal(failed.status, 'failed');
    assert.equal(failed.error.data.reason, 'worker_lost');
    assert.match(failed.error.message, /stopped before it finished \(the call of "trigger-elicitation-request" on upstream "everything" was lost with it\); "trigger-elicitation-request" is not declared safe to re-run/);
  });
});
