/**
 * Child process: a closed-loop HTTP load generator (loopback only). Fixed concurrency over a keep-alive
 * http.Agent; each worker sends its next request as soon as the previous answer has been read in full.
 * Bounded by time and by request count.
 *
 * Message in:  {type:'run', url, requests:[{headers, body}], concurrency, seconds, maxRequests, accept?, pinned?}
 *              (requests are cycled in order; e.g. one tasks/get per task id; `pinned`: worker w sends only
 *              requests[w], e.g. one per session: a stateful server's session is one client's, one request at a time)
 * Message out: {type:'result', ok, errors, firstError, seconds, rps, p50Ms, p99Ms, maxMs, statuses}
 * A response counts as ok when its status is 200 and the JSON-RPC message in it carries "result"; with
 * accept 'any' (a soak that sends bad input on purpose) every complete HTTP answer counts, and only failures to
 * get one (refused or cut connections) are errors. `statuses` counts the answers by HTTP status.
 */
import { Agent, request } from 'node:http';
import { performance } from 'node:perf_hooks';
import { childFail, exitWithParent, percentile, type WireRequest } from './common.js';

interface RunMsg {
  type: 'run';
  url: string;
  requests: WireRequest[];
  concurrency: number;
  seconds: number;
  maxRequests: number;
  accept?: 'result' | 'any';
  pinned?: boolean;
}

async function run(m: RunMsg) {
  const u = new URL(m.url);
  if (u.hostname !== '127.0.0.1' && u.hostname !== 'localhost' && u.hostname !== '[::1]') throw new Error(`load: loopback only, got ${u.hostname}`);
  const agent = new Agent({ keepAlive: true, maxSockets: m.concurrency, maxFreeSockets: m.concurrency });
  const prepared = m.requests.map((r) => {
    const body = Buffer.from(r.body);
    return { body, headers: { ...r.headers, 'content-length': String(body.length) } };
  });
  // Latencies of the answers inside the window (loopback MCP stays far below 100k req/s).
  const lat = new Float64Array(Math.min(m.maxRequests, Math.ceil(m.seconds * 100_000)));
  let issued = 0;
  let okCount = 0;
  let errors = 0;
  let firstError: string | undefined;
  let cursor = 0;
  const statuses: Record<string, number> = {};
  const any = m.accept === 'any';
  const start = performance.now();
  const deadline = start + m.seconds * 1000;

  const one = (i: number) =>
    new Promise<void>((resolve) => {
      const p = prepared[i]!;
      const t0 = performance.now();
      const req = request({ agent, host: u.hostname, port: u.port, path: u.pathname, method: 'POST', headers: p.headers }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const t1 = performance.now();
          const text = chunks.length === 1 ? chunks[0]!.toString() : Buffer.concat(chunks).toString();
          statuses[res.statusCode ?? 0] = (statuses[res.statusCode ?? 0] ?? 0) + 1;
          if (any || (res.statusCode === 200 && text.includes('"result"') && !text.includes('"error":{'))) {
            if (t1 <= deadline) lat[okCount++] = t1 - t0;
          } else {
            errors++;
            firstError ??= `HTTP ${res.statusCode}: ${text.slice(0, 300)}`;
          }
          resolve();
        });
        res.on('error', (e) => {
          errors++;
          firstError ??= String(e);
          resolve();
        });
      });
      req.on('error', (e) => {
        errors++;
        firstError ??= String(e);
        resolve();
      });
      req.end(p.body);
    });

  const worker = async (_: unknown, w: number) => {
    while (performance.now() < deadline && issued < m.maxRequests) {
      issued++;
      const i = m.pinned ? w % prepared.length : cursor;
      cursor = (cursor + 1) % prepared.length;
      await one(i);
      if (errors > 1000) break;
    }
  };
  await Promise.all(Array.from({ length: m.concurrency }, worker));
  const end = Math.min(performance.now(), deadline);
  agent.destroy();
  const seconds = (end - start) / 1000;
  const sorted = lat.subarray(0, okCount).sort();
  return {
    type: 'result',
    ok: okCount,
    errors,
    firstError,
    seconds,
    rps: okCount / seconds,
    p50Ms: percentile(sorted, 50),
    p99Ms: percentile(sorted, 99),
    maxMs: sorted.length ? sorted[sorted.length - 1] : NaN,
    statuses,
  };
}

exitWithParent();
process.on('message', (m: any) => {
  if (m?.type === 'run') run(m as RunMsg).then((r) => process.send!(r), childFail);
});
process.send!({ type: 'ready', pid: process.pid });
