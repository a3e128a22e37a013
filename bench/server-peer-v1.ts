/**
 * Child process: the peer for (x). The SDK v1 experimental tasks server: an McpServer with the `tasks` capability
 * and the SDK's InMemoryTaskStore, stateless (a server and transport per request, the store shared), on node:http
 * (127.0.0.1, port 0), the 2025-11-25 wire. Tools, as Outlast's bench server has them:
 *   quick  a task whose result is stored at once
 *   park   a task that stays working
 * Sends {type:'ready', url, pid}; answers {type:'stats'} with RSS; exits on SIGTERM or disconnect.
 */
import { createServer } from 'node:http';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { InMemoryTaskStore } from '@modelcontextprotocol/sdk/experimental/tasks/stores/in-memory.js';
import { answerCpuUsage, childFail, exitWithParent, listenAsChild } from './common.js';

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

async function main(): Promise<void> {
  exitWithParent();
  answerCpuUsage();
  process.on('message', (m: { type?: string } | null) => {
    if (m?.type === 'stats') process.send!({ type: 'stats', rss: process.memoryUsage().rss, heapUsed: process.memoryUsage().heapUsed });
  });
  const http = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      void (async () => {
        const body = chunks.length ? JSON.parse(Buffer.concat(chunks).toString('utf8')) : undefined;
        const mcp = server();
        const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
        res.on('close', () => {
          void transport.close();
          void mcp.close();
        });
        await mcp.connect(transport);
        await transport.handleRequest(req, res, body);
      })().catch((e) => {
        if (!res.headersSent) res.writeHead(500).end(String(e));
      });
    });
  });
  await listenAsChild(http);
}

main().catch(childFail);
