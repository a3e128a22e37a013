/**
 * A server module for the database-outage tests (store-failover.test.ts): the mixed load of issue 27.
 * - `long`: waits `ms`, writing its status every `everyMs`; not safe to re-run;
 * - `long_safe`: the same, declared safe to re-run;
 * - `durable`: `steps` steps (not idempotent) of `stepMs` (20 by default), `everyMs` apart, with a status write between
 *   them;
 * - `durable_idem`: the same with idempotent steps.
 * Every run start, abort and end, and every step start and end, is appended to $OUTLAST_RUN_LOG with the time (one
 * JSON line: tool, key, pid, attempt, event, step?, at), so a test can count runs and steps and tell whether two runs
 * of a task overlapped.
 */
import { appendFileSync } from 'node:fs';
import { setTimeout as delay } from 'node:timers/promises';
import { z } from 'zod';
import { defineServer } from '../src/server/module/module.js';
import type { TaskContext } from '../src/runtime/context.js';

type Event = 'start' | 'abort' | 'end' | 'step-start' | 'step-end';

function note(tool: string, key: string, ctx: TaskContext, event: Event, step?: string): void {
  const log = process.env.OUTLAST_RUN_LOG;
  if (log) appendFileSync(log, JSON.stringify({ tool, key, pid: process.pid, attempt: ctx.attempt, event, ...(step ? { step } : {}), at: Date.now() }) + '\n');
}

const longArgs = { key: z.string(), ms: z.number().int().min(0), everyMs: z.number().int().min(10) };
const stepArgs = { key: z.string(), steps: z.number().int().min(1), everyMs: z.number().int().min(10), stepMs: z.number().int().min(0).optional() };

async function long(tool: string, { key, ms, everyMs }: { key: string; ms: number; everyMs: number }, ctx: TaskContext) {
  note(tool, key, ctx, 'start');
  ctx.signal.addEventListener('abort', () => note(tool, key, ctx, 'abort'), { once: true });
  const end = Date.now() + ms;
  for (let i = 1; Date.now() < end; i++) {
    await ctx.status(`${key}: tick ${i}`);
    await delay(Math.min(everyMs, Math.max(0, end - Date.now())), undefined, { signal: ctx.signal });
  }
  note(tool, key, ctx, 'end');
  return { content: [{ type: 'text' as const, text: JSON.stringify({ key, pid: process.pid, attempt: ctx.attempt }) }] };
}

async function stepped(tool: string, { key, steps, everyMs, stepMs = 20 }: { key: string; steps: number; everyMs: number; stepMs?: number | undefined }, ctx: TaskContext, idempotent: boolean) {
  note(tool, key, ctx, 'start');
  ctx.signal.addEventListener('abort', () => note(tool, key, ctx, 'abort'), { once: true });
  let sum = 0;
  for (let i = 1; i <= steps; i++) {
    const name = `s${i}`;
    sum += await ctx.step(name, async () => {
      note(tool, key, ctx, 'step-start', name);
      await delay(stepMs);
      note(tool, key, ctx, 'step-end', name);
      return i;
    }, { idempotent });
    await ctx.status(`${key}: step ${i} of ${steps}`);
    await delay(everyMs, undefined, { signal: ctx.signal });
  }
  note(tool, key, ctx, 'end');
  return { content: [{ type: 'text' as const, text: JSON.stringify({ key, sum, pid: process.pid, attempt: ctx.attempt }) }] };
}

export default defineServer({
  info: { name: 'failover-tests', version: '0.0.0' },
  setup(outlast) {
    outlast.tool('long', { description: 'Waits ms, writing its status. Not safe to re-run.', inputSchema: longArgs, policy: 'always' }, (a, ctx) => long('long', a, ctx));
    outlast.tool('long_safe', { description: 'Waits ms, writing its status; safe to re-run.', inputSchema: longArgs, policy: 'always', retrySafe: true }, (a, ctx) =>
      long('long_safe', a, ctx));
    outlast.tool('durable', { description: 'Durable steps, not idempotent.', inputSchema: stepArgs, policy: 'always', durable: true }, (a, ctx) =>
      stepped('durable', a, ctx, false));
    outlast.tool('durable_idem', { description: 'Durable idempotent steps.', inputSchema: stepArgs, policy: 'always', durable: true }, (a, ctx) =>
      stepped('durable_idem', a, ctx, true));
  },
});
