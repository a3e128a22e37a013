/**
 * State-machine rules as pure functions, shared by every backend: what asking for input, answering it and its deadline
 * passing do to a task's row, how the TTL grows after a wait, when a task reads expired, what parking a durable wait
 * writes, which task the run queue's claim takes (queued or parked and due), and why a conditional write matched no
 * row. A backend reads the row, applies one of these and writes the result back conditionally on the version it read
 * (or states the same rule in one SQL statement, checked against these by the store test kit).
 */
import { isTerminal, type JsonObject, type TaskStatus } from '../protocol/index.js';
import { TaskWriteRefused, type AnsweredInput, type ParkRequest, type PendingInput, type TaskRecord, type WriteFence } from './types.js';

type InputFields = Pick<TaskRecord, 'status' | 'inputRequests' | 'inputResponses' | 'inputSince' | 'ttlMs' | 'expiresAt' | 'createdAt' | 'parkedAt' | 'queuedAt'>;

/** The fields a requestInput, answerInput or expireInput writes. */
export interface InputChange {
  status: TaskStatus;
  inputRequests: Record<string, PendingInput>;
  inputResponses: Record<string, AnsweredInput>;
  inputSince: number | null;
  ttlMs: number | null;
  expiresAt: number | null;
  /** A parked task becomes claimable at once when nothing is outstanding any more (its run can go on). */
  queuedAt: number | null;
}

/** Whether a task reads `expired` at `now`: its TTL passed, and it is not waiting for input (a wait stops the TTL). */
export function readsExpired(rec: { status: TaskStatus; expiresAt: number | null }, now: number): boolean {
  return rec.expiresAt !== null && rec.expiresAt <= now && rec.status !== 'input_required';
}

/** JSON with object keys sorted: equal for equal values whatever order their keys were written or stored in (PostgreSQL's
 *  jsonb reorders them). */
function canonical(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`;
  if (v !== null && typeof v === 'object') {
    return `{${Object.keys(v).sort().filter((k) => (v as Record<string, unknown>)[k] !== undefined).map((k) => `${JSON.stringify(k)}:${canonical((v as Record<string, unknown>)[k])}`).join(',')}}`;
  }
  return JSON.stringify(v);
}

/** Whether a key is asked again with the request it was answered for (a replay), whatever the stored key order. */
export function sameRequest(a: unknown, b: unknown): boolean {
  return canonical(a) === canonical(b);
}

/** Outstanding keys and answers after recording every outstanding key whose deadline passed as timed out. */
function withTimeouts(rec: InputFields, now: number): { outstanding: Record<string, PendingInput>; answered: Record<string, AnsweredInput>; timedOut: string[] } {
  const outstanding = { ...rec.inputRequests };
  const answered = { ...rec.inputResponses };
  const timedOut: string[] = [];
  for (const [key, pending] of Object.entries(outstanding)) {
    if (pending.deadline > now) continue;
    answered[key] = { request: pending.request, response: {}, answeredAt: now, timedOut: true };
    delete outstanding[key];
    timedOut.push(key);
  }
  return { outstanding, answered, timedOut };
}

/** The input fields once `outstanding` and `answered` are what they are: status, TTL growth when the wait ended, and
 *  the wake of a parked task whose wait is over. */
function inputChange(rec: InputFields, outstanding: Record<string, PendingInput>, answered: Record<string, AnsweredInput>, now: number): InputChange {
  const waiting = Object.keys(outstanding).length > 0;
  const wasWaiting = rec.status === 'input_required';
  const ttl = wasWaiting && !waiting ? ttlAfterWait(rec, now) : { ttlMs: rec.ttlMs, expiresAt: rec.expiresAt };
  return {
    status: waiting ? 'input_required' : wasWaiting ? 'working' : rec.status,
    inputRequests: outstanding,
    inputResponses: answered,
    inputSince: waiting ? rec.inputSince ?? now : wasWaiting ? null : rec.inputSince,
    ...ttl,
    queuedAt: rec.parkedAt !== null && wasWaiting && !waiting ? Math.min(rec.queuedAt ?? now, now) : rec.queuedAt,
  };
}

/**
 * The recorded timeout: every outstanding key whose deadline passed becomes answered-by-timeout (whoever records it:
 * the deadline decides, not a timer in one process), so a late answer is refused and a re-run takes the same path.
 * `change` is undefined when no deadline passed.
 */
export function expireInputs(rec: InputFields, now: number): { timedOut: string[]; change?: InputChange } {
  const { outstanding, answered, timedOut } = withTimeouts(rec, now);
  if (timedOut.length === 0) return { timedOut };
  return { timedOut, change: inputChange(rec, outstanding, answered, now) };
}

/**
 * Adds outstanding requests, each with when it was asked (a key already outstanding keeps its first deadline and askedAt; a key already answered, or timed out,
 * with the same request is a replay and is not asked again), after recording the deadlines that passed. Throws if an
 * answered key is re-asked with another request.
 */
export function askInput(rec: InputFields, requests: Record<string, PendingInput>, now: number): InputChange {
  const { outstanding, answered } = withTimeouts(rec, now);
  for (const [key, pending] of Object.entries(requests)) {
    const done = answered[key];
    if (done) {
      if (!sameRequest(done.request, pending.request)) {
        throw new Error(`Input key "${key}" was already answered for a different request; keys are unique for the task's life`);
      }
      continue;
    }
    const current = outstanding[key];
    // A key asked again keeps its first deadline and its first askedAt: the person has been asked since then.
    outstanding[key] = current
      ? { request: pending.request, deadline: current.deadline, ...(current.askedAt !== undefined ? { askedAt: current.askedAt } : {}) }
      : { request: pending.request, deadline: pending.deadline, askedAt: now };
  }
  return inputChange(rec, outstanding, answered, now);
}

