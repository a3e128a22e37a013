/**
 * The client as receiver (2025-11-25 Tasks wire): a server's task-augmented `elicitation/create` or
 * `sampling/createMessage` (`params.task`) is answered at once with a task of this client's own, the application's
 * handler runs in the background (a person may take minutes), and the server follows the task with `tasks/get`,
 * `tasks/result` (blocks until the task is terminal), `tasks/list` and `tasks/cancel` (aborts the handler's signal).
 * Plain requests of the same kinds are answered by the same handlers, directly.
 *
 * The tasks live in this process only: a client that restarts has forgotten them, and the server's next `tasks/get`
 * is answered "Task not found" (the server's own request is gone with the session anyway).
 */
import { randomUUID } from 'node:crypto';
import { ErrorCode, isTerminal, type JsonObject, type JsonRpcErrorObject, type TaskStatus } from '../protocol/index.js';
import { RELATED_TASK_META, type LegacyTask } from '../protocol/legacy.js';
import { RpcError } from './errors.js';
import { RequestCancelledByServer } from './transport.js';

/** What a handler learns besides the request's params. */
export interface ReceivedRequestContext {
  /** This client's task id for a task-augmented request; `request-<JSON-RPC id>` for a plain one. */
  key: string;
  /** The server's task the request belongs to (its `related-task` `_meta`), if it named one. */
  taskId: string | undefined;
  /** Always '': the server's request does not say which tool call it serves. */
  tool: string;
  /** Aborts when the server cancels the task, the task expires, or the client closes. */
  signal: AbortSignal;
}

/** Answers one kind of request the server sends: an ElicitResult, a CreateMessageResult or a ListRootsResult. */
export type ReceivedRequestHandler = (params: JsonObject, ctx: ReceivedRequestContext) => Promise<JsonObject>;

/** The requests a client may answer with a task of its own (the 2025-11-25 `tasks.requests` capability). */
export type TaskAugmentable = 'elicitation/create' | 'sampling/createMessage';

export interface ReceiverHandlers {
  'elicitation/create'?: ReceivedRequestHandler;
  'sampling/createMessage'?: ReceivedRequestHandler;
  'roots/list'?: ReceivedRequestHandler;
}

export interface ReceiverOptions {
  /** Retention of a task when the server asks for none, in ms from its creation (default 3 600 000: one hour). */
  defaultTtlMs?: number;
  /** The longest retention granted (default 86 400 000: a day); a longer request gets this, and the task says so. */
  maxTtlMs?: number;
  /** The poll interval suggested to the server, in ms (default 1000). */
  pollIntervalMs?: number;
  /** Tasks per `tasks/list` page (default 50). */
  pageSize?: number;
}

interface ReceivedTask {
  task: LegacyTask;
  /** The answer `tasks/result` gives once the task is terminal. */
  outcome?: { result: JsonObject } | { error: JsonRpcErrorObject };
  /** Resolves when the task is terminal (or expired). */
  settled: Promise<void>;
  settle(): void;
  controller: AbortController;
  expiry: NodeJS.Timeout;
}

const MAX_TIMER_MS = 2 ** 31 - 1;
/** Expired ids remembered (beyond that the oldest are said to be "not found"). */
const EXPIRED_IDS_KEPT = 10_000;

const notFound = () => new RpcError({ code: ErrorCode.InvalidParams, message: 'Failed to retrieve task: Task not found' });
const expired = () => new RpcError({ code: ErrorCode.InvalidParams, message: 'Failed to retrieve task: Task has expired' });

/** `tasks` of the client capabilities of a 2025-11-25 session: what `handlers` lets this client take as a task. */
export function receiverCapabilities(handlers: ReceiverHandlers): JsonObject | undefined {
  const requests: JsonObject = {};
  if (handlers['elicitation/create']) requests.elicitation = { create: {} };
  if (handlers['sampling/createMessage']) requests.sampling = { createMessage: {} };
  return Object.keys(requests).length ? { list: {}, cancel: {}, requests } : undefined;
}

export class TaskReceiver {
  /** Insertion order is creation order: `tasks/list` pages through it. */
  private readonly tasks = new Map<string, ReceivedTask>();
  /** Ids of tasks removed at the end of their ttl, so the server hears "expired" rather than "not found". */
  private readonly expiredIds = new Set<string>();
  /** Plain requests being answered, by JSON-RPC id: a `notifications/cancelled` for one aborts its handler. */
  private readonly plain = new Map<string | number, AbortController>();
  private readonly closing = new AbortController();
  private readonly defaultTtlMs: number;
  private readonly maxTtlMs: number;
  private readonly pollIntervalMs: number;
  private readonly pageSize: number;

