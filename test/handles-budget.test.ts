/**
 * What a client without task support gets, timed as it sees it: a durable tool that finishes within the handle
 * budget answers inline (its task row exists meanwhile, and gets the outcome), one that runs longer answers a handle
 * at the budget, not at its first step; the handle and the status tool say how long the call has really run (from its
 * start, not from its promotion) and, in `structuredContent` too, what the model must do next. Real clients: SDK v1
 * plain `callTool`, and an SDK v2 client on 2026-07-28 that does not declare the extension.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Client as ClientV2, StreamableHTTPClientTransport as TransportV2 } from '@modelcontextprotocol/client';
import { SqliteTaskStore } from '../src/store/sqlite/index.js';
import type { TaskRecord } from '../src/store/types.js';
import { textOf, useServer } from './helpers.js';
import { connectV1 } from './generations.js';
import { docBlock } from './doc-blocks.js';

const HANDLE_AFTER_MS = 4000;

type ToolResult = { content: Array<{ type: string; text?: string }>; structuredContent?: Record<string, any>; isError?: boolean };

/** The task rows of `tool` in the server's SQLite file (read with a store of the test's own, as an operator reads it:
 *  whoever called, each v1 session being its own anonymous principal). */
async function rowsOf(path: string, tool: string): Promise<TaskRecord[]> {
  const store = new SqliteTaskStore(path);
  await store.init();
  try {
    const page = (await store.ops.listTasks({ tool }, undefined, 1000)).rows;
    const rows: TaskRecord[] = [];
    for (const t of page) {
      const l = await store.get(t.taskId);
      if (l.state === 'found') rows.push(l.record);
    }
    return rows;
  } finally {
    await store.close();
  }
}

/** The guidance every handle carries, in its text and its structuredContent. */
function assertGuidance(r: ToolResult, tool: string): void {
  const s = r.structuredContent!;
  const next = `Call outlast_task_status with {"taskId": "${s.taskId}"}`;
  for (const where of [textOf(r), String(s.instructions)]) {
    assert.ok(where.includes(`Do not call ${tool} again`), `says not to call ${tool} again: ${where}`);
    assert.ok(where.includes(next), `names the status tool and the taskId: ${where}`);
  }
  assert.deepEqual(s.nextCall, { name: 'outlast_task_status', arguments: { taskId: s.taskId } });
  // The fields handles always had stay.
  for (const k of ['taskId', 'tool', 'status', 'createdAt', 'lastUpdatedAt', 'ttlMs', 'statusTool', 'cancelTool']) assert.ok(k in s, `structuredContent keeps ${k}`);
}

