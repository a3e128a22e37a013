/**
 * The direct path: task methods answered by the HTTP front from the store, without building the application's
 * McpServer. A poll needs none of the application's tools, prompts or resources, yet the SDK's stateless handler
 * builds and registers all of them for every request.
 *
 * What the SDK checks between the wire and its handler is checked here in the same order, with the same answers:
 *   1. recognised: a JSON body (Content-Type JSON) that is one request with a string or integer id, for a method
 *      of the task-method table (anything else goes to the SDK, untouched);
 *   2. classification, by the SDK's own `classifyInboundRequest`: JSON-RPC shape, the `_meta` envelope against the
 *      era's schema, `MCP-Protocol-Version` and `Mcp-Method` against the body (-32600, -32602, -32020);
 *   3. the era's own checks (2026-07-28: a supported version, -32022; the required standard headers and `Mcp-Name`
 *      against `params.taskId`, -32020);
 *   4. the task method from `task-methods.ts` (the -32021 gate first, then one indexed read or write), its result
 *      or error encoded as the SDK encodes it for that era.
 * Body limit, bearer principal, the poll governor (429) and the `tasks/update` shape check stay in the front
 * (`front/handler.ts`), before this, for both paths alike. A request's headers in, a complete reply (front/exchange.ts) out.
 *
 * An era is a row of ERAS: `modern` (2026-07-28) and `legacy` (2025-11-25: tasks/get, tasks/list, tasks/cancel,
 * answered as that era's stateless transport answers, one SSE event). tasks/result streams, so it stays with the SDK.
 */
import {
  UnsupportedProtocolVersionError,
  classifyInboundRequest,
  isJsonContentType,
  type Implementation,
  type InboundClassificationOutcome,
  type InboundLegacyRoute,
  type InboundModernRoute,
} from '@modelcontextprotocol/server';
import { CLIENT_CAPABILITIES_META, ErrorCode, PROTOCOL_VERSION, SERVER_INFO_META, type JsonObject } from '../../protocol/index.js';
import type { TaskRuntime } from '../../runtime/runtime.js';
import { TASK_METHODS, type TaskMethod, type TaskMethodCall } from '../core/task-methods.js';
import { Reply } from '../front/exchange.js';
import type { DirectCallRequest, DirectToolCall } from './direct-call.js';
import type { AuthInfo } from '@modelcontextprotocol/server';
import { sessionIdOf, sharesPrincipal } from '../core/principals.js';

/** A JSON-RPC answer and its HTTP status (and, for a refusal, the line the SDK would report to `onerror`). */
interface Answer {
  status: number;
  body: JsonObject;
  report?: string;
  /** As one SSE event (the SDK's 2025-11-25 stateless transport answers so), instead of a JSON body. */
  sse?: boolean;
}

type RequestId = string | number;

/** The request as the front parsed it, with the standard headers the SDK reads. */
interface Inbound {
  id: RequestId;
  method: string;
  params: Record<string, unknown>;
  headers: { protocolVersion?: string; method?: string; name?: string; accept?: string };
  /** The body's `jsonrpc` member (the 2025-11-25 route is not shape-checked by the classifier). */
  jsonrpc: unknown;
  principal: string;
  /** No credentials and no session: the caller shares `anonymous` (principals.ts). */
  sharedPrincipal: boolean;
}

/** One protocol generation on the direct path. */
interface Era {
  methods: Readonly<Record<string, TaskMethod>>;
  /** How the era writes a JSON-RPC message the SDK encoded (a tools/call's answer). */
  write(message: JsonObject): Answer;
  /** The era's checks after classification: the call for the task method, or the SDK's refusal, or undefined to leave it to the SDK. */
  admit(route: InboundModernRoute | InboundLegacyRoute, req: Inbound): TaskMethodCall | Answer | undefined;
  /** A task method's result, stamped as the SDK stamps results of this era. */
  result(id: RequestId, value: JsonObject): Answer;
  /** A task method's error, with the code, message and HTTP status the SDK gives it on this era. */
  error(id: RequestId, e: unknown): Answer;
}

