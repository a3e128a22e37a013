/**
 * The client as receiver (2025-11-25): a real SDK v1 server, in its own process, asks TaskClient questions with
 * `params.task`; TaskClient answers each with a task of its own at once, the person answers seconds later, and the
 * server follows the task with tasks/get, tasks/result, tasks/list and tasks/cancel. Every answer TaskClient posts
 * is checked against the published 2025-11-25 schema.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { TaskClient, type CallToolResult, type TaskClientOptions } from '../src/client/index.js';
import { serviceProcess, stopAllServices } from '../fixtures/service-process.js';
import { ROOT, alive, freePort, parseSse, sleep, textOf, until } from './helpers.js';
import { TASK_METHOD_RESULTS, check2025 } from './generations.js';
import { join } from 'node:path';

const RELATED = 'io.modelcontextprotocol/related-task';
/** How long the person takes to answer: well past several polls of the server. */
const THINKING_MS = 2500;

/**
 * A fetch that lets everything through, notes each request the server sends (on any SSE stream, GET included),
 * and checks each answer and notification the client posts against the schema of what it answers.
 */
function checkedFetch() {
  const asked = new Map<string | number, { method: string; params: Record<string, any> }>();
  /** The method each task of the client was created for (what its tasks/result must return). */
  const taskMethod = new Map<string, string>();
  const failures: string[] = [];
  const answered: Array<{ method: string; message: Record<string, any> }> = [];
  /** The tasks of `notifications/tasks/status` the client sent. */
  const notified: Array<Record<string, any>> = [];
  const check = (def: string, value: unknown) => {
    const f = check2025(def, value);
    if (f) failures.push(f);
  };
  const onPosted = (m: Record<string, any>) => {
    if (m.method === 'notifications/tasks/status') {
      notified.push(m.params);
      return check('TaskStatusNotification', m);
    }
    if (m.method !== undefined || m.id === undefined) return;
    const request = asked.get(m.id);
    if (!request) return failures.push(`an answer to a request nobody sent: ${JSON.stringify(m)}`);
    answered.push({ method: request.method, message: m });
    if (m.error) return check('JSONRPCErrorResponse', m);
    check('JSONRPCResultResponse', m);
    const task = request.params.task !== undefined;
    switch (request.method) {
      case 'elicitation/create':
      case 'sampling/createMessage':
        if (task) {
          check('CreateTaskResult', m.result);
          taskMethod.set(m.result.task.taskId, request.method);
        } else check(request.method === 'elicitation/create' ? 'ElicitResult' : 'CreateMessageResult', m.result);
        return;
      case 'tasks/result': {
        const id = request.params.taskId;
        if (m.result._meta?.[RELATED]?.taskId !== id) failures.push(`tasks/result of ${id} without related-task _meta`);
        return check(taskMethod.get(id) === 'sampling/createMessage' ? 'CreateMessageResult' : 'ElicitResult', m.result);
      }
      default:
        if (TASK_METHOD_RESULTS[request.method]) check(TASK_METHOD_RESULTS[request.method]!, m.result);
    }
  };
  const recording: typeof fetch = async (input, init) => {
    if (typeof init?.body === 'string') onPosted(JSON.parse(init.body));
    const res = await fetch(input, init);
    if (!res.body || !(res.headers.get('content-type') ?? '').includes('text/event-stream')) return res;
    let buf = '';
    const inspect = new TransformStream<Uint8Array, Uint8Array>({
      transform(chunk, controller) {
        buf += Buffer.from(chunk).toString('utf8');
        for (let i; (i = buf.indexOf('\n\n')) >= 0; buf = buf.slice(i + 2)) {
          for (const m of parseSse(buf.slice(0, i + 2)) as Array<Record<string, any>>) {
            if (typeof m.method === 'string' && m.id !== undefined) asked.set(m.id, { method: m.method, params: m.params ?? {} });
          }
        }
        controller.enqueue(chunk);
      },
    });
    return new Response(res.body.pipeThrough(inspect), { status: res.status, statusText: res.statusText, headers: res.headers });
  };
  return {
    fetch: recording,
    answered,
    notified,
    assertClean() {
      assert.deepEqual(failures, [], 'every answer the client posted matches the 2025-11-25 schema');
      assert.ok(answered.length > 0, 'answers were checked');
    },
  };
}

