// test:pg-replicas: starts PostgreSQL replicas (scripts/test.mjs runs at most three such files at once).
/**
 * Rolling upgrades on one PostgreSQL schema (issue 42, item 8): a migration applied under replicas that are serving
 * must not break them. Every statement names its columns, so a column added to every table changes no statement's
 * result; a statement whose plan a migration did invalidate (a column's type changed) is prepared again and retried
 * once, so the 0A000 "cached plan must not change result type" never reaches a caller. With real `outlast serve`
 * processes: a durable question asked on one replica and answered on another across the migration completes with
 * the answer; replicas of the previous release (built from git) keep serving while one of this build joins and
 * migrates, and one started again after it (a rollback) serves beside it. A build too old for a schema refuses to
 * start in one line naming both versions; one on a newer, additive schema serves and says so.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { spawnSync } from 'node:child_process';
import { PostgresTaskStore } from '../src/store/postgres/index.js';
import { STORE_TABLES } from '../src/store/postgres/schema-names.js';
import { MIGRATIONS as PG_MIGRATIONS } from '../src/store/postgres/schema.js';
import { MIGRATIONS as SQLITE_MIGRATIONS } from '../src/store/sqlite/schema.js';
import { newestVersion } from '../src/store/schema-version.js';
import { runEveryStatement, spyOnStatements, type StatementSpy } from './store-statements.js';
import {
  BIN, FIXTURES, PG_URL, ROOT, callTool, freshSchema, getTask, pgStoreUrl, rpc, startServer, tempDir, textOf, until, waitForTask, withPgClient, type ServerProcess,
} from './helpers.js';
import { previousBuild } from './previous-build.js';
import { startPgBouncer, type PgBouncer } from './pgbouncer.js';

const q = (schema: string) => `"${schema}"`;

/** A migration that adds a column to every table of the store (additive: nullable or with a default). */
async function addColumnEverywhere(schema: string, column = 'added_later'): Promise<void> {
  await withPgClient(async (c) => {
    await c.query('BEGIN');
    for (const t of STORE_TABLES) await c.query(`ALTER TABLE ${q(schema)}.${t} ADD COLUMN ${column} integer NOT NULL DEFAULT 7`);
    await c.query('COMMIT');
  });
}

/** What the rule forbids and a release may still do: columns that statements read change type (text → varchar). */
async function changeColumnTypes(schema: string): Promise<void> {
  const columns: Array<[string, string]> = [
    ['tombstones', 'principal'], ['replicas', 'host'], ['settings', 'value'], ['task_steps', 'name'], ['task_output', 'type'],
    ['alerts', 'message'], ['event_subscriptions', 'url'], ['event_log', 'tool'], ['task_events', 'detail'],
  ];
  await withPgClient(async (c) => {
    for (const [t, col] of columns) await c.query(`ALTER TABLE ${q(schema)}.${t} ALTER COLUMN ${col} TYPE varchar(2000)`);
  });
}

describe('a migration under a running PostgreSQL store: every statement, prepared before it, works after it', () => {
  let spy: StatementSpy;
  const schema = freshSchema('upg');
  // One connection for the task statements: every statement it prepared meets the migration on it.
  const store = new PostgresTaskStore({ connection: { connectionString: PG_URL }, schema, poolSize: 1, preparedStatements: 'on' });
  before(async () => {
    spy = spyOnStatements();
    await store.init();
  });
  after(async () => {
    spy.restore();
    await store.close();
  });

  it('a column added to every table: each named statement prepared before runs again after it, none refused', async () => {
    spy.reset();
    await runEveryStatement(store, 'before');
    const before = new Set(spy.named);
    assert.ok(before.size >= 90, `the workload ran ${before.size} named statements`);
    await addColumnEverywhere(schema);
    spy.reset();
    await runEveryStatement(store, 'after');
    assert.deepEqual(spy.refused, [], 'no statement was refused');
    assert.deepEqual([...before].filter((n) => !spy.named.has(n)), [], 'every statement prepared before the migration ran after it');
  });

  it('a column whose type changed under prepared statements: the refusal (0A000) is met, and retried once, never reaching a caller', async () => {
    spy.reset();
    await runEveryStatement(store, 'before-type');
    await changeColumnTypes(schema);
    spy.reset();
    await runEveryStatement(store, 'after-type');
    const refusals = spy.refused.filter((r) => r.code === '0A000');
    assert.ok(refusals.length >= 1, 'the migration did invalidate prepared plans (else this would prove nothing)');
    assert.deepEqual(spy.refused.filter((r) => r.code !== '0A000'), [], 'nothing else was refused');
    for (const r of refusals) assert.match(r.message, /cached plan must not change result type/);
  });
});

