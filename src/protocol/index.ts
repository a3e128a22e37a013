/**
 * The one vocabulary every room imports: wire types of the Tasks extension (2026-07-28), `_meta` keys,
 * error codes and the errors a caller can meet. Nothing here knows about the SDK, a store or the runtime.
 */

export const TASKS_EXTENSION = 'io.modelcontextprotocol/tasks';
export const PROTOCOL_VERSION = '2026-07-28';
export const PROTOCOL_VERSION_META = 'io.modelcontextprotocol/protocolVersion';
export const CLIENT_CAPABILITIES_META = 'io.modelcontextprotocol/clientCapabilities';
export const CLIENT_INFO_META = 'io.modelcontextprotocol/clientInfo';
export const SUBSCRIPTION_ID_META = 'io.modelcontextprotocol/subscriptionId';
export const SERVER_INFO_META = 'io.modelcontextprotocol/serverInfo';
/** Caller-chosen idempotency key for `tools/call` (scoped to principal and tool). */
export const IDEMPOTENCY_KEY_META = 'outlast/idempotencyKey';
/** Names a push destination the server's operator configured: each state change of the task is delivered there as
 *  a signed webhook (for callers that are not connected). */
export const PUSH_META = 'outlast/push';
/** In an elicitation's `params._meta`: who may answer it ('any': the model too, through outlast_task_answer;
 *  'operator': an operator on the dashboard). Absent: 'person', the client's user (through the client or the page). */
export const ANSWERED_BY_META = 'outlast/answeredBy';
export type AnsweredBy = 'person' | 'any' | 'operator';
/** In a task's `_meta` (tasks/get on both wires, notifications/tasks): its latest output sequence number, present once
 *  it has output, so a poller knows there is output to read (tasks/stream, the status tool) without opening a stream. */
export const OUTPUT_SEQ_META = 'outlast/outputSeq';
/** In a tool's `_meta` (tools/list): how Outlast serves it ('auto': inline, or a task once it outlasts its budget;
 *  'always': a task; 'never': inline), since a 2026-07-28 tool has no `execution.taskSupport`. */
export const TASK_POLICY_META = 'outlast/policy';
/** In a tool's `_meta` behind `outlast gateway`: the name of the upstream server the tool comes from. */
export const UPSTREAM_META = 'outlast/upstream';
/** SEP-2694 (draft): the request that streams a task's events, and the notification each event travels in. */
export const TASKS_STREAM_METHOD = 'tasks/stream';
export const TASK_EVENT_NOTIFICATION = 'notifications/tasks/event';

export function answeredByOf(request: { params?: Record<string, unknown> | undefined }): AnsweredBy {
  const v = (request.params?._meta as Record<string, unknown> | undefined)?.[ANSWERED_BY_META];
  return v === 'any' || v === 'operator' ? v : 'person';
}

/**
 * How an input answer records that the client could not answer (it replied to the input request with a JSON-RPC
 * error, e.g. -32601 for a kind it does not support): `{ [INPUT_REFUSED]: {code, message} }`.
 */
export const INPUT_REFUSED = 'outlast/inputRefused';

/** JSON-RPC error codes used by the spec (see protocol.md §1.2). */
export const ErrorCode = {
  ParseError: -32700,
  InvalidRequest: -32600,
  MethodNotFound: -32601,
  InvalidParams: -32602,
  InternalError: -32603,
  HeaderMismatch: -32020,
  MissingRequiredClientCapability: -32021,
  UnsupportedProtocolVersion: -32022,
} as const;

/**
 * Outlast's own code for "you are polling faster than advertised". The spec reserves -32020..-32099 for
 * itself and asks new implementations not to use -32000..-32019, so a rate limit uses a positive-free
 * implementation-defined code outside both ranges. `data.retryAfterMs` says when to come back.
 */
export const RATE_LIMITED_CODE = -31429;

/** Which wire created a task: the 2026-07-28 extension, the 2025-11-25 Tasks wire, or a plain-tool handle for a
 *  client with no task support. One task, whichever created it: every wire can read it. */
export type TaskOrigin = 'extension' | 'legacy' | 'handle';
/**
 * Outlast's code for "this server has no capacity for the call now; nothing was stored or started": a full run
 * queue, or a call that cannot become a task while every handler slot is taken. Same range as RATE_LIMITED_CODE;
 * `data.retryAfterMs` says when to come back, `data.reason` is `queue_full` or `busy`, or the per-principal bound reached:
 * `principal_running`, `principal_queued`, `principal_tasks`.
 */
