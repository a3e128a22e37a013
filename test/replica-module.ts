/**
 * A server module for the multi-replica tests. Every handler start is appended to $OUTLAST_RUN_LOG (one JSON line:
 * tool, key, pid, attempt), so a test can count how often each call really ran and where.
 */
import { appendFileSync } from 'node:fs';
import { setTimeout as delay } from 'node:timers/promises';
import { z } from 'zod';
import { defineServer } from '../src/server/module/module.js';
import type { TaskContext } from '../src/runtime/context.js';

function record(tool: string, key: string, ctx: TaskContext): void {
  const log = process.env.OUTLAST_RUN_LOG;
  if (log) appendFileSync(log, JSON.stringify({ tool, key, pid: process.pid, attempt: ctx.attempt }) + '\n');
}

const work = { key: z.string(), ms: z.number().int().min(0) };

async function run(tool: string, { key, ms }: { key: string; ms: number }, ctx: TaskContext) {
  record(tool, key, ctx);
  await ctx.status(`working on ${key} in ${process.pid}`);
  await delay(ms, undefined, { signal: ctx.signal });
  return { content: [{ type: 'text' as const, text: JSON.stringify({ key, pid: process.pid, attempt: ctx.attempt }) }] };
}

export default defineServer({
  info: { name: 'replica-tests', version: '0.0.0' },
  setup(outlast) {
    outlast.tool('work', { description: 'Sleeps ms, then says which process ran it. Not safe to re-run.', inputSchema: work, policy: 'always' }, (a, ctx) => run('work', a, ctx));
    outlast.tool('work_safe', { description: 'Like work, declared safe to re-run.', inputSchema: work, policy: 'always', retrySafe: true }, (a, ctx) =>
      run('work_safe', a, ctx));
    outlast.tool('approve', { description: 'Asks for approval, then says which process finished it.', inputSchema: { key: z.string() }, policy: 'always', retrySafe: true },
      async ({ key }, ctx) => {
        record('approve', key, ctx);
        const answer = await ctx.elicit(`Approve ${key}?`, { type: 'object', properties: { ok: { type: 'boolean' } } }, { key: 'approval' });
        return { content: [{ type: 'text', text: JSON.stringify({ key, pid: process.pid, action: answer.action, content: answer.content ?? null }) }] };
      });
  },
});
