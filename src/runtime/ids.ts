/** Task ids and the request hash behind idempotency keys. */
import { createHash, randomBytes } from 'node:crypto';
import type { JsonObject } from '../protocol/index.js';

/**
 * Task ids: 128 random bits, base64url. The random bytes are drawn 4 KiB at a time (one call per 256 ids). An id never
 * begins with "-" (a draw whose first character would be "-" is skipped, 1 in 64), so no command line takes it for a flag.
 */
let idPool = Buffer.alloc(0);
let idOffset = 0;
const DASH_FIRST = 62; // base64url's "-" as the first character: the first byte's top six bits
export function newTaskId(): string {
  for (;;) {
    if (idOffset + 16 > idPool.length) {
      idPool = randomBytes(4096);
      idOffset = 0;
    }
    const at = idOffset;
    idOffset += 16;
    if (idPool[at]! >> 2 !== DASH_FIRST) return idPool.toString('base64url', at, at + 16);
  }
}

function stableStringify(v: unknown): string {
  if (v === null || typeof v !== 'object') return JSON.stringify(v) ?? 'null';
  if (Array.isArray(v)) return `[${v.map(stableStringify).join(',')}]`;
  const o = v as Record<string, unknown>;
  return `{${Object.keys(o)
    .sort()
    .filter((k) => o[k] !== undefined)
    .map((k) => `${JSON.stringify(k)}:${stableStringify(o[k])}`)
    .join(',')}}`;
}

/** What an idempotency key is bound to: the tool and its arguments (key order does not matter). */
export function requestHash(tool: string, args: JsonObject): string {
  return createHash('sha256').update(tool).update('\u0000').update(stableStringify(args)).digest('base64url');
}
