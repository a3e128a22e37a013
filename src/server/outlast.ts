/**
 * The SDK glue: adds durable Tasks to an official-SDK McpServer. Advertises the extension, decides per
 * tools/call between an inline result and a CreateTaskResult, and serves tasks/get, tasks/update, tasks/cancel.
 * Everything that decides or stores lives in the runtime; this file only translates.
 */
import { progressOnStream, sendProgress } from './no-tasks/stream-progress.js';
import { McpServer, ProtocolError, fromJsonSchema, requireScopes, type AuthInfo, type ScopeChallengeHandler, type CallToolResult, type McpRequestContext, type ServerContext, type ServerNotifier, type StandardSchemaV1 } from '@modelcontextprotocol/server';
import * as z from 'zod';
import {
  CLIENT_CAPABILITIES_META,
  ErrorCode,
  IDEMPOTENCY_KEY_META,
  PUSH_META,
  TASK_POLICY_META,
  TASKS_EXTENSION,
  TASKS_STREAM_METHOD,
  TaskProtocolError,
  declaresTasks,
  isTerminal,
  missingTasksCapability,
  type InputRequests,
  type JsonObject,
} from '../protocol/index.js';
import { TaskRuntime, type CallContext, type CallOutcome, type RuntimeOptions, type ToolSpec } from '../runtime/runtime.js';
import { TASK_METHODS } from './core/task-methods.js';
import { AnswerLinks, type AnswerLink } from './no-tasks/answers/index.js';
import type { TaskRecord } from '../store/types.js';
import { declaresUrlMode, legacyClientSamples, legacyClientTakesUrl } from './tasks-2025/url-elicitation.js';
import { type UrlOffer, askingOf, declaredInputKinds, offerableQuestions, openTaskState, recordRetryAnswers, relayQuestionsOnStream, sealTaskState, untilEndOrQuestion } from './no-tasks/questions.js';
import type { ToolHandler } from '../runtime/context.js';
import { HandleTools, resolveHandleOptions, type HandleOptions } from './no-tasks/handles.js';
import { LegacyTasks, answerPostedResponse, isInputResponse, requestedTask, type LegacyOptions } from './tasks-2025/legacy.js';
import { requestTraceContext } from './telemetry/request-spans.js';
import { checkSdkPeer, foreignMcpServer } from './core/sdk-peer.js';
import { taskStreamCapability } from '../runtime/output-follow.js';
import { EVENTS_EXTENSION } from './events/index.js';
import { declaresEvents, taskEventSource } from './events/task-output.js';
import { declineDirectCall, isDirectCall } from './direct/direct-call-ids.js';
import { PrincipalError, anonymousPrincipal, defaultPrincipalOf, sessionIdOf, sharesPrincipal } from './core/principals.js';

export { defaultPrincipalOf } from './core/principals.js';

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
  /** The arguments as a JSON Schema (an object schema) instead of a zod shape, e.g. one another server published.
   *  Compiled once, here: never build one per request (the SDK's `fromJsonSchema` keeps every schema it compiles). */
  inputJsonSchema?: JsonObject;
  annotations?: Record<string, unknown>;
  _meta?: Record<string, unknown>;
  /** false: this tool is never followed through a handle. With `policy: 'always'` a client without task support
   *  then gets -32021, as the Tasks spec's required tools do (the official suite checks a required tool so), instead
   *  of a handle. Default: handles serve it whenever they are on. */
  handles?: false;
  /** Runs synchronously before any task exists; can ask MRTR rounds (SEP-2322) first. */
  preflight?: (args: z.infer<z.ZodObject<Shape>>, input: PreflightInput) => PreflightResult | Promise<PreflightResult>;
  /** A string argument whose value is the call's idempotency key (for clients that cannot send
   *  `_meta["outlast/idempotencyKey"]`, e.g. a model filling in a request id). */
  idempotencyKeyArgument?: keyof Shape & string;
  /** OAuth scopes a caller's token must hold to call this tool (behind `oauth`): without them the call is answered
   *  403 insufficient_scope naming them (step-up), before anything starts. tasks/get|update|cancel need only the owner. */
  scopes?: string[];
}

/** The SDK's step-up check for OAuth tokens only: a static bearer token (operator-issued) carries no scopes. */
/** A description that a sentence follows ends its own first (a full stop when it has none), so the two do not run on:
 *  "Echoes back the input string. If it runs longer…". */
