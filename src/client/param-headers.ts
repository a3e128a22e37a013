/**
 * SEP-2243 custom headers: a tool's `inputSchema` may mark arguments with `x-mcp-header: "Name"`, and a
 * Streamable HTTP client then mirrors each such argument into an `Mcp-Param-Name` header of every `tools/call`
 * (so gateways can route on it without reading the body; the server checks header and body agree, -32020
 * otherwise). The SDK has these rules inside its `Client` only (not exported), and TaskClient does not use that
 * `Client` (sdk-notes §6), hence this module: reading the declarations (rejecting tools whose declarations break
 * the spec's constraints) and turning a call's arguments into headers.
 */

/** The `{Name}` of one `Mcp-Param-{Name}` header and where its value sits in the arguments. */
export interface HeaderParam {
  /** The chain of `properties` keys from the schema root (the argument, or a nested field of one). */
  path: string[];
  header: string;
}

/** A tool's declarations, or why the tool must not be used over HTTP (the spec: exclude it from tools/list). */
export type HeaderScan = { ok: true; params: HeaderParam[] } | { ok: false; reason: string };

const SENTINEL_PREFIX = '=?base64?';
const SENTINEL_SUFFIX = '?=';
/** RFC 9110 field-name token (`1*tchar`): no spaces, control characters, non-ASCII or delimiters such as `:`. */
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
const MIRRORED_TYPES = new Set(['string', 'integer', 'boolean']);
/** Keywords whose subschemas are not reachable "purely through properties": a declaration under one is invalid. */
const UNREACHABLE_KEYWORDS = [
  'items', 'prefixItems', 'contains', 'additionalProperties', 'unevaluatedProperties', 'unevaluatedItems', 'propertyNames',
  'patternProperties', 'dependentSchemas', 'oneOf', 'anyOf', 'allOf', 'not', 'if', 'then', 'else', '$defs', 'definitions',
];
/** Of those, the ones whose value maps names to subschemas. */
const NAMED_SUBSCHEMAS = new Set(['patternProperties', 'dependentSchemas', '$defs', 'definitions']);

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * A header value as sent: plain when it is visible ASCII with at most inner spaces, otherwise (non-ASCII, control
 * characters tab included, leading or trailing whitespace, empty, or text that itself looks like the sentinel) the
 * Base64 of its UTF-8 inside `=?base64?…?=`. Empty is encoded so the header cannot be mistaken for an absent one.
 */
export function encodeHeaderValue(value: string): string {
  const plain =
    value !== '' &&
    /^[\x20-\x7e]*$/.test(value) &&
    value.trim() === value &&
    !(value.startsWith(SENTINEL_PREFIX) && value.endsWith(SENTINEL_SUFFIX));
  return plain ? value : `${SENTINEL_PREFIX}${Buffer.from(value, 'utf8').toString('base64')}${SENTINEL_SUFFIX}`;
}

/** Reads the `x-mcp-header` declarations of one `inputSchema` and checks every constraint the spec puts on them. */
export function scanHeaderParams(inputSchema: unknown): HeaderScan {
  const params: HeaderParam[] = [];
  const seen = new Map<string, string>();
  // `reachable`: every step from the root so far was a `properties` key.
  const visit = (node: unknown, path: string[], reachable: boolean): string | undefined => {
    if (!isObject(node)) return undefined;
    if ('x-mcp-header' in node) {
      const where = path.length ? path.join('.') : 'the schema root';
      const header = node['x-mcp-header'];
      if (!reachable || path.length === 0) return `x-mcp-header at ${where} is not reachable from the root through "properties" alone`;
      if (typeof header !== 'string' || header === '') return `x-mcp-header on ${where} is not a non-empty string`;
      if (!TOKEN.test(header)) return `x-mcp-header ${JSON.stringify(header)} on ${where} is not an HTTP field-name token`;
      if (typeof node.type !== 'string' || !MIRRORED_TYPES.has(node.type)) {
        return `x-mcp-header on ${where} marks a ${JSON.stringify(node.type) ?? 'untyped'} property; only string, integer and boolean can be mirrored`;
      }
      const prior = seen.get(header.toLowerCase());
      if (prior !== undefined) return `x-mcp-header ${JSON.stringify(header)} is declared twice (also as ${JSON.stringify(prior)}; names are case-insensitive)`;
      seen.set(header.toLowerCase(), header);
      params.push({ path, header });
    }
    if (isObject(node.properties)) {
      for (const [key, child] of Object.entries(node.properties)) {
        const fault = visit(child, [...path, key], reachable);
        if (fault) return fault;
      }
    }
    for (const keyword of UNREACHABLE_KEYWORDS) {
      const sub = node[keyword];
      const branches = Array.isArray(sub) ? sub : NAMED_SUBSCHEMAS.has(keyword) && isObject(sub) ? Object.values(sub) : [sub];
      for (const branch of branches) {
        const fault = visit(branch, [...path, keyword], false);
        if (fault) return fault;
      }
    }
    return undefined;
  };
  const fault = visit(inputSchema, [], true);
  return fault ? { ok: false, reason: fault } : { ok: true, params };
}

/**
 * The `Mcp-Param-*` headers of one `tools/call`: each declared value present in the arguments as its string form
 * (integers in decimal, booleans `true`/`false`), encoded. An absent or null value sends no header; so does a
 * value that is not a primitive, or an integer outside JavaScript's safe range (the spec's limit), which the
 * server then refuses with its own error rather than with a header mismatch.
 */
export function paramHeaders(params: readonly HeaderParam[], args: Record<string, unknown>): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const { path, header } of params) {
    let value: unknown = args;
    for (const key of path) value = isObject(value) && Object.hasOwn(value, key) ? value[key] : undefined;
    if (typeof value === 'number' && (!Number.isFinite(value) || (Number.isInteger(value) && !Number.isSafeInteger(value)))) continue;
    if (typeof value === 'string' || typeof value === 'number' || typeof value === 'boolean') headers[`Mcp-Param-${header}`] = encodeHeaderValue(String(value));
  }
  return headers;
}
