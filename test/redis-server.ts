/**
 * A Redis of the test's own (`redis-server` on a free loopback port, nothing persisted), so a test may stop and
 * start it again on the same port; stopped by its process id when the run ends.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { connect } from 'node:net';
import { after } from 'node:test';
import { freePort, sleep } from './helpers.js';

export interface RedisServer {
  url: string;
  stop(): Promise<void>;
  start(): Promise<void>;
}

const running = new Set<RedisServer>();
after(async () => {
  for (const r of [...running]) await r.stop();
});

function answersPing(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect(port, '127.0.0.1');
    s.setTimeout(500, () => {
      s.destroy();
      resolve(false);
    });
    s.once('connect', () => s.write('PING\r\n'));
    s.once('data', (d) => {
      s.destroy();
      resolve(d.toString().startsWith('+PONG'));
    });
    s.once('error', () => resolve(false));
  });
}

export async function startRedis(): Promise<RedisServer> {
  const port = await freePort();
  let child: ChildProcess | undefined;
  const r: RedisServer = {
    url: `redis://127.0.0.1:${port}`,
    async start() {
      if (child) return;
      const c = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' });
      child = c;
      c.once('exit', () => {
        if (child === c) child = undefined;
      });
      const deadline = Date.now() + 10_000;
      while (!(await answersPing(port))) {
        if (!child) throw new Error('redis-server exited at start');
        if (Date.now() > deadline) throw new Error(`redis-server did not answer on ${port}`);
        await sleep(20);
      }
      running.add(r);
    },
    async stop() {
      const c = child;
      running.delete(r);
      child = undefined;
      if (!c || c.exitCode !== null || c.signalCode !== null) return;
      const gone = new Promise<void>((resolve) => c.once('exit', () => resolve()));
      process.kill(c.pid!, 'SIGKILL');
      await gone;
    },
  };
  await r.start();
  return r;
}
