/**
 * Server module for the queue latency benchmark (bench/queue-rows.ts, row q), served by `outlast serve`. Times are
 * epoch milliseconds with sub-millisecond resolution (performance.timeOrigin + performance.now()), comparable between
 * processes on one host; each tool returns them in its result.
 *   gate   holds a handler slot for `ms`, then returns {startedAt, endedAt, pid}.
 *   probe  returns {startedAt, pid} at once (the time its handler started).
 */
import { performance } from 'node:perf_hooks';
import { setTimeout as delay } from 'node:timers/promises';
import { z } from 'zod';
import { defineServer } from '../src/server/module/module.js';

const now = () => performance.timeOrigin + performance.now();
const json = (v: Record<string, unknown>) => ({ content: [{ type: 'text' as const, text: JSON.stringify(v) }] });

export default defineServer({
  info: { name: 'outlast-queue-bench', version: '0.0.0' },
  setup(outlast) {
    outlast.tool('gate', { description: 'Holds a slot for ms.', inputSchema: { ms: z.number().int() }, policy: 'always' }, async ({ ms }, ctx) => {
      const startedAt = now();
      await delay(ms, undefined, { signal: ctx.signal });
      return json({ startedAt, endedAt: now(), pid: process.pid });
    });
    outlast.tool('probe', { description: 'Says when it started.', policy: 'always' }, () => json({ startedAt: now(), pid: process.pid }));
  },
});
