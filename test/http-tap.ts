/** HTTP taps: what one (gateway-upstreams.ts `httptap`) recorded, and how a tap passes a request on. */
import { existsSync, readFileSync } from 'node:fs';
import { request, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';

/** Headers that describe one connection (RFC 9110 7.6.1), not the message: a tap must not pass them on. */
const HOP_BY_HOP = ['connection', 'keep-alive', 'proxy-connection', 'te', 'trailer', 'transfer-encoding', 'upgrade'];

/**
 * A message's headers without its connection's. Passed on, the server's `Keep-Alive: timeout=65` told the client the
 * tap's connection lived 65 s while the tap closed it after 5 s idle, so a call sent then met "other side closed".
 */
export function endToEndHeaders(headers: IncomingHttpHeaders): IncomingHttpHeaders {
  const named = String(headers.connection ?? '').toLowerCase().split(',').map((h) => h.trim());
  return Object.fromEntries(Object.entries(headers).filter(([k]) => !HOP_BY_HOP.includes(k) && !named.includes(k)));
}

/** Passes a request (its `body` read already) on to the server at `to` (same path), the answer streamed back; the
 *  caller closing its stream (a cancel on HTTP) closes the upstream's. */
export function passOn(req: IncomingMessage, res: ServerResponse, to: URL, body: Buffer): void {
  const out = request({ host: to.hostname, port: to.port, path: req.url, method: req.method, headers: { ...endToEndHeaders(req.headers), host: to.host } }, (up) => {
    res.writeHead(up.statusCode ?? 502, endToEndHeaders(up.headers));
    up.pipe(res);
  });
  out.on('error', () => res.destroy());
  res.on('close', () => out.destroy());
  out.end(body);
}

/** The request bodies that reached an upstream through an `httptap`, in order, with when (epoch ms). */
export function reached(log: string): Array<{ at: number; msg: Record<string, any> }> {
  if (!existsSync(log)) return [];
  return readFileSync(log, 'utf8').split('\n').flatMap((l) => {
    const m = /^(\d+) > (.*)$/.exec(l);
    if (!m) return [];
    try {
      return [{ at: Number(m[1]), msg: JSON.parse(m[2]!) }];
    } catch {
      return [];
    }
  });
}
