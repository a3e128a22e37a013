/**
 * Client test helpers: a real loopback HTTP proxy in front of an `outlast serve` process that records every
 * request (method, time, body, the answer's advertised pollIntervalMs), can drop a response after the server
 * produced it (the request was delivered, the answer is lost), and can cut `subscriptions/listen` streams.
 * Plus: a scripted loopback MCP server for replies Outlast's server never gives, running the CLI as a child
 * process, and counting rows in the server's SQLite file.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer, request as httpRequest, type IncomingHttpHeaders, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import Database from 'better-sqlite3';
import { BIN, ROOT } from './helpers.js';
import { endToEndHeaders } from './http-tap.js';

export interface Seen {
  method: string;
  at: number;
  body: Record<string, any>;
  /** The request's HTTP headers (names in lower case). */
  headers: IncomingHttpHeaders;
  status?: number;
  /** pollIntervalMs advertised in the answer (tasks/get or a CreateTaskResult). */
  advertisedMs?: number;
  /** data.retryAfterMs of a rate-limited answer (429). */
  retryAfterMs?: number;
  dropped?: boolean;
  /** Not delivered to the server (see Proxy.refuse). */
  refused?: boolean;
}

export interface Proxy {
  url: string;
  seen: Seen[];
  count(method: string): number;
  /** Drop the answer of the next request matching `pred` (the server still handles it). */
  dropNext(pred: (s: Seen) => boolean): void;
  /** Cut every listen stream this many ms after it opened (undefined: never). */
  cutListenAfterMs: number | undefined;
  /** Refuse listen requests with a connection reset. */
  refuseListen: boolean;
  /** While set, requests it matches are not delivered: the connection is reset before they reach the server. */
  refuse: ((s: Seen) => boolean) | undefined;
  close(): Promise<void>;
}

export async function startProxy(target: string): Promise<Proxy> {
  const t = new URL(target);
  const seen: Seen[] = [];
  const drops: Array<(s: Seen) => boolean> = [];
  const sockets = new Set<import('node:net').Socket>();
  const proxy: Proxy = {
    url: '',
    seen,
    count: (m) => seen.filter((s) => s.method === m).length,
    dropNext: (pred) => void drops.push(pred),
    cutListenAfterMs: undefined,
    refuseListen: false,
    refuse: undefined,
    close: () =>
      new Promise<void>((res) => {
        for (const s of sockets) s.destroy();
        server.close(() => res());
      }),
  };
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const raw = Buffer.concat(chunks);
      let body: Record<string, any> = {};
      try {
        body = JSON.parse(raw.toString('utf8'));
      } catch {
        /* not JSON */
      }
      const s: Seen = { method: String(body.method ?? req.method), at: Date.now(), body, headers: req.headers };
      seen.push(s);
      if ((s.method === 'subscriptions/listen' && proxy.refuseListen) || proxy.refuse?.(s)) {
        s.refused = true;
        req.socket.destroy();
        return;
      }
      const di = drops.findIndex((p) => p(s));
      const drop = di >= 0;
      if (drop) drops.splice(di, 1);
      const up = httpRequest(
        { host: t.hostname, port: t.port, path: req.url, method: req.method, headers: { ...endToEndHeaders(req.headers), host: t.host } },
        (ur: IncomingMessage) => {
          s.status = ur.statusCode;
          const isStream = (ur.headers['content-type'] ?? '').includes('text/event-stream');
          if (drop) {
            // Let the server finish its answer, then lose it: the client sees a reset connection.
            ur.resume();
            ur.on('end', () => {
              s.dropped = true;
              res.socket?.destroy();
            });
            return;
          }
          res.writeHead(ur.statusCode ?? 502, endToEndHeaders(ur.headers));
          let text = '';
          ur.on('data', (c: Buffer) => {
            if (!isStream || s.method !== 'subscriptions/listen') text += c.toString('utf8');
            res.write(c);
          });
          ur.on('end', () => {
            const m = /"pollIntervalMs":(\d+)/.exec(text);
            if (m) s.advertisedMs = Number(m[1]);
            const r = /"retryAfterMs":(\d+)/.exec(text);
            if (r) s.retryAfterMs = Number(r[1]);
            res.end();
          });
          if (isStream && s.method === 'subscriptions/listen' && proxy.cutListenAfterMs !== undefined) {
            setTimeout(() => {
              ur.destroy();
              res.socket?.destroy();
            }, proxy.cutListenAfterMs);
          }
        },
      );
      up.on('error', () => res.socket?.destroy());
      up.end(raw);
    });
  });
  server.on('connection', (sock) => {
    sockets.add(sock);
    sock.on('close', () => sockets.delete(sock));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  proxy.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}${t.pathname}`;
  return proxy;
}

/** A request a scripted server received. */
export interface Received {
  method: string;
  id: unknown;
  body: Record<string, any>;
  headers: IncomingHttpHeaders;
}

/** A scripted reply: a JSON-RPC result (HTTP 200), or a JSON-RPC error (HTTP 400 unless `status` says otherwise). */
export type Reply = { result: Record<string, unknown> } | { error: { code: number; message: string; data?: unknown }; status?: number };

export interface ScriptedServer {
  url: string;
  received: Received[];
  close(): Promise<void>;
}

/**
 * A real loopback HTTP endpoint answering each JSON-RPC POST with `answer(request)` as plain JSON, for replies
 * Outlast's own server never gives (a refused protocol version, tool definitions with invalid `x-mcp-header`).
 */
export async function startScriptedServer(answer: (r: Received) => Reply): Promise<ScriptedServer> {
  const received: Received[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as Record<string, any>;
      const r: Received = { method: String(body.method), id: body.id, body, headers: req.headers };
      received.push(r);
      const reply = answer(r);
      const status = 'result' in reply ? 200 : (reply.status ?? 400);
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ jsonrpc: '2.0', id: body.id, ...('result' in reply ? { result: { resultType: 'complete', ...reply.result } } : { error: reply.error }) }));
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`,
    received,
    close: () =>
      new Promise<void>((res) => {
        server.closeAllConnections();
        server.close(() => res());
      }),
  };
}

