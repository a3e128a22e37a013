/**
 * Child process: Outlast over HTTP (serveHttp) on 127.0.0.1, port 0.
 *   argv[2] = JSON { db | pg: {url, schema}, durability?, pollLimit?, tools?, appTools?, direct? }
 *   appTools: plain SDK tools of an application (bench/app-tools.ts) registered in the per-request factory;
 *   direct: false sends task methods through the SDK's per-request McpServer (default: the direct path).
 *   front: 'express' mounts outlastHandler in an Express 5 app (app.all('/mcp', handler.node)) instead of serveHttp.
 * Tools:
 *   noop       policy 'never'  returns at once (inline)
 *   noop_auto  policy 'auto'   returns at once (inline within the budget)
 *   park       policy 'always' stays working until the process stops (retry-safe, so stopping writes nothing)
 *   quick      policy 'always' returns at once (the task completes)
 * Sends {type:'ready', url, pid}; answers {type:'stats'} with {type:'stats', ...}; exits on SIGTERM or disconnect.
 * Diagnostics: {type:'profile-start'} / {type:'profile-stop', file} take a CPU profile of a window (BENCH_PROFILE).
 */
import { McpServer } from '@modelcontextprotocol/server';
import { Outlast } from '../src/server/outlast.js';
import express from 'express';
import type { AddressInfo } from 'node:net';
import { serveHttp } from '../src/server/http.js';
import { outlastHandler } from '../src/server/front/index.js';
import { SqliteTaskStore } from '../src/store/sqlite/index.js';
import { PostgresTaskStore } from '../src/store/postgres/index.js';
import { registerAppTools } from './app-tools.js';
import { answerCpuUsage, childFail, exitWithParent, installProfiler } from './common.js';

/** tools: which to register, e.g. ['noop:never'] or ['noop:auto'] or ['park', 'noop:never']. */
const cfg = JSON.parse(process.argv[2] ?? '{}') as {
  db?: string;
  pg?: { url: string; schema: string };
  durability?: 'full' | 'process';
  pollLimit?: boolean;
  tools?: string[];
  appTools?: number;
  direct?: boolean;
  front?: 'serveHttp' | 'express';
  /** Per-principal running share (server C holds 1,000 running tasks of one principal, past the default 256). */
  maxRunningPerPrincipal?: number;
};
const tools = new Set(cfg.tools ?? ['noop:never', 'park', 'quick']);
const ok = { content: [{ type: 'text' as const, text: 'ok' }] };

function parked(signal: AbortSignal): Promise<never> {
  return new Promise((_, reject) => signal.addEventListener('abort', () => reject(signal.reason), { once: true }));
}

async function main(): Promise<void> {
  exitWithParent();
  answerCpuUsage();
  const outlast = new Outlast({
    store: cfg.pg
      ? new PostgresTaskStore({ connection: { connectionString: cfg.pg.url }, schema: cfg.pg.schema })
      : new SqliteTaskStore(cfg.db!, { durability: cfg.durability ?? 'full' }),
    ...(cfg.pollLimit === true ? {} : { pollLimit: false as const }),
    ...(cfg.maxRunningPerPrincipal ? { maxRunningPerPrincipal: cfg.maxRunningPerPrincipal } : {}),
  });
  // Only the tools asked for: the SDK's per-request factory pays for every registered tool on every request.
  if (tools.has('noop:never')) outlast.tool('noop', { description: 'returns at once', policy: 'never' }, async () => ok);
  if (tools.has('noop:auto')) outlast.tool('noop', { description: 'returns at once', policy: 'auto' }, async () => ok);
  if (tools.has('park')) outlast.tool('park', { description: 'parks until shutdown', policy: 'always', retrySafe: true }, async (_a, ctx) => parked(ctx.signal));
  if (tools.has('quick')) outlast.tool('quick', { description: 'a task that completes at once', policy: 'always' }, async () => ok);

  const info = { name: 'outlast-bench', version: '0.0.0' };
  const factory = () => {
    const mcp = new McpServer(info);
    registerAppTools(mcp, cfg.appTools ?? 0);
    return mcp;
  };
  const http = cfg.front === 'express' ? await inExpress(outlast, factory, info) : await serveHttp(outlast, factory, { port: 0, host: '127.0.0.1', serverInfo: info, directTaskMethods: cfg.direct !== false });
  let stopping = false;
  const stop = async () => {
    if (stopping) return;
    stopping = true;
    const t = setTimeout(() => process.exit(0), 2000);
    try {
      await http.close();
      await outlast.stop();
    } finally {
      clearTimeout(t);
      process.exit(0);
    }
  };
  process.on('SIGTERM', () => void stop());
  installProfiler();
  process.on('message', (m: any) => {
    if (m?.type === 'stats') {
      const mu = process.memoryUsage();
      process.send!({ type: 'stats', executions: outlast.runtime.executions.size, running: outlast.runtime.running.size, rss: mu.rss, heapUsed: mu.heapUsed });
    }
  });
  process.send!({ type: 'ready', url: http.url, pid: process.pid });
}

/** outlastHandler mounted in Express 5 as docs/existing-app.md shows it. */
async function inExpress(outlast: Outlast, factory: () => McpServer, info: { name: string; version: string }): Promise<{ url: string; close(): Promise<void> }> {
  const handler = outlastHandler(outlast, factory, { serverInfo: info, directTaskMethods: cfg.direct !== false });
  await outlast.start();
  const app = express();
  app.all('/mcp', (req, res) => handler.node(req, res));
  const server = app.listen(0, '127.0.0.1');
  await new Promise((r) => server.once('listening', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`,
    async close() {
      await handler.close();
      server.closeAllConnections();
      server.close();
    },
  };
}

main().catch(childFail);