describe('the same through PgBouncer (the store reached through a pooler)', () => {
  let bouncer: PgBouncer;
  let session: PgBouncer;
  let spy: StatementSpy;
  before(async () => {
    [bouncer, session] = await Promise.all([startPgBouncer(), startPgBouncer({ pool_mode: 'session' })]);
    spy = spyOnStatements();
  });
  after(async () => {
    spy.restore();
    await Promise.all([bouncer?.stop(), session?.stop()]);
  });
  const through = (b: PgBouncer, schema: string, prepared: 'auto' | 'on') =>
    new PostgresTaskStore({ connection: { connectionString: b.through(PG_URL) }, schema, poolSize: 1, preparedStatements: prepared });

  it('transaction mode (statements unnamed, as `auto` decides there): every statement survives a column added to every table and a type changed', async () => {
    const schema = freshSchema('upgtx');
    const store = through(bouncer, schema, 'auto');
    await store.init();
    try {
      assert.equal(store.prepared, false);
      await runEveryStatement(store, 'before');
      await addColumnEverywhere(schema);
      await changeColumnTypes(schema);
      spy.reset();
      await runEveryStatement(store, 'after');
      assert.deepEqual(spy.refused, []);
    } finally {
      await store.close();
    }
  });

  it('session mode with named statements (prepared_statements=on): a type changed under them is met with 0A000 through the pooler and retried once, reaching no caller', async () => {
    const schema = freshSchema('upgses');
    const store = through(session, schema, 'on');
    await store.init();
    try {
      await runEveryStatement(store, 'before');
      await changeColumnTypes(schema);
      spy.reset();
      await runEveryStatement(store, 'after');
      assert.ok(spy.refused.some((r) => r.code === '0A000'), 'the pooler passed the refusal on (else this would prove nothing)');
      assert.deepEqual(spy.refused.filter((r) => r.code !== '0A000'), []);
    } finally {
      await store.close();
    }
  });
});

const FORM_ANSWER = (answer: string) => ({ answer: { action: 'accept', content: { answer } } });
/** Flags of every replica here: parked waits let go fast, queued work and wakes are claimed fast. */
const REPLICA_FLAGS = ['--park-after-ms', '200', '--queue-poll-ms', '300', '--heartbeat-ms', '500', '--lease-ms', '5000'];

async function created(url: string, tool: string, args: Record<string, unknown>): Promise<string> {
  const r = await callTool(url, tool, args);
  assert.equal(r.error, undefined, JSON.stringify(r.error));
  assert.equal(r.result.resultType, 'task', JSON.stringify(r.result));
  return r.result.taskId as string;
}

/** Every kind of call a client makes, on `url`, at once: polls, an inline call, a creation, a cancel. Fails on any error. */
async function everyCall(url: string, taskIds: string[]): Promise<void> {
  const cancelled = await created(url, 'sleep', { seconds: 30 });
  const replies = await Promise.all([
    ...taskIds.flatMap((id) => [getTask(url, id), getTask(url, id)]),
    callTool(url, 'sleep', { seconds: 0.05 }),
    rpc(url, 'tasks/cancel', { taskId: cancelled }),
    getTask(url, cancelled),
  ]);
  for (const r of replies) assert.equal(r.error, undefined, `a call failed on ${url}: ${JSON.stringify(r.error)}`);
}

