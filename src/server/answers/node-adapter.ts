/** Runs a web-standard handler on a Node request (until the front itself is web-standard, issue 19). */
import type { IncomingMessage, ServerResponse } from 'node:http';

export async function serveWeb(handler: (r: Request) => Promise<Response | undefined>, req: IncomingMessage, res: ServerResponse, maxBodyBytes: number): Promise<boolean> {
  const headers = new Headers();
  for (const [k, v] of Object.entries(req.headers)) if (v !== undefined) headers.set(k, Array.isArray(v) ? v.join(', ') : v);
  let body: Buffer | undefined;
  if (req.method === 'POST') {
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const c of req as AsyncIterable<Buffer>) {
      size += c.length;
      if (size > maxBodyBytes) {
        res.writeHead(413, { 'content-type': 'text/plain' }).end('Request body too large\n');
        return true;
      }
      chunks.push(c);
    }
    body = Buffer.concat(chunks);
  }
  const url = `http://${req.headers.host ?? 'localhost'}${req.url ?? '/'}`;
  const response = await handler(new Request(url, { method: req.method ?? 'GET', headers, ...(body ? { body: new Uint8Array(body) } : {}) }));
  if (!response) return false;
  const out: Record<string, string | string[]> = {};
  response.headers.forEach((v, k) => (out[k] = k === 'set-cookie' ? response.headers.getSetCookie() : v));
  res.writeHead(response.status, out).end(Buffer.from(await response.arrayBuffer()));
  return true;
}
