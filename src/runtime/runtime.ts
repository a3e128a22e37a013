/**
 * TaskRuntime: the core that the server glue calls. It decides inline vs task for each call, keeps the registry of
 * tools and of the handlers running here, and serves the task operations (get, update, cancel, watch). A handler's
 * run is an Execution (execution.ts); leases and takeover are recovery.ts; expiry is sweeper.ts. It knows the
 * store and the signal bus, never the SDK.
 */
import { randomBytes } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { hostname } from 'node:os';
import {
  ErrorCode,
  INPUT_REFUSED,
  TaskProtocolError,
  isTerminal,
  missingTasksCapability,
  type CreateTaskResult,
  type DetailedTask,
  type JsonObject,
  type JsonRpcErrorObject,
} from '../protocol/index.js';
import { LocalSignalBus, QUEUE_SIGNAL_ID, type SignalBus, type SignalKind } from '../store/local-bus.js';
import { TaskValueRefused, TaskWriteRefused, type Outcome, type TaskRecord, type TaskStore, type TaskSummary, type TaskView } from '../store/types.js';
import { TaskCancelledError } from './context.js';
import { Execution, callOfRecord, creationFailure, type ExecutionHost } from './execution.js';
import { validateInputResponses } from './input.js';
import { inlineOutcome, taskOutcome, type HandlerEnd } from './outcome.js';
import { storedInlineOutcome, wasAnsweredInline } from './inline-answer.js';
import { DEFAULT_POLL_LIMIT, DEFAULT_POLL_POLICY, PollGovernor, advertisedPollInterval, type PollPolicy } from './poll.js';
import { RunQueue, shuttingDown, type QueueHost } from './queue.js';
import { principalDefaults } from './principal-bounds.js';
import { MAX_STEP_BYTES } from './steps.js';
import { Recovery, type RecoveryHost } from './recovery.js';
import { Drain, type DrainHost } from './handoff.js';
import { sweepExpired, type SweepHost } from './sweeper.js';
import { StoreHealth, gatedStore } from './store-health.js';
import { boundedTexts } from './text-bounds.js';
import type { CallContext, CallOutcome, Logger, RegisteredTool, RuntimeAlert, RuntimeOptions, Slot, ToolSpec } from './types.js';
import { silentLogger } from './types.js';
import { FinishedViews } from './finished-views.js';
import { watchView, type WatchSource } from './watch.js';
import { RuntimeTelemetry } from './telemetry.js';
import { checkTaskId, createResult, decodeCursor, detailedTask, encodeCursor, owned } from './wire.js';
import { DEFAULT_MAX_OUTPUT_BYTES, DEFAULT_MAX_OUTPUT_ITEMS, type OutputBounds } from '../store/output.js';

export * from './types.js';
export { requestHash } from './ids.js';
export { toolErrorResult } from './outcome.js';

const DAY = 86_400_000;

/** A late answer to an input whose deadline passed (the store recorded the timeout): refused, saying so. */
/** A second answer to a question: refused, so the person (or client) that sent it knows it was not taken. */
function alreadyAnswered(key: string, at: number): TaskProtocolError {
  return new TaskProtocolError(ErrorCode.InvalidParams, `Question "${key}" was already answered at ${new Date(at).toISOString()}; this answer was not recorded`, {
    reason: 'already_answered',
    key,
  });
}

function inputTimedOut(key: string, at: number): TaskProtocolError {
  return new TaskProtocolError(ErrorCode.InvalidParams, `Input "${key}" timed out at ${new Date(at).toISOString()}; the answer came too late and was not taken`, {
    reason: 'input_timeout',
    key,
  });
}

/** What /readyz reports. */
export interface Readiness {
  ready: boolean;
  /** Why not, in words an operator can act on. */
  reason?: string;
  /** This replica stopped its runs because no heartbeat reached the store for a lease. */
  fenced: boolean;
  /** Since the last heartbeat that reached the store was sent, ms. */
  lastHeartbeatAgeMs?: number;
  /** What carries signals between replicas, and whether its receiving connection is up (a lost one is covered by
   *  re-reads while it reconnects: not a reason to be unready). */
  bus?: { carrier: string; connected?: boolean };
}