/** Rows in the server's task table (optionally for one tool). */
export function serverTaskCount(dbPath: string, tool?: string): number {
  const db = new Database(dbPath, { readonly: true, fileMustExist: true });
  try {
    const r = (tool ? db.prepare('SELECT COUNT(*) AS n FROM tasks WHERE tool = ?').get(tool) : db.prepare('SELECT COUNT(*) AS n FROM tasks').get()) as { n: number };
    return r.n;
  } finally {
    db.close();
  }
}

export interface CliRun {
  proc: ChildProcess;
  stdout(): string;
  stderr(): string;
  /** Resolves with the exit code (or signal). */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** Resolves when stderr matches. */
  waitFor(re: RegExp, timeoutMs?: number): Promise<RegExpExecArray>;
  kill(signal?: NodeJS.Signals): void;
}

const running = new Set<ChildProcess>();
process.on('exit', () => {
  for (const p of running) {
    try {
      if (p.pid && p.exitCode === null && p.signalCode === null) process.kill(p.pid, 'SIGKILL');
    } catch {
      /* gone */
    }
  }
});

/** Runs a command line (`outlast ARGS…` by default) as a child process with pipes; `group`: in a process group of its
 *  own (as a terminal's foreground job is), so `process.kill(-pid, 'SIGINT')` is the terminal's Ctrl-C. */
export function runCli(args: string[], opts: { env?: NodeJS.ProcessEnv; command?: string; commandArgs?: string[]; group?: boolean } = {}): CliRun {
  const proc = spawn(opts.command ?? process.execPath, opts.commandArgs ?? [BIN, ...args], {
    cwd: ROOT,
    env: { ...process.env, OUTLAST_BEARER: '', ...opts.env },
    stdio: ['pipe', 'pipe', 'pipe'],
    ...(opts.group ? { detached: true } : {}),
  });
  running.add(proc);
  let out = '';
  let err = '';
  const waiters: Array<() => void> = [];
  proc.stdout!.on('data', (d) => {
    out += d;
    for (const w of waiters) w();
  });
  proc.stderr!.on('data', (d) => {
    err += d;
    for (const w of waiters) w();
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((r) =>
    proc.once('exit', (code, signal) => {
      running.delete(proc);
      r({ code, signal });
      for (const w of waiters) w();
    }),
  );
  return {
    proc,
    stdout: () => out,
    stderr: () => err,
    exited,
    waitFor(re, timeoutMs = 15_000) {
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`timed out waiting for ${re} in:\nstdout: ${out}\nstderr: ${err}`)), timeoutMs);
        const check = () => {
          const m = re.exec(out + '\n' + err);
          if (m) {
            clearTimeout(timer);
            resolve(m);
          } else if (proc.exitCode !== null || proc.signalCode !== null) {
            clearTimeout(timer);
            reject(new Error(`process exited (${proc.exitCode ?? proc.signalCode}) before ${re}:\nstdout: ${out}\nstderr: ${err}`));
          }
        };
        waiters.push(check);
        check();
      });
    },
    kill(signal = 'SIGTERM') {
      if (proc.pid && proc.exitCode === null && proc.signalCode === null) process.kill(proc.pid, signal);
    },
  };
}