export interface DirectTaskPathOptions {
  /** The identity the application's McpServer is built with (results carry it in `_meta`, as the SDK's do). */
  serverInfo: Implementation;
  /** The 2025-11-25 task methods (tasks/get, tasks/list, tasks/cancel), served when given. */
  legacy?: Readonly<Record<string, TaskMethod>>;
  /** Told about refused requests, as the SDK's handler tells its `onerror`. */
  onerror?: (e: Error) => void;
  /** tools/call of Outlast's own tools, dispatched by the SDK on a kept server (direct-call.ts). */
  toolCall?: DirectToolCall;
}

export interface DirectTaskPath {
  /** The answer to `body` if it is a task-method request it recognises; undefined leaves the request to the SDK. */
  serve(request: DirectRequest, body: unknown, principal: string, authInfo?: AuthInfo): Promise<Reply | Response | undefined>;
}

// ---- answers as the SDK writes them ---------------------------------------------------------------------------

/** An entry refusal (before dispatch): the SDK's `jsonRpcErrorResponse` field order. */
function refusal(status: number, id: RequestId, code: number, message: string, data?: unknown): Answer {
  return { status, body: { jsonrpc: '2.0', error: data === undefined ? { code, message } : { code, message, data }, id } };
}

/** Text that equals a header's value once RFC 9110 optional whitespace is stripped (the SDK compares it so). */
function stripOws(v: string): string {
  const last = v.charCodeAt(v.length - 1);
  // Most values have none: no regular expression for those.
  if (v.charCodeAt(0) !== 0x20 && v.charCodeAt(0) !== 0x09 && last !== 0x20 && last !== 0x09) return v;
  return v.replace(/^[ \t]+|[ \t]+$/g, '');
}

/** `=?base64?…?=` header values, decoded as the SDK decodes them (undefined: not canonical Base64 or not UTF-8). */
const SENTINEL = /^=\?base64\?(.*)\?=$/s;
const CANONICAL_BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;
const utf8 = new TextDecoder('utf-8', { fatal: true });
function decodeHeaderValue(v: string): string | undefined {
  if (!v.startsWith('=?')) return v;
  const m = SENTINEL.exec(v);
  if (!m) return v;
  if (!CANONICAL_BASE64.test(m[1]!)) return undefined;
  try {
    return utf8.decode(Buffer.from(m[1]!, 'base64'));
  } catch {
    return undefined;
  }
}

/** -32020 with the SDK's wording: the headers and the body disagree (`cell` names the rule, as in the SDK's log). */
function headerMismatch(id: RequestId, cell: string, header: string, body: string): Answer {
  const message = `Bad Request: the request headers and body disagree: ${body}`;
  return { ...refusal(400, id, ErrorCode.HeaderMismatch, message, { mismatch: { header, body } }), report: `Rejected inbound request (${cell}): ${message}` };
}

/** The SDK's `_meta` server-info stamp: added unless the result already names one (`value` is the method's own, fresh object). */
function stampServerInfo(value: JsonObject, serverInfo: Implementation): JsonObject {
  const meta = value._meta;
  if (meta === undefined) {
    value._meta = { [SERVER_INFO_META]: serverInfo };
    return value;
  }
  if (meta === null || typeof meta !== 'object' || Array.isArray(meta) || (meta as JsonObject)[SERVER_INFO_META] !== undefined) return value;
  return { ...value, _meta: { ...(meta as JsonObject), [SERVER_INFO_META]: serverInfo } };
}

