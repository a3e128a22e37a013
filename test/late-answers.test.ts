// test:pg-replicas: starts PostgreSQL replicas (scripts/test.mjs runs at most three such files at once).
/**
 * Answers as a person gives them: several seconds after the question, once the wait is parked (no process holds
 * it), on both wires (2025-11-25 through SDK v1's callToolStream, 2026-07-28 through TaskClient) and for both input
 * kinds (elicitation, sampling); also when every replica that asked (the one that ran the handler, and on 2025 the
 * one whose tasks/result stream carried the question) is killed (SIGKILL) before the answer and restarted ones take
 * it. A deadline that passes fails the task with the timeout reason. Two fixture replicas on one PostgreSQL schema
 * behind a round-robin front, and the demo's `migrate` on its own server, as the issue saw it.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Client as ClientV1 } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport as TransportV1 } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema, CreateMessageRequestSchema, ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import { TaskClient, TaskFailedError } from '../src/client/index.js';
import { postgresStoreFromUrl } from '../src/store/postgres/index.js';
import { SqliteTaskStore } from '../src/store/sqlite/index.js';
import type { TaskRecord, TaskStore } from '../src/store/types.js';
import { startRoundRobin, type RoundRobin } from '../fixtures/round-robin.js';
import { until } from './questions-helpers.js';
import { FIXTURES, ROOT, freePort, pgStoreUrl, sleep, startServer, tempDir, textOf, type ServerProcess } from './helpers.js';
import { recordingFetch, type Wire } from './generations.js';

const DEMO = join(ROOT, 'dist', 'demo', 'server.js');
const PARK_AFTER_MS = 300;
const ARGS = ['--park-after-ms', String(PARK_AFTER_MS), '--heartbeat-ms', '300', '--lease-ms', '2000', '--queue-poll-ms', '200'];
/** How long after the question a person answers, at the least (and never before the wait is parked). */
const HUMAN_DELAY_MS = 3000;
type Kind = 'elicitation' | 'sampling';

const RELATED = 'io.modelcontextprotocol/related-task';

async function row(store: TaskStore, taskId: string): Promise<TaskRecord> {
  const l = await store.get(taskId);
  assert.equal(l.state, 'found', `task ${taskId} is in the store`);
  return (l as { record: TaskRecord }).record;
}


/** Waits until the task waits for `key`, then until that wait is parked; `askedBy`: the pid of the replica that ran the
 *  handler up to the question (its first step, `prepare`, records it). */
async function askedThenParked(store: TaskStore, taskId: string, key = 'answer'): Promise<{ askedBy: number | undefined; parked: TaskRecord }> {
  await until(`task ${taskId} asks "${key}"`, async () => {
    const r = await row(store, taskId);
    return r.status === 'input_required' && r.inputRequests[key] ? r : undefined;
  });
  const parked = await until(`the wait of ${taskId} is parked`, async () => {
    const r = await row(store, taskId);
    return r.parkedAt !== null && r.owner === null ? r : undefined;
  });
  const prepare = (await store.listSteps(taskId)).find((s) => s.name === 'prepare');
  const askedBy = prepare?.result ? (JSON.parse(prepare.result) as { pid?: number }).pid : undefined;
  return { askedBy, parked };
}

/** What a person answers, by kind (an ElicitResult, a CreateMessageResult). */
function answerOf(kind: Kind, text: string): Record<string, unknown> {
  return kind === 'elicitation'
    ? { action: 'accept', content: { answer: text } }
    : { role: 'assistant', content: { type: 'text', text }, model: 'a-person', stopReason: 'endTurn' };
}

/** The text of the question, as each kind carries it. */
function questionOf(kind: Kind, params: Record<string, any>): string {
  return kind === 'elicitation' ? String(params.message) : String(params.messages?.[0]?.content?.text);
}

