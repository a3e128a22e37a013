/**
 * TaskClient: the requester half of the Tasks extension.
 *
 * - Declares `extensions["io.modelcontextprotocol/tasks"]` on every request, and `elicitation` / `sampling` /
 *   `roots` only when the application gave a handler for them.
 * - `callTool` returns the final CallToolResult whichever shape the server chose (plain result, MRTR rounds,
 *   or a task followed to the end); `start` returns a TaskCall handle (status, events, result(), cancel(),
 *   detach()).
 * - Every logical call gets an idempotency key, journaled before it is sent and reused on every retry, so a
 *   lost CreateTaskResult never starts the work twice; the task id is committed to the journal before anyone
 *   hears of it; `resume` picks up whatever a crash left behind.
 * - Input requests reach the handlers as soon as a state listing them is seen, once per key (answers are
 *   journaled before they are sent with `tasks/update`).
 * - `listTools` learns each tool's `x-mcp-header` declarations (SEP-2243) and every `tools/call` then carries the
 *   `Mcp-Param-*` headers they ask for; a call refused with -32020 (HeaderMismatch) refreshes the list and is
 *   sent again once if that changes its headers.
 * - With `protocolVersion: '2025-11-25'` it speaks that revision instead (a session), and answers the server's
 *   questions sent with `params.task` with tasks of its own (receiver.ts).
 */
import { subscribeWebhook, unsubscribeWebhook, type SubscribeWebhookOptions, type WebhookSubscription } from './events.js';
import { randomUUID } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { setTimeout as delay } from 'node:timers/promises';
import type { AuthProvider, OAuthClientProvider } from '@modelcontextprotocol/client';
import { oauthFetch } from './oauth/index.js';
import {
  ErrorCode,
  IDEMPOTENCY_KEY_META,
  PUSH_META,
  STORE_UNAVAILABLE_CODE,
  TASKS_EXTENSION,
  isTerminal,
  type CreateTaskResult,
  type DetailedTask,
  type InputRequest,
  type InputRequests,
  type JsonObject,
  type JsonRpcErrorObject,
  type Task,
  type TaskStatus,
} from '../protocol/index.js';
import { streamOutput, type OutputEvent, type OutputGap, type OutputOptions } from './output.js';
import { DetachedError, RejectedToolError, RpcError, TaskCancelledError, TaskFailedError, TaskGoneError, TransportError, isRateLimited, neverSent } from './errors.js';
import { Journal, type JournalEntry } from './journal.js';
import { ListenSource, PollingSource, getTask, toDetailedTask, type ListenOptions, type PollingOptions, type StatusNote, type StatusSource } from './status.js';
import { ToolCatalog, type ToolList } from './tool-catalog.js';
import { RawDispatcher, type FetchLike, type RequestStats } from './transport.js';
import { TaskReceiver, receiverCapabilities, type ReceiverOptions } from './receiver.js';
import { LEGACY_PROTOCOL_VERSION } from '../protocol/legacy.js';
import { StdioChannel, type StdioServerOptions } from './stdio-transport.js';

/** A tool result as the server sent it (`content`, `structuredContent?`, `isError?`, `resultType`). */
export type CallToolResult = JsonObject & { content?: Array<JsonObject>; isError?: boolean; structuredContent?: JsonObject };

export interface InputContext {
  /** The input request's key (unique for the task's life). */
  key: string;
  /** The task asking, or undefined for a synchronous (MRTR) round of `tools/call`. */
  taskId: string | undefined;
  /** The tool called ('' for a question a 2025-11-25 server sends as a request of its own: it names no call). */
  tool: string;
  /** Aborts when the request stops being outstanding (answered elsewhere, timed out, task ended) or the handle detaches. */
  signal: AbortSignal;
}

/** Returns an ElicitResult `{action, content?}`. */
export type ElicitationHandler = (params: JsonObject, ctx: InputContext) => Promise<JsonObject>;
/** Returns a CreateMessageResult. */
export type SamplingHandler = (params: JsonObject, ctx: InputContext) => Promise<JsonObject>;
/** Returns a ListRootsResult `{roots}`. */
export type RootsHandler = (params: JsonObject, ctx: InputContext) => Promise<JsonObject>;

