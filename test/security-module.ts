/** A server module for the security tests: tools whose status, failure and question texts are as large as asked, and
 *  tools that carry a caller's text into every place a task keeps one (output, result, status, question, answer). */
import { setTimeout as delay } from 'node:timers/promises';
import { z } from 'zod';
import { TaskProtocolError } from '../src/protocol/index.js';
import { defineServer } from '../src/server/module/module.js';

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
    outlast.tool('payload_echo', { description: 'Writes "output TEXT" to its output and completes with "result TEXT".', inputSchema: { text: z.string() }, policy: 'always' }, async ({ text }, ctx) => {
      await ctx.output(`output ${text}`);
      return { content: [{ type: 'text' as const, text: `result ${text}` }] };
    });
    outlast.tool('text_everywhere', { description: 'Sets `text` as its status, writes it to its output, asks it as a question {answer: string}, and completes with {text, answer} as JSON.', inputSchema: { text: z.string() }, policy: 'always' }, async ({ text }, ctx) => {
      await ctx.status(text);
      await ctx.output(text);
      const r = await ctx.elicit(text, { type: 'object', properties: { answer: { type: 'string' } }, required: ['answer'] }, { key: 'answer' });
      return { content: [{ type: 'text' as const, text: JSON.stringify({ text, answer: r.content?.answer ?? null }) }] };
    });
  },
});
