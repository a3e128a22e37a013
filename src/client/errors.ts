/**
 * The errors a TaskClient user can meet. Each says what happened in the protocol's words and, where there is
 * one, what to do about it.
 */
import { ErrorCode, RATE_LIMITED_CODE, TASK_EXPIRED_MESSAGE, type JsonRpcErrorObject } from '../protocol/index.js';

/** The server answered with a JSON-RPC error. */
export class RpcError extends Error {
  readonly code: number;
  readonly data?: unknown;
  /** The HTTP status the error came with, when known. */
  readonly httpStatus?: number;
  constructor(error: JsonRpcErrorObject, httpStatus?: number) {
    super(error.message);
    this.name = 'RpcError';
    this.code = error.code;
    if (error.data !== undefined) this.data = error.data;
    if (httpStatus !== undefined) this.httpStatus = httpStatus;
  }
  toJSON(): JsonRpcErrorObject {
    return this.data === undefined ? { code: this.code, message: this.message } : { code: this.code, message: this.message, data: this.data };
  }
}

/**
 * The server does not speak the protocol revision this client speaks (JSON-RPC -32022 with `data.supported`), or
 * refused it again after listing it as supported.
 */
export class UnsupportedVersionError extends RpcError {
  /** The versions the server said it supports (empty when it did not say). */
  readonly supported: string[];
  /** The versions this client speaks. */
  readonly spoken: readonly string[];
  constructor(serverUrl: string, error: JsonRpcErrorObject, supported: string[], spoken: readonly string[], refusedAgain: boolean, httpStatus?: number) {
    super(error, httpStatus);
    this.name = 'UnsupportedVersionError';
    this.supported = supported;
    this.spoken = spoken;
    const theirs = supported.length ? `it supports: ${supported.join(', ')}` : 'it did not say which versions it supports';
    this.message = refusedAgain
      ? `The server at ${serverUrl} refused MCP protocol version ${spoken.join(', ')} twice, although it lists it as supported (${theirs}); the server or a proxy in front of it is misbehaving`
      : `The server at ${serverUrl} does not speak the MCP protocol version this client speaks (${spoken.join(', ')}); ${theirs}. Use a server that speaks ${spoken.join(' or ')}`;
  }
}

/** A tool whose `x-mcp-header` declarations break SEP-2243's constraints: it is left out of tools/list and not called. */
export class RejectedToolError extends Error {
  readonly tool: string;
  readonly reason: string;
  constructor(tool: string, reason: string) {
    super(`Tool "${tool}" cannot be called over HTTP: its inputSchema is invalid (${reason}), so the client cannot send the Mcp-Param headers it asks for; the server's tool definition must be fixed`);
    this.name = 'RejectedToolError';
    this.tool = tool;
    this.reason = reason;
  }
}

/**
 * The request may or may not have reached the server, and no answer came back: connection refused or reset,
 * a 502/503/504 from a proxy, a stream cut before its response, a timeout. Safe to retry for `tasks/*`; a
 * `tools/call` is retried with the same idempotency key.
 */
export class TransportError extends Error {
  readonly httpStatus?: number;
  /** false for failures a retry cannot fix (HTTP 401, 404, a closed client). */
  readonly retryable: boolean;
  constructor(message: string, options: { cause?: unknown; httpStatus?: number; retryable?: boolean } = {}) {
    super(message, options.cause !== undefined ? { cause: options.cause } : undefined);
    this.name = 'TransportError';
    this.retryable = options.retryable ?? true;
    if (options.httpStatus !== undefined) this.httpStatus = options.httpStatus;
  }
}

/** Connection refused / unknown host / a stdio server that could not start: the request cannot have reached the server. */
export function neverSent(e: TransportError): boolean {
  for (let c: unknown = e; c; c = (c as { cause?: unknown }).cause) {
    const code = (c as { code?: unknown }).code;
    if (code === 'ECONNREFUSED' || code === 'ENOTFOUND' || code === 'EAI_AGAIN') return true;
    if (typeof (c as Error).message === 'string' && /ECONNREFUSED|ENOTFOUND|bad port/.test((c as Error).message)) return true;
    if (String((c as { syscall?: unknown }).syscall).startsWith('spawn')) return true; // a stdio server that could not start
  }
  return false;
}

