/**
 * The storage contract. A backend is a folder under src/store/ that implements TaskStore and passes the
 * shared test kit (src/store/testkit). A store never imports the runtime or the SDK.
 */
import type { SignalBus } from './local-bus.js';
import type { EventStore } from './events.js';
import type { OutputEventStore } from './output-events.js';
import type { OperatorSessionStore } from './operator-sessions.js';
export type { OperatorSession, OperatorSessionStore } from './operator-sessions.js';
import type { OutputStore } from './output.js';
import type { JsonObject, JsonRpcErrorObject, TaskOrigin, TaskStatus } from '../protocol/index.js';
import type { PendingInput, TaskRecord, TraceCarrier, WriteFence } from './task-record.js';
export type { AnsweredInput, PendingInput, TaskRecord, TraceCarrier, WriteFence } from './task-record.js';

export interface NewTask {
  taskId: string;
  principal: string;
  tool: string;
  args: JsonObject;
  status?: 'working' | 'input_required';
  statusMessage?: string | null;
  createdAt: number;
  ttlMs: number | null;
  pollIntervalMs: number;
  /** The replica that runs it now; null for a task created queued. */
  owner: string | null;
  /** Created waiting in the run queue (owner null, queuedAt = createdAt) instead of running at once. */
  queued?: boolean;
  retrySafe: boolean;
  idempotencyKey?: string | null;
  requestHash?: string | null;
  clientCapabilities: JsonObject;
  /** Default `extension`. */
  origin?: TaskOrigin;
  progressToken?: string | number | null;
  traceContext?: TraceCarrier | null;
  /** Read once, as the row is written: the run's end if its handler (started beside the write) has already ended,
   *  so the row is written finished and the creation costs one write. A backend may ignore it; the runtime then
   *  writes the end with `finish`, and the record's status tells which happened. */
  endedBy?: () => EndedAtCreation | undefined;
}

/** A run's end known before its task's row is written (see NewTask.endedBy). */
export interface EndedAtCreation {
  outcome: Outcome;
  statusMessage: string | null;
  /** When it ended, on the store's clock (the row's updatedAt). */
  at: number;
}

/** Where a page of a listing starts: after this task (newest first). */
export interface ListCursor {
  createdAt: number;
  taskId: string;
}

/** What tasks/get and notifications/tasks need: a narrow read of the hot path. */
export type TaskView = Pick<
  TaskRecord,
  'taskId' | 'principal' | 'status' | 'statusMessage' | 'createdAt' | 'updatedAt' | 'ttlMs' | 'pollIntervalMs' | 'result' | 'error' | 'inputRequests' | 'retrievedAt' | 'version' | 'queuedAt' | 'parkedAt'
> & {
  /** The task's latest output sequence number (0 or absent: no output; see ./output.ts), so a poller knows output
   *  exists without opening a stream. */
  outputSeq?: number;
};

/** A task in a listing: what a list row shows, without arguments, results or inputs. */
export type TaskSummary = Pick<
  TaskRecord,
  'taskId' | 'principal' | 'tool' | 'status' | 'statusMessage' | 'createdAt' | 'updatedAt' | 'ttlMs' | 'pollIntervalMs' | 'origin'
>;

export type TaskLookup<R = TaskRecord> =
  | { state: 'found'; record: R }
  | { state: 'expired'; principal: string; expiredAt: number }
  | { state: 'missing' };

export type Outcome =
  /** `resultJson`: the result's JSON text when whoever built the outcome already serialized it (checking its size):
   *  the store writes that text, so a result is serialized once. */
  | { status: 'completed'; result: JsonObject; resultJson?: string }
  | { status: 'failed'; error: JsonRpcErrorObject }
  | { status: 'cancelled' };

/** Why a write was refused. `terminal`: the task already finished; `fenced`: another owner (or a later claim) holds it;
 *  `cancelled`: a cancel was requested, so no new step may start. */
export type RefusalReason = 'terminal' | 'fenced' | 'missing' | 'cancelled';

