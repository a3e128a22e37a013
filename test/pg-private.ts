/**
 * A private PostgreSQL cluster for tests that restart the database: initdb into a temporary folder, started on a
 * free loopback port with the machine's PostgreSQL binaries (as the `postgres` user when running as root), stopped
 * by `pg_ctl` when the run ends.
 */
import { execFileSync } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { freePort } from './helpers.js';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

function binDir(): string {
  const base = '/usr/lib/postgresql';
  const versions = existsSync(base) ? readdirSync(base).sort((a, b) => Number(b) - Number(a)) : [];
  for (const v of versions) if (existsSync(join(base, v, 'bin', 'pg_ctl'))) return join(base, v, 'bin');
  throw new Error('PostgreSQL server binaries not found under /usr/lib/postgresql');
}

export interface PrivatePostgres {
  url: string;
  port: number;
  /** Stops the server the way a crash would (immediate: no checkpoint, recovery on start). */
  crash(): void;
  start(): void;
  stop(): void;
}

export async function startPrivatePostgres(): Promise<PrivatePostgres> {
  const bin = binDir();
  const dir = mkdtempSync(join(tmpdir(), 'outlast-pg-'));
  const data = join(dir, 'data');
  const asRoot = process.getuid?.() === 0;
  if (asRoot) {
    const uid = Number(execFileSync('id', ['-u', 'postgres']).toString().trim());
    const gid = Number(execFileSync('id', ['-g', 'postgres']).toString().trim());
    chownSync(dir, uid, gid);
    chmodSync(dir, 0o700);
  }
  const run = (cmd: string, args: string[]) => {
    const full = [join(bin, cmd), ...args];
    if (asRoot) execFileSync('su', ['postgres', '-s', '/bin/sh', '-c', full.map((a) => `'${a.replace(/'/g, `'\\''`)}'`).join(' ')], { stdio: 'pipe' });
    else execFileSync(full[0]!, full.slice(1), { stdio: 'pipe' });
  };
  const port = await freePort();
  run('initdb', ['-D', data, '-U', 'postgres', '--auth=trust', '--no-sync', '-E', 'UTF8']);
  const opts = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c max_connections=100 -c fsync=on`;
  const pg: PrivatePostgres = {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    port,
    start: () => run('pg_ctl', ['-D', data, '-o', opts, '-l', join(dir, 'log'), '-w', 'start']),
    crash: () => run('pg_ctl', ['-D', data, '-m', 'immediate', '-w', 'stop']),
    stop: () => {
      try {
        run('pg_ctl', ['-D', data, '-m', 'fast', '-w', 'stop']);
      } catch {
        /* not running */
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
  pg.start();
  return pg;
}
