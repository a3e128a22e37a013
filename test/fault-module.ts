/**
 * A server module for the store-fault tests: `hold` (not safe to re-run) and `hold_safe` (declared safe) wait `ms`
 * and say which process ran them. Each start, abort and end is appended to $OUTLAST_RUN_LOG with the time (one
 * JSON line: tool, key, pid, attempt, event, at), so a test can tell when a run stopped and whether two ran at once.
 */
import { appendFileSync } from 'node:fs';
import { setTimeout as delay } from 'node:timers/promises';
import { z } from 'zod';
import { defineServer } from '../src/server/module/module.js';
import type { TaskContext } from '../src/runtime/context.js';

function note(tool: string, key: string, ctx: TaskContext, event: 'start' | 'abort' | 'end'): void {
  const log = process.env.OUTLAST_RUN_LOG;
  if (log) appendFileSync(log, JSON.stringify({ tool, key, pid: process.pid, attempt: ctx.attempt, event, at: Date.now() }) + '\n');
}

const args = { key: z.string(), ms: z.number().int().min(0) };

async function run(tool: string, { key, ms }: { key: string; ms: number }, ctx: TaskContext) {
  note(tool, key, ctx, 'start');
  ctx.signal.addEventListener('abort', () => note(tool, key, ctx, 'abort'), { once: true });
  await delay(ms, undefined, { signal: ctx.signal });
  note(tool, key, ctx, 'end');
  return { content: [{ type: 'text' as const, text: JSON.stringify({ key, pid: process.pid, attempt: ctx.attempt }) }] };
}

export default defineServer({
  info: { name: 'fault-tests', version: '0.0.0' },
  setup(outlast) {
    outlast.tool('hold', { description: 'Waits ms. Not safe to re-run.', inputSchema: args, policy: 'always' }, (a, ctx) => run('hold', a, ctx));
    outlast.tool('hold_safe', { description: 'Waits ms; safe to re-run.', inputSchema: args, policy: 'always', retrySafe: true }, (a, ctx) => run('hold_safe', a, ctx));
  },
});
