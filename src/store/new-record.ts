/**
 * The record a creation wrote, built from what was sent: both backends answer a creation with it instead of reading
 * the row back (and parsing its JSON columns) on the hot path.
 */
import type { EndedAtCreation, NewTask, TaskRecord } from './types.js';

/** The record a fresh INSERT wrote: exactly what was sent plus the column defaults (no read-back on the hot path). */
export function newRecord(t: NewTask): TaskRecord {
  const status = t.status ?? 'working';
  return {
    taskId: t.taskId,
    principal: t.principal,
    tool: t.tool,
    args: t.args,
    status,
    statusMessage: t.statusMessage ?? null,
    createdAt: t.createdAt,
    updatedAt: t.createdAt,
    ttlMs: t.ttlMs,
    expiresAt: t.ttlMs === null ? null : t.createdAt + t.ttlMs,
    inputSince: status === 'input_required' ? t.createdAt : null,
    pollIntervalMs: t.pollIntervalMs,
    result: null,
    error: null,
    inputRequests: {},
    inputResponses: {},
    cancelRequestedAt: null,
    owner: t.queued ? null : t.owner,
    queuedAt: t.queued ? t.createdAt : null,
    epoch: 1,
    parkedAt: null,
    wakeAt: null,
    attempts: 1,
    retrySafe: t.retrySafe,
    idempotencyKey: t.idempotencyKey ?? null,
    requestHash: t.requestHash ?? null,
    clientCapabilities: t.clientCapabilities ?? {},
    origin: t.origin ?? 'extension',
    progressToken: t.progressToken ?? null,
    version: 1,
    retrievedAt: null,
    traceContext: t.traceContext ?? null,
  };
}

/** The record of a row written finished (NewTask.endedBy): as a finish would leave it, in the creation's one write. */
export function endedRecord(t: NewTask, ended: EndedAtCreation): TaskRecord {
  const o = ended.outcome;
  return {
    ...newRecord(t),
    status: o.status,
    statusMessage: ended.statusMessage ?? t.statusMessage ?? null,
    updatedAt: ended.at,
    inputSince: null,
    result: o.status === 'completed' ? o.result : null,
    error: o.status === 'failed' ? o.error : null,
  };
}
