/**
 * The upstream's questions during a call, relayed to the call's caller as questions of the task: `elicitation/create`
 * as the same elicitation (form or URL; answered by the client, the answer page or the status tool), and
 * `sampling/createMessage` as a sampling input request (answered by a client that declared sampling, through
 * tasks/update or the MRTR retry, or by a person writing the reply on its answer page). The upstream's request waits
 * for the answer; when the upstream gives up first (its own timeout cancels the request), the wait here ends and the
 * question stays on the task unanswered until the call ends. Its log messages during the call become output of the
 * task.
 */
import type { JsonObject } from '../protocol/index.js';
import type { Logger } from '../runtime/types.js';
import type { TaskContext } from '../runtime/context.js';
import type { InputRequest } from '../protocol/index.js';
import type { CallRelay } from './upstream.js';

/** Waits for `p`, or rejects when `signal` aborts (the upstream withdrew its request). */
function unlessWithdrawn<T>(p: Promise<T>, signal: AbortSignal): Promise<T> {
  p.catch(() => undefined);
  if (signal.aborted) return Promise.reject(new Error('the upstream withdrew its request'));
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(new Error('the upstream withdrew its request'));
    signal.addEventListener('abort', onAbort, { once: true });
    p.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}

export function questionRelay(ctx: TaskContext, log: Logger): CallRelay {
  let n = 0;
  const ask = async (request: InputRequest, signal: AbortSignal): Promise<JsonObject> => {
    // Keys unique for the task's life: a re-run (after a crash) asks again under new keys of its attempt.
    const key = `upstream-${ctx.attempt}-${++n}`;
    const answers = await unlessWithdrawn(ctx.input({ [key]: request }), signal);
    return answers[key]!;
  };
  return {
    elicit(params, signal) {
      const { _meta: _m, ...rest } = params;
      return ask({ method: 'elicitation/create', params: rest }, signal);
    },
    sample(params, signal) {
      const { _meta: _m, ...rest } = params;
      return ask({ method: 'sampling/createMessage', params: rest }, signal);
    },
    log(params) {
      ctx.output({ type: 'outlast.gateway/log', data: params }).catch((e) => log.debug('could not record an upstream log message as output', { error: String(e) }));
    },
  };
}
