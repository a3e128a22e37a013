/** Reading the log the `steps` fixture writes ("START sK <pid>" / "END sK <pid>"), and waiting on it. */
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import type { TaskStore } from '../src/store/types.js';
import { sleep, textOf, until } from './helpers.js';

export interface StepEvent {
  kind: 'START' | 'END';
  step: string;
  pid: number;
}

export function stepEvents(path: string): StepEvent[] {
  if (!existsSync(path)) return [];
  return readFileSync(path, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => {
      const [kind, step, pid] = l.split(' ');
      return { kind: kind as StepEvent['kind'], step: step!, pid: Number(pid) };
    });
}

/** How many times each step started, e.g. {s1: 1, s2: 2}. */
export function starts(path: string): Record<string, number> {
  const out: Record<string, number> = {};
  for (const e of stepEvents(path)) if (e.kind === 'START') out[e.step] = (out[e.step] ?? 0) + 1;
  return out;
}

/** Waits until the log of every path satisfies `pred`. */
export async function untilLogged(paths: string[], pred: (events: StepEvent[]) => boolean, what: string, timeoutMs = 15_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!paths.every((p) => pred(stepEvents(p)))) {
    if (Date.now() > end) assert.fail(`${what}: not logged in ${timeoutMs} ms (${paths.map((p) => JSON.stringify(stepEvents(p))).join(' | ')})`);
    await sleep(15);
  }
}

/** Waits until the store holds step `key` of the task completed: a step's END in the log comes before its row is
 *  committed, and a kill "between two steps" must land after the commit. */
export async function untilStepStored(store: TaskStore, taskId: string, key: string, timeoutMs = 15_000): Promise<void> {
  await until(`step ${key} of task ${taskId} stored completed`, async () => (await store.listSteps(taskId)).find((r) => r.key === key)?.state === 'completed', timeoutMs);
}

export const has = (kind: StepEvent['kind'], step: string, pid?: number) => (events: StepEvent[]) =>
  events.some((e) => e.kind === kind && e.step === step && (pid === undefined || e.pid === pid));

/**
 * What a `steps` task's end and its log must agree on after its process was killed at any moment, many runs stepping
 * at once (their step commits grouped): no step started twice unless idempotent; a not-idempotent task either completed
 * every step once or failed naming the last step that started (its `started` row was durable before it ran, so it is
 * "outcome unknown", never run again); an idempotent task completed, only the step in flight at the kill run twice.
 */
export function assertSurvivedKill(path: string, task: Record<string, any>, count: number, idempotent: boolean): void {
  const events = stepEvents(path).filter((e) => e.kind === 'START');
  const n = starts(path);
  const all = Array.from({ length: count }, (_, k) => `s${k + 1}`);
  if (!idempotent) {
    assert.ok(Object.values(n).every((c) => c === 1), `a step not marked idempotent ran twice: ${JSON.stringify(n)}`);
    if (task.status === 'failed') {
      // The last step that started, or the next one if the kill fell between its `started` commit and its function.
      assert.equal(task.error.data.reason, 'step_interrupted');
      assert.ok([`s${events.length}#1`, `s${events.length + 1}#1`].includes(task.error.data.step), `interrupted ${task.error.data.step} after ${events.length} starts`);
      assert.deepEqual(Object.keys(n), all.slice(0, events.length), 'the steps before the interrupted one, in order, and none after');
      return;
    }
  } else {
    const twice = Object.entries(n).filter(([, c]) => c > 1);
    assert.ok(twice.length <= 1 && twice.every(([, c]) => c === 2), `only the step in flight at the kill runs again: ${JSON.stringify(n)}`);
  }
  assert.equal(task.status, 'completed', JSON.stringify(task.error));
  assert.match(textOf(task.result), new RegExp(`^Steps done: ${all.join(', ')} \\(attempt [12]\\)$`));
  assert.deepEqual(Object.keys(n), all);
}
