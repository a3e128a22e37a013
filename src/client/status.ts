/**
 * How a task's status reaches the client: one seam, two implementations.
 *
 * - PollingSource: `tasks/get` at the advertised `pollIntervalMs` (never faster: jitter only lengthens the
 *   wait), backing off exponentially on transport errors and waiting as told on a 429 (`Retry-After` or
 *   `data.retryAfterMs`).
 * - ListenSource: `subscriptions/listen` with `notifications.taskIds`, the server pushing `notifications/tasks`
 *   with the full task; when the stream is refused it polls for good, when it is cut it polls until it can
 *   listen again.
 */
import { setTimeout as delay } from 'node:timers/promises';
import { isTerminal, type DetailedTask, type JsonObject, type Task, type TaskStatus } from '../protocol/index.js';
import { RpcError, TaskGoneError, TransportError, goneReason, isRateLimited } from './errors.js';
import type { RawDispatcher } from './transport.js';

/** Something worth telling a user while following a task (not a status change). */
export type StatusNote =
  | { kind: 'retry'; error: Error; delayMs: number }
  | { kind: 'rate_limited'; delayMs: number }
  | { kind: 'listening' }
  | { kind: 'fallback'; reason: string }
  /** The task's output could not be read to its end (the call itself goes on). */
  | { kind: 'output_failed'; error: Error };

export interface FollowObserver {
  /** Every state seen (possibly repeated; the handle dedupes). */
  task(task: DetailedTask): void;
  note?(note: StatusNote): void;
}

export interface StatusSource {
  readonly kind: 'poll' | 'listen' | string;
  /**
   * Follows one task from `latest` until it is terminal (resolves with the terminal state) or `signal` aborts
   * (rejects with the abort reason). Rejects with TaskGoneError when the server says expired / not found.
   */
  follow(taskId: string, latest: Task, observer: FollowObserver, signal: AbortSignal): Promise<DetailedTask>;
}

const STATUSES: ReadonlySet<TaskStatus> = new Set(['working', 'input_required', 'completed', 'failed', 'cancelled']);

/** Checks a `tasks/get` result or `notifications/tasks` params and returns the task without `resultType`/`_meta`. */
export function toDetailedTask(raw: JsonObject, expectTaskId?: string): DetailedTask {
  const { resultType: _r, _meta: _m, ...rest } = raw as JsonObject & { resultType?: unknown; _meta?: unknown };
  const t = rest as unknown as DetailedTask;
  const bad = (why: string) => new TransportError(`Invalid task from the server (${why}): ${JSON.stringify(raw).slice(0, 300)}`, { retryable: false });
  if (typeof t.taskId !== 'string' || !t.taskId) throw bad('no taskId');
  if (expectTaskId !== undefined && t.taskId !== expectTaskId) throw bad(`taskId ${t.taskId}, expected ${expectTaskId}`);
  if (!STATUSES.has(t.status)) throw bad(`unknown status ${String(t.status)}`);
  if (t.status === 'completed' && (typeof t.result !== 'object' || t.result === null)) throw bad('completed without result');
  if (t.status === 'failed' && (typeof t.error !== 'object' || t.error === null)) throw bad('failed without error');
  if (t.status === 'input_required' && (typeof t.inputRequests !== 'object' || t.inputRequests === null)) throw bad('input_required without inputRequests');
  return t;
}

/** `tasks/get` once; -32602 "expired"/"not found" become TaskGoneError. */
export async function getTask(dispatcher: RawDispatcher, taskId: string, signal?: AbortSignal): Promise<DetailedTask> {
  try {
    const r = await dispatcher.request('tasks/get', { taskId }, signal ? { signal } : {});
    return toDetailedTask(r, taskId);
  } catch (e) {
    if (e instanceof RpcError) {
      const gone = goneReason(e);
      if (gone) throw new TaskGoneError(taskId, gone, e.message);
    }
    throw e;
  }
}

export interface PollingOptions {
  /** Used while the server advertises no `pollIntervalMs`. Default 1000. */
  defaultIntervalMs?: number;
  /** Guard against a server advertising 0: never poll more often than this. Default 100. */
  minIntervalMs?: number;
  /** Each wait is interval × (1 + jitter × random): spreads clients out, never shortens. Default 0.1. */
  jitter?: number;
  /** Ceiling of the exponential back-off after errors. Default 30 000. */
  maxBackoffMs?: number;
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return delay(ms, undefined, { signal }).catch((e) => {
    throw signal.aborted ? (signal.reason ?? e) : e;
  });
}

/** Is this an error a later retry may fix? */
function transient(e: unknown): boolean {
  if (e instanceof TransportError) return e.retryable;
  if (e instanceof RpcError) return e.code === -32603 || isRateLimited(e);
  return false;
}