describe('two replicas serving work in flight while a migration adds a column to every table (real processes)', () => {
  it('every call on both works after it, and a durable question asked on one and answered on the other across it completes with the answer', async () => {
    const schema = freshSchema('roll');
    // Two connections each: every statement a replica prepared meets the migration on one of them.
    const args = ['--store', `${pgStoreUrl(schema)}&pool=2`, '--tool-limit', 'sleep_retryable=1', ...REPLICA_FLAGS];
    const a = await startServer(args);
    const b = await startServer(args);
    try {
      const park = await created(a.url, 'park', { message: 'Ship it?', sleepSeconds: 0 });
      await waitForTask(b.url, park, (t) => t.status === 'input_required');
      // The tool limit queues the second: the claim runs after the migration.
      const long = await created(a.url, 'sleep_retryable', { seconds: 2 });
      const queued = await created(b.url, 'sleep_retryable', { seconds: 0.2 });
      for (const r of [a, b]) await everyCall(r.url, [park, long, queued]);

      await addColumnEverywhere(schema);

      await Promise.all([a, b].map((r) => everyCall(r.url, [park, long, queued])));
      const answered = await rpc(b.url, 'tasks/update', { taskId: park, inputResponses: FORM_ANSWER('yes') });
      assert.equal(answered.error, undefined, JSON.stringify(answered.error));
      const done = await waitForTask(a.url, park);
      assert.equal(done.status, 'completed', JSON.stringify(done));
      assert.match(textOf(done.result), /^The answer is: yes \(prepared in \d+ at \d+; woke at \d+ in \d+; attempt 1\)$/);
      for (const id of [long, queued]) {
        const t = await waitForTask(b.url, id, undefined, { timeoutMs: 30_000 });
        assert.equal(t.status, 'completed', JSON.stringify(t));
        assert.match(textOf(t.result), /^Slept /);
      }
    } finally {
      await Promise.all([a.stop(), b.stop()]);
    }
  });
});

describe('a store error that escapes a handler (real process)', () => {
  it('fails the task naming the store, instead of completing it with the error text as a tool error', async () => {
    const schema = freshSchema('serr');
    const srv = await startServer(['--store', pgStoreUrl(schema), ...REPLICA_FLAGS]);
    try {
      // The database refuses the durable tool's first step write (a constraint no build of Outlast has).
      await withPgClient((c) => c.query(`ALTER TABLE ${q(schema)}.task_steps ADD CONSTRAINT refuse_prepare CHECK (name <> 'prepare') NOT VALID`));
      const id = await created(srv.url, 'park', { message: 'Ship it?', sleepSeconds: 0 });
      const t = await waitForTask(srv.url, id);
      assert.equal(t.status, 'failed', `a store error is not the tool's result: ${JSON.stringify(t)}`);
      assert.equal(t.error?.data?.reason, 'store_error');
      assert.equal(t.error?.data?.sqlState, '23514');
      assert.match(t.error?.message, /^The task store failed a statement of this run, so the run stopped: .*refuse_prepare/);
    } finally {
      await srv.stop();
    }
  });
});

/** What a newer build's migration leaves in the schema's migrations table: its version and compatible_from (the
 *  column made as a build that checks it makes it). */
async function recordMigration(schema: string, version: number, compatibleFrom: number | null): Promise<void> {
  await withPgClient(async (c) => {
    await c.query(`ALTER TABLE ${q(schema)}.outlast_migrations ADD COLUMN IF NOT EXISTS compatible_from integer`);
    await c.query(`INSERT INTO ${q(schema)}.outlast_migrations (version, applied_at, compatible_from) VALUES ($1, $2, $3)`, [version, Date.now(), compatibleFrom]);
  });
}

/** Starts a replica expected to refuse; returns its exit and stderr. */
async function refusedStart(args: string[]): Promise<{ code: number | null; stderr: string }> {
  const r = spawnSync(process.execPath, [BIN, 'serve', FIXTURES, '--port', '0', ...args], { cwd: ROOT, encoding: 'utf8', timeout: 30_000 });
  return { code: r.status, stderr: r.stderr };
}

