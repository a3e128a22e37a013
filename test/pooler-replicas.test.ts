// test:pg-replicas: starts PostgreSQL replicas (scripts/test.mjs runs at most three such files at once).
/**
 * Three replicas of the replica fixture through Debian's PgBouncer 1.18 in transaction mode with its default
 * settings (design 19), signals on `--bus` (direct PostgreSQL, or a Redis the test started): any replica answers
 * anything with the latency of signals, not of the re-reads (heartbeat 5 s, queue poll 1 s, watch 5 s); without
 * `--bus` a replica refuses to start, naming the pooler and `--bus`, and stores nothing; the pooler or the Redis
 * stopped and started again loses no acknowledged task, and signals are back within a second of the heal; replicas
 * killed (SIGKILL) or paused (SIGSTOP) past their lease lose nothing, as directly (test/replica-suites.ts).
 */
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { BIN, PG_URL, ROOT, callTool, freshSchema, getTask, openListen, rpc, sleep, startServer, waitForTask } from './helpers.js';
import { REPLICA_MODULE, created, startCluster, type Cluster } from './replicas.js';
import { dieOrPauseSuite } from './replica-suites.js';
import { usePoolerAndRedis } from './pgbouncer.js';

const TERMINAL = ['completed', 'failed', 'cancelled'];


async function until<T>(what: string, fn: () => T | undefined | Promise<T | undefined>, timeoutMs = 10_000, everyMs = 10): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > end) assert.fail(`timed out waiting for ${what}`);
    await sleep(everyMs);
  }
}

async function readyz(url: string): Promise<{ ready: boolean; bus?: { carrier: string; connected?: boolean } }> {
  return (await fetch(url.replace(/\/mcp$/, '/readyz'))).json() as Promise<{ ready: boolean; bus?: { carrier: string; connected?: boolean } }>;
}

/** tasks/get every 10 ms until `pred` holds (timing a signal, not the advertised poll interval). */
async function fastWait(url: string, taskId: string, pred: (t: Record<string, any>) => boolean, timeoutMs: number): Promise<Record<string, any>> {
  return until(`task ${taskId}`, async () => {
    const r = await getTask(url, taskId);
    if (r.error) throw new Error(`tasks/get failed: ${JSON.stringify(r.error)}`);
    return pred(r.result) ? r.result : undefined;
  }, timeoutMs);
}

/** Cancel through the third replica of a task created on the first, read on the second: ms until it reads cancelled. */
async function crossCancelMs(c: Cluster, key: string): Promise<number> {
  const [a, b, cc] = c.replicas;
  const id = await created(a!.url, 'work', { key, ms: 60_000 });
  await until(`${key} started`, () => c.runs().some((r) => r.key === key));
  await waitForTask(b!.url, id, (t) => /working on/.test(t.statusMessage ?? ''));
  const t0 = Date.now();
  const cancel = await rpc(cc!.url, 'tasks/cancel', { taskId: id });
  assert.equal(cancel.error, undefined);
  const end = await fastWait(b!.url, id, (t) => TERMINAL.includes(t.status), 8000);
  assert.equal(end.status, 'cancelled');
  return Date.now() - t0;
}

/** What a task that never ended looks like: its row, its events, its runs and the replicas' last log lines. */
async function whyUnfinished(c: Cluster, id: string): Promise<string> {
  const schema = new URL(c.storeUrl).searchParams.get('schema');
  const direct = new pg.Client({ connectionString: PG_URL });
  await direct.connect();
  try {
    const row = (await direct.query(`SELECT task_id, args, status, status_message, owner, epoch, attempts, queued_at, created_at, updated_at, retry_safe FROM "${schema}".tasks WHERE task_id = $1`, [id])).rows[0];
    const events = (await direct.query(`SELECT * FROM "${schema}".task_events WHERE task_id = $1 ORDER BY at`, [id])).rows;
    const workers = (await direct.query(`SELECT * FROM "${schema}".replicas`).catch((e) => ({ rows: [String(e)] }))).rows;
    const runs = c.runs().filter((r) => r.key === row?.args?.key);
    const logs = c.replicas.map((r) => `replica ${r.pid}:\n${r.stderr().split('\n').filter((l) => l.includes(id)).join('\n')}`).join('\n');
    return `row ${JSON.stringify(row)}\nevents ${JSON.stringify(events)}\nruns ${JSON.stringify(runs)}\nreplicas ${JSON.stringify(workers)}\n${logs}`;
  } finally {
    await direct.end();
  }
}

