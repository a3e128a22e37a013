/**
 * Durable steps: ctx.step and the record behind ctx.sleep. Identity is `name#n`, n counting the calls of `name` in the
 * run, taken synchronously when the step is called (so parallel steps and loops pair with their rows whatever order
 * they finish in, and a deploy that adds or removes *other* steps keeps every pairing). The task's rows are read once
 * per run, on its first step.
 *
 * A step, in order: cancellation is checked; a completed row returns its stored value without running, a failed row
 * throws its error again; a `started` row from an earlier run (the step was running when its process died) runs again
 * only if the step is idempotent, else it is recorded as interrupted and StepInterruptedError is thrown. A new step
 * not marked idempotent is recorded `started` before its function runs (at most once); an idempotent one is recorded
 * only when it ends (one commit). Its value must be JSON within the size limit, or the step fails clearly (recorded
 * failed, never left `started`); the first run returns the stored text parsed, as every replay will. Every write is
 * fenced on the run's owner and epoch: a run that lost the task commits nothing and stops.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { setTimeout as delay } from 'node:timers/promises';
import { ErrorCode, type JsonRpcErrorObject } from '../protocol/index.js';
import { TaskWriteRefused, type StepRecord, type StepWrite, type TaskStore, type WriteFence } from '../store/types.js';
import { StepFailedError, StepInterruptedError, TaskCancelledError, type StepInfo, type StepOptions } from './context.js';
import { JsonValueError, jsonText, overLimit, utf8Bytes } from './json-value.js';
import { storeDidNotAnswer } from './outage.js';
import { errorCodeOf } from './outcome.js';
import type { Logger } from './types.js';

/** The largest value one step may return (a step's own maxResultBytes may not exceed it). */
export const MAX_STEP_BYTES = 1024 * 1024;
/** The most step data one task may hold. */
export const MAX_TASK_STEP_BYTES = 16 * 1024 * 1024;
/** The longest step name. */
const MAX_NAME = 200;

/** Which run's step (if any) the current code runs inside: ctx calls there are refused (no nesting). */
const insideStep = new AsyncLocalStorage<{ runner: StepRunner; key: string }>();

/** Where this run's steps go: the task and the fence of the run (undefined: the call cannot be a task, steps run
 *  unrecorded). */
export interface StepTarget {
  taskId: string;
  fence: WriteFence;
  expiresAt: number | null;
  /** The task's row was created by this run: no step of it can be stored yet (nothing to read back). */
  createdByThisRun?: boolean;
}

/** What steps need from the run. */
export interface StepHost {
  readonly store: TaskStore;
  readonly log: Logger;
  readonly signal: AbortSignal;
  readonly maxStepResultBytes: number;
  /** Makes the call a durable task if it can be one (a step's value must be stored before the handler goes on). */
  durable(): Promise<StepTarget | undefined>;
  /** Another replica (or a later run) holds the task: stop, and write nothing more. */
  lostOwnership(): void;
  /** Abort the run for a reason found in the store (a cancel requested, the task ended or gone). */
  abortFor(reason: TaskCancelledError): void;
  /** A step began or ended (a run is parked only between steps). */
  stepsChanged(): void;
  /** Makes a store call of the run, waiting through an outage while the run may hold its task (outage.ts). */
  own<T>(call: () => Promise<T>): Promise<T>;
}

/** A stored step error: a JSON-RPC error, with the thrown error's name, and `coded: false` when it had no code. */
type StoredError = JsonRpcErrorObject & { name?: string; coded?: false };

function errorOf(key: string, row: StepRecord): Error {
  const e = row.error as StoredError;
  const data = e.data as { reason?: string; epoch?: number } | undefined;
  if (data?.reason === 'step_interrupted') return new StepInterruptedError(key, data.epoch ?? row.epoch);
  return new StepFailedError(key, e);
}

/** What a thrown error is stored as (its data kept only if it is JSON). */
function storedError(key: string, e: unknown): StoredError {
  const message = e instanceof Error ? e.message : String(e);
  const name = e instanceof Error ? e.name : undefined;
  const code = errorCodeOf(e);
  let data = (e as { data?: unknown } | null)?.data;
  try {
    if (data !== undefined) jsonText(data, 'data');
  } catch {
    data = undefined;
  }
  if (code === undefined) return { code: ErrorCode.InternalError, message, ...(name ? { name } : {}), coded: false, data: { reason: 'step_failed', step: key } };
  return { code, message, ...(name ? { name } : {}), ...(data !== undefined ? { data } : {}) };
}