const REFUSALS: Record<RefusalReason, string> = {
  terminal: 'the task is already terminal',
  fenced: 'another replica (or a later run) owns the task now',
  missing: 'the task no longer exists',
  cancelled: 'a cancel was requested',
};

export class TaskWriteRefused extends Error {
  constructor(readonly taskId: string, readonly reason: RefusalReason) {
    super(`Write to task ${taskId} refused: ${REFUSALS[reason]}`);
    this.name = 'TaskWriteRefused';
  }
}

/** A value the store cannot hold as given (e.g. PostgreSQL's jsonb refuses U+0000): nothing was written. */
export class TaskValueRefused extends Error {
  constructor(readonly taskId: string, readonly why: string) {
    super(`Task ${taskId}: the value could not be stored: ${why}`);
    this.name = 'TaskValueRefused';
  }
}

/** The store could not be reached or did not answer within its deadline: a failure of the store, not of the request.
 *  Whether a write in flight happened is unknown (the caller retries, with an idempotency key for a creation). */
export class StoreUnavailableError extends Error {
  constructor(readonly why: string, options?: { cause?: unknown }) {
    super(`The task store is unreachable: ${why}`, options);
    this.name = 'StoreUnavailableError';
  }
}

/** A durable step as stored (table task_steps): one row per identity `name#n`. */
export interface StepRecord {
  taskId: string;
  /** Identity: `name#n`, n counting the calls of that name in a run (1-based). */
  key: string;
  name: string;
  /** `step`, or `sleep` (a durable timer: result `{"wakeAt": ms}`). */
  kind: 'step' | 'sleep';
  /** Call order in the run that first recorded it (replays compare it to spot reordered code). */
  seq: number;
  /** `started`: its function was running (recorded before it ran; only for steps not marked idempotent). */
  state: 'started' | 'completed' | 'failed';
  /** The epoch of the run that wrote it (a `started` row from an earlier epoch was in flight when its run stopped). */
  epoch: number;
  tries: number;
  idempotent: boolean;
  /** The exact JSON text of the value (null: the step returned nothing). Text, not jsonb: what is stored is returned. */
  result: string | null;
  /** A failed step's error, as it is thrown again on every replay. */
  error: JsonRpcErrorObject | null;
  /** Size of `result` in UTF-8 bytes. */
  bytes: number;
  startedAt: number;
  finishedAt: number | null;
}

/** What a step write sets (the row for `key` is created or replaced). */
export type StepWrite = Omit<StepRecord, 'taskId' | 'epoch'> & {
  /** No row for `key` was read or written by the run that writes: a store may insert without looking for one
   *  first (a row found anyway is replaced, as for any write). A hint: leaving it out is always right. */
  firstWrite?: boolean;
};

/** A wait to park: when the task must run again without an answer, and the input keys it waits for (if any). */
export interface ParkRequest {
  wakeAt: number;
  awaiting: string[];
  /** The run's replica is shutting down and hands the task over: parked even when due (`wakeAt` now), so any
   *  replica's claim resumes it at once. */
  handOff?: boolean;
}

/** What a park did: `parked` (no owner now); `continue` (an awaited key was answered or timed out meanwhile, or the wake
 *  time is here: the run goes on); `cancelled` (a cancel was requested: the run must stop). */
export type ParkResult = { outcome: 'parked' | 'continue' | 'cancelled'; record: TaskRecord };

export class IdempotencyConflictError extends Error {
  constructor(readonly key: string, readonly existingTaskId: string) {
    super(`Idempotency key "${key}" was already used for this tool with different arguments (task ${existingTaskId}); use a new key for a different call`);
    this.name = 'IdempotencyConflictError';
  }
}

export interface ReplicaInfo {
  replicaId: string;
  host: string;
  pid: number;
  startedAt: number;
  heartbeatAt: number;
  /** Age of the heartbeat on the store's clock when it was read (leases are judged by it; absent: heartbeatAt is on
   *  the reader's clock). */
  heartbeatAgeMs?: number;
}

