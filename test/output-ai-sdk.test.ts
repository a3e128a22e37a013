/**
 * A real task-less host following a handle reads new output on each status call: the Vercel AI SDK's MCP client
 * (2.x, 2025-11-25 wire, no task support) calls `emit_output` on a real `outlast serve` process, gets a handle, and
 * each `outlast_task_status` call (passing back `outputAfter` as the handle's `nextCall` says) returns the lines
 * written since the previous call, none twice, until the tool's own result.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { createMCPClient } from '@ai-sdk/mcp';
import { useServer } from './helpers.js';
import { expected } from './output-helpers.js';

type Block = { type: string; text?: string };
type ToolResult = { content: Block[]; structuredContent?: Record<string, any>; isError?: boolean };

describe('task output through a handle, read by the Vercel AI SDK MCP client', () => {
  const server = useServer(['--inline-budget-ms', '200', '--handle-after-ms', '300']);

  it('each status call returns the lines written since the previous one, none twice, until the result', async () => {
    const client = await createMCPClient({ transport: { type: 'http', url: server.url }, protocolVersionDiscovery: false, clientName: 'ai-sdk-host' });
    try {
      const call = async (name: string, args: Record<string, unknown>) => (await client.callTool({ name, arguments: args, options: { timeout: 60_000 } })) as ToolResult;
      const first = await call('emit_output', { count: 30, intervalMs: 100 });
      let sc = first.structuredContent;
      assert.ok(sc?.taskId, `a handle: ${JSON.stringify(first).slice(0, 300)}`);
      assert.equal(sc.nextCall.name, 'outlast_task_status');
      const seen: string[] = [];
      let withNew = 0;
      for (let i = 0; i < 60; i++) {
        // Exactly what the handle says to call next (its arguments carry the output cursor after the first answer).
        const r = await call(sc!.nextCall.name, { ...sc!.nextCall.arguments, waitSeconds: 1 });
        const items = (r.structuredContent?.output?.items ?? []) as Array<{ seq: number; data: { text: string } }>;
        if (items.length) withNew++;
        seen.push(...items.map((it) => it.data.text));
        if (r.structuredContent?.taskId === undefined) {
          // The tool's own result, with the output not read yet as a text block after it.
          assert.equal(r.content[0]!.text, 'emitted 30');
          for (const b of r.content.slice(1)) seen.push(...b.text!.split('\n').filter((l) => /^line \d+$/.test(l)));
          break;
        }
        sc = r.structuredContent;
        assert.equal(sc!.nextCall.arguments.outputAfter, sc!.outputAfter, 'the next call passes the cursor back');
        if (items.length) assert.match(r.content.at(-1)!.text!, new RegExp(`line ${items.at(-1)!.seq}$`), 'the model reads the new lines in the text');
      }
      assert.deepEqual(seen, expected(1, 30), 'every line once, in order');
      assert.ok(withNew >= 2, `new lines on several status calls (${withNew})`);
    } finally {
      await client.close();
    }
  });
});