function valueError(key: string, reason: string, message: string, extra: Record<string, unknown> = {}): StoredError {
  return { code: ErrorCode.InternalError, message, data: { reason, step: key, ...extra } };
}

/** How a step of a task is recorded: where, under which identity, and how. */
interface StepRecording {
  target: StepTarget;
  id: { name: string; key: string };
  idempotent: boolean;
  seq: number;
  /** No row for the step exists yet (none replayed, no `started` written): its end is the key's first write. */
  firstWrite: boolean;
}

export class StepRunner {
  private readonly counts = new Map<string, number>();
  private seq = 0;
  /** The rows stored before this run (read once): keys are unique within a run, so its own writes are never looked up. */
  private rows: Promise<Map<string, StepRecord>> | undefined;
  /** Where steps are written once the run is a task (its id and fence never change within a run). */
  private target: StepTarget | undefined;
  private inFlight = 0;
  /** Steps not marked idempotent now running (their `started` row may be written): a stop hands the task over only
   *  between them, so none is cut. */
  private unsafeInFlight = 0;
  private lastReplayedSeq = 0;
  /** Stored rows this run asked for (the others, if completed, are the code's divergence). */
  private readonly requested = new Set<string>();
  private storedBytes = 0;
  /** Ends of steps the store did not take before the run stopped (by key): the replica's own next claim of the task
   *  writes them (recovery.ts), so a step that ran is not run again, nor found interrupted. */
  private readonly unwritten = new Map<string, StepWrite>();

  constructor(private readonly host: StepHost) {}

  /** Step ends this run could not store before it stopped (for the replica's own next claim of the task). */
  get carried(): StepWrite[] {
    return [...this.unwritten.values()];
  }

  /** Steps of this run running now. */
  get running(): number {
    return this.inFlight;
  }

  /** Steps of this run not marked idempotent running now. */
  get unsafeRunning(): number {
    return this.unsafeInFlight;
  }

  /** The key of the step of this run the calling code runs inside (undefined: between steps). */
  get current(): string | undefined {
    const inside = insideStep.getStore();
    return inside?.runner === this ? inside.key : undefined;
  }

  /** Steps and sleeps called so far in this run (the position of code between steps). */
  get calls(): number {
    return this.seq;
  }

  /** Throws when called from inside one of this run's steps (ctx.step, ctx.input and ctx.sleep do not nest). */
  assertOutside(what: string): void {
    const inside = insideStep.getStore();
    if (inside?.runner === this) throw new TypeError(`${what} cannot be called inside step "${inside.key}": steps do not nest; call it between steps`);
  }

  /** The identity of the next call of `name` (synchronous: call order decides n, not completion order). */
  private identity(name: unknown, what: string): { name: string; key: string; seq: number } {
    if (typeof name !== 'string' || name.length === 0 || name.length > MAX_NAME) {
      throw new TypeError(`${what}: name must be a non-empty string of at most ${MAX_NAME} characters`);
    }
    this.assertOutside(what);
    const n = (this.counts.get(name) ?? 0) + 1;
    this.counts.set(name, n);
    return { name, key: `${name}#${n}`, seq: ++this.seq };
  }

  private load(target: StepTarget): Promise<Map<string, StepRecord>> {
    if (target.createdByThisRun) return (this.rows ??= Promise.resolve(new Map()));
    this.rows ??= this.host.own(() => this.host.store.listSteps(target.taskId)).then((rows) => {
      for (const r of rows) this.storedBytes += r.bytes;
      return new Map(rows.map((r) => [r.key, r]));
    });
    return this.rows;
  }

  /** Notes a replayed row; a row asked for before one recorded after it means the code between runs changed. */
  private replayed(row: StepRecord): void {
    this.requested.add(row.key);
    if (row.seq < this.lastReplayedSeq) {
      this.host.log.warn('step-divergence: a step replayed out of its recorded order; the handler\'s code or its order of steps changed since it was recorded', { step: row.key, seq: row.seq });
    }
    this.lastReplayedSeq = Math.max(this.lastReplayedSeq, row.seq);
  }

