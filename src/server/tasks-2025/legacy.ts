/**
 * The 2025-11-25 Tasks wire on the SDK's legacy era, served from the same runtime and store as the 2026-07-28
 * extension (one task, whichever wire created it): the `tasks` capability at initialize, `execution.taskSupport` in
 * tools/list, task-augmented tools/call, and tasks/get | result | list | cancel. Input reaches a 2025 client as a
 * server→client request on its tasks/result stream; over stateless HTTP the client's answer is posted to whichever
 * replica it reaches (see `answerPostedResponse`), so nothing is tied to one process.
 */
import { ProtocolError, type McpServer, type ServerContext, type StandardSchemaV1 } from '@modelcontextprotocol/server';
import { ErrorCode, OUTPUT_SEQ_META, TaskProtocolError, isTerminal, type InputRequest, type JsonObject, type JsonRpcErrorObject } from '../../protocol/index.js';
import {
  LEGACY_TASKS_CAPABILITY,
  MODEL_IMMEDIATE_RESPONSE_META,
  RELATED_TASK_META,
  inputRequestId,
  parseInputRequestId,
  type LegacyTask,
  type TaskSupport,
} from '../../protocol/legacy.js';
import { advertisedPollInterval, type PollPolicy } from '../../runtime/poll.js';
import type { PromotionPolicy } from '../../runtime/types.js';
import type { TaskRuntime } from '../../runtime/runtime.js';
import { isoOf } from '../../runtime/wire.js';
import type { TaskRecord, TaskSummary, TaskView } from '../../store/types.js';
import type { TaskMethod } from '../core/task-methods.js';
import { QuestionAsks } from './question-asks.js';
import { relayOutputOnStream } from './legacy-output.js';
import { asUrlElicitation, recordUrlAnswer, urlRequestId } from './url-elicitation.js';
import { sharedListRefused } from '../core/principals.js';

export interface LegacyOptions {
  /** tasks/cancel must answer with the task already cancelled: how long to wait for the handler to stop before
   *  the task is ended `cancelled` regardless (its later writes are refused). Default 2000 ms. */
  cancelGraceMs?: number;
  /** Tasks per tasks/list page. Default 50. */
  listPageSize?: number;
  /** While tasks/result waits, a progress notification this often keeps a client's timeout from expiring (when
   *  it sent a progressToken). Default 15 000 ms. */
  keepAliveMs?: number;
}

/** What the legacy wire needs from the server glue. */
export interface LegacyHost {
  readonly runtime: TaskRuntime;
  principal(ctx: ServerContext): string;
  /** Whether the request's caller shares its principal with every caller without credentials or a session. */
  sharesPrincipal(ctx: ServerContext): boolean;
}

/** tasks/* params are checked by the runtime (taskId) and here (cursor): the SDK only needs a Standard Schema. */
const passThrough: StandardSchemaV1<Record<string, unknown>> = {
  '~standard': { version: 1, vendor: 'outlast', validate: (value: unknown) => ({ value: (value ?? {}) as Record<string, unknown> }) },
};
const PARAMS = { params: passThrough };

/** With handles on, an `always` tool is listed `optional`: a client without tasks (SDK v1 refuses to call a
 *  `required` tool itself) calls it plainly and follows it through a handle. */
export function taskSupportOf(policy: PromotionPolicy | undefined, handles = false): TaskSupport {
  return policy === 'always' ? (handles ? 'optional' : 'required') : policy === 'never' ? 'forbidden' : 'optional';
}

/** A stored task as the 2025-11-25 wire shows it. */
export function legacyTask(v: TaskSummary | TaskView, now: number, policy: PollPolicy): LegacyTask {
  const t: LegacyTask = {
    taskId: v.taskId,
    status: v.status,
    createdAt: isoOf(v.createdAt),
    lastUpdatedAt: isoOf(v.updatedAt),
    ttl: v.ttlMs,
    pollInterval: advertisedPollInterval(v, now, policy),
  };
  if (v.statusMessage !== null) t.statusMessage = v.statusMessage;
  if ('outputSeq' in v && v.outputSeq) t._meta = { [OUTPUT_SEQ_META]: v.outputSeq };
  return t;
}