export class PollingSource implements StatusSource {
  readonly kind = 'poll';
  readonly options: Required<PollingOptions>;
  constructor(private readonly dispatcher: RawDispatcher, options: PollingOptions = {}) {
    this.options = {
      defaultIntervalMs: options.defaultIntervalMs ?? 1000,
      minIntervalMs: options.minIntervalMs ?? 100,
      jitter: options.jitter ?? 0.1,
      maxBackoffMs: options.maxBackoffMs ?? 30_000,
    };
  }

  /** The wait before the next poll, given the latest advertised interval. */
  nextWait(advertisedMs: number | undefined): number {
    const base = Math.max(this.options.minIntervalMs, advertisedMs ?? this.options.defaultIntervalMs);
    return Math.round(base * (1 + this.options.jitter * Math.random()));
  }

  async follow(taskId: string, latest: Task, observer: FollowObserver, signal: AbortSignal): Promise<DetailedTask> {
    let interval = latest.pollIntervalMs;
    let wait = this.nextWait(interval);
    let errors = 0;
    for (;;) {
      await sleep(wait, signal);
      let t: DetailedTask;
      try {
        t = await getTask(this.dispatcher, taskId, signal);
      } catch (e) {
        if (signal.aborted) throw signal.reason ?? e;
        if (!transient(e)) throw e;
        if (isRateLimited(e)) {
          // The server's word wins; never come back sooner than the advertised interval either.
          wait = Math.max(e instanceof RpcError && 'retryAfterMs' in e ? Number(e.retryAfterMs) : 0, this.nextWait(interval));
          observer.note?.({ kind: 'rate_limited', delayMs: wait });
        } else {
          errors++;
          const base = Math.max(500, interval ?? this.options.defaultIntervalMs);
          wait = Math.round(Math.min(this.options.maxBackoffMs, base * 2 ** (errors - 1)) * (1 + this.options.jitter * Math.random()));
          observer.note?.({ kind: 'retry', error: e as Error, delayMs: wait });
        }
        continue;
      }
      errors = 0;
      observer.task(t);
      if (isTerminal(t.status)) return t;
      if (t.pollIntervalMs !== undefined) interval = t.pollIntervalMs;
      wait = this.nextWait(interval);
    }
  }
}

export interface ListenOptions {
  /** How long to wait for `notifications/subscriptions/acknowledged`. Default 5000. */
  ackTimeoutMs?: number;
  /** After a cut, poll this long before listening again (doubling up to relistenMaxMs). Default 1000. */
  relistenMinMs?: number;
  relistenMaxMs?: number;
  /** While listening, one `tasks/get` this often anyway (a server may lose a push). Default 60 000; 0 = never. */
  safetyPollMs?: number;
}

type ListenOutcome = { terminal: DetailedTask } | { cut: string } | { unsupported: string };

/** A refused listen means "poll for good"; a failed one "poll for a while"; bad credentials end the follow. */
function listenFailure(e: unknown): ListenOutcome | Error {
  if (e instanceof TransportError && e.httpStatus === 401) return e;
  if (e instanceof RpcError || (e instanceof TransportError && !e.retryable)) return { unsupported: `subscriptions/listen refused (${(e as Error).message})` };
  return { cut: `the listen stream failed (${(e as Error)?.message ?? String(e)})` };
}

export class ListenSource implements StatusSource {
  readonly kind = 'listen';
  private readonly options: Required<ListenOptions>;
  /** Set when the server refused a listen for tasks: from then on this client polls. */
  private unsupported: string | undefined;

  constructor(private readonly dispatcher: RawDispatcher, readonly polling: PollingSource, options: ListenOptions = {}) {
    this.options = {
      ackTimeoutMs: options.ackTimeoutMs ?? 5000,
      relistenMinMs: options.relistenMinMs ?? 1000,
      relistenMaxMs: options.relistenMaxMs ?? 30_000,
      safetyPollMs: options.safetyPollMs ?? 60_000,
    };
  }

