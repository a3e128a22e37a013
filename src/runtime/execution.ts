/**
 * One run of a handler, inline or as a task: the TaskContext the handler sees, its promotion to a durable task,
 * its status and input writes (fenced by owner and epoch), and the write of its outcome. Durable steps are steps.ts,
 * parked waits parking.ts, recorded deadlines and sleeps durable-time.ts; this file wires them to the run.
 */
import { context } from '@opentelemetry/api';
import { ANSWERED_BY_META, ErrorCode, TaskProtocolError, answeredByOf, isTerminal, missingTasksCapability, type InputRequest, type JsonObject } from '../protocol/index.js';
import type { SignalBus, SignalKind } from '../store/local-bus.js';
import { sameRequest } from '../store/rules.js';
import { IdempotencyConflictError, TaskValueRefused, TaskWriteRefused, type EndedAtCreation, type NewTask, type TaskRecord, type StepWrite, type TaskStore, type WriteFence } from '../store/types.js';
import { TaskCancelledError, type ElicitOptions, type ElicitResult, type InputOptions, type StepInfo, type StepOptions, type TaskContext } from './context.js';
import { sleepUntil, sleepWakeAt } from './durable-time.js';
import { newTaskId, requestHash } from './ids.js';
import { answersOf, waitForAnswers } from './input-wait.js';
import { outcomeMessage, taskOutcome, type HandlerEnd } from './outcome.js';
import { answeredInlineMessage } from './inline-answer.js';
import { storeDidNotAnswer, throughOutage } from './outage.js';
import { Waits } from './parking.js';
import { capInputRequest, capStatus } from './text-bounds.js';
import { StepRunner, type StepTarget } from './steps.js';
import { OutputWriter, type OutputContent } from './output.js';
import type { OutputBounds } from '../store/output.js';
import { AttemptSpan, carrierOf, type AttemptOrigin } from './tracing.js';
import type { CallContext, Logger, RegisteredTool, Slot } from './types.js';

/** What an execution needs from the runtime that runs it. */
export interface ExecutionHost {
  readonly store: TaskStore;
  readonly bus: SignalBus;
  readonly log: Logger;
  readonly replicaId: string;
  readonly defaultTtlMs: number | null;
  readonly defaultPollIntervalMs: number;
  readonly defaultInputTimeoutMs: number;
  readonly inputRecheckMs: number;
  readonly isStopping: boolean;
  /** A durable tool's wait parks once it has lasted this long with no step running. */
  readonly parkAfterMs: number;
  /** Default size limit of one step's value (JSON, UTF-8 bytes). */
  readonly maxStepResultBytes: number;
  /** Size limit of a task's result (JSON, UTF-8 bytes). */
  readonly maxResultBytes: number;
  /** Output retained per task (src/store/output.ts). */
  readonly outputBounds: OutputBounds;
  /** The lease: a run's own store call waits through an outage at most this long (the fence ends it sooner). */
  readonly leaseMs: number;
  /** Answer pages are on (set by the server glue): a handle caller's person can write a sampling reply there. */
  readonly samplingOnPages: boolean;
  publish(taskId: string, kind?: SignalKind): void;
  /** The task's finishing write returned this (terminal) row: watchers here take it instead of reading it back. */
  finishedHere(record: TaskRecord): void;
  /** A task this replica parked becomes due at `t` (wake for it on time). */
  wakeDueAt(t: number): void;
  /** The handler started / settled (every execution, inline or task). */
  handlerStarted(exec: Execution): void;
  handlerEnded(exec: Execution): void;
  /** The execution is now a task running here (cancel signals for it must reach it), or no longer. */
  track(exec: Execution): void;
  untrack(exec: Execution): void;
  /** The task's outcome is committed, or it was parked (a slot of a deployment-wide limit may be free now). */
  taskFinished(exec: Execution): void;
  /** The run ended because the store did not answer it: the task is re-run, resumed or failed once the store answers. */
  handBack(exec: Execution): void;
  /** A task of `principal` was stored (its per-principal bound counts it). */
  taskStored(principal: string, expiresAt: number | null): void;
  /** A caller has the task's terminal outcome (the unread-failure alert keys on it). */
  noteRetrieved(view: TaskRecord): void;
}