/** `params.task` of a task-augmented tools/call: `{ttl?}`; anything else is refused before anything starts. */
export function requestedTask(task: unknown): { ttlMs?: number } {
  if (typeof task !== 'object' || task === null || Array.isArray(task)) {
    throw new TaskProtocolError(ErrorCode.InvalidParams, 'params.task must be an object: {} or {"ttl": milliseconds}');
  }
  const ttl = (task as { ttl?: unknown }).ttl;
  if (ttl === undefined || ttl === null) return {};
  if (typeof ttl !== 'number' || !Number.isInteger(ttl) || ttl <= 0 || ttl > 10 * 365 * 86_400_000) {
    throw new TaskProtocolError(ErrorCode.InvalidParams, 'params.task.ttl must be a positive integer number of milliseconds (or omitted)');
  }
  return { ttlMs: ttl };
}

function protocolError(e: unknown): unknown {
  return e instanceof TaskProtocolError ? new ProtocolError(e.code, e.message, e.data) : e;
}

export class LegacyTasks {
  private readonly cancelGraceMs: number;
  private readonly listPageSize: number;
  private readonly keepAliveMs: number;
  /** tasks/get, tasks/list and tasks/cancel of this wire: served by the SDK's handlers and by the direct path. */
  readonly methods: Readonly<Record<'tasks/get' | 'tasks/list' | 'tasks/cancel', TaskMethod>>;

  constructor(private readonly host: LegacyHost, options: LegacyOptions = {}) {
    this.cancelGraceMs = options.cancelGraceMs ?? 2000;
    this.listPageSize = options.listPageSize ?? 50;
    this.keepAliveMs = options.keepAliveMs ?? 15_000;
    const policy = () => host.runtime.pollPolicy;
    this.methods = {
      'tasks/get': async (runtime, call) => legacyTask(await runtime.pollView(call.params.taskId, call.principal), runtime.store.now(), policy()) as unknown as JsonObject,
      'tasks/list': async (runtime, call) => {
        if (call.sharedPrincipal) throw new TaskProtocolError(ErrorCode.InvalidRequest, sharedListRefused('tasks/list'));
        const page = await runtime.listTasks(call.principal, call.params.cursor, this.listPageSize);
        const now = runtime.store.now();
        return { tasks: page.tasks.map((t) => legacyTask(t, now, policy())), ...(page.nextCursor ? { nextCursor: page.nextCursor } : {}) };
      },
      'tasks/cancel': async (runtime, call) => legacyTask(await runtime.cancelNow(call.params.taskId, call.principal, this.cancelGraceMs), runtime.store.now(), policy()) as unknown as JsonObject,
    };
  }

  private asksOf: QuestionAsks | undefined;
  /** Which stream of a caller puts each question to it (one per question, across replicas). */
  get asks(): QuestionAsks {
    return (this.asksOf ??= new QuestionAsks(this.host.runtime));
  }

  private get policy(): PollPolicy {
    return this.host.runtime.pollPolicy;
  }

  /** What a task-augmented tools/call answers once the task row is committed. */
  createResult(record: TaskRecord): JsonObject {
    return {
      task: legacyTask(record, this.host.runtime.store.now(), this.policy),
      _meta: { [MODEL_IMMEDIATE_RESPONSE_META]: `Started task ${record.taskId} (${record.tool}); it runs in the background.` },
    };
  }

  /** The capability, each Outlast tool's taskSupport, and the four tasks/* methods, on one legacy-era McpServer. */
  attach(mcp: McpServer, tools: Iterable<{ name: string; policy: PromotionPolicy | undefined; handles: boolean; registered: { execution?: unknown } }>): void {
    mcp.server.registerCapabilities({ tasks: LEGACY_TASKS_CAPABILITY } as never);
    // registerTool drops config.execution (legacy.md §3): set it on the registered tool, which tools/list reads.
    for (const t of tools) t.registered.execution = { taskSupport: taskSupportOf(t.policy, t.handles) };
    const method = (name: string, run: (p: Record<string, unknown>, ctx: ServerContext) => Promise<JsonObject>) =>
      mcp.server.setRequestHandler(name, PARAMS, async (p: Record<string, unknown>, ctx: ServerContext) => {
        try {
          return (await run(p, ctx)) as never;
        } catch (e) {
          throw protocolError(e);
        }
      });
    for (const [name, run] of Object.entries(this.methods)) {
      method(name, (p, ctx) => run(this.host.runtime, { params: p, clientCapabilities: undefined, principal: this.host.principal(ctx), sharedPrincipal: this.host.sharesPrincipal(ctx), inputResponses: undefined, droppedInputResponseKeys: [] }));
    }
    method('tasks/result', (p, ctx) => this.result(mcp, p.taskId, ctx));
  }

