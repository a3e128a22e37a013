/** The shape of a server module that `outlast serve MODULE` loads. */
import { McpServer, type McpServerOptions, type ServerNotifier } from '@modelcontextprotocol/server';
import type { Outlast } from '../outlast.js';
import type { ServerFactory } from '../front/index.js';
import type { HandleOptions } from '../no-tasks/handles.js';
import { recordDefinitions, type DefinitionSurface } from './definitions.js';

export interface OutlastServerModule {
  /** Server identity reported in server/discover. */
  info: { name: string; version: string; title?: string; description?: string };
  /** McpServer options (instructions, capabilities, requestState codec, cache hints, ...). */
  serverOptions?: McpServerOptions;
  /** Durable work for clients with no task support, through a handle and plain status/cancel tools. */
  handles?: boolean | HandleOptions;
  /** Called once at start-up: define the tools that may outlast their request with `outlast.tool(...)`. */
  setup?(outlast: Outlast): void | Promise<void>;
  /**
   * Called once at start-up: register plain SDK tools, prompts and resources (and capabilities) that do not change
   * per request. Each is replayed, with the same schema and callback objects, on every request's McpServer, before
   * `register`'s. `notify()` gives the HTTP handler's notifier once serving (undefined before, and on stdio).
   */
  define?(mcp: DefinitionSurface, ctx: { notify: () => ServerNotifier | undefined }): void;
  /** Called for every McpServer instance (once per request): what must be built per request. Build schemas
   *  (fromJsonSchema above all) outside it: see the README, "What not to do in register". */
  register?(mcp: McpServer, ctx: { notify: ServerNotifier | undefined }): void;
}

/** Identity function that gives a server module its type. */
export function defineServer(m: OutlastServerModule): OutlastServerModule {
  return m;
}

/** The per-request factory for a module (runs the module's `define` once, now). */
export function moduleFactory(m: OutlastServerModule, notify: () => ServerNotifier | undefined): ServerFactory {
  const defined = m.define ? recordDefinitions((mcp) => m.define!(mcp, { notify }), m.info, m.serverOptions) : undefined;
  return () => {
    const mcp = new McpServer(m.info, m.serverOptions);
    defined?.replay(mcp);
    m.register?.(mcp, { notify: notify() });
    return mcp;
  };
}