/** The row a call becomes: the tool's TTL (or the shorter one a 2025-11-25 caller asked for), poll interval and
 *  retry-safety, the hash behind an idempotency key, and which wire created it. */
export function newTaskFor(
  host: Pick<ExecutionHost, 'defaultTtlMs' | 'defaultPollIntervalMs' | 'store'>,
  tool: RegisteredTool,
  args: JsonObject,
  call: CallContext,
  row: { owner: string | null; statusMessage: string | null; retrySafe?: boolean | undefined; queued?: boolean; callStartedAt?: number },
): NewTask {
  const spec = tool.spec;
  const key = call.idempotencyKey;
  return {
    taskId: newTaskId(),
    principal: call.principal,
    tool: tool.name,
    args: call.preflight ? { ...args, preflight: call.preflight } : args,
    statusMessage: row.statusMessage,
    // The task's life is the call's: a call that ran inline before it became a task counts from its start (the
    // time a handle says it has run, the TTL, the task's duration), on the store's clock.
    createdAt: row.callStartedAt ?? host.store.now(),
    ttlMs: ttlFor(spec.ttlMs !== undefined ? spec.ttlMs : host.defaultTtlMs, call.taskRequested?.ttlMs),
    pollIntervalMs: spec.pollIntervalMs ?? host.defaultPollIntervalMs,
    owner: row.owner,
    ...(row.queued ? { queued: true } : {}),
    // A durable tool re-runs after a crash: its completed steps replay, the one in flight follows its own rule.
    retrySafe: row.retrySafe ?? spec.retrySafe ?? spec.durable ?? false,
    idempotencyKey: key ?? null,
    requestHash: key ? requestHash(tool.name, args) : null,
    clientCapabilities: call.clientCapabilities,
    origin: call.origin ?? (call.handleAfterMs !== undefined && !call.tasksDeclared ? 'handle' : 'extension'),
    progressToken: call.progressToken ?? null,
    // The creating request's trace context: a queued first run continues it, a re-run after a takeover links to it.
    traceContext: carrierOf(call.traceContext ?? context.active()),
  };
}

/** What the caller hears when its task could not be stored (`started`: its handler had started, and was stopped). */
export function creationFailure(e: unknown, log: Logger, started = false): TaskProtocolError {
  if (e instanceof IdempotencyConflictError) return new TaskProtocolError(ErrorCode.InvalidParams, e.message, { existingTaskId: e.existingTaskId });
  if (e instanceof TaskProtocolError) return e; // e.g. the store is unreachable: retryable, and it says so
  const what = started ? 'its run was stopped' : 'nothing was started';
  if (e instanceof TaskValueRefused) return new TaskProtocolError(ErrorCode.InvalidParams, `The call could not be stored, and ${what}: its arguments or idempotency key hold a value the store refuses (${e.why})`);
  log.error('could not persist task', { error: String(e) });
  return new TaskProtocolError(ErrorCode.InternalError, `The task could not be stored; ${what}. Retry the call.`);
}

/** The TTL of a new task: the tool's, or the shorter one a 2025-11-25 caller asked for. */
function ttlFor(toolTtl: number | null, requested: number | undefined): number | null {
  if (requested === undefined) return toolTtl;
  return toolTtl === null ? requested : Math.min(toolTtl, requested);
}

/** The client capability an input request needs; throws for a method ctx.input cannot ask. */
function inputKind(request: InputRequest): 'elicitation' | 'sampling' | 'roots' {
  const need =
    request.method === 'elicitation/create' ? 'elicitation'
    : request.method === 'sampling/createMessage' ? 'sampling'
    : request.method === 'roots/list' ? 'roots'
    : undefined;
  if (!need) throw new TypeError(`ctx.input: unsupported input request method "${String(request.method)}"`);
  return need;
}

/**
 * The call a task's later run (a resume after parking, a queue claim, a takeover) continues: what the creating request
 * declared, as kept with the task. A 2025-11-25 request over stateless HTTP declares nothing the server can see (its
 * capabilities were given at initialize, to another instance): it is stored with none, and they stay unknown, not
 * "declared nothing" (a session's, stored non-empty, stay known).
 */