/** TTL and expiry after a wait for input that started at `inputSince` ends at `now` (the TTL grows by the wait). */
export function ttlAfterWait(rec: { createdAt: number; ttlMs: number | null; expiresAt: number | null; inputSince: number | null }, now: number): { ttlMs: number | null; expiresAt: number | null } {
  if (rec.inputSince === null || rec.ttlMs === null) return { ttlMs: rec.ttlMs, expiresAt: rec.expiresAt };
  const ttlMs = rec.ttlMs + Math.max(0, now - rec.inputSince);
  return { ttlMs, expiresAt: rec.createdAt + ttlMs };
}

/**
 * Answers the outstanding keys among `responses` (unknown or already answered keys are ignored, and so is a key whose
 * deadline passed: it is recorded timed out instead). `change` is undefined when nothing changed (nothing to write).
 * When no key stays outstanding the task returns to working, its TTL grows by the time it waited, and a parked task
 * becomes claimable at once.
 */
export function answerInput(rec: InputFields, responses: Record<string, JsonObject>, now: number): { accepted: string[]; change?: InputChange } {
  if (rec.status !== 'input_required') return { accepted: [] };
  const { outstanding, answered, timedOut } = withTimeouts(rec, now);
  const accepted: string[] = [];
  for (const [key, response] of Object.entries(responses)) {
    const pending = outstanding[key];
    if (!pending) continue;
    answered[key] = { request: pending.request, response, answeredAt: now };
    delete outstanding[key];
    accepted.push(key);
  }
  if (accepted.length === 0 && timedOut.length === 0) return { accepted };
  return { accepted, change: inputChange(rec, outstanding, answered, now) };
}

/**
 * A parked wait: the run fenced by `fence` lets go of the task (no owner), which the claim takes again from
 * `wait.wakeAt`, or at once when an answer ends the wait. Not parked when an awaited key was answered or timed out
 * meanwhile, or the wake time is already here (`continue`: the run goes on), unless the run hands the task over
 * (`handOff`: its replica stops); never once a cancel was requested (`cancelled`). Throws TaskWriteRefused when the run
 * no longer holds the task.
 */
