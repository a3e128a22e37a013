/**
 * Server spans over stdio: `outlast serve MODULE --stdio` in a real process whose module registers an OpenTelemetry
 * SDK (spans written to a file), driven by the SDK v1 client over its own stdio transport. A call carrying
 * `_meta.traceparent` gets a SERVER span under it with `network.transport` pipe, the handler's span hangs under that,
 * a task created over stdio keeps the trace, and an error's code is the span's `error.type`.
 */
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { Client as ClientV1 } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { BIN, ROOT, sleep, tempDir } from './helpers.js';

const MODULE = join(ROOT, 'dist', 'test', 'traced-stdio-module.js');
const TRACE_ID = '4bf92f3577b34da6a3ce929d0e0e4736';
const CALLER_SPAN = '00f067aa0ba902b7';

interface SpanLine {
  name: string;
  kind: number;
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  attributes: Record<string, unknown>;
  status: number;
}

const SERVER = 1; // SpanKind.SERVER
const ERROR = 2; // SpanStatusCode.ERROR

describe('server spans over stdio', () => {
  it('a request carrying _meta.traceparent gets a server span under it, and its handler under that', async () => {
    const dir = tempDir();
    const spansFile = join(dir, 'spans.jsonl');
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: [BIN, 'serve', MODULE, '--stdio', '--store', `sqlite:${join(dir, 's.db')}`],
      env: { ...(process.env as Record<string, string>), OUTLAST_TEST_SPANS: spansFile },
      stderr: 'ignore',
    });
    const client = new ClientV1({ name: 'stdio-traces', version: '1' }, { capabilities: {} });
    await client.connect(transport);
    const pid = transport.pid!;
    const read = (): SpanLine[] => (existsSync(spansFile) ? readFileSync(spansFile, 'utf8').trim().split('\n').filter(Boolean).map((l) => JSON.parse(l) as SpanLine) : []);
    const waitFor = async (pred: (s: SpanLine[]) => boolean): Promise<SpanLine[]> => {
      for (let i = 0; i < 250; i++) {
        const s = read();
        if (pred(s)) return s;
        await sleep(20);
      }
      assert.fail(`spans not seen; have ${read().map((s) => s.name).join(', ')}`);
    };
    try {
      const traceparent = `00-${TRACE_ID}-${CALLER_SPAN}-01`;
      const r = await client.callTool({ name: 'quick', arguments: {}, _meta: { traceparent } });
      assert.deepEqual(r.content, [{ type: 'text', text: 'done' }]);
      let spans = await waitFor((s) => s.some((x) => x.name === 'execute_tool quick'));
      const server = spans.find((s) => s.name === 'tools/call quick')!;
      assert.ok(server, 'a server span for the call');
      assert.equal(server.kind, SERVER);
      assert.equal(server.traceId, TRACE_ID);
      assert.equal(server.parentSpanId, CALLER_SPAN, "the caller's span is its parent");
      assert.equal(server.attributes['network.transport'], 'pipe');
      assert.equal(server.attributes['gen_ai.tool.name'], 'quick');
      assert.equal(server.attributes['error.type'], undefined);
      const run = spans.find((s) => s.name === 'execute_tool quick')!;
      assert.equal(run.parentSpanId, server.spanId, "the handler's span is a child of the request's");

      // A task created over stdio (the 2025-11-25 wire): its run hangs under the creating request's span.
      const created = (await client.request(
        { method: 'tools/call', params: { name: 'work', arguments: {}, task: { ttl: 60_000 }, _meta: { traceparent } } },
        (await import('@modelcontextprotocol/sdk/types.js')).CreateTaskResultSchema,
      )) as { task: { taskId: string } };
      spans = await waitFor((s) => s.some((x) => x.name === 'execute_tool work'));
      const createdSpan = spans.find((s) => s.name === 'tools/call work')!;
      assert.equal(createdSpan.parentSpanId, CALLER_SPAN);
      assert.equal(createdSpan.attributes['outlast.task.id'], created.task.taskId, 'the span names the task it created');
      assert.equal(spans.find((s) => s.name === 'execute_tool work')!.traceId, TRACE_ID, 'the task ran in the caller’s trace');

      // An unknown tool: the answer's JSON-RPC code is the error type.
      const unknown = await client.callTool({ name: 'no_such_tool', arguments: {} }).then(
        (v) => v,
        (e: { code?: number }) => e,
      );
      spans = await waitFor((s) => s.some((x) => x.name === 'tools/call no_such_tool'));
      const failed = spans.find((s) => s.name === 'tools/call no_such_tool')!;
      const code = (unknown as { code?: number }).code;
      assert.equal(typeof code, 'number', `the call is refused with a JSON-RPC error (${JSON.stringify(unknown)})`);
      assert.deepEqual([failed.attributes['error.type'], failed.status], [String(code), ERROR]);
      assert.notEqual(failed.traceId, TRACE_ID, 'a request without context starts its own trace');
    } finally {
      await client.close();
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        /* already gone */
      }
    }
  });
});