export interface TaskClientOptions {
  /** The server's Streamable HTTP endpoint; or `stdio`. */
  url?: string | URL;
  /** `url` is a replica of the server this URL names (another replica of one deployment, say the one a call was made
   *  on, now gone): calls are journaled under it, and `resume()` picks up its calls. Default: `url` itself. */
  replicaOf?: string | URL;
  /** Or a server this client starts and speaks to over its stdin/stdout (stdio-transport.ts); it is stopped on
   *  close(). The HTTP options (bearer, auth, authProvider, fetch) do not apply to it. */
  stdio?: StdioServerOptions;
  /** Ask the server to push each state change of this client's tasks to a destination its operator configured
   *  (`_meta["outlast/push"]`); verify and read deliveries with `verifyWebhook`. */
  push?: string;
  bearer?: string;
  authProvider?: AuthProvider;
  /** OAuth (MCP authorization): the SDK client's OAuthClientProvider, e.g. a LoopbackOAuthProvider. A 401 or a
   *  403 insufficient_scope runs the SDK's auth() once for all waiting requests, then retries. Wins over `bearer`. */
  auth?: OAuthClientProvider;
  fetch?: FetchLike;
  clientInfo?: { name: string; version: string };
  /** A Journal, a path to one, or nothing (an in-memory journal: no crash recovery). */
  journal?: Journal | string;
  /** How status arrives: 'listen' (default over HTTP; push with polling as fallback), 'poll' (default over stdio),
   *  or your own source. */
  status?: 'listen' | 'poll' | ((dispatcher: RawDispatcher, polling: PollingSource) => StatusSource);
  polling?: PollingOptions;
  listen?: ListenOptions;
  /** Input handlers; each one given is declared as a capability, the others are not. */
  elicitation?: ElicitationHandler;
  sampling?: SamplingHandler;
  roots?: RootsHandler;
  /** Retries of a request that got no answer (transport failure). Default 5 attempts, 500 ms doubling to 10 s. */
  retry?: { attempts?: number; baseDelayMs?: number; maxDelayMs?: number };
  /** Timeout of requests other than tools/call (and of a listen stream's headers). Default 30 000 ms. */
  requestTimeoutMs?: number;
  /** Deadline of one tools/call round; a round with no answer is retried with the same idempotency key. Default
   *  60 000 ms (0: none); none on a 2025-11-25 session. */
  callTimeoutMs?: number;
  /** '2026-07-28' (default) or '2025-11-25': a session with a server of that revision, whose questions (elicitation,
   *  sampling, roots) come as requests; asked with `params.task`, they are answered with a task of this client's own
   *  (receiver.ts). Tool calls on such a session are plain calls, answered inline. Over HTTP or over `stdio`. */
  protocolVersion?: '2026-07-28' | '2025-11-25';
  /** The tasks this client keeps for a 2025-11-25 server's questions: retention and suggested poll interval. */
  receiver?: ReceiverOptions;
}

export interface StartOptions {
  signal?: AbortSignal;
  /** Follow the task right away (default true). */
  follow?: boolean;
  /** Delivers the task's output as it is written (`tasks/stream`), in order, each item once; a cut stream is
   *  resumed after the last item, and the journal keeps that seq so `resume` continues after it. With it,
   *  `result()` resolves after the last item was delivered. */
  onOutput?: (event: OutputEvent, call: TaskCall) => void;
  /** Output the server no longer kept (its per-task bound): what was lost; delivery continues after it. */
  onOutputGap?: (gap: OutputGap, call: TaskCall) => void;
}

export interface ResumeOptions extends Pick<StartOptions, 'onOutput' | 'onOutputGap'> {
  /** Follow the tasks right away (default true). */
  follow?: boolean;
}

export interface TaskOutputOptions extends Omit<OutputOptions, 'after'> {
  /** The seq of the last item already had, or 'journal': after the last one this journal recorded as delivered
   *  for the task (0 when none). Default 0. */
  after?: number | 'journal';
}

export interface InputEvent {
  key: string;
  request: InputRequest;
  /** true when no handler can answer it (the application must, or the task waits). */
  unhandled: boolean;
}

export interface TaskCallEvents {
  /** A new state of the task (deduplicated). */
  task: [DetailedTask];
  /** An input request seen for the first time. */
  input: [InputEvent];
  /** An answer was delivered with tasks/update. */
  answered: [{ key: string }];
  /** Transport news: retries, 429s, listen / fallback. */
  note: [StatusNote];
  /** The task id is known (and journaled). */
  created: [Task];
  /** An output item of the task (only when output is followed: `onOutput`). */
  output: [OutputEvent];
  /** Output the server no longer kept; delivery continues after it. */
  outputGap: [OutputGap];
}

type Outcome = { ok: true; result: CallToolResult } | { ok: false; error: Error };

/** tools/list pages followed before giving up (a server whose cursors never end). */
const MAX_TOOL_PAGES = 100;

const sameHeaders = (a: Record<string, string>, b: Record<string, string>) =>
  Object.keys(a).length === Object.keys(b).length && Object.entries(a).every(([k, v]) => b[k] === v);

/** The server's store did not answer (-31504): every request TaskClient sends is safe to send again (reads, cancels,
 *  answers by key, and calls under their idempotency key). */
function isStoreUnavailable(e: unknown): e is RpcError {
  return e instanceof RpcError && e.code === STORE_UNAVAILABLE_CODE;
}

function retryAfterOf(e: RpcError): number {
  const ms = (e.data as { retryAfterMs?: unknown } | undefined)?.retryAfterMs;
  return typeof ms === 'number' && ms >= 0 ? Math.min(ms, 30_000) : 1000;
}

function backoff(attempt: number, base: number, max: number): number {
  return Math.round(Math.min(max, base * 2 ** attempt) * (0.9 + 0.2 * Math.random()));
}

/**
 * One logical tool call: answered inline or a task. Events: `task`, `input`, `answered`, `note`, `created`.
 */
export class TaskCall extends EventEmitter<TaskCallEvents> {
  /** The journal's id for this call (also its idempotency key). */
  readonly callId: string;
  readonly tool: string;
  readonly arguments: JsonObject;
  private _task: DetailedTask | undefined;
  private _inline: CallToolResult | undefined;
  private outcome: Outcome | undefined;
  private readonly settledPromise: Promise<Outcome>;
  private settle!: (o: Outcome) => void;
  /** Aborted by detach(), close(), or settlement. */
  readonly following = new AbortController();
  private followStarted = false;
  /** Aborted by detach() and close() only: output is read to its end after the task is terminal. */
  readonly outputFollowing = new AbortController();
  /** @internal Resolves once the task's output was delivered to its end (when output is followed). */
  outputDone: Promise<void> | undefined;
  /** Input keys being answered or already answered (never asked twice). */
  private readonly inputKeys = new Map<string, AbortController | null>();