/** The SDK's split of `params.inputResponses`: plain objects are answers; anything else (or a `{method, result}` wrapper) is dropped by key. */
function splitInputResponses(raw: unknown): { accepted: Record<string, unknown>; dropped: string[] } {
  const accepted: Record<string, unknown> = {};
  const dropped: string[] = [];
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) return { accepted, dropped };
  for (const [key, entry] of Object.entries(raw)) {
    if (entry === null || typeof entry !== 'object' || Array.isArray(entry) || 'method' in entry || 'result' in entry) dropped.push(key);
    else accepted[key] = entry;
  }
  return { accepted, dropped };
}

// ---- 2026-07-28 ---------------------------------------------------------------------------------------------

function modernEra(serverInfo: Implementation): Era {
  return {
    methods: TASK_METHODS.modern,
    admit(route, req) {
      if (route.kind !== 'modern' || route.messageKind !== 'request') return undefined;
      const revision = route.classification.revision;
      if (revision !== PROTOCOL_VERSION) {
        const e = new UnsupportedProtocolVersionError({ supported: [PROTOCOL_VERSION], requested: revision ?? 'unknown' });
        return { ...refusal(400, req.id, e.code, e.message, e.data), report: e.message };
      }
      // The standard headers are required on every modern request, and Mcp-Name mirrors params.taskId.
      if (req.headers.protocolVersion === undefined) {
        return headerMismatch(req.id, 'version-header-missing', '(missing)', `the body envelope names protocol version ${revision} but the required MCP-Protocol-Version header is absent`);
      }
      if (req.headers.method === undefined) return headerMismatch(req.id, 'method-header-missing', '(missing)', `the body names method ${req.method} but the required Mcp-Method header is absent`);
      // Mcp-Name mirrors params.name on tools/call, params.taskId on the task methods.
      const field = req.method === 'tools/call' ? 'name' : 'taskId';
      const taskId = typeof req.params[field] === 'string' ? (req.params[field] as string) : undefined;
      if (req.headers.name === undefined) {
        if (taskId !== undefined) return headerMismatch(req.id, 'name-header-missing', '(missing)', `the body carries params.${field}="${taskId}" but the required Mcp-Name header is absent`);
      } else {
        const name = stripOws(req.headers.name);
        const decoded = decodeHeaderValue(name);
        if (decoded === undefined) return headerMismatch(req.id, 'name-header-invalid-encoding', name, 'the Mcp-Name header carries an invalid Base64 sentinel value');
        if (taskId !== undefined && decoded !== taskId) return headerMismatch(req.id, 'name-header-mismatch', name, `the body carries params.${field}="${taskId}" but the Mcp-Name header names "${decoded}"`);
      }
      const meta = req.params._meta as JsonObject;
      const lifted = 'inputResponses' in req.params ? splitInputResponses(req.params.inputResponses) : undefined;
      return {
        params: req.params,
        clientCapabilities: meta[CLIENT_CAPABILITIES_META],
        principal: req.principal,
        inputResponses: lifted?.accepted,
        droppedInputResponseKeys: lifted?.dropped ?? [],
      };
    },
    result(id, value) {
      return { status: 200, body: { result: stampServerInfo(value, serverInfo), jsonrpc: '2.0', id } };
    },
    write(message) {
      const code = (message.error as { code?: unknown } | undefined)?.code;
      return { status: code === ErrorCode.MissingRequiredClientCapability ? 400 : 200, body: message };
    },
    error(id, e) {
      // As the SDK answers a handler's error: its integer code (the retired -32002 as -32602), HTTP 200 except -32021.
      const err = e as { code?: unknown; message?: unknown; data?: unknown } | null;
      const thrown = Number.isSafeInteger(err?.code) ? (err!.code as number) : ErrorCode.InternalError;
      const code = thrown === -32002 ? ErrorCode.InvalidParams : thrown;
      const message = typeof err?.message === 'string' ? err.message : 'Internal error';
      const error = err?.data !== undefined ? { code, message, data: err.data } : { code, message };
      return { status: code === ErrorCode.MissingRequiredClientCapability ? 400 : 200, body: { jsonrpc: '2.0', id, error } };
    },
  };
}