/** A person at a 2025-11-25 host (SDK v1): declares the kind, answers each question when `answer` says. */
async function connectPerson2025(url: string, kind: Kind, answer: (params: Record<string, any>) => Promise<Record<string, unknown>>): Promise<{ client: ClientV1; wire: Wire; questions: Array<Record<string, any>>; close(): Promise<void> }> {
  const { fetch: f, wire } = recordingFetch();
  const client = new ClientV1({ name: 'v1-person', version: '1.32.2' }, { capabilities: kind === 'elicitation' ? { elicitation: {} } : { sampling: {} } });
  const questions: Array<Record<string, any>> = [];
  const handle = async (params: Record<string, any>) => {
    questions.push(params);
    return (await answer(params)) as never;
  };
  if (kind === 'elicitation') client.setRequestHandler(ElicitRequestSchema, (req) => handle(req.params as Record<string, any>));
  else client.setRequestHandler(CreateMessageRequestSchema, (req) => handle(req.params as Record<string, any>));
  await client.connect(new TransportV1(new URL(url), { fetch: f }));
  await client.listTools();
  return { client, wire, questions, close: () => client.close() };
}

/** Two fixture replicas on fixed ports and one PostgreSQL schema, a round-robin front, and a store of the test's own. */
function usePair() {
  const state = {} as { storeUrl: string; ports: number[]; replicas: ServerProcess[]; front: RoundRobin; store: TaskStore };
  const start = (port: number) => startServer(['--store', state.storeUrl, '--port', String(port), ...ARGS], { module: FIXTURES });
  before(async () => {
    state.storeUrl = pgStoreUrl();
    state.ports = [await freePort(), await freePort()];
    state.replicas = [await start(state.ports[0]!)];
    state.replicas.push(await start(state.ports[1]!));
    state.front = await startRoundRobin(state.replicas.map((r) => r.url));
    state.store = postgresStoreFromUrl(state.storeUrl);
    await state.store.init();
  });
  after(async () => {
    await state.front?.close();
    await state.store?.close();
    await Promise.all((state.replicas ?? []).map((r) => r.stop()));
  });
  return {
    get front() {
      return state.front;
    },
    get store() {
      return state.store;
    },
    /** The pid of the replica behind the front's target `i` (a restarted replica keeps its port and index). */
    pidOf(i: number): number {
      return state.replicas[i]!.pid;
    },
    /** SIGKILLs the replicas with these pids (those that asked) and starts them again on their ports. */
    async killAndRestart(pids: number[]): Promise<void> {
      const victims = state.replicas.map((r, i) => ({ r, i })).filter(({ r }) => pids.includes(r.pid));
      assert.ok(victims.length > 0, `the replicas that asked (${pids}) are ours`);
      for (const { r } of victims) assert.equal((await r.stop('SIGKILL')).signal, 'SIGKILL');
      for (const { i } of victims) state.replicas[i] = await start(state.ports[i]!);
    },
  };
}

