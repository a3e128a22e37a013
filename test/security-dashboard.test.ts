/**
 * Dashboard sign-in (issue 40, finding 10), through real `outlast serve --dashboard` and `outlast dashboard`
 * processes and raw HTTP, as an attacker's page or a stolen cookie would come: a sign-in posted from an opaque or
 * foreign origin is refused; a session is a random id kept in the store, so signing out ends it on every process on
 * the store, rotating the operator token ends it, and it expires (lifetime and idle timeout); with an https public URL
 * the cookie is Secure although the process speaks plain HTTP behind its TLS proxy.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { sleep, startServer, tempDir, type ServerProcess } from './helpers.js';

const token = (who: string) => `${who}-${randomBytes(12).toString('hex')}`;

interface SignIn {
  status: number;
  /** The Set-Cookie header as sent. */
  setCookie: string;
  /** `name=value`, for a Cookie header. */
  cookie: string;
}

/** POSTs the sign-in form as a browser on `origin` would (no origin: as a script). */
async function signIn(base: string, operatorToken: string, headers: Record<string, string> = { origin: new URL(base).origin, 'sec-fetch-site': 'same-origin' }): Promise<SignIn> {
  const res = await fetch(`${base}/login`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded', ...headers }, body: `token=${encodeURIComponent(operatorToken)}`, redirect: 'manual' });
  await res.arrayBuffer();
  const setCookie = res.headers.get('set-cookie') ?? '';
  return { status: res.status, setCookie, cookie: setCookie.split(';')[0]! };
}

/** The status of the overview for a browser holding `cookie`. */
async function overview(base: string, cookie: string): Promise<number> {
  const res = await fetch(base, { headers: { cookie } });
  await res.arrayBuffer();
  return res.status;
}

/** Signs a browser out with the form its pages carry (the CSRF value read from the overview). */
async function signOut(base: string, cookie: string): Promise<number> {
  const html = await (await fetch(base, { headers: { cookie } })).text();
  const csrf = /name="_csrf" value="([^"]+)"/.exec(html)?.[1];
  assert.ok(csrf, 'the page carries the sign-out form');
  const res = await fetch(`${base}/logout`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded', cookie, origin: new URL(base).origin }, body: `_csrf=${encodeURIComponent(csrf)}`, redirect: 'manual' });
  await res.arrayBuffer();
  return res.status;
}