const services = usePoolerAndRedis();

for (const variant of ['postgres', 'redis'] as const) {
  describe(`three replicas through PgBouncer (transaction mode, its defaults), --bus ${variant === 'postgres' ? 'direct PostgreSQL' : 'Redis'}`, () => {
    let c: Cluster;
    const schema = freshSchema(`pbrep${variant[0]}`);
    before(async () => {
      const bus = variant === 'postgres' ? PG_URL : services.redis.url;
      c = await startCluster(3, ['--bus', bus, '--max-running', '1'], { storeUrl: `${services.bouncer.through(PG_URL)}?schema=${schema}` });
    });
    after(async () => {
      await c?.stop();
    });

    it('every replica is ready with its bus, creates and reads what the others created; the rows are in the schema', async () => {
      for (const r of c.replicas) assert.deepEqual((await readyz(r.url)).bus, { carrier: variant, connected: true });
      const ids = [];
      for (const [i, r] of c.replicas.entries()) ids.push(await created(r.url, 'work_safe', { key: `crud-${variant}-${i}`, ms: 50 }));
      for (const r of c.replicas) for (const id of ids) assert.equal((await waitForTask(r.url, id)).status, 'completed');
      const direct = new pg.Client({ connectionString: PG_URL });
      await direct.connect();
      try {
        const n = (await direct.query(`SELECT count(*)::int AS n FROM "${schema}".tasks WHERE task_id = ANY($1)`, [ids])).rows[0].n;
        assert.equal(n, 3);
      } finally {
        await direct.end();
      }
    });

    it('cancel through another replica reaches the handler by signal', async (t) => {
      const ms = await crossCancelMs(c, `cancel-${variant}`);
      t.diagnostic(`cross-replica cancel: ${ms} ms`);
      assert.ok(ms < 1000, `cancelled in ${ms} ms (the heartbeat re-read is 5 s)`);
    });

    it('subscriptions/listen on one replica hears the change made on another', async (t) => {
      const [a, b] = c.replicas;
      const id = await created(a!.url, 'work', { key: `push-${variant}`, ms: 600 });
      const stream = await openListen(b!.url, [id]);
      const t0 = Date.now();
      try {
        await stream.until((m) => m.some((x) => x.method === 'notifications/tasks' && x.params.status === 'completed'), 10_000);
      } finally {
        stream.close();
      }
      const ms = Date.now() - t0;
      t.diagnostic(`listen on B heard A's completion ${ms} ms after it subscribed (task of 600 ms)`);
      assert.ok(ms < 600 + 1000, `heard after ${ms} ms (the watch's re-read is 5 s)`);
    });

    it('an input asked on one replica is answered through another and reaches the handler', async (t) => {
      const [a, b, cc] = c.replicas;
      const id = await created(a!.url, 'approve', { key: `input-${variant}` });
      await waitForTask(b!.url, id, (x) => x.status === 'input_required');
      const t0 = Date.now();
      const upd = await rpc(cc!.url, 'tasks/update', { taskId: id, inputResponses: { approval: { action: 'accept', content: { ok: true } } } });
      assert.equal(upd.error, undefined);
      const done = await fastWait(b!.url, id, (x) => TERMINAL.includes(x.status), 8000);
      const ms = Date.now() - t0;
      t.diagnostic(`answer through another replica: completed ${ms} ms later`);
      assert.equal(done.status, 'completed');
      assert.ok(ms < 1000, `completed ${ms} ms after the answer`);
    });

    it('a task queued on a full replica starts on an idle one by signal', async (t) => {
      const [a] = c.replicas;
      await created(a!.url, 'work', { key: `fill-${variant}`, ms: 2000 });
      await until('the filler started', () => c.runs().some((r) => r.key === `fill-${variant}`));
      const t0 = Date.now();
      const id = await created(a!.url, 'work', { key: `queued-${variant}`, ms: 10 });
      const run = await until('the queued task started', () => c.runs().find((r) => r.key === `queued-${variant}`), 5000, 5);
      const ms = Date.now() - t0;
      t.diagnostic(`queued task started on an idle replica ${ms} ms after its creation`);
      assert.notEqual(run.pid, a!.pid, 'another replica took it');
      assert.ok(ms < 500, `started after ${ms} ms (the queue re-read is 1 s)`);
      assert.equal((await waitForTask(a!.url, id)).status, 'completed');
    });

    if (variant === 'postgres') {
      it('the pooler stopped and started again under load: no acknowledged task lost, signals at once after the heal', async (t) => {
        const acknowledged: string[] = [];
        let refused = 0;
        let stop = false;
        const load = Array.from({ length: 4 }, async (_, w) => {
          for (let i = 0; !stop; i++) {
            const r = await callTool(c.front.url, 'work_safe', { key: `load-${w}-${i}`, ms: 10 }).catch(() => undefined);
            if (r?.result?.resultType === 'task') acknowledged.push(r.result.taskId as string);
            else refused++;
            await sleep(20);
          }
        });
        await sleep(800);
        await services.bouncer.stop();
        await sleep(1000);
        await services.bouncer.start();
        const healed = Date.now();
        // Serving again: the first creation each replica acknowledges after the heal (the load keeps calling).
        const back = await Promise.all(c.replicas.map((r, i) => until(`replica ${i} creating again`, async () => {
          const res = await callTool(r.url, 'work_safe', { key: `back-${i}-${Date.now()}`, ms: 10 });
          return res.result?.resultType === 'task' ? Date.now() - healed : undefined;
        }, 15_000, 50)));
        t.diagnostic(`every replica acknowledged a creation again ${Math.max(...back)} ms after the heal (${back.join(', ')} ms)`);
        assert.ok(Math.max(...back) < 6000, `serving again within a heartbeat of the heal: ${back.join(', ')} ms`);
        stop = true;
        await Promise.all(load);
        const statuses: Record<string, number> = {};
        // Not lost is the claim here: under a loaded machine one task has taken over 20 s to end after the heal (the
        // cause is not found yet, see issue 27), so the wait is long; a task that never ends still fails it.
        for (const id of acknowledged) {
          const done = await waitForTask(c.front.url, id, undefined, { timeoutMs: 60_000 }).catch(async (e) => {
            throw new Error(`${(e as Error).message}\n${await whyUnfinished(c, id)}`);
          });
          statuses[done.status] = (statuses[done.status] ?? 0) + 1;
        }
        t.diagnostic(`${acknowledged.length} acknowledged (${JSON.stringify(statuses)}), ${refused} refused while the pooler was down`);
        assert.ok(acknowledged.length > 10, `some load ran: ${acknowledged.length}`);
        assert.equal(Object.values(statuses).reduce((a, b) => a + b, 0), acknowledged.length, 'every acknowledged task is there and finished');
        const ms = await crossCancelMs(c, 'cancel-after-pooler');
        t.diagnostic(`cross-replica cancel after the heal: ${ms} ms`);
        assert.ok(ms < 1000, `cancel took ${ms} ms after the heal`);
      });
    } else {
      it('Redis stopped and started again: every replica listens again within a second, and signals pass', async (t) => {
        await services.redis.stop();
        await until('a replica noticed', async () => (await readyz(c.replicas[0]!.url)).bus?.connected === false, 5000, 20);
        await sleep(1000);
        await services.redis.start();
        const t0 = Date.now();
        await until('every replica listens again', async () => (await Promise.all(c.replicas.map((r) => readyz(r.url)))).every((r) => r.bus?.connected === true), 5000, 20);
        const back = Date.now() - t0;
        t.diagnostic(`bus back on every replica ${back} ms after Redis came back`);
        assert.ok(back < 1500, `back after ${back} ms`);
        const ms = await crossCancelMs(c, 'cancel-after-redis');
        assert.ok(ms < 1000, `cancel took ${ms} ms after the heal`);
      });
    }
  });
}

