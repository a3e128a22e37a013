/**
 * Server module for (ad.front) (bench/gateway-rows.ts), served by `outlast serve --handles`: server-everything's `echo`
 * answered in-process, with the same JSON Schema and policy as the gateway's mirror of it: the gateway's front and
 * runtime without the upstream leg.
 */
import { defineServer } from '../src/server/module/module.js';

export default defineServer({
  info: { name: 'outlast-echo-bench', version: '0.0.0' },
  setup(outlast) {
    outlast.tool(
      'echo',
      { description: 'Echoes back the input string', inputJsonSchema: { type: 'object', properties: { message: { type: 'string', description: 'Message to echo' } }, required: ['message'] } },
      async (args) => ({ content: [{ type: 'text' as const, text: `Echo: ${String(args.message)}` }] }),
    );
  },
});