describe('dashboard sign-in', () => {
  const servers: ServerProcess[] = [];
  after(async () => {
    for (const s of servers) await s.stop();
  });
  /** `outlast serve --dashboard` on the SQLite file `db`; returns the dashboard's base URL. */
  async function serve(db: string, args: string[]): Promise<{ base: string; server: ServerProcess }> {
    const server = await startServer(['--store', `sqlite:${db}`, '--dashboard', ...args]);
    servers.push(server);
    return { base: server.url.replace(/\/mcp$/, '/dashboard'), server };
  }
  /** `outlast dashboard --store sqlite:db` beside it; returns its base URL once it listens. */
  async function dashboardAlone(db: string, args: string[]): Promise<string> {
    const alone = await startServer(['--store', `sqlite:${db}`, ...args], { command: ['dashboard'], ready: /outlast dashboard on (\S+)/ });
    servers.push(alone);
    return alone.url;
  }

  it('a sign-in posted from an opaque (null) origin, from another site, or marked cross-site is refused with 403 and no cookie', async () => {
    const anna = token('anna');
    const { base } = await serve(join(tempDir(), 'tasks.db'), ['--operator', `${anna}=anna`]);
    const refused: Array<Record<string, string>> = [{ origin: 'null' }, { origin: 'https://attacker.example' }, { 'sec-fetch-site': 'cross-site' }, { origin: 'null', 'sec-fetch-site': 'cross-site' }];
    for (const headers of refused) {
      const s = await signIn(base, anna, headers);
      assert.equal(s.status, 403, `refused: ${JSON.stringify(headers)}`);
      assert.equal(s.setCookie, '', `no cookie: ${JSON.stringify(headers)}`);
    }
    const ok = await signIn(base, anna);
    assert.equal(ok.status, 303, 'the dashboard\'s own form signs in');
    assert.equal(await overview(base, ok.cookie), 200);
  });

  it('a session is a random id: two sign-ins with one token get different cookies, and signing one out leaves the other signed in', async () => {
    const anna = token('anna');
    const { base } = await serve(join(tempDir(), 'tasks.db'), ['--operator', `${anna}=anna`]);
    const first = await signIn(base, anna);
    const second = await signIn(base, anna);
    assert.notEqual(first.cookie, second.cookie, 'each sign-in is a session of its own');
    assert.ok(!first.cookie.includes(anna) && !second.cookie.includes(anna), 'the cookie does not carry the token');
    assert.equal(await signOut(base, first.cookie), 303);
    assert.equal(await overview(base, first.cookie), 401, 'the signed-out session is refused');
    assert.equal(await overview(base, second.cookie), 200, 'the other browser stays signed in');
  });

  it('signing out ends the session on every process on the store: the old cookie is refused by the serve that issued it and by an outlast dashboard beside it', async () => {
    const anna = token('anna');
    const db = join(tempDir(), 'tasks.db');
    const { base } = await serve(db, ['--operator', `${anna}=anna`]);
    const alone = await dashboardAlone(db, ['--operator', `${anna}=anna`]);
    const s = await signIn(base, anna);
    assert.equal(await overview(base, s.cookie), 200);
    assert.equal(await overview(alone, s.cookie), 200, 'the session is read from the store by the other process');
    assert.equal(await signOut(base, s.cookie), 303);
    assert.equal(await overview(base, s.cookie), 401, 'refused where it was signed out');
    assert.equal(await overview(alone, s.cookie), 401, 'refused by the other process at once');
  });

  it('rotating the operator token ends its sessions: after a restart with a new --operator-file, the old cookie and the old token are refused', async () => {
    const dir = tempDir();
    const db = join(dir, 'tasks.db');
    const file = join(dir, 'operators');
    const before = token('anna-old');
    const rotated = token('anna-new');
    writeFileSync(file, `# operators\n${before}=anna\n`, { mode: 0o600 });
    const first = await serve(db, ['--operator-file', file]);
    const s = await signIn(first.base, before);
    assert.equal(await overview(first.base, s.cookie), 200);
    await first.server.stop();
    writeFileSync(file, `# operators, rotated\n${rotated}=anna\n`, { mode: 0o600 });
    const { base } = await serve(db, ['--operator-file', file]);
    assert.equal(await overview(base, s.cookie), 401, 'the session of the old token is refused');
    assert.equal((await signIn(base, before)).status, 401, 'the old token signs nobody in');
    const again = await signIn(base, rotated);
    assert.equal(await overview(base, again.cookie), 200, 'the new token signs in');
  });

  it('a session ends when its lifetime passes however it is used, and when it is not used for the idle timeout', async () => {
    const anna = token('anna');
    const lifetimeMs = 8000;
    const idleMs = 4000;
    const { base } = await serve(join(tempDir(), 'tasks.db'), ['--operator', `${anna}=anna`, '--dashboard-session-ms', String(lifetimeMs), '--dashboard-idle-ms', String(idleMs)]);
    // Used all along: it outlives the idle timeout, then ends at its lifetime.
    const used = await signIn(base, anna);
    const signedInAt = Date.now();
    let lastOk = 0;
    let refusedAt: number | undefined;
    while (refusedAt === undefined && Date.now() - signedInAt < lifetimeMs + 20_000) {
      if ((await overview(base, used.cookie)) === 200) lastOk = Date.now() - signedInAt;
      else refusedAt = Date.now() - signedInAt;
      await sleep(250);
    }
    assert.ok(lastOk > idleMs, `in use, the session outlived the idle timeout (last answered at ${lastOk} ms)`);
    assert.ok(refusedAt !== undefined && refusedAt >= lifetimeMs - 500, `refused once its lifetime passed (at ${refusedAt} ms)`);
    // Left alone past the idle timeout: refused, well before its lifetime.
    const idle = await signIn(base, anna);
    assert.equal(await overview(base, idle.cookie), 200);
    await sleep(idleMs + 1000);
    assert.equal(await overview(base, idle.cookie), 401, 'an idle session is refused');
    // The cookie itself says how long the browser keeps it.
    assert.match(used.setCookie, new RegExp(`Max-Age=${lifetimeMs / 1000}(;|$)`));
  });

  it('with an https public URL the session cookie is Secure though the process speaks plain HTTP (behind a TLS proxy), on serve and on outlast dashboard', async () => {
    const anna = token('anna');
    const db = join(tempDir(), 'tasks.db');
    const publicUrl = 'https://ops.example.test';
    const { base } = await serve(db, ['--operator', `${anna}=anna`, '--public-url', publicUrl]);
    assert.ok(base.startsWith('http://'), 'the process itself speaks plain HTTP');
    // Through the proxy: the browser's origin is the public URL, the Host the proxy passes is the process's own.
    const proxied = await signIn(base, anna, { origin: publicUrl, 'sec-fetch-site': 'same-origin' });
    assert.equal(proxied.status, 303);
    assert.match(proxied.setCookie, /; Secure(;|$)/);
    assert.match(proxied.setCookie, /HttpOnly/);
    assert.match(proxied.setCookie, /SameSite=Strict/);
    const alone = await dashboardAlone(db, ['--operator', `${anna}=anna`, '--public-url', publicUrl]);
    const direct = await signIn(alone, anna, { origin: publicUrl });
    assert.equal(direct.status, 303);
    assert.match(direct.setCookie, /; Secure(;|$)/);
  });
});