  async follow(taskId: string, initial: Task, observer: FollowObserver, signal: AbortSignal): Promise<DetailedTask> {
    let latest: Task = initial;
    const track: FollowObserver = {
      task: (t) => {
        latest = t;
        observer.task(t);
      },
      ...(observer.note ? { note: (n: StatusNote) => observer.note!(n) } : {}),
    };
    let relistenMs = this.options.relistenMinMs;
    for (;;) {
      signal.throwIfAborted();
      if (this.unsupported === undefined) {
        const startedAt = Date.now();
        const r = await this.listenOnce(taskId, latest, track, signal);
        if ('terminal' in r) return r.terminal;
        if ('unsupported' in r) {
          this.unsupported = r.unsupported;
          observer.note?.({ kind: 'fallback', reason: `${r.unsupported}; polling instead` });
        } else {
          if (Date.now() - startedAt > 10_000) relistenMs = this.options.relistenMinMs; // it worked for a while
          observer.note?.({ kind: 'fallback', reason: `${r.cut}; polling, listening again in ${Math.round(relistenMs / 1000)} s` });
        }
      }
      if (this.unsupported !== undefined) return this.polling.follow(taskId, latest, track, signal);
      // Poll until it is time to listen again.
      const ctl = new AbortController();
      const onAbort = () => ctl.abort(signal.reason);
      signal.addEventListener('abort', onAbort, { once: true });
      const timer = setTimeout(() => ctl.abort(new Error('relisten')), relistenMs);
      try {
        return await this.polling.follow(taskId, latest, track, ctl.signal);
      } catch (e) {
        if (signal.aborted || !ctl.signal.aborted) throw e;
      } finally {
        clearTimeout(timer);
        signal.removeEventListener('abort', onAbort);
      }
      relistenMs = Math.min(this.options.relistenMaxMs, relistenMs * 2);
    }
  }

  /** One listen stream for one task: resolves when it is terminal, refused, or cut. */
  private listenOnce(taskId: string, latest: Task, observer: FollowObserver, signal: AbortSignal): Promise<ListenOutcome> {
    return new Promise<ListenOutcome>((resolve, reject) => {
      let finished = false;
      let stream: { close(): void } | undefined;
      const timers: NodeJS.Timeout[] = [];
      let heard = false;
      const finish = (r: ListenOutcome | Error) => {
        if (finished) return;
        finished = true;
        for (const t of timers) clearTimeout(t);
        signal.removeEventListener('abort', onAbort);
        stream?.close();
        if (r instanceof Error) reject(r);
        else resolve(r);
      };
      const onAbort = () => finish(signal.reason instanceof Error ? signal.reason : new DOMException('Aborted', 'AbortError'));
      signal.addEventListener('abort', onAbort, { once: true });
      const poll = async () => {
        if (finished) return;
        try {
          const t = await getTask(this.dispatcher, taskId, signal);
          if (finished) return;
          observer.task(t);
          if (isTerminal(t.status)) finish({ terminal: t });
        } catch (e) {
          if (e instanceof TaskGoneError || (e instanceof TransportError && !e.retryable)) finish(e);
          // anything else: the stream (or the next safety poll) will tell
        }
      };
      const onTask = (params: JsonObject) => {
        let t: DetailedTask;
        try {
          t = toDetailedTask(params, taskId);
        } catch (e) {
          return finish(e as Error);
        }
        heard = true;
        observer.task(t);
        if (isTerminal(t.status)) finish({ terminal: t });
      };
      let acked = false;
      timers.push(setTimeout(() => !acked && finish({ cut: `no acknowledgement of subscriptions/listen within ${this.options.ackTimeoutMs} ms` }), this.options.ackTimeoutMs));
      this.dispatcher
        .openStream('subscriptions/listen', { notifications: { taskIds: [taskId] } }, {
          onNotification: (m) => {
            if (finished) return;
            if (m.method === 'notifications/subscriptions/acknowledged') {
              acked = true;
              const ids = (m.params?.notifications as { taskIds?: unknown } | undefined)?.taskIds;
              if (!Array.isArray(ids) || !ids.includes(taskId)) {
                // Not honoured: the server cannot push tasks, or does not know this one. A poll tells which.
                void getTask(this.dispatcher, taskId, signal).then(
                  (t) => {
                    observer.task(t);
                    if (isTerminal(t.status)) finish({ terminal: t });
                    else finish({ unsupported: 'the server did not acknowledge taskIds on subscriptions/listen' });
                  },
                  (e) => finish(e instanceof TaskGoneError ? e : { unsupported: `subscriptions/listen not honoured (${(e as Error).message})` }),
                );
                return;
              }
              observer.note?.({ kind: 'listening' });
              // A server need not push the current state on subscribe: catch up once if it stays silent.
              const catchUp = Math.max(1000, latest.pollIntervalMs ?? 1000);
              timers.push(setTimeout(() => !heard && void poll(), catchUp));
              if (this.options.safetyPollMs > 0) {
                const safety = () => {
                  void poll();
                  if (!finished) timers.push(setTimeout(safety, this.options.safetyPollMs));
                };
                timers.push(setTimeout(safety, this.options.safetyPollMs));
              }
            } else if (m.method === 'notifications/tasks' && acked && m.params) {
              onTask(m.params);
            }
          },
        })
        .then(
          (s) => {
            stream = s;
            if (finished) return s.close();
            s.ended.then(
              (how) => finish({ cut: how === 'result' ? 'the server ended the listen stream' : 'the listen stream was cut' }),
              (e) => finish(listenFailure(e)),
            );
          },
          (e) => finish(listenFailure(e)),
        );
    });
  }
}
