/**
 * A fault-injecting TCP proxy for the store tests, between replicas and PostgreSQL (node:net). Modes:
 * - `pass`: bytes flow both ways;
 * - `drop`: a black hole (a NAT or balancer losing packets): sockets stay open, every byte is discarded, new
 *   connections are accepted and hear nothing;
 * - `hold`: a stall: bytes are buffered both ways and delivered, in order, when the mode returns to `pass` (a
 *   connection the client closed meanwhile is closed only after its held bytes reached the database);
 * - `reset`: every connection is reset now, and new ones are reset on arrival.
 * With `swallowCancels`, a CancelRequest (a connection whose first packet asks to cancel a backend's statement) is
 * closed without reaching the database, as a pooler that does not forward cancels would.
 */
import { createServer, connect, type Server, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';

export type FaultMode = 'pass' | 'drop' | 'hold' | 'reset';

interface Pipe {
  client: Socket;
  upstream: Socket;
  /** Bytes held in `hold` mode, per direction. */
  toUpstream: Buffer[];
  toClient: Buffer[];
  clientEnded: boolean;
}

export interface FaultProxy {
  readonly port: number;
  readonly mode: FaultMode;
  /** Connections open now. */
  readonly connections: number;
  /** A PostgreSQL URL whose host and port are the proxy's. */
  url(pgUrl: string): string;
  set(mode: FaultMode): void;
  close(): Promise<void>;
}

/** The first packet of a CancelRequest connection: length 16, then the cancel request code 80877102. */
function isCancelRequest(b: Buffer): boolean {
  return b.length >= 8 && b.readInt32BE(0) === 16 && b.readInt32BE(4) === 80877102;
}

/**
 * Resets a connection, or closes it if its end is already under way. Node 20's resetAndDestroy() on a socket whose
 * shutdown libuv has not yet run (the peer's FIN answered by node's own end() in the same turn of the loop, as when
 * PgBouncer exits) fails with EINVAL and leaves the handle open for good: the fd leaks, and the process spins at exit
 * waiting for that handle to close.
 */
export function abort(sock: Socket): void {
  if (sock.destroyed) return;
  if (sock.writableEnded) sock.destroy();
  else sock.resetAndDestroy();
}

export async function startFaultProxy(target: { host: string; port: number }, options: { swallowCancels?: boolean } = {}): Promise<FaultProxy> {
  let mode: FaultMode = 'pass';
  const pipes = new Set<Pipe>();

  const flush = (p: Pipe) => {
    for (const b of p.toUpstream.splice(0)) p.upstream.write(b);
    for (const b of p.toClient.splice(0)) if (!p.client.destroyed) p.client.write(b);
    if (p.clientEnded) p.upstream.end();
  };
  const kill = (p: Pipe) => {
    pipes.delete(p);
    abort(p.client);
    abort(p.upstream);
  };

  const server: Server = createServer((client) => {
    if (mode === 'reset') return void client.resetAndDestroy();
    const upstream = connect(target.port, target.host);
    const p: Pipe = { client, upstream, toUpstream: [], toClient: [], clientEnded: false };
    pipes.add(p);
    let first = true;
    client.on('data', (b) => {
      if (first && options.swallowCancels && isCancelRequest(b)) return void client.destroy();
      first = false;
      if (mode === 'pass') upstream.write(b);
      else if (mode === 'hold') p.toUpstream.push(b);
    });
    upstream.on('data', (b) => {
      if (mode === 'pass') client.write(b);
      else if (mode === 'hold') p.toClient.push(b);
    });
    const gone = () => {
      // The client left: in a stall its bytes still reach the database later; in a black hole they never do.
      if (mode === 'hold' && p.toUpstream.length > 0) {
        p.clientEnded = true;
        return;
      }
      pipes.delete(p);
      upstream.destroy();
    };
    client.on('close', gone);
    client.on('error', () => undefined);
    upstream.on('error', () => undefined);
    upstream.on('close', () => {
      if (mode === 'pass' || mode === 'reset') {
        pipes.delete(p);
        client.destroy();
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;

  return {
    port,
    get mode() {
      return mode;
    },
    get connections() {
      return pipes.size;
    },
    url(pgUrl: string) {
      const u = new URL(pgUrl);
      u.hostname = '127.0.0.1';
      u.port = String(port);
      return u.toString();
    },
    set(next: FaultMode) {
      const before = mode;
      mode = next;
      if (next === 'reset') for (const p of [...pipes]) kill(p);
      if (next === 'pass' && before === 'hold') {
        for (const p of [...pipes]) {
          flush(p);
          if (p.clientEnded) pipes.delete(p);
        }
      }
      // Out of a black hole: connections whose bytes were lost stay open but are useless, as after a real one.
    },
    async close() {
      for (const p of [...pipes]) kill(p);
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