/** The probe serviceProcess waits on: anything answering HTTP there. */
const answers = (url: string) => () => fetch(url, { method: 'GET' }).then(() => true, () => false);

function reportOf(r: CallToolResult): Record<string, any> {
  assert.notEqual(r.isError, true, textOf(r));
  return JSON.parse(textOf(r));
}

/**
 * Runs `body` with a 2025-11-25 TaskClient on `url` whose posted answers are checked against the schema, and closes
 * it after (also when `body` fails).
 */
async function withClient(
  url: string,
  options: Omit<TaskClientOptions, 'url' | 'protocolVersion' | 'fetch'>,
  body: (client: TaskClient, wire: ReturnType<typeof checkedFetch>) => Promise<void>,
): Promise<void> {
  const wire = checkedFetch();
  const client = new TaskClient({ url, protocolVersion: '2025-11-25', fetch: wire.fetch, ...options });
  try {
    await body(client, wire);
    wire.assertClean();
  } finally {
    await client.close();
  }
}

/** An elicitation handler for a person who never answers: the prompt stays open until its signal aborts. */
function neverAnswered(closed: string[]): NonNullable<TaskClientOptions['elicitation']> {
  return (_params, ctx) =>
    new Promise((_resolve, reject) => ctx.signal.addEventListener('abort', () => (closed.push(ctx.key), reject(ctx.signal.reason)), { once: true }));
}

