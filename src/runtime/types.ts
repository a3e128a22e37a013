/** The runtime's vocabulary: what a tool declares, what a call carries, what the runtime is configured with. */
import type { Context } from '@opentelemetry/api';
import type { CreateTaskResult, JsonObject, TaskOrigin } from '../protocol/index.js';
import type { SignalBus } from '../store/local-bus.js';
import type { TaskRecord, TaskStore } from '../store/types.js';
import type { ToolHandler } from './context.js';
import type { PollLimitOptions, PollPolicy } from './poll.js';

export type PromotionPolicy = 'auto' | 'always' | 'never';

export interface ToolSpec<Args = JsonObject> {
  /** `auto` (default): inline if it finishes within the budget, a task otherwise. `always`: only as a task
   *  (a client without the extension gets -32021). `never`: always inline. */
  policy?: PromotionPolicy;
  /** Inline budget for `auto`, ms. Default: the runtime's. */
  inlineBudgetMs?: number;
  /** Re-running the handler from the start after a crash is safe. Default false (true for a durable tool). */
  retrySafe?: boolean;
  /**
   * Every side effect of the handler is in a `ctx.step` and the code between steps is deterministic (the same inputs
   * make the same calls). Then after a crash or a takeover the handler runs again with its completed steps replayed
   * (implies retrySafe), and a wait for input or a long `ctx.sleep` is parked: no process holds it, and any replica
   * resumes it when the answer comes or its time is due. Default false.
   */
  durable?: boolean;
  /** What a run of this tool holds that dies with its process, in a few words (e.g. `the upstream call "search" to
   *  server "docs"`): a task failed because its process was lost names it, so the caller knows what was cut off. */
  lostWork?: string;
  /** Runs (first run included) before a retry-safe task is failed instead of re-run. Default: the runtime's. */
  maxAttempts?: number;
  /** Retention from creation; null = unlimited. Default: the runtime's. */
  ttlMs?: number | null;
  /** The real granularity of this tool's progress, ms: the floor of the advertised poll interval. */
  pollIntervalMs?: number;
  /** Default deadline for input requests, ms. */
  inputTimeoutMs?: number;
  /** Handlers of this tool running at once: `perReplica` on each replica, `deployment` across every replica on the
   *  store (a tool with a deployment-wide limit always runs as a task, claimed from the run queue). Calls over a
   *  limit wait in the run queue. Default: no limit but the runtime's maxRunning. */
  limit?: { perReplica?: number; deployment?: number };
  handler: ToolHandler<Args>;
}

/** A handler slot on this replica, taken by admission (or a claim) before the handler starts. */
export interface Slot {
  readonly tool: string;
  /** Whose handler it is for (the per-principal bound counts it). */
  readonly principal: string;
  /** The handler started in it (or it was given back). */
  used: boolean;
}

export interface RegisteredTool {
  name: string;
  spec: ToolSpec<JsonObject>;
}

export interface CallContext {
  principal: string;
  clientCapabilities: JsonObject;
  /** The caller can receive a task: it declared io.modelcontextprotocol/tasks (2026-07-28), or asked for one
   *  with `params.task` (2025-11-25). */
  tasksDeclared: boolean;
  /** 2025-11-25 `params.task`: the caller asked for a task, so one is created at once (with this TTL if given;
   *  never longer than the tool's). */
  taskRequested?: { ttlMs?: number | undefined } | undefined;
  /** The caller cannot receive a task, but can follow a handle through plain tools: an `auto` call that runs longer
   *  than this many ms is answered with a handle (a task the caller follows with the status tool). */
  handleAfterMs?: number | undefined;
  /** Which wire the call came from (default `extension`). */
  origin?: TaskOrigin | undefined;
  /** The request's progressToken (kept with the task: 2025-11-25 progress goes on carrying it). */
  progressToken?: string | number | undefined;
  /** false when the client's capabilities cannot be known (2025-11-25 over stateless HTTP declares them only at
   *  initialize): input kinds are then not checked up-front, and a client that cannot answer says so. */
  capabilitiesKnown?: boolean | undefined;
  idempotencyKey?: string | undefined;
  /** Aborts when the request is abandoned (before promotion only). */
  signal?: AbortSignal | undefined;
  preflight?: JsonObject | undefined;
  /** The trace context of the request (its server span): the handler's span is its child, and the task keeps it.
   *  Default: the active context. */
  traceContext?: Context | undefined;
  /** A status the handler sets while the call still runs inline (no task to record it in yet). */
  onInlineStatus?: ((message: string) => void) | undefined;
  /** Called once the call's task row is committed (an inline call that became a task): the glue may then put the
   *  task's questions on the request's own stream while the call still waits inline. */
  onTask?: ((record: TaskRecord) => void) | undefined;
}

export type CallOutcome =
  | { kind: 'result'; result: JsonObject }
  | { kind: 'task'; task: CreateTaskResult; record: TaskRecord }
  /** A task made for a caller that cannot receive one: answer with a handle to it (or, once terminal, its outcome). */
  | { kind: 'handle'; record: TaskRecord };

export interface Logger {
  debug(msg: string, extra?: JsonObject): void;
  info(msg: string, extra?: JsonObject): void;
  warn(msg: string, extra?: JsonObject): void;
  error(msg: string, extra?: JsonObject): void;
}