describe('an older build on a newer schema (a rollback): it serves an additive schema, and refuses one it cannot serve', () => {
  const known = newestVersion(PG_MIGRATIONS);

  it('PostgreSQL, newer and additive: it serves, saying so in one line naming both versions', async () => {
    const schema = freshSchema('ahead');
    const first = await startServer(['--store', pgStoreUrl(schema)]);
    await first.stop();
    await recordMigration(schema, known + 1, null);
    const srv = await startServer(['--store', pgStoreUrl(schema)]);
    try {
      const r = await callTool(srv.url, 'sleep', { seconds: 0.05 });
      assert.equal(r.error, undefined);
      const line = srv.stderr().split('\n').find((l) => l.includes('schema version'));
      assert.ok(line, `a line names the versions:\n${srv.stderr()}`);
      assert.match(line, new RegExp(`schema "${schema}"\\) is at schema version ${known + 1}, newer than this build \\(versions up to ${known}\\): serving`));
    } finally {
      await srv.stop();
    }
  });

  it('PostgreSQL, a migration marked incompatible with it: it refuses at start in one line naming both versions, writing nothing', async () => {
    const schema = freshSchema('contract');
    const first = await startServer(['--store', pgStoreUrl(schema)]);
    await first.stop();
    await recordMigration(schema, known + 2, known + 2);
    const before = await withPgClient(async (c) => (await c.query(`SELECT (SELECT count(*) FROM ${q(schema)}.replicas)::int AS r, (SELECT count(*) FROM ${q(schema)}.outlast_migrations)::int AS m`)).rows[0]);
    const r = await refusedStart(['--store', pgStoreUrl(schema)]);
    assert.equal(r.code, 2, r.stderr);
    const lines = r.stderr.trim().split('\n');
    assert.equal(lines.length, 1, r.stderr);
    assert.equal(lines[0], `outlast: the store (PostgreSQL schema "${schema}") is at schema version ${known + 2}, which needs a build that knows version ${known + 2} or later ` +
      `(a migration removed what older builds use); this build knows versions up to ${known}: start a newer build`);
    const afterwards = await withPgClient(async (c) => (await c.query(`SELECT (SELECT count(*) FROM ${q(schema)}.replicas)::int AS r, (SELECT count(*) FROM ${q(schema)}.outlast_migrations)::int AS m`)).rows[0]);
    assert.deepEqual(afterwards, before, 'nothing was written');
  });

  it('SQLite, a migration marked incompatible with it: it refuses the file at start in one line naming both versions', async () => {
    const path = join(tempDir(), 'tasks.db');
    const first = await startServer(['--store', `sqlite:${path}`]);
    await first.stop();
    const sqliteKnown = newestVersion(SQLITE_MIGRATIONS);
    const { default: Database } = await import('better-sqlite3');
    const db = new Database(path);
    if (!db.prepare(`SELECT name FROM pragma_table_info('outlast_migrations')`).pluck().all().includes('compatible_from')) {
      db.exec('ALTER TABLE outlast_migrations ADD COLUMN compatible_from INTEGER');
    }
    db.prepare('INSERT INTO outlast_migrations (version, applied_at, compatible_from) VALUES (?, ?, ?)').run(sqliteKnown + 2, Date.now(), sqliteKnown + 1);
    db.close();
    const r = await refusedStart(['--store', `sqlite:${path}`]);
    assert.equal(r.code, 2, r.stderr);
    assert.deepEqual(r.stderr.trim().split('\n'), [`outlast: the task store ${path} is at schema version ${sqliteKnown + 2}, which needs a build that knows version ${sqliteKnown + 1} or later ` +
      `(a migration removed what older builds use); this build knows versions up to ${sqliteKnown}: start a newer build`]);
  });
});