/** The server refused a poll as too fast (HTTP 429 and/or JSON-RPC -31429). */
export class RateLimitedError extends RpcError {
  /** How long the server asked us to wait, from Retry-After or `data.retryAfterMs`. */
  readonly retryAfterMs: number;
  constructor(error: JsonRpcErrorObject, retryAfterMs: number, httpStatus?: number) {
    super(error, httpStatus);
    this.name = 'RateLimitedError';
    this.retryAfterMs = retryAfterMs;
  }
}

/** The server no longer knows the task: it expired (TTL passed; the server kept a tombstone) or was never/no longer found. */
export class TaskGoneError extends Error {
  readonly taskId: string;
  readonly reason: 'expired' | 'not_found';
  constructor(taskId: string, reason: 'expired' | 'not_found', serverMessage?: string) {
    super(
      reason === 'expired'
        ? `Task ${taskId} has expired on the server (its TTL passed before the outcome was read); its result is lost${serverMessage ? ` (${serverMessage})` : ''}`
        : `Task ${taskId} is not known to the server: wrong server or credentials, or it was purged after expiry${serverMessage ? ` (${serverMessage})` : ''}`,
    );
    this.name = 'TaskGoneError';
    this.taskId = taskId;
    this.reason = reason;
  }
}

/** The task ended `failed`: the server reports a JSON-RPC error for it. */
export class TaskFailedError extends RpcError {
  readonly taskId: string;
  constructor(taskId: string, error: JsonRpcErrorObject) {
    super(error);
    this.name = 'TaskFailedError';
    this.taskId = taskId;
    this.message = `Task ${taskId} failed: ${error.message} (code ${error.code})`;
  }
}

/** The task ended `cancelled`. */
export class TaskCancelledError extends Error {
  readonly taskId: string;
  constructor(taskId: string) {
    super(`Task ${taskId} was cancelled`);
    this.name = 'TaskCancelledError';
    this.taskId = taskId;
  }
}

/** The handle was detached (or the client closed) before the task finished; the journal still has it. */
export class DetachedError extends Error {
  readonly taskId: string | undefined;
  constructor(taskId: string | undefined) {
    super(taskId ? `Stopped following task ${taskId}; it keeps running on the server (resume it with TaskClient.resume or \`outlast resume ${taskId}\`)` : 'Stopped before the call was answered');
    this.name = 'DetachedError';
    this.taskId = taskId;
  }
}

/** Is this -32602 from tasks/* an "expired" or a "not found"? (Same code; only the message differs.) */
export function goneReason(e: RpcError): 'expired' | 'not_found' | undefined {
  if (e.code !== ErrorCode.InvalidParams) return undefined;
  if (e.message === TASK_EXPIRED_MESSAGE || /expired/i.test(e.message)) return 'expired';
  if (/not found|unknown task|invalid task/i.test(e.message)) return 'not_found';
  return undefined;
}

export function isRateLimited(e: unknown): e is RateLimitedError {
  return e instanceof RateLimitedError || (e instanceof RpcError && (e.code === RATE_LIMITED_CODE || e.httpStatus === 429));
}

/** Output after the cursor is no longer kept by the server (`events_gone`: its per-task bound dropped the oldest). */
export class OutputGoneError extends Error {
  readonly taskId: string;
  readonly lostFrom: number;
  readonly lostTo: number;
  /** The earliest seq the server keeps: read on with `after: continuesAt - 1`. */
  readonly continuesAt: number;
  constructor(gap: { taskId: string; lostFrom: number; lostTo: number; continuesAt: number }) {
    super(
      `Output ${gap.lostFrom === gap.lostTo ? `item ${gap.lostFrom}` : `items ${gap.lostFrom}–${gap.lostTo}`} of task ${gap.taskId} ${gap.lostFrom === gap.lostTo ? 'is' : 'are'} no longer kept by the server (events_gone: it keeps a bounded number per task); the output continues at ${gap.continuesAt} (read on with after: ${gap.continuesAt - 1})`,
    );
    this.name = 'OutputGoneError';
    this.taskId = gap.taskId;
    this.lostFrom = gap.lostFrom;
    this.lostTo = gap.lostTo;
    this.continuesAt = gap.continuesAt;
  }
}
