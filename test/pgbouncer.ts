/**
 * Debian's PgBouncer in transaction mode with its default settings, for tests of the store through a pooler: an ini
 * of its own in a temporary folder (`pool_mode = transaction`, `auth_type = trust`, one `[databases]` entry per
 * database, pointing at the test PostgreSQL), on a free loopback port; as root it runs as `postgres` (it refuses to
 * run as root). Started in the foreground and stopped by its process id; `stop()`/`start()` again on the same port
 * make an outage of the pooler.
 */
import { execFileSync } from 'node:child_process';
import { chownSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import { after, before } from 'node:test';
import { PG_URL, freePort, tempDir } from './helpers.js';
import { serviceProcess, type ServiceProcess } from './service-process.js';
import { startRedis, type RedisServer } from './redis-server.js';

export interface PgBouncer extends ServiceProcess {
  port: number;
  /** `url` (a postgres:// URL of the test PostgreSQL) through the pooler: same user, database and parameters. */
  through(url: string): string;
  /** What PgBouncer logged. */
  log(): string;
}

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
  const log = () => execFileSync('cat', [join(dir, 'pgbouncer.log')]).toString();
  // SIGTERM: PgBouncer's immediate shutdown (clients are disconnected), as a crash of the pooler would.
  const service = serviceProcess('pgbouncer', 'pgbouncer', [...(asRoot ? ['-u', 'postgres'] : []), ini], () => canConnect(port), () => `:\n${log()}`);
  const b: PgBouncer = {
    ...service,
    port,
    through(url) {
      const u = new URL(url);
      u.hostname = '127.0.0.1';
      u.port = String(port);
      return u.toString();
    },
    log,
  };
  await b.start();
  return b;
}

/** A PgBouncer and a Redis started before the tests of the file and stopped after them. */
export function usePoolerAndRedis(): { readonly bouncer: PgBouncer; readonly redis: RedisServer } {
  let bouncer: PgBouncer | undefined;
  let redis: RedisServer | undefined;
  before(async () => {
    bouncer = await startPgBouncer();
    redis = await startRedis();
  });
  after(async () => {
    await bouncer?.stop();
    await redis?.stop();
  });
  return {
    get bouncer() {
      return bouncer!;
    },
    get redis() {
      return redis!;
    },
  };
}
