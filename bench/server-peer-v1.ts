/**
 * Child process: the peer for (x) and (x.stateful). The SDK v1 experimental tasks server: an McpServer with the
 * `tasks` capability and the SDK's InMemoryTaskStore, on node:http (127.0.0.1, port 0), the 2025-11-25 wire.
 *   argv[2] absent      stateless: a server and transport per request, the store shared (row x)
 *   argv[2] 'stateful'  what the SDK's examples run and most servers ship: a server and transport per session, kept
 *                       for the session's life (`sessionIdGenerator`), answers on SSE, the default (row x.stateful)
 * Tools, as Outlast's bench server has them:
 *   quick  a task whose result is stored at once
 *   park   a task that stays working
 * Sends {type:'ready', url, pid}; answers {type:'stats'} with RSS; takes CPU profiles (BENCH_PROFILE); exits on SIGTERM or disconnect.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { InMemoryTaskStore } from '@modelcontextprotocol/sdk/experimental/tasks/stores/in-memory.js';
import { answerCpuUsage, childFail, exitWithParent, installProfiler, listenAsChild } from './common.js';

const taskStore = new InMemoryTaskStore();
const ok = { content: [{ type: 'text' as const, text: 'ok' }] };

function server(): McpServer {
  const mcp = new McpServer({ name: 'peer-v1-bench', version: '0.0.0' }, { capabilities: { tasks: { list: {}, cancel: {}, requests: { tools: { call: {} } } } }, taskStore });
  const handler = (complete: boolean) => ({
    async createTask(extra: { taskStore: { createTask(o: { ttl?: number | null }): Promise<{ taskId: string }>; storeTaskResult(id: string, s: 'completed', r: unknown): Promise<void> }; taskRequestedTtl?: number | null }) {
      const task = await extra.taskStore.createTask({ ttl: extra.taskRequestedTtl ?? 3_600_000 });
      if (complete) await extra.taskStore.storeTaskResult(task.taskId, 'completed', ok);
      return { task };
    },
    async getTask(extra: { taskId: string; taskStore: { getTask(id: string): Promise<unknown> } }) {
      return extra.taskStore.getTask(extra.taskId);
    },
    async getTaskResult(extra: { taskId: string; taskStore: { getTaskResult(id: string): Promise<unknown> } }) {
      return extra.taskStore.getTaskResult(extra.taskId);
    },
  });
  mcp.experimental.tasks.registerToolTask('quick', { description: 'a task that completes at once', execution: { taskSupport: 'required' } }, handler(true) as never);
  mcp.experimental.tasks.registerToolTask('park', { description: 'a task that stays working', execution: { taskSupport: 'required' } }, handler(false) as never);
  return mcp;
}

/** Stateless: a server and a transport for every request. */
async function perRequest(req: IncomingMessage, res: ServerResponse, body: unknown): Promise<void> {
  const mcp = server();
  const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
  res.on('close', () => {
    void transport.close();
    void mcp.close();
  });
  await mcp.connect(transport);
  await transport.handleRequest(req, res, body);
}

/** Stateful: an initialize opens a session (its server and transport kept); later requests name it in a header. */
const sessions = new Map<string, StreamableHTTPServerTransport>();
async function perSession(req: IncomingMessage, res: ServerResponse, body: unknown): Promise<void> {
  const id = req.headers['mcp-session-id'];
  const known = typeof id === 'string' ? sessions.get(id) : undefined;
  if (known) return known.handleRequest(req, res, body);
  if (id !== undefined || (body as { method?: unknown } | undefined)?.method !== 'initialize') {
    res.writeHead(400, { 'content-type': 'application/json' }).end(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32000, message: 'No valid session' } }));
    return;
  }
  const transport: StreamableHTTPServerTransport = new StreamableHTTPServerTransport({ sessionIdGenerator: () => randomUUID(), onsessioninitialized: (sid) => void sessions.set(sid, transport) });
  transport.onclose = () => {
    if (transport.sessionId) sessions.delete(transport.sessionId);
  };
  await server().connect(transport);
  await transport.handleRequest(req, res, body);
}

async function main(): Promise<void> {
  const handle = process.argv[2] === 'stateful' ? perSession : perRequest;
  exitWithParent();
  answerCpuUsage();
  // BENCH_PROFILE profiles every side of a row: without this the run waited for a "profile-started" that never came.
  installProfiler();
  process.on('message', (m: { type?: string } | null) => {
    if (m?.type === 'stats') process.send!({ type: 'stats', rss: process.memoryUsage().rss, heapUsed: process.memoryUsage().heapUsed });
  });
  const http = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      void (async () => {
        const body = chunks.length ? JSON.parse(Buffer.concat(chunks).toString('utf8')) : undefined;
        await handle(req, res, body);
      })().catch((e) => {
        if (!res.headersSent) res.writeHead(500).end(String(e));
      });
    });
  });
  await listenAsChild(http);
}

main().catch(childFail);
