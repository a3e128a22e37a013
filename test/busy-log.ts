/** Reading the log the `busy` fixture writes (START/END lines with task id, pid and epoch ms) and calling it. */
import { existsSync, readFileSync } from 'node:fs';
import assert from 'node:assert/strict';
import { callTool, sleep, type RpcOptions, type RpcReply } from './helpers.js';

export interface BusyEvent {
  kind: 'START' | 'END';
  taskId: string;
  pid: number;
  at: number;
}

export function busyEvents(path: string): BusyEvent[] {
  if (!existsSync(path)) return [];
  return readFileSync(path, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => {
      const [kind, taskId, pid, at] = l.split(' ');
      return { kind: kind as BusyEvent['kind'], taskId: taskId!, pid: Number(pid), at: Number(at) };
    });
}

/** Most handlers running at once according to the log (an END at the same millisecond as a START counts first). */
export function maxConcurrent(events: BusyEvent[]): number {
  const sorted = [...events].sort((a, b) => a.at - b.at || (a.kind === 'END' ? -1 : 1));
  let now = 0;
  let max = 0;
  for (const e of sorted) {
    now += e.kind === 'START' ? 1 : -1;
    max = Math.max(max, now);
  }
  return max;
}

/** Waits until the log holds `ends` END lines. */
export async function waitForEnds(path: string, ends: number, timeoutMs: number): Promise<BusyEvent[]> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const events = busyEvents(path);
    if (events.filter((e) => e.kind === 'END').length >= ends) return events;
    if (Date.now() > deadline) assert.fail(`only ${events.filter((e) => e.kind === 'END').length} of ${ends} busy calls ended in ${timeoutMs} ms`);
    await sleep(100);
  }
}

/** One busy call: a task id (the call became a task), or 'inline' (it completed inline). Fails on an error. */
export async function busy(url: string, seconds: number, log: string, opts: RpcOptions = {}): Promise<{ taskId: string | undefined; reply: RpcReply }> {
  let reply = await callTool(url, 'busy', { seconds, log }, opts);
  // A replica that could not reach its store in time (a loaded machine) stored nothing and says when to retry, as a client does.
  for (let tries = 0; reply.error?.code === -31504 && reply.error.data?.stored === 'no' && tries < 20; tries++) {
    await sleep(Number(reply.error.data.retryAfterMs) || 250);
    reply = await callTool(url, 'busy', { seconds, log }, opts);
  }
  assert.equal(reply.error, undefined, JSON.stringify(reply.error));
  if (reply.result.resultType === 'task') return { taskId: reply.result.taskId as string, reply };
  assert.equal(reply.result.isError, undefined, JSON.stringify(reply.result));
  return { taskId: undefined, reply };
}
