/** Refusal of over-polling: a `tasks/get` faster than the advertised pollIntervalMs gets 429 with Retry-After. */
import { RATE_LIMITED_CODE } from '../../../protocol/index.js';
import type { TaskRuntime } from '../../../runtime/runtime.js';
import { jsonRpcError, retryAfter } from '../answers.js';
import { isRequestObject, type MessageRoute } from '../route.js';

export function pollLimitRoute(runtime: TaskRuntime): MessageRoute {
  return ({ msg, who }) => {
    if (!isRequestObject(msg) || msg.method !== 'tasks/get' || typeof msg.params?.taskId !== 'string') return undefined;
    const waitMs = runtime.pollBackoff(msg.params.taskId, who);
    if (waitMs <= 0) return undefined;
    return jsonRpcError(429, msg.id, RATE_LIMITED_CODE, `Polling faster than the advertised pollIntervalMs; retry in ${waitMs} ms`, { retryAfterMs: waitMs }, retryAfter(waitMs));
  };
}