for (const variant of ['postgres', 'redis'] as const) {
  dieOrPauseSuite(`through PgBouncer (transaction mode), --bus ${variant === 'postgres' ? 'direct PostgreSQL' : 'Redis'}: replicas that die or pause`, (args) =>
    startCluster(3, [...args, '--bus', variant === 'postgres' ? PG_URL : services.redis.url], { storeUrl: `${services.bouncer.through(PG_URL)}?schema=${freshSchema('pbdie')}` }));
}

describe('through the pooler without --bus', () => {
  it('a replica refuses to start with one line naming the pooler and --bus, and stores nothing', async () => {
    const schema = freshSchema('pbnobus');
    const err = await startServer(['--store', `${services.bouncer.through(PG_URL)}?schema=${schema}`], { module: REPLICA_MODULE }).then(
      async (s) => {
        await s.stop();
        return undefined;
      },
      (e: Error) => e,
    );
    assert.ok(err, 'the replica did not start');
    const line = err.message.split('\n').find((l) => l.startsWith('outlast:'));
    assert.ok(line, err.message);
    assert.match(line, /transaction-mode pooler/);
    assert.match(line, /--bus postgres:\/\/.*--bus redis:\/\//);
    const direct = new pg.Client({ connectionString: PG_URL });
    await direct.connect();
    try {
      const n = (await direct.query('SELECT count(*)::int AS n FROM information_schema.schemata WHERE schema_name = $1', [schema])).rows[0].n;
      assert.equal(n, 0, 'nothing stored: not even the schema');
    } finally {
      await direct.end();
    }
  });

  it('outlast dashboard through the pooler: refused without --bus in one line, served with it', async () => {
    const store = `${services.bouncer.through(PG_URL)}?schema=${freshSchema('pbdash')}`;
    const refused = spawnSync(process.execPath, [BIN, 'dashboard', '--store', store, '--port', '0'], { cwd: ROOT, timeout: 20_000, encoding: 'utf8' });
    assert.equal(refused.status, 2, refused.stderr);
    assert.match(refused.stderr, /^outlast: signals do not arrive .*transaction-mode pooler.*--bus postgres:\/\/.*--bus redis:\/\//);
    const served = spawn(process.execPath, [BIN, 'dashboard', '--store', store, '--bus', services.redis.url, '--port', '0'], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    const exited = new Promise((resolve) => served.once('exit', resolve));
    try {
      let out = '';
      served.stdout.on('data', (d) => (out += d));
      await until('the dashboard listening', () => /outlast dashboard on http/.test(out) || undefined, 15_000, 20);
    } finally {
      process.kill(served.pid!, 'SIGTERM');
      await exited;
    }
  });

  it('--bus none is an explicit choice, logged at start with the delays it implies', async () => {
    const s = await startServer(['--store', `${services.bouncer.through(PG_URL)}?schema=${freshSchema('pbnone')}`, '--bus', 'none'], { module: REPLICA_MODULE });
    try {
      assert.match(s.stderr(), /bus none: no signals between replicas.*a cancel reaches the replica running the task within 5000 ms/);
      assert.deepEqual((await readyz(s.url)).bus, { carrier: 'none' });
      const id = await created(s.url, 'work_safe', { key: 'none-1', ms: 10 });
      assert.equal((await waitForTask(s.url, id)).status, 'completed');
    } finally {
      await s.stop();
    }
  });
});
