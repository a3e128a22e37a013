/** The MCP Events wire's methods (events/list, subscribe, unsubscribe, poll, stream), when the front serves it. */
import { EVENT_METHODS, type EventsWire } from '../../events/index.js';
import { isRequestObject, type MessageRoute } from '../route.js';

export function eventsRoute(events: EventsWire): MessageRoute {
  return ({ request, msg, who, auth, streaming }) =>
    isRequestObject(msg) && typeof msg.method === 'string' && EVENT_METHODS.has(msg.method)
      ? events.answer(msg as { method: string }, who, auth !== undefined, request.web().signal).then(streaming)
      : undefined;
}
