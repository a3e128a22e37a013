/**
 * A Redis of the test's own (`redis-server` on a free loopback port, nothing persisted), so a test may stop and
 * start it again on the same port; stopped by its process id.
 */
import { connect } from 'node:net';
import { freePort } from './helpers.js';
import { serviceProcess, type ServiceProcess } from './service-process.js';

export interface RedisServer extends ServiceProcess {
  url: string;
}

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
  const args = ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'];
  // SIGKILL: a crash of Redis, not a shutdown.
  const r = { url: `redis://127.0.0.1:${port}`, ...serviceProcess('redis-server', 'redis-server', args, () => answersPing(port), undefined, 'SIGKILL') };
  await r.start();
  return r;
}