  /**
   * tasks/result: blocks until the task is terminal, then answers exactly what the call would have (with the
   * related-task `_meta`). Meanwhile the stream carries the task's status, progress when a token was given, and
   * the task's input requests. Released when the client goes away.
   */
  private async result(mcp: McpServer, rawTaskId: unknown, ctx: ServerContext): Promise<JsonObject> {
    const runtime = this.host.runtime;
    const principal = this.host.principal(ctx);
    const record = await runtime.lookup(rawTaskId, principal);
    const taskId = record.taskId;
    const related = { [RELATED_TASK_META]: { taskId } };
    // The token of this request resets the client's timeout for it; the creating call's token stays valid too.
    const token = (ctx.mcpReq._meta as { progressToken?: string | number } | undefined)?.progressToken ?? record.progressToken ?? undefined;
    const notify = (method: string, params: JsonObject) => void ctx.mcpReq.notify({ method, params } as never).catch(() => undefined);
    let progress = 0;
    let last: TaskView | undefined;
    const sendProgress = () => {
      if (token === undefined) return;
      notify('notifications/progress', { progressToken: token, progress: ++progress, ...(last?.statusMessage ? { message: last.statusMessage } : {}), _meta: related });
    };
    const asking = this.asks.open(mcp, ctx, taskId);
    let resolveEnd!: (v: TaskView | undefined) => void;
    const ended = new Promise<TaskView | undefined>((r) => (resolveEnd = r));
    const unwatch = await runtime.watchViews(taskId, principal, (v) => {
      last = v;
      notify('notifications/tasks/status', legacyTask(v, runtime.store.now(), this.policy) as unknown as JsonObject);
      sendProgress();
      if (v.status === 'input_required') {
        for (const [key, pending] of Object.entries(v.inputRequests)) {
          asking.offer(key, () => this.ask(mcp, ctx, taskId, principal, key, pending.request, pending.deadline, undefined, () => asking.failed(key)));
        }
      }
      if (isTerminal(v.status)) resolveEnd(v);
    });
    const output = await relayOutputOnStream(runtime, this, mcp, ctx, taskId, principal).catch((e) => {
      unwatch();
      throw e;
    });
    const keepAlive = setInterval(sendProgress, this.keepAliveMs);
    const onAbort = () => resolveEnd(undefined);
    ctx.mcpReq.signal.addEventListener('abort', onAbort, { once: true });
    if (ctx.mcpReq.signal.aborted) resolveEnd(undefined);
    let end: TaskView | undefined;
    try {
      end = await ended;
      // The result leaves after the task's last output item.
      if (end) await output.drained();
    } finally {
      output.stop();
      clearInterval(keepAlive);
      ctx.mcpReq.signal.removeEventListener('abort', onAbort);
      unwatch();
      asking.end();
    }
    if (!end) throw new ProtocolError(ErrorCode.InternalError, 'The request was cancelled before the task finished');
    runtime.noteRetrieved(end);
    if (end.status === 'completed') {
      const { resultType: _resultType, ...result } = end.result ?? { content: [] };
      return { ...result, _meta: { ...((result._meta as JsonObject | undefined) ?? {}), ...related } };
    }
    if (end.status === 'failed') {
      const e = end.error ?? { code: ErrorCode.InternalError, message: 'Failed' };
      throw new ProtocolError(e.code, e.message, e.data);
    }
    throw new ProtocolError(ErrorCode.InternalError, `Task ${taskId} was cancelled; it has no result`);
  }

  /**
   * A notification on this request's stream. Over stateless HTTP past the SDK's capability check, which cannot see
   * what the client declared at initialize (as for the input requests themselves).
   */
  notifyOnStream(mcp: McpServer, ctx: ServerContext, method: string, params: JsonObject): void {
    const failed = (e: unknown) => this.host.runtime.log.debug('could not send a notification on a stream', { method, error: String(e) });
    if (!ctx.http) return void ctx.mcpReq.notify({ method, params } as never).catch(failed);
    const transport = (mcp.server as unknown as { transport?: { send(m: JsonObject, o?: { relatedRequestId?: unknown }): Promise<void> } }).transport;
    void transport?.send({ jsonrpc: '2.0', method, params }, { relatedRequestId: ctx.mcpReq.id }).catch(failed);
  }

