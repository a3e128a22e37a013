/**
 * An SDK v1 (1.32) server that asks its client questions as tasks of the client's own (2025-11-25 task
 * augmentation), for receiver.test.ts. Each tool reports, as JSON text, what the server saw on the wire: the
 * CreateTaskResult, every status its polling got, the final answer, and the errors the client gave.
 *   node dist/test/receiver-v1-server.js   (PORT)
 */
import { createServer } from 'node:http';
import { randomUUID } from 'node:crypto';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { CreateTaskResultSchema, ElicitResultSchema, McpError, type ElicitRequestFormParams } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';

const port = process.env.RECEIVER_V1_PORT;
// node --test may load every module of dist/test: without a port this is a program not being run, so it does nothing.
if (port) serve(Number(port));

const question: ElicitRequestFormParams = {
  mode: 'form',
  message: 'Which release should ship?',
  requestedSchema: { type: 'object', properties: { answer: { type: 'string' } }, required: ['answer'] },
};

/** What a refused request looked like to the server. */
function refusal(e: unknown): { code: number | undefined; message: string } {
  return { code: e instanceof McpError ? e.code : undefined, message: (e as Error).message };
}

/** What the SDK's polling of a client's task yielded: the task created, each status polled, the end. */
async function followed(stream: AsyncIterable<{ type: string; task?: { status: string }; result?: unknown; error?: unknown }>) {
  const seen: { created?: unknown; statuses: string[]; result?: unknown; error?: unknown } = { statuses: [] };
  for await (const m of stream) {
    if (m.type === 'taskCreated') seen.created = m.task;
    else if (m.type === 'taskStatus') seen.statuses.push(m.task!.status);
    else if (m.type === 'result') seen.result = m.result;
    else seen.error = refusal(m.error);
  }
  return seen;
}

function report(value: unknown) {
  return { content: [{ type: 'text' as const, text: JSON.stringify(value) }] };
}

function build(): McpServer {
  const mcp = new McpServer({ name: 'receiver-v1', version: '1.0.0' });
  const tasks = () => mcp.server.experimental.tasks;

  // A question the client answers as a task: created at once, polled until the person's late answer.
  mcp.registerTool('ask_as_task', { inputSchema: { ttl: z.number().int().optional() } }, async ({ ttl }, extra) =>
    report(await followed(tasks().elicitInputStream(question, { task: ttl === undefined ? {} : { ttl }, relatedRequestId: extra.requestId }))),
  );

  // The same for sampling.
  mcp.registerTool('sample_as_task', {}, async (extra) =>
    report(
      await followed(
        tasks().createMessageStream(
          { messages: [{ role: 'user', content: { type: 'text', text: 'Name the release.' } }], maxTokens: 50 },
          { task: { ttl: 60_000 }, relatedRequestId: extra.requestId },
        ),
      ),
    ),
  );

  // Asks `count` questions as tasks, lists them page by page, cancels the first, and probes the errors.
  mcp.registerTool('list_and_cancel', { inputSchema: { count: z.number().int() } }, async ({ count }, extra) => {
    const created: string[] = [];
    for (let i = 0; i < count; i++) {
      const r = await extra.sendRequest({ method: 'elicitation/create', params: { ...question, task: { ttl: 60_000 } } } as never, CreateTaskResultSchema);
      created.push(r.task.taskId);
    }
    const pages: Array<{ ids: string[]; nextCursor?: string }> = [];
    let cursor: string | undefined;
    do {
      const page = await tasks().listTasks(cursor);
      pages.push({ ids: page.tasks.map((t) => t.taskId), ...(page.nextCursor ? { nextCursor: page.nextCursor } : {}) });
      cursor = page.nextCursor;
    } while (cursor);
    const badCursor = await tasks().listTasks('not-a-cursor').then(() => undefined, refusal);
    const cancelled = await tasks().cancelTask(created[0]!);
    const afterCancel = await tasks().getTask(created[0]!);
    const cancelAgain = await tasks().cancelTask(created[0]!).then(() => undefined, refusal);
    const resultOfCancelled = await tasks().getTaskResult(created[0]!, z.object({}).loose() as never).then(() => undefined, refusal);
    return report({ created, pages, badCursor, cancelled, afterCancel, cancelAgain, resultOfCancelled });
  });

  // A plain question (no task) on the same session; with timeoutMs the server gives up and cancels it.
  mcp.registerTool('ask_plain', { inputSchema: { timeoutMs: z.number().int().optional() } }, async ({ timeoutMs }, extra) => {
    const asked = extra.sendRequest({ method: 'elicitation/create', params: question }, ElicitResultSchema, timeoutMs === undefined ? {} : { timeout: timeoutMs });
    return report(await asked.then((result) => ({ result }), (e) => ({ error: refusal(e) })));
  });

  // Task ids this client never gave out.
  mcp.registerTool('unknown_task', {}, async () => {
    const id = randomUUID();
    return report({
      get: await tasks().getTask(id).then(() => undefined, refusal),
      result: await tasks().getTaskResult(id, z.object({}).loose() as never).then(() => undefined, refusal),
      cancel: await tasks().cancelTask(id).then(() => undefined, refusal),
    });
  });

  // Requests the client must refuse, each with its JSON-RPC error.
  mcp.registerTool('bad_requests', {}, async (extra) => {
    const send = (method: string, params: Record<string, unknown>) => extra.sendRequest({ method, params } as never, z.object({}).loose() as never).then(() => undefined, refusal);
    return report({
      fractionalTtl: await send('elicitation/create', { ...question, task: { ttl: 1.5 } }),
      taskNotAnObject: await send('elicitation/create', { ...question, task: 'soon' }),
      noTaskId: await send('tasks/get', {}),
      unknownMethod: await send('tools/list', {}),
      noHandler: await send('sampling/createMessage', { messages: [], maxTokens: 5, task: {} }),
    });
  });

  // A question whose answer fails on the client: the task ends failed, and tasks/result gives the error.
  mcp.registerTool('ask_failing', {}, async (extra) => {
    const r = await extra.sendRequest({ method: 'elicitation/create', params: { ...question, message: 'A question nobody can answer', task: {} } } as never, CreateTaskResultSchema);
    const result = await tasks().getTaskResult(r.task.taskId, z.object({}).loose() as never).then(() => undefined, refusal);
    return report({ created: r.task, result, after: await tasks().getTask(r.task.taskId) });
  });
  return mcp;
}

function serve(listenPort: number): void {
  const sessions = new Map<string, StreamableHTTPServerTransport>();
  const http = createServer(async (req, res) => {
    const id = req.headers['mcp-session-id'];
    let transport = typeof id === 'string' ? sessions.get(id) : undefined;
    if (!transport) {
      if (id !== undefined) {
        res.writeHead(404).end('unknown session');
        return;
      }
      const t = new StreamableHTTPServerTransport({ sessionIdGenerator: randomUUID, onsessioninitialized: (sid) => void sessions.set(sid, t) });
      t.onclose = () => t.sessionId && sessions.delete(t.sessionId);
      await build().connect(t);
      transport = t;
    }
    await transport.handleRequest(req, res);
  });
  http.listen(listenPort, '127.0.0.1', () => console.log(`listening on http://127.0.0.1:${listenPort}/mcp`));
  process.once('SIGTERM', () => process.exit(0));
}
