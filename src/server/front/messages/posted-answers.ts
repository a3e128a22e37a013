/**
 * A 2025-11-25 client posting a response to a question some replica sent on a stream: a URL elicitation accepted
 * (the person went to the answer page) or an input request's answer, recorded for any replica's waiting task.
 */
import type { Outlast } from '../../outlast.js';
import { answerPostedResponse, isInputResponse } from '../../tasks-2025/legacy.js';
import { answerPostedUrlResponse, parseUrlResponse } from '../../tasks-2025/url-elicitation.js';
import { jsonRpcError } from '../answers.js';
import { Reply } from '../exchange.js';
import type { MessageRoute } from '../route.js';

export function postedAnswersRoute(outlast: Outlast): MessageRoute {
  return ({ msg, who }) => {
    const urlTarget = parseUrlResponse(msg);
    const recorded = urlTarget
      ? answerPostedUrlResponse(outlast.runtime, urlTarget, msg as { result?: unknown; error?: unknown }, who)
      : isInputResponse(msg)
        ? answerPostedResponse(outlast.runtime, msg, who)
        : undefined;
    return recorded?.then((r) => (r.status === 202 ? new Reply(202, {}, null) : jsonRpcError(400, null, r.error.code, r.error.message)));
  };
}
