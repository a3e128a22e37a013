/**
 * The real clients of every generation, for tests: the SDK v1 client (2025-11-25 Tasks through
 * `experimental.tasks`, plain `callTool` for hosts with no task support) and the official requester
 * `@modelcontextprotocol/ext-tasks` on both generations. Every message a server sends them passes through a
 * recording fetch that checks it against the published 2025-11-25 schema (or the 2026-07-28 ones).
 */
import { Client as ClientV1 } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport as TransportV1 } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ElicitRequestSchema, McpError } from '@modelcontextprotocol/sdk/types.js';
import { Client as ClientV2, StreamableHTTPClientTransport as TransportV2 } from '@modelcontextprotocol/client';
import { createTaskSessionFromClient, toolDeclarationFromMcpTool, type TaskEnabledSession } from '@modelcontextprotocol/ext-tasks/client';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { ROOT, checkServerMessage, parseSse } from './helpers.js';

const ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: false }); // formats are not checked: no warning per schema
ajv.addSchema(JSON.parse(readFileSync(join(ROOT, '..', 'shared', 'schemas', 'mcp-core-2025-11-25.schema.json'), 'utf8')), 'core2025');
const RELATED = 'io.modelcontextprotocol/related-task';

export function check2025(def: string, value: unknown): string | undefined {
  const v = ajv.getSchema(`core2025#/$defs/${def}`);
  if (!v) return `no schema ${def}`;
  return v(value) ? undefined : `${def}: ${ajv.errorsText(v.errors)} in ${JSON.stringify(value).slice(0, 400)}`;
}

/** What the recording fetch saw, and what failed its checks. */
export interface Wire {
  /** Messages from the server, with the method of the request they answer (or their own method). */
  seen: Array<{ method: string; message: Record<string, any> }>;
  failures: string[];
  /** The client's answers to server requests (posted JSON-RPC responses): their id, and how the server took them. */
  posted: Array<{ id: unknown; status: number; body: string }>;
  /** Throws if any message failed its schema. */
  assertClean(): Promise<void>;
}

/**
 * A fetch that passes everything through and checks each server message against the schema of its era: the
 * 2025-11-25 schema when the request carried no 2026 `_meta` envelope, the 2026-07-28 ones otherwise.
 */
export function recordingFetch(): { fetch: typeof fetch; wire: Wire } {
  const wire: Wire = {
    seen: [],
    failures: [],
    posted: [],
    async assertClean() {
      if (wire.failures.length) throw new Error(`server messages failed their schema:\n${wire.failures.join('\n')}`);
    },
  };
  const recording: typeof fetch = async (input, init) => {
    const res = await fetch(input, init);
    let request: Record<string, any> | undefined;
    try {
      request = typeof init?.body === 'string' ? JSON.parse(init.body) : undefined;
    } catch {
      request = undefined;
    }
    if (request && request.method === undefined && request.id !== undefined && ('result' in request || 'error' in request)) {
      const body = await res.text();
      wire.posted.push({ id: request.id, status: res.status, body });
      return new Response(body, { status: res.status, statusText: res.statusText, headers: res.headers });
    }
    if (!request || typeof request.method !== 'string' || request.id === undefined || !res.body) return res;
    const modern = request.params?._meta?.['io.modelcontextprotocol/protocolVersion'] !== undefined;
    const record = (m: Record<string, any>) => {
      wire.seen.push({ method: typeof m.method === 'string' ? (m.method as string) : request!.method, message: m });
      try {
        if (modern) checkServerMessage(request!.method, m as Record<string, unknown>);
        else {
          const f = check2025Message(request!, m);
          if (f) wire.failures.push(f);
        }
      } catch (e) {
        wire.failures.push(String((e as Error).message));
      }
    };
    // Each message is checked as it passes to the client, before the client can act on it.
    const sse = (res.headers.get('content-type') ?? '').includes('text/event-stream');
    let buf = '';
    const inspect = new TransformStream<Uint8Array, Uint8Array>({
      transform(chunk, controller) {
        buf += Buffer.from(chunk).toString('utf8');
        if (sse) {
          for (let i; (i = buf.indexOf('\n\n')) >= 0; ) {
            for (const m of parseSse(buf.slice(0, i + 2))) record(m as Record<string, any>);
            buf = buf.slice(i + 2);
          }
        }
        controller.enqueue(chunk);
      },
      flush() {
        if (!sse && buf.trim()) record(JSON.parse(buf));
      },
    });
    return new Response(res.body.pipeThrough(inspect), { status: res.status, statusText: res.statusText, headers: res.headers });
  };
  return { fetch: recording, wire };
}