export function callOfRecord(rec: TaskRecord): CallContext {
  const { preflight } = rec.args as JsonObject & { preflight?: JsonObject };
  return {
    principal: rec.principal,
    clientCapabilities: rec.clientCapabilities,
    tasksDeclared: true,
    origin: rec.origin,
    capabilitiesKnown: rec.origin !== 'legacy' || Object.keys(rec.clientCapabilities).length > 0,
    ...(rec.progressToken !== null ? { progressToken: rec.progressToken } : {}),
    ...(preflight !== undefined ? { preflight } : {}),
  };
}

function deferred<T>() {
  let resolve!: (v: T) => void;
  const promise = new Promise<T>((res) => {
    resolve = res;
  });
  return { promise, resolve };
}

export class Execution implements TaskContext {
  readonly controller = new AbortController();
  /** When the call reached this replica (epoch ms, the store's clock): a task it becomes later is created as of then. */
  readonly callStartedAt: number;
  taskId: string | undefined;
  record: TaskRecord | undefined;
  readonly owner: string;
  /** The claim this run holds the task under (every write names it; fixed for the run: steps keep its fence). */
  readonly epoch: number;
  attempt: number;
  /** The id the task row is written under (known before the store answers: a creation whose answer was lost may
   *  have happened). */
  plannedTaskId: string | undefined;
  /** Settles when the handler does. */
  done!: Promise<HandlerEnd>;
  /** How the handler ended, once it has. */
  private ended: HandlerEnd | undefined;
  /** The handler started beside its row's write: a quick run's end goes into that write (see endedAtCreation). */
  endsInCreation = false;
  /** This run's own persist created the task's row (so it has no stored steps to replay). */
  private createdByThisRun = false;
  private promotion: Promise<{ record: TaskRecord; created: boolean }> | undefined;
  readonly promoteRequested = deferred<void>();
  /** Settles when the run lets go of its task here: parked, or handed over on shutdown (no outcome is written here). */
  readonly parkedNow = deferred<void>();
  private statusMessage: string | null = null;
  private statusChain: Promise<void> = Promise.resolve();
  private lastStatusAt = 0;
  private statusEwma = 0;
  private inputSeq = 0;
  cancelReason: TaskCancelledError | undefined;
  private retrySafeOverride: boolean | undefined;
  /** When set, the outcome is not written (expired or shutdown: someone else decides). */
  abandoned = false;
  /** The handler slot admission (or a queue claim) took for this run; used once the handler starts. */
  slot: Slot | undefined;
  /** The store let go of the task while the handler waited: it resumes elsewhere (or here) from its steps. */
  parked = false;
  private readonly steps: StepRunner;
  private readonly outputs: OutputWriter;
  /** Items emitted so far per scope (a step's key, or the steps called before): a durable tool's output identity. */
  private readonly outputCounts = new Map<string, number>();
  private waitsOfRun: Waits | undefined;
  private handlerEndNoted = false;
  /** This attempt's `execute_tool` span (from start) and where it hangs. */
  private span: AttemptSpan | undefined;
  private readonly traceOrigin: AttemptOrigin;
  /** Set while the replica stops: called (once) as soon as no step not marked idempotent runs. */
  private betweenSteps: (() => void) | undefined;

  constructor(
    readonly rt: ExecutionHost,
    readonly tool: RegisteredTool,
    readonly args: JsonObject,
    readonly call: CallContext,
    fromRecord?: TaskRecord,
  ) {
    this.callStartedAt = rt.store.now();
    this.owner = rt.replicaId;
    this.epoch = fromRecord?.epoch ?? 1;
    this.attempt = fromRecord?.attempts ?? 1;
    this.traceOrigin = fromRecord ? { stored: fromRecord.traceContext, attempt: fromRecord.attempts } : { parent: call.traceContext };
    if (fromRecord) {
      this.taskId = fromRecord.taskId;
      this.record = fromRecord;
      this.promotion = Promise.resolve({ record: fromRecord, created: false });
      this.statusMessage = fromRecord.statusMessage;
    }
    const signal = () => this.signal;
    this.steps = new StepRunner({
      store: rt.store,
      log: rt.log,
      get signal() {
        return signal();
      },
      maxStepResultBytes: rt.maxStepResultBytes,
      durable: () => this.durableTarget(),
      lostOwnership: () => this.lostOwnership(),
      abortFor: (reason) => this.abort(reason),
      stepsChanged: () => {
        this.waitsOfRun?.schedule();
        if (this.betweenSteps && this.steps.unsafeRunning === 0) this.betweenSteps();
      },
      own: (call) => this.own(call),
    });
    this.outputs = new OutputWriter({
      store: rt.store,
      bounds: rt.outputBounds,
      target: () => (this.taskId && !this.abandoned ? { taskId: this.taskId, fence: this.fence } : undefined),
      keyOf: () => {
        if (!this.tool.spec.durable) return undefined;
        const scope = this.steps.current ?? `@${this.steps.calls}`;
        const n = (this.outputCounts.get(scope) ?? 0) + 1;
        this.outputCounts.set(scope, n);
        return `${scope}/${n}`;
      },
      written: (taskId) => this.rt.publish(taskId, 'output'),
      refused: (e) => {
        if (e.reason === 'fenced') this.lostOwnership();
      },
      own: (call) => this.own(call),
    });
  }

