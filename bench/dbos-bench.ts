/**
 * Child process, one side of one round of (n.dbos): durable steps on PostgreSQL, Outlast's idempotent `ctx.step` or
 * DBOS Transact's `DBOS.runStep` (bench/peers), in-process, in a fresh schema or system database.
 *   argv[2] = JSON { engine: 'outlast' | 'dbos', shape: 'one' | 'eight' | 'wf3', url, schema?, database?, seconds }
 *   one    one workflow (a durable tool's handler) running step after step: steps/s
 *   eight  eight of them stepping at once: steps/s, all together
 *   wf3    workflows of three steps started and awaited to their end one after another: workflows/s
 * Counted for `seconds` after a warm-up of 1 s (and 50 steps or 10 workflows). Every statement either side sends
 * through `pg` in the window is counted (both copies of node-postgres, the project's and DBOS's, are watched):
 * sends {type:'result', rate, statementsPerUnit}.
 */
import { createRequire } from 'node:module';
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { TaskRuntime } from '../src/runtime/runtime.js';
import { PostgresTaskStore } from '../src/store/postgres/index.js';
import { childFail, exitWithParent } from './common.js';
import { importPeer, peerPath } from './peers.js';

interface Cfg {
  engine: 'outlast' | 'dbos';
  shape: 'one' | 'eight' | 'wf3';
  url: string;
  schema?: string;
  database?: string;
  seconds: number;
}
const cfg = JSON.parse(process.argv[2]!) as Cfg;
const WARMUP_MS = 1000;
const AT_ONCE = 8;

/** Counts the statements node-postgres sends (the driver still sends every one). */
let statements = 0;
function countStatements(proto: { query: (...a: unknown[]) => unknown }): void {
  const original = proto.query;
  proto.query = function (this: unknown, ...a: unknown[]) {
    statements++;
    return original.apply(this, a);
  };
}

/** What one side does: `unit` runs one step (or one workflow); `loops` of them run at once, each one after another. */
interface Engine {
  /** Runs `body` as `loops` workflows at once until it returns false; resolves when every one has ended. */
  run(loops: number, body: () => boolean, step: (i: number) => Promise<unknown>): Promise<void>;
  /** One 3-step workflow, started and awaited to its end. */
  workflow3(): Promise<void>;
  close(): Promise<void>;
}

async function outlast(): Promise<Engine> {
  const rt = new TaskRuntime({ store: new PostgresTaskStore({ connection: { connectionString: cfg.url }, schema: cfg.schema!, poolSize: 10 }), pollLimit: false, maxRunningPerPrincipal: 100 });
  let body!: () => boolean;
  let each!: (i: number) => Promise<unknown>;
  const stepOf = (ctx: { step: (n: string, f: () => unknown, o: { idempotent: boolean }) => Promise<unknown> }) => (i: number) => ctx.step('s', () => i, { idempotent: true });
  rt.defineTool('loop', {
    policy: 'always',
    durable: true,
    handler: async (_a, ctx) => {
      const step = stepOf(ctx);
      for (let i = 0; body(); i++) await each(i).then(() => step(i));
      return { content: [] };
    },
  });
  rt.defineTool('wf3', {
    policy: 'always',
    durable: true,
    handler: async (_a, ctx) => {
      const step = stepOf(ctx);
      for (let i = 0; i < 3; i++) await step(i);
      return { content: [] };
    },
  });
  await rt.start();
  const cc = { principal: 'bench', clientCapabilities: {}, tasksDeclared: true };
  const ended = async (o: Awaited<ReturnType<TaskRuntime['call']>>) => {
    if (o.kind !== 'task') throw new Error(`expected a task, got ${o.kind}`);
    const v = await rt.untilTerminal(o.task.taskId, 'bench', 60_000);
    if (v?.status !== 'completed') throw new Error(`task ended ${v?.status ?? 'not in time'}`);
  };
  return {
    async run(loops, b, s) {
      body = b;
      each = s;
      await Promise.all(Array.from({ length: loops }, async () => ended(await rt.call('loop', {}, cc))));
    },
    async workflow3() {
      await ended(await rt.call('wf3', {}, cc));
    },
    close: () => rt.stop(1000),
  };
}