describe('two replicas of the previous release serving work in flight, one of this build joining and migrating (real builds)', () => {
  const newest = newestVersion(PG_MIGRATIONS);
  let prev: { commit: string; bin: string; fixtures: string };
  before(() => {
    prev = previousBuild(newest);
  });

  it('a durable question asked on an old replica and answered on the new one completes; the old ones keep serving; an old one started after the migration (a rollback) serves beside the new one; SIGTERM of the old ones leaves nothing waiting: their unsafe call ends in the drain, retry-safe and durable work completes on the new one', async () => {
    const schema = freshSchema('prev');
    const args = ['--store', `${pgStoreUrl(schema)}&pool=2`, ...REPLICA_FLAGS];
    const old = () => startServer(args, { bin: prev.bin, module: prev.fixtures });
    const replicas: ServerProcess[] = [];
    try {
      const oldA = await old();
      replicas.push(oldA);
      replicas.push(await old());
      const oldB = replicas[1]!;
      const version = async () => withPgClient(async (c) => (await c.query(`SELECT max(version)::int AS v FROM ${q(schema)}.outlast_migrations`)).rows[0].v as number);
      assert.ok((await version()) < newest, `the previous release (${prev.commit}) left the schema before migration ${newest}`);
      // Work in flight on the old replicas.
      const park = await created(oldA.url, 'park', { message: 'Ship it?', sleepSeconds: 0 });
      await waitForTask(oldB.url, park, (t) => t.status === 'input_required');
      const running = await created(oldB.url, 'sleep', { seconds: 2 });
      for (const r of [oldA, oldB]) await everyCall(r.url, [park, running]);

      const fresh = await startServer(args);
      replicas.push(fresh);
      assert.equal(await version(), newest, 'the new replica migrated the schema under the old ones');

      const answered = await rpc(fresh.url, 'tasks/update', { taskId: park, inputResponses: FORM_ANSWER('yes') });
      assert.equal(answered.error, undefined, JSON.stringify(answered.error));
      const done = await waitForTask(oldA.url, park);
      assert.equal(done.status, 'completed', JSON.stringify(done));
      assert.match(textOf(done.result), /^The answer is: yes \(prepared in \d+ at \d+; woke at \d+ in \d+; attempt 1\)$/);
      const slept = await waitForTask(oldA.url, running);
      assert.deepEqual([slept.status, textOf(slept.result)], ['completed', 'Slept 2 s (attempt 1)']);
      for (const r of [oldA, oldB, fresh]) await everyCall(r.url, [park, running]);

      // A rollback: a replica of the previous release started on the migrated schema serves beside the new one.
      const again = await old();
      replicas.push(again);
      const park2 = await created(again.url, 'park', { message: 'Again?', sleepSeconds: 0 });
      await waitForTask(fresh.url, park2, (t) => t.status === 'input_required');
      assert.equal((await rpc(fresh.url, 'tasks/update', { taskId: park2, inputResponses: FORM_ANSWER('again') })).error, undefined);
      const done2 = await waitForTask(again.url, park2);
      assert.match(textOf(done2.result), /^The answer is: again /);
      await everyCall(again.url, [park, park2]);
      await until('every replica still up', () => replicas.every((r) => r.proc.exitCode === null));

      // The old ones stopped (SIGTERM) with work running: the unsafe call finishes in their drain or fails naming
      // the stop, the retry-safe and the durable ones complete on the new replica; nothing is left waiting.
      const busyLog = join(tempDir(), 'busy.log');
      const stepsLog = join(tempDir(), 'steps.log');
      const unsafe = await created(oldA.url, 'busy', { seconds: 4, log: busyLog });
      const retrySafe = await created(oldB.url, 'sleep_retryable', { seconds: 6 });
      const durable = await created(again.url, 'steps', { log: stepsLog, count: 3, stepSeconds: 0.5, gapSeconds: 0 });
      const logged = (path: string, line: RegExp) => existsSync(path) && line.test(readFileSync(path, 'utf8'));
      await until('the unsafe call and the first step started on the old replicas', () => logged(busyLog, /^START /m) && logged(stepsLog, /^START s1 /m));
      const stopped = Promise.all([oldA, oldB, again].map((r) => r.stop('SIGTERM')));
      const ends = await Promise.all([unsafe, retrySafe, durable].map((id) => waitForTask(fresh.url, id, undefined, { timeoutMs: 90_000 })));
      const [u, r, d] = ends;
      assert.ok(u!.status === 'completed' || (u!.status === 'failed' && /stop|shut/i.test(JSON.stringify(u!.error ?? u!.statusMessage))), `the unsafe call: ${JSON.stringify(u)}`);
      assert.deepEqual([r!.status, d!.status], ['completed', 'completed'], JSON.stringify(ends));
      assert.match(textOf(d!.result), /^Steps done: s1, s2, s3/);
      for (const exit of await stopped) assert.equal(exit.signal, null, `an old replica ends its drain and exits by itself: ${JSON.stringify(exit)}`);
      await everyCall(fresh.url, [unsafe, retrySafe, durable]);
    } finally {
      await Promise.all(replicas.map((r) => r.stop()));
    }
  });
});