describe(`a client without task support and the handle budget (--handle-after-ms ${HANDLE_AFTER_MS})`, () => {
  const server = useServer(['--handle-after-ms', String(HANDLE_AFTER_MS), '--park-after-ms', '300', '--queue-poll-ms', '200']);

  it('SDK v1 plain callTool: a durable tool that finishes within the budget answers inline, and its task row gets the outcome', async () => {
    const { client, wire, close } = await connectV1(server.url);
    try {
      const r = (await client.callTool({ name: 'pipeline', arguments: { count: 3, stepSeconds: 0.2 } })) as ToolResult;
      assert.equal(r.structuredContent, undefined, `no handle: ${JSON.stringify(r).slice(0, 300)}`);
      const m = /^Pipeline done: p1, p2, p3 \(task (\S+)\)$/.exec(textOf(r));
      assert.ok(m, textOf(r));
      // The steps were durable (the row existed while the caller waited inline), and the row has the outcome.
      const row = (await rowsOf(server.sqlitePath!, 'pipeline')).find((t) => t.taskId === m[1]);
      assert.ok(row, 'the task row exists');
      assert.equal(row.status, 'completed');
      assert.equal(textOf(row.result!), textOf(r));
    } finally {
      await close();
    }
    await wire.assertClean();
  });

  it('a durable tool whose wait is parked (a 1.5 s ctx.sleep, parked at 0.3 s) and resumes in time still answers inline, before the budget', async () => {
    const { client, close } = await connectV1(server.url);
    try {
      const t0 = Date.now();
      const r = (await client.callTool({ name: 'pipeline', arguments: { count: 1, stepSeconds: 0.1, napSeconds: 1.5 } })) as ToolResult;
      const waited = Date.now() - t0;
      assert.equal(r.structuredContent, undefined, JSON.stringify(r).slice(0, 300));
      assert.match(textOf(r), /^Pipeline done: p1 \(task \S+\)$/);
      assert.ok(waited >= 1500 && waited < HANDLE_AFTER_MS, `answered when the resumed run ended, not at the budget (${waited} ms)`);
    } finally {
      await close();
    }
  });

  it('SDK v2 on 2026-07-28 without the extension: the same call answers inline too', async () => {
    const client = new ClientV2({ name: 'plain-2026', version: '1' }, { capabilities: {}, versionNegotiation: { mode: { pin: '2026-07-28' } } } as never);
    await client.connect(new TransportV2(new URL(server.url)));
    try {
      const r = (await client.callTool({ name: 'pipeline', arguments: { count: 2, stepSeconds: 0.2 } })) as ToolResult;
      assert.equal(r.structuredContent, undefined, JSON.stringify(r).slice(0, 300));
      assert.match(textOf(r), /^Pipeline done: p1, p2 \(task \S+\)$/);
    } finally {
      await client.close();
    }
  });

  it('SDK v2 on 2026-07-28 without the extension, with a progressToken: a held call reports its status as progress, before and after it becomes a task', async () => {
    const client = new ClientV2({ name: 'plain-2026', version: '1' }, { capabilities: {}, versionNegotiation: { mode: { pin: '2026-07-28' } } } as never);
    await client.connect(new TransportV2(new URL(server.url)));
    try {
      // A plain tool: its status lives in memory while it runs inline.
      const plain: Array<{ progress: number; message?: string }> = [];
      const r = (await client.callTool({ name: 'slow_compute', arguments: { seconds: 1.5, label: 'held' } }, { onprogress: (p: { progress: number; message?: string }) => plain.push(p) })) as ToolResult;
      assert.equal(textOf(r), 'Computed held after 1.5 s');
      assert.ok(plain.some((p) => /^held: \d+%$/.test(p.message ?? '')), `the status as progress: ${JSON.stringify(plain)}`);
      // A durable tool: its task row exists from its first step; its statuses are read from the task.
      const durable: Array<{ progress: number; message?: string }> = [];
      const d = (await client.callTool({ name: 'pipeline', arguments: { count: 3, stepSeconds: 0.4 } }, { onprogress: (p: { progress: number; message?: string }) => durable.push(p) })) as ToolResult;
      assert.match(textOf(d), /^Pipeline done: p1, p2, p3/);
      assert.ok(durable.some((p) => p.message === 'step p3 of 3'), `the task's status as progress: ${JSON.stringify(durable)}`);
      for (const seen of [plain, durable]) {
        assert.ok(seen.every((p, i) => i === 0 || p.progress > seen[i - 1]!.progress), `progress only increases: ${JSON.stringify(seen)}`);
      }
    } finally {
      await client.close();
    }
  });

  it('a durable tool that runs past the budget answers a handle at the budget (not at its first step), with the guidance in structuredContent', async () => {
    const { client, close } = await connectV1(server.url);
    try {
      const t0 = Date.now();
      const r = (await client.callTool({ name: 'pipeline', arguments: { count: 30, stepSeconds: 1 } })) as ToolResult;
      const waited = Date.now() - t0;
      assert.ok(waited >= HANDLE_AFTER_MS - 100, `the caller waited inline for the budget (${waited} ms)`);
      const s = r.structuredContent!;
      assert.equal(s.status, 'working');
      assertGuidance(r, 'pipeline');
      // docs/real-clients.md shows a handle's structuredContent: a real one has exactly its fields.
      const documented = JSON.parse(docBlock('docs/real-clients.md', 'handle-structured-content').code) as Record<string, unknown>;
      assert.deepEqual(Object.keys(s).sort(), Object.keys(documented).sort());
      assert.ok(s.runningForSeconds >= Math.floor(HANDLE_AFTER_MS / 1000), `runningForSeconds counts from the call's start: ${s.runningForSeconds}`);
      const said = Number(/It has run for (\d+) s since the call started\./.exec(textOf(r))?.[1]);
      assert.ok(said >= Math.floor(HANDLE_AFTER_MS / 1000), `the handle's text counts from the call's start: ${textOf(r)}`);
      const cancelled = (await client.callTool({ name: 'outlast_task_cancel', arguments: { taskId: s.taskId } })) as ToolResult;
      assert.match(textOf(cancelled), /is cancelled/);
    } finally {
      await close();
    }
  });

  it('the status tool says how long the call has run since it started, not since it became a task', async () => {
    const { client, close } = await connectV1(server.url);
    try {
      // `sleep` is not durable: it becomes a task only at the budget, so its row is written ~4 s into the call.
      const t0 = Date.now();
      const started = (await client.callTool({ name: 'sleep', arguments: { seconds: 60 } })) as ToolResult;
      const handedAt = Date.now();
      const taskId = started.structuredContent!.taskId as string;
      assertGuidance(started, 'sleep');
      const status = (await client.callTool({ name: 'outlast_task_status', arguments: { taskId, waitSeconds: 0.5 } })) as ToolResult;
      const ran = Number(/It has run for (\d+) s\./.exec(textOf(status))?.[1]);
      assert.ok(ran >= Math.floor(HANDLE_AFTER_MS / 1000), `"It has run for ${ran} s" counts the ${HANDLE_AFTER_MS} ms before the handle: ${textOf(status)}`);
      assert.ok(status.structuredContent!.runningForSeconds >= Math.floor(HANDLE_AFTER_MS / 1000));
      assertGuidance(status, 'sleep');
      // The task's createdAt is the call's start, a whole budget before the handle came back (same machine, same clock).
      const createdAt = Date.parse(started.structuredContent!.createdAt as string);
      assert.ok(createdAt >= t0 - 1000 && createdAt < t0 + HANDLE_AFTER_MS / 2, `createdAt ${createdAt - t0} ms after the call started`);
      assert.ok(handedAt - createdAt >= HANDLE_AFTER_MS - 100, `the handle came ${handedAt - createdAt} ms after createdAt`);
      await client.callTool({ name: 'outlast_task_cancel', arguments: { taskId } });
    } finally {
      await close();
    }
  });
});
