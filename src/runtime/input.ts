/** Validation of `tasks/update` input responses against what the task asked for. */
import { ErrorCode, TaskProtocolError, type JsonObject } from '../protocol/index.js';
import type { PendingInput } from '../store/types.js';

function isObject(v: unknown): v is JsonObject {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function bad(message: string): TaskProtocolError {
  return new TaskProtocolError(ErrorCode.InvalidParams, `Invalid inputResponses: ${message}`);
}

/**
 * Returns the responses for outstanding keys, checked against the shape their request expects. Keys that are
 * not outstanding are ignored (spec: SHOULD ignore). Anything malformed rejects the whole update, so nothing
 * is half-applied.
 */
export function validateInputResponses(raw: unknown, outstanding: Record<string, PendingInput>): Record<string, JsonObject> {
  if (!isObject(raw)) throw bad('expected an object mapping each input request key to its response');
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
        break;
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
