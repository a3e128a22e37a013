/** stdio for Outlast: the SDK's serveStdio with the Tasks extension attached to every instance, a server span per
 *  request (stdio-spans.ts), and `tasks/stream` for task output (stdio-task-stream.ts). */
import { StdioServerTransport, serveStdio } from '@modelcontextprotocol/server/stdio';
import type { Transport } from '@modelcontextprotocol/server';
import type { Outlast } from '../outlast.js';
import type { ServerFactory } from '../http.js';
import { TracedTransport } from './stdio-spans.js';
import { TaskStreamTransport } from './stdio-task-stream.js';
import { refuseServingDuringServeImport } from '../module/served-module.js';

export interface StdioOptions {
  onerror?: (e: Error) => void;
  /** A server span for `tasks/get` too (off: polling is the hot path). */
  tracePolls?: boolean;
  /** The transport to serve (default: a `StdioServerTransport` over this process's stdin and stdout). */
  transport?: Transport;
}

export async function serveOutlastStdio(outlast: Outlast, factory: ServerFactory, options: StdioOptions | ((e: Error) => void) = {}): Promise<{ close(): Promise<void> }> {
  refuseServingDuringServeImport('serveOutlastStdio');
  const { onerror, tracePolls, transport } = typeof options === 'function' ? { onerror: options } : options;
  await outlast.start();
  outlast.servedBy({ notify: () => undefined });
  outlast.taskStreamOn = true;
  return serveStdio(async (ctx) => outlast.attachForFront(await factory(ctx), ctx.era), {
    transport: new TaskStreamTransport(new TracedTransport(transport ?? new StdioServerTransport(), { polls: tracePolls }), outlast),
    ...(onerror ? { onerror } : {}),
  });
}