  /** Writes a step row; a refusal stops the run (and is rethrown as the reason). */
  private async record(target: StepTarget, write: StepWrite): Promise<void> {
    try {
      await this.host.own(() => this.host.store.writeStep(target.taskId, target.fence, write));
    } catch (e) {
      if (!(e instanceof TaskWriteRefused)) {
        if (write.state !== 'started' && (storeDidNotAnswer(e) || this.host.signal.aborted)) this.unwritten.set(write.key, write);
        throw e;
      }
      const reason = e.reason === 'fenced' ? 'taken-over' : e.reason === 'missing' ? 'expired' : 'cancelled';
      if (e.reason === 'fenced') this.host.lostOwnership();
      else this.host.abortFor(new TaskCancelledError(reason));
      throw this.host.signal.reason ?? new TaskCancelledError(reason);
    }
  }

  async step<T>(name: string, fn: (s: StepInfo) => Promise<T> | T, options: StepOptions = {}): Promise<T> {
    const id = this.identity(name, 'ctx.step');
    if (typeof fn !== 'function') throw new TypeError(`ctx.step("${name}"): the second argument must be the step's function`);
    const limit = options.maxResultBytes ?? this.host.maxStepResultBytes;
    if (!Number.isInteger(limit) || limit < 1 || limit > MAX_STEP_BYTES) throw new RangeError(`ctx.step("${name}"): maxResultBytes must be an integer from 1 to ${MAX_STEP_BYTES}`);
    const retries = options.retries ?? { max: 0 };
    if (!Number.isInteger(retries.max) || retries.max < 0 || (retries.backoffMs !== undefined && !(retries.backoffMs >= 0))) {
      throw new RangeError(`ctx.step("${name}"): retries must be {max: integer >= 0, backoffMs?: number >= 0}`);
    }
    this.host.signal.throwIfAborted();
    const unsafe = options.idempotent !== true;
    this.inFlight++;
    if (unsafe) this.unsafeInFlight++;
    this.host.stepsChanged();
    try {
      const target = this.target ?? (this.target = await this.host.durable());
      this.host.signal.throwIfAborted();
      if (!target) return await this.run(id.key, fn, 1, retries, limit, undefined);
      const rows = await this.load(target);
      const row = rows.get(id.key);
      const idempotent = options.idempotent === true;
      let tries = 1;
      if (row) {
        if (row.kind !== 'step') throw new TypeError(`ctx.step("${name}"): "${id.key}" was recorded as a sleep; the handler's code changed since (rename the step)`);
        this.replayed(row);
        if (row.state === 'completed') return (row.result === null ? undefined : JSON.parse(row.result)) as T;
        if (row.state === 'failed') throw errorOf(id.key, row);
        // Started in an earlier run, which stopped while it ran: it may or may not have had its effect.
        if (!idempotent) {
          const interrupted = new StepInterruptedError(id.key, row.epoch);
          const error: StoredError = { code: interrupted.code, message: interrupted.message, data: interrupted.data };
          await this.record(target, { ...this.write(id, row.seq, 'failed', false, row.tries, null, 0), error, startedAt: row.startedAt });
          throw interrupted;
        }
        tries = row.tries + 1;
      } else if (!idempotent) {
        await this.record(target, this.write(id, id.seq, 'started', false, 1, null, 0, true));
      }
      return await this.run(id.key, fn, tries, retries, limit, { target, id, idempotent, seq: row?.seq ?? id.seq, firstWrite: !row && idempotent });
    } finally {
      this.inFlight--;
      if (unsafe) this.unsafeInFlight--;
      this.host.stepsChanged();
    }
  }

  private write(id: { name: string; key: string }, seq: number, state: StepWrite['state'], idempotent: boolean, tries: number, result: string | null, bytes: number, firstWrite = false): StepWrite {
    const now = this.host.store.now();
    return { key: id.key, name: id.name, kind: 'step', seq, state, tries, idempotent, result, error: null, bytes, startedAt: now, finishedAt: state === 'started' ? null : now, firstWrite };
  }

