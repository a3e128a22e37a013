// test:quick: starts no process and no browser (npm run test:quick).
/** The runtime in-process on PostgreSQL: what it does when its signal connection drops. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import pg from 'pg';
import { TaskRuntime } from '../src/runtime/runtime.js';
import { PostgresTaskStore } from '../src/store/postgres/index.js';
import { PG_URL, freshSchema, sleep } from './helpers.js';

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
});
