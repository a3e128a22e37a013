/**
 * Child process: (ad.stdio)'s baseline, the least a stdio server needs to be called over HTTP: a node:http server
 * (127.0.0.1, port 0) in front of ONE stdio process of the upstream (SDK v1's StdioClientTransport for the framing),
 * initialized once. Each POSTed JSON-RPC request is written to the upstream under an id of the bridge's own (many in
 * flight on the one process) and its answer is sent back as JSON under the caller's id: no MCP checks, no sessions,
 * no tasks; what stdio⇄HTTP bridges (supergateway, mcp-proxy) do when they pass a call through.
 *   argv[2] = JSON { command, args }
 * Sends {type:'ready', url, pid}; exits on SIGTERM or disconnect (its upstream with it).
 */
import { createServer } from 'node:http';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import type { JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import { answerCpuUsage, childFail, exitWithParent, installProfiler, listenAsChild } from './common.js';

const cfg = JSON.parse(process.argv[2]!) as { command: string; args: string[] };

async function main(): Promise<void> {
  exitWithParent();
  answerCpuUsage();
  installProfiler();
  const upstream = new StdioClientTransport({ command: cfg.command, args: cfg.args, stderr: 'ignore' });
  const waiting = new Map<number, (m: { result?: unknown; error?: unknown }) => void>();
  let nextId = 1;
  upstream.onmessage = (m) => {
    const msg = m as { id?: number; result?: unknown; error?: unknown; method?: string };
    if (msg.method !== undefined) return; // the upstream's own notifications (simulated logging) and requests
    const done = msg.id === undefined ? undefined : waiting.get(msg.id);
    if (!done) return;
    waiting.delete(msg.id!);
    done(msg);
  };
  const call = (method: string, params: unknown) =>
    new Promise<{ result?: unknown; error?: unknown }>((resolve) => {
      const id = nextId++;
      waiting.set(id, resolve);
      void upstream.send({ jsonrpc: '2.0', id, method, params } as JSONRPCMessage);
    });
  await upstream.start();
  const init = await call('initialize', { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'bench-bridge', version: '0' } });
  if (!init.result) throw new Error(`the upstream refused initialize: ${JSON.stringify(init.error)}`);
  await upstream.send({ jsonrpc: '2.0', method: 'notifications/initialized' } as JSONRPCMessage);
  process.on('exit', () => void upstream.close());

  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      let msg: { id: unknown; method: string; params?: unknown };
      try {
        msg = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      } catch (e) {
        res.writeHead(400, { 'content-type': 'application/json' }).end(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32700, message: String(e) } }));
        return;
      }
      void call(msg.method, msg.params).then((answer) =>
        res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ jsonrpc: '2.0', id: msg.id, ...answer })),
      );
    });
  });
  await listenAsChild(server);
}

main().catch(childFail);
