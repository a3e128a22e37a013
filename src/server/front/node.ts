/**
 * The node:http adapter of the front (node:http, Express, Fastify's raw request, Hono's `c.env.incoming`): turns a
 * Node request into a `Request` and writes the `Response` back, through @hono/node-server. Reads the body itself
 * (capped, the front decides) unless a framework already parsed it; hands over `req.auth` as an Express-style
 * authentication middleware sets it; serves the node:http mounts (dashboard, /metrics) the front routes to it.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { getRequestListener } from '@hono/node-server';
import { RESPONSE_ALREADY_SENT } from '@hono/node-server/utils/response';
import type { AuthInfo } from '@modelcontextprotocol/server';
import type { Front } from './types.js';

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

export function nodeAdapter(front: Front): NodeHandler {
  const parsedBodies = new WeakMap<IncomingMessage, unknown>();
  const listener = getRequestListener(async (request, env) => {
    const incoming = env.incoming as IncomingMessage & { auth?: AuthInfo };
    const mount = front.mount(request);
    if (mount instanceof Response) return mount;
    if (mount) {
      await mount(incoming, env.outgoing as ServerResponse);
      return RESPONSE_ALREADY_SENT;
    }
    const parsedBody = parsedBodies.get(incoming);
    const hasBody = parsedBody === undefined && request.method !== 'GET' && request.method !== 'HEAD';
    return front.fetch(request, {
      ...(incoming.auth !== undefined ? { authInfo: incoming.auth } : {}),
      ...(parsedBody !== undefined ? { parsedBody } : {}),
      // A body parser that ran before us and was not handed over left nothing to read: the front says so.
      ...(hasBody ? (incoming.readableEnded && incoming.readableLength === 0 ? { bodyConsumed: true } : { rawBody: await readCapped(incoming, front.bodyCap) }) : {}),
    });
  });
  return async (req, res, parsedBody) => {
    // Express passes `next` third: a function is never a body.
    if (parsedBody !== undefined && typeof parsedBody !== 'function') parsedBodies.set(req, parsedBody);
    await listener(req, res);
  };
}
