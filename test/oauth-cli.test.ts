/**
 * `outlast call` / `resume` / `login` / `logout` against the demo served behind OAuth (`outlast serve --oauth-*`,
 * oidc-provider as the authorization server): the CLI prints the sign-in URL, the test plays the browser at the
 * AS's login and consent forms, the call completes; the tokens are stored 0600 and `resume` uses them with no
 * sign-in; the journal holds no token; logout forgets them; a machine signs in with --client-credentials.
 */
import assert from 'node:assert/strict';
import { readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { ROOT, freePort, startServer, tempDir, type ServerProcess } from './helpers.js';
import { runCli } from './client-helpers.js';
import { docBlock } from './doc-blocks.js';
import { playBrowser, startAuthServer, type AuthServer } from './oauth-harness.js';

const SIGN_IN = /open this URL in a browser:\n\s+(\S+)/;

describe('the outlast CLI against the demo behind OAuth', () => {
  let as: AuthServer;
  let server: ServerProcess;
  let resource: string;
  let dir: string;
  let env: NodeJS.ProcessEnv;
  before(async () => {
    const port = await freePort();
    resource = `http://127.0.0.1:${port}/mcp`;
    as = await startAuthServer({ jwtResources: [resource] });
    dir = tempDir();
    // The command docs/oauth.md shows, run as written (with this run's port and issuer).
    const shown = docBlock('docs/oauth.md', 'serve-demo').code.trim();
    const argv = shown.replace('$PORT', String(port)).replace('$ISSUER', as.issuer).replace('$RESOURCE', resource).split(/\s+/);
    assert.deepEqual(argv.slice(0, 2), ['outlast', 'serve']);
    server = await startServer([...argv.slice(3), '--store', `sqlite:${join(dir, 'server.db')}`], { module: join(ROOT, argv[2]!) });
    env = { OUTLAST_CREDENTIALS: join(dir, 'state', 'oauth.json'), OUTLAST_JOURNAL: join(dir, 'journal.db'), OUTLAST_CLIENT_SECRET: '' };
  });
  after(async () => {
    await server?.stop();
    await as?.stop();
  });

  it('call signs in through the printed URL and completes; resume reuses the stored token; the journal holds no token', async () => {
    const run = runCli(['call', resource, 'reindex', '{"collection":"docs","documents":20000}'], { env });
    const url = (await run.waitFor(SIGN_IN, 20_000))[1]!;
    assert.equal(new URL(url).origin, as.issuer, 'the URL is the authorization server');
    await playBrowser(url, 'alice', { follow: true }).catch(async (e) => {
      await run.exited;
      assert.fail(`${e.message}: ${e.cause?.message}\n${run.stderr()}`);
    });
    const { code } = await run.exited;
    assert.equal(code, 0, run.stderr());
    assert.match(run.stdout(), /Reindexed 20,000 documents in "docs"/);
    const credentials = env.OUTLAST_CREDENTIALS!;
    assert.equal(statSync(credentials).mode & 0o777, 0o600);
    const stored = JSON.parse(readFileSync(credentials, 'utf8'));
    const token = stored[resource][as.issuer].tokens.access_token as string;
    assert.ok(token.split('.').length === 3);

    const detached = runCli(['call', resource, 'reindex', '{"collection":"big","documents":30000}', '--detach'], { env });
    assert.equal((await detached.exited).code, 0, detached.stderr());
    assert.doesNotMatch(detached.stderr(), SIGN_IN, 'no second sign-in');
    const taskId = /\S{20,}/.exec(detached.stdout())?.[0];
    assert.ok(taskId, `a task id: ${detached.stdout()} ${detached.stderr()}`);
    const resumed = runCli(['resume', taskId!], { env });
    assert.equal((await resumed.exited).code, 0, resumed.stderr());
    assert.doesNotMatch(resumed.stderr(), SIGN_IN, 'resume uses the stored token');
    assert.match(resumed.stdout(), /Reindexed 30,000 documents in "big"/);

    const journal = readFileSync(env.OUTLAST_JOURNAL!);
    assert.ok(!journal.includes(token), 'the journal holds no access token');
    assert.ok(!journal.includes(String(stored[resource][as.issuer].tokens.refresh_token ?? '\u0000none')), 'nor the refresh token');
  });

  it('logout forgets the tokens (the next call asks to sign in again); login signs in ahead of a call; --client-credentials needs no browser', async () => {
    const out = runCli(['logout', resource], { env });
    assert.equal((await out.exited).code, 0);
    assert.match(out.stderr(), /Signed out/);
    assert.equal(JSON.parse(readFileSync(env.OUTLAST_CREDENTIALS!, 'utf8'))[resource], undefined);

    const login = runCli(['login', resource], { env });
    await playBrowser((await login.waitFor(SIGN_IN, 20_000))[1]!, 'bob', { follow: true });
    assert.equal((await login.exited).code, 0, login.stderr());
    assert.match(login.stderr(), /Signed in/);
    const call = runCli(['call', resource, 'reindex', '{"collection":"after-login","documents":10}'], { env });
    assert.equal((await call.exited).code, 0, call.stderr());
    assert.doesNotMatch(call.stderr(), SIGN_IN);

    const machine = runCli(['call', resource, 'reindex', '{"collection":"m","documents":10}', '--client-credentials', '--client-id', 'machine'], {
      env: { ...env, OUTLAST_CLIENT_SECRET: 'machine-secret', OUTLAST_CREDENTIALS: join(dir, 'none', 'oauth.json') },
    });
    assert.equal((await machine.exited).code, 0, machine.stderr());
    assert.doesNotMatch(machine.stderr(), SIGN_IN);
    assert.throws(() => statSync(join(dir, 'none', 'oauth.json')), 'client-credentials tokens are not written to disk');
  });
});