export interface SweepResult {
  /** Tasks whose TTL passed and that are now tombstones (their steps deleted with them); `status` is what they had
   *  before. `queued`: still waiting in the run queue (never started); `parked`: a durable wait with no process. */
  expired: Array<{ taskId: string; status: TaskStatus; owner: string | null; tool: string; retrieved: boolean; queued: boolean; parked: boolean }>;
  /** Tombstones purged for good. */
  purged: number;
}

/**
 * One claim from the run queue: which claimable tasks `owner` may start now (queued for capacity, or parked and due:
 * queuedAt <= now). The rule (every backend, one statement; rules.nextClaim states it), applied once per task taken:
 * never a task whose cancel was requested or whose TTL passed (rules.readsExpired); only a tool with room left in `room` (what the claimer serves and may still start); never a tool whose
 * deployment-wide limit in `limits` is reached by the tasks running anywhere (counted under concurrent claimers);
 * among the principals with eligible work, the one with the fewest running tasks first (so one caller's backlog
 * cannot starve another's single task), then the oldest queued.
 */
export interface QueueClaim {
  owner: string;
  now: number;
  /** Tool -> how many more of it the claimer may start now (its per-replica room); tools not listed are not served. */
  room: Record<string, number>;
  /** Most tasks to take in this claim (the claimer's free slots). */
  max: number;
  /** Deployment-wide limits: tool -> most tasks of it running at once across every replica. */
  limits: Record<string, number>;
  /** The claimer's per-principal bound: a principal already running `cap` handlers on the claimer (`running`, this
   *  claim's own takes counted as it goes) gets no more from this claim. Absent: no such bound. */
  principalCap?: { cap: number; running: Record<string, number> };
}

export interface PrincipalLoad {
  queued: number;
  stored: number;
  nextExpiry: number | null;
}

export interface TaskStore {
  readonly backend: string;
  /** Opens the store and applies numbered migrations. Idempotent. */
  init(): Promise<void>;
  close(): Promise<void>;
  /** The store's clock, epoch ms: every time decision another process must agree with (creation, expiry and the
   *  sweep, claims and wakes, input deadlines, sleeps) is made on it, never on a replica's own clock. PostgreSQL:
   *  the database's clock; SQLite: the clock of the machine that holds the file (every process on it shares one). */
  now(): number;
  /** The bus that carries signals between the processes sharing this store (default: in-process only). */
  createSignalBus?(options?: { onError?: (message: string) => void }): SignalBus;
  /** Start-up check (after init) that what the store relies on holds, e.g. its schema and statement deadline through
   *  whatever sits between it and the database; throws saying what to do when it does not. */
  selfCheck?(): Promise<void>;
  /** After init: set when the schema is newer than this build knows and keeps it working (a rollback), saying so
   *  in a line naming both versions (src/store/schema-version.ts). A schema this build must not serve fails init. */
  readonly schemaAhead?: string | undefined;
  /** Whether `create` honours NewTask.endedBy (writes a run that already ended finished, in the creation's write). */
  readonly writesEndedAtCreation?: boolean;

  /** Durably creates a task; resolves only after the commit. With an idempotency key already used by the
   *  same principal and tool, returns the existing record (`created: false`) or throws IdempotencyConflictError
   *  when the request hash differs. */
  create(task: NewTask): Promise<{ record: TaskRecord; created: boolean }>;
  /** The task; a task whose TTL passed reads `expired` at once, on every replica, swept or not (rules.readsExpired,
   *  on the store's clock), except while it waits for input. */
  get(taskId: string): Promise<TaskLookup>;
  /** The narrow read behind tasks/get (one indexed read of the fields on the wire); expiry as for get. */
  view(taskId: string): Promise<TaskLookup<TaskView>>;

