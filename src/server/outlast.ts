/**
 * The SDK glue: adds durable Tasks to an official-SDK McpServer. Advertises the extension, decides per
 * tools/call between an inline result and a CreateTaskResult, and serves tasks/get, tasks/update, tasks/cancel.
 * Everything that decides or stores lives in the runtime; this file only translates.
 */
import { McpServer, ProtocolError, type AuthInfo, type CallToolResult, type ServerContext, type StandardSchemaV1 } from '@modelcontextprotocol/server';
import * as z from 'zod';
import {
  CLIENT_CAPABILITIES_META,
  ErrorCode,
  IDEMPOTENCY_KEY_META,
  TASKS_EXTENSION,
  TaskProtocolError,
  declaresTasks,
  missingTasksCapability,
  type InputRequests,
  type JsonObject,
} from '../protocol/index.js';
import { TaskRuntime, type RuntimeOptions, type ToolSpec } from '../runtime/runtime.js';
import { TASK_METHODS } from './task-methods.js';
import type { ToolHandler } from '../runtime/context.js';

/** What a preflight step sees: the MRTR answers of this round (if any). */
export interface PreflightInput {
  inputResponses: Record<string, unknown> | undefined;
  clientCapabilities: JsonObject;
}
/** A preflight step either asks (MRTR round, no task yet) or hands data to the handler (`ctx.preflight`). */
export type PreflightResult = { ask: InputRequests; requestState?: string } | { data: JsonObject } | undefined;

export interface OutlastToolConfig<Shape extends z.ZodRawShape = z.ZodRawShape>
  extends Omit<ToolSpec<z.infer<z.ZodObject<Shape>>>, 'handler'> {
  title?: string;
  description?: string;
  /** Zod shape of the arguments (as for McpServer.registerTool). */
  inputSchema?: Shape;
  annotations?: Record<string, unknown>;
  _meta?: Record<string, unknown>;
  /** Runs synchronously before any task exists; can ask MRTR rounds (SEP-2322) first. */
  preflight?: (args: z.infer<z.ZodObject<Shape>>, input: PreflightInput) => PreflightResult | Promise<PreflightResult>;
}

export interface OutlastOptions extends RuntimeOptions {
  /** Maps the SDK's auth info to the principal tasks are bound to. Default: extra.principal, then clientId, else "anonymous". */
  principalOf?: (authInfo: AuthInfo | undefined) => string;
}

type RequestEnvelope = Record<string, unknown> & { [CLIENT_CAPABILITIES_META]?: JsonObject };

interface ServerInternals {
  _requestHandlers: Map<string, (req: { params?: Record<string, unknown> }, ctx: ServerContext) => Promise<unknown>>;
  _wrapHandler(method: string, h: (req: { params?: Record<string, unknown> }, ctx: ServerContext) => Promise<unknown>): (req: { params?: Record<string, unknown> }, ctx: ServerContext) => Promise<unknown>;
}
interface McpServerInternals {
  _registeredTools: Record<string, { enabled: boolean; inputSchema?: unknown }>;
  validateToolInput(tool: unknown, args: unknown, name: string): Promise<unknown>;
}

export function defaultPrincipalOf(authInfo: AuthInfo | undefined): string {
  const extra = authInfo?.extra as { principal?: unknown } | undefined;
  if (typeof extra?.principal === 'string' && extra.principal) return extra.principal;
  if (authInfo?.clientId) return authInfo.clientId;
  return 'anonymous';
}

function unreachable(): never {
  throw new Error('outlast: an Outlast tool was called through McpServer directly');
}

function toProtocolError(e: unknown): unknown {
  if (e instanceof TaskProtocolError) return new ProtocolError(e.code, e.message, e.data);
  return e;
}

interface DefinedTool {
  name: string;
  config: OutlastToolConfig;
  /** What McpServer.registerTool gets, built once (attach runs for every request). */
  registration: Record<string, unknown>;
}

/**
 * tasks/* params are checked by the runtime after the capability gate (so -32021 comes before any -32602); the
 * SDK only needs a Standard Schema, and this one passes the params through without work on the hot path.
 */
const passThrough: StandardSchemaV1<Record<string, unknown>> = {
  '~standard': { version: 1, vendor: 'outlast', validate: (value: unknown) => ({ value: (value ?? {}) as Record<string, unknown> }) },
};
const TASK_PARAMS = { params: passThrough };

export class Outlast {
  readonly runtime: TaskRuntime;
  private readonly tools = new Map<string, DefinedTool>();
  private readonly principalOf: (a: AuthInfo | undefined) => string;

  constructor(options: OutlastOptions) {
    const { principalOf, ...runtimeOptions } = options;
    this.runtime = new TaskRuntime(runtimeOptions);
    this.principalOf = principalOf ?? defaultPrincipalOf;
  }

  /** Defines a tool that may outlast its request. Register it once; `attach` adds it to every McpServer. */
  tool<Shape extends z.ZodRawShape>(name: string, config: OutlastToolConfig<Shape>, handler: ToolHandler<z.infer<z.ZodObject<Shape>>>): this {
    this.runtime.defineTool(name, { ...config, handler } as ToolSpec<z.infer<z.ZodObject<Shape>>>);
    const c = config as unknown as OutlastToolConfig;
    const registration = {
      ...(c.title !== undefined ? { title: c.title } : {}),
      ...(c.description !== undefined ? { description: c.description } : {}),
      ...(c.inputSchema !== undefined ? { inputSchema: z.object(c.inputSchema) } : {}),
      ...(c.annotations !== undefined ? { annotations: c.annotations } : {}),
      ...(c._meta !== undefined ? { _meta: c._meta } : {}),
    };
    this.tools.set(name, { name, config: c, registration });
    return this;
  }

