/** Validation of `tasks/update` input responses against what the task asked for. */
import { ErrorCode, TaskProtocolError, type JsonObject } from '../protocol/index.js';
import type { PendingInput } from '../store/types.js';

function isObject(v: unknown): v is JsonObject {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function bad(message: string): TaskProtocolError {
  return new TaskProtocolError(ErrorCode.InvalidParams, `Invalid inputResponses: ${message}`);
}

/** Most levels of nesting in one update's answers (the map of keys is level 0), and most bytes of their JSON. */
export const MAX_ANSWER_DEPTH = 32;
export const MAX_ANSWERS_BYTES = 256 * 1024;

/** Refuses answers nested too deeply or too large, walking without recursion (a deep value gets a clear -32602, not a
 *  stack overflow). Bytes are counted as their JSON text would be, about (strings by UTF-16 length). */
function checkBounds(raw: unknown): void {
  const stack: Array<[unknown, number]> = [[raw, 0]];
  let bytes = 0;
  while (stack.length > 0) {
    const [v, depth] = stack.pop()!;
    if (depth > MAX_ANSWER_DEPTH) throw bad(`the answers are nested deeper than ${MAX_ANSWER_DEPTH} levels; nothing was stored`);
    if (typeof v === 'string') bytes += v.length + 2;
    else if (Array.isArray(v)) {
      bytes += 2 + v.length;
      for (const x of v) stack.push([x, depth + 1]);
    } else if (v !== null && typeof v === 'object') {
      for (const [k, x] of Object.entries(v)) {
        bytes += k.length + 4;
        stack.push([x, depth + 1]);
      }
    } else bytes += 8;
    if (bytes > MAX_ANSWERS_BYTES) throw bad(`the answers are larger than ${MAX_ANSWERS_BYTES} bytes; nothing was stored`);
  }
}

/**
 * Returns the responses for outstanding keys, checked against the shape their request expects. Keys that are
 * not outstanding are ignored (spec: SHOULD ignore). Anything malformed rejects the whole update, so nothing
 * is half-applied.
 */
export function validateInputResponses(raw: unknown, outstanding: Record<string, PendingInput>): Record<string, JsonObject> {
  if (!isObject(raw)) throw bad('expected an object mapping each input request key to its response');
  checkBounds(raw);
  const out: Record<string, JsonObject> = {};
  for (const [key, value] of Object.entries(raw)) {
    if (!isObject(value)) throw bad(`the response for "${key}" must be an object`);
    const pending = outstanding[key];
    if (!pending) continue;
    switch (pending.request.method) {
      case 'elicitation/create': {
        const action = value.action;
        if (action !== 'accept' && action !== 'decline' && action !== 'cancel') {
          throw bad(`the response for "${key}" answers an elicitation: "action" must be "accept", "decline" or "cancel"`);
        }
        if (value.content !== undefined) {
          if (!isObject(value.content)) throw bad(`the response for "${key}": "content" must be an object`);
          for (const [f, v] of Object.entries(value.content)) {
            const ok = ['string', 'number', 'boolean'].includes(typeof v) || (Array.isArray(v) && v.every((x) => typeof x === 'string'));
            if (!ok) throw bad(`the response for "${key}": content field "${f}" must be a string, number, boolean or array of strings`);
          }
        }
        // Only what an elicitation result carries is stored; anything else sent with it is not kept.
        out[key] = value.content === undefined ? { action } : { action, content: value.content };
        continue;
      }
      case 'sampling/createMessage':
        if (typeof value.role !== 'string' || typeof value.model !== 'string' || value.content === undefined) {
          throw bad(`the response for "${key}" answers sampling/createMessage: it needs "role", "content" and "model"`);
        }
        break;
      case 'roots/list':
        if (!Array.isArray(value.roots)) throw bad(`the response for "${key}" answers roots/list: it needs a "roots" array`);
        break;
    }
    out[key] = value;
  }
  return out;
}
