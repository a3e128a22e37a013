/** HTTP taps: what one (gateway-upstreams.ts `httptap`) recorded, and how a tap passes a request on. */
import { existsSync, readFileSync } from 'node:fs';
import { request, type IncomingMessage, type ServerResponse } from 'node:http';

/** Passes a request (its `body` read already) on to the server at `to` (same path), the answer streamed back; the
 *  caller closing its stream (a cancel on HTTP) closes the upstream's. */
export function passOn(req: IncomingMessage, res: ServerResponse, to: URL, body: Buffer): void {
  const out = request({ host: to.hostname, port: to.port, path: req.url, method: req.method, headers: { ...req.headers, host: to.host } }, (up) => {
    res.writeHead(up.statusCode ?? 502, up.headers);
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