export class TaskRuntime extends EventEmitter implements ExecutionHost, RecoveryHost, SweepHost, QueueHost, DrainHost {
  readonly store: TaskStore;
  /** Metrics through @opentelemetry/api (undefined when turned off). */
  readonly telemetry: RuntimeTelemetry | undefined;
  readonly bus: SignalBus;
  readonly replicaId: string;
  readonly defaultTtlMs: number | null;
  readonly inlineBudgetMs: number;
  readonly concurrencyLimit: number;
  readonly defaultPollIntervalMs: number;
  readonly defaultInputTimeoutMs: number;
  /** How often a handler waiting for input re-reads its row in case an answer's signal was missed. */
  readonly inputRecheckMs: number;
  readonly parkAfterMs: number;
  readonly maxStepResultBytes: number;
  readonly maxResultBytes: number;
  readonly outputBounds: OutputBounds;
  readonly watchRecheckMs: number;
  /** Views of the tasks this process finished lately, for its watchers (./finished-views.ts). */
  private readonly finishedViews = new FinishedViews();
  /** Period of the claim attempt that covers lost queue signals, ms. */
  readonly queuePollMs: number;
  readonly log: Logger;
  readonly pollPolicy: PollPolicy;
  readonly governor: PollGovernor | undefined;
  /** Answer pages are on: a handle caller's sampling request is asked, a person replies on its page (Outlast sets it). */
  samplingOnPages = false;
  private readonly opts: Required<Pick<RuntimeOptions, 'sweepIntervalMs' | 'tombstoneRetentionMs' | 'heartbeatMs' | 'leaseMs' | 'maxAttempts' | 'cancelOnExpiry'>>;
  private readonly tools = new Map<string, RegisteredTool>();
  /** Handlers running in this process (inline and tasks). */
  readonly executions = new Set<Execution>();
  /** Task executions by id. */
  readonly running = new Map<string, Execution>();
  private readonly recovery: Recovery;
  /** Whether the heartbeats reach the store: the fail-fast gate in front of it, and readiness. */
  readonly health: StoreHealth;
  private readiness: { at: number; answer: Promise<Readiness> } | undefined;
  /** Admission control and the run queue (queue.ts). */
  readonly queue: RunQueue;
  private timers: NodeJS.Timeout[] = [];
  /** The heartbeat goes on through a drain (a long one must not look like a death); stopped once the drain is over. */
  private heartbeat: NodeJS.Timeout | undefined;
  private started: Promise<void> | undefined;
  private stopping = false;
  private drainRun: { drain?: Drain; done: Promise<void> } | undefined;
  private closed: Promise<void> | undefined;
  /** Stops listening for cancel signals. */
  private readonly unsubscribeCancels: () => void;

  constructor(options: RuntimeOptions) {
    super();
    this.telemetry = options.telemetry === false ? undefined : new RuntimeTelemetry();
    if (this.telemetry) this.telemetry.knownTool = (name) => this.tools.has(name);
    // Either of heartbeat and lease given alone implies a fitting other (a lease of six heartbeats).
    const heartbeatMs = options.heartbeatMs ?? (options.leaseMs !== undefined ? Math.max(1, Math.min(5_000, Math.floor(options.leaseMs / 6))) : 5_000);
    this.health = new StoreHealth(Math.min(heartbeatMs, 1000));
    const bounded = boundedTexts(options.store);
    this.store = gatedStore(this.telemetry ? this.telemetry.instrument(bounded) : bounded, this.health);
    this.log = options.log ?? silentLogger;
    this.bus = options.bus ?? options.store.createSignalBus?.({ onError: (m) => this.log.warn(m) }) ?? new LocalSignalBus();
    this.replicaId = options.replicaId ?? `${hostname()}:${process.pid}:${randomBytes(4).toString('hex')}`;
    this.defaultTtlMs = options.defaultTtlMs === undefined ? DAY : options.defaultTtlMs;
    this.inlineBudgetMs = options.inlineBudgetMs ?? 1000;
    this.concurrencyLimit = options.concurrencyLimit ?? 64;
    this.defaultPollIntervalMs = options.defaultPollIntervalMs ?? 500;
    this.defaultInputTimeoutMs = options.defaultInputTimeoutMs ?? 15 * 60_000;
    this.inputRecheckMs = options.inputRecheckMs ?? 1000;
    this.parkAfterMs = options.parkAfterMs ?? 2000;
    this.maxStepResultBytes = options.maxStepResultBytes ?? 256 * 1024;
    this.maxResultBytes = options.maxResultBytes ?? 1024 * 1024;
    this.outputBounds = { maxItems: options.maxOutputPerTask ?? DEFAULT_MAX_OUTPUT_ITEMS, maxBytes: options.maxOutputBytesPerTask ?? DEFAULT_MAX_OUTPUT_BYTES };
    for (const [name, v] of [['maxOutputPerTask', this.outputBounds.maxItems], ['maxOutputBytesPerTask', this.outputBounds.maxBytes]] as const) {
      if (!Number.isSafeInteger(v) || v < 1) throw new RangeError(`${name} must be an integer >= 1, got ${v}`);
    }
    if (!Number.isInteger(this.parkAfterMs) || this.parkAfterMs < 0) throw new RangeError(`parkAfterMs must be an integer >= 0, got ${this.parkAfterMs}`);
    if (!Number.isInteger(this.maxStepResultBytes) || this.maxStepResultBytes < 1 || this.maxStepResultBytes > MAX_STEP_BYTES) {
      throw new RangeError(`maxStepResultBytes must be an integer from 1 to ${MAX_STEP_BYTES}, got ${this.maxStepResultBytes}`);
    }
    if (!Number.isInteger(this.maxResultBytes) || this.maxResultBytes < 1) throw new RangeError(`maxResultBytes must be an integer >= 1, got ${this.maxResultBytes}`);
    this.watchRecheckMs = options.watchRecheckMs ?? 5000;
    this.pollPolicy = { ...DEFAULT_POLL_POLICY, ...options.poll };
    this.governor = options.pollLimit === false ? undefined : new PollGovernor({ ...DEFAULT_POLL_LIMIT, ...options.pollLimit });
    this.opts = {
      sweepIntervalMs: options.sweepIntervalMs ?? 30_000,
      tombstoneRetentionMs: options.tombstoneRetentionMs ?? 7 * DAY,
      heartbeatMs,
      leaseMs: options.leaseMs ?? Math.max(30_000, 6 * heartbeatMs),
      maxAttempts: options.maxAttempts ?? 3,
      cancelOnExpiry: options.cancelOnExpiry ?? true,
    };
    if (this.opts.leaseMs < 2 * this.opts.heartbeatMs) {
      throw new RangeError(`leaseMs (${this.opts.leaseMs}) must be at least twice heartbeatMs (${this.opts.heartbeatMs}), or live replicas look dead between heartbeats`);
    }
    if (this.defaultTtlMs !== null && (!Number.isInteger(this.defaultTtlMs) || this.defaultTtlMs <= 0)) {
      throw new RangeError(`defaultTtlMs must be a positive integer number of milliseconds or null, got ${this.defaultTtlMs}`);
    }
    // A heartbeat slower than this is a store failure: at least a heartbeat period, at most a third of the lease.
    const heartbeatDeadlineMs = options.heartbeatDeadlineMs ?? Math.max(this.opts.heartbeatMs, Math.min(2000, Math.floor(this.opts.leaseMs / 3)));
    if (!Number.isInteger(heartbeatDeadlineMs) || heartbeatDeadlineMs < 1 || heartbeatDeadlineMs >= this.opts.leaseMs) {
      throw new RangeError(`heartbeatDeadlineMs must be an integer from 1 to below leaseMs (${this.opts.leaseMs}), got ${heartbeatDeadlineMs}`);
    }
    this.recovery = new Recovery(this, { ...this.opts, heartbeatDeadlineMs });
    for (const [name, n] of [['maxRunning', options.maxRunning], ['maxQueued', options.maxQueued], ['queuePollMs', options.queuePollMs], ['claimBatch', options.claimBatch]] as const) {
      if (n !== undefined && (!Number.isInteger(n) || n < 1)) throw new RangeError(`${name} must be an integer >= 1, got ${n}`);
    }
    this.queuePollMs = options.queuePollMs ?? 1000;
    const maxRunning = options.maxRunning ?? Infinity;
    const maxQueued = options.maxQueued ?? 10_000;
    const shares = principalDefaults(maxRunning, maxQueued);
    this.queue = new RunQueue(this, {
      maxRunning,
      toolLimits: { ...options.toolLimits },
      maxQueued,
      maxRunningPerPrincipal: options.maxRunningPerPrincipal ?? shares.maxRunningPerPrincipal,
      maxQueuedPerPrincipal: options.maxQueuedPerPrincipal ?? shares.maxQueuedPerPrincipal,
      maxTasksPerPrincipal: options.maxTasksPerPrincipal ?? shares.maxTasksPerPrincipal,
      queuePollMs: this.queuePollMs,
      claimBatch: options.claimBatch ?? 16,
    });
    // One listener for the cancels of every task running here (not one subscription per task).
    const cancels = this.bus.subscribeAll((sig) => sig.kind === 'cancel' && this.onCancelSignal(sig.taskId));
    // After a gap in the signals (the bus reconnected), look for cancels recorded meanwhile at once.
    const resyncs = this.bus.onResync?.(() => void this.checkPendingCancels().catch((e) => this.log.warn('could not check pending cancels', { error: String(e) })));
    this.unsubscribeCancels = () => {
      cancels();
      resyncs?.();
    };
  }

