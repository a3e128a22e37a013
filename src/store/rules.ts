/**
 * State-machine rules as pure functions, shared by every backend: what asking for input and answering it do to a
 * task's row, how the TTL grows after a wait, and why a conditional write matched no row. A backend reads the
 * row, applies one of these and writes the result back conditionally on the version it read.
 */
import { isTerminal, type JsonObject, type TaskStatus } from '../protocol/index.js';
import { TaskWriteRefused, type AnsweredInput, type PendingInput, type TaskRecord } from './types.js';

type InputFields = Pick<TaskRecord, 'status' | 'inputRequests' | 'inputResponses' | 'inputSince' | 'ttlMs' | 'expiresAt'>;

/** The fields a requestInput or answerInput writes. */
export interface InputChange {
  status: TaskStatus;
  inputRequests: Record<string, PendingInput>;
  inputResponses: Record<string, AnsweredInput>;
  inputSince: number | null;
  ttlMs: number | null;
  expiresAt: number | null;
}

/**
 * Adds outstanding requests (a key already outstanding keeps its first deadline; a key already answered with the
 * same request is a replay and is not asked again). Throws if an answered key is re-asked with another request.
 */
export function askInput(rec: InputFields, requests: Record<string, PendingInput>, now: number): InputChange {
  const outstanding = { ...rec.inputRequests };
  for (const [key, pending] of Object.entries(requests)) {
    const answered = rec.inputResponses[key];
    if (answered) {
      if (JSON.stringify(answered.request) !== JSON.stringify(pending.request)) {
        throw new Error(`Input key "${key}" was already answered for a different request; keys are unique for the task's life`);
      }
      continue;
    }
    const current = outstanding[key];
    outstanding[key] = current ? { request: pending.request, deadline: current.deadline } : pending;
  }
  const waiting = Object.keys(outstanding).length > 0;
  return {
    status: waiting ? 'input_required' : rec.status,
    inputRequests: outstanding,
    inputResponses: rec.inputResponses,
    inputSince: waiting ? rec.inputSince ?? now : rec.inputSince,
    ttlMs: rec.ttlMs,
    expiresAt: rec.expiresAt,
  };
}

/** TTL and expiry after a wait for input that started at `inputSince` ends at `now` (the TTL grows by the wait). */
export function ttlAfterWait(rec: { createdAt: number; ttlMs: number | null; expiresAt: number | null; inputSince: number | null }, now: number): { ttlMs: number | null; expiresAt: number | null } {
  if (rec.inputSince === null || rec.ttlMs === null) return { ttlMs: rec.ttlMs, expiresAt: rec.expiresAt };
  const ttlMs = rec.ttlMs + Math.max(0, now - rec.inputSince);
  return { ttlMs, expiresAt: rec.createdAt + ttlMs };
}

/**
 * Answers the outstanding keys among `responses` (unknown or already answered keys are ignored). `change` is
 * undefined when nothing was accepted (nothing to write). When no key stays outstanding the task returns to
 * working and its TTL grows by the time it waited.
 */
export function answerInput(
  rec: InputFields & { createdAt: number },
  responses: Record<string, JsonObject>,
  now: number,
): { accepted: string[]; change?: InputChange } {
  if (rec.status !== 'input_required') return { accepted: [] };
  const outstanding = { ...rec.inputRequests };
  const answered: Record<string, AnsweredInput> = { ...rec.inputResponses };
  const accepted: string[] = [];
  for (const [key, response] of Object.entries(responses)) {
    const pending = outstanding[key];
    if (!pending) continue;
    answered[key] = { request: pending.request, response, answeredAt: now };
    delete outstanding[key];
    accepted.push(key);
  }
  if (accepted.length === 0) return { accepted };
  const stillWaiting = Object.keys(outstanding).length > 0;
  const ttl = stillWaiting ? { ttlMs: rec.ttlMs, expiresAt: rec.expiresAt } : ttlAfterWait(rec, now);
  return {
    accepted,
    change: {
      status: stillWaiting ? 'input_required' : 'working',
      inputRequests: outstanding,
      inputResponses: answered,
      inputSince: stillWaiting ? rec.inputSince : null,
      ...ttl,
    },
  };
}

/** Why a conditional write to `taskId` matched no row, given the row as it is now (undefined: gone). */
export function refusalOf(taskId: string, row: { status: TaskStatus; owner: string | null } | undefined, owner?: string | null): TaskWriteRefused {
  if (!row) return new TaskWriteRefused(taskId, 'missing');
  if (isTerminal(row.status)) return new TaskWriteRefused(taskId, 'terminal');
  if (owner !== undefined && row.owner !== owner) return new TaskWriteRefused(taskId, 'fenced');
  return new TaskWriteRefused(taskId, 'terminal');
}

/** A queued task as the claim rule sees it. */
export interface QueuedTask {
  taskId: string;
  principal: string;
  tool: string;
  queuedAt: number;
  expiresAt: number | null;
  cancelRequestedAt: number | null;
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
  claim: { now: number; room: Record<string, number>; limits: Record<string, number> },
): string | undefined {
  const runningOf = (key: 'principal' | 'tool', v: string) => running.filter((r) => r[key] === v).length;
  const eligible = queued
    .filter((q) => q.cancelRequestedAt === null && (q.expiresAt === null || q.expiresAt > claim.now) && (claim.room[q.tool] ?? 0) > 0)
    .filter((q) => !(q.tool in claim.limits) || runningOf('tool', q.tool) < claim.limits[q.tool]!)
    .sort((a, b) => a.queuedAt - b.queuedAt || (a.taskId < b.taskId ? -1 : 1));
  const heads = new Map<string, QueuedTask>();
  for (const q of eligible) if (!heads.has(q.principal)) heads.set(q.principal, q);
  const order = [...heads.values()].sort(
    (a, b) => runningOf('principal', a.principal) - runningOf('principal', b.principal) || a.queuedAt - b.queuedAt || (a.taskId < b.taskId ? -1 : 1),
  );
  return order[0]?.taskId;
}
