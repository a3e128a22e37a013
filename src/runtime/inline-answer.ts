/**
 * A keyed call answered inline. A call with an idempotency key is stored before it runs (a retry after a lost answer
 * must find it), yet it is answered with its plain result when it finishes within the inline budget: its row then
 * ends with the outcome and a status message saying it was answered inline, so a retry with the same key is answered
 * the same way (the stored result, inline) while a call that outlasted the budget is answered as the task it became.
 */
import { TaskProtocolError, type JsonObject } from '../protocol/index.js';
import type { Outcome, TaskRecord } from '../store/types.js';
import type { CallOutcome } from './types.js';

/** The status message of a row whose caller got the outcome in the call's own answer. */
export const ANSWERED_INLINE = 'Answered inline';

/** The terminal status message of a call answered inline (a failure keeps its text after the mark). */
export function answeredInlineMessage(outcome: Outcome): string {
  return outcome.status === 'failed' ? `${ANSWERED_INLINE}: ${outcome.error.message}` : ANSWERED_INLINE;
}

/** Whether the caller of this row got its outcome inline (only a finished row's message is set by the runtime alone). */
export function wasAnsweredInline(rec: Pick<TaskRecord, 'status' | 'statusMessage'>): boolean {
  const m = rec.statusMessage;
  return (rec.status === 'completed' || rec.status === 'failed') && m !== null && (m === ANSWERED_INLINE || m.startsWith(`${ANSWERED_INLINE}: `));
}

/** The answer a retry of a call answered inline gets: the stored result as a plain result, or the same JSON-RPC error. */
export function storedInlineOutcome(rec: TaskRecord): CallOutcome {
  if (rec.status === 'failed' && rec.error) throw new TaskProtocolError(rec.error.code, rec.error.message, rec.error.data);
  const { resultType: _stored, ...result } = (rec.result ?? { content: [] }) as JsonObject;
  return { kind: 'result', result };
}
