/**
 * Row (z)'s webhook receiver, in a process of its own (the endpoint of a real subscriber shares no event loop with
 * the client that creates the tasks): listens on 127.0.0.1, echoes the challenge, answers each event 204 and prints
 * one line per event, `<taskId> <ms from its lastUpdatedAt to its arrival>`, taken as the request ends.
 * Prints `listening <url>` first; exits on SIGTERM.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

const server = createServer((req, res) => {
  let body = '';
  req.on('data', (c) => (body += c));
  req.on('end', () => {
    const at = Date.now();
    const json = JSON.parse(body);
    if (json.type === 'verification') return res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ challenge: json.challenge }));
    if (json.data?.taskId) process.stdout.write(`${json.data.taskId} ${at - Date.parse(json.data.lastUpdatedAt)}\n`);
    res.writeHead(204).end();
  });
});
server.listen(0, '127.0.0.1', () => process.stdout.write(`listening http://127.0.0.1:${(server.address() as AddressInfo).port}\n`));
process.on('SIGTERM', () => {
  server.closeAllConnections();
  server.close(() => process.exit(0));
});