  constructor(
    private readonly handlers: ReceiverHandlers,
    /** Sends `notifications/tasks/status` (failures are the server's loss: it polls anyway). */
    private readonly notify: (method: string, params: JsonObject) => Promise<void>,
    options: ReceiverOptions = {},
  ) {
    this.defaultTtlMs = positiveInt(options.defaultTtlMs, 3_600_000, 'defaultTtlMs');
    this.maxTtlMs = positiveInt(options.maxTtlMs, 86_400_000, 'maxTtlMs');
    this.pollIntervalMs = positiveInt(options.pollIntervalMs, 1000, 'pollIntervalMs');
    this.pageSize = positiveInt(options.pageSize, 50, 'pageSize');
    // A timer cannot wait longer (Node fires it at once beyond 2^31-1 ms).
    if (this.maxTtlMs > MAX_TIMER_MS) throw new TypeError(`receiver.maxTtlMs must be at most ${MAX_TIMER_MS} (about 24 days)`);
  }

  /** Answers one request the server sent; throws RpcError for a JSON-RPC error. */
  async serve(method: string, params: JsonObject, id: string | number): Promise<JsonObject> {
    switch (method) {
      case 'ping':
        return {};
      case 'elicitation/create':
      case 'sampling/createMessage':
      case 'roots/list': {
        const handler = this.handlers[method];
        if (!handler) throw new RpcError({ code: ErrorCode.MethodNotFound, message: `This client takes no ${method} requests (no handler was given)` });
        const { task, ...plain } = params;
        // roots/list is not task-augmentable: a `task` on it is ignored and the request answered as usual.
        if (task !== undefined && method !== 'roots/list') return this.create(method, plain, task, handler);
        return this.answer(method, plain, id, handler);
      }
      case 'tasks/get':
        return { ...this.find(params).task };
      case 'tasks/result':
        return this.result(this.find(params));
      case 'tasks/list':
        return this.list(params);
      case 'tasks/cancel':
        return this.cancel(this.find(params));
      default:
        throw new RpcError({ code: ErrorCode.MethodNotFound, message: `Method not found: ${method}` });
    }
  }

  /** A notification from the server: `notifications/cancelled` aborts the handler of that plain request (a task is
   *  cancelled with tasks/cancel instead). */
  notified(method: string, params: JsonObject): void {
    if (method !== 'notifications/cancelled') return;
    const id = params.requestId;
    if (typeof id === 'string' || typeof id === 'number') this.plain.get(id)?.abort(new RequestCancelledByServer(`The server cancelled its request${typeof params.reason === 'string' ? `: ${params.reason}` : ''}`));
  }

  /** Aborts every handler still running and forgets every task. */
  close(): void {
    this.closing.abort(new Error('The client was closed'));
    for (const t of this.tasks.values()) {
      clearTimeout(t.expiry);
      t.settle();
    }
    this.tasks.clear();
  }

  /** A plain request: the handler's result is the answer, unless the server cancelled the request meanwhile. */
  private async answer(method: string, params: JsonObject, id: string | number, handler: ReceivedRequestHandler): Promise<JsonObject> {
    const controller = new AbortController();
    this.plain.set(id, controller);
    let result: JsonObject;
    try {
      const signal = AbortSignal.any([controller.signal, this.closing.signal]);
      result = await handler(params, { key: `request-${String(id)}`, taskId: relatedTaskId(params), tool: '', signal });
    } catch (e) {
      throw controller.signal.aborted ? controller.signal.reason : e;
    } finally {
      this.plain.delete(id);
    }
    if (controller.signal.aborted) throw controller.signal.reason; // the server gave up: it gets no answer
    return resultObject(method, result);
  }

  private create(method: TaskAugmentable, params: JsonObject, requested: unknown, handler: ReceivedRequestHandler): JsonObject {
    if (requested === null || typeof requested !== 'object' || Array.isArray(requested)) {
      throw new RpcError({ code: ErrorCode.InvalidParams, message: `${method}: "task" must be an object ({ttl?})` });
    }
    const ttlAsked = (requested as { ttl?: unknown }).ttl;
    if (ttlAsked !== undefined && !(Number.isInteger(ttlAsked) && (ttlAsked as number) >= 0)) {
      throw new RpcError({ code: ErrorCode.InvalidParams, message: `${method}: "task.ttl" must be a whole number of milliseconds` });
    }
    const ttl = Math.min(ttlAsked === undefined ? this.defaultTtlMs : (ttlAsked as number), this.maxTtlMs);
    const now = new Date().toISOString();
    const taskId = randomUUID(); // unguessable: the only thing binding a task to this client's session
    let settle!: () => void;
    const settled = new Promise<void>((r) => (settle = r));
    const controller = new AbortController();
    const received: ReceivedTask = {
      task: { taskId, status: 'working', createdAt: now, lastUpdatedAt: now, ttl, pollInterval: this.pollIntervalMs },
      settled,
      settle,
      controller,
      expiry: setTimeout(() => this.expire(taskId), ttl),
    };
    received.expiry.unref();
    this.tasks.set(taskId, received);
    const signal = AbortSignal.any([controller.signal, this.closing.signal]);
    void Promise.resolve()
      .then(() => handler(params, { key: taskId, taskId: relatedTaskId(params), tool: '', signal }))
      .then((result) => resultObject(method, result))
      .then(
        (result) => this.finish(received, 'completed', { result }),
        (e: unknown) => {
          const error = e instanceof RpcError ? e.toJSON() : { code: ErrorCode.InternalError, message: (e as Error)?.message ?? String(e) };
          this.finish(received, 'failed', { error }, error.message);
        },
      );
    return { task: { ...received.task } };
  }