  constructor(
    private readonly client: TaskClient,
    entry: JournalEntry,
  ) {
    super();
    this.callId = entry.callId;
    this.tool = entry.tool;
    this.arguments = entry.arguments;
    this.settledPromise = new Promise<Outcome>((r) => (this.settle = r));
    for (const [key, a] of client.journal.answers(entry.callId)) if (a.sent) this.inputKeys.set(key, null);
  }

  /** The task id, once the server made the call a task. */
  get taskId(): string | undefined {
    return this._task?.taskId;
  }
  /** The latest state: a task status, or 'completed' for an inline answer, or 'calling' before any answer. */
  get status(): TaskStatus | 'calling' {
    if (this._inline) return 'completed';
    return this._task?.status ?? (this.outcome && !this.outcome.ok ? 'failed' : 'calling');
  }
  /** The latest task state seen. */
  get task(): DetailedTask | undefined {
    return this._task;
  }
  /** true when the server answered inline (no task). */
  get inline(): boolean {
    return this._inline !== undefined;
  }
  get done(): boolean {
    return this.outcome !== undefined;
  }

  /** The final CallToolResult. Rejects with TaskFailedError, TaskCancelledError, TaskGoneError, DetachedError, RpcError or TransportError. Reading it marks the outcome read in the journal. */
  async result(): Promise<CallToolResult> {
    const o = await this.settledPromise;
    if (this.outputDone) {
      if (o.ok || o.error instanceof TaskFailedError || o.error instanceof TaskCancelledError) await this.outputDone;
      else this.outputFollowing.abort(o.error);
    }
    if (o.ok || (!(o.error instanceof DetachedError) && !(o.error instanceof TransportError))) this.client.journal.markRead(this.callId);
    if (o.ok) return o.result;
    throw o.error;
  }

  /** Asks the server to cancel (`tasks/cancel`); the handle keeps following until the task is terminal (it may still end `completed`). */
  async cancel(): Promise<void> {
    const taskId = this.taskId;
    if (!taskId || this.done) return;
    this.client.journal.cancelRequested(this.callId);
    await this.client.cancel(taskId);
  }

  /** Stops following; the task keeps running and stays in the journal for `resume`. */
  detach(): void {
    this.outputFollowing.abort(new DetachedError(this.taskId));
    if (this.done) return;
    this.finish({ ok: false, error: new DetachedError(this.taskId) });
  }

  // ---- internals (driven by TaskClient) ---------------------------------------------------------------------

  /** @internal */
  finish(o: Outcome): void {
    if (this.outcome) return;
    this.outcome = o;
    this.following.abort(o.ok ? new Error('settled') : o.error);
    for (const c of this.inputKeys.values()) c?.abort();
    this.settle(o);
  }

  /** @internal */
  setInline(result: CallToolResult): void {
    this._inline = result;
    this.finish({ ok: true, result });
  }

  /** @internal a state seen (from the create result, a poll or a push). */
  see(t: DetailedTask): void {
    if (this.outcome) return;
    const prev = this._task;
    const changed =
      !prev ||
      prev.status !== t.status ||
      prev.statusMessage !== t.statusMessage ||
      prev.lastUpdatedAt !== t.lastUpdatedAt ||
      Object.keys((prev as { inputRequests?: object }).inputRequests ?? {}).join() !== Object.keys((t as { inputRequests?: object }).inputRequests ?? {}).join();
    this._task = t;
    if (!prev) this.emit('created', t);
    if (!changed) return;
    this.client.journal.record(this.callId, t);
    this.emit('task', t);
    // Requests no longer outstanding: stop asking.
    const outstanding = t.status === 'input_required' ? t.inputRequests : {};
    for (const [key, ctl] of this.inputKeys) if (ctl && !(key in outstanding)) ctl.abort(new Error('no longer outstanding'));
    if (t.status === 'input_required') this.client.handleInputs(this, t.inputRequests);
    if (isTerminal(t.status)) this.finish(outcomeOf(t));
  }

  /** @internal */
  claimInput(key: string): AbortController | undefined {
    if (this.inputKeys.has(key)) return undefined;
    const c = new AbortController();
    this.inputKeys.set(key, c);
    return c;
  }
  /** @internal */
  inputDone(key: string): void {
    this.inputKeys.set(key, null);
  }
  /** @internal */
  inputReleased(key: string): void {
    if (this.inputKeys.get(key)) this.inputKeys.delete(key);
  }
  /** @internal */
  isOutstanding(key: string): boolean {
    const t = this._task;
    return !this.outcome && t?.status === 'input_required' && key in t.inputRequests;
  }
  /** @internal */
  startFollowing(): boolean {
    if (this.followStarted || this.outcome) return false;
    this.followStarted = true;
    return true;
  }
}

function outcomeOf(t: DetailedTask): Outcome {
  switch (t.status) {
    case 'completed':
      return { ok: true, result: t.result as CallToolResult };
    case 'failed':
      return { ok: false, error: new TaskFailedError(t.taskId, t.error) };
    case 'cancelled':
      return { ok: false, error: new TaskCancelledError(t.taskId) };
    default:
      throw new Error(`not terminal: ${t.status}`);
  }
}