// ---- 2025-11-25 --------------------------------------------------------------------------------------------

/** What the SDK's stateless 2025-11-25 transport answers with: one SSE event, then the stream ends. */
const LEGACY_VERSION = '2025-11-25';

/**
 * The 2025-11-25 era. Only what such a client sends is served here: the version header of 2025-11-25, an Accept
 * naming both media types, a well-formed JSON-RPC request. Anything else (an older or missing version header, a
 * malformed body, a bad Accept) goes to the SDK, which answers it as it always has.
 */
function legacyEra(methods: Readonly<Record<string, TaskMethod>>): Era {
  const sse = (body: JsonObject): Answer => ({ status: 200, body, sse: true });
  return {
    methods,
    admit(route, req) {
      if (route.kind !== 'legacy' || req.headers.protocolVersion !== LEGACY_VERSION || req.jsonrpc !== '2.0') return undefined;
      const accept = req.headers.accept ?? '';
      if (!accept.includes('application/json') || !accept.includes('text/event-stream')) return undefined;
      return { params: req.params, clientCapabilities: undefined, principal: req.principal, sharedPrincipal: req.sharedPrincipal, inputResponses: undefined, droppedInputResponseKeys: [] };
    },
    result(id, value) {
      return sse({ result: value, jsonrpc: '2.0', id });
    },
    write(message) {
      return sse(message);
    },
    error(id, e) {
      const err = e as { code?: unknown; message?: unknown; data?: unknown } | null;
      const code = Number.isSafeInteger(err?.code) ? (err!.code as number) : ErrorCode.InternalError;
      const message = typeof err?.message === 'string' ? err.message : 'Internal error';
      return sse({ jsonrpc: '2.0', id, error: err?.data !== undefined ? { code, message, data: err.data } : { code, message } });
    },
  };
}

// ---- the path ---------------------------------------------------------------------------------------------------

/**
 * classifyInboundRequest, remembered for polls and tool calls. Its verdict on a request depends on the two headers it
 * reads and on the body's method and `_meta` envelope; the request id matters only by type, and the other params
 * (`taskId`, a call's `name`, `arguments` and `task`) not at all: the JSON-RPC request schema takes any params object
 * (a client polling many tasks, or calling tools, sends the same envelope each time). So a modern or legacy verdict
 * is kept for a request of the usual shape (`jsonrpc`, `id`, `method`, `params`, nothing else; a poll's params
 * `taskId` and `_meta`, a call's `name`, `arguments`, `task` and `_meta`) and found again by comparing the `_meta`
 * envelope member by member with the one it was given for: no serialization per request (a key of the whole body
 * cost 2.5 µs of a poll's ~45). A legacy body fails the SDK's response schemas before it is classified, which costs
 * more than a poll's own read (and 2.6 % of a task creation's CPU). Bounded in entries and bytes, and only an envelope
 * of a poll's size is kept (a caller padding its bodies cannot make the server keep them); a miss costs one
 * classification, as without it.
 */
export class RequestClassifications {
  /** Per headers, method and id type: the envelopes seen, newest last, at most ENVELOPES_PER_BUCKET (a request compares with each). */
  private readonly verdicts = new Map<string, KnownEnvelope[]>();
  private entries = 0;
  private bytes = 0;
  constructor(private readonly max = 512, private readonly maxBytes = 1024 * 1024, private readonly maxKeyBytes = 4096) {}

  /** Verdicts kept, and the bytes of their envelopes (as JSON). */
  get size(): { entries: number; bytes: number } {
    return { entries: this.entries, bytes: this.bytes };
  }