/** The 2025-11-25 schema of the result of each tasks/* method whose result is the same whoever answers it. */
export const TASK_METHOD_RESULTS: Readonly<Record<string, string>> = { 'tasks/get': 'GetTaskResult', 'tasks/list': 'ListTasksResult', 'tasks/cancel': 'CancelTaskResult' };

/** Why `m`, the server's answer to `request` on the 2025-11-25 wire, breaks the published schema (undefined: it does not). */
export function check2025Message(request: Record<string, any>, m: Record<string, any>): string | undefined {
  if (m.error) return check2025('JSONRPCErrorResponse', m);
  if (typeof m.method === 'string') {
    if (m.id !== undefined) {
      // A server→client request on a tasks/result stream: it must say which task it is for.
      if (m.params?._meta?.[RELATED]?.taskId === undefined) return `${m.method} on a task stream carries no related-task _meta`;
      return m.method === 'elicitation/create' ? check2025('ElicitRequest', m) : check2025('JSONRPCRequest', m);
    }
    if (m.method === 'notifications/tasks/status') return check2025('TaskStatusNotification', m);
    if (m.method === 'notifications/progress') return check2025('ProgressNotification', m);
    return check2025('JSONRPCNotification', m);
  }
  const envelope = check2025('JSONRPCResultResponse', m);
  if (envelope) return envelope;
  switch (request.method) {
    case 'initialize':
      return check2025('InitializeResult', m.result);
    case 'tools/list':
      return check2025('ListToolsResult', m.result);
    case 'tools/call':
      return request.params?.task !== undefined ? check2025('CreateTaskResult', m.result) : check2025('CallToolResult', m.result);
    case 'tasks/result':
      if (m.result?._meta?.[RELATED]?.taskId !== request.params?.taskId) return 'a tasks/result result must carry related-task _meta naming its task';
      return check2025('CallToolResult', m.result);
    default:
      return TASK_METHOD_RESULTS[request.method] ? check2025(TASK_METHOD_RESULTS[request.method]!, m.result) : undefined;
  }
}

export interface V1Options {
  token?: string;
  /** Answers elicitations (declares the capability); omit for a client without it. */
  elicit?: (params: Record<string, any>) => Record<string, unknown> | Promise<Record<string, unknown>>;
  /** Skip the tools/list a host does after connecting (v1 then knows no tool's taskSupport). */
  noToolList?: boolean;
  /** Join this session (the Mcp-Session-Id another connection was given) instead of initializing a new one, as a
   *  host does through another replica behind a balancer. */
  sessionId?: string;
}

/** The MCP error a v1 client's request fails with (anything else fails the test). */
export async function mcpError(p: Promise<unknown>): Promise<McpError> {
  try {
    await p;
  } catch (e) {
    if (e instanceof McpError) return e;
    throw e;
  }
  assert.fail('expected an MCP error');
}

/** The SDK v1 client (what most deployed hosts are built on), connected over Streamable HTTP. */
export async function connectV1(url: string, o: V1Options = {}): Promise<{ client: ClientV1; wire: Wire; sessionId: string | undefined; close(): Promise<void> }> {
  const { fetch: f, wire } = recordingFetch();
  const client = new ClientV1({ name: 'v1-test-client', version: '1.32.2' }, { capabilities: o.elicit ? { elicitation: {} } : {} });
  if (o.elicit) client.setRequestHandler(ElicitRequestSchema, async (req) => (await o.elicit!(req.params as Record<string, any>)) as never);
  const transport = new TransportV1(new URL(url), {
    fetch: f,
    ...(o.token ? { requestInit: { headers: { authorization: `Bearer ${o.token}` } } } : {}),
    ...(o.sessionId ? { sessionId: o.sessionId } : {}),
  });
  await client.connect(transport);
  // As hosts do: the tool list tells v1 which tools take params.task.
  if (!o.noToolList) await client.listTools();
  return { client, wire, sessionId: transport.sessionId, close: () => client.close() };
}

