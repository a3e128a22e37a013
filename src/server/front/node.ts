/**
 * The node:http adapter of the front (node:http, Express, Fastify's raw request, Hono's `c.env.incoming`): the Node
 * request as the front's neutral request (exchange.ts), and a plain reply written straight back with `writeHead` and
 * `end`, so the hot methods (polls, the front's refusals) cost no web `Request` or `Response`. A route that needs the
 * web request (the SDK's handler, OAuth, streams, pages) gets it from @hono/node-server, which then writes that
 * request's answer, streams included, and aborts its signal when the client leaves. Reads the body itself (capped,
 * the front decides) unless a framework already parsed it; hands over `req.auth` as an Express-style authentication
 * middleware sets it; serves the node:http mounts (dashboard, /metrics) the front routes to it.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { getRequestListener } from '@hono/node-server';
import { RESPONSE_ALREADY_SENT } from '@hono/node-server/utils/response';
import type { AuthInfo } from '@modelcontextprotocol/server';
import { Reply, toResponse, type Answer, type FrontRequest } from './exchange.js';
import type { Front, FrontExtra } from './types.js';

export type NodeHandler = (req: IncomingMessage, res: ServerResponse, parsedBody?: unknown) => Promise<void>;

/** The body of a Node request, read until it is longer than `cap` bytes. */
function readCapped(req: IncomingMessage, cap: number): Promise<Uint8Array | 'too-large'> {
  const declared = Number(req.headers['content-length']);
  if (Number.isFinite(declared) && declared >= cap) return Promise.resolve('too-large');
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size >= cap) {
        req.off('data', onData);
        req.resume();
        resolve('too-large');
        return;
      }
      chunks.push(chunk);
    };
    req.on('data', onData);
    req.once('end', () => resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks)));
    req.once('error', reject);
  });
}

/** Headers node:http keeps the first of when repeated (`req.headers`), where web `Headers` joins them all. */
const FIRST_ONLY = new Set(['age', 'authorization', 'content-length', 'content-type', 'etag', 'expires', 'from', 'host', 'if-modified-since', 'if-unmodified-since', 'last-modified', 'location', 'max-forwards', 'proxy-authorization', 'referer', 'retry-after', 'server', 'user-agent', 'cookie', 'set-cookie']);

/** A header as web `Headers.get` reads it: repeated values joined (cookies with "; "), null when absent. */
function headerOf(req: IncomingMessage, name: string): string | null {
  const lower = name.toLowerCase();
  if (!FIRST_ONLY.has(lower)) {
    const v = req.headers[lower];
    return v === undefined ? null : Array.isArray(v) ? v.join(', ') : v;
  }
  const raw = req.rawHeaders;
  let value: string | null = null;
  for (let i = 0; i < raw.length; i += 2) {
    const n = raw[i]!;
    if (n.length === lower.length && n.toLowerCase() === lower) value = value === null ? raw[i + 1]! : `${value}${lower === 'cookie' ? '; ' : ', '}${raw[i + 1]}`;
  }
  return value;
}

/** Writes a plain reply (what the hot methods answer) without a `Response`. Node frames the body itself (chunked on a
 *  kept-alive HTTP/1.1 connection): a Content-Length of our own made a poll cost 6-10 % more CPU (bench/README.md). */
function writeReply(res: ServerResponse, reply: Reply): void {
  if (res.destroyed) return;
  res.writeHead(reply.status, reply.headers);
  res.end(reply.body ?? undefined);
}

export function nodeAdapter(front: Front): NodeHandler {
  /** A route asked for the web request: @hono/node-server made it and waits for its answer (a promise kept here). */
  const handoffs = new WeakMap<IncomingMessage, (request: Request) => Promise<Response>>();
  const listener = getRequestListener((request, env) => {
    const handoff = handoffs.get(env.incoming as IncomingMessage);
    return handoff ? handoff(request) : front.fetch(request);
  });

  /** The Node request as the front reads it; `web()` hands it to @hono/node-server, which then writes its answer. */
  class NodeRequest implements FrontRequest {
    #web: Request | undefined;
    /** Set once the answer goes through @hono/node-server. */
    deliver: ((answer: Response) => void) | undefined;
    /** @hono/node-server refused to make a web request of it (an invalid URL) and answered it itself. */
    refused = false;
    readonly headers = { get: (name: string) => headerOf(this.req, name) };
    constructor(
      readonly req: IncomingMessage,
      readonly res: ServerResponse,
      readonly url: string,
    ) {}
    get method(): string {
      return this.req.method ?? 'GET';
    }
    ended(done: () => void): void {
      if (this.res.closed) done();
      else this.res.once('close', done);
    }
    web(): Request {
      if (this.#web) return this.#web;
      let deliver!: (answer: Response) => void;
      const answered = new Promise<Response>((resolve) => (deliver = resolve));
      // The listener calls back synchronously with its request (our handoff), then writes what `answered` brings.
      handoffs.set(this.req, (request) => {
        this.#web = request;
        return answered;
      });
      void listener(this.req, this.res);
      handoffs.delete(this.req);
      // It refused the request itself (an invalid URL) and has answered it: nothing is left to write.
      if (!this.#web) {
        this.refused = true;
        throw new Error('@hono/node-server refused the request');
      }
      this.deliver = deliver;
      return this.#web;
    }
  }

  /** Writes the front's answer: plain replies straight to `res`, the rest (or anything after `web()`) through hono. */
  function finish(view: NodeRequest, answer: Answer): void {
    if (view.refused) return;
    if (!view.deliver && answer instanceof Reply) return writeReply(view.res, answer);
    if (!view.deliver && !view.res.headersSent) view.web();
    view.deliver?.(toResponse(answer));
  }

  return async (req, res, parsedBody) => {
    // Express passes `next` third: a function is never a body.
    const parsed = parsedBody !== undefined && typeof parsedBody !== 'function' ? parsedBody : undefined;
    const host = req.headers.host;
    // No Host: @hono/node-server answers 400, as it always did.
    if (!host) return listener(req, res);
    const target = req.url ?? '/';
    const url = target.startsWith('/') ? `${(req.socket as { encrypted?: boolean }).encrypted ? 'https' : 'http'}://${host}${target}` : target;
    const view = new NodeRequest(req, res, url);
    const incoming = req as IncomingMessage & { auth?: AuthInfo };
    let answer: Answer;
    try {
      const mount = front.mount(view);
      if (mount instanceof Response) return finish(view, mount);
      if (mount) {
        view.deliver?.(RESPONSE_ALREADY_SENT);
        await mount(req, res);
        return;
      }
      const hasBody = parsed === undefined && req.method !== 'GET' && req.method !== 'HEAD';
      const extra: FrontExtra = {
        ...(incoming.auth !== undefined ? { authInfo: incoming.auth } : {}),
        ...(parsed !== undefined ? { parsedBody: parsed } : {}),
        // A body parser that ran before us and was not handed over left nothing to read: the front says so.
        ...(hasBody ? (req.readableEnded && req.readableLength === 0 ? { bodyConsumed: true } : { rawBody: await readCapped(req, front.bodyCap) }) : {}),
      };
      answer = await front.serve(view, extra);
    } catch {
      // The front answers its own errors; these are the adapter's (a refused URL, a failed body read), answered as
      // @hono/node-server answers a failed handler.
      answer = new Reply(500, {}, null);
    }
    finish(view, answer);
  };
}