  /** A store call of this run: through an outage it waits for the store while the run may hold its task (outage.ts). */
  private own<T>(call: () => Promise<T>): Promise<T> {
    return throughOutage(call, this.signal, this.rt.leaseMs);
  }

  /** Step ends this run could not store before it stopped (written by the replica's own next claim of the task). */
  carriedSteps(): StepWrite[] {
    return this.steps.carried;
  }

  /** Who may write to the task: this replica, under the claim this run started with. */
  get fence(): WriteFence {
    return { owner: this.owner, epoch: this.epoch };
  }

  /** The task this run's steps are recorded in (promoting the call if it can be a task); undefined: it cannot be one. */
  private async durableTarget(): Promise<StepTarget | undefined> {
    await this.becomeTask();
    if (!this.taskId) return undefined;
    return { taskId: this.taskId, fence: this.fence, expiresAt: this.record?.expiresAt ?? null, createdByThisRun: this.createdByThisRun };
  }

  /** A durable tool's waits, which may park the run (undefined for other tools: they wait in memory). */
  private get waits(): Waits | undefined {
    if (!this.tool.spec.durable) return undefined;
    this.waitsOfRun ??= new Waits({
      store: this.rt.store,
      log: this.rt.log,
      parkAfterMs: this.rt.parkAfterMs,
      parkable: () => (this.taskId && !this.abandoned && !this.signal.aborted ? { taskId: this.taskId, fence: this.fence } : undefined),
      stepsInFlight: () => this.steps.running,
      parked: (rec) => this.onParked(rec),
      cancelled: () => this.abort(new TaskCancelledError('cancelled')),
      lostOwnership: () => this.lostOwnership(),
    });
    return this.waitsOfRun;
  }

  /** The store let go of the task: nothing of this run stays (no slot, no listener, no timer); the handler's pending
   *  call never settles, and its signal aborts so that stray code of its own stops too. */
  private onParked(rec: TaskRecord): void {
    this.parked = true;
    this.span?.parked(rec.queuedAt);
    this.abandoned = true;
    this.record = rec;
    this.rt.untrack(this);
    this.noteHandlerEnd();
    // It no longer counts against a deployment-wide limit of its tool: another replica may start one.
    this.rt.taskFinished(this);
    this.rt.publish(rec.taskId);
    if (rec.queuedAt !== null) this.rt.wakeDueAt(rec.queuedAt);
    this.rt.log.debug('task parked: its handler waits with no process holding it', { taskId: rec.taskId, wakeAt: rec.queuedAt });
    this.abort(new TaskCancelledError('parked'));
    this.parkedNow.resolve();
  }

  /** The slot and the registry entry of this run are given back once (when the handler settles, or when parked). */
  private noteHandlerEnd(): void {
    if (this.handlerEndNoted) return;
    this.handlerEndNoted = true;
    this.rt.handlerEnded(this);
  }

  get signal(): AbortSignal {
    return this.controller.signal;
  }
  get principal(): string {
    return this.call.principal;
  }
  get clientCapabilities(): JsonObject {
    return this.call.clientCapabilities;
  }
  get preflight(): JsonObject | undefined {
    return this.call.preflight;
  }

