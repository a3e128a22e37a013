/**
 * One run of a handler, inline or as a task: the TaskContext the handler sees, its promotion to a durable task,
 * its status and input writes (fenced by owner), and the write of its outcome.
 */
import { context } from '@opentelemetry/api';
import { ErrorCode, TaskProtocolError, missingTasksCapability, type InputRequest, type JsonObject } from '../protocol/index.js';
import type { SignalBus, SignalKind } from '../store/local-bus.js';
import { IdempotencyConflictError, TaskWriteRefused, type NewTask, type TaskRecord, type TaskStore } from '../store/types.js';
import { TaskCancelledError, type ElicitOptions, type ElicitResult, type InputOptions, type TaskContext } from './context.js';
import { newTaskId, requestHash } from './ids.js';
import { waitForAnswers } from './input-wait.js';
import { outcomeMessage, taskOutcome, type HandlerEnd } from './outcome.js';
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
  publish(taskId: string, kind?: SignalKind): void;
  /** The handler started / settled (every execution, inline or task). */
  handlerStarted(exec: Execution): void;
  handlerEnded(exec: Execution): void;
  /** The execution is now a task running here (cancel signals for it must reach it), or no longer. */
  track(exec: Execution): void;
  untrack(taskId: string): void;
  /** The task's outcome is committed (a slot of a deployment-wide limit may be free now). */
  taskFinished(exec: Execution): void;
}

/** The row a call becomes: the tool's TTL (or the shorter one a 2025-11-25 caller asked for), poll interval and
 *  retry-safety, the hash behind an idempotency key, and which wire created it. */
export function newTaskFor(
  host: Pick<ExecutionHost, 'defaultTtlMs' | 'defaultPollIntervalMs'>,
  tool: RegisteredTool,
  args: JsonObject,
  call: CallContext,
  row: { owner: string | null; statusMessage: string | null; retrySafe?: boolean | undefined; queued?: boolean },
): NewTask {
  const spec = tool.spec;
  const key = call.idempotencyKey;
  return {
    taskId: newTaskId(),
    principal: call.principal,
    tool: tool.name,
    args: call.preflight ? { ...args, preflight: call.preflight } : args,
    statusMessage: row.statusMessage,
    createdAt: Date.now(),
    ttlMs: ttlFor(spec.ttlMs !== undefined ? spec.ttlMs : host.defaultTtlMs, call.taskRequested?.ttlMs),
    pollIntervalMs: spec.pollIntervalMs ?? host.defaultPollIntervalMs,
    owner: row.owner,
    ...(row.queued ? { queued: true } : {}),
    retrySafe: row.retrySafe ?? spec.retrySafe ?? false,
    idempotencyKey: key ?? null,
    requestHash: key ? requestHash(tool.name, args) : null,
    clientCapabilities: call.clientCapabilities,
    origin: call.origin ?? (call.handleAfterMs !== undefined && !call.tasksDeclared ? 'handle' : 'extension'),
    progressToken: call.progressToken ?? null,
    traceContext: carrierOf(call.traceContext ?? context.active()),
  };
}

/** What the caller hears when its task could not be stored (nothing was started). */
export function creationFailure(e: unknown, log: Logger): TaskProtocolError {
  if (e instanceof IdempotencyConflictError) return new TaskProtocolError(ErrorCode.InvalidParams, e.message, { existingTaskId: e.existingTaskId });
  log.error('could not persist task', { error: String(e) });
  return new TaskProtocolError(ErrorCode.InternalError, 'The task could not be stored; nothing was started. Retry the call.');
}

