/** The task_steps row every backend reads (same column names in each dialect; SQLite keeps booleans as 0/1). */
import type { StepRecord, StepWrite } from './types.js';

export const STEP_COLUMNS = 'task_id, step_key, name, kind, seq, state, epoch, tries, idempotent, result, error, bytes, started_at, finished_at';

export interface StepRow {
  task_id: string;
  step_key: string;
  name: string;
  kind: StepRecord['kind'];
  seq: number;
  state: StepRecord['state'];
  epoch: number;
  tries: number;
  idempotent: number | boolean;
  result: string | null;
  error: string | null;
  bytes: number;
  started_at: number;
  finished_at: number | null;
}

export function toStep(r: StepRow): StepRecord {
  return {
    taskId: r.task_id,
    key: r.step_key,
    name: r.name,
    kind: r.kind,
    seq: r.seq,
    state: r.state,
    epoch: r.epoch,
    tries: r.tries,
    idempotent: r.idempotent === true || r.idempotent === 1,
    result: r.result,
    error: r.error === null ? null : JSON.parse(r.error),
    bytes: r.bytes,
    startedAt: r.started_at,
    finishedAt: r.finished_at,
  };
}

/** The values of a step write, in the order of the write statements' parameters after (task_id, owner, epoch). */
export function stepValues(s: StepWrite): unknown[] {
  return [s.key, s.name, s.kind, s.seq, s.state, s.tries, s.idempotent, s.result, s.error === null ? null : JSON.stringify(s.error), s.bytes, s.startedAt, s.finishedAt];
}
