/**
 * A task's output, read with `tasks/stream` (SEP-2694 draft, docs/output.md): an async iterator over its events in
 * `seq` order that resumes a cut stream with `after` = the last `seq` received (nothing missed, nothing repeated),
 * pauses the stream while the consumer lags (and resumes it the same way), and ends once the task is terminal and
 * every event was delivered. A cursor older than what the server keeps (`events_gone`) is never skipped silently:
 * `onGap` hears what was lost and the stream continues from the earliest retained event, or, without `onGap`, the
 * iterator throws OutputGoneError.
 */
import { setTimeout as delay } from 'node:timers/promises';
import { OUTPUT_SEQ_META, type JsonObject } from '../protocol/index.js';
import { OutputGoneError, RpcError, TaskGoneError, TransportError } from './errors.js';
import type { RawDispatcher } from './transport.js';

/** One output item of a task (`notifications/tasks/event`). */
export interface OutputEvent {
  taskId: string;
  /** 1, 2, 3 … per task, without gaps. */
  seq: number;
  /** `text`, `image`, `audio`, `resource_link`, `resource`, or a vendor-prefixed type (`com.example/progress`). */
  type: string;
  /** The content block itself, or the vendor event's data. */
  data: unknown;
}

/** Output the server no longer kept when it was asked for (its per-task bound dropped the oldest). */
export interface OutputGap {
  taskId: string;
  /** The first and last seq lost (inclusive). */
  lostFrom: number;
  lostTo: number;
  /** The seq delivery continues with (the earliest the server keeps). */
  continuesAt: number;
}

export interface OutputOptions {
  /** The seq of the last event already had (default 0: from the start). */
  after?: number;
  signal?: AbortSignal;
  /** Called when output after the cursor is gone; delivery then continues from the earliest kept. Without it,
   *  the iterator throws OutputGoneError. */
  onGap?: (gap: OutputGap) => void;
  /** Transport news: a cut stream about to be resumed. */
  onRetry?: (error: Error, delayMs: number) => void;
  /** Consecutive failed attempts (no event received) before giving up. Default 5. */
  attempts?: number;
  baseDelayMs?: number;
  maxDelayMs?: number;
  /** Events held for a slow consumer before the stream is paused (and later resumed after the last one). Default 1000. */
  highWaterMark?: number;
}

const goneData = (e: RpcError) => {
  const d = e.data as { reason?: unknown; earliestSeq?: unknown } | undefined;
  return e.code === -32602 && d?.reason === 'events_gone' && typeof d.earliestSeq === 'number' ? d.earliestSeq : undefined;
};

/** The task's latest output seq as `tasks/get` tells it (0: no output yet). */
export async function latestOutputSeq(dispatcher: RawDispatcher, taskId: string, signal?: AbortSignal): Promise<{ seq: number; status: string }> {
  let r: JsonObject;
  try {
    r = await dispatcher.request('tasks/get', { taskId }, signal ? { signal } : {});
  } catch (e) {
    throw notFound(e, taskId);
  }
  const seq = (r._meta as JsonObject | undefined)?.[OUTPUT_SEQ_META];
  return { seq: typeof seq === 'number' ? seq : 0, status: String(r.status) };
}

function notFound(e: unknown, taskId: string): unknown {
  if (e instanceof RpcError && e.code === -32602 && /not found|expired/i.test(e.message)) return new TaskGoneError(taskId, /expired/i.test(e.message) ? 'expired' : 'not_found', e.message);
  return e;
}

/** Streams a task's output (see the module comment). */
export async function* streamOutput(dispatcher: RawDispatcher, taskId: string, opts: OutputOptions = {}): AsyncGenerator<OutputEvent, void, undefined> {
  if (opts.after !== undefined && (!Number.isInteger(opts.after) || opts.after < 0)) throw new TypeError(`after must be an integer >= 0 (got ${String(opts.after)})`);
  const attempts = opts.attempts ?? 5;
  const high = opts.highWaterMark ?? 1000;
  let last = opts.after ?? 0; // the last seq received (queued)
  const queue: OutputEvent[] = [];
  let failures = 0;
  for (;;) {
    opts.signal?.throwIfAborted();
    let wake = () => {};
    let paused = false;
    let stream: { close(): void; ended: Promise<'result' | 'cut' | 'closed'> } | undefined;
    let outcome: { how: 'result' | 'cut' | 'closed' } | { error: unknown } | undefined;
    const openedAt = Date.now();
    const got = () => wake();
    const onAbort = () => stream?.close();
    opts.signal?.addEventListener('abort', onAbort, { once: true });
    try {
      stream = await dispatcher.openStream('tasks/stream', { taskId, after: last }, {
        onNotification: (m) => {
          if (m.method !== 'notifications/tasks/event' || !m.params) return;
          const p = m.params as { taskId?: unknown; seq?: unknown; type?: unknown; data?: unknown };
          if (p.taskId !== taskId || typeof p.seq !== 'number' || p.seq <= last) return; // not ours, or had already
          last = p.seq;
          queue.push({ taskId, seq: p.seq, type: String(p.type), data: p.data });
          failures = 0;
          if (queue.length >= high && !paused) {
            paused = true;
            stream?.close();
          }
          got();
        },
      });
    } catch (e) {
      outcome = { error: e };
    }
    if (stream) {
      if (paused || opts.signal?.aborted) stream.close(); // stopped while the stream was being opened
      stream.ended.then((how) => ((outcome = { how }), got()), (error: unknown) => ((outcome = { error }), got()));
    }
    try {
      // Deliver while the stream runs; then whatever it left queued.
      for (;;) {
        while (queue.length) {
          yield queue.shift()!;
          opts.signal?.throwIfAborted();
        }
        if (outcome) break;
        await new Promise<void>((r) => (wake = r));
      }
    } finally {
      opts.signal?.removeEventListener('abort', onAbort);
      stream?.close();
    }
    opts.signal?.throwIfAborted();
    if ('how' in outcome) {
      if (outcome.how === 'result') return;
      if (paused || outcome.how === 'closed') continue; // the consumer caught up: resume after the last one
      outcome = { error: new TransportError('tasks/stream: the stream was cut before the task ended') };
    }
    const e = notFound(outcome.error, taskId);
    if (e instanceof RpcError) {
      const earliest = goneData(e);
      if (earliest === undefined) throw e;
      const gap: OutputGap = { taskId, lostFrom: last + 1, lostTo: earliest - 1, continuesAt: earliest };
      if (!opts.onGap) throw new OutputGoneError(gap);
      opts.onGap(gap);
      last = earliest - 1;
      continue;
    }
    if (!(e instanceof TransportError) || !e.retryable) throw e;
    if (Date.now() - openedAt > 10_000) failures = 0; // it worked for a while (a quiet task, a proxy's idle cut)
    if (++failures >= attempts) throw new TransportError(`${e.message} (gave up after ${failures} attempts without output; the last seq received was ${last})`, { cause: e });
    const ms = Math.round(Math.min(opts.maxDelayMs ?? 10_000, (opts.baseDelayMs ?? 500) * 2 ** (failures - 1)) * (0.9 + 0.2 * Math.random()));
    opts.onRetry?.(e, ms);
    await delay(ms, undefined, opts.signal ? { signal: opts.signal } : {});
  }
}