function endSentence(description: string, next: string): string {
  if (!next) return description;
  const text = description.trimEnd();
  if (/[.!?…。！？]["'”’)\]`*_]*$/.test(text)) return text;
  return `${text.replace(/[,;:]$/, '')}.`;
}

function oauthScopeChallenge(scopes: string[]): ScopeChallengeHandler {
  const check = requireScopes(...(scopes as [string, ...string[]]));
  return (ctx) => ((ctx.authInfo?.extra as { kind?: unknown } | undefined)?.kind === undefined ? undefined : check(ctx));
}

export interface OutlastOptions extends RuntimeOptions {
  /** Names the principal tasks are bound to for a request that carries credentials (its AuthInfo): the person, never
   *  the OAuth client. undefined or '' says the credentials name nobody, and the request is refused. Default
   *  (`defaultPrincipalOf`): `extra.principal` (Outlast's bearer and OAuth fronts), else `extra.sub`, else refused.
   *  A request without credentials is not asked about: it is `anonymous`, kept apart per 2025-11-25 session. */
  principalOf?: (authInfo: AuthInfo) => string | undefined;
  /** Durable work for clients with no task support, through plain tools (a handle, a status tool, a cancel tool).
   *  Off by default; `true` for the defaults (see HandleOptions). */
  handles?: boolean | HandleOptions;
  /** Answer pages for questions of handle callers: links on `publicUrl` (`/answer/…`), served by the HTTP front.
   *  Needs `handles`. */
  answerPages?: { publicUrl: string };
  /** The 2025-11-25 Tasks wire (served on the SDK's legacy era). */
  legacy?: LegacyOptions;
  /** Push destinations a caller may name in `_meta["outlast/push"]` (configured by the operator; delivered by the
   *  alert service). A call naming any other is refused. */
  pushDestinations?: string[];
}

type RequestEnvelope = Record<string, unknown> & { [CLIENT_CAPABILITIES_META]?: JsonObject };

/** An inline call whose questions go out as MRTR input_required: the kinds its client takes, the secret that seals
 *  its requestState, its principal, and how a URL question is offered. */
type MrtrCall = { kinds: Set<string>; secret: string; principal: string; url?: UrlOffer | undefined };

interface ServerInternals {
  _requestHandlers: Map<string, (req: { params?: Record<string, unknown> }, ctx: ServerContext) => Promise<unknown>>;
  _wrapHandler(method: string, h: (req: { params?: Record<string, unknown> }, ctx: ServerContext) => Promise<unknown>): (req: { params?: Record<string, unknown> }, ctx: ServerContext) => Promise<unknown>;
}
interface McpServerInternals {
  _registeredTools: Record<string, { enabled: boolean; inputSchema?: unknown }>;
  validateToolInput(tool: unknown, args: unknown, name: string): Promise<unknown>;
}

/** What attach() behind the SDK's handler alone lacks, and how to get it. */
export const NO_FRONT_WARNING =
  "outlast: attach() is serving through the SDK's handler alone, without Outlast's front. Absent: 2025-11-25 input answers (the SDK answers 202 and drops them; the task fails at its deadline), " +
  'subscriptions/listen for tasks, the poll limit (429), the capacity refusal (503), the direct path for task methods, the body limit with JSON-RPC errors, bearer tokens, request metrics and server spans, the dashboard and /metrics. ' +
  "Mount outlastHandler(outlast, factory, options) from 'outlast/server' instead: handler.fetch(request) or handler.node(req, res) (docs/existing-app.md).";

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
  /** The plain tools that follow a task for clients without task support (when `handles` is on). */
  readonly handles: HandleTools | undefined;
  readonly legacy: LegacyTasks;
  /** Answer-page links (when `answerPages` is set and handles are on). */
  readonly answers: AnswerLinks | undefined;
  private readonly tools = new Map<string, DefinedTool>();
  /** Counts changes to the tools defined here (the direct tools/call path rebuilds its kept servers on a change). */
  toolsVersion = 0;
  private readonly principalOf: (a: AuthInfo) => string | undefined;
  private readonly pushDestinations: Set<string>;
  /** Set by the HTTP front when it serves the Events wire (src/server/events): server/discover advertises it. */
  eventsOn = false;
  /** Set by the HTTP front, which serves `tasks/stream` (src/server/front/task-stream.ts): server/discover advertises it. */
  taskStreamOn = false;
  /** Set by a source of tools that may be down (the gateway's upstream): while it gives a reason, tools/list and calls
   *  of tools not defined here are answered with it as a JSON-RPC error, instead of an empty list or "not found". Asked
   *  with the called tool's name for a call (a source of several upstreams answers for the one that tool belongs to). */
  toolsUnavailable: ((tool?: string) => Promise<string | undefined>) | undefined;
  /** The front serving this Outlast (outlastHandler, serveHttp, stdio), once one is made. */
  private front: { notify(): ServerNotifier | undefined } | undefined;
  private warnedNoFront = false;

  constructor(options: OutlastOptions) {
    checkSdkPeer();
    const { principalOf, handles, legacy, pushDestinations, answerPages, ...runtimeOptions } = options;
    this.pushDestinations = new Set(pushDestinations ?? []);
    this.runtime = new TaskRuntime(runtimeOptions);
    this.principalOf = principalOf ?? defaultPrincipalOf;
    const handleOptions = resolveHandleOptions(handles);
    this.handles = handleOptions ? new HandleTools(this, handleOptions) : undefined;
    this.legacy = new LegacyTasks(this, legacy);
    this.answers = answerPages && this.handles ? new AnswerLinks(answerPages.publicUrl) : undefined;
    this.runtime.samplingOnPages = this.answers !== undefined;
  }

  /** The links of a task's open form questions and sampling requests (answer pages on), for handle and status texts. */
  answerLinks(record: Pick<TaskRecord, 'taskId' | 'principal' | 'inputRequests'>): AnswerLink[] {
    return this.answers?.linksOf(record) ?? [];
  }

  /** For a 2025-11-25 handle caller that declared URL-mode elicitation (answer pages on): each question's link, which
   *  it is sent as a URL elicitation instead of the form (or of a sampling request, unless it declared sampling).
   *  Undefined for every other caller. */
  urlQuestionLinks(mcp: McpServer, ctx: ServerContext): ((v: Pick<TaskRecord, 'taskId' | 'principal' | 'inputRequests'>, key: string) => string | undefined) | undefined {
    if (!this.answers || !legacyClientTakesUrl(mcp, ctx)) return undefined;
    const samples = legacyClientSamples(mcp, ctx);
    return (v, key) => (samples && v.inputRequests[key]?.request.method === 'sampling/createMessage' ? undefined : this.answerLinks(v).find((l) => l.key === key)?.url);
  }

  /** For a 2026-07-28 caller without Tasks that declared URL-mode elicitation (answer pages on): the MRTR URL offer. */
  mrtrUrlOffer(caps: unknown): UrlOffer | undefined {
    if (!this.answers || !declaresUrlMode(caps)) return undefined;
    return { linkOf: (v, key) => this.answerLinks(v).find((l) => l.key === key)?.url, accepted: new Set() };
  }

  /** Defines a tool that may outlast its request. Register it once; `attach` adds it to every McpServer. */
  tool<Shape extends z.ZodRawShape>(name: string, config: OutlastToolConfig<Shape>, handler: ToolHandler<z.infer<z.ZodObject<Shape>>>): this {
    if (this.handles?.owns(name)) throw new Error(`Tool "${name}" has the name of a handle tool; choose another name, or rename the handle tools (handles.statusTool / handles.cancelTool)`);
    if (config.inputSchema !== undefined && config.inputJsonSchema !== undefined) throw new Error(`Tool "${name}": give inputSchema or inputJsonSchema, not both`);
    this.runtime.defineTool(name, { ...config, handler } as ToolSpec<z.infer<z.ZodObject<Shape>>>);
    const c = config as unknown as OutlastToolConfig;
    // A model that calls this tool from a client without task support should know a handle may come back.
    const backgroundNote = this.handles && (c.policy ?? 'auto') === 'auto'
      ? ` If it runs longer than ${Math.round(this.handles.options.afterMs / 1000)} s it continues in the background and returns a taskId to follow with ${this.handles.options.statusTool}.`
      : '';
    const description = c.description?.trim() ? endSentence(c.description, backgroundNote) + backgroundNote : backgroundNote ? backgroundNote.trim() : c.description;
    const registration = {
      ...(c.title !== undefined ? { title: c.title } : {}),
      ...(description !== undefined ? { description } : {}),
      ...(c.inputSchema !== undefined ? { inputSchema: z.object(c.inputSchema) } : {}),
      ...(c.inputJsonSchema !== undefined ? { inputSchema: fromJsonSchema(c.inputJsonSchema as never) } : {}),
      ...(c.annotations !== undefined ? { annotations: c.annotations } : {}),
      _meta: { ...c._meta, [TASK_POLICY_META]: c.policy ?? 'auto' },
      ...(c.scopes?.length ? { scopeChallenge: oauthScopeChallenge(c.scopes) } : {}),
    };
    this.tools.set(name, { name, config: c, registration });
    this.toolsVersion++;
    return this;
  }

  /** Withdraws a tool defined with `tool()` (requests from now on no longer see it; runs in flight go on), e.g. to
   *  define it again with another schema. Tell clients with `notifier()?.toolListChanged()`. */
  removeTool(name: string): boolean {
    if (!this.tools.delete(name)) return false;
    this.toolsVersion++;
    this.runtime.removeTool(name);
    return true;
  }

  /** @internal Whether the direct tools/call path may serve `name`: a tool defined here, without OAuth scopes (the
   *  SDK's step-up challenge runs on the per-request path). */
  directCallable(name: string): boolean {
    const t = this.tools.get(name);
    return t !== undefined && !t.config.scopes?.length && this.runtime.hasTool(name);
  }

  /** Starts the runtime (store, recovery, sweeper). Idempotent. */
  async start(): Promise<void> {
    await this.runtime.start();
    await this.answers?.load((n) => this.runtime.sharedSecret(n));
  }
  /** Stops the runtime: not ready at once, tasks that may run elsewhere handed to the other replicas at once, the
   *  rest given `drainMs` to finish (see drain()); then it leaves the replica set and closes the store. */
  stop(drainMs?: number): Promise<void> {
    return this.runtime.stop(drainMs);
  }

  /** The first half of stop(): the drain, with the store still open (requests are still served: polls, answers, the
   *  not-ready health answer); call stop() after it. Called again, it ends the drain within the new `drainMs`. */
  drain(drainMs?: number): Promise<void> {
    return this.runtime.drain(drainMs);
  }

  /**
   * A secret every replica on this store shares, generated once and kept in the store: e.g. the key that seals MRTR
   * `requestState` (createRequestStateCodec), so a second round may reach any replica with no secret to distribute.
   * Anyone who can read the store can read it. Callable in `setup`, before start.
   */
  sharedSecret(name: string): Promise<string> {
    return this.runtime.sharedSecret(name);
  }

  /** The principal of a request (throws a PrincipalError when its credentials name nobody). */
  principal(ctx: ServerContext): string {
    return this.principalOfAuth(ctx.http?.authInfo, sessionIdOf(ctx.http?.req?.headers));
  }
  /** The principal of a request's credentials, or without any, of its session (`Mcp-Session-Id`). */
  principalOfAuth(authInfo: AuthInfo | undefined, sessionId?: string): string {
    if (authInfo === undefined) return anonymousPrincipal(sessionId);
    const named = this.principalOf(authInfo);
    if (typeof named !== 'string' || named === '') throw new PrincipalError("This request's credentials name nobody (the server's principalOf answered no principal for them), so it is refused");
    return named;
  }
  /** Whether this request's caller shares `anonymous` with every caller without credentials or a session (HTTP). */
  sharesPrincipal(ctx: ServerContext): boolean {
    return ctx.http !== undefined && sharesPrincipal(ctx.http.authInfo, sessionIdOf(ctx.http.req?.headers));
  }

  /** @internal A front (outlastHandler, serveOutlastStdio) serves this Outlast: `notify` gives its notifier. */
  servedBy(front: { notify(): ServerNotifier | undefined }): void {
    this.front = front;
  }

  /** The notifier of the HTTP front serving this Outlast (list-changed notifications), once it serves. */
  notifier(): ServerNotifier | undefined {
    return this.front?.notify();
  }

  /** @internal What the fronts call for every request's McpServer. */
  attachForFront(mcp: McpServer, era: 'modern' | 'legacy' = 'modern'): McpServer {
    return this.attachTo(mcp, era);
  }

  /**
   * Adds Outlast to one McpServer instance (call it in your per-request factory, after your own registrations):
   * its tools, the Tasks extension on the 2026-07-28 era, the 2025-11-25 Tasks wire on the legacy era, and the
   * handle tools when they are on. Behind the SDK's handler alone, part of Outlast cannot work (logged once, at the
   * first request): mount `outlastHandler(outlast, factory, options)` instead. Pass the factory's `ctx` (rather than
   * `ctx.era`) so that a posted 2025-11-25 answer is recorded for the caller's principal.
   */
  attach(mcp: McpServer, eraOrContext: 'modern' | 'legacy' | Pick<McpRequestContext, 'era' | 'authInfo' | 'requestInfo'> = 'modern'): McpServer {
    const era = typeof eraOrContext === 'string' ? eraOrContext : eraOrContext.era;
    if (!this.front) {
      if (!this.warnedNoFront) {
        this.warnedNoFront = true;
        // A library's default logger is silent: a process warning is seen whatever the app logs with.
        process.emitWarning(NO_FRONT_WARNING, { code: 'OUTLAST_NO_FRONT' });
        this.runtime.log.warn(NO_FRONT_WARNING);
      }
      if (era === 'legacy') this.takePostedAnswers(mcp, typeof eraOrContext === 'string' ? undefined : eraOrContext);
    }
    return this.attachTo(mcp, era);
  }

  /**
   * Behind the SDK's handler alone, a 2025-11-25 client's posted answer reaches this instance as a response to an id
   * it never sent: recorded here (the SDK has already answered 202), and a refusal logged, instead of dropped.
   */
  private takePostedAnswers(mcp: McpServer, ctx: Pick<McpRequestContext, 'authInfo' | 'requestInfo'> | undefined): void {
    const server = mcp.server as unknown as { _onresponse(response: unknown): void };
    const base = server._onresponse.bind(server);
    server._onresponse = (response) => {
      if (!isInputResponse(response)) return base(response);
      void Promise.resolve()
        .then(() => answerPostedResponse(this.runtime, response, this.principalOfAuth(ctx?.authInfo, sessionIdOf(ctx?.requestInfo?.headers))))
        .then(
          (r) => r.status !== 202 && this.runtime.log.warn(`${r.error.message} (the SDK's handler told the client 202; mount outlastHandler to answer it with this error)`),
          (e) => this.runtime.log.warn('could not record a posted input answer', { error: String(e) }),
        );
    };
  }

  private attachTo(mcp: McpServer, era: 'modern' | 'legacy'): McpServer {
    if (!(mcp instanceof McpServer)) throw new Error(foreignMcpServer());
    const registered: Array<{ name: string; policy: ToolSpec['policy']; handles: boolean; registered: { execution?: unknown } }> = [];
    for (const t of this.tools.values()) {
      // The callback is never reached: tools/call for Outlast tools is routed below, outside McpServer's catch.
      const r = mcp.registerTool(t.name, t.registration as never, unreachable);
      registered.push({ name: t.name, policy: t.config.policy, handles: this.handles !== undefined && t.config.handles !== false, registered: r as unknown as { execution?: unknown } });
    }
    this.handles?.register(mcp, era);
    if (era === 'legacy') this.legacy.attach(mcp, registered);
    if (this.tools.size === 0) return this.guardToolSource(this.attachTaskMethods(mcp, era));
    const server = mcp.server as unknown as ServerInternals;
    const inner = server._requestHandlers.get('tools/call');
    const ours = server._wrapHandler('tools/call', (req, ctx) => this.toolsCall(mcp, req, ctx, era));
    server._requestHandlers.set('tools/call', async (req, ctx) => {
      const name = req.params?.name;
      if (typeof name !== 'string' || !this.runtime.hasTool(name) || !inner) return inner ? inner(req, ctx) : ours(req, ctx);
      // A 2025-11-25 task answer is not a CallToolResult: it must not pass the SDK's tools/call result check.
      if (era === 'legacy' && req.params?.task !== undefined) return this.toolsCall(mcp, req, ctx, era);
      const r = (await ours(req, ctx)) as JsonObject;
      if (r?.resultType === 'task') {
        // The SDK normalises every tools/call result into a CallToolResult and adds `content: []`.
        const { content: _content, ...rest } = r;
        return rest;
      }
      return r;
    });
    return this.guardToolSource(this.attachTaskMethods(mcp, era));
  }

  /** While `toolsUnavailable` gives a reason, tools/list and calls of unknown tools answer it. */
  private guardToolSource(mcp: McpServer): McpServer {
    const why = this.toolsUnavailable;
    if (!why) return mcp;
    const handlers = (mcp.server as unknown as ServerInternals)._requestHandlers;
    for (const method of ['tools/list', 'tools/call']) {
      const inner = handlers.get(method);
      if (!inner) continue;
      handlers.set(method, async (req, ctx) => {
        const name = req.params?.name;
        if (method === 'tools/list' || typeof name !== 'string' || (!this.runtime.hasTool(name) && !this.handles?.owns(name))) {
          const reason = await why(method === 'tools/call' && typeof name === 'string' ? name : undefined);
          if (reason) throw new ProtocolError(ErrorCode.InternalError, reason);
        }
        return inner(req, ctx);
      });
    }
    return mcp;
  }

  /** The capability and tasks/get|update|cancel (modern era only), from the table the direct path also serves. */
  private attachTaskMethods(mcp: McpServer, era: 'modern' | 'legacy'): McpServer {
    if (era !== 'modern') return mcp;
    mcp.server.registerCapabilities({ extensions: { [TASKS_EXTENSION]: {} } } as never);
    // MCP Events, both shapes: `events` (what ChatGPT reads) and the SEP-3415 extension key.
    if (this.eventsOn) mcp.server.registerCapabilities({ events: { listChanged: false }, extensions: { [TASKS_EXTENSION]: {}, 'io.modelcontextprotocol/events': { listChanged: false } } } as never);
    // tasks/stream (SEP-2694, a draft): under `experimental` until the draft settles how it is advertised.
    if (this.taskStreamOn) mcp.server.registerCapabilities({ experimental: { [TASKS_STREAM_METHOD]: taskStreamCapability(this.runtime.outputBounds) } } as never);
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

  /** An MRTR retry of an inline call that became a task: its answers are recorded, then the call follows the task
   *  for the handle budget (its result, its next question, or a handle). */
  private async followInline(taskId: string, mrtr: MrtrCall, ctx: ServerContext): Promise<unknown> {
    const handles = this.handles!;
    try {
      const refused = await recordRetryAnswers(this.runtime, taskId, mrtr.principal, ctx.mcpReq.inputResponses as Record<string, unknown> | undefined, mrtr.url);
      if (refused) return { content: [{ type: 'text', text: `${refused}. Call ${handles.options.statusTool} with {"taskId": "${taskId}"} to be asked again.` }], isError: true };
      const seen = await untilEndOrQuestion(this.runtime, taskId, mrtr.principal, handles.options.afterMs, ctx.mcpReq.signal, (v) => offerableQuestions(v, mrtr.kinds, mrtr.url));
      if (seen && 'questions' in seen) return { resultType: 'input_required', inputRequests: seen.questions, requestState: sealTaskState(mrtr.secret, taskId, mrtr.principal) };
      const record = await this.runtime.lookup(taskId, mrtr.principal);
      if (isTerminal(record.status)) this.runtime.noteRetrieved(record);
      return handles.handleResult(record);
    } catch (e) {
      throw toProtocolError(e);
    }
  }

  /**
   * tools/call of an Outlast tool, in steps: the wire the caller speaks (callWire), the arguments, the MRTR and
   * preflight rounds, what `_meta` asks (callMeta), the run with what the caller hears while it waits (onTaskOf),
   * then the answer its wire takes (answerOf).
   */
  private async toolsCall(mcp: McpServer, req: { params?: Record<string, unknown> }, ctx: ServerContext, era: 'modern' | 'legacy'): Promise<unknown> {
    const name = req.params!.name as string;
    const internals = mcp as unknown as McpServerInternals;
    const registered = internals._registeredTools[name];
    if (!registered || !registered.enabled) throw new ProtocolError(ErrorCode.InvalidParams, `Tool ${name} not found`);
    const envelope = (ctx.mcpReq.envelope ?? {}) as RequestEnvelope;
    const clientCapabilities = (envelope[CLIENT_CAPABILITIES_META] ?? {}) as JsonObject;
    const def = this.tools.get(name)!.config;
    const policy = def.policy ?? 'auto';
    // Handles serve this call's caller if they are on and the tool does not opt out.
    const handles = def.handles === false ? undefined : this.handles;
    const wire = this.callWire(mcp, req, ctx, era, { name, policy, handles, clientCapabilities });

    let args: JsonObject;
    try {
      args = ((await internals.validateToolInput(registered, req.params!.arguments, name)) ?? req.params!.arguments ?? {}) as JsonObject;
    } catch (e) {
      // As McpServer does: invalid arguments are a tool error the model can correct.
      return { content: [{ type: 'text', text: e instanceof Error ? e.message : String(e) }], isError: true } satisfies CallToolResult;
    }

    // 2026-07-28 without Tasks, elicitation declared: a question asked while inline goes out as MRTR input_required.
    const mrtrKinds = era === 'modern' && !wire.tasksDeclared && this.handles && !def.preflight && policy !== 'never' ? declaredInputKinds(clientCapabilities) : undefined;
    // A handle caller on 2025-11-25 hears the task's questions on this call's own stream while it waits inline.
    const relayQuestions = era === 'legacy' && !wire.tasksDeclared && this.handles !== undefined;
    // The direct path (direct-call.ts) has no MRTR retry of its own (a requestState is the application server's to
    // verify): a call that may answer input_required goes back to the per-request path, before anything of it ran.
    if (isDirectCall(ctx.mcpReq.id) && (def.preflight || (mrtrKinds !== undefined && mrtrKinds.size > 0))) throw declineDirectCall(ctx.mcpReq.id);
    let mrtr: MrtrCall | undefined;
    if (mrtrKinds) {
      const kinds = mrtrKinds;
      if (kinds.size > 0) {
        mrtr = { kinds, secret: await this.runtime.sharedSecret('outlast-handle-state'), principal: this.principal(ctx), url: this.mrtrUrlOffer(clientCapabilities) };
        const resumed = openTaskState(mrtr.secret, ctx.mcpReq.requestState(), mrtr.principal);
        if (resumed) return this.followInline(resumed, mrtr, ctx);
      }
    }

    let preflight: JsonObject | undefined;
    if (def.preflight) {
      const r = await def.preflight(args as never, { inputResponses: ctx.mcpReq.inputResponses, clientCapabilities });
      if (r && 'ask' in r) {
        if (era === 'legacy') {
          throw new ProtocolError(ErrorCode.InvalidRequest, `Tool "${name}" needs answers before it starts (multi-round-trip input), which the 2025-11-25 wire cannot carry; call it from a 2026-07-28 client`);
        }
        return { resultType: 'input_required', inputRequests: r.ask, ...(r.requestState ? { requestState: r.requestState } : {}) };
      }
      preflight = r?.data;
    }

    const { meta, ctxMeta, key, token, push } = this.callMeta(req, ctx, def, args);
    let outcome: CallOutcome;
    const started = performance.now();
    // Only an MRTR caller races its run against a question (most calls need neither the controller nor the promise).
    const asking = mrtr ? askingOf(this.runtime, mrtr) : undefined;
    // A 2026-07-28 call held while its task runs (its caller follows no task) hears the task's status as progress.
    const heldProgress = era === 'modern' && !wire.tasksDeclared && token !== undefined;
    const progressCount = { n: 0 };
    const hearing = this.onTaskOf(mcp, ctx, { relayQuestions, heldProgress, token, progressCount, asking });
    let endedWithResult = false;
    try {
      const running = this.runtime.call(name, args, {
        onTask: hearing.onTask,
        ...wire,
        principal: this.principal(ctx),
        clientCapabilities,
        handleAfterMs: wire.tasksDeclared ? undefined : handles?.options.afterMs,
        progressToken: token,
        ...(heldProgress ? { onInlineStatus: (message: string) => sendProgress(ctx, token!, progressCount, message) } : {}),
        idempotencyKey: key,
        signal: ctx.mcpReq.signal,
        preflight,
        traceContext: requestTraceContext(meta.traceparent !== undefined ? meta : ctxMeta),
      });
      const first = asking ? await Promise.race([running.then((o) => ({ o })), asking.question.then((q) => ({ q }))]) : { o: await running };
      if ('q' in first) {
        // The run goes on as a task; the retry (with the answers) follows it by the sealed requestState.
        running.catch(() => undefined);
        return { resultType: 'input_required', inputRequests: first.q.questions, requestState: sealTaskState(mrtr!.secret, first.q.taskId, mrtr!.principal) };
      }
      outcome = first.o;
      endedWithResult = outcome.kind === 'result';
    } catch (e) {
      throw toProtocolError(e);
    } finally {
      hearing.stop(endedWithResult);
      asking?.stop();
    }
    return this.answerOf(outcome, { name, era, push, started, clientCapabilities });
  }

  /** What the caller's wire says of this call: whether it declared tasks (or asked for one, 2025-11-25), which wire
   *  the task would belong to, and (2025-11-25) the checks of taskSupport. May add a session's capabilities. */
  private callWire(
    mcp: McpServer,
    req: { params?: Record<string, unknown> },
    ctx: ServerContext,
    era: 'modern' | 'legacy',
    call: { name: string; policy: NonNullable<ToolSpec['policy']>; handles: HandleTools | undefined; clientCapabilities: JsonObject },
  ): Pick<CallContext, 'tasksDeclared' | 'taskRequested' | 'origin' | 'capabilitiesKnown'> {
    const { name, policy, handles, clientCapabilities } = call;
    if (era !== 'legacy') {
      const tasksDeclared = declaresTasks(clientCapabilities);
      if (policy === 'always' && !tasksDeclared && !handles) throw toProtocolError(missingTasksCapability());
      return { tasksDeclared, origin: 'extension' };
    }
    const legacyTask = req.params!.task;
    // 2025-11-25: the caller asks for a task per call (params.task); taskSupport says which tools allow it.
    if (legacyTask !== undefined && policy === 'never') {
      throw new ProtocolError(ErrorCode.MethodNotFound, `Tool "${name}" cannot run as a task (its execution.taskSupport is "forbidden"); call it without params.task`);
    }
    if (legacyTask === undefined && policy === 'always' && !handles) {
      throw new ProtocolError(ErrorCode.MethodNotFound, `Tool "${name}" runs only as a task (its execution.taskSupport is "required"); call it with params.task`);
    }
    const taskRequested = legacyTask === undefined ? undefined : (() => {
      try {
        return requestedTask(legacyTask);
      } catch (e) {
        throw toProtocolError(e);
      }
    })();
    // Stateless HTTP never sees the capabilities declared at initialize; a session (stdio) knows them.
    const sessionCaps = ctx.http ? undefined : (mcp.server.getClientCapabilities() as JsonObject | undefined);
    const origin = taskRequested === undefined && handles && policy !== 'never' ? 'handle' : 'legacy';
    if (sessionCaps) Object.assign(clientCapabilities, sessionCaps);
    return { tasksDeclared: taskRequested !== undefined, taskRequested, origin, capabilitiesKnown: sessionCaps !== undefined };
  }

  /** What the call's `_meta` asks (either the params' or the envelope's): an idempotency key (or the tool's key
   *  argument), a progress token, a push destination; a key that is no string or an unknown destination refused. */
  private callMeta(req: { params?: Record<string, unknown> }, ctx: ServerContext, def: OutlastToolConfig, args: JsonObject) {
    const meta = (req.params!._meta ?? {}) as Record<string, unknown>;
    const ctxMeta = (ctx.mcpReq._meta ?? {}) as Record<string, unknown>;
    const key = meta[IDEMPOTENCY_KEY_META] ?? ctxMeta[IDEMPOTENCY_KEY_META] ?? (def.idempotencyKeyArgument ? args[def.idempotencyKeyArgument] : undefined);
    if (key !== undefined && typeof key !== 'string') {
      throw new ProtocolError(ErrorCode.InvalidParams, `The idempotency key (_meta["${IDEMPOTENCY_KEY_META}"]${def.idempotencyKeyArgument ? ` or argument "${def.idempotencyKeyArgument}"` : ''}) must be a string`);
    }
    const progressToken = (meta.progressToken ?? ctxMeta.progressToken) as string | number | undefined;
    const push = meta[PUSH_META] ?? ctxMeta[PUSH_META];
    if (push !== undefined && (typeof push !== 'string' || !this.pushDestinations.has(push))) {
      const offered = [...this.pushDestinations];
      throw new ProtocolError(ErrorCode.InvalidParams, `Unknown push destination ${JSON.stringify(push)} in _meta["${PUSH_META}"]; ${offered.length ? `this server offers: ${offered.join(', ')}` : 'this server offers none'}`);
    }
    const token = typeof progressToken === 'string' || typeof progressToken === 'number' ? progressToken : undefined;
    return { meta, ctxMeta, key: key as string | undefined, token, push: push as string | undefined };
  }

  /** What the caller hears once its call became a task and it still waits: a 2025-11-25 handle caller the task's
   *  questions on this call's stream, a held 2026-07-28 call the task's status as progress, an MRTR caller nothing
   *  but its next question; `stop` ends it with the call. */
  private onTaskOf(
    mcp: McpServer,
    ctx: ServerContext,
    how: { relayQuestions: boolean; heldProgress: boolean; token: string | number | undefined; progressCount: { n: number }; asking: ReturnType<typeof askingOf> | undefined },
  ): { onTask: ((record: { taskId: string; principal: string }) => void) | undefined; stop(ended: boolean): void } {
    let stopRelay: (ended?: boolean) => void = () => {};
    let stopProgress = () => {};
    const onTask = how.relayQuestions
      ? (record: { taskId: string; principal: string }) => (stopRelay = relayQuestionsOnStream(this.runtime, this.legacy, mcp, ctx, record.taskId, record.principal, this.urlQuestionLinks(mcp, ctx)))
      : how.heldProgress
        ? (record: { taskId: string; principal: string }) => {
            how.asking?.watch(record);
            stopProgress = progressOnStream(this.runtime, ctx, record.taskId, record.principal, how.token!, how.progressCount);
          }
        : how.asking?.watch;
    return {
      onTask,
      stop(ended) {
        stopRelay(ended);
        stopProgress();
      },
    };
  }

  /** The answer the caller's wire takes for the outcome: the result, a handle, or the task (2025-11-25's
   *  CreateTaskResult, or the extension's, naming its output event when both sides speak Events). Pushes asked
   *  for are recorded before it leaves (a state change from now on is delivered). */
  private async answerOf(outcome: CallOutcome, call: { name: string; era: 'modern' | 'legacy'; push: string | undefined; started: number; clientCapabilities: JsonObject }): Promise<unknown> {
    const { name, era, push, started, clientCapabilities } = call;
    if (typeof push === 'string' && outcome.kind !== 'result') await this.runtime.store.ops.subscribe(outcome.record.taskId, push, this.runtime.store.now());
    const mode = outcome.kind === 'result' ? 'inline' : outcome.kind;
    this.runtime.telemetry?.toolCall(name, mode, (performance.now() - started) / 1000, outcome.kind === 'result' && outcome.result.isError ? 'tool_error' : undefined);
    switch (outcome.kind) {
      case 'result':
        return outcome.result;
      case 'handle':
        return this.handles!.handleResult(outcome.record);
      case 'task':
        if (era === 'legacy') return this.legacy.createResult(outcome.record);
        // Task Event Sources: with Events on both sides, the result names the task's output event.
        return this.eventsOn && declaresEvents(clientCapabilities, EVENTS_EXTENSION) ? { ...outcome.task, eventSource: taskEventSource(outcome.task.taskId) } : outcome.task;
    }
  }
}