  classify(request: Parameters<typeof classifyInboundRequest>[0], msg: JsonObject): InboundClassificationOutcome {
    const meta = usualEnvelope(msg);
    if (meta === null) return classifyInboundRequest(request);
    const bucket = `${request.protocolVersionHeader ?? '\0'}\n${request.mcpMethodHeader ?? '\0'}\n${msg.method as string}\n${typeof msg.id}`;
    const seen = this.verdicts.get(bucket);
    if (seen) {
      for (const known of seen) {
        if (!sameJson(meta, known.meta)) continue;
        const route = known.route;
        return route.kind === 'legacy' ? route : ({ ...route, message: msg as InboundModernRoute['message'] } as InboundModernRoute);
      }
    }
    const route = classifyInboundRequest(request);
    if ((route.kind === 'modern' && route.messageKind === 'request') || route.kind === 'legacy') {
      const size = meta === undefined ? 0 : JSON.stringify(meta).length;
      // Not a client's usual envelope (a few hundred bytes): classified, never kept.
      if (size > this.maxKeyBytes) return route;
      if (this.entries >= this.max || this.bytes + size > this.maxBytes) {
        this.verdicts.clear();
        this.entries = 0;
        this.bytes = 0;
      }
      // Kept as a copy: the request's own objects go on to the handlers.
      const known = { meta: meta === undefined ? undefined : structuredClone(meta), route, size };
      const list = this.verdicts.get(bucket);
      if (!list) this.verdicts.set(bucket, [known]);
      else {
        // Many distinct envelopes under one pair of headers: the oldest goes, so a request's search stays short.
        if (list.length >= ENVELOPES_PER_BUCKET) {
          const dropped = list.shift()!;
          this.entries--;
          this.bytes -= dropped.size;
        }
        list.push(known);
      }
      this.entries++;
      this.bytes += size;
    }
    return route;
  }
}

interface KnownEnvelope {
  meta: unknown;
  route: InboundModernRoute | InboundLegacyRoute;
  /** Its envelope's length as JSON. */
  size: number;
}

/** Envelopes kept per bucket (headers, method, id type): clients of one deployment send a handful. */
const ENVELOPES_PER_BUCKET = 16;

/** The params a poll or a tool call of the usual shape may carry, and the one it must carry as a string. */
const USUAL_PARAMS: ReadonlyMap<unknown, { named: string; allowed: ReadonlySet<string> }> = new Map([
  ['tasks/get', { named: 'taskId', allowed: new Set(['taskId', '_meta']) }],
  ['tools/call', { named: 'name', allowed: new Set(['name', 'arguments', 'task', '_meta']) }],
]);

/** A poll's or tool call's `_meta` (undefined when it has none), or null when the body is not one of the usual shape. */
function usualEnvelope(msg: JsonObject): unknown {
  const usual = USUAL_PARAMS.get(msg.method);
  if (usual === undefined || msg.jsonrpc !== '2.0') return null;
  for (const k in msg) if (k !== 'jsonrpc' && k !== 'id' && k !== 'method' && k !== 'params') return null;
  const params = msg.params as JsonObject | undefined;
  if (params === null || typeof params !== 'object' || Array.isArray(params)) return null;
  if (typeof params[usual.named] !== 'string') return null;
  for (const k in params) if (!usual.allowed.has(k)) return null;
  return params._meta;
}

/** Whether two parsed JSON values are equal, member by member (the order of members does not matter). Not
 *  util.isDeepStrictEqual: it checks prototypes and types JSON cannot hold, and took 1.3 µs a poll to this 0.25. */
function sameJson(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null || Array.isArray(a) !== Array.isArray(b)) return false;
  let members = 0;
  for (const k in a) {
    if (!Object.hasOwn(b, k) || !sameJson((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k])) return false;
    members++;
  }
  for (const _ in b) members--;
  return members === 0;
}

/** What the direct path reads of a request: its headers (a web `Request` or the front's neutral request). */
type RequestHeaders = { headers: { get(name: string): string | null } };

/** The request as the front hands it over: its headers, its client leaving, and how to mark a streamed answer. */
export interface DirectRequest extends DirectCallRequest {
  /** Marks an answer whose body is still streaming (request metrics time it to its end). */
  streaming(response: Response): Response;
}

