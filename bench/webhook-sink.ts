/**
 * The webhook receiver of rows (z) and (z.load): listens on 127.0.0.1, echoes the challenge, answers each event 204.
 * Run as a process of its own (row (z): a real subscriber's endpoint shares no event loop with the client that
 * creates the tasks), it prints `listening <url>`, then one line per event, `<taskId> <ms from its lastUpdatedAt to
 * its arrival>`, taken as the request ends; it exits on SIGTERM.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

export async function receiver(onEvent: (json: any) => void) {
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      const json = JSON.parse(body);
      if (json.type === 'verification') return res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ challenge: json.challenge }));
      onEvent(json);
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, close: () => (server.closeAllConnections(), server.close()) };
}

if (process.argv[1]?.endsWith('webhook-sink.js')) {
  const rec = await receiver((json) => {
    if (json.data?.taskId) process.stdout.write(`${json.data.taskId} ${Date.now() - Date.parse(json.data.lastUpdatedAt)}\n`);
  });
  process.stdout.write(`listening ${rec.url}\n`);
  process.on('SIGTERM', () => {
    rec.close();
    process.exit(0);
  });
}