  /** A handler's end: the first terminal status wins (a cancelled task stays cancelled whatever its handler does). */
  private finish(t: ReceivedTask, status: TaskStatus, outcome: NonNullable<ReceivedTask['outcome']>, statusMessage?: string): void {
    if (isTerminal(t.task.status) || this.tasks.get(t.task.taskId) !== t) return;
    t.outcome = outcome;
    this.move(t, status, statusMessage);
  }

  private move(t: ReceivedTask, status: TaskStatus, statusMessage?: string): void {
    const { statusMessage: _old, ...rest } = t.task;
    t.task = { ...rest, status, lastUpdatedAt: new Date().toISOString(), ...(statusMessage !== undefined ? { statusMessage } : {}) };
    if (isTerminal(status)) t.settle();
    void this.notify('notifications/tasks/status', { ...t.task }).catch(() => undefined);
  }

  private expire(taskId: string): void {
    const t = this.tasks.get(taskId);
    if (!t) return;
    this.tasks.delete(taskId);
    this.expiredIds.add(taskId);
    if (this.expiredIds.size > EXPIRED_IDS_KEPT) this.expiredIds.delete(this.expiredIds.values().next().value!);
    t.controller.abort(new Error(`Task ${taskId} expired`));
    t.settle();
  }

  private find(params: JsonObject): ReceivedTask {
    const taskId = params.taskId;
    if (typeof taskId !== 'string' || !taskId) throw new RpcError({ code: ErrorCode.InvalidParams, message: 'Missing "taskId" (a string)' });
    const t = this.tasks.get(taskId);
    if (t) return t;
    throw this.expiredIds.has(taskId) ? expired() : notFound();
  }

  /** Blocks until the task is terminal, then answers exactly what the request itself would have. */
  private async result(t: ReceivedTask): Promise<JsonObject> {
    await t.settled;
    const taskId = t.task.taskId;
    if (this.tasks.get(taskId) !== t) throw this.expiredIds.has(taskId) ? expired() : new RpcError({ code: ErrorCode.InternalError, message: 'The client was closed' });
    const outcome = t.outcome;
    if (!outcome) throw new RpcError({ code: ErrorCode.InternalError, message: `Task ${taskId} was cancelled; it has no result` });
    if ('error' in outcome) throw new RpcError(outcome.error);
    const meta = (outcome.result._meta ?? {}) as JsonObject;
    return { ...outcome.result, _meta: { ...meta, [RELATED_TASK_META]: { taskId } } };
  }

  private list(params: JsonObject): JsonObject {
    const ids = [...this.tasks.keys()];
    let start = 0;
    if (params.cursor !== undefined) {
      // The cursor is the id of the last task of the previous page; a task that left since means a bad cursor.
      const at = typeof params.cursor === 'string' ? ids.indexOf(params.cursor) : -1;
      if (at < 0) throw new RpcError({ code: ErrorCode.InvalidParams, message: 'Invalid cursor: pass the nextCursor of a previous page unchanged' });
      start = at + 1;
    }
    const page = ids.slice(start, start + this.pageSize);
    const tasks = page.map((id) => ({ ...this.tasks.get(id)!.task }));
    return start + this.pageSize < ids.length ? { tasks, nextCursor: page[page.length - 1]! } : { tasks };
  }

  /** Cancelled before the answer is sent, and the handler's signal aborted. */
  private cancel(t: ReceivedTask): JsonObject {
    if (isTerminal(t.task.status)) {
      throw new RpcError({ code: ErrorCode.InvalidParams, message: `Cannot cancel task: already in terminal status '${t.task.status}'` });
    }
    this.move(t, 'cancelled', 'Cancelled by the server');
    t.controller.abort(new Error(`Task ${t.task.taskId} was cancelled by the server`));
    return { ...t.task };
  }
}

/** What a handler gave, if it is a result object; a handler bug is a clear error to the server, not a malformed answer. */
function resultObject(method: string, result: unknown): JsonObject {
  if (result === null || typeof result !== 'object' || Array.isArray(result)) {
    throw new RpcError({ code: ErrorCode.InternalError, message: `The client's ${method} handler returned ${result === null ? 'null' : Array.isArray(result) ? 'an array' : typeof result}, not a result object` });
  }
  return result as JsonObject;
}

function relatedTaskId(params: JsonObject): string | undefined {
  const related = (params._meta as JsonObject | undefined)?.[RELATED_TASK_META] as { taskId?: unknown } | undefined;
  return typeof related?.taskId === 'string' ? related.taskId : undefined;
}

function positiveInt(v: number | undefined, fallback: number, name: string): number {
  if (v === undefined) return fallback;
  if (!Number.isInteger(v) || v <= 0) throw new TypeError(`receiver.${name} must be a positive whole number (got ${String(v)})`);
  return v;
}
