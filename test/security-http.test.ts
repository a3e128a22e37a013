/**
 * Security review, finding 11 (issue 40): a 100,000-deep JSON argument to `events/*` overflowed the stack into an HTTP
 * 500, and the HTTP front ran on Node's default timeouts with no connection cap. Real `outlast serve` processes and raw
 * sockets (what an attacker sends): a deep body gets a JSON-RPC error and the server keeps serving; a client that sends
 * its headers (or its body) slowly is cut at the timeout while a listen stream outlives it; connections past the cap
 * are closed at once.
 */
import assert from 'node:assert/strict';
import { connect, type Socket } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { TASKS_CAPS, callTool, metaFor, openListen, rpc, sleep, startServer, tempDir, until, type ServerProcess } from './helpers.js';

/** A raw connection to the server's port; `closed` resolves with what the server wrote and when it closed. */
function rawSocket(url: string): { socket: Socket; opened: Promise<void>; closed: Promise<{ at: number; text: string }> } {
  const u = new URL(url);
  const socket = connect(Number(u.port), u.hostname);
  let text = '';
  socket.setEncoding('utf8').on('data', (d: string) => (text += d));
  socket.on('error', () => undefined);
  return {
    socket,
    opened: new Promise((r) => socket.once('connect', () => r())),
    closed: new Promise((r) => socket.once('close', () => r({ at: performance.now(), text }))),
  };
}

/** A server started before the suite's tests and stopped after them. */
function serverFor(args: string[]): { readonly current: ServerProcess } {
  let server: ServerProcess | undefined;
  before(async () => {
    server = await startServer(['--store', `sqlite:${join(tempDir(), 'tasks.db')}`, '--events', ...args]);
  });
  after(async () => {
    await server?.stop();
  });
  return {
    get current() {
      return server!;
    },
  };
}

describe('security: the HTTP front, as it starts by default', () => {
  const s = serverFor([]);

  /** POSTs a hand-written body (too deep for JSON.stringify on this side). */
  const postRaw = async (body: string) => {
    const res = await fetch(s.current.url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2026-07-28' },
      body,
    });
    return { status: res.status, json: (await res.json()) as Record<string, any> };
  };

  it('http: a 100,000-deep JSON argument gets a JSON-RPC error naming the nesting limit, and the server keeps serving', async () => {
    const depth = 100_000;
    const deep = `${'{"a":'.repeat(depth)}1${'}'.repeat(depth)}`;
    const meta = JSON.stringify(metaFor(TASKS_CAPS));
    for (const [method, params] of [
      ['events/poll', `{"name":"outlast.task.finished","arguments":${deep},"_meta":${meta}}`],
      ['events/stream', `{"name":"outlast.task.finished","arguments":${deep},"_meta":${meta}}`],
      ['events/subscribe', `{"name":"outlast.task.finished","arguments":${deep},"delivery":{"mode":"webhook","url":"https://hooks.example/x","secret":"whsec_x"},"_meta":${meta}}`],
      ['tools/call', `{"name":"greet","arguments":{"name":${deep}},"_meta":${meta}}`],
    ] as const) {
      const r = await postRaw(`{"jsonrpc":"2.0","id":7,"method":"${method}","params":${params}}`);
      assert.equal(r.status, 400, `${method}: ${JSON.stringify(r.json).slice(0, 300)}`);
      assert.equal(r.json.id, 7);
      assert.equal(r.json.error?.code, -32602, method);
      assert.match(r.json.error.message, /nested deeper than 128 levels/);
    }
    const batch = await postRaw(`${'['.repeat(depth)}${']'.repeat(depth)}`);
    assert.equal(batch.json.error?.code, -32600, 'a deep value that is not a message is an invalid request');
    // Still serving.
    const greet = await callTool(s.current.url, 'greet', { name: 'Ada' });
    assert.equal(greet.error, undefined);
    const list = await rpc(s.current.url, 'events/list', {});
    assert.ok(Array.isArray(list.result.events));
  });

  it("http: an idle kept-alive connection outlives Node's 5 s (65 s, advertised to the client): a client polling every few seconds is not raced by the server's close", async () => {
    const kept = rawSocket(s.current.url);
    await kept.opened;
    let text = '';
    kept.socket.on('data', (d: string) => (text += d));
    const answers = () => text.match(/HTTP\/1\.1 200 /g)?.length ?? 0;
    const get = 'GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n';
    try {
      kept.socket.write(get);
      await until('the first answer', () => answers() === 1);
      assert.match(text, /^keep-alive: timeout=65$/im, 'the idle timeout is advertised (fetch keeps a socket for it less 1 s)');
      await sleep(6000);
      assert.equal(kept.socket.destroyed || kept.socket.readyState !== 'open', false, 'still open after 6 s idle');
      kept.socket.write(get);
      await until('the second answer on the same connection', () => answers() === 2);
    } finally {
      kept.socket.destroy();
    }
  });

  it("http: by default a client that sends its headers slowly is cut within 15 s (Node's own default: 60 s)", async () => {
    const start = performance.now(); // before the connect: the server's header clock starts when it accepts
    const slow = rawSocket(s.current.url);
    await slow.opened;
    slow.socket.write(`POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n`);
    const drip = setInterval(() => slow.socket.writable && slow.socket.write(`x-slow-${Math.random().toString(36).slice(2)}: 1\r\n`), 500);
    try {
      const cut = await Promise.race([slow.closed, sleep(40_000).then(() => undefined)]);
      assert.ok(cut, 'the slow client was not cut within 40 s');
      const heldMs = cut.at - start;
      assert.match(cut.text, /^HTTP\/1\.1 408/);
      assert.ok(heldMs >= 14_000 && heldMs < 25_000, `cut after ${Math.round(heldMs)} ms (headers timeout 15000 ms, checked every 5 s)`);
    } finally {
      clearInterval(drip);
      slow.socket.destroy();
    }
  });
});