function header(request: RequestHeaders, name: string): string | undefined {
  return request.headers.get(name) ?? undefined;
}

const SSE_HEADERS = { 'cache-control': 'no-cache, no-transform', connection: 'keep-alive', 'content-type': 'text/event-stream', 'x-accel-buffering': 'no' };

const JSON_HEADERS = { 'content-type': 'application/json' };

function write(a: Answer): Reply {
  if (a.sse) return new Reply(a.status, SSE_HEADERS, `event: message\ndata: ${JSON.stringify(a.body)}\n\n`);
  return new Reply(a.status, JSON_HEADERS, JSON.stringify(a.body));
}

export function createDirectTaskPath(runtime: TaskRuntime, options: DirectTaskPathOptions): DirectTaskPath {
  const eras: { modern: Era; legacy?: Era } = { modern: modernEra(options.serverInfo), ...(options.legacy ? { legacy: legacyEra(options.legacy) } : {}) };
  const methods = new Set(Object.values(eras).flatMap((e) => (e ? Object.keys(e.methods) : [])));
  const toolCall = options.toolCall;
  if (toolCall) methods.add('tools/call');
  const report = (message: string) => options.onerror?.(new Error(message));
  const classifications = new RequestClassifications();

  return {
    async serve(request, body, principal, authInfo) {
      if (body === null || typeof body !== 'object' || Array.isArray(body)) return undefined;
      const msg = body as JsonObject;
      const id = msg.id;
      if (typeof msg.method !== 'string' || !methods.has(msg.method)) return undefined;
      // Only answers the schema allows: a request id that is a string or an integer (else the SDK answers, with id null).
      if (typeof id !== 'string' && !(typeof id === 'number' && Number.isSafeInteger(id))) return undefined;
      if (!isJsonContentType(header(request, 'content-type'))) return undefined;

      const headers = { protocolVersion: header(request, 'mcp-protocol-version'), method: header(request, 'mcp-method'), name: header(request, 'mcp-name'), accept: header(request, 'accept') };
      const route = classifications.classify({ httpMethod: 'POST', protocolVersionHeader: headers.protocolVersion, mcpMethodHeader: headers.method, mcpNameHeader: headers.name, body }, msg);
      if (route.kind === 'reject') {
        report(`Rejected inbound request (${route.cell}): ${route.message}`);
        return write(refusal(route.httpStatus, id, route.code, route.message, route.data));
      }
      const era = eras[route.kind];
      const run = era?.methods[msg.method];
      const calling = msg.method === 'tools/call' && era !== undefined;
      if (!era || (!run && !calling)) return undefined;
      const params = (msg.params ?? {}) as Record<string, unknown>;
      if (msg.params !== undefined && (msg.params === null || typeof msg.params !== 'object' || Array.isArray(msg.params))) return undefined;
      if (calling && !toolCall!.takes(params.name, params)) return undefined;
      const sharedPrincipal = sharesPrincipal(authInfo, sessionIdOf(request.headers));
      const admitted = era.admit(route, { id, method: msg.method, params, headers, jsonrpc: msg.jsonrpc, principal, sharedPrincipal });
      if (admitted === undefined) return undefined;
      if ('status' in admitted) {
        if (admitted.report) report(admitted.report);
        return write(admitted);
      }
      if (calling) {
        const called = await toolCall!.call(route.kind as 'modern' | 'legacy', route as InboundModernRoute | InboundLegacyRoute, msg, authInfo, request);
        if (called === undefined) return undefined;
        return 'stream' in called ? request.streaming(called.stream) : write(era.write(called.message));
      }
      let answer: Answer;
      try {
        answer = era.result(id, await run!(runtime, admitted));
      } catch (e) {
        answer = era.error(id, e);
      }
      return write(answer);
    },
  };
}
