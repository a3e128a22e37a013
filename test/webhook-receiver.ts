/**
 * A webhook receiver on loopback for tests: records every POST, echoes the challenge, answers each event as its path's
 * plan says (a status, or hold the request open), and hands back what reached a path, each verified with the
 * subscription's secret by the `standardwebhooks` package.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Webhook } from 'standardwebhooks';

export interface Hit {
  path: string;
  headers: IncomingMessage['headers'];
  body: string;
  json: Record<string, any>;
  answered?: number;
}

/** A webhook receiver on loopback: records every POST, echoes challenges, answers events as the path's plan says. */
export function receiver() {
  const hits: Hit[] = [];
  const held: ServerResponse[] = [];
  const plans = new Map<string, (n: number) => number | 'hold'>();
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      const path = req.url ?? '/';
      const json = JSON.parse(body) as Record<string, any>;
      const hit: Hit = { path, headers: req.headers, body, json };
      hits.push(hit);
      if (json.type === 'verification') return res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ challenge: json.challenge }));
      const n = hits.filter((h) => h.path === path && h.json.type !== 'verification').length;
      const what = plans.get(path)?.(n) ?? 200;
      if (what === 'hold') return void held.push(res);
      hit.answered = what;
      res.writeHead(what).end();
    });
  });
  return {
    hits,
    plans,
    base: '',
    async start() {
      await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
      this.base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    },
    close() {
      for (const r of held) r.destroy();
      server.closeAllConnections();
      server.close();
    },
    /** The POSTs to `path` after the challenge, each verified with `secret`. */
    received(path: string, secret: string): Hit[] {
      const got = hits.filter((h) => h.path === path && h.json.type !== 'verification');
      for (const h of got) new Webhook(secret).verify(h.body, h.headers as Record<string, string>);
      return got;
    },
  };
}

export type Receiver = ReturnType<typeof receiver>;
