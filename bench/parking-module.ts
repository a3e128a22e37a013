/**
 * Server module for the parked-resume benchmark (bench/parking-rows.ts, row o), served by `outlast serve`. Times are
 * epoch milliseconds with sub-millisecond resolution (performance.timeOrigin + performance.now()), comparable between
 * processes on one host.
 *   held   durable: one step, then a form question (its wait is parked), then returns {resumedAt, pid, attempt}: the
 *          time the handler, resumed by a claim and replayed (its step from the store, the answer from the row), got
 *          past the question.
 */
import { performance } from 'node:perf_hooks';
import { defineServer } from '../src/server/module/module.js';

const now = () => performance.timeOrigin + performance.now();

export default defineServer({
  info: { name: 'outlast-parking-bench', version: '0.0.0' },
  setup(outlast) {
    outlast.tool('held', { description: 'A step, a parked question, then says when it resumed.', policy: 'always', durable: true }, async (_a, ctx) => {
      await ctx.step('before', () => ({ pid: process.pid }));
      await ctx.elicit('Go?', { type: 'object', properties: { go: { type: 'boolean' } } }, { key: 'go' });
      const resumedAt = now();
      return { content: [{ type: 'text' as const, text: JSON.stringify({ resumedAt, pid: process.pid, attempt: ctx.attempt }) }] };
    });
  },
});
