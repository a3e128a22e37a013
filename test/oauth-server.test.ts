/**
 * `outlast serve --oauth-*` behind a real authorization server (oidc-provider, fixtures/oidc-as.ts, its own process):
 * protected-resource metadata and challenges, tasks bound to the person (issuer + subject) across a token refresh,
 * two replicas on PostgreSQL and both wires, per-tool step-up scopes, key rotation, a second issuer, introspection,
 * and every kind of bad token refused with a 401 and a reason (never a 500, never a task).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { PG_URL, callTool, freePort, freshSchema, getTask, headersFor, metaFor, pgStoreUrl, rpc, startServer, waitForTask, type ServerProcess } from './helpers.js';
import { connectV1 } from './generations.js';
import { machineToken, refreshTokens, startAuthServer, userTokens, type AuthServer } from './oauth-harness.js';

const EXT = 'io.modelcontextprotocol/tasks';

function decode(token: string): Record<string, any> {
  return JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString('utf8'));
}

/** A POST to the MCP endpoint with any Authorization header (or none), answered however the front answers. */
async function postWith(url: string, authorization: string | undefined): Promise<{ status: number; www: string | null; body: string }> {
  const params = { name: 'sleep', arguments: { seconds: 0 }, _meta: metaFor({ extensions: { [EXT]: {} } }) };
  const headers = headersFor('tools/call', params);
  if (authorization !== undefined) headers.authorization = authorization;
  const res = await fetch(url, { method: 'POST', headers, body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params }) });
  return { status: res.status, www: res.headers.get('www-authenticate'), body: await res.text() };
}

