/**
 * When a web-standard answer is over: the request metrics and the server spans of the HTTP front measure a request
 * to its response's end, and a span reads the answer's first bytes for its error code. A body that is not a stream
 * of events is written at once, so it needs no watching unless its text is wanted.
 */
import { Reply, type Answer } from '../front/exchange.js';

/** Calls `done` once the response's body has been read to its end (or cancelled), with its first `keep` bytes as
 *  text (undefined when `keep` is 0 or the body was longer). `mayStream` false: the body is all there already.
 *  Returns the response to send in its place. */
export function whenAnswered<A extends Answer>(response: A, keep: number, done: (text: string | undefined) => void, mayStream?: boolean): A;
export function whenAnswered(response: Answer, keep: number, done: (text: string | undefined) => void, mayStream = true): Answer {
  // A plain reply is complete: its text is at hand.
  if (response instanceof Reply) {
    const text = response.body ?? '';
    done(keep === 0 || Buffer.byteLength(text) > keep ? undefined : text);
    return response;
  }
  // Read `headers` and `body` only when they must be watched: on @hono/node-server reading them costs its fast path.
  if (keep === 0 && !mayStream) {
    done(undefined);
    return response;
  }
  const streamed = (response.headers.get('content-type') ?? '').includes('text/event-stream');
  if (!streamed && keep === 0) {
    done(undefined);
    return response;
  }
  if (!response.body) {
    done(keep === 0 ? undefined : '');
    return response;
  }
  const chunks: Uint8Array[] = [];
  let size = 0;
  let over = false;
  let called = false;
  const finish = () => {
    if (called) return;
    called = true;
    done(keep === 0 || over ? undefined : Buffer.concat(chunks).toString('utf8'));
  };
  const reader = response.body.getReader();
  const relay = new ReadableStream<Uint8Array>({
    async pull(controller) {
      const { value, done: ended } = await reader.read();
      if (ended) {
        finish();
        controller.close();
        return;
      }
      if (keep > 0 && !over) {
        size += value.byteLength;
        if (size > keep) over = true;
        else chunks.push(value);
      }
      controller.enqueue(value);
    },
    // A client that leaves cancels the stream it was reading: that is its end too.
    cancel(reason) {
      finish();
      return reader.cancel(reason);
    },
  });
  return new Response(relay, { status: response.status, statusText: response.statusText, headers: response.headers });
}
