// test:quick: starts no process and no browser (npm run test:quick).
/**
 * The client's side of traces, with a real OpenTelemetry SDK registered (NodeTracerProvider: async-local context and
 * the W3C propagator) and an in-memory exporter, against a real Outlast HTTP server in the same process: TaskClient's
 * CLIENT span of a call is a child of the application's span, the server's span and the task's handler span hang under
 * it (the context crossed the wire in `_meta`), polls carry the caller's context without a span of their own, error
 * types, W3C baggage carried to the handler, and a call made outside any span.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { SpanKind, SpanStatusCode, context, propagation, trace } from '@opentelemetry/api';
import { InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { NodeTracerProvider } from '@opentelemetry/sdk-trace-node';
import { McpServer } from '@modelcontextprotocol/server';
import { Outlast } from '../src/server/outlast.js';
import { serveHttp, type RunningHttpServer } from '../src/server/http.js';
import { SqliteTaskStore } from '../src/store/sqlite/index.js';
import { spansNamed } from './spans.js';
import { RpcError, TaskClient, TransportError } from '../src/client/index.js';
import { freePort, sleep, tempDir } from './helpers.js';

const SECRET_ARG = 'argument-that-must-not-be-traced';
const SECRET_RESULT = 'result-that-must-not-be-traced';

describe('TaskClient spans and the trace context it sends', () => {
  const exporter = new InMemorySpanExporter();
  const provider = new NodeTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  const app = trace.getTracer('application');
  let outlast: Outlast;
  let http: RunningHttpServer;
  const seenMeta: Array<Record<string, unknown>> = [];

  before(async () => {
    provider.register();
    outlast = new Outlast({ store: new SqliteTaskStore(join(tempDir(), 'tasks.db')), replicaId: 'traced' })
      .tool('work', { policy: 'always' }, async () => {
        await sleep(150);
        return { content: [{ type: 'text', text: SECRET_RESULT }] };
      })
      .tool('refuse', { policy: 'never' }, async () => ({ content: [{ type: 'text', text: 'no' }], isError: true }))
      .tool('tenant', { policy: 'never' }, async () => ({ content: [{ type: 'text', text: propagation.getBaggage(context.active())?.getEntry('tenant.id')?.value ?? '(no baggage)' }] }));
    http = await serveHttp(outlast, () => new McpServer({ name: 'client-traces', version: '0' }), {
      port: 0,
      serverInfo: { name: 'client-traces', version: '0' },
      tracePolls: true,
    });
  });
  after(async () => {
    await http?.close();
    await outlast?.stop(200);
    await provider.shutdown();
  });

  /** A client whose every request body is remembered (the `_meta` it sent). */
  function client(): TaskClient {
    return new TaskClient({
      url: http.url,
      status: 'poll',
      fetch: async (url, init) => {
        if (typeof init?.body === 'string') seenMeta.push((JSON.parse(init.body) as { params?: { _meta?: Record<string, unknown> } }).params?._meta ?? {});
        return fetch(url, init);
      },
    });
  }

  const spans = () => exporter.getFinishedSpans();
  const named = spansNamed(exporter);
  const sid = (s: ReadableSpan) => s.spanContext().spanId;

  it("a call is a CLIENT span under the application's span, the server's span and the task's run hang under it", async () => {
    exporter.reset();
    seenMeta.length = 0;
    const c = client();
    try {
      const result = await app.startActiveSpan('user clicks reindex', async (root) => {
        try {
          return await c.callTool('work', { q: SECRET_ARG });
        } finally {
          root.end();
        }
      });
      assert.equal((result.content as Array<{ text: string }>)[0]!.text, SECRET_RESULT);
      const [root] = await named('user clicks reindex');
      const both = await named('tools/call work', 2); // the client's and the server's
      const clientSpan = both.find((s) => s.kind === SpanKind.CLIENT)!;
      const serverSpan = both.find((s) => s.kind === SpanKind.SERVER)!;
      assert.ok(clientSpan && serverSpan, 'one span on each side');
      const traceId = root!.spanContext().traceId;
      assert.equal(clientSpan.spanContext().traceId, traceId);
      assert.equal(clientSpan.parentSpanContext?.spanId, sid(root!), "the client's span is a child of the application's");
      assert.equal(serverSpan.parentSpanContext?.spanId, sid(clientSpan), "the server's span is a child of the client's");
      const [run] = await named('execute_tool work');
      assert.equal(run!.spanContext().traceId, traceId, 'the task ran in the same trace');

      const u = new URL(http.url);
      assert.deepEqual(
        [clientSpan.attributes['mcp.method.name'], clientSpan.attributes['gen_ai.tool.name'], clientSpan.attributes['gen_ai.operation.name'], clientSpan.attributes['server.address'], clientSpan.attributes['server.port'], clientSpan.attributes['mcp.protocol.version']],
        ['tools/call', 'work', 'execute_tool', u.hostname, Number(u.port), '2026-07-28'],
      );
      assert.equal(typeof clientSpan.attributes['outlast.task.id'], 'string', 'the task the call created is named on the span');
      assert.equal(clientSpan.status.code, SpanStatusCode.UNSET);

      // Polls: the caller's context in _meta, no client span; the server spans them here (tracePolls).
      assert.equal(spans().filter((s) => s.kind === SpanKind.CLIENT && s.name === 'tasks/get').length, 0, 'no client span per poll');
      const polls = seenMeta.filter((m) => m.traceparent !== undefined && !String(m.traceparent).includes(sid(clientSpan)));
      assert.ok(polls.length >= 1, 'a poll carries a trace context');
      assert.ok(polls.every((m) => String(m.traceparent).includes(traceId) && String(m.traceparent).includes(sid(root!))), "polls carry the application's span");
      const [poll] = await named('tasks/get');
      assert.equal(poll!.parentSpanContext?.spanId, sid(root!), "the server's poll span hangs under the application's span");

      const everything = JSON.stringify(spans().map((s) => [s.name, s.attributes, s.events, s.links]));
      assert.ok(!everything.includes(SECRET_ARG) && !everything.includes(SECRET_RESULT), 'arguments and results are never on a span');
    } finally {
      await c.close();
    }
  });

  it('error.type: tool_error for an isError result, the JSON-RPC code for an error, the class for a transport failure', async () => {
    exporter.reset();
    const c = client();
    try {
      const refused = await c.callTool('refuse', {});
      assert.equal(refused.isError, true);
      await assert.rejects(c.callTool('no_such_tool', {}), (e: unknown) => e instanceof RpcError);
    } finally {
      await c.close();
    }
    const [refusedSpan] = (await named('tools/call refuse', 2)).filter((s) => s.kind === SpanKind.CLIENT);
    assert.deepEqual([refusedSpan!.attributes['error.type'], refusedSpan!.status.code], ['tool_error', SpanStatusCode.ERROR]);
    const [unknownSpan] = (await named('tools/call no_such_tool', 2)).filter((s) => s.kind === SpanKind.CLIENT);
    const code = unknownSpan!.attributes['rpc.response.status_code'];
    assert.equal(typeof code, 'string');
    assert.deepEqual([unknownSpan!.attributes['error.type'], unknownSpan!.status.code], [code, SpanStatusCode.ERROR]);

    const gone = new TaskClient({ url: `http://127.0.0.1:${await freePort()}/mcp`, status: 'poll', retry: { attempts: 1 } });
    try {
      await assert.rejects(gone.callTool('work', {}), (e: unknown) => e instanceof TransportError);
    } finally {
      await gone.close();
    }
    const failed = spans().filter((s) => s.kind === SpanKind.CLIENT && s.name === 'tools/call work' && s.attributes['error.type'] === 'TransportError');
    assert.ok(failed.length >= 1, 'a request that never reached a server ends its span as a TransportError');
    assert.equal(failed[0]!.status.code, SpanStatusCode.ERROR);
  });

  it("the caller's W3C baggage reaches the handler through _meta", async () => {
    seenMeta.length = 0;
    const c = client();
    try {
      const withTenant = propagation.setBaggage(context.active(), propagation.createBaggage({ 'tenant.id': { value: 'acme' } }));
      const r = await context.with(withTenant, () => app.startActiveSpan('tenant request', async (root) => {
        try {
          return await c.callTool('tenant', {});
        } finally {
          root.end();
        }
      }));
      assert.deepEqual(r.content, [{ type: 'text', text: 'acme' }]);
      assert.equal(seenMeta.at(-1)?.baggage, 'tenant.id=acme', 'the baggage went out in _meta');
      const plain = await app.startActiveSpan('no baggage', async (root) => {
        try {
          return await c.callTool('tenant', {});
        } finally {
          root.end();
        }
      });
      assert.deepEqual(plain.content, [{ type: 'text', text: '(no baggage)' }], 'no baggage is left over from the earlier request');
    } finally {
      await c.close();
    }
  });

  it('with no active span a call starts its own trace, and its context goes out in _meta', async () => {
    exporter.reset();
    seenMeta.length = 0;
    const c = client();
    try {
      await c.callTool('refuse', {});
      const [own] = (await named('tools/call refuse', 2)).filter((s) => s.kind === SpanKind.CLIENT);
      assert.equal(own!.parentSpanContext, undefined, 'a root span');
      assert.ok(String(seenMeta.at(-1)?.traceparent).includes(sid(own!)), 'its context went out in _meta');
    } finally {
      await c.close();
    }
  });
});
