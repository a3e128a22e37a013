/** stdio for Outlast: the SDK's serveStdio with the Tasks extension attached to every instance. */
import { serveStdio } from '@modelcontextprotocol/server/stdio';
import type { Outlast } from './outlast.js';
import type { ServerFactory } from './http.js';

export async function serveOutlastStdio(outlast: Outlast, factory: ServerFactory, onerror?: (e: Error) => void): Promise<{ close(): Promise<void> }> {
  await outlast.start();
  return serveStdio(async (ctx) => outlast.attach(await factory(ctx), ctx.era), { ...(onerror ? { onerror } : {}) });
}