  /** Notes that the terminal outcome was read (the only write a terminal task accepts). */
  markRetrieved(taskId: string, now: number): Promise<void>;
  /** Status message and poll interval; refused once terminal or when `owner` (in `epoch`, if given) no longer holds
   *  the task. */
  setProgress(taskId: string, owner: string, statusMessage: string | null, pollIntervalMs?: number, epoch?: number): Promise<TaskRecord>;
  setRetrySafe(taskId: string, owner: string, retrySafe: boolean, epoch?: number): Promise<TaskRecord>;
  /** Adds outstanding input requests (keeping the deadline of keys already outstanding) and moves the task
   *  to input_required; keys whose deadline passed are recorded timed out first (rules.askInput). Throws if a key was
   *  already answered with a different request. */
  requestInput(taskId: string, owner: string, requests: Record<string, PendingInput>, now: number, epoch?: number): Promise<TaskRecord>;
  /** Answers the outstanding keys among `responses` (others are ignored, and so are keys whose deadline passed: they
   *  are recorded timed out instead). When none stay outstanding the task returns to working and its TTL grows by the
   *  time it waited; a parked task becomes claimable at once (rules.answerInput). */
  answerInput(taskId: string, responses: Record<string, JsonObject>, now: number): Promise<{ record: TaskRecord; accepted: string[] }>;
  /** Records every outstanding key whose deadline passed as timed out (rules.expireInputs), whoever asks: time decides,
   *  not the replica that asked. undefined: the task is gone. */
  expireInput(taskId: string, now: number): Promise<TaskRecord | undefined>;
  /** Records the intent to cancel (durable). Returns the record; a terminal task is returned unchanged. */
  requestCancel(taskId: string, now: number): Promise<TaskRecord | undefined>;
  /** Unfinished tasks of `owner` whose cancel was requested (the fallback when a cancel signal was missed). */
  pendingCancels(owner: string): Promise<string[]>;
  /** Moves the task to a terminal state. Refused when already terminal or fenced (owner, and epoch if given). A value
   *  the backend cannot hold is refused with TaskValueRefused (nothing written). */
  finish(taskId: string, owner: string | null, outcome: Outcome, statusMessage: string | null, now: number, epoch?: number): Promise<TaskRecord>;

  /** Replica liveness (leases). */
  registerReplica(info: ReplicaInfo): Promise<void>;
  /** Renews the replica's lease. false: its row is gone (others presumed it dead and may have taken its tasks). */
  heartbeat(replicaId: string, now: number): Promise<boolean>;
  removeReplica(replicaId: string): Promise<void>;
  /** Answers once the store does (readiness); throws StoreUnavailableError when it cannot be reached. */
  ping?(): Promise<void>;
  listReplicas(): Promise<ReplicaInfo[]>;
  /** Unfinished tasks whose owner is not among `liveOwners` (or that have no owner); never a queued or parked task. */
  listOrphans(liveOwners: string[], limit: number): Promise<TaskRecord[]>;
  /** Takes over an unfinished task from `fromOwner` for a re-run: owner := newOwner, attempts += 1, epoch += 1,
   *  outstanding inputs kept. Refused if someone else took it first. */
  takeOver(taskId: string, fromOwner: string | null, newOwner: string, now: number): Promise<TaskRecord>;

  /** The run queue (a module of each backend: queue.ts). Tasks waiting for capacity now. */
  queueDepth(): Promise<number>;
  /** One principal's share of the store (the per-principal bounds): its tasks waiting for capacity, its stored tasks
   *  (unexpired rows, finished or not), and the earliest expiry among them (when a stored slot frees; null: none). */
  principalLoad(principal: string): Promise<PrincipalLoad>;
  /** 1-based place of a queued task in the queue, oldest first (undefined: not queued). */
  queuePosition(taskId: string): Promise<number | undefined>;
  /** Claims up to `claim.max` claimable tasks for `claim.owner`: queued ones and parked ones that are due
   *  (queuedAt <= now). Owner set, epoch bumped, queuedAt and parkedAt cleared (a queued task's status message too),
   *  in the order of the rule (see QueueClaim). Empty: nothing may start now. */
  claimQueued(claim: QueueClaim): Promise<TaskRecord[]>;
  /** The tasks a claim by `owner` at `now` took that nothing has written since (still in the claim's epoch: started,
   *  unfinished, not parked). Read after a claim whose answer never came (a connection dropped after the commit),
   *  so the claimer runs what it took instead of holding tasks that nothing runs. */
  claimedAt(owner: string, now: number): Promise<TaskRecord[]>;
  /** Ends a task that is queued or parked `cancelled` at once (no handler runs it). undefined: a handler owns it. */
  cancelQueued(taskId: string, now: number, statusMessage: string): Promise<TaskRecord | undefined>;
  /** The earliest future time a parked task becomes due (undefined: none), so a replica can wake for it on time. */
  nextWake(now: number): Promise<number | undefined>;

