/**
 * The plain SDK tools of a realistic application, registered the way the SDK's examples do it: inside the
 * per-request factory, Zod shapes and all. The bare SDK baseline and Outlast register the very same ones.
 */
import type { McpServer } from '@modelcontextprotocol/server';
import * as z from 'zod';

const text = (t: string) => ({ content: [{ type: 'text' as const, text: t }] });

/** Registers `n` application tools on `mcp` (four kinds, cycled: search, read, update, notify). */
export function registerAppTools(mcp: McpServer, n: number): void {
  for (let i = 0; i < n; i++) {
    switch (i % 4) {
      case 0:
        mcp.registerTool(
          `search_${i}`,
          {
            title: `Search collection ${i}`,
            description: 'Full-text search over the collection; returns matching records, newest first.',
            inputSchema: {
              query: z.string().min(1).describe('Words to look for'),
              limit: z.number().int().min(1).max(100).optional().describe('Most results to return'),
              cursor: z.string().optional().describe('Where the previous page ended'),
            },
            annotations: { readOnlyHint: true },
          },
          ({ query }) => text(`no match for ${query}`),
        );
        break;
      case 1:
        mcp.registerTool(
          `get_record_${i}`,
          {
            description: 'Reads one record by id, optionally only some fields.',
            inputSchema: { id: z.string().uuid(), fields: z.array(z.string()).optional() },
            annotations: { readOnlyHint: true },
          },
          ({ id }) => text(`record ${id}`),
        );
        break;
      case 2:
        mcp.registerTool(
          `update_record_${i}`,
          {
            description: 'Applies a patch to a record; dryRun shows the result without saving.',
            inputSchema: { id: z.string().uuid(), patch: z.record(z.string(), z.unknown()), dryRun: z.boolean().default(false) },
            annotations: { destructiveHint: false, idempotentHint: true },
          },
          ({ id }) => text(`updated ${id}`),
        );
        break;
      default:
        mcp.registerTool(
          `notify_${i}`,
          {
            description: 'Sends a message to a channel.',
            inputSchema: { channel: z.enum(['email', 'chat', 'sms']), to: z.string().min(1), subject: z.string().max(200).optional(), body: z.string().max(10_000) },
          },
          ({ channel, to }) => text(`sent by ${channel} to ${to}`),
        );
    }
  }
}
