/**
 * Child process: the baseline. A bare SDK McpServer with one no-op tool, served by createMcpHandler +
 * toNodeHandler on node:http (127.0.0.1, port 0), nothing of Outlast in the path.
 *   argv[2] = 'sdk-body' (default): toNodeHandler reads and parses the body itself.
 *             'parsed': the body is read and JSON.parse'd here and handed to toNodeHandler as parsedBody,
 *             which is what Outlast's serveHttp does, so the HTTP front is the same on both sides.
 *             'express': toNodeHandler mounted in an Express 5 app (app.all('/mcp', …)), as (w.inline) mounts Outlast.
 *   argv[3] = tools in all (default 1): the no-op plus that many less one application tools (bench/app-tools.ts),
 *             registered in the per-request factory as the SDK's examples do.
 * Sends {type:'ready', url, pid}; exits on SIGTERM or disconnect.
 */
import { createServer } from 'node:http';
import express from 'express';
import { toNodeHandler } from '@modelcontextprotocol/node';
import { McpServer, createMcpHandler } from '@modelcontextprotocol/server';
import { registerAppTools } from './app-tools.js';
import { answerCpuUsage, childFail, exitWithParent, listenAsChild, installProfiler } from './common.js';

async function main(): Promise<void> {
  exitWithParent();
  answerCpuUsage();
  installProfiler();
  const tools = Number(process.argv[3] ?? 1);
  const handler = createMcpHandler(() => {
    const mcp = new McpServer({ name: 'bare-bench', version: '0.0.0' });
    registerAppTools(mcp, tools - 1);
    mcp.registerTool('noop', { description: 'returns at once' }, () => ({ content: [{ type: 'text', text: 'ok' }] }));
    return mcp;
  });
  const node = toNodeHandler(handler);
  if (process.argv[2] === 'express') {
    const app = express();
    app.all('/mcp', (req, res) => void node(req, res));
    return listenAsChild(createServer(app));
  }
  const parsed = process.argv[2] === 'parsed';
  const server = createServer((req, res) => {
    if (req.url !== '/mcp') {
      res.writeHead(404).end();
      return;
    }
    if (!parsed || req.method !== 'POST') return void node(req, res);
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      let body: unknown;
      try {
        body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      } catch {
        res.writeHead(400).end();
        return;
      }
      void node(req, res, body);
    });
  });
  await listenAsChild(server);
}

main().catch(childFail);
