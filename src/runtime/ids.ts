/** Task ids and the request hash behind idempotency keys. */
import { createHash, randomBytes } from 'node:crypto';
import type { JsonObject } from '../protocol/index.js';

/** Task ids: 128 random bits, base64url. The random bytes are drawn 4 KiB at a time (one call per 256 ids). */
let idPool = Buffer.alloc(0);
let idOffset = 0;
export function newTaskId(): string {
  if (idOffset + 16 > idPool.length) {
    idPool = randomBytes(4096);
    idOffset = 0;
  }
  const id = idPool.toString('base64url', idOffset, idOffset + 16);
  idOffset += 16;
  return id;
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
