/**
 * (e) The client's overhead: end-to-end time of a tool call whose work takes N ms, through TaskClient, against
 * the same work answered inline (a plain `tools/call` without the extension: the server runs it in the
 * request), measured in the same run, alternating, on the fixture server in its own process.
 *
 *   e.push  TaskClient with subscriptions/listen: figure / inline baseline, target <= 1.1
 *   e.poll  TaskClient polling: figure / (inline baseline + advertised pollIntervalMs), target <= 1.1
 *           (the stated bound: at most one advertised interval, plus jitter, after the work ends)
 *   e.reqs  requests per task (tools/call + tasks/get + subscriptions/listen), push and poll
 *
 * Knobs: BENCH_CLIENT_WORK_MS (default 2000), BENCH_CLIENT_ROUNDS (default 5), BENCH_CLIENT_POLL_MS (server
 * --poll-interval-ms, default 500).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { TaskClient } from '../src/client/index.js';
import { ROOT, envNumber, median, round, send, serve, toolCall, type BenchRow } from './common.js';

export type ClientRow = BenchRow;


export async function clientBench(log: (m: string) => void = () => undefined): Promise<ClientRow[]> {
  const workMs = envNumber('BENCH_CLIENT_WORK_MS', 2000);
  const rounds = Math.round(envNumber('BENCH_CLIENT_ROUNDS', 5));
  const pollMs = envNumber('BENCH_CLIENT_POLL_MS', 500);
  const dir = mkdtempSync(join(tmpdir(), 'outlast-bench-client-'));
  const fixtures = await serve(join(ROOT, 'dist', 'fixtures', 'server.js'), ['--store', `sqlite:${join(dir, 'tasks.db')}`, '--poll-interval-ms', String(pollMs), '--log-level', 'warn']);
  const url = fixtures.url;
  const inline: number[] = [];
  const push: number[] = [];
  const poll: number[] = [];
  const pollBound: number[] = [];
  const reqs = { push: [] as number[], poll: [] as number[] };
  const args = { seconds: workMs / 1000 };
  try {
    const pushClient = new TaskClient({ url });
    const pollClient = new TaskClient({ url, status: 'poll' });
    // warm-up (JIT, connections)
    await send(url, toolCall('sleep', { seconds: 0.05 }, false));
    await pushClient.callTool('sleep', { seconds: 0.3 });
    await pollClient.callTool('sleep', { seconds: 0.3 });
    for (let i = 0; i < rounds; i++) {
      let t = performance.now();
      const r = await send(url, toolCall('sleep', args, false));
      if (r.json?.result?.resultType !== 'complete') throw new Error(`inline baseline did not run inline: ${r.text.slice(0, 200)}`);
      inline.push(performance.now() - t);

      let before = pushClient.stats.total;
      t = performance.now();
      await pushClient.callTool('sleep', args);
      push.push(performance.now() - t);
      reqs.push.push(pushClient.stats.total - before);

      before = pollClient.stats.total;
      let advertised = pollMs;
      t = performance.now();
      const call = await pollClient.start('sleep', args);
      call.on('task', (x) => (advertised = x.pollIntervalMs ?? advertised));
      await call.result();
      poll.push(performance.now() - t);
      pollBound.push(inline[i]! + advertised);
      reqs.poll.push(pollClient.stats.total - before);
      log(`client round ${i + 1}/${rounds}: inline ${round(inline[i]!)} ms, push ${round(push[i]!)} ms, poll ${round(poll[i]!)} ms (advertised ${advertised} ms)`);
    }
    await pushClient.close();
    await pollClient.close();
  } finally {
    await fixtures.stop();
    rmSync(dir, { recursive: true, force: true });
  }
  const ratioPush = median(push) / median(inline);
  const ratioPoll = median(poll) / median(pollBound);
  return [
    {
      id: 'e.push',
      what: `TaskClient.callTool of a ${workMs} ms task, status pushed (subscriptions/listen), end to end`,
      figure: round(median(push)),
      unit: 'ms',
      baselineWhat: `the same ${workMs} ms of work answered inline (plain tools/call, no extension)`,
      baseline: round(median(inline)),
      ratio: round(ratioPush, 3),
      target: 'ratio <= 1.1',
      pass: ratioPush <= 1.1,
      rounds: push.map((x) => round(x)),
      baselineRounds: inline.map((x) => round(x)),
    },
    {
      id: 'e.poll',
      what: `TaskClient.callTool of a ${workMs} ms task, polling tasks/get at the advertised interval, end to end`,
      figure: round(median(poll)),
      unit: 'ms',
      baselineWhat: 'inline time + the advertised pollIntervalMs (the stated bound: one interval after the work ends)',
      baseline: round(median(pollBound)),
      ratio: round(ratioPoll, 3),
      target: 'ratio <= 1.1',
      pass: ratioPoll <= 1.1,
      rounds: poll.map((x) => round(x)),
      baselineRounds: pollBound.map((x) => round(x)),
    },
    {
      id: 'e.reqs',
      what: `requests sent per ${workMs} ms task: push / poll (server --poll-interval-ms ${pollMs})`,
      figure: median(reqs.push),
      unit: 'req (push)',
      target: 'info',
      note: `poll: ${median(reqs.poll)} requests per task (median; rounds ${reqs.poll.join(', ')}); push rounds ${reqs.push.join(', ')}`,
    },
  ];
}
