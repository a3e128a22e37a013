// test:quick: starts no process and no browser (npm run test:quick).
/**
 * Traces, in-process with a real OpenTelemetry SDK (NodeTracerProvider: async-local context and the W3C propagator,
 * as an application registers it) and an in-memory exporter: the server span of a call carrying `_meta.traceparent`
 * and its parent, a task's handler span under it, the error types, a re-run after a takeover by a second runtime on
 * the same SQLite file linked to the stored context, a new trace for a request without context; and, before any SDK
 * is registered, that nothing is kept and nothing breaks.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import { InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { NodeTracerProvider } from '@opentelemetry/sdk-trace-node';
import { McpServer } from '@modelcontextprotocol/server';
import { Outlast } from '../src/server/outlast.js';
import { serveHttp, type RunningHttpServer } from '../src/server/http.js';
import { SqliteTaskStore } from '../src/store/sqlite/index.js';
import { spansNamed } from './spans.js';
import { ErrorCode, TaskProtocolError } from '../src/protocol/index.js';
import { callTool, getTask, rpc, sleep, tempDir, textOf, waitForTask } from './helpers.js';

const TRACE_ID = '4bf92f3577b34da6a3ce929d0e0e4736';
const CLIENT_SPAN = '00f067aa0ba902b7';
const TRACEPARENT = `00-${TRACE_ID}-${CLIENT_SPAN}-01`;
/** An argument and a result no span may carry. */
const SECRET_ARG = 'argument-that-must-not-be-traced';
const SECRET_RESULT = 'result-that-must-not-be-traced';
const NO_TASKS = { elicitation: {} };

/** Set by the test that wants the first run of `reindex` to hang until its runtime stops. */
let holdReindex = false;
/** `gate` runs until this is resolved. */
let openGate: () => void = () => undefined;

function define(outlast: Outlast): Outlast {
  return outlast
    .tool('work', { policy: 'always' }, async () => {
      await sleep(30);
      return { content: [{ type: 'text', text: SECRET_RESULT }] };
    })
    .tool('quick', { policy: 'never' }, async () => ({ content: [{ type: 'text', text: 'done' }] }))
    .tool('refuse', { policy: 'never' }, async () => ({ content: [{ type: 'text', text: 'no' }], isError: true }))
    .tool('explode', { policy: 'always' }, async () => {
      throw new TaskProtocolError(ErrorCode.InvalidParams, 'bad target');
    })
    .tool('gate', { policy: 'always' }, async () => {
      await new Promise<void>((r) => (openGate = r));
      return { content: [{ type: 'text', text: 'opened' }] };
    })
    .tool('reindex', { policy: 'always', retrySafe: true }, async (_args, ctx) => {
      if (holdReindex && ctx.attempt === 1) await new Promise((_r, reject) => ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason)));
      return { content: [{ type: 'text', text: `indexed on attempt ${ctx.attempt}` }] };
    });
}

interface Node {
  outlast: Outlast;
  http: RunningHttpServer;
  stop(): Promise<void>;
}

async function node(db: string, replicaId: string, opts: { tracePolls?: boolean; maxRunning?: number } = {}): Promise<Node> {
  const { tracePolls, maxRunning } = opts;
  const outlast = define(new Outlast({ store: new SqliteTaskStore(db), replicaId, heartbeatMs: 200, leaseMs: 1000, maxRunning, queuePollMs: 100 }));
  const http = await serveHttp(outlast, () => new McpServer({ name: 'traces', version: '0' }), { port: 0, serverInfo: { name: 'traces', version: '0' }, tracePolls });
  return {
    outlast,
    http,
    async stop() {
      await http.close();
      await outlast.stop(200);
    },
  };
}

const sid = (s: ReadableSpan) => s.spanContext().spanId;
const tid = (s: ReadableSpan) => s.spanContext().traceId;

describe('traces with no OpenTelemetry SDK registered', () => {
  it('nothing is kept with the task, no span records, and every answer is the same', async () => {
    const db = join(tempDir(), 'tasks.db');
    const n = await node(db, 'replica-plain');
    const seen: Array<boolean | undefined> = [];
    n.outlast.tool('probe', { policy: 'always' }, async () => {
      seen.push(trace.getActiveSpan()?.isRecording() ?? false);
      return { content: [{ type: 'text', text: 'probed' }] };
    });
    try {
      const created = await callTool(n.http.url, 'probe', { q: SECRET_ARG }, { meta: { traceparent: TRACEPARENT } });
      assert.equal(created.result.resultType, 'task');
      const done = await waitForTask(n.http.url, created.result.taskId);
      assert.equal(done.status, 'completed');
      assert.equal(textOf(done.result), 'probed');
      assert.equal(textOf((await callTool(n.http.url, 'quick', {}, { meta: { traceparent: TRACEPARENT } })).result), 'done');
      const rec = await n.outlast.runtime.store.get(created.result.taskId);
      assert.equal(rec.state === 'found' && rec.record.traceContext, null, 'no propagator, nothing kept');
      assert.deepEqual(seen, [false], 'the handler ran under a span that records nothing');
    } finally {
      await n.stop();
    }
  });
});