  /** Registers a tool's behaviour. Names are those of tools/call. */
  defineTool<Args = JsonObject>(name: string, spec: ToolSpec<Args>): void {
    if (this.tools.has(name)) throw new Error(`Tool "${name}" is already defined`);
    if (spec.policy && !['auto', 'always', 'never'].includes(spec.policy)) throw new RangeError(`Tool "${name}": policy must be auto, always or never`);
    if (spec.durable && spec.policy === 'never') throw new RangeError(`Tool "${name}": a durable tool's steps and waits are kept in its task, so its policy cannot be "never"`);
    this.tools.set(name, { name, spec: spec as unknown as ToolSpec<JsonObject> });
  }

  /** Withdraws a tool (e.g. one an upstream no longer lists): new calls get "not found"; runs in flight go on. */
  removeTool(name: string): boolean {
    return this.tools.delete(name);
  }

  hasTool(name: string): boolean {
    return this.tools.has(name);
  }
  toolSpec(name: string): ToolSpec<JsonObject> | undefined {
    return this.tools.get(name)?.spec;
  }
  tool(name: string): RegisteredTool | undefined {
    return this.tools.get(name);
  }
  toolNames(): string[] {
    return [...this.tools.keys()];
  }

  publish(taskId: string, kind: SignalKind = 'changed'): void {
    this.bus.publish({ taskId, kind });
  }

  finishedHere(record: TaskRecord): void {
    this.finishedViews.remember(record);
  }

  get isStopping(): boolean {
    return this.stopping;
  }

  // ---- ExecutionHost: the registry of handlers running here ------------------------------------------------

  /** A handler started (inline or as a task). */
  handlerStarted(exec: Execution): void {
    this.executions.add(exec);
    this.queue.started(exec);
  }
  handlerEnded(exec: Execution): void {
    this.executions.delete(exec);
    this.queue.ended(exec);
  }
  taskFinished(exec: Execution): void {
    this.queue.finished(exec.tool.name);
  }
  /** A task now runs here: a cancel signal for it (from any replica) reaches its handler (see onCancelSignal). */
  track(exec: Execution): void {
    this.running.set(exec.taskId!, exec);
  }
  /** The run no longer runs here (a later run of the same task, resumed here, keeps its entry). */
  untrack(exec: Execution): void {
    if (exec.taskId !== undefined && this.running.get(exec.taskId) === exec) this.running.delete(exec.taskId);
  }
  runsHere(taskId: string): boolean {
    return this.running.has(taskId);
  }
  handBack(exec: Execution): void {
    if (exec.taskId !== undefined) this.recovery.settleLater(exec.taskId, 'outage', () => exec.carriedSteps());
  }
  get leaseMs(): number {
    return this.opts.leaseMs;
  }
  wakeDueAt(t: number): void {
    this.queue.wakeDueAt(t);
  }