export interface ExtTasksOptions {
  token?: string;
  elicit?: (params: Record<string, any>) => Record<string, unknown>;
}

/** `@modelcontextprotocol/ext-tasks` on the 2025-11-25 generation: an SDK v2 Client on the legacy era. */
export async function extTasksV1(url: string, o: ExtTasksOptions = {}): Promise<{ session: TaskEnabledSession; wire: Wire; close(): Promise<void> }> {
  const { fetch: f, wire } = recordingFetch();
  const client = new ClientV2({ name: 'ext-tasks-v1', version: '0.2.2' }, { capabilities: o.elicit ? { elicitation: {} } : {} });
  await client.connect(new TransportV2(new URL(url), { fetch: f, ...(o.token ? { requestInit: { headers: { authorization: `Bearer ${o.token}` } } } : {}) }));
  const { tools } = await client.listTools();
  const declarations = new Map(tools.map((t) => [t.name, toolDeclarationFromMcpTool(t)]));
  const session = createTaskSessionFromClient(client, {
    endpointId: `v1:${url}`,
    tools: { currentTool: (name) => declarations.get(name) },
    ...(o.elicit ? { onInputRequest: async (req) => o.elicit!(req.params as Record<string, any>) as never } : {}),
  });
  return {
    session,
    wire,
    async close() {
      await session.close();
      await client.close();
    },
  };
}

/**
 * `@modelcontextprotocol/ext-tasks` on the 2026-07-28 generation: an SDK v2 Client pinned to 2026-07-28, plus the
 * raw dispatcher the package requires (the SDK's codec rejects `resultType: "task"`; sdk-notes §6).
 */
export async function extTasksV2(url: string, o: ExtTasksOptions = {}): Promise<{ session: TaskEnabledSession; wire: Wire; close(): Promise<void> }> {
  const { fetch: f, wire } = recordingFetch();
  const headers = o.token ? { requestInit: { headers: { authorization: `Bearer ${o.token}` } } } : {};
  const capabilities: Record<string, {}> = o.elicit ? { elicitation: {} } : {};
  const clientInfo = { name: 'ext-tasks-v2', version: '0.2.2' };
  const client = new ClientV2(clientInfo, { capabilities, versionNegotiation: { mode: { pin: '2026-07-28' } } } as never);
  await client.connect(new TransportV2(new URL(url), { fetch: f, ...headers }));
  const raw = new TransportV2(new URL(url), { fetch: f, ...headers });
  const waiting = new Map<unknown, (m: Record<string, any>) => void>();
  raw.onmessage = (m) => {
    const msg = m as Record<string, any>;
    if (msg.id !== undefined && ('result' in msg || 'error' in msg)) {
      waiting.get(msg.id)?.(msg);
      waiting.delete(msg.id);
    }
  };
  await raw.start();
  let nextId = 1_000_000;
  const session = createTaskSessionFromClient(client, {
    endpointId: `v2:${url}`,
    rawDispatch: async (request) => {
      const id = nextId++;
      const answered = new Promise<Record<string, any>>((resolve) => waiting.set(id, resolve));
      await raw.send({ ...(request as Record<string, unknown>), jsonrpc: '2.0', id } as never);
      return (await answered) as never;
    },
    v2RequestFraming: { protocolVersion: '2026-07-28', clientInfo, clientCapabilities: capabilities },
    ...(o.elicit ? { onInputRequest: async (req) => o.elicit!(req.params as Record<string, any>) as never } : {}),
  });
  return {
    session,
    wire,
    async close() {
      await session.close().catch(() => undefined);
      await raw.close();
      await client.close();
    },
  };
}
