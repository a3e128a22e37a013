/**
 * A server module for the clock-skew tests: a task that holds, a durable question with a deadline and a durable
 * sleep, each long-lived enough that a replica deciding on its own (skewed) clock would end it early.
 */
import { setTimeout as delay } from 'node:timers/promises';
import { z } from 'zod';
import { defineServer } from '../src/server/module/module.js';

export default defineServer({
  info: { name: 'clock-tests', version: '0.0.0' },
  setup(outlast) {
    outlast.tool('hold', { description: 'Holds for ms, then completes.', inputSchema: { ms: z.number().int().min(0) }, policy: 'always' }, async ({ ms }, ctx) => {
      await delay(ms, undefined, { signal: ctx.signal });
      return { content: [{ type: 'text' as const, text: 'held' }] };
    });
    outlast.tool('brief', { description: 'A task with a 1.5 s TTL (a marker: once it reads expired, sweeps have run).', inputSchema: {}, policy: 'always', ttlMs: 1500 },
      async (_a, ctx) => {
        await delay(60_000, undefined, { signal: ctx.signal }).catch(() => undefined);
        return { content: [{ type: 'text' as const, text: 'brief' }] };
      });
    outlast.tool('question', { description: 'Durable: asks a question with a deadline of timeoutMs.', inputSchema: { timeoutMs: z.number().int().min(1) }, policy: 'always', durable: true },
      async ({ timeoutMs }, ctx) => {
        const r = await ctx.elicit('Go on?', { type: 'object', properties: { ok: { type: 'boolean' } } }, { key: 'go', timeoutMs });
        return { content: [{ type: 'text' as const, text: r.action }] };
      });
    outlast.tool('nap', { description: 'Durable: sleeps ms (a parked wait), then completes.', inputSchema: { ms: z.number().int().min(0) }, policy: 'always', durable: true },
      async ({ ms }, ctx) => {
        await ctx.sleep('nap', ms);
        return { content: [{ type: 'text' as const, text: 'woke' }] };
      });
  },
});