export const silentLogger: Logger = { debug() {}, info() {}, warn() {}, error() {} };

export interface RuntimeOptions {
  store: TaskStore;
  bus?: SignalBus;
  /** This process's id in the replicas table. Default: random. */
  replicaId?: string;
  /** Default retention from creation (ms); null = unlimited. Default 24 h. */
  defaultTtlMs?: number | null;
  /** How long an `auto` call may run inline before it becomes a task. Default 1000 ms. */
  inlineBudgetMs?: number;
  /** Handlers running at once on this replica above which new `auto` calls become tasks at once. Default 64. */
  concurrencyLimit?: number;
  /** Handlers running at once on this replica (inline and tasks); calls over it wait in the run queue as tasks, or
   *  are refused with a retry time when they cannot become a task. Default: no limit. */
  maxRunning?: number;
  /** Deployment-wide limits: tool name -> most handlers of it running at once across every replica (overrides the
   *  tool's own `limit.deployment`). Give every replica the same. */
  toolLimits?: Record<string, number>;
  /** Tasks waiting in the run queue (the whole deployment) past which new calls are refused with a retry time
   *  (nothing stored). Default 10,000. */
  maxQueued?: number;
  /** Handlers of one principal running at once on this replica (inline and tasks); past it its calls wait in the
   *  queue (whose claim skips it here) or are refused. Default: 3/4 of maxRunning (all of it below 8), 256 when
   *  maxRunning is unlimited. */
  maxRunningPerPrincipal?: number;
  /** Tasks of one principal waiting in the run queue (the whole deployment) past which its new calls are refused.
   *  Default: a quarter of maxQueued (all of it below 100). */
  maxQueuedPerPrincipal?: number;
  /** Stored (unexpired) tasks of one principal past which its calls that may become tasks are refused, with the time
   *  its next task expires. Default 100,000. */
  maxTasksPerPrincipal?: number;
  /** Period of the claim attempt that covers lost queue signals (and, on SQLite, the only way other processes on
   *  the file learn of queued work). Default 1000 ms. */
  queuePollMs?: number;
  /** Most queued tasks one claim takes when this replica has room for them (one statement, one round trip).
   *  Default 16. */
  claimBatch?: number;
  /** Base poll interval advertised when a tool gives none. Default 500 ms. */
  defaultPollIntervalMs?: number;
  poll?: Partial<PollPolicy>;
  /** Refusal of over-polling; false turns it off. */
  pollLimit?: Partial<PollLimitOptions> | false;
  /** Default deadline of an input request. Default 15 min. */
  defaultInputTimeoutMs?: number;
  /** A durable tool's wait (input, sleep) with no step running is parked once it has lasted this long: its handler
   *  leaves memory and the task resumes on any replica when due. 0 parks at once. Default 2000 ms. */
  parkAfterMs?: number;
  /** Default size limit of one step's value, in UTF-8 bytes of its JSON (a step may set its own, up to 1 MiB).
   *  Default 262,144 (256 KiB). */
  maxStepResultBytes?: number;
  /** Size limit of a task's result, in UTF-8 bytes of its JSON; a larger result fails the task saying so. Default
   *  1,048,576 (1 MiB). */
  maxResultBytes?: number;
  /** Output items retained per task: past it the oldest are dropped (older stream cursors get events_gone). Default
   *  10,000. */
  maxOutputPerTask?: number;
  /** Output bytes (items' JSON) retained per task, dropping the oldest past it. Default 16 MiB. */
  maxOutputBytesPerTask?: number;
  /** Period of the re-read that covers missed input signals. Default 1000 ms. */
  inputRecheckMs?: number;
  /** Period of the re-read behind each watch (listen stream) that covers missed change signals. Default 5000 ms. */
  watchRecheckMs?: number;
  /** Sweeper period. Default 30 s. */
  sweepIntervalMs?: number;
  /** How long an expired task's tombstone is kept (so it reads "expired", not "not found"). Default 7 days. */
  tombstoneRetentionMs?: number;
  /** Heartbeat and orphan check period. Default 5 s. */
  heartbeatMs?: number;
  /** A replica whose heartbeat is older than this is dead and its tasks are taken over. Default 30 s, or six
   *  heartbeats when only heartbeatMs is given. Must exceed heartbeatMs by a margin (at least twice). Given alone,
   *  the heartbeat is derived from it (a sixth, at most 5 s). */
  leaseMs?: number;
  /** A heartbeat not answered within this is a store failure (requests fail fast until one is); answered later, it
   *  still renews the lease from when it was sent. Default: the longer of the heartbeat period and a third of the
   *  lease capped at 2 s. */
  heartbeatDeadlineMs?: number;
  /** Default for ToolSpec.maxAttempts. Default 3. */
  maxAttempts?: number;
  /** Cancel unfinished work when its TTL passes (default true). */
  cancelOnExpiry?: boolean;
  log?: Logger;
  /** Metrics through @opentelemetry/api (default true; a no-op until an SDK is registered, which must happen before
   *  the runtime is constructed). false: the store is used unobserved. */
  telemetry?: boolean;
}

export interface RuntimeAlert {
  kind: 'failed-unretrieved' | 'expired-unfinished' | 'worker-lost';
  taskId: string;
  tool: string;
  message: string;
}