  // ---- RecoveryHost / SweepHost ----------------------------------------------------------------------------

  /** Runs the handler of a task this replica now owns: taken over from a dead replica, or claimed from the queue
   *  (in the slot the claim took). */
  rerun(rec: TaskRecord, tool: RegisteredTool, slot?: Slot): void {
    const { preflight: _preflight, ...args } = rec.args as JsonObject & { preflight?: JsonObject };
    const exec = new Execution(this, tool, args, callOfRecord(rec), rec);
    exec.slot = slot;
    this.track(exec);
    this.runToOutcome(exec);
  }

  async finishQuietly(taskId: string, outcome: Outcome, message: string): Promise<void> {
    try {
      await this.store.finish(taskId, this.replicaId, outcome, message, this.store.now());
      this.publish(taskId);
    } catch (e) {
      if (!(e instanceof TaskWriteRefused)) throw e;
    }
  }

  alert(a: RuntimeAlert): void {
    this.log.warn(`alert: ${a.message}`, { kind: a.kind, taskId: a.taskId, tool: a.tool });
    if (this.listenerCount('alert') > 0) this.emit('alert', a);
  }

  /** Aborts the handlers of tasks running here whose cancel was recorded (by whichever replica). */
  async checkPendingCancels(): Promise<void> {
    if (this.running.size === 0) return;
    for (const taskId of await this.store.pendingCancels(this.replicaId)) this.running.get(taskId)?.abort(new TaskCancelledError('cancelled'));
  }

  /** A cancel was recorded for a task, perhaps on another replica: if it runs here, re-read the row and abort. */
  private onCancelSignal(taskId: string): void {
    const exec = this.running.get(taskId);
    if (!exec) return;
    void this.store.get(taskId).then(
      (l) => {
        if (l.state === 'found' && l.record.cancelRequestedAt !== null) exec.abort(new TaskCancelledError('cancelled'));
      },
      (e) => this.log.warn('could not re-read a task after a cancel signal', { taskId, error: String(e) }),
    );
  }

  // ---- life cycle ------------------------------------------------------------------------------------------

  /** Opens the store, registers this replica, recovers what dead processes left, starts the timers. */
  start(): Promise<void> {
    this.started ??= (async () => {
      // The bus first: a replica whose signals cannot arrive refuses to start before it writes anything.
      await this.bus.start?.();
      await this.store.init();
      // What the store relies on holds (its schema, its deadlines): checked, never assumed.
      await this.store.selfCheck?.();
      if (this.store.schemaAhead) this.log.warn(this.store.schemaAhead);
      if (this.bus.carrier === 'none') this.log.warn(this.signallessDelays());
      await this.recovery.register();
      await this.recovery.recover();
      if (this.stopping) return;
      this.queue.start();
      const hb = setInterval(() => void this.recovery.tick(), this.opts.heartbeatMs);
      const sw = setInterval(() => void this.sweep().catch((e) => this.log.error('sweep failed', { error: String(e) })), this.opts.sweepIntervalMs);
      hb.unref();
      sw.unref();
      this.heartbeat = hb;
      this.timers.push(sw);
    })();
    return this.started;
  }

  /** What a deployment without signals between replicas (`--bus none`) waits for: each replica's re-reads. */
  private signallessDelays(): string {
    return 'bus none: no signals between replicas; each sees the others\' changes when it re-reads: a cancel reaches ' +
      `the replica running the task within ${this.opts.heartbeatMs} ms (its heartbeat), an answer within ${this.inputRecheckMs} ms, ` +
      `queued work starts within ${this.queuePollMs} ms (--queue-poll-ms), a listen stream hears a change within ${this.watchRecheckMs} ms`;
  }

  /** Takes over unfinished tasks of dead replicas now (also done at start and on every heartbeat). */
  recover(): Promise<void> {
    return this.recovery.recover();
  }

  /**
   * Ready to serve: started, not stopping, not self-fenced, and the store answers within `deadlineMs`. Answers are
   * shared for 250 ms, so a balancer polling often costs the store at most a few pings a second.
   */
  ready(deadlineMs = 2000): Promise<Readiness> {
    const now = Date.now();
    if (this.readiness && now - this.readiness.at < 250) return this.readiness.answer;
    const answer = this.checkReady(deadlineMs);
    this.readiness = { at: now, answer };
    return answer;
  }

  private async checkReady(deadlineMs: number): Promise<Readiness> {
    const lastHeartbeatAgeMs = this.health.lastBeatAgeMs();
    const bus = { carrier: this.bus.carrier ?? 'local', ...(this.bus.connected !== undefined ? { connected: this.bus.connected } : {}) };
    const base = { fenced: this.health.fenced, ...(lastHeartbeatAgeMs !== undefined ? { lastHeartbeatAgeMs: Math.round(lastHeartbeatAgeMs) } : {}), bus };
    if (this.stopping) return { ready: false, reason: 'shutting down', ...base };
    if (!this.started) return { ready: false, reason: 'not started', ...base };
    if (this.health.fenced) return { ready: false, reason: `self-fenced: no heartbeat reached the store for longer than the lease (${this.opts.leaseMs} ms)`, ...base };
    let timer: NodeJS.Timeout | undefined;
    try {
      await Promise.race([
        this.store.ping?.() ?? this.store.count(),
        new Promise((_, reject) => (timer = setTimeout(() => reject(new Error(`no answer within ${deadlineMs} ms`)), deadlineMs))),
      ]);
    } catch (e) {
      return { ready: false, reason: `the store does not answer: ${(e as Error).message}`, ...base };
    } finally {
      clearTimeout(timer);
    }
    return { ready: true, ...base };
  }

