/**
 * URL-mode elicitation for handle callers: a 2025-11-25 client that declared `elicitation.url` is sent a person's
 * question as `elicitation/create {mode: "url", url: <the signed answer link>, elicitationId}` instead of the form.
 * Its `accept` only means the person went to the page: the answer is recorded when the page is submitted; `decline`
 * and `cancel` are recorded as the answer, as for a form. When the question is no longer open, the stream that asked
 * it carries `notifications/elicitation/complete`.
 *
 * Over stateless HTTP no replica keeps what a client declared at `initialize`, so the front gives a client that
 * declared URL mode an `Mcp-Session-Id` that says so (the SDK's stateless transport ignores it; the client sends it
 * on every later request): a declaration the client makes about itself, like its capabilities, not a session.
 *
 * A sampling request goes out the same way (its answer page takes a written reply) to a client that declared URL mode
 * but not sampling; one that declared sampling is sent the request itself. A sampling request has no decline: a URL
 * elicitation of one answered `decline` or `cancel` records nothing, and its page takes the reply until the deadline.
 */
import { randomUUID } from 'node:crypto';
import type { McpServer, ServerContext } from '@modelcontextprotocol/server';
import { ErrorCode, TaskProtocolError, type InputRequest, type JsonObject, type JsonRpcErrorObject } from '../../protocol/index.js';
import { inputRequestId, parseTaskKeyId } from '../../protocol/legacy.js';
import type { TaskRuntime } from '../../runtime/runtime.js';
import { questionText } from '../core/question-text.js';

const SESSION_PREFIX = 'outlast.elicitation-url.';
/** Within SESSION_PREFIX: the same initialize declared sampling too. */
const SAMPLING_MARK = 'sampling.';
const ID_PREFIX = 'outlast-input-url/';

/** Whether declared client capabilities (initialize, or 2026-07-28 per request) include URL-mode elicitation. */
export function declaresUrlMode(caps: unknown): boolean {
  const url = ((caps as JsonObject | undefined)?.elicitation as JsonObject | undefined)?.url;
  return typeof url === 'object' && url !== null && !Array.isArray(url);
}

/** The Mcp-Session-Id the front gives an `initialize` that declared URL mode (undefined for any other message). */
export function urlModeSessionId(msg: unknown): string | undefined {
  const m = msg as { method?: unknown; params?: { capabilities?: unknown } } | null;
  if (!m || typeof m !== 'object' || m.method !== 'initialize' || !declaresUrlMode(m.params?.capabilities)) return undefined;
  const samples = !!(m.params?.capabilities as JsonObject | undefined)?.sampling;
  return `${SESSION_PREFIX}${samples ? SAMPLING_MARK : ''}${randomUUID()}`;
}

/** Whether the client behind this 2025-11-25 request declared URL mode: its session (stdio) or its Mcp-Session-Id. */
export function legacyClientTakesUrl(mcp: McpServer, ctx: ServerContext): boolean {
  if (!ctx.http) return declaresUrlMode(mcp.server.getClientCapabilities());
  return ctx.http.req?.headers.get('mcp-session-id')?.startsWith(SESSION_PREFIX) ?? false;
}

/** Whether the 2025-11-25 client behind this request declared sampling: its session (stdio), or its Mcp-Session-Id
 *  (given only to a client that declared URL mode, the one case where it decides how a sampling request goes out). */
export function legacyClientSamples(mcp: McpServer, ctx: ServerContext): boolean {
  if (!ctx.http) return !!mcp.server.getClientCapabilities()?.sampling;
  return ctx.http.req?.headers.get('mcp-session-id')?.startsWith(SESSION_PREFIX + SAMPLING_MARK) ?? false;
}

/** The JSON-RPC id of a URL elicitation over stateless HTTP: names the task and key, like a form's. */
export function urlRequestId(taskId: string, key: string): string {
  return ID_PREFIX + inputRequestId(taskId, key).slice('outlast-input/'.length);
}

/** The elicitationId the client sees (opaque to it; unique per task and key). */
export function elicitationIdOf(taskId: string, key: string): string {
  return `${taskId}/${encodeURIComponent(key)}`;
}

/** A form question or a sampling request as a URL elicitation pointing at its answer link. */
export function asUrlElicitation(request: InputRequest, url: string, taskId: string, key: string): InputRequest {
  const { requestedSchema: _schema, mode: _mode, ...rest } = (request.params ?? {}) as JsonObject;
  // A sampling request's own params (messages, maxTokens…) are no elicitation's: only its _meta goes along.
  const kept = request.method === 'sampling/createMessage' ? (rest._meta !== undefined ? { _meta: rest._meta } : {}) : rest;
  return { method: 'elicitation/create', params: { ...kept, mode: 'url', message: questionText(request) || 'Please answer on this page', url, elicitationId: elicitationIdOf(taskId, key) } };
}

/** The answer to record for a client's response to a URL elicitation: none for `accept` (the page records it); an
 *  action that is none of the three is refused (TaskProtocolError) and nothing is recorded. */
function recordableUrlAnswer(answer: { result: unknown } | { error: JsonRpcErrorObject }): { result: unknown } | { error: JsonRpcErrorObject } | undefined {
  if ('error' in answer) return answer;
  const action = (answer.result as { action?: unknown } | null)?.action;
  if (action === 'accept') return undefined;
  if (action === 'decline' || action === 'cancel') return { result: { action } };
  throw new TaskProtocolError(ErrorCode.InvalidParams, 'A URL elicitation is answered with action "accept", "decline" or "cancel"');
}

/** Records a client's response to the URL elicitation of `key` (see recordableUrlAnswer); a decline or cancel of a
 *  sampling request records nothing. Only the task's principal is heard, even when nothing is recorded. */
export async function recordUrlAnswer(runtime: TaskRuntime, taskId: string, principal: string, key: string, given: { result: unknown } | { error: JsonRpcErrorObject }): Promise<void> {
  const answer = recordableUrlAnswer(given);
  const record = await runtime.lookup(taskId, principal);
  if (!answer || ('result' in answer && record.inputRequests[key]?.request.method === 'sampling/createMessage')) return;
  await runtime.answerFromClient(taskId, principal, key, answer);
}

/** Whether a posted JSON-RPC response answers one of our URL elicitations; its task and key if so. */
export function parseUrlResponse(msg: unknown): { taskId: string; key: string } | undefined {
  const m = msg as { id?: unknown; method?: unknown } | null;
  if (!m || typeof m !== 'object' || m.method !== undefined) return undefined;
  return parseTaskKeyId(m.id, ID_PREFIX);
}

/** A client's response to a URL elicitation, posted to any replica: checked against the task's principal. */
export async function answerPostedUrlResponse(
  runtime: TaskRuntime,
  target: { taskId: string; key: string },
  msg: { result?: unknown; error?: unknown },
  principal: string,
): Promise<{ status: 202 } | { status: 400; error: JsonRpcErrorObject }> {
  try {
    const e = msg.error as Partial<JsonRpcErrorObject> | null | undefined;
    if (e !== undefined && (!e || typeof e !== 'object' || typeof e.code !== 'number')) throw new TaskProtocolError(ErrorCode.InvalidRequest, 'A JSON-RPC error response needs an error object with a numeric code');
    await recordUrlAnswer(runtime, target.taskId, principal, target.key, e ? { error: { code: e.code!, message: String(e.message ?? '') } } : { result: msg.result });
    return { status: 202 };
  } catch (e) {
    if (e instanceof TaskProtocolError) return { status: 400, error: { code: e.code, message: `Response to a URL elicitation of ${target.taskId} refused: ${e.message}` } };
    throw e;
  }
}
