/**
 * Whether this replica reaches its store, as its heartbeats tell: the gate that makes requests fail fast with a
 * retryable error while the store is unreachable, and the self-fencing state readiness reports.
 */
import { performance } from 'node:perf_hooks';
import { STORE_UNAVAILABLE_CODE, TaskProtocolError } from '../protocol/index.js';
import { StoreUnavailableError, type TaskStore } from '../store/types.js';
import { markStoreFailure } from './store-failure.js';

/** Store methods that are never refused by the gate: the heartbeat is the probe that opens it again; `now()` is the
 *  store clock read from memory (synchronous: a refusal there would be a Promise where a number is expected). */
const UNGATED = new Set<string>(['init', 'close', 'heartbeat', 'registerReplica', 'removeReplica', 'ping', 'createSignalBus', 'selfCheck', 'now']);

export class StoreHealth {
  /** performance.now() when the last heartbeat that reached the store was sent. */
  lastBeatSentAt: number | undefined;
  /** performance.now() since when every heartbeat has reached the store (undefined while they fail). */
  reachableSince: number | undefined;
  /** The last heartbeat failed or missed its deadline. */
  failing = false;
  /** This replica's lease may have passed: it stopped the runs it may no longer own (recovery.ts). */
  fenced = false;
  lastError: string | undefined;
  /** performance.now() of the last answer the store gave to any call (a heartbeat or a request's). */
  lastAnswerAt: number | undefined;

  constructor(private readonly retryAfterMs: number) {}

  /** The store answered a call: it is busy, not gone, whatever a late heartbeat says. */
  answered(): void {
    this.lastAnswerAt = performance.now();
  }

  /** Whether the store answered some call within the last `ms` milliseconds. */
  answeredWithin(ms: number, now = performance.now()): boolean {
    return this.lastAnswerAt !== undefined && now - this.lastAnswerAt <= ms;
  }

  beatSucceeded(sentAt: number): void {
    this.answered();
    if (this.failing || this.reachableSince === undefined) this.reachableSince = sentAt;
    this.failing = false;
    this.lastBeatSentAt = sentAt;
    this.lastError = undefined;
  }

  beatFailed(error: string): void {
    this.failing = true;
    this.reachableSince = undefined;
    this.lastError = error;
  }

  /** How long every heartbeat has reached the store, ms (0 while failing). */
  reachableForMs(now = performance.now()): number {
    return this.reachableSince === undefined ? 0 : now - this.reachableSince;
  }

  /** Age of the last heartbeat that reached the store, ms (undefined before the first). */
  lastBeatAgeMs(now = performance.now()): number | undefined {
    return this.lastBeatSentAt === undefined ? undefined : now - this.lastBeatSentAt;
  }

  get open(): boolean {
    return !this.failing && !this.fenced;
  }

  /** The retryable error a request gets: refused before anything was sent, or a store call that failed in flight. */
  refusal(inFlight?: StoreUnavailableError): TaskProtocolError {
    const retryAfterMs = this.retryAfterMs;
    if (inFlight) {
      return new TaskProtocolError(
        STORE_UNAVAILABLE_CODE,
        `The task could not be stored or read: the task store did not answer (${inFlight.why}). Retry in ${retryAfterMs} ms; a creation retried with the same idempotency key returns the task if it was made`,
        { reason: 'store_unavailable', stored: 'unknown', retryAfterMs },
      );
    }
    return new TaskProtocolError(
      STORE_UNAVAILABLE_CODE,
      `The task store is unreachable from this replica${this.lastError ? ` (${this.lastError})` : ''}; nothing was stored or started. Retry in ${retryAfterMs} ms, here or on another replica`,
      { reason: 'store_unavailable', stored: 'no', retryAfterMs },
    );
  }
}

/** The store behind the gate: while the heartbeats fail, calls are refused at once; a call that fails because the
 *  store did not answer becomes the same retryable error. */
export function gatedStore(store: TaskStore, health: StoreHealth): TaskStore {
  const wrapped = new Map<PropertyKey, unknown>();
  return new Proxy(store, {
    get(target, prop) {
      const v = Reflect.get(target, prop, target) as unknown;
      if (typeof v !== 'function') return v;
      let w = wrapped.get(prop);
      if (w) return w;
      // Made once per method (`now()` is read on every step write: a bind per read was an allocation each time).
      if (typeof prop !== 'string' || UNGATED.has(prop)) w = v.bind(target);
      else {
        const fn = v as (...a: unknown[]) => Promise<unknown>;
        w = (...args: unknown[]) => {
          if (!health.open) return Promise.reject(health.refusal());
          const r = fn.apply(target, args);
          return r instanceof Promise
            ? r.then(
                (v) => (health.answered(), v),
                (e: unknown) => {
                  if (!(e instanceof StoreUnavailableError)) health.answered(); // a refusal is an answer too
                  markStoreFailure(e);
                  throw e instanceof StoreUnavailableError ? health.refusal(e) : e;
                },
              )
            : r;
        };
        wrapped.set(prop, w);
      }
      return w;
    },
  });
}