describe('answers after the wait is parked, on both wires, for both input kinds (two PostgreSQL replicas)', () => {
  const pair = usePair();

  for (const kind of ['elicitation', 'sampling'] as const) {
    for (const killed of [false, true]) {
      const how = killed ? 'every replica that asked is killed (SIGKILL) before the answer; restarted ones take it' : 'answered several seconds after the question';
      it(`2025-11-25 (SDK v1 callToolStream), ${kind}: ${how}, and the task completes with the answer`, async () => {
        const store = pair.store;
        let question!: { at: number; taskId: string };
        let released!: () => void;
        const release = new Promise<void>((r) => (released = r));
        const reply = `a person's ${kind} answer`;
        const person = await connectPerson2025(pair.front.url, kind, async (params) => {
          // The first time it is asked (a restarted replica may ask again on the host's next tasks/result).
          question ??= { at: Date.now(), taskId: params._meta?.[RELATED]?.taskId };
          await release;
          return answerOf(kind, reply);
        });
        const abort = new AbortController();
        try {
          const from = pair.front.log.length;
          const messages: Array<Record<string, any>> = [];
          const streamed = (async () => {
            for await (const m of person.client.experimental.tasks.callToolStream({ name: 'durable_input', arguments: { kind, message: 'Which region?' } }, CallToolResultSchema, { signal: abort.signal })) messages.push(m);
          })().catch((e) => messages.push({ type: 'thrown', error: e }));
          const taskId = await until('the question reaches the person', async () => question?.taskId);
          const { askedBy } = await askedThenParked(store, taskId);
          assert.equal(questionOf(kind, person.questions[0]!), 'Which region?');
          if (killed) {
            // The replica whose tasks/result stream sent the question, and the one that ran the handler up to it.
            const streamOn = pair.front.log.slice(from).filter((l) => l.method === 'tasks/result').map((l) => l.target);
            assert.ok(askedBy, 'the replica that ran the handler is known');
            const pids = [askedBy, ...streamOn.map((i) => pair.pidOf(i))];
            await pair.killAndRestart([...new Set(pids)]);
          }
          // A person answers seconds later, long after the wait was parked.
          await sleep(Math.max(0, question.at + HUMAN_DELAY_MS - Date.now()));
          assert.notEqual((await row(store, taskId)).parkedAt, null, 'still parked when the answer comes');
          released();
          let result: Record<string, any>;
          if (!killed) {
            await streamed;
            const end = messages[messages.length - 1]!;
            assert.equal(end.type, 'result', `the stream ends with the result: ${JSON.stringify(end).slice(0, 500)}`);
            result = end.result;
          } else {
            // The stream that carried the question died with its replica; the host asks for the result again.
            result = (await person.client.experimental.tasks.getTaskResult(taskId, CallToolResultSchema)) as Record<string, any>;
          }
          assert.match(textOf(result), new RegExp(`^${kind} answered: ${reply} \\(asked in \\d+, applied in \\d+\\)$`));
          const done = await row(store, taskId);
          assert.equal(done.status, 'completed');
          assert.ok(done.inputResponses.answer!.answeredAt - question.at >= HUMAN_DELAY_MS - 50, 'the answer was taken seconds after the question');
          await person.wire.assertClean();
        } finally {
          abort.abort();
          await person.close();
        }
      });

      it(`2026-07-28 (TaskClient), ${kind}: ${how}, and the task completes with the answer`, async () => {
        const store = pair.store;
        let question!: { at: number; taskId: string };
        let released!: () => void;
        const release = new Promise<void>((r) => (released = r));
        const reply = `a person's ${kind} answer on 2026`;
        const answer = (k: Kind) => async (params: Record<string, any>, ctx: { taskId: string | undefined }) => {
          assert.equal(questionOf(k, params), 'Which zone?');
          question ??= { at: Date.now(), taskId: ctx.taskId! };
          await release;
          return answerOf(k, reply) as never;
        };
        const client = new TaskClient({ url: pair.front.url, retry: { baseDelayMs: 100, attempts: 10 }, ...(kind === 'elicitation' ? { elicitation: answer(kind) } : { sampling: answer(kind) }) });
        try {
          const call = await client.start('durable_input', { kind, message: 'Which zone?' });
          assert.equal(call.inline, false);
          const { askedBy } = await askedThenParked(store, call.taskId!);
          await until('the question reaches the person', async () => question?.taskId);
          if (killed) {
            assert.ok(askedBy, 'the replica that ran the handler is known');
            await pair.killAndRestart([askedBy]);
          }
          await sleep(Math.max(0, question.at + HUMAN_DELAY_MS - Date.now()));
          assert.notEqual((await row(store, call.taskId!)).parkedAt, null, 'still parked when the answer comes');
          released();
          const result = await call.result();
          assert.match(textOf(result as Record<string, any>), new RegExp(`^${kind} answered: ${reply} \\(asked in \\d+, applied in \\d+\\)$`));
          const done = await row(store, call.taskId!);
          assert.equal(done.status, 'completed');
          assert.ok(done.inputResponses.answer!.answeredAt - question.at >= HUMAN_DELAY_MS - 50);
        } finally {
          await client.close();
        }
      });
    }
  }

  for (const kind of ['elicitation', 'sampling'] as const) {
    it(`a deadline that passes while parked fails the task with the timeout reason (${kind}, both wires)`, async () => {
      // 2025-11-25: the person never answers in time.
      const person = await connectPerson2025(pair.front.url, kind, () => new Promise(() => undefined));
      try {
        const msgs: Array<Record<string, any>> = [];
        let parked: Promise<unknown> | undefined;
        for await (const m of person.client.experimental.tasks.callToolStream({ name: 'durable_input', arguments: { kind, message: 'Too late?', timeoutSeconds: 2 } })) {
          msgs.push(m);
          if (m.type === 'taskCreated') parked = askedThenParked(pair.store, m.task.taskId);
        }
        await parked;
        const end = msgs[msgs.length - 1]!;
        assert.equal(end.type, 'error', JSON.stringify(end).slice(0, 500));
        assert.match(String(end.error.message), /No answer to input "answer" within 2 s; the request expired/);
        assert.doesNotMatch(String(end.error.message), /did not declare/);
        const taskId = msgs.find((m) => m.type === 'taskCreated')!.task.taskId as string;
        const failed = await row(pair.store, taskId);
        assert.equal(failed.status, 'failed');
        assert.equal((failed.error!.data as { reason?: string }).reason, 'input_timeout');
        assert.notEqual(failed.inputResponses.answer?.timedOut, undefined, 'the store recorded the timeout');
        await person.wire.assertClean();
      } finally {
        await person.close();
      }
      // 2026-07-28: the same through TaskClient.
      const never = async () => new Promise<never>(() => undefined);
      const client = new TaskClient({ url: pair.front.url, ...(kind === 'elicitation' ? { elicitation: never } : { sampling: never }) });
      try {
        const call = await client.start('durable_input', { kind, message: 'Too late?', timeoutSeconds: 2 });
        await assert.rejects(call.result(), (e: unknown) => {
          assert.ok(e instanceof TaskFailedError, String(e));
          assert.match(e.message, /No answer to input "answer" within 2 s/);
          assert.equal((e.data as { reason?: string } | undefined)?.reason, 'input_timeout');
          return true;
        });
      } finally {
        await client.close();
      }
    });
  }
});