  /** Parking (a module of each backend: parking.ts): the run fenced by `fence` lets go of the task. Applies
   *  rules.parkChange: owner cleared, parkedAt set, claimable from `wait.wakeAt`; not when an awaited key was answered
   *  (or timed out) meanwhile, nor once a cancel was requested. Refused (TaskWriteRefused) when fenced or terminal. */
  park(taskId: string, fence: WriteFence, wait: ParkRequest, now: number): Promise<ParkResult>;

  /** Durable steps (a module of each backend: steps.ts). The task's steps, in `seq` order. */
  listSteps(taskId: string): Promise<StepRecord[]>;
  /** Creates or replaces the step row `step.key`, in one conditional statement: only while `fence` holds the task and
   *  it is unfinished (a `started` row also needs no cancel requested). Refused with TaskWriteRefused otherwise. */
  writeStep(taskId: string, fence: WriteFence, step: StepWrite): Promise<void>;

  /** A secret shared by every process on this store (e.g. the key that seals MRTR requestState): the stored value of
   *  `name`, or `generate()` stored first by whichever process asked first. */
  sharedSecret(name: string, generate: () => string): Promise<string>;
  /** Marks question `key` of a task as put to its caller by `asker` (one stream, see ./asks.ts); false when another
   *  stream already holds it, or the task is gone. The mark goes with its task. */
  markAsked(taskId: string, key: string, asker: string, now: number): Promise<boolean>;
  /** Gives back the mark `asker` holds (its stream ended without an answer); false when it held none. */
  unmarkAsked(taskId: string, key: string, asker: string): Promise<boolean>;

  /** Turns tasks whose TTL passed (not while waiting for input) into tombstones; purges old tombstones. */
  sweep(now: number, tombstoneRetentionMs: number, limit: number): Promise<SweepResult>;
  /** Number of stored tasks (for operators and tests). */
  count(): Promise<{ tasks: number; tombstones: number }>;

  /** One page of `principal`'s tasks, newest first, starting after `after` (keyset: one indexed range read). */
  listByPrincipal(principal: string, after: ListCursor | undefined, limit: number): Promise<TaskSummary[]>;

  /** What operators read and do (the dashboard, alerts): a room of its own in each backend (`ops.ts`). */
  readonly ops: OperatorStore;
  /** MCP Events (subscriptions, the change log, webhook deliveries): a room of its own in each backend (`events.ts`). */
  readonly events: EventStore;
  /** Webhook delivery of task output (`outlast.task.output`): per-subscription cursors (`output-events.ts`). */
  readonly outputEvents: OutputEventStore;
  /** Dashboard sign-ins, readable by every replica (`operator-sessions.ts`). */
  readonly operatorSessions: OperatorSessionStore;
  /** Task output, one durable log per task (what handlers emit with ctx.output): a room of its own in each backend
   *  (`output.ts`). */
  readonly output: OutputStore;
}

// ---- operators ------------------------------------------------------------------------------------------------

/** Which tasks an operator's listing shows. Every filter is optional; they combine with AND. */
export interface OpsTaskFilter {
  status?: TaskStatus;
  tool?: string;
  principal?: string;
  /** Only failures nobody has read or acknowledged. */
  unread?: boolean;
  /** Only tasks created at or before this time (epoch ms): "older than". */
  createdBefore?: number;
}

/** A row of an operator's listing: the summary plus who runs it and whether anyone looked at its outcome. */
export interface OpsTaskRow extends TaskSummary {
  owner: string | null;
  attempts: number;
  retrievedAt: number | null;
  acknowledgedAt: number | null;
  cancelRequestedAt: number | null;
  inputSince: number | null;
  /** The error's message of a failed task (the thing an operator reads first). */
  errorMessage: string | null;
}

