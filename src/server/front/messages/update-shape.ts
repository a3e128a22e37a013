/** The `tasks/update` shape check: the SDK turns a non-object inputResponses into {} before any handler sees it. */
import { ErrorCode } from '../../../protocol/index.js';
import { jsonRpcError } from '../answers.js';
import { isRequestObject, type MessageRoute } from '../route.js';

export const updateShapeRoute: MessageRoute = ({ msg }) => {
  if (!isRequestObject(msg) || msg.method !== 'tasks/update' || !msg.params || !('inputResponses' in msg.params)) return undefined;
  const ir = msg.params.inputResponses;
  if (typeof ir === 'object' && ir !== null && !Array.isArray(ir)) return undefined;
  return jsonRpcError(400, msg.id, ErrorCode.InvalidParams, 'Invalid inputResponses: expected an object mapping each input request key to its response');
};
