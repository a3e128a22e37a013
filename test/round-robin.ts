/**
 * A round-robin HTTP front for several replicas, like a load balancer without affinity: consecutive requests of one
 * client land on different replicas. Responses (SSE streams included) are piped through. A replica that refuses
 * the connection is skipped for that request (a balancer's passive health check); a replica that accepts and
 * never answers (SIGSTOP) is not detected, as with a real balancer without timeouts.
 *
 * As a program: `node dist/test/round-robin.js [--port N] URL...` prints `round-robin listening on URL`.
 */
import { createServer, request, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { pathToFileURL } from 'node:url';

export interface RoundRobin {
  url: string;
  /** Requests forwarded to each target, by index. */
  counts: number[];
  close(): Promise<void>;
}

function readBody(req: IncomingMessage): Promise<Buffer> {
  return new Promise((res, rej) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => res(Buffer.concat(chunks)));
    req.on('error', rej);
  });
}

export async function startRoundRobin(targets: string[], port = 0): Promise<RoundRobin> {
  if (targets.length === 0) throw new Error('round-robin needs at least one target URL');
  const urls = targets.map((t) => new URL(t));
  const counts = targets.map(() => 0);
  let next = 0;
  const server: Server = createServer(async (req, res) => {
    const body = await readBody(req);
    const forward = (tries: number): void => {
      const i = next++ % urls.length;
      const u = urls[i]!;
      const upstream = request(
        { host: u.hostname, port: u.port, method: req.method, path: u.pathname + (u.search || ''), headers: { ...req.headers, host: u.host } },
        (up) => {
          counts[i]!++;
          res.writeHead(up.statusCode ?? 502, up.headers);
          up.pipe(res);
        },
      );
      upstream.on('error', (e: NodeJS.ErrnoException) => {
        if (!res.headersSent && e.code === 'ECONNREFUSED' && tries + 1 < urls.length) return forward(tries + 1);
        if (!res.headersSent) {
          res.writeHead(502, { 'content-type': 'text/plain' });
          res.end(`round-robin: ${u.host}: ${e.message}`);
        } else res.destroy();
      });
      res.on('close', () => upstream.destroy());
      upstream.end(body);
    };
    forward(0);
  });
  await new Promise<void>((r) => server.listen(port, '127.0.0.1', r));
  const addr = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${addr.port}/mcp`,
    counts,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const args = process.argv.slice(2);
  let port = 0;
  const i = args.indexOf('--port');
  if (i >= 0) {
    port = Number(args[i + 1]);
    args.splice(i, 2);
  }
  const rr = await startRoundRobin(args, port);
  process.stdout.write(`round-robin listening on ${rr.url}\n`);
  process.on('SIGTERM', () => void rr.close().then(() => process.exit(0)));
}