describe("the demo's migrate on the 2025-11-25 wire, as the issue saw it (SDK v1, one SQLite server)", () => {
  let server: ServerProcess;
  let store: TaskStore;
  before(async () => {
    const path = join(tempDir(), 'demo.db');
    server = await startServer(['--store', `sqlite:${path}`, '--park-after-ms', '2000', '--queue-poll-ms', '200'], { module: DEMO });
    store = new SqliteTaskStore(path);
    await store.init();
  });
  after(async () => {
    await store?.close();
    await server?.stop();
  });

  it('an approval given 5 s after the question (the wait parked at 2 s) applies the migration', async () => {
    let askedAt = 0;
    const person = await connectPerson2025(server.url, 'elicitation', async (params) => {
      askedAt = Date.now();
      assert.match(String(params.message), /Apply migration "0042_region" to shop\?/);
      await sleep(5000);
      // A person who took 5 s: by then the wait is parked (at 2 s; waited for, should the machine be slow).
      await askedThenParked(store, String(params._meta?.[RELATED]?.taskId), 'approval');
      return { action: 'accept', content: { approve: true, reason: 'reviewed' } };
    });
    try {
      const msgs: Array<Record<string, any>> = [];
      for await (const m of person.client.experimental.tasks.callToolStream({ name: 'migrate', arguments: { database: 'shop', migration: '0042_region' } })) msgs.push(m);
      const end = msgs[msgs.length - 1]!;
      assert.equal(end.type, 'result', JSON.stringify(end).slice(0, 500));
      assert.equal(textOf(end.result), 'Applied 0042_region to shop (approved: reviewed).');
      assert.ok(askedAt > 0);
      await person.wire.assertClean();
    } finally {
      await person.close();
    }
  });

  it('no approval within approvalTimeoutSeconds: the task fails with the timeout reason, not a capability error', async () => {
    const person = await connectPerson2025(server.url, 'elicitation', () => new Promise(() => undefined));
    try {
      const msgs: Array<Record<string, any>> = [];
      for await (const m of person.client.experimental.tasks.callToolStream({ name: 'migrate', arguments: { database: 'shop', migration: '0043_late', approvalTimeoutSeconds: 5 } })) msgs.push(m);
      const end = msgs[msgs.length - 1]!;
      assert.equal(end.type, 'error', JSON.stringify(end).slice(0, 500));
      assert.match(String(end.error.message), /No answer to input "approval" within 5 s; the request expired/);
    } finally {
      await person.close();
    }
  });
});
