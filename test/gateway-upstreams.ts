/**
 * Small upstreams for the gateway's tests, run as `node dist/test/gateway-upstreams.js MODE …`:
 *   tap LOG CMD ARGS…  runs CMD as its child and appends every line it passes on to LOG ("PID > line" in, "PID < line"
 *                      out; "PID child CPID" first), so a test sees what reached the real upstream (a cancel) and which
 *                      process to kill
 *   modern-only CMD ARGS…  runs CMD as its child, passing every line through, but answers `initialize` itself with an
 *                      error: a server that speaks only 2026-07-28 over stdio
 *   initialize-first CMD ARGS…  runs CMD as its child, passing every line through, but exits (code 1) when the first
 *                      request is not `initialize`: a 2025-11-25 server of the kind that ends on any earlier request
 *   garbage            writes a line that is not JSON-RPC on stdout when spoken to, and stays
 *   httptap LOG PORT URL  listens on 127.0.0.1:PORT and passes every HTTP request on to URL as it is (the answer
 *                      streamed back), appending "EPOCHMS > BODY" to LOG for each request body, so a test sees what
 *                      reached an HTTP upstream (its tasks/get, tasks/update, tasks/cancel) and when; "ready" on stdout
 *   leaky ARGS…        an upstream that fails at start and says too much: writes its arguments and $LEAKY_TOKEN to
 *                      stderr (a start-up banner), then an error line quoting them, a stack line, and exits 3
 *   silent             a real MCP server (SDK v1) whose tool `hang` never answers, `ok` answers at once, `env` answers
 *                      its environment as JSON; $GW_EXTRA_TOOL names one more tool (a name that collides, or is long)
 */
import { spawn } from 'node:child_process';
import { createServer } from 'node:http';
import { appendFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import * as z from 'zod';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { passOn } from './http-tap.js';

const [mode, ...rest] = process.argv.slice(2);

if (mode === 'tap') {
  const [log, cmd, ...args] = rest as [string, string, ...string[]];
  appendFileSync(log, `${process.pid} started\n`);
  const child = spawn(cmd, args, { stdio: ['pipe', 'pipe', 'inherit'] });
  appendFileSync(log, `${process.pid} child ${child.pid}\n`);
  createInterface({ input: process.stdin }).on('line', (l) => {
    appendFileSync(log, `${process.pid} > ${l}\n`);
    child.stdin.write(l + '\n');
  }).on('close', () => child.stdin.end());
  createInterface({ input: child.stdout }).on('line', (l) => {
    appendFileSync(log, `${process.pid} < ${l}\n`);
    process.stdout.write(l + '\n');
  });
  process.on('SIGTERM', () => child.kill('SIGTERM'));
  // It ends as its child did (killed by a signal: by the same one), so the gateway sees the real upstream's end.
  child.on('exit', (code, signal) => (signal ? process.kill(process.pid, signal) : process.exit(code ?? 1)));
} else if (mode === 'modern-only') {
  const [cmd, ...args] = rest as [string, ...string[]];
  wrap(cmd, args, (l) => {
    let msg: { id?: unknown; method?: unknown } = {};
    try {
      msg = JSON.parse(l);
    } catch {
      return true; // passed on as it is
    }
    if (msg.method !== 'initialize') return true;
    const error = { code: -32600, message: 'This server speaks only MCP 2026-07-28: use server/discover' };
    process.stdout.write(JSON.stringify({ jsonrpc: '2.0', id: msg.id, error }) + '\n');
    return false;
  });
} else if (mode === 'initialize-first') {
  const [cmd, ...args] = rest as [string, ...string[]];
  let first = true;
  wrap(cmd, args, (l) => {
    if (!first) return true;
    first = false;
    if (l.includes('"method":"initialize"')) return true;
    process.stderr.write('the first request was not initialize: exiting\n');
    process.exit(1);
  });
} else if (mode === 'httptap') {
  const [log, port, target] = rest as [string, string, string];
  const to = new URL(target);
  createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      if (body.length) appendFileSync(log, `${Date.now()} > ${body.toString('utf8').replace(/\n/g, ' ')}\n`);
      passOn(req, res, to, body);
    });
  }).listen(Number(port), '127.0.0.1', () => process.stdout.write('ready\n'));
} else if (mode === 'garbage') {
  process.stdin.once('data', () => process.stdout.write('Welcome! This server prints a banner on stdout.\n'));
  process.stdin.on('end', () => process.exit(0));
} else if (mode === 'leaky') {
  const token = process.env.LEAKY_TOKEN ?? '';
  process.stderr.write(`leaky starting: ${rest.join(' ')} (token ${token})\n`);
  process.stderr.write(`Error: the tickets API refused the key ${rest.join(' ')} and token ${token}\n`);
  process.stderr.write('    at start (leaky.js:12:7)\n');
  process.exit(3);
} else if (mode === 'silent') {
  const server = new McpServer({ name: 'silent', version: '1.0.0' });
  server.registerTool('hang', { description: 'Never answers', inputSchema: {} }, () => new Promise(() => undefined));
  server.registerTool('ok', { description: 'Answers at once', inputSchema: { word: z.string() } }, ({ word }) => ({ content: [{ type: 'text', text: `ok ${word}` }] }));
  server.registerTool('env', { description: 'Its environment', inputSchema: {} }, () => ({ content: [{ type: 'text', text: JSON.stringify(process.env) }] }));
  if (process.env.GW_EXTRA_TOOL) server.registerTool(process.env.GW_EXTRA_TOOL, { description: 'One more', inputSchema: {} }, () => ({ content: [{ type: 'text', text: 'extra' }] }));
  await server.connect(new StdioServerTransport());
} else if (mode !== undefined) {
  process.stderr.write(`unknown mode ${mode}\n`);
  process.exit(2);
}
// No mode: `node --test dist/test/` runs every file there, this one too; it has nothing to test by itself.

/** Runs CMD as a child speaking for this process on stdio; each line from the gateway is passed on when `pass`
 *  says so. It ends as its child did. */
function wrap(cmd: string, args: string[], pass: (line: string) => boolean): void {
  const child = spawn(cmd, args, { stdio: ['pipe', 'pipe', 'inherit'] });
  createInterface({ input: process.stdin }).on('line', (l) => pass(l) && child.stdin.write(l + '\n')).on('close', () => child.stdin.end());
  createInterface({ input: child.stdout }).on('line', (l) => process.stdout.write(l + '\n'));
  process.on('SIGTERM', () => child.kill('SIGTERM'));
  process.on('exit', () => child.kill('SIGKILL'));
  child.on('exit', (code, signal) => (signal ? process.kill(process.pid, signal) : process.exit(code ?? 1)));
}
