/** Reading the log the `steps` fixture writes ("START sK <pid>" / "END sK <pid>"), and waiting on it. */
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { sleep } from './helpers.js';

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

export const has = (kind: StepEvent['kind'], step: string, pid?: number) => (events: StepEvent[]) =>
  events.some((e) => e.kind === kind && e.step === step && (pid === undefined || e.pid === pid));
