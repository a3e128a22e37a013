/** How a handler's end maps to what the caller sees: an inline result, a tool error, or a task's terminal outcome. */
import { ErrorCode, TaskProtocolError, type JsonObject } from '../protocol/index.js';
import type { Outcome } from '../store/types.js';
import { InputTimeoutError, type TaskCancelledError } from './context.js';
import { JsonValueError, jsonText, overLimit } from './json-value.js';
import type { CallOutcome } from './types.js';
import { storeFailureError, storeFailureOf } from './store-failure.js';

export type HandlerEnd = { ok: true; value: unknown } | { ok: false; error: unknown };

export const NOT_A_TOOL_RESULT = new TaskProtocolError(ErrorCode.InternalError, 'The tool handler returned something that is not a CallToolResult object');

/** A handler's return value if it is an object (a CallToolResult), else undefined. */
export function asToolResult(v: unknown): JsonObject | undefined {
  return v && typeof v === 'object' && !Array.isArray(v) ? (v as JsonObject) : undefined;
}

export function errorCodeOf(e: unknown): number | undefined {
  const code = (e as { code?: unknown } | null)?.code;
  return typeof code === 'number' && Number.isInteger(code) ? code : undefined;
}

export function toolErrorResult(e: unknown): JsonObject {
  const message = e instanceof Error ? e.message : String(e);
  return { content: [{ type: 'text', text: message }], isError: true };
}

/** The completed outcome of a tool result, carrying the JSON text its check wrote (the store writes that text); or
 *  the failure saying why the result cannot be stored as it is (not JSON, or over `maxBytes`). */
function storable(result: JsonObject, maxBytes: number): Outcome {
  let text: string | undefined;
  try {
    text = jsonText(result, "the tool's result");
  } catch (e) {
    return { status: 'failed', error: { code: ErrorCode.InternalError, message: `${(e as JsonValueError).message}; it could not be stored`, data: { reason: 'result_not_json' } } };
  }
  const bytes = text === undefined ? undefined : overLimit(text, maxBytes);
  if (bytes === undefined) return text === undefined ? { status: 'completed', result } : { status: 'completed', result, resultJson: text };
  return {
    status: 'failed',
    error: { code: ErrorCode.InternalError, message: `The tool's result is ${bytes} bytes of JSON, over the limit of ${maxBytes}; it was not stored (return a reference to large data instead)`, data: { reason: 'result_too_large', bytes, limit: maxBytes } },
  };
}

/** Maps how a task's handler ended to its terminal outcome (a result that cannot be stored fails the task, saying why). */
export function taskOutcome(r: HandlerEnd, cancel: TaskCancelledError | undefined, maxResultBytes = Infinity): Outcome {
  if (r.ok) {
    const v = asToolResult(r.value);
    if (!v) return { status: 'failed', error: NOT_A_TOOL_RESULT.toJSON() };
    const result = { ...v, resultType: 'complete' };
    return storable(result, maxResultBytes);
  }
  const e = r.error;
  if (cancel && cancel.reason === 'cancelled') return { status: 'cancelled' };
  if (e instanceof InputTimeoutError) {
    return { status: 'failed', error: { code: ErrorCode.InternalError, message: e.message, data: { reason: 'input_timeout', keys: e.keys } } };
  }
  // The store's failure is not the tool's: never a completed result carrying the store's error text.
  const store = storeFailureOf(e);
  if (store) return { status: 'failed', error: storeFailureError(store) };
  const code = errorCodeOf(e);
  if (code !== undefined) {
    const data = (e as { data?: unknown }).data;
    const message = (e as Error).message || 'Error';
    return { status: 'failed', error: data === undefined ? { code, message } : { code, message, data } };
  }
  return { status: 'completed', result: toolErrorResult(e) };
}

/** Maps how an inline handler ended to the tools/call answer (a JSON-RPC error is thrown). */
export function inlineOutcome(r: HandlerEnd): CallOutcome {
  if (r.ok) {
    const v = asToolResult(r.value);
    if (!v) throw NOT_A_TOOL_RESULT;
    return { kind: 'result', result: v };
  }
  if (errorCodeOf(r.error) !== undefined) throw r.error;
  const store = storeFailureOf(r.error);
  if (store) {
    const { code, message, data } = storeFailureError(store);
    throw new TaskProtocolError(code, message, data);
  }
  return { kind: 'result', result: toolErrorResult(r.error) };
}

/** The status message a terminal outcome leaves behind (a failure's text is visible without reading the error). */
export function outcomeMessage(outcome: Outcome, cancel: TaskCancelledError | undefined): string | null {
  return outcome.status === 'failed' ? outcome.error.message
    : outcome.status === 'cancelled' ? cancel?.message ?? 'Cancelled'
    : null;
}