  /** Another replica owns the task now (or may: `why`): stop, and write nothing more. */
  lostOwnership(why = 'another replica took this task over; stopping this run'): void {
    if (this.abandoned) return;
    this.rt.log.warn(why, { taskId: this.taskId ?? null });
    this.abandoned = true;
    const stranded = this.waitsOfRun?.abandon() ?? false;
    this.span?.lost();
    this.abort(new TaskCancelledError('taken-over'));
    // A handler held in a wait is never woken now: its registry entry and slot go, as a parked run's do.
    if (stranded) {
      this.rt.untrack(this);
      this.noteHandlerEnd();
    }
  }

  abort(reason: TaskCancelledError): void {
    if (this.controller.signal.aborted) return;
    this.cancelReason = reason;
    this.controller.abort(reason);
  }

  start(): void {
    this.rt.handlerStarted(this);
    // Started beside its row's write, the run already has its task's id (the write is queued).
    const taskId = this.taskId ?? (this.endsInCreation ? this.plannedTaskId : undefined);
    const span = (this.span = new AttemptSpan(this.tool.name, this.attempt, taskId, this.traceOrigin));
    // The handler runs in its span's context: spans it makes are children of this attempt.
    this.done = context.with(span.context, async () => {
      try {
        return { ok: true as const, value: await this.tool.spec.handler(this.args, this) };
      } catch (error) {
        return { ok: false as const, error };
      }
    });
    void this.done.then((r) => {
      this.ended = r;
      span.end(r, this.cancelReason, this.persisting && !this.abandoned);
      this.noteHandlerEnd();
    });
  }

  /** Whether the task row has been (or is being) written. */
  get persisting(): boolean {
    return this.promotion !== undefined;
  }

  /** Persists the task (once). Resolves after the commit. */
  persist(): Promise<{ record: TaskRecord; created: boolean }> {
    if (!this.promotion) {
      const row = newTaskFor(this.rt, this.tool, this.args, this.call, { owner: this.owner, statusMessage: this.statusMessage, retrySafe: this.retrySafeOverride, callStartedAt: this.callStartedAt });
      if (this.endsInCreation) row.endedBy = () => this.endedAtCreation();
      this.plannedTaskId = row.taskId;
      this.promotion = this.rt.store
        .create(row)
        .then((r) => {
          if (r.created) {
            this.createdByThisRun = true;
            this.rt.taskStored(r.record.principal, r.record.expiresAt);
            this.taskId = r.record.taskId;
            this.record = r.record;
            this.call.onTask?.(r.record);
            // A run started beside its write has had the id from its start, as a run started after it has.
            if (!this.endsInCreation) this.span?.persisted(r.record.taskId, r.record.status);
            // No change signal: nobody can be watching an id that has not been handed out yet.
            this.rt.track(this);
            // Output emitted while the call ran inline is written now.
            this.outputs.flush();
            // A status set while the row was being committed is written now.
            if (this.statusMessage !== null && this.statusMessage !== r.record.statusMessage) void this.status(this.statusMessage).catch(() => undefined);
          }
          return r;
        });
    }
    return this.promotion;
  }

  /** The run's end if it ended before its row was written and left nothing else to write first (no status, output
   *  or step of its own, no cancel): the row is then written finished, one write for the whole task. */
  private endedAtCreation(): EndedAtCreation | undefined {
    const r = this.ended;
    if (!r || this.cancelReason || this.abandoned || this.statusMessage !== null || this.outputs.queued || this.steps.calls > 0) return undefined;
    // A store that did not answer the run is no end of the work (settle hands such a task back).
    if (!r.ok && storeDidNotAnswer(r.error)) return undefined;
    const outcome = taskOutcome(r, undefined, this.rt.maxResultBytes);
    return { outcome, statusMessage: outcomeMessage(outcome, undefined), at: this.rt.store.now() };
  }

  /** ctx.promote(): the call is a task from now on, and its caller gets it (a keyed call, stored from its start, too). */
  async promote(): Promise<void> {
    if (this.taskId) this.promoteRequested.resolve();
    else await this.becomeTask();
  }

  /** Stores the call as a task if it can be one and is not yet (a step needs its row; a keyed call has one already). */
  private async becomeTask(): Promise<void> {
    if (this.taskId) return;
    if ((!this.call.tasksDeclared && this.call.handleAfterMs === undefined) || this.tool.spec.policy === 'never') return;
    this.promoteRequested.resolve();
    await this.persist();
  }

