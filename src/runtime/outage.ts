/**
 * A run's own store calls through an outage of the store (design semantics 13 and 17).
 *
 * A caller's request fails fast while the store does not answer (store-health.ts): the caller retries. A run cannot
 * retry itself, so its own calls (its status, a step's record, an input request, a sleep's record) wait instead,
 * retrying, for as long as the run may still hold its task: an outage shorter than the lease delays the run and fails
 * nothing. Past the lease the replica fences itself (recovery.ts), which aborts the run; the call then throws the
 * abort's reason and the task is handed back after the heal: re-run if retry-safe, resumed from its steps if durable,
 * failed naming the outage otherwise. A call the store keeps failing while it answers heartbeats (one query always
 * over its deadline) is given up after `giveUpAfterMs`, and its error ends the run the same way.
 */
import { performance } from 'node:perf_hooks';
import { setTimeout as delay } from 'node:timers/promises';
import { STORE_UNAVAILABLE_CODE } from '../protocol/index.js';
import { StoreUnavailableError } from '../store/types.js';
import { errorCodeOf } from './outcome.js';

/** The store did not answer (refused at the gate, or no answer within a deadline): not a refusal by the store. */
export function storeDidNotAnswer(e: unknown): boolean {
  return e instanceof StoreUnavailableError || errorCodeOf(e) === STORE_UNAVAILABLE_CODE;
}

/** Runs `call` until the store answers it, the run is aborted (then its reason is thrown), or `giveUpAfterMs` passed. */
export function throughOutage<T>(call: () => Promise<T>, signal: AbortSignal, giveUpAfterMs: number): Promise<T> {
  const began = performance.now();
  // The first try is the call's own promise (a run makes one per step write): the loop starts only if it fails.
  let first: Promise<T>;
  try {
    first = Promise.resolve(call());
  } catch (e) {
    first = Promise.reject(e);
  }
  return first.catch((e: unknown) => retried(e, call, signal, giveUpAfterMs, began));
}

/** The tries after a first that failed with `error`, as long as the store does not answer. */
async function retried<T>(error: unknown, call: () => Promise<T>, signal: AbortSignal, giveUpAfterMs: number, began: number): Promise<T> {
  let e = error;
  for (let wait = 50; ; wait = Math.min(wait * 2, 500)) {
    if (!storeDidNotAnswer(e)) throw e;
    signal.throwIfAborted();
    if (performance.now() - began > giveUpAfterMs) throw e;
    await delay(wait, undefined, { signal }).catch(() => signal.throwIfAborted());
    try {
      return await call();
    } catch (x) {
      e = x;
    }
  }
}
