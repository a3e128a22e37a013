/**
 * Values that go into the store as JSON (step values, task results): the exact text stored, or a clear error naming
 * where a value stops being JSON. What JSON would silently change into something else (a Map into {}, NaN into null, a
 * function into nothing) is refused rather than stored changed; what it changes by a documented rule is accepted and
 * returned changed on the first run too (an object's toJSON, e.g. a Date into its ISO string; properties that are
 * undefined are left out).
 */
export class JsonValueError extends Error {
  constructor(readonly where: string, readonly why: string) {
    super(`${where} is not JSON: ${why}`);
    this.name = 'JsonValueError';
  }
}

function describe(path: string, v: unknown): string {
  const kind = typeof v === 'bigint' ? 'a BigInt'
    : typeof v === 'function' ? 'a function'
    : typeof v === 'symbol' ? 'a symbol'
    : typeof v === 'number' ? String(v)
    : v instanceof Map ? 'a Map (use Object.fromEntries)'
    : v instanceof Set ? 'a Set (use an array)'
    : 'a value JSON cannot carry';
  return `${path} is ${kind}`;
}

function check(v: unknown, path: string, ancestors: object[]): void {
  if (v === null || typeof v === 'string' || typeof v === 'boolean') return;
  if (typeof v === 'number') {
    if (!Number.isFinite(v)) throw new Error(describe(path, v));
    return;
  }
  if (typeof v !== 'object') throw new Error(describe(path, v));
  const withJson = v as { toJSON?: unknown };
  if (typeof withJson.toJSON === 'function') return check((withJson.toJSON as () => unknown).call(v), path, ancestors);
  if (v instanceof Map || v instanceof Set) throw new Error(describe(path, v));
  if (ancestors.includes(v)) throw new Error(`${path} refers back to an object that contains it (a cycle)`);
  ancestors.push(v);
  if (Array.isArray(v)) v.forEach((x, i) => check(x === undefined ? null : x, `${path}[${i}]`, ancestors));
  else for (const [k, x] of Object.entries(v)) if (x !== undefined) check(x, `${path}.${k}`, ancestors);
  ancestors.pop();
}

/** The JSON text of `value` (undefined for undefined: no value), or JsonValueError naming where it is not JSON. */
export function jsonText(value: unknown, where: string): string | undefined {
  if (value === undefined) return undefined;
  try {
    check(value, 'value', []);
  } catch (e) {
    throw new JsonValueError(where, (e as Error).message);
  }
  return JSON.stringify(value);
}

/** Size of a JSON text in UTF-8 bytes (cheap when it is plainly under `limit`). */
export function utf8Bytes(text: string): number {
  return Buffer.byteLength(text, 'utf8');
}

/** Bytes of a JSON text when over `limit` (undefined: within it); counts bytes only when the text might be over. */
export function overLimit(text: string, limit: number): number | undefined {
  if (text.length * 3 <= limit) return undefined;
  const bytes = utf8Bytes(text);
  return bytes > limit ? bytes : undefined;
}
