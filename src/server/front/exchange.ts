/**
 * The front's neutral exchange: what its routes read of a request (method, URL, headers) and the plain answers they
 * give (status, headers, a complete body), so each adapter maps its runtime to them in a few lines and a poll on
 * node:http is answered without a web `Request` or `Response` in between. A route that needs the web-standard request
 * (the SDK's handler, OAuth, a stream that watches the client leave) asks for it with `web()`, and may answer with a
 * `Response` (a stream); the fetch adapter has both already, the node adapter builds them only then.
 */

/** The request as the front's routes read it. */
export interface FrontRequest {
  readonly method: string;
  /** The full URL (scheme and host included), as `Request.url` has it. */
  readonly url: string;
  /** Headers by lower-case name, as web `Headers.get` answers (null when absent, repeated values joined). */
  readonly headers: { get(name: string): string | null };
  /** The web-standard request (its signal aborts when the client leaves), built on first use by the node adapter. */
  web(): Request;
  /** Calls `done` once the answer is written out or the client left, where the adapter sees that (node:http). */
  ended?(done: () => void): void;
}

/** A complete answer: status, headers (lower-case names) and its whole body, or none. */
export class Reply {
  constructor(
    readonly status: number,
    readonly headers: Readonly<Record<string, string>>,
    readonly body: string | null,
  ) {}

  get ok(): boolean {
    return this.status >= 200 && this.status < 300;
  }
}

/** An answer of the front: a complete reply, or a web `Response` (a stream, the SDK's answer, a page). */
export type Answer = Reply | Response;

const JSON_HEADERS: Readonly<Record<string, string>> = { 'content-type': 'application/json' };

/** Whether a value is an answer (a route's refusal) rather than what was asked for. */
export function isAnswer(x: unknown): x is Answer {
  return x instanceof Reply || x instanceof Response;
}

/** A JSON body with the given status (and extra headers). */
export function jsonReply(status: number, body: unknown, headers?: Record<string, string>): Reply {
  return new Reply(status, headers ? { ...JSON_HEADERS, ...headers } : JSON_HEADERS, JSON.stringify(body));
}

/** A web request as the front reads it. */
export function fromWeb(request: Request): FrontRequest {
  return { method: request.method, url: request.url, headers: request.headers, web: () => request };
}

/** The answer as a web `Response` (what the fetch adapter returns). */
export function toResponse(answer: Answer): Response {
  return answer instanceof Reply ? new Response(answer.body, { status: answer.status, headers: answer.headers }) : answer;
}

/** A header of an answer (either kind), or null. */
export function answerHeader(answer: Answer, name: string): string | null {
  return answer instanceof Reply ? (answer.headers[name] ?? null) : answer.headers.get(name);
}
