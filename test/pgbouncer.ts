/**
 * Debian's PgBouncer in transaction mode with its default settings, for tests of the store through a pooler: an ini
 * of its own in a temporary folder (`pool_mode = transaction`, `auth_type = trust`, one `[databases]` entry per
 * database, pointing at the test PostgreSQL), on a free loopback port; as root it runs as `postgres` (it refuses to
 * run as root). Started in the foreground and stopped by its process id; `stop()`/`start()` again on the same port
 * make an outage of the pooler.
 */
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import { chownSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import { after } from 'node:test';
import { PG_URL, freePort, sleep, tempDir } from './helpers.js';

export interface PgBouncer {
  port: number;
  /** `url` (a postgres:// URL of the test PostgreSQL) through the pooler: same user, database and parameters. */
  through(url: string): string;
  /** What PgBouncer logged. */
  log(): string;
  stop(): Promise<void>;
  start(): Promise<void>;
}

const running = new Set<PgBouncer>();
after(async () => {
  for (const b of [...running]) await b.stop();
});

function canConnect(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect(port, '127.0.0.1');
    s.once('connect', () => {
      s.destroy();
      resolve(true);
    });
    s.once('error', () => resolve(false));
  });
}

export async function startPgBouncer(settings: Record<string, string> = {}): Promise<PgBouncer> {
  const upstream = new URL(PG_URL);
  const dir = tempDir('outlast-pgbouncer-');
  const port = await freePort();
  const ini = join(dir, 'pgbouncer.ini');
  const lines = [
    '[databases]',
    `* = host=${upstream.hostname} port=${upstream.port || 5432}`,
    '[pgbouncer]',
    'listen_addr = 127.0.0.1',
    `listen_port = ${port}`,
    `unix_socket_dir = ${dir}`,
    'pool_mode = transaction',
    'auth_type = trust',
    `auth_file = ${join(dir, 'users.txt')}`,
    `logfile = ${join(dir, 'pgbouncer.log')}`,
    ...Object.entries(settings).map(([k, v]) => `${k} = ${v}`),
  ];
  writeFileSync(ini, lines.join('\n') + '\n');
  writeFileSync(join(dir, 'users.txt'), `"${decodeURIComponent(upstream.username || 'postgres')}" ""\n`);
  writeFileSync(join(dir, 'pgbouncer.log'), '');
  const asRoot = process.getuid?.() === 0;
  if (asRoot) {
    const uid = Number(execFileSync('id', ['-u', 'postgres']).toString().trim());
    const gid = Number(execFileSync('id', ['-g', 'postgres']).toString().trim());
    for (const f of ['', 'pgbouncer.ini', 'users.txt', 'pgbouncer.log']) chownSync(join(dir, f), uid, gid);
  }
  let child: ChildProcess | undefined;
  const b: PgBouncer = {
    port,
    through(url) {
      const u = new URL(url);
      u.hostname = '127.0.0.1';
      u.port = String(port);
      return u.toString();
    },
    log: () => execFileSync('cat', [join(dir, 'pgbouncer.log')]).toString(),
    async start() {
      if (child) return;
      const c = spawn('pgbouncer', [...(asRoot ? ['-u', 'postgres'] : []), ini], { stdio: 'ignore' });
      child = c;
      c.once('exit', () => {
        if (child === c) child = undefined;
      });
      const deadline = Date.now() + 10_000;
      while (!(await canConnect(port))) {
        if (!child) throw new Error(`pgbouncer exited at start:\n${b.log()}`);
        if (Date.now() > deadline) throw new Error(`pgbouncer did not listen on ${port}:\n${b.log()}`);
        await sleep(20);
      }
      running.add(b);
    },
    async stop() {
      const c = child;
      running.delete(b);
      if (!c || c.exitCode !== null) return;
      const gone = new Promise<void>((resolve) => c.once('exit', () => resolve()));
      // SIGTERM: immediate shutdown (clients are disconnected), as a crash of the pooler would.
      process.kill(c.pid!, 'SIGTERM');
      await Promise.race([gone, sleep(5000)]);
      if (c.exitCode === null && c.signalCode === null) {
        process.kill(c.pid!, 'SIGKILL');
        await gone;
      }
      child = undefined;
    },
  };
  await b.start();
  return b;
}