  /** Expires tasks past their TTL (tombstones) and purges old tombstones. */
  sweep(now = this.store.now()): Promise<{ expired: number; purged: number }> {
    return sweepExpired(this, this.opts, now);
  }

  /**
   * Begins the stop (handoff.ts): the replica is not ready and claims nothing more (queued work, takeovers) from now
   * on; tasks that may run elsewhere (retry-safe or durable) are handed to the other replicas at once (unless
   * `handOff: false`: then they wait for the next start or a takeover, as after a crash); the rest may run for
   * `drainMs`, then what is not safe to re-run is failed naming the stop. Heartbeats go on meanwhile, so a long drain
   * is not taken for a death. Called again while draining, it ends the drain within the new `drainMs` (e.g. a second
   * SIGTERM: 0) and resolves with the first call.
   */
  drain(drainMs = 0, options: { handOff?: boolean } = {}): Promise<void> {
    if (this.drainRun) {
      this.drainRun.drain?.shorten(drainMs);
      return this.drainRun.done;
    }
    this.stopping = true;
    this.readiness = undefined;
    for (const t of this.timers) clearInterval(t);
    this.timers = [];
    this.queue.stop();
    const run: { drain?: Drain; done: Promise<void> } = { done: Promise.resolve() };
    this.drainRun = run;
    if (!this.started) return run.done;
    run.drain = new Drain(this, drainMs, options.handOff ?? true);
    run.done = this.started.catch(() => undefined).then(() => run.drain!.run());
    return run.done;
  }

  /** Drains (see drain()), then leaves the replica set and closes the bus and the store. Idempotent. */
  stop(drainMs = 0, options: { handOff?: boolean } = {}): Promise<void> {
    const drained = this.drain(drainMs, options);
    this.closed ??= drained.then(async () => {
      if (this.heartbeat) clearInterval(this.heartbeat);
      this.recovery.stop();
      if (!this.started) return;
      await this.store.removeReplica(this.replicaId).catch(() => undefined);
      this.unsubscribeCancels();
      await this.bus.close();
      await this.store.close();
    });
    return this.closed;
  }

  /** Maps how a handler ended to a terminal outcome. */
  outcomeOf(r: HandlerEnd, cancel: TaskCancelledError | undefined): Outcome {
    return taskOutcome(r, cancel);
  }

  // ---- the operations the server glue calls -------------------------------------------------------------

