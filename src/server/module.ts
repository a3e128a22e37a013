/** The shape of a server module that `outlast serve MODULE` loads. */
import { McpServer, type McpServerOptions, type ServerNotifier } from '@modelcontextprotocol/server';
import type { Outlast } from './outlast.js';
import type { ServerFactory } from './http.js';
import type { HandleOptions } from './handles.js';

export interface OutlastServerModule {
  /** Server identity reported in server/discover. */
  info: { name: string; version: string; title?: string; description?: string };
  /** McpServer options (instructions, capabilities, requestState codec, cache hints, ...). */
  serverOptions?: McpServerOptions;
  /** Durable work for clients with no task support, through a handle and plain status/cancel tools. */
  handles?: boolean | HandleOptions;
  /** Called once at start-up: define the tools that may outlast their request with `outlast.tool(...)`. */
  setup?(outlast: Outlast): void | Promise<void>;
  /** Called for every McpServer instance: register plain SDK tools, prompts and resources. */
  register?(mcp: McpServer, ctx: { notify: ServerNotifier | undefined }): void;
}

/** Identity function that gives a server module its type. */
export function defineServer(m: OutlastServerModule): OutlastServerModule {
  return m;
}

/** The per-request factory for a module. */
export function moduleFactory(m: OutlastServerModule, notify: () => ServerNotifier | undefined): ServerFactory {
  return () => {
    const mcp = new McpServer(m.info, m.serverOptions);
    m.register?.(mcp, { notify: notify() });
    return mcp;
  };
}
