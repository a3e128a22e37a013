/**
 * Server module for (ae)'s baseline (bench/gateway-rows.ts), served by `outlast serve`: the application of (s), the
 * 39 plain tools of bench/app-tools.ts, plus
 *   park   policy 'always': stays working until the process stops (retry-safe, so stopping writes nothing).
 */
import { defineServer } from '../src/server/module/module.js';
import { registerAppTools } from './app-tools.js';

export default defineServer({
  info: { name: 'outlast-poll-bench', version: '0.0.0' },
  setup(outlast) {
    outlast.tool('park', { description: 'Parks until shutdown.', policy: 'always', retrySafe: true }, (_a, ctx) =>
      new Promise<never>((_, reject) => ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason), { once: true })));
  },
  register(mcp) {
    registerAppTools(mcp, 39);
  },
});