/** The outcome a journal entry holds (for finished entries). */
function outcomeOfEntry(e: JournalEntry): Outcome | undefined {
  switch (e.state) {
    case 'completed':
      return { ok: true, result: e.outcome as CallToolResult };
    case 'failed':
      return { ok: false, error: e.taskId ? new TaskFailedError(e.taskId, e.outcome as unknown as JsonRpcErrorObject) : new RpcError(e.outcome as unknown as JsonRpcErrorObject) };
    case 'cancelled':
      return { ok: false, error: new TaskCancelledError(e.taskId ?? e.callId) };
    case 'expired':
    case 'not_found':
      return { ok: false, error: new TaskGoneError(e.taskId ?? e.callId, e.state) };
    default:
      return undefined;
  }
}

export class TaskClient {
  readonly dispatcher: RawDispatcher;
  readonly journal: Journal;
  readonly statusSource: StatusSource;
  readonly polling: PollingSource;
  /** The server as journaled: its URL (normalised; `replicaOf` when given), or `stdio:{command, args, cwd}` (stdio-transport.ts). */
  readonly url: string;
  private readonly ownsJournal: boolean;
  private readonly options: TaskClientOptions;
  private readonly calls = new Map<string, TaskCall>();
  private readonly retry: { attempts: number; baseDelayMs: number; maxDelayMs: number };
  /** This server's tools as last listed (for the `Mcp-Param-*` headers of each call). */
  private readonly tools = new ToolCatalog();
  private toolsRefresh: Promise<ToolList> | undefined;
  /** A 2025-11-25 session's questions answered as tasks (undefined on the 2026-07-28 wire). */
  private readonly receiver: TaskReceiver | undefined;
  private closed = false;

  constructor(options: TaskClientOptions) {
    this.options = options;
    const legacy = options.protocolVersion === LEGACY_PROTOCOL_VERSION;
    const capabilities: JsonObject = legacy ? {} : { extensions: { [TASKS_EXTENSION]: {} } };
    if (options.elicitation) capabilities.elicitation = legacy ? { form: {} } : {};
    if (options.sampling) capabilities.sampling = {};
    if (options.roots) capabilities.roots = {};
    if ((options.url === undefined) === (options.stdio === undefined)) throw new TypeError('TaskClient needs a server: give either url or stdio');
    if (legacy) {
      const handlers = { 'elicitation/create': options.elicitation, 'sampling/createMessage': options.sampling, 'roots/list': options.roots };
      this.receiver = new TaskReceiver(handlers, (method, params) => this.dispatcher.notify(method, params), options.receiver);
      const tasks = receiverCapabilities(handlers);
      if (tasks) capabilities.tasks = tasks;
    }
    const receiver = this.receiver;
    this.dispatcher = new RawDispatcher({
      ...(options.stdio ? { channel: new StdioChannel(options.stdio) } : { url: options.url! }),
      capabilities,
      ...(options.protocolVersion ? { protocolVersion: options.protocolVersion } : {}),
      ...(receiver
        ? { onServerRequest: (method: string, params: JsonObject, id: string | number) => receiver.serve(method, params, id), onServerNotification: (method: string, params: JsonObject) => receiver.notified(method, params) }
        : {}),
      ...(options.bearer !== undefined && !options.auth ? { bearer: options.bearer } : {}),
      ...(options.authProvider ? { authProvider: options.authProvider } : {}),
      ...(options.auth && options.url !== undefined
        ? { fetch: oauthFetch(options.auth, options.url, options.fetch) }
        : options.fetch
          ? { fetch: options.fetch }
          : {}),
      ...(options.clientInfo ? { clientInfo: options.clientInfo } : {}),
      ...(options.requestTimeoutMs !== undefined ? { requestTimeoutMs: options.requestTimeoutMs } : {}),
      // A 2025-11-25 server's call may wait minutes for a person's answer, and cannot safely be sent again: no deadline.
      ...(options.callTimeoutMs !== undefined || legacy ? { callTimeoutMs: options.callTimeoutMs ?? 0 } : {}),
    });
    if (options.replicaOf !== undefined && options.stdio) throw new TypeError('replicaOf names the server a url is a replica of; a stdio server has no replicas');
    this.url = options.replicaOf !== undefined ? new URL(String(options.replicaOf)).href : this.dispatcher.target;
    this.ownsJournal = !(options.journal instanceof Journal);
    this.journal = options.journal instanceof Journal ? options.journal : new Journal(options.journal ?? ':memory:');
    this.polling = new PollingSource(this.dispatcher, options.polling);
    const s = options.status ?? (options.stdio ? 'poll' : 'listen'); // Outlast's stdio front pushes nothing: poll the pipe
    this.statusSource =
      s === 'poll' ? this.polling : s === 'listen' ? new ListenSource(this.dispatcher, this.polling, options.listen) : s(this.dispatcher, this.polling);
    this.retry = {
      attempts: options.retry?.attempts ?? 5,
      baseDelayMs: options.retry?.baseDelayMs ?? 500,
      maxDelayMs: options.retry?.maxDelayMs ?? 10_000,
    };
  }

  /** HTTP requests sent so far, by method. */
  get stats(): RequestStats {
    return this.dispatcher.stats;
  }

  /**
   * `tools/list` (every page). Tools whose `x-mcp-header` declarations are invalid are left out and listed in
   * `rejected` with the reason; the rest are remembered, so each later `tools/call` carries the `Mcp-Param-*`
   * headers its tool declares. Concurrent calls share one request.
   */
  listTools(opts: { signal?: AbortSignal } = {}): Promise<ToolList> {
    this.assertOpen();
    if (!this.toolsRefresh) {
      this.toolsRefresh = this.fetchTools(opts.signal).finally(() => (this.toolsRefresh = undefined));
    }
    return this.toolsRefresh;
  }

