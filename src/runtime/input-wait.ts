/**
 * Waiting for the answers to input requests: until every key is answered, the task ends, the deadline passes or
 * the handler is aborted. Answers are signalled by whichever process records them; the row stays the truth.
 */
import { ErrorCode, INPUT_REFUSED, TaskProtocolError, isTerminal, type JsonObject, type JsonRpcErrorObject } from '../protocol/index.js';
import type { SignalBus } from '../store/local-bus.js';
import type { TaskRecord, TaskStore } from '../store/types.js';
import { InputTimeoutError, TaskCancelledError } from './context.js';

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
}

/** The client answered an input request with an error (it cannot do that kind of input): the wait fails. */
function inputRefused(key: string, e: JsonRpcErrorObject): TaskProtocolError {
  return new TaskProtocolError(ErrorCode.InternalError, `The client could not answer input "${key}": ${e.message} (${e.code})`, {
    reason: 'input_refused',
    key,
    clientError: e,
  });
}

export function waitForAnswers<K extends string>(w: AnswerWait): Promise<Record<K, JsonObject>> {
  const keys = w.keys as K[];
  return new Promise<Record<K, JsonObject>>((resolve, reject) => {
    let timer: NodeJS.Timeout | undefined;
    let settled = false;
    const finish = (err: unknown, value?: Record<K, JsonObject>) => {
      if (settled) return;
      settled = true;
      if (timer) clearTimeout(timer);
      unsubscribe();
      w.signal.removeEventListener('abort', onAbort);
      if (err) reject(err);
      else resolve(value!);
    };
    const check = (r: TaskRecord) => {
      if (isTerminal(r.status)) return finish(new TaskCancelledError('cancelled'));
      if (keys.every((k) => r.inputResponses[k])) {
        const out = {} as Record<K, JsonObject>;
        for (const k of keys) {
          const response = r.inputResponses[k]!.response;
          const refused = response[INPUT_REFUSED] as JsonRpcErrorObject | undefined;
          if (refused) return finish(inputRefused(k, refused));
          out[k] = response;
        }
        return finish(null, out);
      }
      const deadlines = keys.filter((k) => r.inputRequests[k]).map((k) => r.inputRequests[k]!.deadline);
      const first = deadlines.length ? Math.min(...deadlines) : Date.now() + w.timeoutMs;
      if (timer) clearTimeout(timer);
      timer = setTimeout(() => {
        const open = keys.filter((k) => !r.inputResponses[k]);
        finish(new InputTimeoutError(open, w.timeoutMs));
      }, Math.max(0, first - Date.now()));
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
    check(w.record);
  });
}