  /** Makes sure the call is a task (input needs one). */
  private async ensureTask(what: string): Promise<string> {
    // A call stored before it ran (keyed) still answers inline until now: its caller must see the task that asks.
    this.promoteRequested.resolve();
    if (this.taskId) return this.taskId;
    // A handle caller can be asked too: on its call's stream, through the status tool, or on the answer page.
    if ((!this.call.tasksDeclared && this.call.handleAfterMs === undefined) || this.tool.spec.policy === 'never') {
      throw missingTasksCapability(`${what} needs the call to become a task, and this request did not declare the io.modelcontextprotocol/tasks extension`);
    }
    await this.persist();
    return this.taskId!;
  }

  status(text: string): Promise<void> {
    if (typeof text !== 'string') throw new TypeError('ctx.status(message): message must be a string');
    // Bounded here too: an inline call's status goes to its caller as progress without being stored.
    const message = capStatus(text);
    this.statusMessage = message;
    const now = Date.now();
    if (this.lastStatusAt) {
      const gap = now - this.lastStatusAt;
      this.statusEwma = this.statusEwma ? this.statusEwma * 0.7 + gap * 0.3 : gap;
    }
    this.lastStatusAt = now;
    if (!this.taskId) {
      this.call.onInlineStatus?.(message);
      return Promise.resolve();
    }
    const taskId = this.taskId;
    // Coalesced: only the latest message is written when writes queue up.
    this.statusChain = this.statusChain.then(async () => {
      if (this.statusMessage !== message || this.abandoned) return;
      const floor = this.tool.spec.pollIntervalMs ?? this.rt.defaultPollIntervalMs;
      const interval = this.statusEwma ? Math.max(floor, Math.round(this.statusEwma)) : undefined;
      try {
        await this.own(() => this.rt.store.setProgress(taskId, this.owner, message, interval, this.epoch));
        this.rt.publish(taskId);
      } catch (e) {
        if (!(e instanceof TaskWriteRefused)) throw e;
        if (e.reason === 'fenced') this.lostOwnership();
      }
    });
    return this.statusChain;
  }

  output(content: OutputContent | OutputContent[]): Promise<void> {
    return this.outputs.emit(content);
  }

  async setRetrySafe(safe = true): Promise<void> {
    const taskId = this.taskId;
    if (!taskId) {
      this.retrySafeOverride = safe;
      return;
    }
    this.record = await this.own(() => this.rt.store.setRetrySafe(taskId, this.owner, safe, this.epoch));
  }

  /** Whether the task may run again elsewhere (declared safe to re-run, or durable), as this run last knew its row. */
  get mayRunElsewhere(): boolean {
    return this.taskId !== undefined && this.record?.retrySafe === true;
  }

  /** Calls `f` once no step not marked idempotent runs (now, if none does): where the run may stop without cutting one. */
  whenBetweenSteps(f: () => void): void {
    if (this.steps.unsafeRunning === 0) return f();
    this.betweenSteps = () => {
      this.betweenSteps = undefined;
      f();
    };
  }

  /**
   * The replica stops and the task goes on elsewhere (handoff.ts): this run writes nothing more and its handler is
   * aborted; a caller still waiting inline gets the task instead of an error.
   */
  stopForHandOver(): void {
    this.promoteRequested.resolve();
    this.parkedNow.resolve();
    this.abandoned = true;
    this.waitsOfRun?.close();
    this.rt.untrack(this);
    this.abort(new TaskCancelledError('shutdown'));
  }