  private async fetchTools(signal?: AbortSignal): Promise<ToolList> {
    const listed: unknown[] = [];
    let cursor: string | undefined;
    for (let page = 1; ; page++) {
      const params: JsonObject = cursor === undefined ? {} : { cursor };
      const r = await this.withRetries((s) => this.dispatcher.request('tools/list', params, s ? { signal: s } : {}), signal);
      if (!Array.isArray(r.tools)) throw new TransportError(`tools/list: the answer has no "tools" array (invalid response): ${JSON.stringify(r).slice(0, 200)}`, { retryable: false });
      listed.push(...r.tools);
      if (typeof r.nextCursor !== 'string' || r.nextCursor === cursor) break;
      if (page >= MAX_TOOL_PAGES) throw new TransportError(`tools/list: still a next page after ${MAX_TOOL_PAGES} pages; giving up`, { retryable: false });
      cursor = r.nextCursor;
    }
    return this.tools.replace(listed);
  }

  /** Calls a tool and returns its final CallToolResult, whether the server answered inline or made it a task. */
  /** Subscribes a webhook to MCP Events for your tasks (default outlast.task.finished, all of them); verify deliveries with webhookReceiver. */
  subscribeWebhook(o: SubscribeWebhookOptions): Promise<WebhookSubscription> {
    return subscribeWebhook(this.dispatcher, o);
  }
  unsubscribeWebhook(s: Pick<WebhookSubscription, 'name' | 'arguments' | 'url'>): Promise<void> {
    return unsubscribeWebhook(this.dispatcher, s);
  }

  async callTool(name: string, args: JsonObject = {}, opts: StartOptions = {}): Promise<CallToolResult> {
    const call = await this.start(name, args, opts);
    const onAbort = () => call.detach();
    opts.signal?.addEventListener('abort', onAbort, { once: true });
    try {
      return await call.result();
    } finally {
      opts.signal?.removeEventListener('abort', onAbort);
    }
  }

  /**
   * Sends `tools/call` and returns a handle as soon as the server answered: settled for an inline answer,
   * following the task otherwise. Rejects if the call itself was refused (RpcError) or could not be delivered
   * after the retries (TransportError; the call stays in the journal and `resume` retries it with the same key).
   */
  async start(name: string, args: JsonObject = {}, opts: StartOptions = {}): Promise<TaskCall> {
    if (typeof name !== 'string' || !name) throw new TypeError('callTool needs a tool name');
    if (args === null || typeof args !== 'object' || Array.isArray(args)) throw new TypeError('Tool arguments must be a JSON object');
    this.assertOpen();
    this.tools.assertCallable(name); // before anything is journaled
    const entry = this.journal.begin({ callId: randomUUID(), serverUrl: this.url, tool: name, arguments: args });
    const call = new TaskCall(this, entry);
    this.calls.set(call.callId, call);
    await this.send(call, opts.signal);
    if (opts.follow !== false) this.follow(call);
    if (opts.onOutput || opts.onOutputGap) this.followOutput(call, opts);
    return call;
  }

  /**
   * Follows a task this client did not start, by its id (one another process or replica started and recorded): a
   * handle like `start`'s, journaled from here on, its questions going to this client's handlers. Rejects with
   * TaskGoneError when the server does not know the task (expired, unknown, or bound to someone else).
   */
  async followTask(taskId: string, opts: { tool?: string; signal?: AbortSignal } = {}): Promise<TaskCall> {
    if (typeof taskId !== 'string' || !taskId) throw new TypeError('followTask needs a task id');
    this.assertOpen();
    const first = await this.withRetries((s) => getTask(this.dispatcher, taskId, s), opts.signal);
    const entry = this.journal.begin({ callId: randomUUID(), serverUrl: this.url, tool: opts.tool ?? '', arguments: {} });
    this.journal.taskCreated(entry.callId, first);
    const call = new TaskCall(this, this.journal.get(entry.callId)!);
    this.calls.set(call.callId, call);
    call.see(first);
    this.follow(call);
    return call;
  }

  /**
   * Picks up calls the journal holds for this server: unfinished ones are followed (a call that never got its
   * answer is re-sent with its idempotency key), finished ones whose outcome was not read are returned
   * settled. With `id`, only that task (or call).
   */
  async resume(id?: string, opts: ResumeOptions = {}): Promise<TaskCall[]> {
    this.assertOpen();
    let entries: JournalEntry[];
    if (id !== undefined) {
      entries = this.journal.find(id).filter((e) => e.serverUrl === this.url);
      if (!entries.length) throw new Error(`No task or call "${id}" for ${this.url} in the journal ${this.journal.path}`);
      entries = entries.slice(0, 1);
    } else entries = this.journal.pending(this.url);
    const out: TaskCall[] = [];
    for (const e of entries) {
      const call = await this.attach(e, opts.follow !== false);
      if ((opts.onOutput || opts.onOutputGap) && !call.inline) this.followOutput(call, opts);
      out.push(call);
    }
    return out;
  }