describe('outlast serve as an OAuth resource server (oidc-provider, two replicas on PostgreSQL)', () => {
  let as1: AuthServer;
  let as2: AuthServer;
  let resource: string;
  let otherResource: string;
  let replicaA: ServerProcess;
  let replicaB: ServerProcess;
  let schema: string;
  const seenTokens: string[] = [];

  before(async () => {
    const port = await freePort();
    resource = `http://127.0.0.1:${port}/mcp`;
    otherResource = 'http://127.0.0.1:9/another-api';
    as1 = await startAuthServer({ jwtResources: [resource, otherResource] });
    as2 = await startAuthServer({ jwtResources: [resource] });
    schema = freshSchema('oauth');
    const args = (p: number) => [
      '--port', String(p), '--store', pgStoreUrl(schema),
      '--oauth-issuer', as1.issuer, '--oauth-issuer', as2.issuer, '--oauth-resource', resource, '--oauth-scopes', 'tasks',
      '--oauth-allow-http', '--oauth-jwks-cooldown-ms', '300', '--handle-after-ms', '300', '--log-level', 'debug',
    ];
    const env = { OUTLAST_FIXTURE_TOOL_SCOPES: 'slow_compute=deploy' };
    replicaA = await startServer(args(port), { env });
    replicaB = await startServer(args(0), { env });
  });
  after(async () => {
    await replicaA?.stop();
    await replicaB?.stop();
    await as1?.stop();
    await as2?.stop();
  });

  it('no token: 401 with WWW-Authenticate naming the path-aware resource metadata and the scope; the metadata lists both issuers', async () => {
    const r = await postWith(resource, undefined);
    assert.equal(r.status, 401);
    const prmUrl = resource.replace('/mcp', '/.well-known/oauth-protected-resource/mcp');
    assert.match(r.www!, /^Bearer /);
    assert.ok(r.www!.includes(`resource_metadata="${prmUrl}"`), r.www!);
    assert.ok(r.www!.includes('scope="tasks"'), r.www!);
    const prm = await fetch(prmUrl);
    assert.equal(prm.status, 200);
    assert.equal(prm.headers.get('access-control-allow-origin'), '*');
    assert.deepEqual(await prm.json(), { resource, authorization_servers: [as1.issuer, as2.issuer], scopes_supported: ['tasks'] });
    assert.equal((await fetch(prmUrl, { method: 'POST' })).status, 405);
    assert.equal((await fetch(prmUrl, { method: 'HEAD' })).status, 200);
    // The resource has a path: its document is not served at the root (RFC 9728 §3.3 would make it invalid there).
    assert.equal((await fetch(resource.replace('/mcp', '/.well-known/oauth-protected-resource'))).status, 404);
  });

  it("a person's task: created on one replica, read after a token refresh on the other; bob through the same client sees it as an unknown id on both wires, in handles and in listen", async () => {
    const alice = await userTokens(as1, 'alice', resource);
    const bob = await userTokens(as1, 'bob', resource);
    seenTokens.push(alice.access_token, bob.access_token, alice.refresh_token!);
    assert.equal(decode(alice.access_token).client_id, decode(bob.access_token).client_id, 'one OAuth client for both people');
    const created = await callTool(replicaA.url, 'sleep', { seconds: 2 }, { token: alice.access_token });
    assert.equal(created.status, 200);
    const taskId = created.result.taskId as string;
    assert.equal(created.result.resultType, 'task');

    const refreshed = await refreshTokens(as1, alice.refresh_token!, resource);
    seenTokens.push(refreshed.access_token);
    assert.notEqual(refreshed.access_token, alice.access_token);
    const done = await waitForTask(replicaB.url, taskId, undefined, { token: refreshed.access_token });
    assert.equal(done.status, 'completed');

    const unknown = await getTask(replicaB.url, 'no-such-task-id', { token: bob.access_token });
    const bobs = await getTask(replicaB.url, taskId, { token: bob.access_token });
    assert.ok(unknown.error && bobs.error);
    assert.deepEqual({ ...bobs.error, status: bobs.status }, { ...unknown.error, status: unknown.status }, "another person's task reads exactly like an unknown id");
    for (const method of ['tasks/cancel', 'tasks/update'] as const) {
      const params = method === 'tasks/update' ? { taskId, inputResponses: {} } : { taskId };
      const theirs = await rpc(replicaA.url, method, params, { token: bob.access_token });
      const none = await rpc(replicaA.url, method, { ...params, taskId: 'no-such-task-id' }, { token: bob.access_token });
      assert.deepEqual(theirs.error, none.error, `${method}: the same answer as for an unknown id`);
    }

    // The same subject at another issuer is another person.
    const aliceElsewhere = await userTokens(as2, 'alice', resource);
    seenTokens.push(aliceElsewhere.access_token);
    assert.deepEqual((await getTask(replicaA.url, taskId, { token: aliceElsewhere.access_token })).error, unknown.error);

    // Listen: bob's stream honours none of alice's ids.
    const params = { notifications: { taskIds: [taskId] }, _meta: metaFor({ extensions: { [EXT]: {} } }) };
    const listen = async (token: string) => {
      const ac = new AbortController();
      const res = await fetch(replicaA.url, {
        method: 'POST',
        headers: { ...headersFor('subscriptions/listen', params, { token }) },
        body: JSON.stringify({ jsonrpc: '2.0', id: 'l1', method: 'subscriptions/listen', params }),
        signal: ac.signal,
      });
      const reader = res.body!.getReader();
      let text = '';
      while (!text.includes('acknowledged')) text += Buffer.from((await reader.read()).value!).toString('utf8');
      ac.abort();
      return JSON.parse(/data: (.*acknowledged.*)/.exec(text)![1]!).params.notifications.taskIds as string[];
    };
    assert.deepEqual(await listen(refreshed.access_token), [taskId]);
    assert.deepEqual(await listen(bob.access_token), []);

    // Handles (a client without task support): bob's status call on alice's task reads as unknown.
    const handled = await callTool(replicaA.url, 'sleep', { seconds: 2 }, { token: alice.access_token, caps: {} });
    const handleId = /"taskId": "([^"]+)"/.exec(JSON.stringify(handled.result.structuredContent ?? {}))?.[1] ?? (handled.result.structuredContent as { taskId?: string })?.taskId;
    assert.ok(handleId, `a handle came back: ${JSON.stringify(handled.result).slice(0, 300)}`);
    const bobStatus = await callTool(replicaA.url, 'outlast_task_status', { taskId: handleId, waitSeconds: 0 }, { token: bob.access_token, caps: {} });
    const noneStatus = await callTool(replicaA.url, 'outlast_task_status', { taskId: 'no-such-task-id', waitSeconds: 0 }, { token: bob.access_token, caps: {} });
    assert.equal(JSON.stringify(bobStatus.result).replaceAll(handleId!, 'X'), JSON.stringify(noneStatus.result).replaceAll('no-such-task-id', 'X'));

    // The 2025-11-25 wire (SDK v1 client): bob cannot read alice's task; alice can.
    const v1Alice = await connectV1(replicaB.url, { token: refreshed.access_token });
    assert.equal((await v1Alice.client.experimental.tasks.getTask(taskId)).status, 'completed');
    await v1Alice.close();
    const v1Bob = await connectV1(replicaB.url, { token: bob.access_token });
    await assert.rejects(v1Bob.client.experimental.tasks.getTask(taskId), /Task not found/);
    await v1Bob.close();

    // The store binds the task to issuer + subject, never the client id; an operator lists a person's tasks by it.
    const c = new pg.Client({ connectionString: PG_URL });
    await c.connect();
    try {
      const rows = (await c.query(`SELECT task_id, principal FROM "${schema}".tasks WHERE task_id = $1`, [taskId])).rows;
      assert.equal(rows[0]?.principal, `oauth:${as1.issuer}#alice`);
      const listed = (await c.query(`SELECT task_id FROM "${schema}".tasks WHERE principal = $1`, [`oauth:${as1.issuer}#alice`])).rows.map((r) => r.task_id);
      assert.ok(listed.includes(taskId));
    } finally {
      await c.end();
    }
  });

  it('a client-credentials token is its own principal, marked as a client', async () => {
    const machine = await machineToken(as1, resource);
    seenTokens.push(machine.access_token);
    assert.equal(decode(machine.access_token).sub, 'machine');
    const created = await callTool(replicaA.url, 'sleep', { seconds: 1 }, { token: machine.access_token });
    assert.equal(created.status, 200, JSON.stringify(created.message));
    const c = new pg.Client({ connectionString: PG_URL });
    await c.connect();
    try {
      const row = (await c.query(`SELECT principal FROM "${schema}".tasks WHERE task_id = $1`, [created.result.taskId])).rows[0];
      assert.equal(row?.principal, `oauth-client:${as1.issuer}#machine`);
    } finally {
      await c.end();
    }
  });

  it('step-up: a tool that needs `deploy` answers 403 insufficient_scope naming it before anything starts; with the scope it runs', async () => {
    const narrow = await userTokens(as1, 'carol', resource, 'openid tasks');
    const wide = await userTokens(as1, 'carol', resource, 'openid tasks deploy');
    seenTokens.push(narrow.access_token, wide.access_token);
    const c = new pg.Client({ connectionString: PG_URL });
    await c.connect();
    const count = async () => Number((await c.query(`SELECT count(*) AS n FROM "${schema}".tasks WHERE tool = 'slow_compute'`)).rows[0].n);
    try {
      const before = await count();
      const params = { name: 'slow_compute', arguments: { seconds: 0.5 }, _meta: metaFor({ extensions: { [EXT]: {} } }) };
      const res = await fetch(replicaA.url, {
        method: 'POST',
        headers: headersFor('tools/call', params, { token: narrow.access_token }),
        body: JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'tools/call', params }),
      });
      assert.equal(res.status, 403);
      const www = res.headers.get('www-authenticate')!;
      assert.match(www, /error="insufficient_scope"/);
      assert.match(www, /scope="deploy"/);
      assert.ok(www.includes('resource_metadata="'), www);
      assert.equal(await count(), before, 'nothing started');
      // The same on the 2025-11-25 wire (a task-augmented call, as an SDK v1 client sends it).
      const legacy = await fetch(replicaA.url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-11-25', authorization: `Bearer ${narrow.access_token}` },
        body: JSON.stringify({ jsonrpc: '2.0', id: 8, method: 'tools/call', params: { name: 'slow_compute', arguments: { seconds: 0.5 }, task: { ttl: 60000 } } }),
      });
      assert.equal(legacy.status, 403);
      assert.match(legacy.headers.get('www-authenticate')!, /scope="deploy"/);
      assert.equal(await count(), before, 'nothing started on the legacy wire either');
      const ok = await callTool(replicaA.url, 'slow_compute', { seconds: 0.5 }, { token: wide.access_token });
      assert.equal(ok.status, 200);
      assert.equal(ok.result.resultType, 'task');
      // tasks/get needs only the owner: the narrow token (same person) reads the task the wide one made.
      assert.equal((await waitForTask(replicaB.url, ok.result.taskId, undefined, { token: narrow.access_token })).status, 'completed');
    } finally {
      await c.end();
    }
  });

  it('bad tokens: each a 401 with a reason (431 for the oversized header), never a 500, never a task', async () => {
    const now = Math.floor(Date.now() / 1000);
    const good = { iss: as1.issuer, aud: resource, sub: 'mallory', client_id: 'app', scope: 'tasks', iat: now, exp: now + 600 };
    const jwks = (await (await fetch(`${as1.issuer}/jwks`)).json()) as { keys: Array<Record<string, string>> };
    const pub = JSON.stringify(jwks.keys[0]);
    const b64 = (v: unknown) => Buffer.from(typeof v === 'string' ? v : JSON.stringify(v)).toString('base64url');
    const { createHmac } = await import('node:crypto');
    const hmacHead = b64({ alg: 'HS256', typ: 'at+jwt', kid: jwks.keys[0]!.kid });
    const hmac = `${hmacHead}.${b64(good)}.${createHmac('sha256', pub).update(`${hmacHead}.${b64(good)}`).digest('base64url')}`;
    const otherIssuer = await startAuthServer({ jwtResources: [resource] });
    const cases: Array<[string, string, RegExp]> = [
      ['malformed', 'not-a-token', /malformed/],
      ['three junk segments', 'a.b.c', /malformed/],
      ['alg none', `${b64({ alg: 'none', typ: 'at+jwt' })}.${b64(good)}.`, /algorithm|malformed/],
      ['HMAC signed with the public key', hmac, /algorithm/],
      ['expired', await as1.sign({ ...good, iat: now - 7200, exp: now - 3600 }), /expired/],
      ['not yet valid', await as1.sign({ ...good, nbf: now + 3600 }), /not yet valid/],
      ['wrong issuer (an untrusted authorization server)', (await userTokens(otherIssuer, 'mallory', resource)).access_token, /issuer/],
      ['wrong audience (a token for another API)', (await userTokens(as1, 'alice', otherResource)).access_token, /not issued for this resource/],
      ['no subject claim', await as1.sign({ ...good, sub: undefined }), /no "sub" claim/],
      ['not an access token (typ)', await as1.sign(good, { typ: 'JWT' }), /typ/],
      ['no expiry', await as1.sign({ ...good, exp: undefined }), /exp/],
      ['tampered signature', (await as1.sign(good)).slice(0, -4) + 'AAAA', /signature/],
    ];
    await otherIssuer.stop();
    seenTokens.push(...cases.map(([, token]) => token).filter((t) => t.length > 20));
    for (const [name, token, reason] of cases) {
      const r = await postWith(replicaA.url, `Bearer ${token}`);
      assert.equal(r.status, 401, `${name}: ${r.status} ${r.body}`);
      assert.match(r.www!, /error="invalid_token"/, name);
      assert.match(JSON.parse(r.body).error_description, reason, `${name}: ${r.body}`);
    }
    const junk = await postWith(replicaA.url, `Bearer ${'x'.repeat(20 * 1024)}`);
    assert.ok(junk.status === 431 || junk.status === 401, `20 KB of junk: ${junk.status}`);
    const c = new pg.Client({ connectionString: PG_URL });
    await c.connect();
    try {
      const n = Number((await c.query(`SELECT count(*) AS n FROM "${schema}".tasks WHERE principal LIKE '%mallory%'`)).rows[0].n);
      assert.equal(n, 0, 'no task for any bad token');
    } finally {
      await c.end();
    }
  });

  it('key rotation: a token signed with a newly published key is accepted after one JWKS refetch; unknown kids refetch at most once per cooldown', async () => {
    const alice = await userTokens(as1, 'alice', resource);
    assert.equal((await getTask(replicaA.url, 'x', { token: alice.access_token })).status !== 401, true);
    await as1.rotate();
    const rotated = await userTokens(as1, 'alice', resource);
    seenTokens.push(alice.access_token, rotated.access_token);
    assert.notEqual(JSON.parse(Buffer.from(rotated.access_token.split('.')[0]!, 'base64url').toString()).kid, JSON.parse(Buffer.from(alice.access_token.split('.')[0]!, 'base64url').toString()).kid);
    // Accepted once the cooldown since the last fetch has passed (300 ms here): wait for the state, not a time.
    const deadline = Date.now() + 15_000;
    let status = 0;
    while (Date.now() < deadline) {
      status = (await postWith(replicaA.url, `Bearer ${rotated.access_token}`)).status;
      if (status === 200) break;
      assert.equal(status, 401);
      await new Promise((r) => setTimeout(r, 100));
    }
    assert.equal(status, 200, 'the new key was picked up');
    // A burst of tokens naming an unknown key: at most one refetch for the whole burst (per replica, per cooldown).
    const forged = await as1.sign({ iss: as1.issuer, aud: resource, sub: 'x', exp: Math.floor(Date.now() / 1000) + 60 }, { kid: 'no-such-key' });
    const hitsBefore = await as1.jwksHits();
    const burstStart = Date.now();
    const answers = await Promise.all(Array.from({ length: 20 }, () => postWith(replicaA.url, `Bearer ${forged}`)));
    // One fetch per 300 ms cooldown the burst spans (a loaded machine stretches it past one).
    const cooldowns = 1 + Math.floor((Date.now() - burstStart) / 300);
    assert.ok(answers.every((a) => a.status === 401));
    const hits = (await as1.jwksHits()) - hitsBefore;
    assert.ok(hits <= Math.min(cooldowns, 19), `JWKS fetched ${hits} times for 20 unknown-kid tokens over ${cooldowns} cooldown(s)`);
  });

  it('tokens are never stored: no access or refresh token in any row of the store, nor in the logs', async () => {
    const c = new pg.Client({ connectionString: PG_URL });
    await c.connect();
    try {
      const tables = (await c.query(`SELECT table_name FROM information_schema.tables WHERE table_schema = $1`, [schema])).rows.map((r) => r.table_name as string);
      assert.ok(tables.includes('tasks'));
      let dump = '';
      for (const t of tables) dump += JSON.stringify((await c.query(`SELECT * FROM "${schema}"."${t}"`)).rows);
      assert.ok(dump.includes(`oauth:${as1.issuer}#alice`), 'the dump has the rows');
      for (const token of seenTokens) assert.ok(!dump.includes(token), 'a token in the store');
    } finally {
      await c.end();
    }
    // Debug logs name why a token was refused, never the token.
    assert.match(replicaA.stderr(), /OAuth: request refused.*Token has expired/);
    for (const token of seenTokens) assert.ok(!replicaA.stderr().includes(token) && !replicaB.stderr().includes(token), 'a token in the logs');
  });
});

