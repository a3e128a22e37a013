/**
 * Server module for the multi-replica benchmarks (served by `outlast serve`). Times are epoch milliseconds with
 * sub-millisecond resolution (performance.timeOrigin + performance.now()), comparable between processes on one host.
 *   hold    parks until cancelled; appends {key, abortedAt} to $OUTLAST_BENCH_LOG when its signal fires.
 *   ticker  sets its status `count` times, every `everyMs`; each message is the time it was set.
 *   work    sleeps `ms`, declared safe to re-run; appends {key, startedAt, pid} to $OUTLAST_BENCH_LOG at each start.
 *   out_burst   emits `count` text outputs "line k", each awaited, back to back (policy 'always': a task from the start).
 *   out_ticker  emits `count` text outputs (ctx.output), every `everyMs`; each text is "i time", the time it was emitted.
 */
import { appendFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { setTimeout as delay } from 'node:timers/promises';
import { z } from 'zod';
import { defineServer } from '../src/server/module/module.js';

const now = () => performance.timeOrigin + performance.now();
const log = (entry: Record<string, unknown>) => {
  if (process.env.OUTLAST_BENCH_LOG) appendFileSync(process.env.OUTLAST_BENCH_LOG, JSON.stringify(entry) + '\n');
};

export default defineServer({
  info: { name: 'outlast-cluster-bench', version: '0.0.0' },
  setup(outlast) {
    outlast.tool('hold', { description: 'Parks until cancelled.', inputSchema: { key: z.string() }, policy: 'always' }, async ({ key }, ctx) => {
      const aborted = new Promise<void>((res) => ctx.signal.addEventListener('abort', () => {
        log({ key, abortedAt: now() });
        res();
      }, { once: true }));
      await ctx.status('holding'); // listening from here on
      await aborted;
      throw ctx.signal.reason;
    });
    outlast.tool('ticker', { description: 'Sets its status every everyMs.', inputSchema: { count: z.number().int(), everyMs: z.number().int() }, policy: 'always' },
      async ({ count, everyMs }, ctx) => {
        for (let i = 0; i < count; i++) {
          await delay(everyMs, undefined, { signal: ctx.signal });
          await ctx.status(`${i} ${now()}`);
        }
        return { content: [{ type: 'text', text: 'done' }] };
      });
    outlast.tool('out_burst', { description: 'Emits count outputs back to back.', inputSchema: { count: z.number().int() }, policy: 'always' },
      async ({ count }, ctx) => {
        for (let k = 1; k <= count; k++) await ctx.output(`line ${k}`);
        return { content: [{ type: 'text', text: `emitted ${count}` }] };
      });
    outlast.tool('out_ticker', { description: 'Emits an output every everyMs.', inputSchema: { count: z.number().int(), everyMs: z.number().int() }, policy: 'always' },
      async ({ count, everyMs }, ctx) => {
        for (let i = 0; i < count; i++) {
          await delay(everyMs, undefined, { signal: ctx.signal });
          await ctx.output(`${i} ${now()}`);
        }
        return { content: [{ type: 'text', text: 'done' }] };
      });
    outlast.tool('work', { description: 'Sleeps ms; safe to re-run.', inputSchema: { key: z.string(), ms: z.number().int() }, policy: 'always', retrySafe: true },
      async ({ key, ms }, ctx) => {
        log({ key, startedAt: now(), pid: process.pid, attempt: ctx.attempt });
        await delay(ms, undefined, { signal: ctx.signal });
        return { content: [{ type: 'text', text: 'done' }] };
      });
  },
});
