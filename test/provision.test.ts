/**
 * test/provision.sh, `npm test`'s first step: on this machine (everything there) it passes quietly; where something
 * is missing and it cannot install it (not root), it stops with exit 1 and one line naming the one command to run.
 * The "cannot install" runs are real: run by root, the script runs as the user `nobody`, with the missing part named
 * through the variables the tests themselves read (OUTLAST_CHROMIUM, OUTLAST_FAKETIME, OUTLAST_TEST_PG). `nobody` runs
 * it in a copy of what it reads (a checkout folder, ../shared/schemas beside it) in a temporary folder every user can
 * enter: the checkout itself may sit where `nobody` cannot (root's home, mode 700). Run by anyone else, the script runs
 * as that user, who cannot install either.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { chmodSync, copyFileSync, mkdirSync, readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { ROOT, freePort, tempDir } from './helpers.js';

const SCRIPT = readFileSync(join(ROOT, 'test', 'provision.sh'), 'utf8');
/** Root can install what is missing; the "cannot install" runs need a user who cannot. */
const AS_ROOT = process.getuid?.() === 0;

let reachable: string | undefined;
/** A checkout folder `nobody` can enter, with a copy of ../shared/schemas beside it (all the script reads there). */
function reachableCheckout(): string {
  if (reachable) return reachable;
  const base = tempDir('outlast-provision-');
  const checkout = join(base, 'checkout');
  const schemas = join(base, 'shared', 'schemas');
  mkdirSync(checkout);
  mkdirSync(schemas, { recursive: true });
  const from = join(ROOT, '..', 'shared', 'schemas');
  for (const f of readdirSync(from).filter((n) => n.endsWith('.schema.json'))) {
    copyFileSync(join(from, f), join(schemas, f));
    chmodSync(join(schemas, f), 0o644);
  }
  for (const d of [base, join(base, 'shared'), schemas, checkout]) chmodSync(d, 0o755);
  return (reachable = checkout);
}

/** The script as this user (`asAnother`: as a user who cannot install, in a checkout that user can reach). */
function provision(env: Record<string, string>, asAnother: boolean) {
  const nobody = asAnother && AS_ROOT;
  const cwd = nobody ? reachableCheckout() : ROOT;
  const own = { ...env, OUTLAST_ROOT: cwd, ...(nobody ? { HOME: cwd } : {}) };
  const cmd = nobody ? ['runuser', '-u', 'nobody', '--', 'env', ...Object.entries(own).map(([k, v]) => `${k}=${v}`), 'bash', '-s'] : ['bash', '-s'];
  const r = spawnSync(cmd[0]!, cmd.slice(1), { cwd, input: SCRIPT, env: { ...process.env, ...(nobody ? {} : own) }, encoding: 'utf8', timeout: 600_000 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr.trimEnd() };
}

describe('npm test provisions itself (test/provision.sh)', () => {
  it('passes quietly where everything is there', () => {
    const r = provision({}, false);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, '');
  });

  it('without chromium and no way to install it: one line with the command to run', () => {
    const r = provision({ OUTLAST_CHROMIUM: '/nonexistent/chromium' }, true);
    assert.equal(r.code, 1);
    assert.equal(r.stderr.split('\n').length, 1, r.stderr);
    assert.match(r.stderr, /^npm test needs Debian's chromium at \/nonexistent\/chromium: run `sudo apt-get install -y chromium`/);
  });

  it('without faketime: one line with the command to run', () => {
    const r = provision({ OUTLAST_FAKETIME: '/nonexistent/faketime' }, true);
    assert.equal(r.code, 1);
    assert.equal(r.stderr.split('\n').length, 1, r.stderr);
    assert.match(r.stderr, /^npm test needs faketime: run `sudo apt-get install -y faketime`/);
  });

  it('with nothing listening where PostgreSQL should be: one line saying so', async () => {
    const port = await freePort();
    const r = provision({ OUTLAST_TEST_PG: `postgres://postgres@127.0.0.1:${port}/test` }, true);
    assert.equal(r.code, 1);
    assert.equal(r.stderr.split('\n').length, 1, r.stderr);
    assert.match(r.stderr, new RegExp(`^npm test needs PostgreSQL on 127\\.0\\.0\\.1:${port}, where nothing listens: start it there`));
  });

  it('with PostgreSQL refusing the tests\' user: one line with its error', () => {
    const r = provision({ OUTLAST_TEST_PG: 'postgres://no_such_role_outlast@127.0.0.1:5432/test' }, true);
    assert.equal(r.code, 1);
    assert.equal(r.stderr.split('\n').length, 1, r.stderr);
    assert.match(r.stderr, /^npm test needs postgres:\/\/no_such_role_outlast@127\.0\.0\.1:5432\/test to accept the tests .*no_such_role_outlast/);
  });
});