  /** Runs the function (with its retries) and records how it ended; returns the stored value, parsed. */
  private async run<T>(
    key: string,
    fn: (s: StepInfo) => Promise<T> | T,
    firstTry: number,
    retries: { max: number; backoffMs?: number },
    limit: number,
    rec: StepRecording | undefined,
  ): Promise<T> {
    const signal = this.host.signal;
    let tries = firstTry;
    let value: unknown;
    for (let attempt = 0; ; attempt++) {
      signal.throwIfAborted();
      try {
        value = await insideStep.run({ runner: this, key }, () => fn({ signal, key, tries }));
        break;
      } catch (e) {
        // A run stopped by a cancel, its TTL or a takeover records nothing: the step's end is unknown.
        if (signal.aborted) throw e;
        if (attempt < retries.max) {
          await delay((retries.backoffMs ?? 1000) * 2 ** attempt, undefined, { signal });
          tries++;
          continue;
        }
        if (!rec) throw new StepFailedError(key, storedError(key, e));
        return this.fail(rec, tries, storedError(key, e));
      }
    }
    let text: string | undefined;
    try {
      text = jsonText(value, `the value of step "${key}"`);
    } catch (e) {
      const error = valueError(key, 'step_result_not_json', `${(e as JsonValueError).message}; the step ran, but its value could not be stored`);
      if (!rec) throw new StepFailedError(key, error);
      return this.fail(rec, tries, error);
    }
    const bytes = text === undefined ? 0 : overLimit(text, limit);
    if (text !== undefined && bytes !== undefined) {
      const error = valueError(key, 'step_result_too_large', `The value of step "${key}" is ${bytes} bytes of JSON, over its limit of ${limit}; the step ran, but its value was not stored (keep large data elsewhere and return a reference)`, { bytes, limit });
      if (!rec) throw new StepFailedError(key, error);
      return this.fail(rec, tries, error);
    }
    if (!rec) return (text === undefined ? undefined : JSON.parse(text)) as T;
    const size = text === undefined ? 0 : utf8Bytes(text);
    if (this.storedBytes + size > MAX_TASK_STEP_BYTES) {
      return this.fail(rec, tries, valueError(key, 'step_data_too_large', `The steps of this task would hold more than ${MAX_TASK_STEP_BYTES} bytes; step "${key}" ran, but its value was not stored`, { limit: MAX_TASK_STEP_BYTES }));
    }
    await this.record(rec.target, this.write(rec.id, rec.seq, 'completed', rec.idempotent, tries, text ?? null, size, rec.firstWrite));
    this.storedBytes += size;
    return (text === undefined ? undefined : JSON.parse(text)) as T;
  }

  /** Records the step failed (replacing a `started` row) and throws the error every replay will throw. */
  private async fail(rec: StepRecording, tries: number, error: StoredError): Promise<never> {
    await this.record(rec.target, { ...this.write(rec.id, rec.seq, 'failed', rec.idempotent, tries, null, 0, rec.firstWrite), error });
    throw new StepFailedError(rec.id.key, error);
  }

  /**
   * The recorded part of ctx.sleep: its wake time, recorded once as `name#n` ({"wakeAt": ms}), checked against the
   * TTL the first time. Returns the wake time (the caller waits for it, or parks).
   */
  async sleepRecord(name: string, ms: number, wakeAtFor: (now: number, expiresAt: number | null) => number | Promise<number>): Promise<number> {
    const id = this.identity(name, 'ctx.sleep');
    this.host.signal.throwIfAborted();
    const target = await this.host.durable();
    if (!target) return wakeAtFor(this.host.store.now(), null);
    const rows = await this.load(target);
    const row = rows.get(id.key);
    if (row) {
      if (row.kind !== 'sleep' || row.state !== 'completed' || row.result === null) {
        throw new TypeError(`ctx.sleep("${name}"): "${id.key}" was recorded as a step; the handler's code changed since (rename the sleep)`);
      }
      this.replayed(row);
      return (JSON.parse(row.result) as { wakeAt: number }).wakeAt;
    }
    const wakeAt = await wakeAtFor(this.host.store.now(), target.expiresAt);
    const text = JSON.stringify({ wakeAt });
    const write: StepWrite = { ...this.write(id, id.seq, 'completed', true, 1, text, utf8Bytes(text), true), kind: 'sleep' };
    await this.record(target, write);
    return wakeAt;
  }

  /** The run ended: completed steps it never asked for mean the code changed since they were recorded (a warning). */
  ended(): void {
    void this.rows?.then((rows) => {
      const skipped = [...rows.values()].filter((r) => r.state === 'completed' && !this.requested.has(r.key)).map((r) => r.key);
      if (skipped.length > 0) this.host.log.warn('step-divergence: recorded steps this run never asked for; the handler\'s code changed since they ran', { steps: skipped.join(', ') });
    }, () => undefined);
  }
}
