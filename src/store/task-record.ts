/**
 * A task as a store keeps it (TaskRecord, its questions and answers) and the fence its writes carry: apart from
 * types.ts, whose TaskStore names the event and output stores that name these.
 */
import type { InputRequest, JsonObject, JsonRpcErrorObject, TaskOrigin, TaskStatus } from '../protocol/index.js';

/** An input request the task is waiting for, with its deadline (epoch ms). */
export interface PendingInput {
  request: InputRequest;
  deadline: number;
  /** When the store first recorded the question (its clock; ms since the epoch), so the page that answers it can
   *  say when it was asked. Set by the store; absent on questions recorded before it was kept. */
  askedAt?: number;
}
/** An answered input: the request as asked and the answer, kept so a re-run gets it without asking. A request whose
 *  deadline passed unanswered is recorded here too (`timedOut`, empty response): the store decided it, so a late answer
 *  is refused and a re-run takes the same path. */
export interface AnsweredInput {
  request: InputRequest;
  response: JsonObject;
  answeredAt: number;
  /** The deadline passed before any answer (answeredAt is when that was recorded). */
  timedOut?: true;
}

export interface TaskRecord {
  taskId: string;
  /** Who created it. Every read and write from a caller is checked against it. */
  principal: string;
  tool: string;
  /** Tool arguments, plus whatever the tool's preflight step collected (under `preflight`). */
  args: JsonObject;
  status: TaskStatus;
  statusMessage: string | null;
  createdAt: number;
  updatedAt: number;
  /** Retention in ms from creation (grows by the time spent waiting for input); null = unlimited. */
  ttlMs: number | null;
  /** createdAt + ttlMs, or null. Not enforced while the task waits for input. */
  expiresAt: number | null;
  /** When the task entered input_required, or null. */
  inputSince: number | null;
  pollIntervalMs: number;
  result: JsonObject | null;
  error: JsonRpcErrorObject | null;
  inputRequests: Record<string, PendingInput>;
  inputResponses: Record<string, AnsweredInput>;
  cancelRequestedAt: number | null;
  /** Replica currently responsible for running the handler (fencing token with `epoch`); null while queued or parked. */
  owner: string | null;
  /** From when the run queue's claim may take the task (no handler runs it): when it was queued for capacity, or, for a
   *  parked task, when it must run again (its wake time, or the moment an answer came). Null while a handler owns it. */
  queuedAt: number | null;
  /** Fencing epoch: bumped by every claim (queue, resume from parking, takeover). Writes of a run name the epoch it
   *  started with and are refused once another claim happened, even from the same replica id. */
  epoch: number;
  /** When the task was parked: a durable handler waiting (input, sleep) with no process holding it; null otherwise.
   *  Cleared by the claim that resumes it. */
  parkedAt: number | null;
  /** For a parked task: when it is due to run again even without an answer (its earliest input deadline or the end of
   *  its sleep; earlier once an answer arrived). Null when not parked. */
  wakeAt: number | null;
  attempts: number;
  retrySafe: boolean;
  idempotencyKey: string | null;
  requestHash: string | null;
  /** Client capabilities declared by the creating request (which input kinds may be asked). */
  clientCapabilities: JsonObject;
  /** Which wire created the task: the 2026-07-28 extension, the 2025-11-25 Tasks wire, or a tool handle. */
  origin: TaskOrigin;
  /** The creating request's progressToken (2025-11-25: valid for the task's whole life), or null. */
  progressToken: string | number | null;
  version: number;
  /** When a caller first read the terminal outcome (null: nobody has). */
  retrievedAt: number | null;
  /** The trace context of the call that created the task (null: none was traced), so a run started from the row
   *  (a queue claim, a re-run after a takeover) is tied to it. */
  traceContext: TraceCarrier | null;
  /** The task's latest output sequence number as its row says (a record read or returned from the row; a record
   *  built before its row was written has none). */
  outputSeq?: number;
}

/** W3C Trace Context as it travels in `_meta` (SEP-414) and is kept with a task: `traceparent` and `tracestate`. */
export interface TraceCarrier {
  traceparent: string;
  tracestate?: string;
}

/** Who may write to a running task: the replica that claimed it, in the claim's epoch. */
export interface WriteFence {
  owner: string;
  epoch: number;
}