  /** tools/call for an Outlast tool. */
  async call(name: string, args: JsonObject, cc: CallContext): Promise<CallOutcome> {
    const tool = this.tools.get(name);
    if (!tool) throw new TaskProtocolError(ErrorCode.InvalidParams, `Tool ${name} not found`);
    if (this.stopping) throw shuttingDown();
    const policy = tool.spec.policy ?? 'auto';
    // An `always` tool runs as a task: a caller that cannot receive one follows it through a handle when handles are on.
    if (policy === 'always' && !cc.tasksDeclared && cc.handleAfterMs === undefined) throw missingTasksCapability();
    const asTask = cc.tasksDeclared && policy !== 'never';
    // A caller that cannot receive a task may still follow one through a handle (plain tools).
    const asHandle = !asTask && cc.handleAfterMs !== undefined && policy !== 'never';
    const key = asTask || asHandle ? cc.idempotencyKey : undefined;
    if (key !== undefined && (typeof key !== 'string' || key.length === 0 || key.length > 255)) {
      throw new TaskProtocolError(ErrorCode.InvalidParams, 'The idempotency key must be a non-empty string of at most 255 characters');
    }
    // Over capacity, a caller that can follow a task (or a handle) waits for it in the run queue.
    // A caller at its bound of stored tasks is refused before anything runs (fair to every caller).
    if (asTask || asHandle) this.queue.bounds.checkStored(cc.principal);
    // A 2025-11-25 caller that sent `params.task` asked for a task: it gets one, even for a call answered inline before.
    const inlineRetry = cc.taskRequested === undefined;
    const admitted = await this.queue.admit(tool, asTask || asHandle, cc.principal);
    if (admitted === 'queue') {
      const queued = await this.queue.enqueue(tool, args, { ...cc, idempotencyKey: key }, asTask ? 'task' : 'handle');
      return queued.kind === 'task' && inlineRetry && wasAnsweredInline(queued.record) ? storedInlineOutcome(queued.record) : queued;
    }
    const exec = new Execution(this, tool, args, { ...cc, idempotencyKey: key });
    exec.slot = admitted;
    const busy = this.executions.size >= this.concurrencyLimit;

    if (asTask && (cc.taskRequested || policy === 'always' || busy)) {
      // Without a key no stored call can stand for this one: its handler starts beside its row's write (as a default
      // `auto` call runs before its row exists), and a run that has ended by then is written finished in that write.
      const beside = key === undefined && this.store.writesEndedAtCreation === true;
      exec.endsInCreation = beside;
      const persisting = this.persistOrThrow(exec);
      // (Not if the store refused the write at once: nothing starts then.)
      if (beside && !exec.abandoned) exec.start();
      const p = await persisting;
      if (p.created) beside ? void exec.done.then((r) => exec.settle(r)) : this.runToOutcome(exec);
      else this.queue.release(exec.slot);
      return !p.created && inlineRetry && wasAnsweredInline(p.record) ? storedInlineOutcome(p.record) : this.taskOutcome(p.record);
    }
    if (key !== undefined || (asHandle && (busy || policy === 'always'))) {
      // Keyed: persisted first, so a retry after a lost answer finds this call instead of starting the work again; it
      // still answers inline if it ends within the budget (inline-answer.ts).
      const p = await this.persistOrThrow(exec);
      if (!p.created) {
        this.queue.release(exec.slot);
        if (asHandle) return { kind: 'handle', record: p.record };
        return inlineRetry && wasAnsweredInline(p.record) ? storedInlineOutcome(p.record) : this.taskOutcome(p.record);
      }
      if (busy) {
        this.runToOutcome(exec);
        return { kind: 'handle', record: p.record };
      }
    }

    const onRequestAbort = () => {
      if (!exec.taskId) exec.abort(new TaskCancelledError('disconnected'));
    };
    cc.signal?.addEventListener('abort', onRequestAbort, { once: true });
    exec.start();
    try {
      if (!asTask && !asHandle) return inlineOutcome(await exec.done);
      const toolBudget = tool.spec.inlineBudgetMs ?? this.inlineBudgetMs;
      const budget = asHandle ? Math.max(toolBudget, cc.handleAfterMs!) : toolBudget;
      // One promise settled by whichever comes first (the default policy's hot path: no race of three).
      let timer: NodeJS.Timeout | undefined;
      const budgetEnds = Date.now() + budget;
      const winner = await new Promise<{ which: 'done'; r: HandlerEnd } | { which: 'budget' | 'promote' | 'parked' }>((settle, fail) => {
        timer = setTimeout(settle, budget, { which: 'budget' });
        exec.done.then((r) => settle({ which: 'done', r }), fail);
        // A task-capable caller gets the task once the handler needs one (a step, an input); a handle caller keeps
        // waiting inline for the whole budget (the row exists meanwhile), as the handle tools promise.
        if (asHandle) void exec.parkedNow.promise.then(() => settle({ which: 'parked' }));
        else void exec.promoteRequested.promise.then(() => settle({ which: 'promote' }));
      });
      clearTimeout(timer);
      if (winner.which === 'parked') {
        // A durable wait parked before the budget ended (or the run was handed over on shutdown): the run goes on from
        // the store (here or elsewhere); the caller still gets its outcome inline if it ends in time (not while this
        // replica stops), else a handle to where it is.
        const taskId = exec.taskId!;
        const wait = this.stopping ? 0 : Math.max(0, budgetEnds - Date.now());
        await this.untilTerminal(taskId, cc.principal, wait, cc.signal).catch(() => undefined);
        const now = await this.store.get(taskId).catch(() => undefined);
        return { kind: 'handle', record: now?.state === 'found' ? now.record : exec.record! };
      }
      if (winner.which === 'done') {
        // Inline only if nothing started persisting the call; otherwise the task row must get its outcome.
        if (!exec.persisting) return inlineOutcome(winner.r);
        if (asHandle || key !== undefined) {
          // A call whose row exists (keyed, or a durable tool's first step) that finished in time: its row gets the
          // outcome, marked answered inline, before the caller gets the plain result (a retry gets the same).
          await exec.settle(winner.r, true);
          return inlineOutcome(winner.r);
        }
      }
      const p = await this.persistOrThrow(exec);
      void exec.done.then((r) => exec.settle(r));
      const record = exec.record ?? p.record;
      if (!asHandle) return this.taskOutcome(record);
      // The run may have written to its row since the row was created (status, input): the handle shows it as it is.
      const now = await this.store.get(record.taskId).catch(() => undefined);
      return { kind: 'handle', record: now?.state === 'found' ? now.record : record };
    } finally {
      cc.signal?.removeEventListener('abort', onRequestAbort);
    }
  }

  /** Starts a persisted execution and writes its outcome when it ends. */
  private runToOutcome(exec: Execution): void {
    exec.start();
    void exec.done.then((r) => exec.settle(r));
  }

  private taskOutcome(record: TaskRecord): CallOutcome {
    return { kind: 'task', task: this.createResult(record), record };
  }

  private async persistOrThrow(exec: Execution) {
    try {
      return await exec.persist();
    } catch (e) {
      exec.abandoned = true;
      exec.abort(new TaskCancelledError('shutdown'));
      this.queue.release(exec.slot);
      // The store did not answer: the row may exist all the same. Once the store answers, it is run or failed.
      const stored = ((e as TaskProtocolError)?.data as { stored?: unknown } | undefined)?.stored;
      if (stored === 'unknown' && exec.plannedTaskId) this.recovery.settleLater(exec.plannedTaskId, 'doubtful');
      throw creationFailure(e, this.log, exec.done !== undefined);
    }
  }

  taskStored(principal: string, expiresAt: number | null): void {
    this.queue.bounds.stored(principal, expiresAt);
  }

  /** The CreateTaskResult for a record. */
  createResult(rec: TaskRecord): CreateTaskResult {
    return createResult(rec, this.store.now(), this.pollPolicy);
  }

  /** The wire view of a record (what tasks/get and notifications/tasks carry). */
  wireTask(rec: TaskView, now: number): DetailedTask {
    return detailedTask(rec, now, this.pollPolicy);
  }

