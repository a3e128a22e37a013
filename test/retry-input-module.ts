/** A server module for the crash tests: a retry-safe tool that asks two questions in turn. */
import { defineServer } from '../src/server/module/module.js';

export default defineServer({
  info: { name: 'retry-input', version: '0.0.0' },
  setup(outlast) {
    outlast.tool('approve', { description: 'Asks for approval, then for a second confirmation.', policy: 'always', retrySafe: true }, async (_a, ctx) => {
      const first = await ctx.elicit('Approve the migration?', { type: 'object', properties: { ok: { type: 'boolean' } } }, { key: 'approval' });
      await ctx.status('approved; asking the second question');
      const second = await ctx.elicit('Really?', { type: 'object', properties: { ok: { type: 'boolean' } } }, { key: 'second' });
      return { content: [{ type: 'text', text: `${first.action}/${second.action}: approved on attempt ${ctx.attempt}` }] };
    });
  },
});