  /**
   * A task's output as an async iterator (`tasks/stream`): the items after `after` in seq order, each once, live
   * until the task is terminal; a cut stream is resumed after the last item received. With `after: 'journal'` it
   * starts after the last item this journal recorded as delivered for the task, and records the last item the
   * consumer took (at most every 200 ms, and when the iteration stops), so the next one continues after it, in this
   * process or the next (a crash may deliver the last fraction of a second again, never skip it). Throws OutputGoneError for output the
   * server no longer keeps unless `onGap` is given, TaskGoneError for an unknown task.
   */
  async *output(taskId: string, opts: TaskOutputOptions = {}): AsyncGenerator<OutputEvent, void, undefined> {
    this.assertOpen();
    const journaled = opts.after === 'journal';
    const after = opts.after === 'journal' ? this.journal.outputSeq(taskId) : opts.after ?? 0;
    let pending = 0;
    let writtenAt = 0;
    const record = (force: boolean) => {
      if (!journaled || !pending || (!force && Date.now() - writtenAt < 200)) return;
      if (this.journal.isOpen) this.journal.outputDelivered(taskId, pending);
      pending = 0;
      writtenAt = Date.now();
    };
    const stream = streamOutput(this.dispatcher, taskId, {
      ...opts,
      after,
      attempts: opts.attempts ?? this.retry.attempts,
      baseDelayMs: opts.baseDelayMs ?? this.retry.baseDelayMs,
      maxDelayMs: opts.maxDelayMs ?? this.retry.maxDelayMs,
    });
    try {
      for await (const e of stream) {
        yield e;
        pending = e.seq; // the consumer asked for the next one: this one is delivered
        record(false);
      }
    } finally {
      record(true);
    }
  }

  /** Delivers a call's output to onOutput / the `output` event, from where the journal says delivery stopped. */
  private followOutput(call: TaskCall, opts: Pick<StartOptions, 'onOutput' | 'onOutputGap'>): void {
    const taskId = call.taskId;
    if (!taskId || call.outputDone) return;
    const signal = call.outputFollowing.signal;
    call.outputDone = (async () => {
      try {
        const events = this.output(taskId, {
          after: 'journal',
          signal,
          onGap: (gap) => {
            call.emit('outputGap', gap);
            opts.onOutputGap?.(gap, call);
          },
          onRetry: (error, delayMs) => call.emit('note', { kind: 'retry', error, delayMs }),
        });
        for await (const e of events) {
          call.emit('output', e);
          opts.onOutput?.(e, call);
        }
      } catch (e) {
        if (!signal.aborted) call.emit('note', { kind: 'output_failed', error: e as Error });
      }
    })();
  }

  /** A handle for one journal entry (settled if it is finished). */
  private async attach(e: JournalEntry, follow: boolean): Promise<TaskCall> {
    const existing = this.calls.get(e.callId);
    if (existing && !existing.done) return existing;
    const call = new TaskCall(this, e);
    this.calls.set(e.callId, call);
    const finished = outcomeOfEntry(e);
    if (finished) {
      if (e.state === 'completed' && e.inline) call.setInline(finished.ok ? finished.result : {});
      else {
        if (e.taskId) call.see(this.entryTask(e));
        call.finish(finished);
      }
      return call;
    }
    if (e.state === 'calling' || !e.taskId) {
      await this.send(call);
    } else {
      call.see(this.entryTask(e));
    }
    if (follow) this.follow(call, !!e.taskId);
    return call;
  }

  private entryTask(e: JournalEntry): DetailedTask {
    const now = new Date(e.updatedAt).toISOString();
    const t = {
      taskId: e.taskId!,
      status: e.state === 'input_required' || e.state === 'completed' || e.state === 'failed' || e.state === 'cancelled' ? e.state : 'working',
      createdAt: e.taskCreatedAt ?? new Date(e.createdAt).toISOString(),
      lastUpdatedAt: now,
      ttlMs: e.ttlMs ?? null,
      ...(e.statusMessage !== undefined ? { statusMessage: e.statusMessage } : {}),
      ...(e.pollIntervalMs !== undefined ? { pollIntervalMs: e.pollIntervalMs } : {}),
    } as Task;
    if (t.status === 'input_required') return { ...t, status: 'input_required', inputRequests: {} };
    if (t.status === 'completed') return { ...t, status: 'completed', result: e.outcome ?? {} };
    if (t.status === 'failed') return { ...t, status: 'failed', error: (e.outcome ?? { code: -32603, message: 'failed' }) as unknown as JsonRpcErrorObject };
    return t as DetailedTask;
  }

  /** `tasks/get` once. */
  getTask(taskId: string, signal?: AbortSignal): Promise<DetailedTask> {
    return getTask(this.dispatcher, taskId, signal);
  }

  /** `tasks/cancel` (retried on transport failures). The server honours it cooperatively; the task may still end completed. */
  async cancel(taskId: string): Promise<void> {
    for (const e of this.journal.find(taskId)) if (e.taskId === taskId) this.journal.cancelRequested(e.callId);
    try {
      await this.withRetries((signal) => this.dispatcher.request('tasks/cancel', { taskId }, { signal }));
    } catch (e) {
      if (e instanceof RpcError && e.code === -32602 && /expired|not found/i.test(e.message)) {
        const reason = /expired/i.test(e.message) ? 'expired' : 'not_found';
        throw new TaskGoneError(taskId, reason, e.message);
      }
      throw e;
    }
  }

  /** Stops following every call and drops them all from this client and its journal: for an owner that keeps its
   *  own record of its calls (the gateway, between two calls of one upstream connection), so a long-lived client
   *  does not grow with each call. */
  forgetAll(): void {
    for (const call of this.calls.values()) {
      call.detach();
      this.journal.forget(call.callId);
    }
    this.calls.clear();
  }