  /**
   * Sends one input request to the client. Over HTTP each request is its own stateless instance: the request goes
   * on this tasks/result stream with an id that names the task and key, and the answer comes back as a POST that
   * any replica takes (answerPostedResponse). On a session (stdio) the SDK carries the request and its answer.
   * With `url` (a client that declared URL mode), a form question goes out as a URL elicitation of its answer link.
   * `unsent`: called when the request could not reach the client (its stream or session is gone).
   */
  ask(mcp: McpServer, ctx: ServerContext, taskId: string, principal: string, key: string, asked: InputRequest, deadline: number, url?: string, unsent?: () => void): void {
    const request = url ? asUrlElicitation(asked, url, taskId, key) : asked;
    const params = { ...(request.params ?? {}), _meta: { ...((request.params?._meta as JsonObject | undefined) ?? {}), [RELATED_TASK_META]: { taskId } } };
    const runtime = this.host.runtime;
    const record = (given: { result: unknown } | { error: JsonRpcErrorObject }) => {
      // A URL elicitation's accept only means the person went to the page, which records the answer itself.
      if (url) return void recordUrlAnswer(runtime, taskId, principal, key, given).catch((e) => runtime.log.warn('a URL elicitation answer was not recorded; the question stays open', { taskId, key, error: String(e) }));
      void runtime.answerFromClient(taskId, principal, key, given).catch((e) => runtime.log.warn('could not record an input answer', { taskId, key, error: String(e) }));
    };
    if (ctx.http) {
      const transport = (mcp.server as unknown as { transport?: { send(m: JsonObject, o?: { relatedRequestId?: unknown }): Promise<void> } }).transport;
      void transport
        ?.send({ jsonrpc: '2.0', id: url ? urlRequestId(taskId, key) : inputRequestId(taskId, key), method: request.method, params }, { relatedRequestId: ctx.mcpReq.id })
        .catch((e) => {
          runtime.log.debug('could not send an input request on a stream', { taskId, key, error: String(e) });
          unsent?.();
        });
      return;
    }
    void ctx.mcpReq
      .send({ method: request.method, params } as never, { timeout: Math.max(1000, deadline - Date.now()) } as never)
      .then(
        (result) => record({ result }),
        (e: { code?: unknown; message?: unknown }) =>
          // A client that lacks the capability, or answers with an error, cannot give this input; one that went away
          // leaves the request outstanding for the next tasks/result.
          typeof e?.code === 'number' && e.code !== ErrorCode.InternalError ? record({ error: { code: e.code, message: String(e.message ?? '') } }) : unsent?.(),
      );
  }
}

/** Whether a parsed POST body is a client's JSON-RPC response to one of our input requests. */
export function isInputResponse(msg: unknown): msg is { id: string; result?: unknown; error?: JsonRpcErrorObject } {
  const m = msg as { id?: unknown; method?: unknown; result?: unknown; error?: unknown } | null;
  return !!m && typeof m === 'object' && m.method === undefined && ('result' in m || 'error' in m) && parseInputRequestId(m.id) !== undefined;
}

/**
 * A client's answer to an input request, posted to this replica (maybe not the one that sent the request). Checked
 * against the task's principal (another principal's task is unknown), validated against the request, recorded.
 * Returns the HTTP status and, for a refusal, the JSON-RPC error to answer with.
 */
export async function answerPostedResponse(
  runtime: TaskRuntime,
  msg: { id: string; result?: unknown; error?: JsonRpcErrorObject },
  principal: string,
): Promise<{ status: 202 } | { status: 400; error: JsonRpcErrorObject }> {
  const target = parseInputRequestId(msg.id)!;
  try {
    let answer: { result: unknown } | { error: JsonRpcErrorObject };
    if (msg.error !== undefined) {
      const e = msg.error as Partial<JsonRpcErrorObject> | null;
      if (!e || typeof e !== 'object' || typeof e.code !== 'number') throw new TaskProtocolError(ErrorCode.InvalidRequest, 'A JSON-RPC error response needs an error object with a numeric code');
      answer = { error: { code: e.code, message: String(e.message ?? '') } };
    } else answer = { result: msg.result };
    await runtime.answerFromClient(target.taskId, principal, target.key, answer);
    return { status: 202 };
  } catch (e) {
    if (e instanceof TaskProtocolError) {
      return { status: 400, error: { code: e.code, message: `Response to ${msg.id} refused: ${e.message}` } };
    }
    throw e;
  }
}
