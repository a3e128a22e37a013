/**
 * A request body's nesting, bounded before anything walks it: canonical JSON (events/*), schema checks, JSON.stringify
 * and the SDK's parsing all recurse, and a body 100,000 levels deep overflowed the stack into an HTTP 500. JSON.parse
 * itself does not recurse; this check descends at most the limit, so it cannot overflow either.
 */
import { ErrorCode } from '../../protocol/index.js';
import { jsonRpcError } from './answers.js';
import type { Reply } from './exchange.js';

/** Most levels of arrays and objects in a request body (the message itself is the first). */
export const MAX_JSON_DEPTH = 128;

/** Whether `v` has more than `levels` levels of arrays and objects. */
function deeper(v: unknown, levels: number): boolean {
  if (v === null || typeof v !== 'object') return false;
  if (levels === 0) return true;
  if (Array.isArray(v)) {
    for (const x of v) if (deeper(x, levels - 1)) return true;
    return false;
  }
  for (const k in v) if (deeper((v as Record<string, unknown>)[k], levels - 1)) return true;
  return false;
}

/** The refusal of a body nested deeper than MAX_JSON_DEPTH (`-32602` for a message's params, `-32600` otherwise),
 *  or undefined. */
export function refuseDeepBody(parsed: unknown): Reply | undefined {
  if (!deeper(parsed, MAX_JSON_DEPTH)) return undefined;
  const msg = parsed !== null && typeof parsed === 'object' && !Array.isArray(parsed) ? (parsed as { id?: unknown; params?: unknown }) : undefined;
  const id = typeof msg?.id === 'string' || typeof msg?.id === 'number' ? msg.id : null;
  const inParams = msg !== undefined && deeper(msg.params, MAX_JSON_DEPTH - 1);
  return jsonRpcError(
    400,
    id,
    inParams ? ErrorCode.InvalidParams : ErrorCode.InvalidRequest,
    `${inParams ? 'Invalid params' : 'Invalid Request'}: the JSON is nested deeper than ${MAX_JSON_DEPTH} levels (arrays and objects); nothing was stored. Send flatter arguments`,
  );
}