describe('security: the HTTP front with short timeouts', () => {
  const s = serverFor(['--headers-timeout-ms', '1000', '--request-timeout-ms', '2000']);

  it('http: a client that sends its headers slowly is disconnected after the header timeout; a listen stream outlives the request timeout', async () => {
    const server = s.current;
    const task = await callTool(server.url, 'sleep', { seconds: 8 }, { caps: TASKS_CAPS });
    assert.equal(task.result.resultType, 'task');
    const opened = performance.now();
    const listen = await openListen(server.url, [task.result.taskId], undefined, 'listen-timeouts');
    // The server's header clock starts when it accepts the connection: measured from before the connect, since a
    // loaded test process may see its own 'connect' late.
    const start = performance.now();
    const slow = rawSocket(server.url);
    await slow.opened;
    slow.socket.write(`POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n`);
    // One header line every 200 ms, never the end of the headers.
    const drip = setInterval(() => slow.socket.writable && slow.socket.write(`x-slow-${Math.random().toString(36).slice(2)}: 1\r\n`), 200);
    const cut = await slow.closed;
    clearInterval(drip);
    const heldMs = cut.at - start;
    assert.match(cut.text, /^HTTP\/1\.1 408/, `the server answered 408 before closing: ${JSON.stringify(cut.text.slice(0, 100))}`);
    assert.ok(heldMs >= 900 && heldMs < 6_000, `cut after ${Math.round(heldMs)} ms (header timeout 1000 ms)`);
    // The listen stream, opened before, is still delivering past the 2 s request timeout: the task's completion at ~8 s (late enough on a loaded machine too).
    await listen.until((m) => m.some((x) => x.method === 'notifications/tasks' && x.params.status === 'completed'), 30_000);
    const at = listen.arrivals[listen.msgs.findIndex((x) => x.method === 'notifications/tasks' && x.params.status === 'completed')]!;
    assert.ok(at - opened > 2_500, `the completion arrived ${Math.round(at - opened)} ms after the stream opened`);
    listen.close();
  });

  it('http: a client that sends its body slowly is cut at the request timeout', async () => {
    const slow = rawSocket(s.current.url);
    await slow.opened;
    const start = performance.now();
    slow.socket.write(`POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{`);
    const drip = setInterval(() => slow.socket.writable && slow.socket.write(' '), 200);
    const cut = await slow.closed;
    clearInterval(drip);
    const heldMs = cut.at - start;
    assert.ok(heldMs >= 1_900 && heldMs < 8_000, `cut after ${Math.round(heldMs)} ms (request timeout 2000 ms)`);
  });
});

describe('security: the connection cap', () => {
  it('http: connections beyond --max-connections are closed at once; a freed place serves again', async () => {
    const server = await startServer(['--store', `sqlite:${join(tempDir(), 'tasks.db')}`, '--max-connections', '3']);
    const held: Array<ReturnType<typeof rawSocket>> = [];
    try {
      for (let i = 0; i < 3; i++) {
        const s = rawSocket(server.url);
        await s.opened;
        held.push(s);
      }
      // Each held connection is counted by the server before the next test: a request on it is answered.
      for (const s of held) s.socket.write('GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n');
      await until('the held connections answered', () => held.every((s) => s.socket.bytesRead > 0));
      const extra = rawSocket(server.url);
      const closed = await extra.closed;
      assert.equal(closed.text, '', 'the fourth connection is closed without an answer');
      await assert.rejects(fetch(server.url.replace(/\/mcp$/, '/healthz')), 'a request past the cap fails');
      held.shift()!.socket.destroy();
      const ok = await until('a freed place', async () => {
        try {
          const res = await fetch(server.url.replace(/\/mcp$/, '/healthz'), { headers: { connection: 'close' } });
          await res.text();
          return res.status;
        } catch {
          return undefined;
        }
      });
      assert.equal(ok, 200);
    } finally {
      for (const s of held) s.socket.destroy();
      await server.stop();
    }
  });
});