export function parkChange(
  rec: Pick<TaskRecord, 'taskId' | 'status' | 'owner' | 'epoch' | 'cancelRequestedAt' | 'inputResponses'>,
  fence: WriteFence,
  wait: ParkRequest,
  now: number,
): { outcome: 'continue' | 'cancelled' } | { outcome: 'parked'; change: { owner: null; parkedAt: number; queuedAt: number } } {
  if (isTerminal(rec.status)) throw new TaskWriteRefused(rec.taskId, 'terminal');
  if (rec.owner !== fence.owner || rec.epoch !== fence.epoch) throw new TaskWriteRefused(rec.taskId, 'fenced');
  if (rec.cancelRequestedAt !== null) return { outcome: 'cancelled' };
  if (!wait.handOff && (wait.wakeAt <= now || wait.awaiting.some((k) => rec.inputResponses[k]))) return { outcome: 'continue' };
  return { outcome: 'parked', change: { owner: null, parkedAt: now, queuedAt: wait.wakeAt } };
}

/** Why a conditional write to `taskId` matched no row, given the row as it is now (undefined: gone). */
export function refusalOf(
  taskId: string,
  row: { status: TaskStatus; owner: string | null; epoch: number; cancelRequestedAt?: number | null } | undefined,
  owner?: string | null,
  epoch?: number,
): TaskWriteRefused {
  if (!row) return new TaskWriteRefused(taskId, 'missing');
  if (isTerminal(row.status)) return new TaskWriteRefused(taskId, 'terminal');
  if (owner !== undefined && row.owner !== owner) return new TaskWriteRefused(taskId, 'fenced');
  if (epoch !== undefined && row.epoch !== epoch) return new TaskWriteRefused(taskId, 'fenced');
  if (row.cancelRequestedAt !== undefined && row.cancelRequestedAt !== null) return new TaskWriteRefused(taskId, 'cancelled');
  return new TaskWriteRefused(taskId, 'terminal');
}

/** A claimable task as the claim rule sees it: queued for capacity, or parked (queuedAt: its wake time). */
export interface QueuedTask {
  taskId: string;
  principal: string;
  tool: string;
  status: TaskStatus;
  queuedAt: number;
  /** Set for a parked task: then queuedAt is when it is due. */
  parkedAt: number | null;
  expiresAt: number | null;
  cancelRequestedAt: number | null;
}

/** Whether the claim may take `q` at `now` at all: due (a queued task always is, whatever the clocks of the replica
 *  that queued it and of the claimer say), not cancelled, not expired. */
export function claimable(q: QueuedTask, now: number): boolean {
  return (q.parkedAt === null || q.queuedAt <= now) && q.cancelRequestedAt === null && !readsExpired(q, now);
}

/**
 * The claim rule (QueueClaim) as a pure function: the next task a claim takes, given the queued tasks and, for each
 * running task (claimed or started at once, on any replica), its principal and tool. A claim of several tasks is
 * this, repeated: each task taken runs, and takes one of its tool's room. Backends state the same rule in
 * SQL; the store test kit checks that they agree with this on random queues.
 */
export function nextClaim(
  queued: QueuedTask[],
  running: Array<{ principal: string; tool: string }>,
  claim: { now: number; room: Record<string, number>; limits: Record<string, number>; principalCap?: { cap: number; running: Record<string, number> } },
): string | undefined {
  const runningOf = (key: 'principal' | 'tool', v: string) => running.filter((r) => r[key] === v).length;
  const cap = claim.principalCap;
  const eligible = queued
    .filter((q) => claimable(q, claim.now) && (claim.room[q.tool] ?? 0) > 0)
    .filter((q) => !cap || (cap.running[q.principal] ?? 0) < cap.cap)
    .filter((q) => !(q.tool in claim.limits) || runningOf('tool', q.tool) < claim.limits[q.tool]!)
    .sort((a, b) => a.queuedAt - b.queuedAt || (a.taskId < b.taskId ? -1 : 1));
  const heads = new Map<string, QueuedTask>();
  for (const q of eligible) if (!heads.has(q.principal)) heads.set(q.principal, q);
  const order = [...heads.values()].sort(
    (a, b) => runningOf('principal', a.principal) - runningOf('principal', b.principal) || a.queuedAt - b.queuedAt || (a.taskId < b.taskId ? -1 : 1),
  );
  return order[0]?.taskId;
}