  private checkCapability(request: InputRequest): void {
    const caps = this.call.clientCapabilities as Record<string, unknown>;
    const need = inputKind(request);
    // An operator answers on the dashboard: the client needs no capability for it.
    if (answeredByOf(request) === 'operator') return;
    // Capabilities this wire cannot tell (2025-11-25 over stateless HTTP): a client that cannot answer says so.
    const known = this.call.capabilitiesKnown ?? this.call.origin !== 'legacy';
    if (!known) return;
    // A form question to a handle caller can always reach a person: the answer page, the status tool, a later call.
    const handleCaller = !this.call.tasksDeclared || this.call.origin === 'handle';
    if (handleCaller && need === 'elicitation' && (request.params as { mode?: string } | undefined)?.mode !== 'url') return;
    // A sampling request to a handle caller reaches a person on its answer page, when the server has them.
    if (handleCaller && need === 'sampling' && this.rt.samplingOnPages) return;
    const declared = caps[need] as Record<string, unknown> | undefined;
    if (!declared) {
      throw new TaskProtocolError(
        ErrorCode.MissingRequiredClientCapability,
        `The tool asked for ${request.method}, which the client did not declare (capability "${need}")`,
        { requiredCapabilities: { [need]: {} } },
      );
    }
    if (need === 'elicitation' && (request.params as { mode?: string } | undefined)?.mode === 'url' && !declared.url) {
      throw new TaskProtocolError(ErrorCode.MissingRequiredClientCapability, 'The tool asked for a URL elicitation, which the client did not declare', {
        requiredCapabilities: { elicitation: { url: {} } },
      });
    }
  }

  async input<K extends string>(asked: Record<K, InputRequest>, options: InputOptions = {}): Promise<Record<K, JsonObject>> {
    const keys = Object.keys(asked) as K[];
    if (keys.length === 0) throw new TypeError('ctx.input: pass at least one request');
    this.steps.assertOutside('ctx.input');
    for (const k of keys) inputKind(asked[k]);
    // Bounded as they will be stored, so a re-run's question compares equal to the recorded one.
    const requests = {} as Record<K, InputRequest>;
    for (const k of keys) requests[k] = capInputRequest(asked[k]);
    const timeoutMs = options.timeoutMs ?? this.tool.spec.inputTimeoutMs ?? this.rt.defaultInputTimeoutMs;
    if (typeof timeoutMs !== 'number' || !Number.isFinite(timeoutMs) || timeoutMs <= 0) throw new TypeError(`ctx.input: timeoutMs must be a finite number > 0, got ${String(timeoutMs)}`);
    this.signal.throwIfAborted();
    // A replay: every key was answered (or timed out) in an earlier run, for the same request. Nothing to write, and
    // nothing to check: the recorded answer (or timeout) wins, so a resumed run ends as the original one would have.
    const known = this.record;
    const replayed = known && keys.every((k) => known.inputResponses[k] && sameRequest(known.inputResponses[k]!.request, requests[k]));
    const stored = replayed ? answersOf(keys, known, timeoutMs) : undefined;
    if (stored) {
      if ('error' in stored) throw stored.error;
      return stored.value;
    }
    for (const k of keys) this.checkCapability(requests[k]);
    const taskId = await this.ensureTask('Asking for input');
    const now = this.rt.store.now();
    const pending: Record<string, { request: InputRequest; deadline: number }> = {};
    for (const k of keys) pending[k] = { request: requests[k], deadline: now + timeoutMs };
    let rec: TaskRecord;
    try {
      rec = await this.own(() => this.rt.store.requestInput(taskId, this.owner, pending, now, this.epoch));
    } catch (e) {
      if (e instanceof TaskWriteRefused && e.reason === 'fenced') this.lostOwnership();
      throw e;
    }
    this.record = rec;
    this.rt.publish(taskId);
    this.span?.status(rec.status);
    const answers = await waitForAnswers<K>({
      store: this.rt.store,
      bus: this.rt.bus,
      taskId,
      keys,
      record: rec,
      timeoutMs,
      recheckMs: this.rt.inputRecheckMs,
      signal: this.signal,
      waits: this.waits,
    });
    this.span?.status('working');
    return answers;
  }

  step<T>(name: string, fn: (step: StepInfo) => Promise<T> | T, options?: StepOptions): Promise<T> {
    return this.steps.step(name, fn, options);
  }

  async sleep(name: string, ms: number): Promise<void> {
    // The TTL the sleep is checked against is read fresh: a wait for input may have grown it since this run began.
    const wakeAt = await this.steps.sleepRecord(name, ms, async (now, recordedExpiry) => {
      let expiresAt = recordedExpiry;
      if (this.taskId) {
        const taskId = this.taskId;
        const l = await this.own(() => this.rt.store.get(taskId));
        if (l.state === 'found') expiresAt = l.record.expiresAt;
      }
      return sleepWakeAt(name, ms, now, expiresAt);
    });
    await sleepUntil(wakeAt, this.signal, this.waits, () => this.rt.store.now());
  }