  /** Starts the runtime (store, recovery, sweeper). Idempotent. */
  start(): Promise<void> {
    return this.runtime.start();
  }
  stop(drainMs?: number): Promise<void> {
    return this.runtime.stop(drainMs);
  }

  principal(ctx: ServerContext): string {
    return this.principalOf(ctx.http?.authInfo);
  }
  principalOfAuth(authInfo: AuthInfo | undefined): string {
    return this.principalOf(authInfo);
  }

  /**
   * Adds the Tasks extension to one McpServer instance (call it in your per-request factory, after or before
   * your own registrations). Modern-era only: a legacy (2025) session gets plain tools.
   */
  attach(mcp: McpServer, era: 'modern' | 'legacy' = 'modern'): McpServer {
    for (const t of this.tools.values()) {
      // The callback is never reached: tools/call for Outlast tools is routed below, outside McpServer's catch.
      mcp.registerTool(t.name, t.registration as never, unreachable);
    }
    if (this.tools.size === 0) return this.attachTaskMethods(mcp, era);
    const server = mcp.server as unknown as ServerInternals;
    const inner = server._requestHandlers.get('tools/call');
    const ours = server._wrapHandler('tools/call', (req, ctx) => this.toolsCall(mcp, req, ctx, era));
    server._requestHandlers.set('tools/call', async (req, ctx) => {
      const name = req.params?.name;
      if (typeof name !== 'string' || !this.runtime.hasTool(name) || !inner) return inner ? inner(req, ctx) : ours(req, ctx);
      const r = (await ours(req, ctx)) as JsonObject;
      if (r?.resultType === 'task') {
        // The SDK normalises every tools/call result into a CallToolResult and adds `content: []`.
        const { content: _content, ...rest } = r;
        return rest;
      }
      return r;
    });
    return this.attachTaskMethods(mcp, era);
  }

  /** The capability and tasks/get|update|cancel (modern era only), from the table the direct path also serves. */
  private attachTaskMethods(mcp: McpServer, era: 'modern' | 'legacy'): McpServer {
    if (era !== 'modern') return mcp;
    mcp.server.registerCapabilities({ extensions: { [TASKS_EXTENSION]: {} } } as never);
    for (const [name, run] of Object.entries(TASK_METHODS.modern)) {
      mcp.server.setRequestHandler(name as 'tasks/get', TASK_PARAMS, async (p: Record<string, unknown>, ctx: ServerContext) => {
        try {
          return (await run(this.runtime, {
            params: p,
            clientCapabilities: (ctx.mcpReq.envelope as RequestEnvelope | undefined)?.[CLIENT_CAPABILITIES_META],
            principal: this.principal(ctx),
            // The SDK lifts params.inputResponses off every request (MRTR) and splits it; read it from the context.
            inputResponses: ctx.mcpReq.inputResponses,
            droppedInputResponseKeys: ctx.mcpReq.droppedInputResponseKeys ?? [],
          })) as never;
        } catch (e) {
          throw toProtocolError(e);
        }
      });
    }
    return mcp;
  }

  private async toolsCall(mcp: McpServer, req: { params?: Record<string, unknown> }, ctx: ServerContext, era: 'modern' | 'legacy'): Promise<unknown> {
    const name = req.params!.name as string;
    const internals = mcp as unknown as McpServerInternals;
    const registered = internals._registeredTools[name];
    if (!registered || !registered.enabled) throw new ProtocolError(ErrorCode.InvalidParams, `Tool ${name} not found`);
    const envelope = (ctx.mcpReq.envelope ?? {}) as RequestEnvelope;
    const clientCapabilities = (envelope[CLIENT_CAPABILITIES_META] ?? {}) as JsonObject;
    const tasksDeclared = era === 'modern' && declaresTasks(clientCapabilities);
    const def = this.tools.get(name)!.config;
    if ((def.policy ?? 'auto') === 'always' && !tasksDeclared) throw toProtocolError(missingTasksCapability());

    let args: JsonObject;
    try {
      args = ((await internals.validateToolInput(registered, req.params!.arguments, name)) ?? req.params!.arguments ?? {}) as JsonObject;
    } catch (e) {
      // As McpServer does: invalid arguments are a tool error the model can correct.
      return { content: [{ type: 'text', text: e instanceof Error ? e.message : String(e) }], isError: true } satisfies CallToolResult;
    }

    let preflight: JsonObject | undefined;
    if (def.preflight) {
      const r = await def.preflight(args as never, { inputResponses: ctx.mcpReq.inputResponses, clientCapabilities });
      if (r && 'ask' in r) {
        return { resultType: 'input_required', inputRequests: r.ask, ...(r.requestState ? { requestState: r.requestState } : {}) };
      }
      preflight = r?.data;
    }

    const meta = (req.params!._meta ?? {}) as Record<string, unknown>;
    const key = meta[IDEMPOTENCY_KEY_META] ?? (ctx.mcpReq._meta as Record<string, unknown> | undefined)?.[IDEMPOTENCY_KEY_META];
    if (key !== undefined && typeof key !== 'string') {
      throw new ProtocolError(ErrorCode.InvalidParams, `_meta["${IDEMPOTENCY_KEY_META}"] must be a string`);
    }
    try {
      const outcome = await this.runtime.call(name, args, {
        principal: this.principal(ctx),
        clientCapabilities,
        tasksDeclared,
        idempotencyKey: key,
        signal: ctx.mcpReq.signal,
        preflight,
      });
      return outcome.kind === 'task' ? outcome.task : outcome.result;
    } catch (e) {
      throw toProtocolError(e);
    }
  }
}
