/**
 * `outlast gateway --stdio` in front of an upstream that speaks MCP 2026-07-28 over stdio: Outlast's own fixture
 * server (`outlast serve … --stdio`, which speaks both revisions), and the same behind a wrapper that refuses
 * `initialize` (a server of 2026-07-28 only). The gateway asks the upstream with `server/discover` and speaks
 * 2026-07-28 when it is offered: the upstream's questions then come as MRTR rounds of `tools/call`, which reach the
 * gateway's caller as any other question does.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { BIN, ROOT, callTool, startServer, tempDir, textOf, type ServerProcess } from './helpers.js';
import { TaskClient } from '../src/client/index.js';
import { lateAnswerer } from './late-answer.js';

const UPSTREAMS = join(ROOT, 'dist', 'test', 'gateway-upstreams.js');
const FIXTURES = join(ROOT, 'dist', 'fixtures', 'server.js');
const EVERYTHING = join(ROOT, 'node_modules', '@modelcontextprotocol', 'server-everything', 'dist', 'index.js');
const NODE = process.execPath;

/** The fixture server over stdio, on a SQLite file of its own (a wait parks after 300 ms; the people here answer after 900). */
const fixtureOverStdio = () => `${NODE} ${BIN} serve ${FIXTURES} --stdio --park-after-ms 300 --store sqlite:${join(tempDir(), 'upstream.db')}`;

describe('gateway in front of a stdio upstream that speaks 2026-07-28 (outlast serve --stdio)', () => {
  let gw: ServerProcess;
  before(async () => {
    gw = await startServer(['--store', `sqlite:${join(tempDir(), 'gw.db')}`, '--inline-budget-ms', '300', '--park-after-ms', '300'], {
      command: ['gateway', '--stdio', fixtureOverStdio(), '--name', 'fixtures'],
    });
  });
  after(async () => {
    await gw?.stop();
  });

  it('connects in 2026-07-28; a plain tool answers inline, a long one is a task with the upstream progress as its status', async () => {
    const greet = await callTool(gw.url, 'greet', { name: 'Ada' });
    assert.equal(textOf(greet.result), 'Hello, Ada!');
    assert.equal(greet.result._meta?.['io.modelcontextprotocol/serverInfo']?.name, 'outlast-gateway:fixtures', "the gateway's own server identity, not the upstream's");
    assert.match(gw.stderr(), /upstream "fixtures" speaks 2026-07-28/);
    const client = new TaskClient({ url: gw.url, status: 'poll' });
    try {
      const statuses: string[] = [];
      const call = await client.start('slow_compute', { seconds: 2, label: 'crunch' });
      call.on('task', (t) => t.statusMessage && statuses.push(t.statusMessage));
      const result = await call.result();
      assert.ok(call.taskId, 'a task at the gateway');
      assert.equal(textOf(result as never), 'Computed crunch after 2 s');
      assert.ok(statuses.some((s) => /crunch/.test(s)), `the upstream's progress as status: ${statuses.join(' | ')}`);
    } finally {
      await client.close();
    }
  });

  it("the upstream's MRTR question (asked before its tool starts, which 2025-11-25 cannot carry) is answered late by a person through the gateway", async () => {
    const person = lateAnswerer(gw.url, { name: 'Grace' }, 900);
    try {
      const result = await person.client.callTool('test_tool_with_task', {});
      assert.equal(textOf(result as never), 'Hello, Grace! Your task is done.');
      assert.equal(person.asked!.message, 'Your name?');
    } finally {
      await person.client.close();
    }
  });

  it("a question the upstream's tool asks while it runs reaches the person, whose answer completes the call", async () => {
    const person = lateAnswerer(gw.url, { confirm: true }, 900);
    try {
      const result = await person.client.callTool('confirm_delete', { filename: 'notes.txt' });
      assert.equal(textOf(result as never), 'Deleted notes.txt');
      assert.equal(person.asked!.message, 'Delete notes.txt?');
    } finally {
      await person.client.close();
    }
  });
});

describe('the revision probe and stdio upstreams that do not expect it', () => {
  it('a 2025-11-25 server that ends its process on any request before initialize: connected again without the probe, and served', async () => {
    const gw = await startServer(['--store', `sqlite:${join(tempDir(), 'gw.db')}`], {
      command: ['gateway', '--stdio', `${NODE} ${UPSTREAMS} initialize-first ${NODE} ${EVERYTHING} stdio`, '--name', 'strict'],
    });
    try {
      const echo = await callTool(gw.url, 'echo', { message: 'after the probe' });
      assert.equal(textOf(echo.result), 'Echo: after the probe', JSON.stringify(echo.error ?? echo.result));
      assert.match(gw.stderr(), /upstream "strict" speaks 2025-11-25/);
    } finally {
      await gw.stop();
    }
  });

  it('a server of 2026-07-28 only (it refuses initialize): connected, its tools listed and called through', async () => {
    const gw = await startServer(['--store', `sqlite:${join(tempDir(), 'gw.db')}`], {
      command: ['gateway', '--stdio', `${NODE} ${UPSTREAMS} modern-only ${fixtureOverStdio()}`, '--name', 'modern'],
    });
    try {
      const greet = await callTool(gw.url, 'greet', { name: 'Lin' });
      assert.equal(textOf(greet.result), 'Hello, Lin!', JSON.stringify(greet.error ?? greet.result));
      assert.match(gw.stderr(), /upstream "modern" speaks 2026-07-28/);
    } finally {
      await gw.stop();
    }
  });
});
