/**
 * A server module that registers everything per request, as the SDK's examples do: the 40 Zod tools of
 * bench/app-tools.ts, a prompt with a completable argument and a resource template, all inside `register`.
 * The soak runs it to show that this per-request path keeps nothing (unlike fromJsonSchema; bench/leaky-module.ts).
 */
import { ResourceTemplate, completable } from '@modelcontextprotocol/server';
import * as z from 'zod';
import { defineServer } from '../src/server/module/module.js';
import { registerAppTools } from './app-tools.js';

export default defineServer({
  info: { name: 'per-request-app', version: '0.0.0' },
  register(mcp) {
    registerAppTools(mcp, 40);
    mcp.registerPrompt(
      'summarise',
      { description: 'Summarise a collection.', argsSchema: { collection: completable(z.string(), (v) => ['orders', 'users'].filter((c) => c.startsWith(v))) } },
      ({ collection }) => ({ messages: [{ role: 'user', content: { type: 'text', text: `Summarise ${collection}` } }] }),
    );
    mcp.registerResource('record', new ResourceTemplate('records://{id}', { list: undefined }), { mimeType: 'application/json' }, (uri, { id }) => ({
      contents: [{ uri: uri.href, text: JSON.stringify({ id }) }],
    }));
  },
});
