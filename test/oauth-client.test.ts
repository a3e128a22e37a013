/**
 * TaskClient with OAuth (`auth`: an OAuthClientProvider) against `outlast serve --oauth-*` behind oidc-provider:
 * a person signs in through the loopback redirect (the test plays the browser at the AS's forms), dynamic client
 * registration, PKCE, `resource`; tokens stored 0600 and reused by a second client with no browser; step-up to a
 * scoped tool; client credentials for a machine.
 */
import assert from 'node:assert/strict';
import { statSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { CredentialStore, LoopbackOAuthProvider, TaskClient } from '../src/client/index.js';
import { freePort, startServer, tempDir, type ServerProcess } from './helpers.js';
import { playBrowser, startAuthServer, type AuthServer } from './oauth-harness.js';

describe('TaskClient with OAuth (oidc-provider, loopback redirect)', () => {
  let as: AuthServer;
  let server: ServerProcess;
  let resource: string;
  before(async () => {
    const port = await freePort();
    resource = `http://127.0.0.1:${port}/mcp`;
    as = await startAuthServer({ jwtResources: [resource] });
    server = await startServer(
      ['--port', String(port), '--oauth-issuer', as.issuer, '--oauth-resource', resource, '--oauth-scopes', 'tasks', '--oauth-allow-http', '--store', `sqlite:${join(tempDir(), 't.db')}`],
      { env: { OUTLAST_FIXTURE_TOOL_SCOPES: 'slow_compute=deploy' } },
    );
  });
  after(async () => {
    await server?.stop();
    await as?.stop();
  });

  it('signs a person in once (DCR, PKCE, resource), stores the tokens 0600, and a second client reuses them without a browser; step-up for a scoped tool', async () => {
    const dir = tempDir();
    const store = new CredentialStore(join(dir, 'state', 'oauth.json'));
    const shown: URL[] = [];
    const provider = new LoopbackOAuthProvider({
      serverUrl: resource,
      store,
      onAuthorizationUrl: async (url) => {
        shown.push(url);
        if (process.env.OIDC_AS_DEBUG) process.stderr.write(`authorize: ${url.href}\n`);
        await playBrowser(url.href, 'alice', { follow: true });
      },
    });
    const client = new TaskClient({ url: resource, auth: provider });
    try {
      const result = await client.callTool('sleep', { seconds: 2 });
      assert.equal(result.isError, undefined);
      assert.equal(shown.length, 1, 'one sign-in');
      const q = shown[0]!.searchParams;
      assert.equal(q.get('code_challenge_method'), 'S256');
      assert.equal(q.get('resource'), resource);
      assert.ok(q.get('state'));
      assert.match(q.get('scope') ?? '', /\btasks\b/);
      assert.match(q.get('redirect_uri') ?? '', /^http:\/\/127\.0\.0\.1:\d+\/callback$/);
      assert.equal(statSync(store.path).mode & 0o777, 0o600);
      assert.equal(statSync(join(dir, 'state')).mode & 0o777, 0o700);
      const saved = store.get(resource, as.issuer);
      assert.ok(saved.tokens?.access_token && saved.client?.client_id, 'tokens and the registered client are stored under the issuer');

      // Step-up: slow_compute needs `deploy`; the client asks for the union and a person signs in again.
      const scoped = await client.callTool('slow_compute', { seconds: 0.2 });
      assert.equal(scoped.isError, undefined);
      // oidc-provider limits a registered client to the scopes it registered with: the client registers again, once.
      const signIns: number = shown.length;
      assert.ok(signIns === 2 || signIns === 3, `a second sign-in for the wider scope (${shown.length} shown)`);
      const wider = shown.at(-1)!.searchParams.get('scope')!.split(' ');
      assert.ok(wider.includes('deploy') && wider.includes('tasks'), `the union keeps the scopes asked before: ${wider}`);
    } finally {
      await client.close();
      provider.close();
    }

    const second = new LoopbackOAuthProvider({ serverUrl: resource, store, onAuthorizationUrl: () => assert.fail('no browser the second time') });
    const again = new TaskClient({ url: resource, auth: second });
    try {
      assert.equal((await again.callTool('sleep', { seconds: 0 })).isError, undefined);
    } finally {
      await again.close();
      second.close();
    }
  });

  it('client credentials: a machine, no browser, nothing stored', async () => {
    const provider = new LoopbackOAuthProvider({ serverUrl: resource, clientCredentials: true, clientId: 'machine', clientSecret: 'machine-secret' });
    const client = new TaskClient({ url: resource, auth: provider });
    try {
      const r = await client.callTool('sleep', { seconds: 0 });
      assert.equal(r.isError, undefined);
    } finally {
      await client.close();
    }
  });
});

describe('TaskClient with OAuth: an expired access token is refreshed, no browser', () => {
  let as: AuthServer;
  let server: ServerProcess;
  let resource: string;
  before(async () => {
    const port = await freePort();
    resource = `http://127.0.0.1:${port}/mcp`;
    as = await startAuthServer({ jwtResources: [resource], accessTtlS: 2 });
    server = await startServer(['--port', String(port), '--oauth-issuer', as.issuer, '--oauth-resource', resource, '--oauth-scopes', 'tasks', '--oauth-allow-http']);
  });
  after(async () => {
    await server?.stop();
    await as?.stop();
  });

  it('refreshes with the stored refresh token and stores the rotated one', async () => {
    const store = new CredentialStore(join(tempDir(), 'oauth.json'));
    let signIns = 0;
    const provider = new LoopbackOAuthProvider({ serverUrl: resource, store, onAuthorizationUrl: async (u) => {
      signIns++;
      await playBrowser(u.href, 'frank', { follow: true });
    } });
    const client = new TaskClient({ url: resource, auth: provider });
    try {
      await client.callTool('sleep', { seconds: 0 });
      assert.equal(signIns, 1);
      const first = store.get(resource, as.issuer).tokens!;
      assert.ok(first.refresh_token, 'offline_access gave a refresh token');
      // Wait for the state (the server refuses the stored token), not for a time.
      for (const deadline = Date.now() + 20_000; ; ) {
        const r = await fetch(resource, { method: 'POST', headers: { authorization: `Bearer ${first.access_token}`, 'content-type': 'application/json' }, body: '{}' });
        if (r.status === 401) break;
        assert.ok(Date.now() < deadline, 'the token never expired');
        await new Promise((res) => setTimeout(res, 200));
      }
      await client.callTool('sleep', { seconds: 0 });
      assert.equal(signIns, 1, 'no second sign-in');
      const second = store.get(resource, as.issuer).tokens!;
      assert.notEqual(second.access_token, first.access_token);
      assert.notEqual(second.refresh_token, first.refresh_token, 'the rotated refresh token is stored');
    } finally {
      await client.close();
      provider.close();
    }
  });
  it('the credentials lock: holders never overlap (a refresh rotates the refresh token, so two at once would spend it twice)', async () => {
    const store = new CredentialStore(join(tempDir(), 'oauth.json'));
    let inside = 0;
    let most = 0;
    await Promise.all(Array.from({ length: 5 }, () => store.withLock(async () => {
      inside++;
      most = Math.max(most, inside);
      await new Promise((r) => setTimeout(r, 30));
      inside--;
    })));
    assert.equal(most, 1);
  });
});
