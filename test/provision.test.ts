/**
 * test/provision.sh, `npm test`'s first step: on this machine (everything there) it passes quietly; where something
 * is missing and it cannot install it (not root), it stops with exit 1 and one line naming the one command to run.
 * The "cannot install" runs are real: the script runs as the user `nobody`, with the missing part named through the
 * variables the tests themselves read (OUTLAST_CHROMIUM, OUTLAST_FAKETIME, OUTLAST_TEST_PG).
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ROOT, freePort } from './helpers.js';

const SCRIPT = readFileSync(join(ROOT, 'test', 'provision.sh'), 'utf8');

function provision(env: Record<string, string>, asNobody: boolean) {
  const cmd = asNobody ? ['runuser', '-u', 'nobody', '--', 'env', ...Object.entries(env).map(([k, v]) => `${k}=${v}`), 'bash', '-s'] : ['bash', '-s'];
  const r = spawnSync(cmd[0]!, cmd.slice(1), { cwd: ROOT, input: SCRIPT, env: { ...process.env, ...(asNobody ? {} : env) }, encoding: 'utf8', timeout: 600_000 });
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