/** A page of an operator's listing. `next`: where the next page starts (absent: nothing older matches). */
export interface OpsTaskPage {
  rows: OpsTaskRow[];
  next?: ListCursor;
  /** Set when the page stopped at the bound of rows one page may read (combined filters), not at `limit` matches. */
  scanned?: number;
}

/** Everything an operator's task page shows (arguments and results are only rendered when the operator turns them on). */
export interface OpsTaskDetail extends TaskRecord {
  acknowledgedAt: number | null;
  acknowledgedBy: string | null;
  /** The operator who asked for the cancel, or null when the caller did (or nobody). */
  cancelledBy: string | null;
  cancelReason: string | null;
}

/** A task no handler runs right now: waiting in the run queue for capacity, or parked (its wait holds no process). */
export interface IdleTask {
  taskId: string;
  principal: string;
  tool: string;
  status: TaskStatus;
  statusMessage: string | null;
  createdAt: number;
  /** Queued: since when it waits. Parked: when it becomes due (its input deadline or sleep end, or now once answered). */
  queuedAt: number;
  /** When it was parked (null: queued for capacity). */
  parkedAt: number | null;
  /** A parked task waiting for input: the outstanding keys (empty for a durable sleep). */
  inputKeys: string[];
}

/** Counts by state: exact, from a counter table the database maintains with every write (no scan of the tasks). */
export interface OpsCounts {
  byStatus: Record<TaskStatus, number>;
  /** Failed tasks nobody read or acknowledged, counted through a partial index up to `unreadCap`. */
  unreadFailures: number;
  /** True when there are more unread failures than were counted. */
  unreadCapped: boolean;
}

/**
 * One step of a task's history, written by the database with the change that caused it (triggers on `tasks`).
 * Kinds today: created, input_asked, input_answered, cancel_requested, taken_over, completed, failed, cancelled,
 * acknowledged, started (claimed from the run queue), parked, resumed (claimed again after parking).
 */
export interface TaskEvent {
  eventId: number;
  taskId: string;
  at: number;
  kind: string;
  /** Who caused it: the principal, an operator (`operator:NAME`), or a replica id. */
  actor: string | null;
  detail: string | null;
}

export type AlertKind = 'failed-unread' | 'input-stale' | 'input-requested' | 'replica-lost' | 'expired-unfinished' | 'task-status';
export type AlertState = 'pending' | 'delivered' | 'failed';

/** A durable alert (an outbox row): written with the change that caused it, delivered at least once by any replica. */
export interface AlertRecord {
  /** Also the `webhook-id` of every delivery attempt. */
  alertId: string;
  kind: AlertKind;
  taskId: string | null;
  tool: string | null;
  principal: string | null;
  message: string;
  /** `alerts` (the operator's webhook) or the name of a push destination. */
  destination: string;
  /** The webhook's `data` (thin: never arguments or results). */
  data: JsonObject;
  createdAt: number;
  state: AlertState;
  attempts: number;
  nextAttemptAt: number;
  claimedBy: string | null;
  lastStatus: number | null;
  lastError: string | null;
  deliveredAt: number | null;
}

export interface NewAlert {
  alertId: string;
  /** At most one alert per key, ever (e.g. `failed-unread:TASK`): the insert that loses is a no-op. */
  dedupeKey: string;
  kind: AlertKind;
  taskId?: string | null;
  tool?: string | null;
  principal?: string | null;
  message: string;
  destination: string;
  data: JsonObject;
  createdAt: number;
}

/** How long one tool's tasks took, creation to terminal state, over the tasks that finished in a window. */
export interface ToolStatsRow {
  tool: string;
  /** Tasks that finished in the window (completed, failed or cancelled). */
  finished: number;
  failed: number;
  cancelled: number;
  /** Nearest-rank percentiles and the longest, ms, over the completed and failed ones (a cancel says nothing of
   *  how long the work takes); null when all were cancelled. */
  p50Ms: number | null;
  p95Ms: number | null;
  maxMs: number | null;
}