export const SERVER_BUSY_CODE = -31503;

/**
 * Outlast's code for "the task store did not answer": this replica cannot reach its database now (or it did not
 * answer within its deadline). Retryable: `data.retryAfterMs` says when, `data.reason` is `store_unavailable`, and
 * `data.stored` is `no` (refused before anything was sent) or `unknown` (a write was in flight: retry a creation
 * with the same idempotency key to get the task it may have made).
 */
export const STORE_UNAVAILABLE_CODE = -31504;

export type TaskStatus = 'working' | 'input_required' | 'completed' | 'failed' | 'cancelled';
export const TERMINAL_STATUSES: readonly TaskStatus[] = ['completed', 'failed', 'cancelled'];
export function isTerminal(status: TaskStatus): boolean {
  return status === 'completed' || status === 'failed' || status === 'cancelled';
}

export type JsonObject = { [key: string]: unknown };

export interface JsonRpcErrorObject {
  code: number;
  message: string;
  data?: unknown;
}

/** An embedded request (MRTR shape): `{method, params}` without jsonrpc/id. */
export interface InputRequest {
  method: 'elicitation/create' | 'sampling/createMessage' | 'roots/list';
  params?: JsonObject;
}
export type InputRequests = Record<string, InputRequest>;
export type InputResponses = Record<string, JsonObject>;

/** Base task fields as on the wire. */
export interface Task {
  taskId: string;
  status: TaskStatus;
  statusMessage?: string;
  createdAt: string;
  lastUpdatedAt: string;
  ttlMs: number | null;
  pollIntervalMs?: number;
  /** OUTPUT_SEQ_META once the task has output. */
  _meta?: JsonObject;
}

export type DetailedTask =
  | (Task & { status: 'working' })
  | (Task & { status: 'input_required'; inputRequests: InputRequests })
  | (Task & { status: 'completed'; result: JsonObject })
  | (Task & { status: 'failed'; error: JsonRpcErrorObject })
  | (Task & { status: 'cancelled' });

export type CreateTaskResult = Task & { resultType: 'task'; _meta?: JsonObject };
export type GetTaskResult = DetailedTask & { resultType: 'complete'; _meta?: JsonObject };

/** An error a handler or the runtime raises that must reach the caller as a JSON-RPC error. */
export class TaskProtocolError extends Error {
  readonly code: number;
  readonly data?: unknown;
  constructor(code: number, message: string, data?: unknown) {
    super(message);
    this.name = 'TaskProtocolError';
    this.code = code;
    if (data !== undefined) this.data = data;
  }
  toJSON(): JsonRpcErrorObject {
    return this.data === undefined
      ? { code: this.code, message: this.message }
      : { code: this.code, message: this.message, data: this.data };
  }
}

export const TASK_NOT_FOUND_MESSAGE = 'Failed to retrieve task: Task not found';
export const TASK_EXPIRED_MESSAGE = 'Failed to retrieve task: Task has expired';

export function taskNotFound(): TaskProtocolError {
  return new TaskProtocolError(ErrorCode.InvalidParams, TASK_NOT_FOUND_MESSAGE);
}
export function taskExpired(): TaskProtocolError {
  return new TaskProtocolError(ErrorCode.InvalidParams, TASK_EXPIRED_MESSAGE);
}
export function missingTasksCapability(
  message = `This request needs the client to declare the ${TASKS_EXTENSION} extension in _meta["${CLIENT_CAPABILITIES_META}"].extensions`,
): TaskProtocolError {
  return new TaskProtocolError(
    ErrorCode.MissingRequiredClientCapability,
    message,
    { requiredCapabilities: { extensions: { [TASKS_EXTENSION]: {} } } },
  );
}

export type ServerBusyReason = 'queue_full' | 'busy' | 'principal_running' | 'principal_queued' | 'principal_tasks' | 'principal_streams' | 'shutting_down';

export function serverBusy(message: string, retryAfterMs: number, reason: ServerBusyReason): TaskProtocolError {
  return new TaskProtocolError(SERVER_BUSY_CODE, message, { retryAfterMs, reason });
}

/** Does this request's capability object declare the Tasks extension? */
export function declaresTasks(capabilities: unknown): boolean {
  const ext = (capabilities as { extensions?: Record<string, unknown> } | undefined)?.extensions;
  return !!ext && typeof ext === 'object' && ext[TASKS_EXTENSION] !== undefined && ext[TASKS_EXTENSION] !== null;
}
