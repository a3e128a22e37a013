/** A server module for the security tests: tools whose status, failure and question texts are as large as asked. */
import { setTimeout as delay } from 'node:timers/promises';
import { z } from 'zod';
import { TaskProtocolError } from '../src/protocol/index.js';
import { defineServer } from '../src/server/module.js';

export default defineServer({
  info: { name: 'security-tests', version: '0.0.0' },
  setup(outlast) {
    outlast.tool('loud_status', { description: 'Sets a status message of `bytes` bytes, then waits `ms`.', inputSchema: { bytes: z.number().int(), ms: z.number().int() }, policy: 'always' }, async ({ bytes, ms }, ctx) => {
      await ctx.status(`status ${'s'.repeat(bytes)}`);
      await delay(ms, undefined, { signal: ctx.signal });
      return { content: [{ type: 'text' as const, text: 'done' }] };
    });
    outlast.tool('loud_failure', { description: 'Fails with a JSON-RPC error whose message is `bytes` bytes.', inputSchema: { bytes: z.number().int() }, policy: 'always' }, async ({ bytes }) => {
      throw new TaskProtocolError(-32000, `failure ${'e'.repeat(bytes)}`, { reason: 'loud', blob: 'd'.repeat(bytes) });
    });
    outlast.tool('loud_question', { description: 'Asks a question whose message is `bytes` bytes.', inputSchema: { bytes: z.number().int() }, policy: 'always' }, async ({ bytes }, ctx) => {
      const r = await ctx.elicit(`question ${'q'.repeat(bytes)}`, { type: 'object', properties: { ok: { type: 'boolean' } } }, { key: 'loud' });
      return { content: [{ type: 'text' as const, text: `answer ${JSON.stringify(r.content ?? null)}` }] };
    });
  },
});
