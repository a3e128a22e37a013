/** A server module for the MCP Events tests: a task that sleeps, one whose result is larger than one event may carry, one that asks. */
import { setTimeout as delay } from 'node:timers/promises';
import { z } from 'zod';
import { defineServer } from '../src/server/module/module.js';

export default defineServer({
  info: { name: 'events-tests', version: '0.0.0' },
  setup(outlast) {
    outlast.tool('work', { description: 'Sleeps ms, then answers.', inputSchema: { key: z.string(), ms: z.number().int().min(0) }, policy: 'always' }, async ({ key, ms }, ctx) => {
      await delay(ms, undefined, { signal: ctx.signal });
      return { content: [{ type: 'text' as const, text: `done ${key}` }] };
    });
    outlast.tool('ask', { description: 'Asks a question, then answers with the reply.', inputSchema: {}, policy: 'always' }, async (_a, ctx) => {
      const r = await ctx.elicit('Deploy now?', { type: 'object', properties: { ok: { type: 'boolean' } } }, { key: 'deploy' });
      return { content: [{ type: 'text' as const, text: `answer ${JSON.stringify(r.content ?? null)}` }] };
    });
    outlast.tool('big', { description: 'Answers with about 300 KiB of text.', inputSchema: {}, policy: 'always' }, async () => ({
      content: [{ type: 'text' as const, text: 'x'.repeat(300 * 1024) }],
    }));
  },
});