describe('introspection (opaque tokens, RFC 7662)', () => {
  let as: AuthServer;
  let server: ServerProcess;
  let resource: string;
  before(async () => {
    const port = await freePort();
    resource = `http://127.0.0.1:${port}/mcp`;
    as = await startAuthServer({ opaqueResources: [resource] });
    server = await startServer(['--port', String(port), '--oauth-issuer', as.issuer, '--oauth-resource', resource, '--oauth-allow-http', '--oauth-introspection-client-id', 'rs'], {
      env: { OUTLAST_OAUTH_INTROSPECTION_SECRET: 'rs-secret' },
    });
  });
  after(async () => {
    await server?.stop();
    await as?.stop();
  });

  it("an opaque token is introspected: the person's task is bound to issuer + subject; an unknown opaque token is 401 not active", async () => {
    const dana = await userTokens(as, 'dana', resource);
    assert.equal(dana.access_token.split('.').length, 1, 'an opaque token');
    const created = await callTool(server.url, 'sleep', { seconds: 2 }, { token: dana.access_token });
    assert.equal(created.status, 200, JSON.stringify(created.message));
    assert.equal((await waitForTask(server.url, created.result.taskId, undefined, { token: dana.access_token })).status, 'completed');
    const erin = await userTokens(as, 'erin', resource);
    const theirs = await getTask(server.url, created.result.taskId, { token: erin.access_token });
    assert.match(theirs.error!.message, /not found/i);
    const r = await postWith(server.url, 'Bearer opaque-but-unknown-token');
    assert.equal(r.status, 401);
    assert.match(JSON.parse(r.body).error_description, /not active/);
  });

  it('a server with --oauth-issuer but a wrong or http issuer refuses to start, with the reason', async () => {
    await assert.rejects(startServer(['--oauth-issuer', 'http://auth.example.com', '--oauth-resource', resource]), /must be https/);
    await assert.rejects(startServer(['--oauth-issuer', 'http://auth.example.com', '--oauth-resource', resource, '--oauth-allow-http']), /only on a loopback/);
    await assert.rejects(startServer(['--oauth-issuer', as.issuer]), /needs --oauth-resource/);
  });
});
