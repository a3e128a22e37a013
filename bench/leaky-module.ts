/**
 * The soak's control: a server module that does what the README says not to do, five fromJsonSchema() tools built
 * inside `register` (once per request). @modelcontextprotocol/server 2.4 compiles each new schema object into one
 * module-wide Ajv cache that keeps it (typescript-sdk #2605), so this server's heap grows with every request.
 */
import { fromJsonSchema, type JsonSchemaType } from '@modelcontextprotocol/server';
import { defineServer } from '../src/server/module/module.js';

export default defineServer({
  info: { name: 'leaky-control', version: '0.0.0' },
  register(mcp) {
    for (let i = 0; i < 5; i++) {
      const schema = { type: 'object', properties: { q: { type: 'string', minLength: 1 }, n: { type: 'integer', minimum: i } }, required: ['q'] } as JsonSchemaType;
      mcp.registerTool(`lookup_${i}`, { description: 'Looks something up.', inputSchema: fromJsonSchema<{ q: string }>(schema) }, ({ q }) => ({ content: [{ type: 'text', text: q }] }));
    }
  },
});