  async elicit(message: string, requestedSchema: JsonObject, options: ElicitOptions = {}): Promise<ElicitResult> {
    const key = options.key ?? `input-${++this.inputSeq}`;
    const by = options.answeredBy ?? 'person';
    if (by !== 'person' && by !== 'any' && by !== 'operator') throw new TypeError(`ctx.elicit: answeredBy must be 'person', 'any' or 'operator', got ${String(by)}`);
    const params = { mode: 'form', message, requestedSchema, ...(by !== 'person' ? { _meta: { [ANSWERED_BY_META]: by } } : {}) };
    const r = await this.input({ [key]: { method: 'elicitation/create', params } }, options);
    return r[key] as unknown as ElicitResult;
  }

  /** Writes the outcome of a task run (`answeredInline`: its caller got it in the call's own answer; inline-answer.ts). */
  async settle(result: HandlerEnd, answeredInline = false): Promise<void> {
    const p = await this.persist().catch(() => undefined);
    if (!p || (!p.created && !this.record)) return;
    const taskId = this.taskId!;
    this.rt.untrack(this);
    this.waitsOfRun?.close();
    if (this.abandoned) return;
    if (p.created && isTerminal(p.record.status)) {
      // Written finished in its creation (endedAtCreation): nobody had its id to watch, nothing is left to write.
      this.rt.taskFinished(this);
      return;
    }
    if (result.ok) this.steps.ended();
    if (!result.ok && storeDidNotAnswer(result.error) && !this.cancelReason) {
      // Not the work's failure but the store's: the task is handed back, to be re-run, resumed or failed naming the
      // outage once the store answers (recovery.ts), never failed `store_unavailable` as if the tool had failed.
      this.abandoned = true;
      this.rt.log.warn('the store did not answer this run; it stops, and the task is re-run, resumed or failed once the store answers', { taskId });
      this.rt.handBack(this);
      return;
    }
    await this.statusChain.catch(() => undefined);
    // Output comes before the end: a stream that sees the terminal status has every item.
    await this.outputs.drain().catch(() => undefined);
    let outcome = taskOutcome(result, this.cancelReason, this.rt.maxResultBytes);
    let message = answeredInline ? answeredInlineMessage(outcome) : outcomeMessage(outcome, this.cancelReason);
    // The outcome must reach the store: a transient failure (database restarting) is retried with backoff for as
    // long as this replica lives; if it dies first, the task is recovered elsewhere like any other orphan.
    for (let delay = 100; ; delay = Math.min(delay * 2, 5000)) {
      try {
        const finished = await this.rt.store.finish(taskId, this.owner, outcome, message, this.rt.store.now(), this.epoch);
        // A failure its caller got inline was read: no alert for an unread failure.
        if (answeredInline && outcome.status === 'failed') this.rt.noteRetrieved(finished);
        this.rt.finishedHere(finished);
        this.rt.publish(taskId);
        this.rt.taskFinished(this);
        return;
      } catch (e) {
        if (e instanceof TaskValueRefused) {
          // The store cannot hold this result: the task fails saying so (nothing of the result was written).
          outcome = { status: 'failed', error: { code: ErrorCode.InternalError, message: `The tool's result could not be stored: ${e.why}`, data: { reason: 'result_unstorable' } } };
          message = outcome.error.message;
          continue;
        }
        if (e instanceof TaskWriteRefused) {
          this.rt.log.debug('outcome not written', { taskId, reason: e.reason });
          // A retry finding the task finished: the first write may have committed with its answer lost, so the
          // signal it would have sent is sent now (a redundant one costs a re-read).
          if (e.reason === 'terminal' && delay > 100) {
            this.rt.publish(taskId);
            this.rt.taskFinished(this);
          }
          return;
        }
        if (this.rt.isStopping) {
          this.rt.log.error('could not write task outcome before shutdown', { taskId, error: String(e) });
          return;
        }
        this.rt.log.warn(`could not write task outcome; retrying in ${delay} ms`, { taskId, error: String(e) });
        await new Promise((r) => setTimeout(r, delay));
      }
    }
  }
}