/** The TTL of a new task: the tool's, or the shorter one a 2025-11-25 caller asked for. */
function ttlFor(toolTtl: number | null, requested: number | undefined): number | null {
  if (requested === undefined) return toolTtl;
  return toolTtl === null ? requested : Math.min(toolTtl, requested);
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
  taskId: string | undefined;
  record: TaskRecord | undefined;
  owner: string;
  attempt: number;
  /** Settles when the handler does. */
  done!: Promise<HandlerEnd>;
  private promotion: Promise<{ record: TaskRecord; created: boolean }> | undefined;
  readonly promoteRequested = deferred<void>();
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
  /** This attempt's `execute_tool` span (from start) and where it hangs. */
  private span: AttemptSpan | undefined;
  private readonly traceOrigin: AttemptOrigin;

  constructor(
    readonly rt: ExecutionHost,
    readonly tool: RegisteredTool,
    readonly args: JsonObject,
    readonly call: CallContext,
    fromRecord?: TaskRecord,
  ) {
    this.owner = rt.replicaId;
    this.attempt = fromRecord?.attempts ?? 1;
    this.traceOrigin = fromRecord ? { stored: fromRecord.traceContext, attempt: fromRecord.attempts } : { parent: call.traceContext };
    if (fromRecord) {
      this.taskId = fromRecord.taskId;
      this.record = fromRecord;
      this.promotion = Promise.resolve({ record: fromRecord, created: false });
      this.statusMessage = fromRecord.statusMessage;
    }
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

  /** Another replica owns the task now: stop, and write nothing more. */
  lostOwnership(): void {
    if (this.abandoned) return;
    this.rt.log.warn('another replica took this task over; stopping this run', { taskId: this.taskId ?? null });
    this.abandoned = true;
    this.span?.lost();
    this.abort(new TaskCancelledError('taken-over'));
  }

  abort(reason: TaskCancelledError): void {
    if (this.controller.signal.aborted) return;
    this.cancelReason = reason;
    this.controller.abort(reason);
  }

  start(): void {
    this.rt.handlerStarted(this);
    const span = (this.span = new AttemptSpan(this.tool.name, this.attempt, this.taskId, this.traceOrigin));
    // The handler runs in its span's context: spans it makes are children of this attempt.
    this.done = context.with(span.context, async () => {
      try {
        return { ok: true as const, value: await this.tool.spec.handler(this.args, this) };
      } catch (error) {
        return { ok: false as const, error };
      }
    });
    void this.done.then((r) => {
      span.end(r, this.cancelReason, this.persisting && !this.abandoned);
      this.rt.handlerEnded(this);
    });
  }

  /** Whether the task row has been (or is being) written. */
  get persisting(): boolean {
    return this.promotion !== undefined;
  }

  /** Persists the task (once). Resolves after the commit. */
  persist(): Promise<{ record: TaskRecord; created: boolean }> {
    if (!this.promotion) {
      this.promotion = this.rt.store
        .create(newTaskFor(this.rt, this.tool, this.args, this.call, { owner: this.owner, statusMessage: this.statusMessage, retrySafe: this.retrySafeOverride }))
        .then((r) => {
          if (r.created) {
            this.taskId = r.record.taskId;
            this.record = r.record;
            this.span?.persisted(r.record.taskId, r.record.status);
            // No change signal: nobody can be watching an id that has not been handed out yet.
            this.rt.track(this);
            // A status set while the row was being committed is written now.
            if (this.statusMessage !== null && this.statusMessage !== r.record.statusMessage) void this.status(this.statusMessage).catch(() => undefined);
          }
          return r;
        });
    }
    return this.promotion;
  }

  async promote(): Promise<void> {
    if (this.taskId) return;
    if ((!this.call.tasksDeclared && this.call.handleAfterMs === undefined) || this.tool.spec.policy === 'never') return;
    this.promoteRequested.resolve();
    await this.persist();
  }

  /** Makes sure the call is a task (input needs one). */
  private async ensureTask(what: string): Promise<string> {
    if (this.taskId) return this.taskId;
    if (!this.call.tasksDeclared || this.tool.spec.policy === 'never') {
      throw missingTasksCapability(
        this.call.handleAfterMs !== undefined
          ? `${what} needs a client with task support; this caller follows the work through a handle and cannot answer`
          : `${what} needs the call to become a task, and this request did not declare the io.modelcontextprotocol/tasks extension`,
      );
    }
    this.promoteRequested.resolve();
    await this.persist();
    return this.taskId!;
  }

  status(message: string): Promise<void> {
    if (typeof message !== 'string') throw new TypeError('ctx.status(message): message must be a string');
    this.statusMessage = message;
    const now = Date.now();
    if (this.lastStatusAt) {
      const gap = now - this.lastStatusAt;
      this.statusEwma = this.statusEwma ? this.statusEwma * 0.7 + gap * 0.3 : gap;
    }
    this.lastStatusAt = now;
    if (!this.taskId) return Promise.resolve();
    const taskId = this.taskId;
    // Coalesced: only the latest message is written when writes queue up.
    this.statusChain = this.statusChain.then(async () => {
      if (this.statusMessage !== message || this.abandoned) return;
      const floor = this.tool.spec.pollIntervalMs ?? this.rt.defaultPollIntervalMs;
      const interval = this.statusEwma ? Math.max(floor, Math.round(this.statusEwma)) : undefined;
      try {
        await this.rt.store.setProgress(taskId, this.owner, message, interval);
        this.rt.publish(taskId);
      } catch (e) {
        if (!(e instanceof TaskWriteRefused)) throw e;
        if (e.reason === 'fenced') this.lostOwnership();
      }
    });
    return this.statusChain;
  }

  async setRetrySafe(safe = true): Promise<void> {
    const taskId = this.taskId;
    if (!taskId) {
      this.retrySafeOverride = safe;
      return;
    }
    await this.rt.store.setRetrySafe(taskId, this.owner, safe);
  }

  private checkCapability(request: InputRequest): void {
    const caps = this.call.clientCapabilities as Record<string, unknown>;
    const need =
      request.method === 'elicitation/create' ? 'elicitation'
      : request.method === 'sampling/createMessage' ? 'sampling'
      : request.method === 'roots/list' ? 'roots'
      : undefined;
    if (!need) throw new TypeError(`ctx.input: unsupported input request method "${String(request.method)}"`);
    // Capabilities this wire cannot tell (2025-11-25 over stateless HTTP): a client that cannot answer says so.
    const known = this.call.capabilitiesKnown ?? this.call.origin !== 'legacy';
    if (!known) return;
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

  async input<K extends string>(requests: Record<K, InputRequest>, options: InputOptions = {}): Promise<Record<K, JsonObject>> {
    const keys = Object.keys(requests) as K[];
    if (keys.length === 0) throw new TypeError('ctx.input: pass at least one request');
    for (const k of keys) this.checkCapability(requests[k]);
    this.signal.throwIfAborted();
    const taskId = await this.ensureTask('Asking for input');
    const timeoutMs = options.timeoutMs ?? this.tool.spec.inputTimeoutMs ?? this.rt.defaultInputTimeoutMs;
    const now = Date.now();
    const pending: Record<string, { request: InputRequest; deadline: number }> = {};
    for (const k of keys) pending[k] = { request: requests[k], deadline: now + timeoutMs };
    const rec = await this.rt.store.requestInput(taskId, this.owner, pending, now);
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
    });
    this.span?.status('working');
    return answers;
  }

  async elicit(message: string, requestedSchema: JsonObject, options: ElicitOptions = {}): Promise<ElicitResult> {
    const key = options.key ?? `input-${++this.inputSeq}`;
    const r = await this.input({ [key]: { method: 'elicitation/create', params: { mode: 'form', message, requestedSchema } } }, options);
    return r[key] as unknown as ElicitResult;
  }

  /** Writes the outcome of a task run. */
  async settle(result: HandlerEnd): Promise<void> {
    const p = await this.persist().catch(() => undefined);
    if (!p || (!p.created && !this.record)) return;
    const taskId = this.taskId!;
    this.rt.untrack(taskId);
    if (this.abandoned) return;
    await this.statusChain.catch(() => undefined);
    const outcome = taskOutcome(result, this.cancelReason);
    const message = outcomeMessage(outcome, this.cancelReason);
    // The outcome must reach the store: a transient failure (database restarting) is retried with backoff for as
    // long as this replica lives; if it dies first, the task is recovered elsewhere like any other orphan.
    for (let delay = 100; ; delay = Math.min(delay * 2, 5000)) {
      try {
        await this.rt.store.finish(taskId, this.owner, outcome, message, Date.now());
        this.rt.publish(taskId);
        this.rt.taskFinished(this);
        return;
      } catch (e) {
        if (e instanceof TaskWriteRefused) {
          this.rt.log.debug('outcome not written', { taskId, reason: e.reason });
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
