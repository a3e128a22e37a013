/**
 * Plain SDK tools, prompts and resources defined once. The SDK's stateless handler builds an McpServer for every
 * request, so a factory that registers tools rebuilds their schemas every time, and whatever a library caches per
 * schema object accumulates for good: `fromJsonSchema()` of @modelcontextprotocol/server 2.4 compiles into one
 * module-wide Ajv cache keyed by the schema object (typescript-sdk #2605), so one such tool registered per request
 * leaks a compiled validator per request. Here `define` runs once, against a recorder; every per-request McpServer
 * then gets the same registrations, with the very same schema and callback objects.
 */
import { McpServer, type Implementation, type McpServerOptions } from '@modelcontextprotocol/server';

/** What `define` may call: the registrations that can be replayed on a fresh McpServer. */
export interface DefinitionSurface {
  registerTool: McpServer['registerTool'];
  registerPrompt: McpServer['registerPrompt'];
  registerResource: McpServer['registerResource'];
  server: { registerCapabilities: McpServer['server']['registerCapabilities'] };
}

export interface Definitions {
  /** Registers every recorded definition on `mcp`, in the order they were made. */
  replay(mcp: McpServer): void;
  /** How many registrations were recorded. */
  readonly size: number;
}

type Recorded =
  | { on: 'mcp'; method: 'registerTool' | 'registerPrompt' | 'registerResource'; args: unknown[] }
  | { on: 'server'; method: 'registerCapabilities'; args: unknown[] };

const ALLOWED = 'registerTool, registerPrompt, registerResource and server.registerCapabilities';

/** A surface that refuses anything else by name, so a definition that cannot be replayed fails at start-up. */
function guarded<T extends object>(target: T, where: string): T {
  return new Proxy(target, {
    get(t, key, receiver) {
      if (typeof key === 'string' && !(key in t)) {
        throw new TypeError(`define() records ${ALLOWED} only; ${where}${key} is not one of them (do it in register(), which runs per request)`);
      }
      return Reflect.get(t, key, receiver);
    },
  });
}

/**
 * Runs `define` once against a recorder and returns what replays it. The recorder is a real McpServer built with
 * `info` and `options`, so the SDK checks each definition (duplicate names, schemas) at start-up. The handles the
 * calls return (RegisteredTool...) belong to that recorder: enabling, disabling or updating them changes nothing
 * that is served; tools that change at run time belong in a per-request `register`.
 */
export function recordDefinitions(define: (mcp: DefinitionSurface) => void, info: Implementation, options?: McpServerOptions): Definitions {
  const recorder = new McpServer(info, options);
  const recorded: Recorded[] = [];
  const onMcp = (method: 'registerTool' | 'registerPrompt' | 'registerResource') =>
    ((...args: unknown[]) => {
      const handle = (recorder[method] as (...a: unknown[]) => unknown)(...args);
      recorded.push({ on: 'mcp', method, args });
      return handle;
    }) as never;
  const surface: DefinitionSurface = {
    registerTool: onMcp('registerTool'),
    registerPrompt: onMcp('registerPrompt'),
    registerResource: onMcp('registerResource'),
    server: guarded(
      {
        registerCapabilities: ((...args: unknown[]) => {
          (recorder.server.registerCapabilities as (...a: unknown[]) => void)(...args);
          recorded.push({ on: 'server', method: 'registerCapabilities', args });
        }) as never,
      },
      'server.',
    ),
  };
  define(guarded(surface, ''));
  return {
    size: recorded.length,
    replay(mcp) {
      for (const r of recorded) {
        const target = (r.on === 'mcp' ? mcp : mcp.server) as unknown as Record<string, (...a: unknown[]) => unknown>;
        target[r.method]!(...r.args);
      }
    },
  };
}