interface Dbos {
  setConfig(c: Record<string, unknown>): void;
  launch(): Promise<void>;
  shutdown(): Promise<void>;
  registerWorkflow<F extends (...a: never[]) => Promise<unknown>>(f: F, o: { name: string }): F;
  runStep<T>(f: () => Promise<T> | T, o: { name: string }): Promise<T>;
}

async function dbos(): Promise<Engine> {
  // The statements of DBOS's own copy of node-postgres are counted too.
  countStatements((createRequire(peerPath('@dbos-inc/dbos-sdk'))('pg') as typeof pg).Client.prototype as never);
  const { DBOS } = await importPeer<{ DBOS: Dbos }>('@dbos-inc/dbos-sdk');
  const systemDatabaseUrl = new URL(cfg.url);
  systemDatabaseUrl.pathname = `/${cfg.database!}`;
  DBOS.setConfig({ name: 'outlast-bench', applicationVersion: '0.1.0', systemDatabaseUrl: systemDatabaseUrl.href, logLevel: 'error' });
  let body!: () => boolean;
  let each!: (i: number) => Promise<unknown>;
  const loop = DBOS.registerWorkflow(async () => {
    for (let i = 0; body(); i++) await each(i).then(() => DBOS.runStep(async () => i, { name: 's' }));
  }, { name: 'loop' });
  const wf3 = DBOS.registerWorkflow(async () => {
    for (let i = 0; i < 3; i++) await DBOS.runStep(async () => i, { name: 's' });
  }, { name: 'wf3' });
  await DBOS.launch();
  return {
    async run(loops, b, s) {
      body = b;
      each = s;
      await Promise.all(Array.from({ length: loops }, () => loop()));
    },
    workflow3: () => wf3(),
    close: () => DBOS.shutdown(),
  };
}

async function main(): Promise<{ rate: number; statementsPerUnit: number }> {
  countStatements(pg.Client.prototype as never);
  const engine = cfg.engine === 'outlast' ? await outlast() : await dbos();
  try {
    const began = performance.now();
    let counting = false;
    let n = 0;
    let n0 = 0;
    let t0 = 0;
    let t1 = 0;
    let warm = 0;
    // The window ends once: what runs after it (the workflows' own ends) is not counted.
    const windowOver = () => t1 > 0 || (counting && performance.now() - t0 >= cfg.seconds * 1000 && (t1 = performance.now()) > 0);
    const startCounting = () => {
      counting = true;
      t0 = performance.now();
      n0 = statements;
    };
    if (cfg.shape === 'wf3') {
      for (let i = 0; ; i++) {
        if (!counting && i >= 10 && performance.now() - began >= WARMUP_MS) startCounting();
        if (windowOver()) break;
        await engine.workflow3();
        if (counting) n++;
      }
    } else {
      const loops = cfg.shape === 'one' ? 1 : AT_ONCE;
      // Each workflow counts its steps once every one has warmed up (50 steps each and the warm-up's second).
      await engine.run(
        loops,
        () => !windowOver(),
        async (i) => {
          if (i === 50 && ++warm === loops) {
            await new Promise((r) => setTimeout(r, Math.max(0, WARMUP_MS - (performance.now() - began))));
            startCounting();
          }
          if (counting && i > 0) n++;
        },
      );
    }
    const seconds = ((t1 || performance.now()) - t0) / 1000;
    return { rate: n / seconds, statementsPerUnit: (statements - n0) / Math.max(1, n) };
  } finally {
    await engine.close();
  }
}

exitWithParent();
main().then((r) => process.send!({ type: 'result', ...r }, () => process.exit(0)), childFail);