describe('TaskClient answers a 2025-11-25 server’s questions with tasks of its own', () => {
  let url: string;
  before(async () => {
    const port = await freePort();
    url = `http://127.0.0.1:${port}/mcp`;
    // `env` execs node in its own process, so the process id serviceProcess stops is the server's.
    await serviceProcess('SDK v1 server', 'env', [`RECEIVER_V1_PORT=${port}`, process.execPath, join(ROOT, 'dist', 'test', 'receiver-v1-server.js')], answers(url)).start();
  });
  after(stopAllServices);

  test('a task-augmented elicitation: a task at once, polled while the person thinks, then the late answer', async () => {
    const asked: Array<{ message: unknown; key: string }> = [];
    const elicitation: TaskClientOptions['elicitation'] = async (params, ctx) => {
      asked.push({ message: params.message, key: ctx.key });
      assert.equal(params.task, undefined, 'the handler sees the question, not the task wrapper');
      await sleep(THINKING_MS); // a person, taking their time
      return { action: 'accept', content: { answer: 'v2.4' } };
    };
    await withClient(url, { receiver: { pollIntervalMs: 300 }, elicitation }, async (client, wire) => {
      const started = Date.now();
      const seen = reportOf(await client.callTool('ask_as_task', { ttl: 120_000 }));
      assert.ok(Date.now() - started >= THINKING_MS, 'the call waited for the person');
      assert.deepEqual(asked.map((a) => a.message), ['Which release should ship?'], 'asked once');
      assert.equal(seen.created.status, 'working');
      assert.equal(seen.created.ttl, 120_000, 'the requested ttl is granted and reported');
      assert.equal(seen.created.pollInterval, 300);
      assert.equal(asked[0]!.key, seen.created.taskId, 'the handler is told its task id');
      assert.ok(seen.statuses.filter((s: string) => s === 'working').length >= 3, `polled while the person thought: ${seen.statuses}`);
      assert.equal(seen.statuses.at(-1), 'completed');
      assert.deepEqual(seen.result, { action: 'accept', content: { answer: 'v2.4' }, _meta: { [RELATED]: { taskId: seen.created.taskId } } });
      assert.equal(seen.error, undefined);
      assert.ok(wire.answered.some((a) => a.method === 'tasks/result'), 'the server fetched the answer with tasks/result');
      assert.deepEqual(wire.notified.map((t) => [t.taskId, t.status]), [[seen.created.taskId, 'completed']], 'the client told the server when its task ended');
    });
  });

  test('a task-augmented sampling request, answered late the same way', async () => {
    const sampling: TaskClientOptions['sampling'] = async (params) => {
      assert.equal((params.messages as Array<any>)[0].content.text, 'Name the release.');
      await sleep(1500); // someone reviews the model's answer before it goes back
      return { role: 'assistant', content: { type: 'text', text: 'Outlast 2.4' }, model: 'reviewed-by-a-person' };
    };
    await withClient(url, { receiver: { pollIntervalMs: 300 }, sampling }, async (client) => {
      const seen = reportOf(await client.callTool('sample_as_task'));
      assert.equal(seen.created.ttl, 60_000);
      assert.ok(seen.statuses.length >= 3 && seen.statuses.at(-1) === 'completed', `${seen.statuses}`);
      assert.equal(seen.result.content.text, 'Outlast 2.4');
      assert.equal(seen.result._meta[RELATED].taskId, seen.created.taskId);
    });
  });

  test('tasks/list pages through this client’s tasks; tasks/cancel aborts the handler and the task stays cancelled', async () => {
    const aborted: string[] = [];
    await withClient(url, { receiver: { pageSize: 2 }, elicitation: neverAnswered(aborted) }, async (client) => {
      const seen = reportOf(await client.callTool('list_and_cancel', { count: 3 }));
      assert.equal(seen.created.length, 3);
      assert.deepEqual(seen.pages.map((p: { ids: string[] }) => p.ids), [seen.created.slice(0, 2), seen.created.slice(2)], 'two pages, in creation order');
      assert.deepEqual(seen.badCursor, { code: -32602, message: 'MCP error -32602: Invalid cursor: pass the nextCursor of a previous page unchanged' });
      assert.equal(seen.cancelled.status, 'cancelled', 'cancelled before the answer was sent');
      assert.equal(seen.afterCancel.status, 'cancelled', 'and it stays cancelled (the handler’s rejection does not make it failed)');
      assert.deepEqual(aborted, [seen.created[0]], 'the cancelled task’s handler was aborted, no other');
      assert.deepEqual(seen.cancelAgain, { code: -32602, message: "MCP error -32602: Cannot cancel task: already in terminal status 'cancelled'" });
      assert.equal(seen.resultOfCancelled.code, -32603);
      assert.match(seen.resultOfCancelled.message, /was cancelled; it has no result/);
    });
    assert.equal(aborted.length, 3, 'closing the client aborts the questions still open');
  });

  test('unknown task ids, bad requests and a failing handler are JSON-RPC errors, per the spec', async () => {
    const elicitation: TaskClientOptions['elicitation'] = async (params) => {
      await sleep(300);
      throw new Error(`Cannot answer "${String(params.message)}": the form is closed`);
    };
    await withClient(url, { elicitation }, async (client) => {
      const unknown = reportOf(await client.callTool('unknown_task'));
      const notFound = { code: -32602, message: 'MCP error -32602: Failed to retrieve task: Task not found' };
      assert.deepEqual(unknown, { get: notFound, result: notFound, cancel: notFound });
      const bad = reportOf(await client.callTool('bad_requests'));
      assert.deepEqual(bad, {
        fractionalTtl: { code: -32602, message: 'MCP error -32602: elicitation/create: "task.ttl" must be a whole number of milliseconds' },
        taskNotAnObject: { code: -32602, message: 'MCP error -32602: elicitation/create: "task" must be an object ({ttl?})' },
        noTaskId: { code: -32602, message: 'MCP error -32602: Missing "taskId" (a string)' },
        unknownMethod: { code: -32601, message: 'MCP error -32601: Method not found: tools/list' },
        noHandler: { code: -32601, message: 'MCP error -32601: This client takes no sampling/createMessage requests (no handler was given)' },
      });
      const failing = reportOf(await client.callTool('ask_failing'));
      assert.deepEqual(failing.result, { code: -32603, message: 'MCP error -32603: Cannot answer "A question nobody can answer": the form is closed' }, 'tasks/result gives the error the request itself would have');
      assert.equal(failing.after.status, 'failed');
      assert.equal(failing.after.statusMessage, 'Cannot answer "A question nobody can answer": the form is closed');
    });
  });

  test('a task the server lets expire: tasks/get says so, and the person’s prompt is closed', async () => {
    const closed: string[] = [];
    await withClient(url, { receiver: { pollIntervalMs: 200 }, elicitation: neverAnswered(closed) }, async (client) => {
      const seen = reportOf(await client.callTool('ask_as_task', { ttl: 700 }));
      assert.equal(seen.created.ttl, 700);
      assert.deepEqual(seen.error, { code: -32602, message: 'MCP error -32602: Failed to retrieve task: Task has expired' });
      assert.deepEqual(closed, [seen.created.taskId]);
    });
  });

  test('plain questions on the same session go to the same handler; one the server gives up on is aborted and not answered', async () => {
    const aborted: string[] = [];
    const elicitation: TaskClientOptions['elicitation'] = (_params, ctx) =>
      new Promise((resolve, reject) => {
        const timer = setTimeout(() => resolve({ action: 'accept', content: { answer: 'v2.5' } }), 800);
        ctx.signal.addEventListener('abort', () => (clearTimeout(timer), aborted.push(ctx.key), reject(ctx.signal.reason)), { once: true });
      });
    await withClient(url, { elicitation }, async (client, wire) => {
      const answered = reportOf(await client.callTool('ask_plain'));
      assert.deepEqual(answered, { result: { action: 'accept', content: { answer: 'v2.5' } } });
      const givenUp = reportOf(await client.callTool('ask_plain', { timeoutMs: 300 }));
      assert.equal(givenUp.error.code, -32001, 'the server timed out');
      await until('the handler hears the cancel', () => aborted.length === 1);
      await sleep(600); // past the moment the handler would have answered
      assert.deepEqual(wire.answered.map((a) => a.method), ['elicitation/create'], 'the cancelled request got no answer');
    });
  });

  test('a server not up yet, then restarted: the session opens with the first request after it is up, and again after the restart', async () => {
    const port = await freePort();
    const late = `http://127.0.0.1:${port}/mcp`;
    const client = new TaskClient({ url: late, protocolVersion: '2025-11-25', retry: { attempts: 1 } });
    try {
      await assert.rejects(client.listTools(), /initialize: cannot reach/);
      const server = serviceProcess('late SDK v1 server', 'env', [`RECEIVER_V1_PORT=${port}`, process.execPath, join(ROOT, 'dist', 'test', 'receiver-v1-server.js')], answers(late));
      await server.start();
      assert.ok((await client.listTools()).tools.some((t) => t.name === 'ask_as_task'));
      await server.stop();
      await server.start(); // it forgot the session: the next request gets a 404, and the client opens a new one
      assert.ok((await client.listTools()).tools.some((t) => t.name === 'ask_as_task'));
    } finally {
      await client.close();
    }
  });

  test('a call past its deadline is not sent again: the server has no idempotency key, and the person is asked once', async () => {
    const asked: string[] = [];
    const elicitation: TaskClientOptions['elicitation'] = async (_params, ctx) => {
      asked.push(ctx.key);
      await sleep(1200);
      return { action: 'accept', content: { answer: 'v2.6' } };
    };
    await withClient(url, { elicitation, callTimeoutMs: 400 }, async (client) => {
      await assert.rejects(client.callTool('ask_plain'), /tools\/call: no answer within 400 ms; a 2025-11-25 server keeps no idempotency key, so the call was not sent again/);
      await sleep(1500); // time for a re-sent call to ask again
      assert.equal(asked.length, 1);
      assert.deepEqual(await client.resume(), [], 'nothing is left for resume to send again');
    });
  });

  test('bad settings are refused when the client is made', () => {
    assert.throws(() => new TaskClient({ url, protocolVersion: '2025-11-25', receiver: { pollIntervalMs: 0 } }), /receiver.pollIntervalMs must be a positive whole number/);
    assert.throws(() => new TaskClient({ url, protocolVersion: '2024-01-01' as never }), /Unknown protocolVersion "2024-01-01"/);
  });
});

