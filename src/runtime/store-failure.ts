/**
 * Errors the task store threw (a statement it refused or could not run), told apart from the work's own: a handler
 * that lets one escape did not fail as a tool, so its task fails naming the store instead of completing with the
 * store's text as a tool error. The gate (store-health.ts) marks each error coming out of the store.
 */
import { ErrorCode, TaskProtocolError, type JsonRpcErrorObject } from '../protocol/index.js';
import { IdempotencyConflictError, StoreUnavailableError, TaskValueRefused, TaskWriteRefused } from '../store/types.js';

const failures = new WeakSet<object>();

/** Notes `e` as the store's failure, unless it is one of the store's answers (a refused write, a conflict) or an outage
 *  (outage.ts hands those runs back). */
export function markStoreFailure(e: unknown): void {
  if (!e || typeof e !== 'object') return;
  if (e instanceof TaskWriteRefused || e instanceof TaskValueRefused || e instanceof IdempotencyConflictError) return;
  if (e instanceof StoreUnavailableError || e instanceof TaskProtocolError) return;
  failures.add(e);
}

/** The store's failure that `e` is or was caused by (a handler may wrap it), if any. */
export function storeFailureOf(e: unknown): Error | undefined {
  for (let x = e, depth = 0; x && typeof x === 'object' && depth < 8; x = (x as { cause?: unknown }).cause, depth++) {
    if (failures.has(x)) return x as Error;
  }
  return undefined;
}

/** The JSON-RPC error of a run the store failed (its SQLSTATE, when it has one, in `data`). */
export function storeFailureError(e: Error): JsonRpcErrorObject {
  const code = (e as { code?: unknown }).code;
  return {
    code: ErrorCode.InternalError,
    message: `The task store failed a statement of this run, so the run stopped: ${e.message}`,
    data: { reason: 'store_error', ...(typeof code === 'string' ? { sqlState: code } : {}) },
  };
}
