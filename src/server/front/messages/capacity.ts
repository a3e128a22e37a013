/**
 * Refusal of a call there is no capacity for now (nothing stored): 503 with Retry-After before the SDK dispatches
 * it. A caller that can wait in the run queue (it follows tasks, 2026 or 2025-11-25, or handles) is not refused.
 */
import { CLIENT_CAPABILITIES_META, declaresTasks } from '../../../protocol/index.js';
import type { Outlast } from '../../outlast.js';
import { jsonRpcError, retryAfter } from '../answers.js';
import { isRequestObject, type MessageRoute } from '../route.js';

export function capacityRoute(outlast: Outlast): MessageRoute {
  return ({ msg, who }) => {
    if (!isRequestObject(msg) || msg.method !== 'tools/call' || typeof msg.params?.name !== 'string') return undefined;
    const caps = (msg.params._meta as Record<string, unknown> | undefined)?.[CLIENT_CAPABILITIES_META];
    const canWait = declaresTasks(caps) || msg.params.task !== undefined || outlast.handles !== undefined;
    const busy = outlast.runtime.capacityRefusal(msg.params.name, canWait, who);
    if (!busy) return undefined;
    const waitMs = (busy.data as { retryAfterMs: number }).retryAfterMs;
    return jsonRpcError(503, msg.id, busy.code, busy.message, busy.data, retryAfter(waitMs));
  };
}