describe('the official reference server (@modelcontextprotocol/server-everything) asks TaskClient as a task', () => {
  const bin = join(ROOT, 'node_modules', '@modelcontextprotocol', 'server-everything', 'dist', 'index.js');
  let url: string;
  before(async () => {
    const port = await freePort();
    url = `http://127.0.0.1:${port}/mcp`;
    await serviceProcess('server-everything', 'env', [`PORT=${port}`, process.execPath, bin, 'streamableHttp'], answers(url)).start();
  });
  after(stopAllServices);

  test('trigger-elicitation-request-async: the server polls the client’s task and gets the person’s late answer', async () => {
    const elicitation: TaskClientOptions['elicitation'] = async (params) => {
      assert.match(String(params.message), /async task demo/);
      await sleep(THINKING_MS);
      return { action: 'accept', content: { name: 'Ada', favoriteColor: 'Blue', agreeToTerms: true } };
    };
    await withClient(url, { elicitation }, async (client) => {
      const tools = await client.listTools();
      assert.ok(tools.tools.some((t) => t.name === 'trigger-elicitation-request-async'), 'offered only to clients that take elicitations as tasks');
      const text = textOf(await client.callTool('trigger-elicitation-request-async'));
      assert.match(text, /\[COMPLETED\] User provided the requested information!/);
      assert.match(text, /- Name: Ada\n- Favorite Color: Blue\n- Agreed to terms: true/);
      assert.match(text, /Poll 1: working/, 'polled while the person thought');
      assert.match(text, /Poll \d+: completed/);
    });
  });

  test('trigger-sampling-request-async: the same for sampling', async () => {
    const sampling: TaskClientOptions['sampling'] = async () => {
      await sleep(1200);
      return { role: 'assistant', content: { type: 'text', text: 'A reviewed answer' }, model: 'person-in-the-loop' };
    };
    await withClient(url, { sampling }, async (client) => {
      const text = textOf(await client.callTool('trigger-sampling-request-async', { prompt: 'Say hi', maxTokens: 20 }));
      assert.match(text, /\[COMPLETED\] Async sampling completed!/);
      assert.match(text, /A reviewed answer/);
    });
  });

  test('over stdio: the server TaskClient started asks on the pipe, the task is polled there, and close() stops it', async () => {
    const elicitation: TaskClientOptions['elicitation'] = async () => {
      await sleep(THINKING_MS);
      return { action: 'accept', content: { name: 'Grace', favoriteColor: 'Green', agreeToTerms: true } };
    };
    const client = new TaskClient({ stdio: { command: process.execPath, args: [bin, 'stdio'], stderr: 'ignore' }, protocolVersion: '2025-11-25', elicitation });
    let pid: number | undefined;
    try {
      const text = textOf(await client.callTool('trigger-elicitation-request-async'));
      pid = (client.dispatcher as unknown as { channel: { pid: number } }).channel.pid;
      assert.match(text, /\[COMPLETED\] User provided the requested information!/);
      assert.match(text, /- Name: Grace\n- Favorite Color: Green\n- Agreed to terms: true/);
      assert.match(text, /Poll 1: working/, 'polled while the person thought');
      const sent = client.dispatcher.stats.byMethod;
      assert.equal(sent['initialize'], 1, 'the session opened once, on the pipe');
      assert.equal(sent['notifications/tasks/status'], 1, 'the task’s end was notified on the pipe');
    } finally {
      await client.close();
    }
    assert.equal(alive(pid!), false, 'close() stopped the server');
  });
});