  /** Reads a task for `principal`; another principal's task reads exactly like an unknown id. */
  async lookup(taskId: unknown, principal: string): Promise<TaskRecord> {
    return owned(await this.store.get(checkTaskId(taskId)), principal);
  }

  /** Polls faster than advertised: returns ms to wait, or 0. */
  pollBackoff(taskId: string, principal: string): number {
    const waitMs = this.governor?.check(principal, taskId, this.store.now()) ?? 0;
    if (waitMs > 0) this.telemetry?.pollRefusals.add('', () => ({}));
    return waitMs;
  }

  /** The narrow read behind a poll, for `principal`: notes the advertised interval and a first read of an outcome. */
  async pollView(taskId: unknown, principal: string): Promise<TaskView> {
    const rec = owned(await this.store.view(checkTaskId(taskId)), principal);
    const now = this.store.now();
    const terminal = isTerminal(rec.status);
    // A finished task needs no more polling, and its limiter entry would only hold memory.
    if (this.governor) this.governor.advertised(principal, rec.taskId, terminal ? undefined : advertisedPollInterval(rec, now, this.pollPolicy), now);
    this.noteRetrieved(rec);
    return rec;
  }

  async getTask(taskId: unknown, principal: string): Promise<DetailedTask> {
    const view = this.queue.withPosition(await this.pollView(taskId, principal));
    return this.wireTask(view instanceof Promise ? await view : view, this.store.now());
  }

  async updateTask(taskId: unknown, principal: string, inputResponses: unknown): Promise<{ accepted: string[] }> {
    const rec = await this.lookup(taskId, principal);
    const responses = validateInputResponses(inputResponses, rec.inputRequests);
    if (Object.keys(responses).length === 0) return { accepted: [] };
    const { accepted, record } = await this.recordAnswers(rec.taskId, responses);
    this.answered(record, accepted);
    return { accepted };
  }

  /** Stores answers; one the store cannot hold (U+0000 on PostgreSQL) is the caller's mistake, said as such. */
  private async recordAnswers(taskId: string, responses: Record<string, JsonObject>): Promise<{ record: TaskRecord; accepted: string[] }> {
    try {
      return await this.store.answerInput(taskId, responses, this.store.now());
    } catch (e) {
      if (e instanceof TaskValueRefused) throw new TaskProtocolError(ErrorCode.InvalidParams, `The answer could not be stored, and the task still waits: ${e.why}`);
      throw e;
    }
  }

  /** After answers were recorded: tell the waiting run, or (a parked task now due) the replicas that may resume it. */
  private answered(record: TaskRecord, accepted: string[]): void {
    if (accepted.length === 0) return;
    this.publish(record.taskId, 'input');
    this.publish(record.taskId);
    if (record.parkedAt !== null && record.queuedAt !== null && record.queuedAt <= this.store.now()) this.publish(QUEUE_SIGNAL_ID, 'queue');
  }

  async cancelTask(taskId: unknown, principal: string): Promise<void> {
    const rec = await this.lookup(taskId, principal);
    if (isTerminal(rec.status)) return;
    if (rec.queuedAt !== null && (await this.queue.cancelQueued(rec.taskId, rec.parkedAt !== null))) return;
    const after = await this.store.requestCancel(rec.taskId, this.store.now());
    // Parked in between: no handler would see the cancel, so it ends here (a park after the request sees it instead).
    if (after?.parkedAt != null && (await this.queue.cancelQueued(rec.taskId, true))) return;
    this.publish(rec.taskId, 'cancel');
    const exec = this.running.get(rec.taskId);
    if (exec) exec.abort(new TaskCancelledError('cancelled'));
  }

  /** Why a call of tool `name` would be refused for capacity now, before anything is stored (synchronous). `canWait`:
   *  the caller can follow a task or a handle. */
  capacityRefusal(name: string, canWait: boolean, principal?: string): TaskProtocolError | undefined {
    return this.queue.refusal(name, canWait, principal);
  }

  /** A secret every replica on this store shares (e.g. the key sealing MRTR requestState): generated once, kept in
   *  the store. Usable before start(). */
  async sharedSecret(name: string): Promise<string> {
    if (!/^[A-Za-z0-9._-]{1,64}$/.test(name)) throw new RangeError(`sharedSecret: name must be 1 to 64 letters, digits, ".", "_" or "-", got "${name}"`);
    await this.store.init();
    return this.store.sharedSecret(name, () => randomBytes(32).toString('base64url'));
  }

  /**
   * Cancel that must be final before the answer (2025-11-25 tasks/cancel): records the cancel and aborts the
   * handler, waits up to `graceMs` for it to stop, and otherwise ends the task `cancelled` itself (the handler's
   * later writes are refused). A task that finished first keeps its outcome. Throws for a task already terminal.
   */
  async cancelNow(taskId: unknown, principal: string, graceMs: number): Promise<TaskView> {
    const rec = await this.lookup(taskId, principal);
    if (isTerminal(rec.status)) {
      throw new TaskProtocolError(ErrorCode.InvalidParams, `Cannot cancel task: already in terminal status '${rec.status}'`);
    }
    await this.cancelTask(rec.taskId, principal);
    const ended = await this.untilTerminal(rec.taskId, principal, graceMs);
    if (ended) return ended;
    try {
      await this.store.finish(rec.taskId, null, { status: 'cancelled' }, 'Cancelled by the caller', this.store.now());
      this.publish(rec.taskId);
    } catch (e) {
      if (!(e instanceof TaskWriteRefused)) throw e;
    }
    return this.pollView(rec.taskId, principal);
  }