  /** Stops following every handle (tasks keep running; the journal keeps them) and closes the connection. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const c of this.calls.values()) c.detach();
    // Output readers stop at once; let them journal the last item delivered first.
    await Promise.all([...this.calls.values()].map((c) => c.outputDone));
    this.receiver?.close();
    await this.dispatcher.close();
    if (this.ownsJournal) this.journal.close();
  }

  private assertOpen(): void {
    if (this.closed) throw new Error('This TaskClient is closed');
  }

  /** Runs `fn` again after transport failures (and 429s), with exponential back-off. */
  private async withRetries<T>(fn: (signal?: AbortSignal) => Promise<T>, signal?: AbortSignal, onRetry?: (e: Error, ms: number) => void): Promise<T> {
    for (let attempt = 0; ; attempt++) {
      try {
        return await fn(signal);
      } catch (e) {
        const retryable = (e instanceof TransportError && e.retryable) || isRateLimited(e) || isStoreUnavailable(e);
        if (!retryable || attempt + 1 >= this.retry.attempts || signal?.aborted || this.closed) {
          if (e instanceof TransportError && retryable) {
            throw new TransportError(`${e.message} (gave up after ${attempt + 1} attempts)`, { cause: e, ...(e.httpStatus ? { httpStatus: e.httpStatus } : {}) });
          }
          throw e;
        }
        const ms = isRateLimited(e) ? (e as { retryAfterMs?: number }).retryAfterMs ?? 1000
          : isStoreUnavailable(e) ? Math.max(retryAfterOf(e), backoff(attempt, this.retry.baseDelayMs, this.retry.maxDelayMs))
          : backoff(attempt, this.retry.baseDelayMs, this.retry.maxDelayMs);
        onRetry?.(e as Error, ms);
        await delay(ms, undefined, signal ? { signal } : {});
      }
    }
  }

  /** Sends (or re-sends, with the same idempotency key) the call's `tools/call`, running MRTR rounds. */
  private async send(call: TaskCall, signal?: AbortSignal): Promise<void> {
    let extra: JsonObject = {};
    for (let round = 0; ; round++) {
      let r: JsonObject;
      try {
        r = await this.sendToolCall(call, extra, signal);
      } catch (e) {
        if (e instanceof RejectedToolError) {
          this.journal.callRefused(call.callId, { code: ErrorCode.HeaderMismatch, message: e.message });
          call.finish({ ok: false, error: e });
        }
        if (e instanceof RpcError) {
          this.journal.callRefused(call.callId, e.toJSON() as unknown as JsonObject);
          call.finish({ ok: false, error: e });
        }
        const unsent = e instanceof TransportError && neverSent(e);
        // Ended here, not left for resume: every attempt was refused before a byte reached the server (nothing can
        // have started), or a 2025-11-25 server, which keeps no idempotency key, could run it twice.
        if (e instanceof TransportError && (unsent || this.options.protocolVersion === LEGACY_PROTOCOL_VERSION)) {
          const reason = unsent ? 'nothing was sent' : 'a 2025-11-25 server keeps no idempotency key, so the call was not sent again (it may or may not have run)';
          const error = { code: -32603, message: `${e.message}; ${reason}` };
          this.journal.callRefused(call.callId, error);
          call.finish({ ok: false, error: new TransportError(error.message, { cause: e, retryable: false }) });
          throw new TransportError(error.message, { cause: e, retryable: false });
        }
        if (e instanceof TransportError) {
          const msg = `${e.message}. The call is journaled as ${call.callId} in ${this.journal.path}; \`outlast resume ${call.callId}\` (or TaskClient.resume) retries it with the same idempotency key, so it cannot start twice`;
          throw new TransportError(msg, { cause: e, retryable: e.retryable, ...(e.httpStatus ? { httpStatus: e.httpStatus } : {}) });
        }
        throw e;
      }
      const kind = r.resultType ?? 'complete';
      if (kind === 'task') {
        // A CreateTaskResult carries no outcome: one already finished (a retry that found the task its key made) is
        // read with tasks/get, which does.
        const finished = typeof r.taskId === 'string' && isTerminal(r.status as TaskStatus);
        const t = finished ? await this.withRetries((s) => getTask(this.dispatcher, r.taskId as string, s), signal) : toDetailedTask(r);
        this.journal.taskCreated(call.callId, t as Task as CreateTaskResult); // committed before anyone hears the id
        call.see(t);
        return;
      }
      if (kind === 'complete') {
        const { _meta: _m, ...result } = r;
        this.journal.finishInline(call.callId, result);
        call.setInline(result as CallToolResult);
        return;
      }
      if (kind === 'input_required') {
        if (round >= 10) throw new RpcError({ code: -32603, message: `tools/call ${call.tool}: the server still asks for input after 10 rounds` });
        const requests = (r.inputRequests ?? {}) as InputRequests;
        const responses: JsonObject = {};
        for (const [key, req] of Object.entries(requests)) {
          const ctl = new AbortController();
          const answer = await this.answer(call, key, req, undefined, ctl.signal);
          if (answer === undefined) {
            const e = new RpcError({ code: -32603, message: `tools/call ${call.tool} needs input "${key}" (${req.method}) and no handler for it was given` });
            this.journal.callRefused(call.callId, e.toJSON() as unknown as JsonObject);
            call.finish({ ok: false, error: e });
            throw e;
          }
          responses[key] = answer;
        }
        extra = { inputResponses: responses, ...(typeof r.requestState === 'string' ? { requestState: r.requestState } : {}) };
        continue;
      }
      const e = new TransportError(`tools/call ${call.tool}: unrecognised resultType "${String(kind)}" (invalid response)`, { retryable: false });
      throw e;
    }
  }

