/**
 * The deadlines of the PostgreSQL store (src/store/postgres/timeouts.ts): set from the store URL with clear errors,
 * applied to the database session, a query into a black hole fails as StoreUnavailableError within its deadline,
 * and the signal connection is re-established after a ping goes unanswered. Plus /healthz and /readyz on a server.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import pg from 'pg';
import { PgSignalBus, postgresStoreFromUrl, DEFAULT_PG_TIMEOUTS } from '../src/store/postgres/index.js';
import { StoreUnavailableError } from '../src/store/types.js';
import { PG_URL, freshSchema, sleep, until, useServer } from './helpers.js';
import { startFaultProxy } from './fault-proxy.js';

async function waitUntil(what: string, cond: () => boolean, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(25);
  }
}

describe('PostgreSQL store deadlines', () => {
  it('reads the settings from the store URL, with the documented defaults, and refuses bad values saying which', () => {
    const plain = postgresStoreFromUrl(`${PG_URL}?schema=${freshSchema('to')}`);
    assert.deepEqual(plain.timeouts, DEFAULT_PG_TIMEOUTS);
    assert.deepEqual(DEFAULT_PG_TIMEOUTS, { connectTimeoutMs: 5000, queryTimeoutMs: 10000, statementTimeoutMs: 8000, keepAliveMs: 10000, signalPingMs: 5000 });
    const set = postgresStoreFromUrl(`${PG_URL}?connect_timeout_ms=700&query_timeout_ms=900&statement_timeout_ms=0&keepalive_ms=0&signal_ping_ms=300`);
    assert.deepEqual(set.timeouts, { connectTimeoutMs: 700, queryTimeoutMs: 900, statementTimeoutMs: 0, keepAliveMs: 0, signalPingMs: 300 });
    const cfg = set.clientConfig();
    assert.equal(cfg.connectionString?.includes('timeout'), false, 'Outlast parameters are not passed on to node-postgres');
    assert.equal(cfg.query_timeout, 900);
    assert.equal(cfg.keepAlive, false);
    for (const bad of ['query_timeout_ms=abc', 'query_timeout_ms=0', 'connect_timeout_ms=-1', 'signal_ping_ms=1.5', 'statement_timeout_ms=99999999']) {
      const param = bad.split('=')[0]!;
      assert.throws(() => postgresStoreFromUrl(`${PG_URL}?${bad}`), new RegExp(`${param} must be an integer number of milliseconds`), bad);
    }
  });

  it('refuses a store whose cancel requests never reach the database (a pooler that does not forward them), naming statement_timeout_ms=0; which then passes', async () => {
    const proxy = await startFaultProxy({ host: '127.0.0.1', port: Number(new URL(PG_URL).port || 5432) }, { swallowCancels: true });
    const schema = freshSchema('to');
    const store = postgresStoreFromUrl(`${proxy.url(PG_URL)}?schema=${schema}`);
    const without = postgresStoreFromUrl(`${proxy.url(PG_URL)}?schema=${schema}&statement_timeout_ms=0`);
    try {
      await store.init();
      await assert.rejects(store.selfCheck!(), /the store cannot keep its statement deadline \(statement_timeout_ms=8000\).*a cancel request sent after 1000 ms did not stop a statement.*set statement_timeout_ms=0 in the store URL/s);
      await without.init();
      await without.selfCheck!();
    } finally {
      await store.close();
      await without.close();
      await proxy.close();
    }
  });

  it('cancels a statement past its deadline on the server (nothing set on the session), and a query into a black hole fails within its deadline as StoreUnavailableError', async () => {
    const proxy = await startFaultProxy({ host: '127.0.0.1', port: Number(new URL(PG_URL).port || 5432) });
    const schema = freshSchema('to');
    const store = postgresStoreFromUrl(`${proxy.url(PG_URL)}?schema=${schema}&query_timeout_ms=2500&statement_timeout_ms=650&connect_timeout_ms=600`);
    try {
      await store.init();
      const c = new pg.Client(store.clientConfig());
      await c.connect();
      assert.equal((await c.query('SHOW statement_timeout')).rows[0].statement_timeout, '0', 'no deadline on the session');
      // A statement that waits on a lock another transaction holds: cancelled on the server at 650 ms.
      await c.query('BEGIN');
      await c.query(`INSERT INTO ${schema}.settings (name, value, created_at) VALUES ('held', 'x', 0)`);
      const held = Date.now();
      const cancelled = await store.sharedSecret('held', () => 'y').then(() => undefined, (e: unknown) => e);
      const waited = Date.now() - held;
      await c.query('ROLLBACK');
      assert.ok(cancelled instanceof StoreUnavailableError && /canceling statement/.test(cancelled.message), `cancelled on the server, got ${String(cancelled)}`);
      // The cancel travels on a connection of its own, which a loaded machine may take a second to open: the query
      // deadline is far enough behind that the server's cancel is what ends the statement.
      assert.ok(waited >= 600 && waited < 2500, `cancelled after ${waited} ms (deadline 650 ms, query deadline 2500 ms)`);
      // The server ends the cancelled statement at once; its backend's state may show it a moment longer under load.
      await until('the statement no longer runs on the server', async () => {
        const locks = await c.query(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE query LIKE '%INSERT INTO "${schema}".settings%' AND state = 'active' AND pid <> pg_backend_pid()`);
        return locks.rows[0].n === 0;
      }, 5_000);
      await c.end();
      assert.equal(await store.count().then((n) => typeof n.tasks), 'number');
      proxy.set('drop');
      const t0 = Date.now();
      const err = await store.count().then(() => undefined, (e: unknown) => e);
      const ms = Date.now() - t0;
      assert.ok(err instanceof StoreUnavailableError, `a StoreUnavailableError, got ${String(err)}`);
      assert.ok(ms < 2500 + 1000, `failed after ${ms} ms (deadline 2500 ms)`);
      const pingErr = await store.ping().then(() => undefined, (e: unknown) => e);
      assert.ok(pingErr instanceof StoreUnavailableError, 'a ping fails too');
      proxy.set('pass');
      const back = await store.count();
      assert.equal(typeof back.tasks, 'number', 'the pool recovers by itself');
    } finally {
      proxy.set('pass');
      await store.close();
      await proxy.close();
    }
  });

  it('re-establishes a signal connection whose ping goes unanswered, and re-reads meanwhile', async () => {
    const proxy = await startFaultProxy({ host: '127.0.0.1', port: Number(new URL(PG_URL).port || 5432) });
    const errors: string[] = [];
    const bus = new PgSignalBus({ connection: { connectionString: proxy.url(PG_URL), query_timeout: 500, connectionTimeoutMillis: 500 }, channel: `t_${freshSchema('bus')}`, pingMs: 300, onError: (m) => errors.push(m) });
    try {
      await bus.start();
      assert.equal(bus.connections, 1);
      const seen: string[] = [];
      bus.subscribe('task-1', (s) => seen.push(s.kind));
      proxy.set('drop');
      await waitUntil('the lost connection noticed', () => errors.some((e) => /signal connection lost/.test(e)));
      await waitUntil('a fallback re-read while it is down', () => seen.length > 0);
      proxy.set('pass');
      await waitUntil('the connection re-established', () => bus.connections >= 2);
      assert.ok(errors.some((e) => /no answer to a ping|timeout|Connection terminated/i.test(e)), errors.join(' | '));
    } finally {
      await bus.close();
      await proxy.close();
    }
  });
});

describe('health endpoints (SQLite store)', () => {
  const server = useServer();
  it('/healthz is live, /readyz ready; other methods are refused; the MCP endpoint is unchanged', async () => {
    const base = new URL(server.url).origin;
    const live = await fetch(`${base}/healthz`);
    assert.equal(live.status, 200);
    assert.deepEqual(await live.json(), { status: 'ok' });
    const ready = await fetch(`${base}/readyz`);
    assert.equal(ready.status, 200);
    const body = (await ready.json()) as Record<string, unknown>;
    assert.equal(body.status, 'ready');
    assert.equal(body.fenced, false);
    assert.equal(ready.headers.get('cache-control'), 'no-store');
    const head = await fetch(`${base}/readyz`, { method: 'HEAD' });
    assert.equal(head.status, 200);
    const post = await fetch(`${base}/healthz`, { method: 'POST', body: '{}' });
    assert.equal(post.status, 405);
    assert.equal(post.headers.get('allow'), 'GET, HEAD');
    assert.match(((await post.json()) as { reason: string }).reason, /GET and HEAD only/);
    assert.equal((await fetch(`${base}/readyz/x`)).status, 404, 'only the exact paths');
  });
});
