/**
 * A server module whose plain SDK tool, prompt and resource are defined once (`define`), the tool with a JSON
 * Schema built by fromJsonSchema inside `define` (safe there: it runs once). `define_runs` and `servers_built`
 * report how often `define` ran and how many McpServers were built.
 */
import { fromJsonSchema } from '@modelcontextprotocol/server';
import * as z from 'zod';
import { defineServer } from '../src/server/module/module.js';

let defineRuns = 0;
let serversBuilt = 0;
const text = (t: string) => ({ content: [{ type: 'text' as const, text: t }] });

export default defineServer({
  info: { name: 'define-once', version: '1.0.0' },
  define(mcp) {
    defineRuns += 1;
    mcp.server.registerCapabilities({ logging: {} });
    mcp.registerTool(
      'lookup',
      {
        description: 'Looks up a city by code.',
        inputSchema: fromJsonSchema<{ code: string }>({ type: 'object', properties: { code: { type: 'string', pattern: '^[A-Z]{3}$' } }, required: ['code'] }),
      },
      ({ code }) => text(`city ${code}`),
    );
    mcp.registerPrompt('greeting', { description: 'A greeting.', argsSchema: { name: z.string() } }, ({ name }) => ({
      messages: [{ role: 'user', content: { type: 'text', text: `Say hello to ${name}` } }],
    }));
    mcp.registerResource('motd', 'memo://motd', { mimeType: 'text/plain' }, (uri) => ({ contents: [{ uri: uri.href, text: 'Defined once.' }] }));
  },
  register(mcp) {
    serversBuilt += 1;
    mcp.registerTool('define_runs', { description: 'How often define ran, and how many McpServers were built.' }, () => text(`${defineRuns} ${serversBuilt}`));
  },
});