  /**
   * One `tools/call` round with the `Mcp-Param-*` headers the tool catalogue gives (retried on transport failures
   * with the same idempotency key). A -32020 refreshes the catalogue and resends once if the headers change: the
   * spec's recovery when the tool's schema was not known yet or has changed; the refusal happened before the
   * tool ran, so nothing runs twice.
   */
  private async sendToolCall(call: TaskCall, extra: JsonObject, signal?: AbortSignal): Promise<JsonObject> {
    const attempt = (headers: Record<string, string>) =>
      this.withRetries(
        (s) => this.dispatcher.request('tools/call', { name: call.tool, arguments: call.arguments, ...extra }, { meta: { [IDEMPOTENCY_KEY_META]: call.callId, ...(this.options.push ? { [PUSH_META]: this.options.push } : {}) }, headers, ...(s ? { signal: s } : {}) }),
        signal,
        (error, delayMs) => call.emit('note', { kind: 'retry', error, delayMs }),
      );
    const sent = this.tools.headersFor(call.tool, call.arguments);
    try {
      return await attempt(sent);
    } catch (e) {
      if (!(e instanceof RpcError) || e.code !== ErrorCode.HeaderMismatch) throw e;
      try {
        await this.listTools(signal ? { signal } : {});
      } catch {
        throw e; // the refusal is the news; a failed refresh would only hide it
      }
      const fresh = this.tools.headersFor(call.tool, call.arguments);
      if (sameHeaders(fresh, sent)) throw e;
      return attempt(fresh);
    }
  }

  /** Runs the handler for one input request; undefined when there is none for its kind. */
  private async answer(call: TaskCall, key: string, req: InputRequest, taskId: string | undefined, signal: AbortSignal): Promise<JsonObject | undefined> {
    const handler =
      req.method === 'elicitation/create' ? this.options.elicitation : req.method === 'sampling/createMessage' ? this.options.sampling : req.method === 'roots/list' ? this.options.roots : undefined;
    call.emit('input', { key, request: req, unhandled: !handler });
    if (!handler) return undefined;
    return handler((req.params ?? {}) as JsonObject, { key, taskId, tool: call.tool, signal });
  }

  /** @internal Input requests of a task state: each new key goes to its handler once; answers go back with tasks/update. */
  handleInputs(call: TaskCall, requests: InputRequests): void {
    const saved = this.journal.answers(call.callId);
    for (const [key, req] of Object.entries(requests)) {
      const ctl = call.claimInput(key);
      if (!ctl) continue;
      const signal = AbortSignal.any([ctl.signal, call.following.signal]);
      void (async () => {
        try {
          let response = saved.get(key)?.response;
          if (!response) {
            response = await this.answer(call, key, req, call.taskId, signal);
            if (response === undefined) {
              call.inputReleased(key); // nobody can answer it here; the application may, through the event
              return;
            }
            if (signal.aborted) return;
            this.journal.saveAnswer(call.callId, key, response);
          }
          if (!call.isOutstanding(key)) return; // answered elsewhere, timed out, or the task moved on
          await this.withRetries((s) => this.dispatcher.request('tasks/update', { taskId: call.taskId!, inputResponses: { [key]: response } }, s ? { signal: s } : {}),
            call.following.signal,
            (error, delayMs) => call.emit('note', { kind: 'retry', error, delayMs }),
          );
          this.journal.answerSent(call.callId, key);
          call.inputDone(key);
          call.emit('answered', { key });
        } catch (e) {
          if (signal.aborted) return;
          call.inputReleased(key);
          call.emit('note', { kind: 'retry', error: e as Error, delayMs: 0 });
        }
      })();
    }
  }

  /** Answers an input request from outside the handlers (e.g. a UI reacting to the `input` event). */
  async respond(call: TaskCall, key: string, response: JsonObject): Promise<void> {
    if (!call.taskId) throw new Error('This call has no task');
    this.journal.saveAnswer(call.callId, key, response);
    await this.dispatcher.request('tasks/update', { taskId: call.taskId, inputResponses: { [key]: response } });
    this.journal.answerSent(call.callId, key);
    call.inputDone(key);
    call.emit('answered', { key });
  }

  /** Follows a task handle until terminal, detach or close. */
  private follow(call: TaskCall, refreshFirst = false): void {
    if (!call.taskId || !call.startFollowing()) return;
    const signal = call.following.signal;
    const taskId = call.taskId;
    void (async () => {
      try {
        if (refreshFirst) {
          // After a restart: learn the current state at once (or that the task is gone).
          const t = await this.withRetries((s) => getTask(this.dispatcher, taskId, s), signal, (error, delayMs) => call.emit('note', { kind: 'retry', error, delayMs }));
          call.see(t);
          if (call.done) return;
        }
        const terminal = await this.statusSource.follow(
          taskId,
          call.task!,
          { task: (t) => call.see(t), note: (n) => call.emit('note', n) },
          signal,
        );
        call.see(terminal);
      } catch (e) {
        if (signal.aborted) return;
        if (e instanceof TaskGoneError) {
          this.journal.gone(call.callId, e.reason, e.message);
          call.finish({ ok: false, error: e });
          return;
        }
        call.finish({ ok: false, error: e as Error });
      }
    })();
  }
}