  /** The view once terminal, or undefined after `timeoutMs` (or when `signal` aborts). */
  async untilTerminal(taskId: string, principal: string, timeoutMs: number, signal?: AbortSignal): Promise<TaskView | undefined> {
    let resolve!: (v: TaskView | undefined) => void;
    const ended = new Promise<TaskView | undefined>((r) => (resolve = r));
    const onView = (v: TaskView) => void (isTerminal(v.status) && resolve(v));
    const unwatch = this.watchEndHere(taskId, principal, onView) ?? (await this.watchViews(taskId, principal, onView));
    const timer = setTimeout(() => resolve(undefined), timeoutMs);
    const onAbort = () => resolve(undefined);
    signal?.addEventListener('abort', onAbort, { once: true });
    if (signal?.aborted) resolve(undefined);
    try {
      return await ended;
    } finally {
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
      unwatch();
    }
  }

  /**
   * An answer to one input request, posted by the client (2025-11-25: the client's response to a request the
   * server sent on its tasks/result stream). `error` set: the client could not answer, and the wait fails.
   * Returns whether the key was outstanding; an answer to a key already answered (or timed out) is refused with a
   * TaskProtocolError that says so, and records nothing.
   */
  async answerFromClient(taskId: unknown, principal: string, key: string, answer: { result: unknown } | { error: JsonRpcErrorObject }): Promise<boolean> {
    const rec = await this.lookup(taskId, principal);
    // A handle caller's client that cannot take this kind of request says so: the question stays open for the page.
    if ('error' in answer && rec.origin === 'handle') return false;
    if (!rec.inputRequests[key]) {
      const earlier = rec.inputResponses[key];
      if (earlier) throw earlier.timedOut ? inputTimedOut(key, earlier.answeredAt) : alreadyAnswered(key, earlier.answeredAt);
      return false;
    }
    const responses = 'error' in answer
      ? { [key]: { [INPUT_REFUSED]: { code: answer.error.code, message: String(answer.error.message ?? '') } } }
      : validateInputResponses({ [key]: answer.result }, rec.inputRequests);
    const { accepted, record } = await this.recordAnswers(rec.taskId, responses);
    this.answered(record, accepted);
    // Past its deadline: the store recorded the timeout instead; or another answer was recorded first (a race).
    const earlier = accepted.length === 0 ? record.inputResponses[key] : undefined;
    if (earlier) throw earlier.timedOut ? inputTimedOut(key, earlier.answeredAt) : alreadyAnswered(key, earlier.answeredAt);
    return accepted.length > 0;
  }

  /** Notes that a caller read a terminal outcome (the unread-failure alert keys on it). */
  noteRetrieved(view: TaskView): void {
    if (!isTerminal(view.status) || view.retrievedAt !== null) return;
    void this.store.markRetrieved(view.taskId, this.store.now()).catch((e) => this.log.warn('could not note retrieval', { error: String(e) }));
  }

  /** One page of `principal`'s tasks, newest first. `cursor` is the `nextCursor` of the page before. */
  async listTasks(principal: string, cursor: unknown, limit: number): Promise<{ tasks: TaskSummary[]; nextCursor?: string }> {
    const after = cursor === undefined || cursor === null ? undefined : decodeCursor(cursor);
    const tasks = await this.store.listByPrincipal(principal, after, limit + 1);
    if (tasks.length <= limit) return { tasks };
    const page = tasks.slice(0, limit);
    const last = page[page.length - 1]!;
    return { tasks: page, nextCursor: encodeCursor({ createdAt: last.createdAt, taskId: last.taskId }) };
  }

  /** Calls `listener` with the stored view now and after every change, until unsubscribed. */
  async watchViews(taskId: unknown, principal: string, listener: (view: TaskView) => void): Promise<() => void> {
    const rec = owned(await this.store.view(checkTaskId(taskId)), principal);
    return this.counted(watchView(this.watchSource, rec, listener));
  }

  /**
   * Waits for the end of a task of `principal` that runs in this process, without reading it first (undefined: it
   * does not run here, or has ended). Its end is written here and signalled here after the run leaves `running`
   * (settle untracks it before its write), so a watch begun while it is there hears it; an end written elsewhere
   * meanwhile (after a takeover) is seen by the watch's re-read, as a lost signal is.
   */
  private watchEndHere(taskId: unknown, principal: string, listener: (view: TaskView) => void): (() => void) | undefined {
    const rec = typeof taskId === 'string' ? this.running.get(taskId)?.record : undefined;
    if (!rec || rec.principal !== principal || isTerminal(rec.status)) return undefined;
    return this.counted(watchView(this.watchSource, rec.taskId, listener));
  }

  private get watchSource(): WatchSource {
    return { store: this.store, bus: this.bus, recheckMs: this.watchRecheckMs, finishedHere: (id) => this.finishedViews.get(id) };
  }

  /** `unwatch`, counted in the open watches while it is open. */
  private counted(unwatch: () => void): () => void {
    const t = this.telemetry;
    if (!t) return unwatch;
    t.watchesOpen++;
    let open = true;
    return () => {
      if (open) t.watchesOpen--;
      open = false;
      unwatch();
    };
  }

  /** Calls `listener` with the full task state now and after every change, until unsubscribed. */
  watch(taskId: unknown, principal: string, listener: (task: DetailedTask) => void): Promise<() => void> {
    return this.watchViews(taskId, principal, (v) => listener(this.wireTask(v, this.store.now())));
  }
}
