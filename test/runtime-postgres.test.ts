// test:quick: starts no process and no browser (npm run test:quick).
/** The runtime in-process on PostgreSQL: what it does when its signal connection drops. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import pg from 'pg';
import { TaskRuntime } from '../src/runtime/runtime.js';
import { PgSignalBus, PostgresTaskStore } from '../src/store/postgres/index.js';
import { PG_URL, freshSchema, sleep, until } from './helpers.js';

const DECLARED = { principal: 'p', clientCapabilities: { extensions: { 'io.modelcontextprotocol/tasks': {} } }, tasksDeclared: true };

describe('runtime on PostgreSQL', () => {
  it('a cancel recorded while its signal connection was down reaches the handler as soon as it reconnects, not a heartbeat later', async () => {
    const schema = freshSchema('rtpg');
    const rt = new TaskRuntime({ store: new PostgresTaskStore({ connection: { connectionString: PG_URL }, schema }) }); // 5 s heartbeat
    let abortedAt = 0;
    rt.defineTool('hold', {
      policy: 'always',
      handler: (_a, ctx) =>
        new Promise((_, reject) =>
          ctx.signal.addEventListener('abort', () => {
            abortedAt = Date.now();
            reject(ctx.signal.reason);
          }),
        ),
    });
    await rt.start();
    const other = new PostgresTaskStore({ connection: { connectionString: PG_URL }, schema });
    await other.init();
    const admin = new pg.Client({ connectionString: PG_URL });
    await admin.connect();
    try {
      const r = await rt.call('hold', {}, DECLARED);
      assert.equal(r.kind, 'task');
      const taskId = r.kind === 'task' ? r.task.taskId : '';
      // Cut the runtime's LISTEN connection, and record a cancel with no signal at all (as if it were lost).
      await admin.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = $1', [`LISTEN "outlast_${schema}"`]);
      const t0 = Date.now();
      await other.requestCancel(taskId, t0);
      for (let i = 0; i < 60 && !abortedAt; i++) await sleep(50);
      assert.ok(abortedAt > 0, 'the handler was aborted');
      assert.ok(abortedAt - t0 < 2000, `aborted ${abortedAt - t0} ms after the cancel was recorded (heartbeat is 5000 ms)`);
      for (let i = 0; i < 40; i++) {
        const l = await other.get(taskId);
        if (l.state === 'found' && l.record.status === 'cancelled') break;
        await sleep(50);
      }
      const l = await other.get(taskId);
      assert.equal(l.state === 'found' && l.record.status, 'cancelled');
    } finally {
      await admin.end();
      await other.close();
      await rt.stop();
    }
  });
  it('a replica that no other process listens with sends no NOTIFY for its tasks; one that sees another replica registered (of an earlier release: silent on the channel) does', async () => {
    const now = Date.now();
    const replicaOn = async (schema: string, registered: boolean) => {
      const store = new PostgresTaskStore({ connection: { connectionString: PG_URL }, schema, timeouts: { signalPingMs: 300 } });
      if (registered) {
        const other = new PostgresTaskStore({ connection: { connectionString: PG_URL }, schema });
        await other.init();
        await other.registerReplica({ replicaId: 'earlier-release', host: 'elsewhere.example', pid: 1, startedAt: now, heartbeatAt: now });
        await other.close();
      }
      const rt = new TaskRuntime({ store });
      rt.defineTool('quick', { policy: 'always', handler: async () => ({ content: [{ type: 'text', text: 'done' }] }) });
      // What crosses its channel, seen by a plain LISTEN (which says nothing, so it is no listener the bus can hear).
      const wire: string[] = [];
      const observer = new pg.Client({ connectionString: PG_URL });
      await observer.connect();
      observer.on('notification', (n) => void wire.push(n.payload ?? ''));
      await observer.query(`LISTEN "outlast_${schema}"`);
      await rt.start();
      return { rt, bus: rt.bus as PgSignalBus, wire, observer };
    };
    const withEarlier = await replicaOn(freshSchema('rtpg'), true);
    const lone = await replicaOn(freshSchema('rtpg'), false);
    try {
      await until('the lone replica to find no other listener', () => lone.bus.alone, 5000);
      assert.equal(withEarlier.bus.alone, false, 'the registry names another replica');
      const taskOf = async (r: typeof lone) => {
        const c = await r.rt.call('quick', {}, DECLARED);
        assert.equal(c.kind, 'task');
        return c.kind === 'task' ? c.task.taskId : '';
      };
      const seen = await taskOf(withEarlier);
      await until('its task\'s signal on the wire', () => withEarlier.wire.some((p) => p.includes(` c${seen}`)), 3000);
      const quiet = await taskOf(lone);
      assert.equal((await lone.rt.untilTerminal(quiet, 'p', 5000))?.status, 'completed');
      const before = lone.wire.length;
      // Its next presence (every 300 ms) follows anything the task's changes would have sent.
      await until('the lone replica\'s next presence', () => lone.wire.slice(before).some((p) => / \.300$/.test(p)), 3000);
      assert.deepEqual(lone.wire.filter((p) => p.includes(quiet)), [], 'nothing sent for nobody');
      assert.ok(lone.bus.unsentAlone > 0);
    } finally {
      for (const r of [lone, withEarlier]) {
        await r.rt.stop(1000);
        await r.observer.end();
      }
    }
  });
});