describe('traces with an SDK registered', () => {
  const exporter = new InMemorySpanExporter();
  const provider = new NodeTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  let n: Node;
  before(async () => {
    provider.register();
    n = await node(join(tempDir(), 'tasks.db'), 'replica-one');
  });
  after(async () => {
    await n?.stop();
    await provider.shutdown();
  });
  const spans = () => exporter.getFinishedSpans();
  const named = spansNamed(exporter);

  it("a call's server span has the caller's _meta.traceparent as parent; the task's handler span is its child; the task keeps it", async () => {
    exporter.reset();
    const created = await callTool(n.http.url, 'work', { q: SECRET_ARG }, { meta: { traceparent: TRACEPARENT, tracestate: 'vendor=abc' } });
    const taskId = created.result.taskId as string;
    await waitForTask(n.http.url, taskId);
    const [server] = await named('tools/call work');
    assert.equal(server!.kind, SpanKind.SERVER);
    assert.equal(tid(server!), TRACE_ID);
    assert.equal(server!.parentSpanContext?.spanId, CLIENT_SPAN);
    assert.deepEqual(
      [server!.attributes['mcp.method.name'], server!.attributes['gen_ai.tool.name'], server!.attributes['gen_ai.operation.name'], server!.attributes['mcp.protocol.version'], server!.attributes['outlast.task.id']],
      ['tools/call', 'work', 'execute_tool', '2026-07-28', taskId],
    );
    assert.equal(typeof server!.attributes['jsonrpc.request.id'], 'string');
    assert.equal(server!.attributes['error.type'], undefined);
    assert.equal(server!.status.code, SpanStatusCode.UNSET);

    const [run] = await named('execute_tool work');
    assert.equal(run!.kind, SpanKind.INTERNAL);
    assert.equal(tid(run!), TRACE_ID);
    assert.equal(run!.parentSpanContext?.spanId, sid(server!), 'the handler span is a child of the request span');
    assert.deepEqual([run!.attributes['gen_ai.tool.name'], run!.attributes['gen_ai.operation.name'], run!.attributes['outlast.task.id'], run!.attributes['outlast.attempt']], ['work', 'execute_tool', taskId, 1]);
    assert.deepEqual(run!.events.map((e) => [e.name, e.attributes?.['outlast.task.status']]), [['outlast.task.status', 'completed']]);
    assert.equal(spans().filter((s) => s.name.startsWith('tasks/get')).length, 0, 'polls get no span unless asked');

    const rec = await n.outlast.runtime.store.get(taskId);
    assert.ok(rec.state === 'found');
    assert.deepEqual(rec.record.traceContext, { traceparent: `00-${TRACE_ID}-${sid(server!)}-01`, tracestate: 'vendor=abc' }, 'the task keeps the request span');
    const everything = JSON.stringify(spans().map((s) => [s.name, s.attributes, s.events, s.links]));
    assert.ok(!everything.includes(SECRET_ARG) && !everything.includes(SECRET_RESULT), 'arguments and results are never on a span');
  });

  it('a request without _meta.traceparent starts a new trace', async () => {
    exporter.reset();
    const r = await callTool(n.http.url, 'quick', {}, { caps: NO_TASKS });
    assert.equal(textOf(r.result), 'done');
    const [server] = await named('tools/call quick');
    const [run] = await named('execute_tool quick');
    assert.equal(server!.parentSpanContext, undefined, 'a root span');
    assert.notEqual(tid(server!), TRACE_ID);
    assert.equal(run!.parentSpanContext?.spanId, sid(server!), 'an inline run is a child of its request too');
    assert.equal(run!.attributes['outlast.task.id'], undefined, 'an inline call has no task');
    assert.deepEqual(run!.events, []);
  });

  it('error.type: tool_error for an isError result, the JSON-RPC code for an error, on the SDK path and the direct path', async () => {
    exporter.reset();
    await callTool(n.http.url, 'refuse', {}, { caps: NO_TASKS });
    const failing = await callTool(n.http.url, 'explode', {});
    await waitForTask(n.http.url, failing.result.taskId);
    const unknown = await callTool(n.http.url, 'no_such_tool', {});
    assert.ok(unknown.error);
    const missing = await rpc(n.http.url, 'tasks/cancel', { taskId: 'no-such-task' });
    assert.equal(missing.error?.code, ErrorCode.InvalidParams);

    const [refused] = await named('tools/call refuse');
    assert.deepEqual([refused!.attributes['error.type'], refused!.status.code], ['tool_error', SpanStatusCode.ERROR]);
    const [refusedRun] = await named('execute_tool refuse');
    assert.deepEqual([refusedRun!.attributes['error.type'], refusedRun!.status.code], ['tool_error', SpanStatusCode.ERROR]);
    const [exploded] = await named('execute_tool explode');
    assert.deepEqual([exploded!.attributes['error.type'], exploded!.status.code], [String(ErrorCode.InvalidParams), SpanStatusCode.ERROR]);
    assert.deepEqual(exploded!.events.map((e) => e.attributes?.['outlast.task.status']), ['failed']);
    const [created] = await named('tools/call explode');
    assert.equal(created!.attributes['error.type'], undefined, 'creating the task succeeded; the task failed later');
    const [noTool] = await named('tools/call no_such_tool');
    assert.deepEqual([noTool!.attributes['error.type'], noTool!.attributes['rpc.response.status_code']], [String(unknown.error!.code), String(unknown.error!.code)]);
    const [cancel] = await named('tasks/cancel');
    assert.deepEqual([cancel!.attributes['error.type'], cancel!.attributes['outlast.task.id'], cancel!.status.code], [String(ErrorCode.InvalidParams), 'no-such-task', SpanStatusCode.ERROR]);
  });

  it('tasks/get spans when the server asks for them (tracePolls), on the direct path', async () => {
    const polled = await node(join(tempDir(), 'tasks.db'), 'replica-polls', { tracePolls: true });
    try {
      exporter.reset();
      const t = await callTool(polled.http.url, 'work', {});
      await waitForTask(polled.http.url, t.result.taskId);
      const missing = await getTask(polled.http.url, 'no-such-task');
      assert.equal(missing.error?.code, ErrorCode.InvalidParams);
      const gets = await named('tasks/get', 2);
      assert.ok(gets.some((s) => s.attributes['outlast.task.id'] === t.result.taskId && s.attributes['error.type'] === undefined));
      assert.ok(gets.some((s) => s.attributes['outlast.task.id'] === 'no-such-task' && s.attributes['error.type'] === String(ErrorCode.InvalidParams)));
    } finally {
      await polled.stop();
    }
  });

  it("a queued task's first run, claimed later, continues the trace of the call that queued it", async () => {
    const busy = await node(join(tempDir(), 'tasks.db'), 'replica-busy', { maxRunning: 1 });
    try {
      exporter.reset();
      const gate = await callTool(busy.http.url, 'gate', {});
      const queued = await callTool(busy.http.url, 'work', {}, { meta: { traceparent: TRACEPARENT } });
      assert.equal(queued.result.status, 'working');
      assert.match(String(queued.result.statusMessage), /queue/i, 'it waits in the run queue');
      const [request] = await named('tools/call work');
      openGate();
      await waitForTask(busy.http.url, gate.result.taskId);
      await waitForTask(busy.http.url, queued.result.taskId);
      const [run] = await named('execute_tool work');
      assert.deepEqual([tid(run!), run!.parentSpanContext?.spanId, run!.links.length], [TRACE_ID, sid(request!), 0]);
    } finally {
      await busy.stop();
    }
  });

  it('a re-run after a takeover by another runtime on the same store links to the call that created the task', async () => {
    const db = join(tempDir(), 'tasks.db');
    const a = await node(db, 'replica-a');
    let b: Node | undefined;
    holdReindex = true;
    try {
      exporter.reset();
      const created = await callTool(a.http.url, 'reindex', {}, { meta: { traceparent: TRACEPARENT } });
      const taskId = created.result.taskId as string;
      const [request] = await named('tools/call reindex');
      // Replica A goes away mid-run as after a crash (its retry-safe task is not handed over but left for another
      // replica to take over); B starts on the same file.
      await a.http.close();
      await a.outlast.runtime.stop(200, { handOff: false });
      const [firstRun] = await named('execute_tool reindex');
      assert.deepEqual([firstRun!.attributes['outlast.attempt'], firstRun!.parentSpanContext?.spanId], [1, sid(request!)]);
      assert.deepEqual([firstRun!.attributes['error.type'], firstRun!.events.map((e) => e.attributes?.['outlast.task.status'])], ['shutdown', []], 'stopped by the shutdown, no outcome');
      b = await node(db, 'replica-b');
      const done = await waitForTask(b.http.url, taskId);
      assert.equal(textOf(done.result), 'indexed on attempt 2');

      const [rerun] = (await named('execute_tool reindex', 2)).filter((s) => s.attributes['outlast.attempt'] === 2);
      assert.ok(rerun, 'the re-run has its own span');
      assert.equal(rerun.parentSpanContext, undefined, 'a trace of its own');
      assert.notEqual(tid(rerun), TRACE_ID);
      assert.equal(rerun.links.length, 1);
      assert.deepEqual([rerun.links[0]!.context.traceId, rerun.links[0]!.context.spanId], [TRACE_ID, sid(request!)], 'linked to the request that created the task');
      assert.equal(rerun.attributes['outlast.task.id'], taskId);
      assert.deepEqual(rerun.events.map((e) => e.attributes?.['outlast.task.status']), ['completed']);
    } finally {
      holdReindex = false;
      await b?.stop();
      await a.stop().catch(() => undefined);
    }
  });
});
