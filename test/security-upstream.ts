/**
 * An upstream for the security tests, run as `node dist/test/security-upstream.js` behind `outlast gateway --stdio`: a
 * real MCP server (SDK v1) whose tool `loud_progress {bytes, ms}` sends one `notifications/progress` whose message is
 * `bytes` long, then answers after `ms`; `endless_line {bytes}` writes `bytes` characters on stdout without a line end
 * and never answers, and from then on the process stays when its stdin ends (only a signal stops it).
 */
import { setTimeout as delay } from 'node:timers/promises';
import * as z from 'zod';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';

if (process.argv[1]?.endsWith('security-upstream.js') && process.argv[2] === 'serve') {
  const server = new McpServer({ name: 'loud', version: '1.0.0' });
  server.registerTool('loud_progress', { description: 'One huge progress message, then an answer', inputSchema: { bytes: z.number().int(), ms: z.number().int() } }, async ({ bytes, ms }, extra) => {
    const progressToken = extra._meta?.progressToken;
    if (progressToken !== undefined) await extra.sendNotification({ method: 'notifications/progress', params: { progressToken, progress: 1, total: 2, message: `progress ${'p'.repeat(bytes)}` } });
    await delay(ms);
    return { content: [{ type: 'text', text: 'loud done' }] };
  });
  let stubborn = false;
  server.registerTool('endless_line', { description: 'Characters on stdout without a line end, and no answer', inputSchema: { bytes: z.number().int() } }, async ({ bytes }) => {
    stubborn = true;
    setInterval(() => undefined, 60_000); // stays until a signal ends it
    process.stdout.write('x'.repeat(bytes));
    return new Promise<never>(() => undefined);
  });
  await server.connect(new StdioServerTransport());
  // The gateway closes our stdin when it stops: the call still waiting must not keep this process.
  process.stdin.once('end', () => stubborn || process.exit(0));
}
// Without `serve`: `node --test dist/test/` runs every file there, this one too; it has nothing to test by itself.