export interface ToolStats {
  /** Most finished tasks first. */
  tools: ToolStatsRow[];
  /** More tasks finished in the window than one read takes: the figures cover the most recent ones, since `from`. */
  capped: boolean;
  /** When the oldest finish read happened (null: none). */
  from: number | null;
}

/** An unfinished task waiting for a human: what the overview shows. */
export type WaitingTask = Pick<TaskRecord, 'taskId' | 'principal' | 'tool' | 'statusMessage' | 'inputSince' | 'inputRequests' | 'createdAt'>;

export interface OperatorStore {
  /** A page of tasks matching `filter`, newest first, after `after` (keyset on an index; never OFFSET). With
   *  several filters, one page reads at most a bounded number of rows, so it may hold fewer than `limit` matches
   *  while `next` says where to go on. */
  listTasks(filter: OpsTaskFilter, after: ListCursor | undefined, limit: number): Promise<OpsTaskPage>;
  counts(unreadCap: number): Promise<OpsCounts>;
  /** Tasks waiting for input, longest waiting first (a partial index of input_required tasks). */
  waiting(limit: number): Promise<WaitingTask[]>;
  /** Tasks waiting in the run queue for capacity, oldest first (the queue's partial index). */
  queued(limit: number): Promise<IdleTask[]>;
  /** Parked tasks (no process holds them), soonest due first (a partial index of parked tasks). */
  parked(limit: number): Promise<IdleTask[]>;
  detail(taskId: string): Promise<OpsTaskDetail | undefined>;
  /** Per tool: counts and durations of the tasks that finished at or after `since`, reading at most the `cap` most
   *  recent finishes (one range of a partial index of finished tasks), so its cost is bounded by `cap`, not the store. */
  toolStats(since: number, cap: number): Promise<ToolStats>;
  /** The task's history, oldest first (at most `limit` events). */
  history(taskId: string, limit: number): Promise<TaskEvent[]>;
  /** Records an operator's cancel (who and why) on an unfinished task, whoever its principal is. Returns the
   *  record (unchanged when already terminal), or undefined when there is no such task. */
  cancel(taskId: string, operator: string, reason: string, now: number): Promise<TaskRecord | undefined>;
  /** Acknowledges a failure (its own timestamp; `retrievedAt` stays the client's). false: not a failed task, or already acknowledged. */
  acknowledge(taskId: string, operator: string, now: number): Promise<boolean>;

  /** Writes an alert for each failure unread since `failedBefore` (its `updatedAt`), each task at most once: the
   *  task is marked in the same transaction, so replicas scanning together write one alert. Returns those written. */
  alertUnreadFailures(failedBefore: number, now: number, limit: number): Promise<AlertRecord[]>;
  /** Writes an alert unless one with its dedupe key exists. Returns whether it was written. */
  addAlert(alert: NewAlert): Promise<boolean>;
  /** Writes the alert that a replica was lost and removes its row, in one transaction (once, whoever does it first). */
  replicaLost(replicaId: string, alert: NewAlert): Promise<boolean>;
  /** Claims up to `limit` pending alerts of `destinations` that are due, for `claimMs` (PostgreSQL: SKIP LOCKED). */
  claimAlerts(replica: string, destinations: string[], now: number, claimMs: number, limit: number): Promise<AlertRecord[]>;
  /** Records a delivery attempt of a claimed alert: delivered, or due again at `retryAt` (null: given up). */
  settleAlert(alertId: string, replica: string, outcome: { delivered: true; status: number; now: number } | { delivered: false; status: number | null; error: string; retryAt: number | null; now: number }): Promise<void>;
  /** Recent alerts, newest first, keyset-paged on (createdAt, alertId). */
  listAlerts(after: { createdAt: number; alertId: string } | undefined, limit: number): Promise<AlertRecord[]>;
  /** Asks for a push to `destination` on every state change of the task from now on (and now, if it is already terminal). */
  subscribe(taskId: string, destination: string, now: number): Promise<void>;
}
