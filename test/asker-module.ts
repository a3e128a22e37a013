/**
 * A server whose name and question carry markup, for the answer page's "who is asking" (everything shown escaped):
 * `approve_deploy` asks one question with a deadline of ten minutes.
 */
import { defineServer } from '../src/server/module/module.js';

export default defineServer({
  info: { name: 'Deploys <b>&</b> "Co"', version: '1.0.0' },
  handles: true,
  setup(outlast) {
    outlast.tool(
      'approve_deploy',
      { description: 'Asks a person to approve a deploy.', inputSchema: {}, policy: 'always' },
      async (_args, ctx) => {
        const answer = await ctx.elicit('Deploy <img src=x> to production?', { type: 'object', properties: { ok: { type: 'boolean', title: 'Deploy' } } }, { key: 'deploy', timeoutMs: 600_000 });
        return { content: [{ type: 'text' as const, text: `deploy ${answer.action}` }] };
      },
    );
  },
});
