/**
 * Every text that carries an answer link gives it so that the usual way of taking a URL out of text takes exactly the
 * link: the handle and status texts, every string of their structuredContent, the answer tool's refusal, the alert
 * webhook, the server's log line of that alert, the dashboard's alerts page and the input_required event, each also
 * JSON-encoded (as a host like LangChain hands a tool's text to the model, a line break then reads `\n`). Each link
 * taken out with an ordinary URL regular expression is the link itself (no punctuation after it) and opens the form.
 * A real server (the demo's migrate, answer pages, alerts, events and the dashboard on), a client without elicitation
 * that calls with a bearer token (events/poll of every task of a principal needs credentials).
 */
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { connectV1 } from './generations.js';
import { ROOT, freePort, rpc, startServer, tempDir, textOf, type ServerProcess } from './helpers.js';
import { until } from './questions-helpers.js';

const DEMO = join(ROOT, 'dist', 'demo', 'server.js');
/** The pattern a chat client, a linkifier or a script uses to find URLs in text. */
const URLS = /https?:\/\/[^\s<>"']+/g;
/** The caller's credentials: the v1 client's and the events poll's, one principal. */
const TOKEN = 'tok-links';
type ToolResult = { content: Array<{ type: string; text?: string }>; structuredContent?: Record<string, unknown>; isError?: boolean };

/** Every string inside a JSON value. */
function stringsOf(v: unknown): string[] {
  if (typeof v === 'string') return [v];
  if (Array.isArray(v)) return v.flatMap(stringsOf);
  if (v && typeof v === 'object') return Object.values(v).flatMap(stringsOf);
  return [];
}

describe('answer links in every text a person or a model reads', () => {
  let server: ServerProcess;
  let receiver: ReturnType<typeof createServer>;
  const bodies: string[] = [];
  before(async () => {
    receiver = createServer((req, res) => {
      let body = '';
      req.on('data', (c) => (body += c));
      req.on('end', () => {
        bodies.push(body);
        res.writeHead(204).end();
      });
    });
    await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
    const port = await freePort();
    server = await startServer(
      ['--store', `sqlite:${join(tempDir(), 'links.db')}`, '--port', String(port), '--public-url', `http://127.0.0.1:${port}`, '--handle-after-ms', '500', '--park-after-ms', '300',
        '--alert-webhook', `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`, '--alert-webhook-secret', 'whsec_bGlua3MtdGVzdC1zZWNyZXQtbGlua3MtdGVzdA==', '--events', '--dashboard', '--bearer', `${TOKEN}=links`],
      { module: DEMO },
    );
  });
  after(async () => {
    receiver?.closeAllConnections();
    receiver?.close();
    await server?.stop();
  });

  it('each link an ordinary URL pattern takes out of a text is the link alone, and opens the form', async () => {
    const { client, close } = await connectV1(server.url, { token: TOKEN });
    try {
      const cursor = (await rpc(server.url, 'events/poll', { name: 'outlast.task.input_required', arguments: {}, cursor: null }, { token: TOKEN })).message.result as { cursor: string };
      const handle = (await client.callTool({ name: 'migrate', arguments: { database: 'shop', migration: '0080_links' } })) as ToolResult;
      const taskId = handle.structuredContent!.taskId as string;
      const link = (handle.structuredContent!.answerLinks as Array<{ url: string }>)[0]!.url;
      const status = (await client.callTool({ name: 'outlast_task_status', arguments: { taskId, waitSeconds: 0 } })) as ToolResult;
      const refused = (await client.callTool({ name: 'outlast_task_answer', arguments: { taskId, key: 'approval', content: { approve: true } } })) as ToolResult;
      assert.equal(refused.isError, true);
      const alert = await until('the input.requested alert is delivered', async () => bodies.find((b) => b.includes('outlast.input.requested')), 20_000);
      const polled = await rpc(server.url, 'events/poll', { name: 'outlast.task.input_required', arguments: {}, cursor: cursor.cursor, timeoutMs: 10_000 }, { token: TOKEN });
      const dashboard = await (await fetch(server.url.replace(/\/mcp$/, '/dashboard/alerts'))).text();
      const logged = await until('the alert is logged', async () => server.stderr().split('\n').find((l) => l.includes('alert: ') && l.includes(taskId)), 10_000);

      // Prose, read as it is and JSON-encoded (a host hands a tool's text to the model that way).
      const texts: Record<string, string[]> = {
        'the handle text': [textOf(handle as never)],
        "the handle's structuredContent": stringsOf(handle.structuredContent),
        'the status text': [textOf(status as never)],
        "the status's structuredContent": stringsOf(status.structuredContent),
        "the answer tool's refusal": [textOf(refused as never)],
        "the alert's message": [(JSON.parse(alert) as { data: { message: string } }).data.message],
        "the alert's log line": [logged],
      };
      // Documents read as they are.
      const documents: Record<string, string> = {
        'the alert webhook': alert,
        "the dashboard's alerts page": dashboard,
        'the input_required event': JSON.stringify(polled.message.result),
      };
      const opened = new Map<string, number>();
      const all: Array<[string, string[]]> = [...Object.entries(texts).map(([w, plain]): [string, string[]] => [w, [...plain, ...plain.map((t) => JSON.stringify(t))]]), ...Object.entries(documents).map(([w, d]): [string, string[]] => [w, [d]])];
      for (const [where, strings] of all) {
        const found = strings.flatMap((s) => s.match(URLS) ?? []).filter((u) => u.includes('/answer/'));
        assert.ok(found.length > 0, `${where} carries the link: ${strings.join('\n')}`);
        for (const u of found) {
          assert.equal(u, link, `${where}: the URL pattern takes the link alone, nothing after it:\n${strings.find((s) => s.includes(u))}`);
          if (!opened.has(u)) opened.set(u, (await fetch(u)).status);
          assert.equal(opened.get(u), 200, `${where}: the link opens the form`);
        }
      }
      // The model reads the link in <…> at the end of its line (the text goes on after it on the next line, if at all).
      assert.ok(textOf(handle as never).split('\n').includes(`- "Apply migration \"0080_links\" to shop? It locks the orders table for about a minute." (key "approval"): show this link to the user, who answers there: <${link}>`), textOf(handle as never));
    } finally {
      await close();
    }
  });
});
