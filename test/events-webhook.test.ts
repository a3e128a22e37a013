/**
 * MCP Events with webhook delivery: two real `outlast serve --events` replicas on one SQLite file, a real receiver on
 * loopback, deliveries verified with the `standardwebhooks` package. Subscribe (the challenge answered), a task
 * finished on the other replica delivered once, retries through a 500 and through the SIGKILL of the delivering
 * replica with one webhook-id, no redirect followed, private addresses refused without --events-allow-host, another
 * principal's task never delivered, unsubscribe and expiry stop delivery, an operator's deactivation told with a signed
 * `terminated` envelope (a failing endpoint's never), a large result delivered thin, poll and
 * stream see the same events with cursors that survive a restart, and bad input refused with nothing stored.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { createServer, type ServerResponse } from 'node:http';
import { createServer as createNetServer, type AddressInfo } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import Database from 'better-sqlite3';
import { Webhook } from 'standardwebhooks';
import type { Hit } from './webhook-receiver.js';
import { ROOT, TASKS_CAPS, callTool, parseSse, rpc, sleep, startServer, tempDir, type ServerProcess } from './helpers.js';

const MODULE = join(ROOT, 'dist', 'test', 'events-module.js');


async function until<T>(what: string, f: () => T | undefined | false | Promise<T | undefined | false>, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await f();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

const secretOf = () => `whsec_${randomBytes(32).toString('base64')}`;

describe('MCP Events: webhooks', () => {
  const servers: ServerProcess[] = [];
  const held: ServerResponse[] = [];
  const hits: Hit[] = [];
  /** path → how to answer the n-th event attempt (1-based); the challenge is always echoed unless the path says not. */
  const plans = new Map<string, (n: number, res: ServerResponse) => number | 'hold'>();
  let receiver: ReturnType<typeof createServer>;
  let base = '';
  let db = '';
  let args: string[] = [];
  const alice = { token: 'ta' };
  const bob = { token: 'tb' };

  before(async () => {
    receiver = createServer((req, res) => {
      let body = '';
      req.on('data', (c) => (body += c));
      req.on('end', () => {
        const path = req.url ?? '/';
        let json: Record<string, any> = {};
        try {
          json = JSON.parse(body);
        } catch {
          /* not JSON */
        }
        const hit: Hit = { path, headers: req.headers, body, json };
        hits.push(hit);
        const answer = (status: number, payload = '') => {
          hit.answered = status;
          res.writeHead(status, status === 302 ? { location: `${base}/target` } : { 'content-type': 'application/json' }).end(payload);
        };
        if (json.type === 'verification') {
          if (path.startsWith('/wrong-echo')) return answer(200, JSON.stringify({ challenge: 'nope' }));
          return answer(200, JSON.stringify({ challenge: json.challenge }));
        }
        const plan = plans.get(path.split('?')[0]!);
        const n = hits.filter((h) => h.path === path && h.json.type !== 'verification').length;
        const what = plan ? plan(n, res) : 200;
        if (what === 'hold') return void held.push(res);
        answer(what);
      });
    });
    await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
    base = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}`;
    db = join(tempDir(), 'tasks.db');
    args = ['--store', `sqlite:${db}`, '--events', '--events-allow-host', '127.0.0.1', '--events-retry-ms', '200', '--events-timeout-ms', '2000',
      '--bearer', 'ta=alice', '--bearer', 'tb=bob', '--heartbeat-ms', '500', '--lease-ms', '2000'];
    servers.push(await startServer(args, { module: MODULE }));
    servers.push(await startServer(args, { module: MODULE }));
  });
  after(async () => {
    for (const r of held) r.destroy();
    receiver.closeAllConnections();
    receiver.close();
    for (const s of servers) await s.stop('SIGKILL');
  });

  const subscribe = (url: string, who: { token: string }, params: Record<string, unknown>, server = 0) =>
    rpc(servers[server]!.url, 'events/subscribe', { name: 'outlast.task.finished', arguments: {}, cursor: null, ...params, delivery: { mode: 'webhook', url, ...(params.delivery as object) } }, who);
  const events = (path: string) => hits.filter((h) => h.path === path && h.json.type !== 'verification');
  const startTask = async (who: { token: string }, tool: string, a: Record<string, unknown>, server = 1) => {
    const r = await callTool(servers[server]!.url, tool, a, { ...who, caps: TASKS_CAPS });
    assert.ok(r.result.taskId, `a task was created: ${JSON.stringify(r.message).slice(0, 300)}`);
    return r.result.taskId as string;
  };

  it('server/discover advertises events; events/list describes the three status events and the output event', async () => {
    const d = await rpc(servers[0]!.url, 'server/discover', {}, alice);
    assert.deepEqual(d.result.capabilities.events, { listChanged: false });
    assert.ok(d.result.capabilities.extensions['io.modelcontextprotocol/events']);
    const l = await rpc(servers[0]!.url, 'events/list', {}, alice);
    assert.deepEqual(l.result.events.map((e: { name: string }) => e.name), ['outlast.task.finished', 'outlast.task.input_required', 'outlast.task.status', 'outlast.task.output']);
    const status = l.result.events.find((e: { name: string }) => e.name === 'outlast.task.status');
    assert.deepEqual(status.inputSchema.required, ['taskId']);
    assert.ok(l.result.events.every((e: { delivery: string[] }) => e.delivery.includes('webhook')));
  });

  it('subscribe answers the challenge; a task finished on the other replica arrives once, signed; another principal\'s never', async () => {
    const secret = secretOf();
    const url = `${base}/ok`;
    const sub = await subscribe(url, alice, { delivery: { secret } });
    assert.equal(sub.error, undefined, JSON.stringify(sub.error));
    assert.match(sub.result.id, /^sub_[0-9a-f]{32}$/);
    assert.ok(Date.parse(sub.result.refreshBefore) > Date.now());
    const challenge = hits.find((h) => h.path === '/ok' && h.json.type === 'verification')!;
    assert.ok(challenge, 'the challenge reached the endpoint before subscribe returned');
    assert.match(String(challenge.headers['webhook-id']), /^msg_verification_/);
    assert.equal(challenge.headers['x-mcp-subscription-id'], sub.result.id);
    new Webhook(secret).verify(challenge.body, challenge.headers as Record<string, string>);
    // Same identity with keys in another order: the same id (an idempotent refresh), no second subscription.
    const again = await subscribe(url, alice, { delivery: { secret } }, 1);
    assert.equal(again.result.id, sub.result.id);

    const bobsTask = await startTask(bob, 'work', { key: 'bob', ms: 10 });
    const taskId = await startTask(alice, 'work', { key: 'alice', ms: 50 });
    const got = await until('the delivery', () => events('/ok').find((h) => h.json.data?.taskId === taskId));
    const body = new Webhook(secret).verify(got.body, got.headers as Record<string, string>) as Record<string, any>;
    assert.equal(body.name, 'outlast.task.finished');
    assert.equal(body.data.status, 'completed');
    assert.equal(body.data.tool, 'work');
    assert.deepEqual(body.data.result.content, [{ type: 'text', text: 'done alice' }]);
    assert.equal(got.headers['webhook-id'], body.eventId);
    assert.equal(got.headers['x-mcp-subscription-id'], sub.result.id);
    // A later task's delivery arrives after it: by then the first was not delivered twice, and bob's never.
    const later = await startTask(alice, 'work', { key: 'later', ms: 0 });
    await until('the later delivery', () => events('/ok').find((h) => h.json.data?.taskId === later));
    assert.equal(events('/ok').filter((h) => h.json.data?.taskId === taskId).length, 1, 'delivered once');
    assert.equal(hits.filter((h) => h.json.data?.taskId === bobsTask).length, 0, "bob's task never reached alice's endpoint");
  });

  it('a 500 is retried under the same webhook-id, each attempt freshly signed', async () => {
    const secret = secretOf();
    plans.set('/fail-once', (n) => (n === 1 ? 500 : 200));
    assert.equal((await subscribe(`${base}/fail-once`, alice, { delivery: { secret } })).error, undefined);
    const taskId = await startTask(alice, 'work', { key: 'retry', ms: 0 });
    await until('the second attempt', () => events('/fail-once').filter((h) => h.json.data?.taskId === taskId).length >= 2);
    const attempts = events('/fail-once').filter((h) => h.json.data?.taskId === taskId);
    assert.deepEqual(attempts.map((a) => a.answered), [500, 200]);
    assert.equal(new Set(attempts.map((a) => a.headers['webhook-id'])).size, 1);
    for (const a of attempts) new Webhook(secret).verify(a.body, a.headers as Record<string, string>);
  });

  it('deliveries reuse a kept-alive connection; one the endpoint reset as it was reused costs no failed attempt', async () => {
    // A bare HTTP/1.1 endpoint: answers the first request of each connection 204 (kept alive), resets it on the next.
    const bodies: string[] = [];
    let resets = 0;
    const endpoint = createNetServer((socket) => {
      let buf = '';
      let answered = false;
      socket.on('data', (chunk) => {
        if (answered) return void (resets++, socket.resetAndDestroy());
        buf += chunk;
        const end = buf.indexOf('\r\n\r\n');
        const length = Number(/content-length: *(\d+)/i.exec(buf)?.[1] ?? 0);
        if (end < 0 || buf.length < end + 4 + length) return;
        const body = buf.slice(end + 4, end + 4 + length);
        answered = true;
        const json = JSON.parse(body) as { type?: string; challenge?: string };
        if (json.type === 'verification') {
          const echo = JSON.stringify({ challenge: json.challenge });
          return void socket.write(`HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: ${echo.length}\r\n\r\n${echo}`);
        }
        bodies.push(body);
        socket.write('HTTP/1.1 204 No Content\r\n\r\n');
      });
      socket.on('error', () => undefined);
    });
    await new Promise<void>((r) => endpoint.listen(0, '127.0.0.1', r));
    try {
      const sub = await subscribe(`http://127.0.0.1:${(endpoint.address() as AddressInfo).port}/reuse`, alice, { delivery: { secret: secretOf() } });
      assert.equal(sub.error, undefined, JSON.stringify(sub.error));
      // Three in turn, from two replicas: one of them delivers twice, on the connection its first delivery left open.
      const ids: string[] = [];
      for (const key of ['r1', 'r2', 'r3']) {
        const id = await startTask(alice, 'work', { key, ms: 0 });
        ids.push(id);
        await until(`the delivery of ${key}`, () => bodies.some((b) => b.includes(id)));
      }
      assert.ok(resets >= 1, 'a delivery went out on a kept-alive connection');
      assert.deepEqual(ids.map((id) => bodies.filter((b) => b.includes(id)).length), [1, 1, 1], 'each delivered once');
      const failed = servers.flatMap((s) => s.stderr().split('\n')).filter((l) => l.includes(sub.result.id) && /delivery failed|given up/.test(l));
      assert.deepEqual(failed, [], 'no attempt failed');
    } finally {
      endpoint.close();
    }
  });

  it('the delivering replica killed with SIGKILL mid-attempt: the other delivers, same webhook-id', async () => {
    const secret = secretOf();
    plans.set('/hold', (n) => (n === 1 ? 'hold' : 200));
    assert.equal((await subscribe(`${base}/hold`, alice, { delivery: { secret } })).error, undefined);
    const taskId = await startTask(alice, 'work', { key: 'kill', ms: 0 });
    await until('the held attempt', () => events('/hold').length >= 1);
    const store = new Database(db, { readonly: true });
    const claim = store.prepare(`SELECT r.pid FROM event_deliveries d JOIN replicas r ON r.replica_id = d.claimed_by JOIN event_subscriptions s ON s.sub_id = d.sub_id WHERE s.url LIKE '%/hold' AND d.state = 'pending' AND d.claimed_by IS NOT NULL`).get() as { pid: number };
    store.close();
    const victim = servers.find((s) => s.pid === claim.pid)!;
    assert.ok(victim, 'one of the replicas holds the claim');
    await victim.stop('SIGKILL');
    servers.splice(servers.indexOf(victim), 1);
    await until('the redelivery', () => events('/hold').find((h) => h.answered === 200), 30_000);
    const attempts = events('/hold');
    assert.equal(new Set(attempts.map((a) => a.headers['webhook-id'])).size, 1);
    assert.equal(attempts[0]!.json.data.taskId, taskId);
    new Webhook(secret).verify(attempts.at(-1)!.body, attempts.at(-1)!.headers as Record<string, string>);
    servers.push(await startServer(args, { module: MODULE }));
  });

  it('a redirect is not followed; a result over 256 KiB is delivered thin', async () => {
    plans.set('/redirect', () => 302);
    assert.equal((await subscribe(`${base}/redirect`, alice, { arguments: { tool: 'work' }, delivery: { secret: secretOf() } })).error, undefined);
    const secret = secretOf();
    assert.equal((await subscribe(`${base}/thin`, alice, { arguments: { tool: 'big' }, delivery: { secret } })).error, undefined);
    const taskId = await startTask(alice, 'work', { key: 'redirect', ms: 0 });
    await until('the redirected attempt', () => events('/redirect').find((h) => h.json.data?.taskId === taskId));
    const bigId = await startTask(alice, 'big', {});
    const thin = await until('the thin delivery', () => events('/thin').find((h) => h.json.data?.taskId === bigId));
    assert.ok(Buffer.byteLength(thin.body) <= 256 * 1024);
    const body = new Webhook(secret).verify(thin.body, thin.headers as Record<string, string>) as Record<string, any>;
    assert.equal(body.data.status, 'completed');
    assert.equal(body.data.result, undefined);
    assert.match(body.data.resultOmitted, /tasks\/get/);
    await sleep(500);
    assert.equal(hits.filter((h) => h.path === '/target').length, 0, 'the redirect target was never called');
  });

  it('an event the endpoint refuses as too large (413) is not retried; a signed gap envelope says it was skipped', async () => {
    const secret = secretOf();
    plans.set('/small', (n) => (n === 1 ? 413 : 200));
    assert.equal((await subscribe(`${base}/small`, alice, { arguments: { tool: 'work' }, delivery: { secret } })).error, undefined);
    const taskId = await startTask(alice, 'work', { key: 'gap', ms: 0 });
    const gap = await until('the gap envelope', () => events('/small').find((h) => h.json.type === 'gap'));
    new Webhook(secret).verify(gap.body, gap.headers as Record<string, string>);
    assert.match(String(gap.headers['webhook-id']), /^msg_gap_/);
    assert.match(gap.json.cursor, /^\d+$/);
    await sleep(600);
    assert.equal(events('/small').filter((h) => h.json.data?.taskId === taskId).length, 1, 'not retried after 413');
  });

  it('an operator deactivates a subscription on the dashboard: a signed terminated envelope tells the endpoint (retried, one webhook-id); a refresh resumes', async () => {
    // A third replica with the dashboard on the same store: the envelope is queued there and any replica delivers it.
    const dashServer = await startServer([...args, '--dashboard', '--operator', 'optoken-1=ops'], { module: MODULE });
    try {
      const secret = secretOf();
      plans.set('/ended', (n) => (n === 1 ? 500 : 200));
      const sub = await subscribe(`${base}/ended`, alice, { arguments: { tool: 'work' }, delivery: { secret } });
      assert.equal(sub.error, undefined, JSON.stringify(sub.error));
      assert.equal((await subscribe(`${base}/witness-ended`, alice, { arguments: { tool: 'work' }, delivery: { secret: secretOf() } })).error, undefined);
      const dash = dashServer.url.replace(/\/mcp$/, '/dashboard');
      const res = await fetch(`${dash}/subscriptions/${sub.result.id}/deactivate`, { method: 'POST', headers: { authorization: 'Bearer optoken-1', 'content-type': 'application/x-www-form-urlencoded' }, body: '', redirect: 'manual' });
      assert.equal(res.status, 303);
      const terminated = () => events('/ended').filter((h) => h.json.type === 'terminated');
      await until('the terminated envelope, after a 500', () => terminated().find((h) => h.answered === 200));
      const attempts = terminated();
      assert.deepEqual(attempts.map((a) => a.answered), [500, 200]);
      assert.equal(new Set(attempts.map((a) => a.headers['webhook-id'])).size, 1, 'one webhook-id across retries');
      assert.match(String(attempts[0]!.headers['webhook-id']), /^msg_terminated_[0-9a-f]{32}_\d+$/);
      for (const a of attempts) {
        const body = new Webhook(secret).verify(a.body, a.headers as Record<string, string>) as Record<string, any>;
        assert.equal(a.headers['x-mcp-subscription-id'], sub.result.id);
        assert.equal(body.type, 'terminated');
        assert.equal(body.error.code, -32012);
        assert.match(body.error.message, /operator .*deactivated this subscription; subscribe again/);
        assert.deepEqual(body.error.data, { reason: 'deactivated_by_operator' });
        assert.doesNotMatch(a.body, /ops/, "the operator's name is not sent");
      }
      // Deactivated: a finished task is not delivered there (another subscription of alice's gets it).
      const during = await startTask(alice, 'work', { key: 'deactivated', ms: 0 });
      await until('the task delivered elsewhere', () => events('/witness-ended').find((h) => h.json.data?.taskId === during));
      // Refreshed by its owner: delivery resumes, and nothing says it ended again.
      const again = await subscribe(`${base}/ended`, alice, { arguments: { tool: 'work' }, delivery: { secret } });
      assert.equal(again.result.id, sub.result.id);
      const resumed = await startTask(alice, 'work', { key: 'resumed', ms: 0 });
      const got = await until('the delivery after the refresh', () => events('/ended').find((h) => h.json.data?.taskId === resumed));
      new Webhook(secret).verify(got.body, got.headers as Record<string, string>);
      assert.equal(events('/ended').filter((h) => h.json.data?.taskId === during).length, 0, 'nothing delivered while deactivated');
      assert.equal(terminated().length, 2, 'no further terminated envelope');
    } finally {
      await dashServer.stop('SIGTERM');
    }
  });

  it('a subscription deactivated for failing is not sent terminated (nor is an unsubscribed or expired one, below)', async () => {
    plans.set('/down', () => 500);
    const sub = await subscribe(`${base}/down`, alice, { arguments: { tool: 'work' }, delivery: { secret: secretOf() } });
    assert.equal(sub.error, undefined, JSON.stringify(sub.error));
    assert.equal((await subscribe(`${base}/witness-down`, alice, { arguments: { tool: 'work' }, delivery: { secret: secretOf() } })).error, undefined);
    // One failure short of the 20 in a row that deactivate it (set in the store rather than waiting for 19 back-offs).
    const w = new Database(db);
    w.prepare(`UPDATE event_subscriptions SET failures = 19 WHERE sub_id = ?`).run(sub.result.id);
    const taskId = await startTask(alice, 'work', { key: 'down', ms: 0 });
    await until('the deactivation', () => (w.prepare(`SELECT active FROM event_subscriptions WHERE sub_id = ?`).get(sub.result.id) as { active: number }).active === 0);
    const queued = (w.prepare(`SELECT count(*) AS n FROM event_deliveries WHERE sub_id = ? AND seq < 0`).get(sub.result.id) as { n: number }).n;
    w.close();
    assert.equal(queued, 0, 'no terminated envelope queued');
    const marker = await startTask(alice, 'work', { key: 'down-marker', ms: 0 });
    await until('a later delivery elsewhere', () => events('/witness-down').find((h) => h.json.data?.taskId === marker));
    await sleep(500);
    assert.deepEqual(events('/down').map((h) => [h.json.data?.taskId, h.answered]), [[taskId, 500]], 'one failed attempt, then nothing: no retry, no terminated');
  });

  it('unsubscribe stops delivery; an expired subscription delivers nothing', async () => {
    const url = `${base}/gone`;
    assert.equal((await subscribe(url, alice, { delivery: { secret: secretOf() } })).error, undefined);
    const un = await rpc(servers[0]!.url, 'events/unsubscribe', { name: 'outlast.task.finished', arguments: {}, delivery: { mode: 'webhook', url } }, alice);
    assert.deepEqual(un.result, { resultType: 'complete' });
    const again = await rpc(servers[0]!.url, 'events/unsubscribe', { name: 'outlast.task.finished', arguments: {}, delivery: { url } }, alice);
    assert.equal(again.error, undefined, 'unsubscribe is idempotent');
    // Expiry: shorten the grant in the store (a grant is at least a minute), then finish a task.
    const expUrl = `${base}/expired`;
    const sub = await subscribe(expUrl, alice, { delivery: { secret: secretOf() } });
    const w = new Database(db);
    w.prepare(`UPDATE event_subscriptions SET refresh_before = ? WHERE sub_id = ?`).run(Date.now() - 1, sub.result.id);
    w.close();
    const taskId = await startTask(alice, 'work', { key: 'after', ms: 0 });
    const marker = await startTask(alice, 'work', { key: 'marker', ms: 0 });
    await until('a delivery of the marker elsewhere', () => events('/ok').find((h) => h.json.data?.taskId === marker));
    await sleep(500);
    assert.equal(events('/gone').length, 0, 'nothing after unsubscribe, not even a terminated envelope');
    assert.equal(events('/expired').length, 0, 'nothing after expiry, not even a terminated envelope');
    assert.ok(events('/ok').find((h) => h.json.data?.taskId === taskId), 'the live subscription got it');
  });

  it('refuses bad input with clear errors and stores nothing', async () => {
    const count = () => {
      const r = new Database(db, { readonly: true });
      const n = (r.prepare('SELECT count(*) AS n FROM event_subscriptions').get() as { n: number }).n;
      r.close();
      return n;
    };
    const before = count();
    const sent = hits.length;
    const cases: Array<[Record<string, unknown>, number, RegExp, { token: string }?]> = [
      [{ delivery: { url: 'not a url', secret: secretOf() } }, -32602, /not a valid URL/],
      [{ delivery: { url: 'http://example.com/hook', secret: secretOf() } }, -32602, /https/],
      [{ delivery: { url: 'https://user:pw@example.com/hook', secret: secretOf() } }, -32602, /credentials/],
      [{ delivery: { url: 'https://10.0.0.8/hook', secret: secretOf() } }, -32602, /private/],
      [{ delivery: { url: 'https://[::1]/hook', secret: secretOf() } }, -32602, /loopback/],
      [{ delivery: { url: `${base}/ok`, secret: 'abc' } }, -32602, /whsec_/],
      [{ delivery: { url: `${base}/ok`, secret: `whsec_${randomBytes(16).toString('base64')}` } }, -32602, /24 to 64/],
      [{ arguments: { junk: 'x'.repeat(100_000) }, delivery: { url: `${base}/ok`, secret: secretOf() } }, -32602, /larger than/],
      [{ arguments: { colour: 'red' }, delivery: { url: `${base}/ok`, secret: secretOf() } }, -32602, /Unknown argument/],
      [{ name: 'outlast.task.status', delivery: { url: `${base}/ok`, secret: secretOf() } }, -32602, /needs a taskId/],
      [{ name: 'nope', delivery: { url: `${base}/ok`, secret: secretOf() } }, -32011, /Unknown event/],
      [{ delivery: { mode: 'push', url: `${base}/ok`, secret: secretOf() } }, -32014, /not served/],
      [{ delivery: { url: `${base}/wrong-echo`, secret: secretOf() } }, -32015, /challenge_failed/],
    ];
    for (const [params, code, message] of cases) {
      const r = await subscribe(String((params.delivery as { url: string }).url), alice, params);
      assert.equal(r.error?.code, code, `${JSON.stringify(params).slice(0, 120)} → ${JSON.stringify(r.error)}`);
      assert.match(r.error!.message, message);
    }
    const anon = await rpc(servers[0]!.url, 'events/subscribe', { name: 'outlast.task.finished', arguments: {}, delivery: { mode: 'webhook', url: `${base}/ok`, secret: secretOf() } });
    assert.equal(anon.status, 401, 'no credentials: refused at the door');
    assert.equal(count(), before, 'nothing stored');
    assert.equal(hits.slice(sent).filter((h) => h.json.type === 'verification' && !h.path.startsWith('/wrong-echo')).length, 0, 'no challenge was sent for any refused subscribe');
  });

  it('without --events-allow-host: loopback refused, by literal and by a name that resolves to it, before any event', async () => {
    const strict = await startServer(['--store', `sqlite:${db}`, '--events', '--bearer', 'ta=alice'], { module: MODULE });
    try {
      const port = (receiver.address() as AddressInfo).port;
      const sent = hits.length;
      for (const [url, message] of [
        [`${base}/strict`, /https/],
        [`https://127.0.0.1:${port}/strict`, /points at a loopback address/],
        [`https://localhost:${port}/strict`, /resolves to a loopback address, not a public one/],
        [`https://169.254.169.254/latest`, /points at a metadata address/],
        [`https://[::ffff:127.0.0.1]:${port}/strict`, /points at a loopback address/],
      ] as const) {
        const r = await rpc(strict.url, 'events/subscribe', { name: 'outlast.task.finished', arguments: {}, delivery: { mode: 'webhook', url, secret: secretOf() } }, alice);
        assert.equal(r.error?.code, -32602, `${url}: ${JSON.stringify(r.error)}`);
        assert.match(r.error!.message, message);
      }
      assert.equal(hits.slice(sent).filter((h) => h.path === '/strict').length, 0, 'no request reached the receiver');
    } finally {
      await strict.stop('SIGTERM');
    }
  });

  it('1,000 subscriptions from one principal: the limit refuses past it with a clear error', async () => {
    const secret = secretOf();
    let refused: { code: number; message: string; data?: any } | undefined;
    let made = 0;
    for (let i = 0; i < 1000 && !refused; i++) {
      const r = await subscribe(`${base}/many?i=${i}`, bob, { delivery: { secret } });
      if (r.error) refused = r.error;
      else made++;
    }
    assert.equal(made, 100, 'the default limit is 100 live subscriptions');
    assert.equal(refused?.code, -32013);
    assert.deepEqual(refused?.data, { limit: 'subscriptions', max: 100 });
    assert.match(refused!.message, /unsubscribe/);
  });

  it('events/poll and events/stream see the same events, with cursors that survive a restart', async () => {
    const url = servers[0]!.url;
    const start = await rpc(url, 'events/poll', { name: 'outlast.task.finished', arguments: { tool: 'work' }, cursor: null }, alice);
    assert.equal(start.error, undefined, JSON.stringify(start.error));
    assert.deepEqual(start.result.events, []);
    const cursor = start.result.cursor as string;
    const ac = new AbortController();
    const res = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2026-07-28', authorization: 'Bearer ta' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 's1', method: 'events/stream', params: { name: 'outlast.task.finished', arguments: { tool: 'work' }, cursor } }),
      signal: ac.signal,
    });
    assert.match(res.headers.get('content-type') ?? '', /text\/event-stream/);
    let text = '';
    const reader = res.body!.getReader();
    const reading = (async () => {
      try {
        for (let c = await reader.read(); !c.done; c = await reader.read()) text += Buffer.from(c.value).toString('utf8');
      } catch {
        /* aborted */
      }
    })();
    const frames = () => parseSse(text.slice(0, text.lastIndexOf('\n\n') + 2)).filter((f) => f.method === 'notifications/events/event');
    const ids = [await startTask(alice, 'work', { key: 'p1', ms: 0 }), await startTask(alice, 'work', { key: 'p2', ms: 0 })];
    await startTask(bob, 'work', { key: 'bob-p', ms: 0 });
    await until('both events on the stream', () => frames().length >= 2);
    ac.abort();
    await reading;
    assert.equal(parseSse(text)[0]!.method, 'notifications/events/active');
    // Restart every replica: the cursor is the store's.
    for (const s of servers.splice(0)) await s.stop('SIGTERM');
    servers.push(await startServer(args, { module: MODULE }));
    const polled = await rpc(servers[0]!.url, 'events/poll', { name: 'outlast.task.finished', arguments: { tool: 'work' }, cursor, timeoutMs: 5000 }, alice);
    assert.deepEqual(polled.result.events.map((e: any) => e.data.taskId), ids);
    assert.deepEqual(frames().map((f: any) => f.params.data.taskId), ids, 'the stream saw the same events');
    assert.deepEqual(frames().map((f: any) => f.params.eventId), polled.result.events.map((e: any) => e.eventId));
    const next = await rpc(servers[0]!.url, 'events/poll', { name: 'outlast.task.finished', arguments: { tool: 'work' }, cursor: polled.result.cursor }, alice);
    assert.deepEqual(next.result.events, []);
  });
});
