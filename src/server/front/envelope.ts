/**
 * The checks a long-lived task stream's request passes before anything is set up (subscriptions/listen with taskIds,
 * tasks/stream): a request id, the `_meta` envelope, the protocol version (body and header agree), and the Tasks
 * extension declared on this request. One copy, so both streams refuse alike.
 */
import { CLIENT_CAPABILITIES_META, ErrorCode, PROTOCOL_VERSION, PROTOCOL_VERSION_META, declaresTasks, missingTasksCapability } from '../../protocol/index.js';
import { jsonRpcError } from './answers.js';
import type { Reply } from './exchange.js';

/** The headers of a stream's SSE response. */
export const SSE_HEADERS = { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', 'x-accel-buffering': 'no', connection: 'keep-alive' };

/** The refusal (a JSON-RPC error response), or undefined when the request may open its stream. */
export function refuseTaskStream(request: Request, method: string, id: unknown, meta: Record<string, unknown> | undefined): Reply | undefined {
  if (id === undefined || id === null) return jsonRpcError(400, null, ErrorCode.InvalidRequest, `${method} must be a request with an id`);
  const version = meta?.[PROTOCOL_VERSION_META];
  const caps = meta?.[CLIENT_CAPABILITIES_META];
  if (typeof version !== 'string' || caps === undefined || typeof caps !== 'object') {
    return jsonRpcError(400, id, ErrorCode.InvalidParams, `params._meta must carry "${PROTOCOL_VERSION_META}" and "${CLIENT_CAPABILITIES_META}"`);
  }
  if (version !== PROTOCOL_VERSION) {
    return jsonRpcError(400, id, ErrorCode.UnsupportedProtocolVersion, 'Unsupported protocol version', { supported: [PROTOCOL_VERSION], requested: version });
  }
  if (request.headers.get('mcp-protocol-version') !== version) return jsonRpcError(400, id, ErrorCode.HeaderMismatch, 'MCP-Protocol-Version header must match _meta protocolVersion');
  if (!declaresTasks(caps)) {
    const e = missingTasksCapability();
    return jsonRpcError(400, id, e.code, e.message, e.data);
  }
  return undefined;
}
