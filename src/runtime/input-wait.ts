/**
 * Waiting for the answers to input requests: until every key is answered, the task ends, the deadline passes or
 * the handler is aborted. Answers are signalled by whichever process records them; the row stays the truth. A deadline
 * that passes is recorded in the store before the handler hears of it (durable-time.ts), and a durable run's wait may
 * be parked (parking.ts): then it never settles here, and the run resumes elsewhere from the stored answers.
 */
import { ErrorCode, INPUT_REFUSED, TaskProtocolError, isTerminal, type JsonObject, type JsonRpcErrorObject } from '../protocol/index.js';
import type { SignalBus } from '../store/local-bus.js';
import type { TaskRecord, TaskStore } from '../store/types.js';
import { InputTimeoutError, TaskCancelledError } from './context.js';
import { recordTimeouts } from './durable-time.js';
import type { Waits } from './parking.js';

export interface AnswerWait {
  store: TaskStore;
  bus: SignalBus;
  taskId: string;
  keys: string[];
  /** The row as the request wrote it. */
  record: TaskRecord;
  /** For the error message when no deadline is outstanding any more. */
  timeoutMs: number;
  /** Period of the re-read that covers answers whose signal never arrived (another process). */
  recheckMs: number;
  signal: AbortSignal;
  /** A durable run's waits (the wait may be parked); undefined: it waits in memory until it ends. */
  waits?: Waits | undefined;
}

/** The client answered an input request with an error (it cannot do that kind of input): the wait fails. */
function inputRefused(key: string, e: JsonRpcErrorObject): TaskProtocolError {
  return new TaskProtocolError(ErrorCode.InternalError, `The client could not answer input "${key}": ${e.message} (${e.code})`, {
    reason: 'input_refused',
    key,
    clientError: e,
  });
}

/** How the wait for `keys` ends given the stored answers: their values, the error to throw (a recorded timeout, a
 *  refusal), or undefined while some key is still outstanding. */
export function answersOf<K extends string>(keys: K[], r: Pick<TaskRecord, 'inputResponses'>, timeoutMs: number): { value: Record<K, JsonObject> } | { error: unknown } | undefined {
  if (!keys.every((k) => r.inputResponses[k])) return undefined;
  const timedOut = keys.filter((k) => r.inputResponses[k]!.timedOut);
  if (timedOut.length > 0) return { error: new InputTimeoutError(timedOut, timeoutMs) };
  const out = {} as Record<K, JsonObject>;
  for (const k of keys) {
    const response = r.inputResponses[k]!.response;
    const refused = response[INPUT_REFUSED] as JsonRpcErrorObject | undefined;
    if (refused) return { error: inputRefused(k, refused) };
    out[k] = response;
  }
  return { value: out };
}

export function waitForAnswers<K extends string>(w: AnswerWait): Promise<Record<K, JsonObject>> {
  const keys = w.keys as K[];
  return new Promise<Record<K, JsonObject>>((resolve, reject) => {
    let timer: NodeJS.Timeout | undefined;
    let settled = false;
    const stop = () => {
      settled = true;
      if (timer) clearTimeout(timer);
      unsubscribe();
      w.signal.removeEventListener('abort', onAbort);
    };
    const finish = (err: unknown, value?: Record<K, JsonObject>) => {
      if (settled) return;
      const settle = () => {
        if (settled) return;
        stop();
        removeWait();
        if (err) reject(err);
        else resolve(value!);
      };
      // An abort is never held back by a park being written; an answer or a timeout is.
      if (w.waits && !w.signal.aborted) w.waits.release(settle);
      else settle();
    };
    const check = (r: TaskRecord) => {
      if (settled) return;
      if (isTerminal(r.status)) return finish(new TaskCancelledError('cancelled'));
      const end = answersOf(keys, r, w.timeoutMs);
      if (end) return 'error' in end ? finish(end.error) : finish(null, end.value);
      const deadlines = keys.filter((k) => r.inputRequests[k]).map((k) => r.inputRequests[k]!.deadline);
      const first = deadlines.length ? Math.min(...deadlines) : w.store.now() + w.timeoutMs;
      if (timer) clearTimeout(timer);
      // At the deadline the store records the timeout (unless an answer got there first), then the row decides.
      timer = setTimeout(() => void recordTimeouts(w.store, w.taskId).then((rec) => (rec ? check(rec) : finish(new TaskCancelledError('expired'))), (e) => finish(e)),
        Math.max(0, first - w.store.now()));
      timer.unref?.();
    };
    const onAbort = () => finish(w.signal.reason ?? new TaskCancelledError('cancelled'));
    w.signal.addEventListener('abort', onAbort, { once: true });
    const reread = () =>
      w.store.get(w.taskId).then(
        (l) => (l.state === 'found' ? check(l.record) : finish(new TaskCancelledError('expired'))),
        (e) => finish(e),
      );
    const bus = w.bus.subscribe(w.taskId, (s) => s.kind === 'input' && void reread());
    const fallback = setInterval(() => void reread(), w.recheckMs);
    fallback.unref?.();
    const unsubscribe = () => {
      bus();
      clearInterval(fallback);
    };
    const open = keys.filter((k) => w.record.inputRequests[k]);
    const removeWait = w.waits
      ? w.waits.add({
          wakeAt: Math.min(...open.map((k) => w.record.inputRequests[k]!.deadline), w.store.now() + w.timeoutMs),
          keys: open,
          detach: stop,
        })
      : () => undefined;
    check(w.record);
  });
}
